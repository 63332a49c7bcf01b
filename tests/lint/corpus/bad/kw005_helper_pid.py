# expect: KW005
"""The program-id decode lives in a helper; the launch forgot the second axis it reads."""

import triton
import triton.language as tl


@triton.jit
def _tile_coords(BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    return rows, cols


@triton.jit
def fill_kernel(y_ptr, n_rows, n_cols, stride, value, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    rows, cols = _tile_coords(BLOCK_R, BLOCK_C)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    tl.store(y_ptr + rows[:, None].to(tl.int64) * stride + cols[None, :], value, mask=mask)


def fill(y, value):
    n_rows, n_cols = y.shape
    fill_kernel[(triton.cdiv(n_rows, 16),)](y, n_rows, n_cols, y.stride(0), value, BLOCK_R=16, BLOCK_C=256)
