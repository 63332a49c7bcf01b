# expect: none
"""Per-row scalars loaded with the program id alone (no block, nothing to mask)."""

import triton
import triton.language as tl


@triton.jit
def add_row_bias_kernel(x_ptr, bias_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    b = tl.load(bias_ptr + row)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    base = row.to(tl.int64) * stride
    x = tl.load(x_ptr + base + cols, mask=mask, other=0.0)
    tl.store(out_ptr + base + cols, x + b, mask=mask)


def add_row_bias(x, bias, out):
    add_row_bias_kernel[(x.shape[0],)](x, bias, out, x.stride(0), x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
