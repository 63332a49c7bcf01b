# expect: KW001
"""2-D copy whose mask covers the rows but not the columns."""

import triton
import triton.language as tl


@triton.jit
def copy_2d_kernel(src, dst, M, N, stride_sm, stride_dm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = rm[:, None] < M
    x = tl.load(src + rm[:, None].to(tl.int64) * stride_sm + rn[None, :], mask=mask)
    tl.store(dst + rm[:, None].to(tl.int64) * stride_dm + rn[None, :], x, mask=mask)


def copy_2d(src, dst):
    M, N = src.shape
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
    copy_2d_kernel[grid](src, dst, M, N, src.stride(0), dst.stride(0), BLOCK_M=64, BLOCK_N=64)
