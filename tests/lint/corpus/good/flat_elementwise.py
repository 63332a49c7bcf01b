# expect: none
"""Flat elementwise kernel over a contiguous buffer: no rows, so no stride is needed."""

import triton
import triton.language as tl


@triton.jit
def clamp_kernel(x_ptr, y_ptr, n_elements, lo, hi, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.minimum(tl.maximum(x, lo), hi), mask=mask)


def clamp(x, y, lo, hi):
    n = x.numel()
    clamp_kernel[(triton.cdiv(n, 4096),)](x.contiguous(), y, n, lo, hi, BLOCK=4096)
