# expect: KW001
"""Column sums of a [M, N] matrix: the pointer walks down the rows with no bound on the last block."""

import triton
import triton.language as tl


@triton.jit
def col_sum_kernel(x_ptr, out_ptr, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.arange(0, BLOCK_M)
    ptrs = x_ptr + rows[:, None] * stride_m + cols[None, :]
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for _ in range(0, tl.cdiv(M, BLOCK_M)):
        x = tl.load(ptrs, mask=cols[None, :] < N, other=0.0)
        acc += tl.sum(x, axis=0)
        ptrs += BLOCK_M * stride_m
    tl.store(out_ptr + cols, acc, mask=cols < N)


def col_sum(x, out):
    M, N = x.shape
    col_sum_kernel[(triton.cdiv(N, 128),)](x, out, M, N, x.stride(0), BLOCK_M=32, BLOCK_N=128)
