# expect: KW011
"""Block size passed as a plain int parameter."""

import triton
import triton.language as tl


@triton.jit
def fill_kernel(out_ptr, value, n, BLOCK):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, value, mask=offs < n)


def fill(out, value):
    fill_kernel[(triton.cdiv(out.numel(), 1024),)](out, value, out.numel(), 1024)
