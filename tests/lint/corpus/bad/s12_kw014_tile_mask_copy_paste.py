# expect: KW014
"""Transpose-copy of an [M, N] matrix in tiles; the column mask was pasted from the row mask."""

import torch
import triton
import triton.language as tl


@triton.jit
def transpose_kernel(src, dst, M, N, stride_sm, stride_sn, stride_dm, stride_dn,
                     TILE_M: tl.constexpr, TILE_N: tl.constexpr):
    rm = tl.program_id(0) * TILE_M + tl.arange(0, TILE_M)
    rn = tl.program_id(1) * TILE_N + tl.arange(0, TILE_N)
    m_mask = rm < M
    n_mask = rn < M
    tile_mask = m_mask[:, None] & n_mask[None, :]
    t = tl.load(src + rm[:, None] * stride_sm + rn[None, :] * stride_sn, mask=tile_mask)
    tl.store(dst + rn[None, :] * stride_dm + rm[:, None] * stride_dn, t, mask=tile_mask)


def transpose(x):
    M, N = x.shape
    y = torch.empty((N, M), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    transpose_kernel[grid](x, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), TILE_M=32, TILE_N=32)
    return y
