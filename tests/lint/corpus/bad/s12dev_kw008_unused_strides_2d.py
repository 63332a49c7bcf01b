# expect: KW008
"""Dev: a 2-D tiled kernel that receives stride_m but indexes with N."""

import triton
import triton.language as tl


@triton.jit
def sq_kernel(x_ptr, y_ptr, M, N, stride_m, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * N + rn[None, :]
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * x, mask=mask)


def sq(x, y):
    M, N = x.shape
    sq_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 64))](x, y, M, N, x.stride(0), BM=32, BN=64)
