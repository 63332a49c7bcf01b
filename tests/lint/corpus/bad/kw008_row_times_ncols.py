# expect: KW008
"""Row-wise scale that indexes rows by n_cols, so a sliced input reads the wrong rows."""

import triton
import triton.language as tl


@triton.jit
def row_scale_kernel(x_ptr, scale_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    scale = tl.load(scale_ptr + row)
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * n_cols + cols, x * scale, mask=mask)


def row_scale(x, s, y):
    row_scale_kernel[(x.shape[0],)](x, s, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
