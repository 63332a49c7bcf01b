# expect: none
"""Offsets clamped with tl.where before an unmasked gather, and hints through tl.multiple_of."""

import triton
import triton.language as tl


@triton.jit
def shift_kernel(x_ptr, y_ptr, n, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)
    src = offs - shift
    src = tl.where((src >= 0) & (src < n), src, 0)
    x = tl.load(x_ptr + src)
    tl.store(y_ptr + offs, x, mask=offs < n)


def shift(x, y, s):
    n = x.numel()
    shift_kernel[(triton.cdiv(n, 1024),)](x, y, n, s, BLOCK=1024)
