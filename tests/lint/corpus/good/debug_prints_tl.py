# expect: none
"""Kernel debugging the right way: tl.device_print, tl.static_print, tl.device_assert."""

import triton
import triton.language as tl


@triton.jit
def checked_copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    tl.static_print("BLOCK =", BLOCK)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(src + offs, mask=mask, other=0.0)
    tl.device_assert(x == x, "NaN in input")
    tl.device_print("x", x)
    tl.store(dst + offs, x, mask=mask)


def checked_copy(src, dst):
    checked_copy_kernel[(triton.cdiv(src.numel(), 128),)](src, dst, src.numel(), BLOCK=128)
