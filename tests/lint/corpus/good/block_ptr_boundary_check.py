# expect: none
"""Block pointers with boundary_check: no mask needed."""

import triton
import triton.language as tl


@triton.jit
def copy_tile_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_ym, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    src = tl.make_block_ptr(base=x_ptr, shape=(M, N), strides=(stride_xm, 1),
                            offsets=(pid_m * BLOCK_M, pid_n * BLOCK_N), block_shape=(BLOCK_M, BLOCK_N), order=(1, 0))
    dst = tl.make_block_ptr(base=y_ptr, shape=(M, N), strides=(stride_ym, 1),
                            offsets=(pid_m * BLOCK_M, pid_n * BLOCK_N), block_shape=(BLOCK_M, BLOCK_N), order=(1, 0))
    tile = tl.load(src, boundary_check=(0, 1), padding_option="zero")
    tl.store(dst, tile, boundary_check=(0, 1))


def copy_tile(x, y):
    M, N = x.shape
    copy_tile_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](x, y, M, N, x.stride(0), y.stride(0), BLOCK_M=64,
                                                              BLOCK_N=64)
