# expect: KW007
"""Pointers advanced to the program's row in place, in int32."""

import triton
import triton.language as tl


@triton.jit
def _dropout_kernel(X, Y, stride_x, stride_y, n_cols, p, seed, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    X += row * stride_x
    Y += row * stride_y
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + cols, mask=mask, other=0.0)
    keep = tl.rand(seed, row * n_cols + cols) > p
    tl.store(Y + cols, tl.where(keep, x / (1 - p), 0.0), mask=mask)


def dropout(x, y, p, seed):
    _dropout_kernel[(x.shape[0],)](x, y, x.stride(0), y.stride(0), x.shape[1], p, seed,
                                   BLOCK=triton.next_power_of_2(x.shape[1]))
