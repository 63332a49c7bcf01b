# expect: none
"""pid * BLOCK with a constexpr block: an int32 product by design, not flagged."""

import triton
import triton.language as tl


@triton.jit
def fill_arange_kernel(out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, offs.to(tl.float32), mask=offs < n)


def fill_arange(out):
    fill_arange_kernel[(triton.cdiv(out.numel(), 1024),)](out, out.numel(), BLOCK=1024)
