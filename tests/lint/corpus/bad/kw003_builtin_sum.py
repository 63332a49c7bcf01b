# expect: KW003
"""Row mean computed with the builtins sum() and len()."""

import triton
import triton.language as tl


@triton.jit
def row_mean_kernel(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    mean = sum(x) / n_cols
    tl.store(out_ptr + row, mean)


def row_mean(x, out):
    row_mean_kernel[(x.shape[0],)](x, out, x.stride(0), x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
