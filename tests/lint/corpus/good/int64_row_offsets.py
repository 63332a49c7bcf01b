# expect: none
"""Row offsets cast to int64 before multiplying by the stride, in both spellings."""

import triton
import triton.language as tl


@triton.jit
def scale_rows_kernel(x_ptr, s_ptr, y_ptr, stride_x, stride_y, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    row64 = row.to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    s = tl.load(s_ptr + row)
    x = tl.load(x_ptr + row64 * stride_x + cols, mask=mask, other=0.0)
    tl.store(y_ptr + tl.cast(row, tl.int64) * stride_y + cols, x * s, mask=mask)


def scale_rows(x, s, y):
    scale_rows_kernel[(x.shape[0],)](x, s, y, x.stride(0), y.stride(0), x.shape[1],
                                     BLOCK=triton.next_power_of_2(x.shape[1]))
