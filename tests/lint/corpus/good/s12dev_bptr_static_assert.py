# expect: none
"""Dev: block pointers over constexpr dims the kernel asserts divisible; a whole-dimension block."""

import triton
import triton.language as tl


@triton.jit
def tile_copy_kernel(x, y, M: tl.constexpr, N: tl.constexpr, BM: tl.constexpr):
    tl.static_assert(M % BM == 0)
    i = tl.program_id(0)
    px = tl.make_block_ptr(x, (M, N), (N, 1), (i * BM, 0), (BM, N), (1, 0))
    py = tl.make_block_ptr(y, (M, N), (N, 1), (i * BM, 0), (BM, N), (1, 0))
    tl.store(py, tl.load(px))


def tile_copy(x, y):
    tile_copy_kernel[(x.shape[0] // 64,)](x.contiguous(), y, M=x.shape[0], N=x.shape[1], BM=64)
