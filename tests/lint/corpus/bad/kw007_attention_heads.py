# expect: KW007
"""Per-(batch, head) base pointers computed from int32 program ids."""

import triton
import triton.language as tl


@triton.jit
def qk_norm_kernel(q_ptr, w_ptr, stride_qb, stride_qh, stride_qt, seq_len, eps,
                   HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr):
    off_b = tl.program_id(0)
    off_h = tl.program_id(1)
    pid_t = tl.program_id(2)
    base = q_ptr + off_b * stride_qb + off_h * stride_qh
    t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    d = tl.arange(0, HEAD_DIM)
    mask = t[:, None] < seq_len
    ptrs = base + t[:, None].to(tl.int64) * stride_qt + d[None, :]
    q = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + d).to(tl.float32)
    q = q * tl.rsqrt(tl.sum(q * q, axis=1) / HEAD_DIM + eps)[:, None] * w[None, :]
    tl.store(ptrs, q, mask=mask)


def qk_norm(q, w, eps=1e-6):
    B, H, T, D = q.shape
    grid = (B, H, triton.cdiv(T, 64))
    qk_norm_kernel[grid](q, w, q.stride(0), q.stride(1), q.stride(2), T, eps, HEAD_DIM=D, BLOCK_T=64)
