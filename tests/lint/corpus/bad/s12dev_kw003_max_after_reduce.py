# expect: KW003
"""Dev: builtin max on a block of row maxima (a reduction along one axis of a 2-D tile)."""

import triton
import triton.language as tl


@triton.jit
def row_max_kernel(x_ptr, out_ptr, n_rows, n_cols, stride, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride + cols[None, :], mask=mask, other=0.0)
    m = max(tl.max(x, axis=1), 0.0)
    tl.store(out_ptr + rows, m, mask=rows < n_rows)


def row_max(x):
    out = x.new_empty(x.shape[0])
    row_max_kernel[(triton.cdiv(x.shape[0], 8),)](x, out, x.shape[0], x.shape[1], x.stride(0), ROWS=8,
                                                  BLOCK=triton.next_power_of_2(x.shape[1]))
    return out
