# expect: KW003
"""Sigmoid written with math.exp, as one would in plain Python."""

import math

import triton
import triton.language as tl


@triton.jit
def sigmoid_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = 1.0 / (1.0 + math.exp(-x))
    tl.store(y_ptr + offs, y, mask=mask)


def sigmoid(x, y):
    sigmoid_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
