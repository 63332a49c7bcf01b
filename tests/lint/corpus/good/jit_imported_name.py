# expect: none
"""Decorated with `from triton import jit` and `jit(do_not_specialize=...)`."""

import triton
import triton.language as tl
from triton import jit


@jit
def square_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * x, mask=mask)


@triton.jit(do_not_specialize=["n"])
def cube_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * x * x, mask=mask)


def square(x, y):
    square_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)


def cube(x, y):
    cube_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
