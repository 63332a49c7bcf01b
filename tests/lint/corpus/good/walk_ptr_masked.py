# expect: none
"""Column sums with a pointer walking down the rows and a mask that follows the walk."""

import triton
import triton.language as tl


@triton.jit
def col_sum_kernel(x_ptr, out_ptr, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.arange(0, BLOCK_M)
    ptrs = x_ptr + rows[:, None] * stride_m + cols[None, :]
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for m0 in range(0, M, BLOCK_M):
        mask = ((m0 + rows) < M)[:, None] & (cols < N)[None, :]
        acc += tl.sum(tl.load(ptrs, mask=mask, other=0.0).to(tl.float32), axis=0)
        ptrs += BLOCK_M * stride_m
    tl.store(out_ptr + cols, acc, mask=cols < N)


def col_sum(x, out):
    M, N = x.shape
    col_sum_kernel[(triton.cdiv(N, 128),)](x, out, M, N, x.stride(0), BLOCK_M=32, BLOCK_N=128)
