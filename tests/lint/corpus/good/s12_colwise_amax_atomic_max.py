# expect: none
"""Column-wise absmax for fp8 scaling: row blocks reduce their tile and merge with a masked atomic_max."""

import torch
import triton
import triton.language as tl


@triton.jit
def _col_amax_kernel(x_ptr, amax_ptr, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None].to(tl.int64) * stride_m + rn[None, :], mask=mask, other=0.0)
    col_max = tl.max(tl.abs(x.to(tl.float32)), axis=0)
    tl.atomic_max(amax_ptr + rn, col_max, mask=rn < N)


def col_amax(x):
    M, N = x.shape
    amax = torch.zeros(N, device=x.device, dtype=torch.float32)
    _col_amax_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 128))](x, amax, M, N, x.stride(0), BLOCK_M=64,
                                                                BLOCK_N=128)
    return amax
