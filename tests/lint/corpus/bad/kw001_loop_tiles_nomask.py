# expect: KW001
"""Row sum over tiles of a long row; the tail tile reads past the row."""

import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, stride_row, n_cols, TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = x_ptr + row * stride_row
    acc = tl.zeros([TILE], dtype=tl.float32)
    for start in range(0, n_cols, TILE):
        cols = start + tl.arange(0, TILE)
        acc += tl.load(base + cols).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def row_sum(x, out):
    row_sum_kernel[(x.shape[0],)](x, out, x.stride(0), x.shape[1], TILE=1024)
