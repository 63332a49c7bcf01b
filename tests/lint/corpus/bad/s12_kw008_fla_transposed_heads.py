# expect: KW008
"""fla-style [B, H, T, K] kernel fed q.transpose(1, 2) of a [B, T, H, K] tensor: the kernel assumes
contiguous [T, K] slabs per (batch, head) and takes no strides."""

import torch
import triton
import triton.language as tl


@triton.jit
def l2norm_fwd_kernel(x, y, T, K: tl.constexpr, BT: tl.constexpr, eps: tl.constexpr):
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    o_t = i_t * BT + tl.arange(0, BT)
    o_k = tl.arange(0, K)
    m_t = o_t < T
    p = i_bh.to(tl.int64) * T * K + o_t[:, None] * K + o_k[None, :]
    b_x = tl.load(x + p, mask=m_t[:, None], other=0.0).to(tl.float32)
    b_r = tl.sqrt(tl.sum(b_x * b_x, axis=1) + eps)
    tl.store(y + p, (b_x / b_r[:, None]).to(y.dtype.element_ty), mask=m_t[:, None])


def l2norm_heads(q):
    B, T, H, K = q.shape
    x = q.transpose(1, 2)
    y = torch.empty(B, H, T, K, device=q.device, dtype=q.dtype)
    l2norm_fwd_kernel[(triton.cdiv(T, 64), B * H)](x, y, T, K=K, BT=64, eps=1e-6)
    return y.transpose(1, 2)
