# expect: none
"""Persistent GEMM whose tile base offsets are computed in int64 (the tile counter is cast before it is
multiplied by a stride)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _persistent_gemm_i64_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bn, stride_cm,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                NUM_SMS: tl.constexpr):
    start = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    num_tiles = tl.cdiv(M, BLOCK_M) * tiles_n
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    for tile in range(start, num_tiles, NUM_SMS):
        # int64: tile_m * BLOCK_M * stride_am passes 2^31 for a 64k x 32k activation
        tile_m = (tile // tiles_n).to(tl.int64)
        tile_n = (tile % tiles_n).to(tl.int64)
        m_ok = tile_m * BLOCK_M + rm < M
        n_ok = tile_n * BLOCK_N + rn < N
        a_tile = a_ptr + tile_m * BLOCK_M * stride_am
        b_tile = b_ptr + tile_n * BLOCK_N * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k_ok = k0 + rk < K
            a = tl.load(a_tile + rm[:, None] * stride_am + (k0 + rk)[None, :], mask=m_ok[:, None] & k_ok[None, :],
                        other=0.0)
            b = tl.load(b_tile + rn[None, :] * stride_bn + (k0 + rk)[:, None], mask=k_ok[:, None] & n_ok[None, :],
                        other=0.0)
            acc = tl.dot(a, b, acc)
        c_tile = c_ptr + tile_m * BLOCK_M * stride_cm + tile_n * BLOCK_N
        tl.store(c_tile + rm[:, None] * stride_cm + rn[None, :], acc.to(c_ptr.dtype.element_ty),
                 mask=m_ok[:, None] & n_ok[None, :])


def persistent_gemm(a, b_t, num_sms=132):
    M, K = a.shape
    N = b_t.shape[0]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    _persistent_gemm_i64_kernel[(num_sms,)](a, b_t, c, M, N, K, a.stride(0), b_t.stride(0), c.stride(0),
                                            BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, NUM_SMS=num_sms)
    return c
