# expect: KW005
"""Attention-style kernel over (query block, head, batch) launched with a (batch*heads, blocks) grid."""

import triton
import triton.language as tl


@triton.jit
def scale_scores_kernel(s_ptr, stride_b, stride_h, stride_m, seq_len, scale,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    off_h = tl.program_id(1).to(tl.int64)
    off_b = tl.program_id(2).to(tl.int64)
    rm = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    base = s_ptr + off_b * stride_b + off_h * stride_h
    for n0 in range(0, seq_len, BLOCK_N):
        rn = n0 + tl.arange(0, BLOCK_N)
        mask = (rm[:, None] < seq_len) & (rn[None, :] < seq_len)
        p = base + rm[:, None] * stride_m + rn[None, :]
        tl.store(p, tl.load(p, mask=mask, other=0.0) * scale, mask=mask)


def scale_scores(s, scale):
    B, H, L, _ = s.shape
    grid = (triton.cdiv(L, 64), B * H)
    scale_scores_kernel[grid](s, s.stride(0), s.stride(1), s.stride(2), L, scale, BLOCK_M=64, BLOCK_N=64)
