# expect: none
"""tl.math, triton.language and libdevice spellings of the math functions."""

import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def mish_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    sp = tl.maximum(x, 0.0) + libdevice.log1p(tl.math.exp(-tl.abs(x)))
    y = x * libdevice.tanh(sp)
    y = triton.language.where(mask, y, 0.0)
    tl.store(y_ptr + offs, y, mask=mask)


def mish(x, y):
    mish_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
