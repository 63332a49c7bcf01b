# expect: none
"""Dev: `<=` against an inclusive last index, and a strict bound against the size."""

import triton
import triton.language as tl


@triton.jit
def prefix_fill_kernel(x_ptr, last_idx, n, value, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = (offs <= last_idx) & (offs < n)
    tl.store(x_ptr + offs, value, mask=inside)


def prefix_fill(x, last, value):
    prefix_fill_kernel[(triton.cdiv(x.numel(), 512),)](x, last, x.numel(), value, BLOCK=512)
