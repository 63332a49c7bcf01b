# expect: none
"""Masks built with tl.where and combined with &."""

import triton
import triton.language as tl


@triton.jit
def masked_fill_kernel(x_ptr, keep_ptr, y_ptr, n, fill, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    in_bounds = tl.where(offs < n, 1, 0) != 0
    keep = tl.load(keep_ptr + offs, mask=in_bounds, other=0) != 0
    x = tl.load(x_ptr + offs, mask=in_bounds & keep, other=fill)
    tl.store(y_ptr + offs, x, mask=in_bounds)


def masked_fill(x, keep, y, fill):
    n = x.numel()
    masked_fill_kernel[(triton.cdiv(n, 1024),)](x, keep, y, n, fill, BLOCK=1024)
