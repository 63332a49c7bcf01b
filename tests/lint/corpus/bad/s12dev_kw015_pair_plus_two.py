# expect: KW015
"""Dev: reads the element two ahead (a stride-2 stencil) with the unshifted mask."""

import triton
import triton.language as tl


@triton.jit
def skip2_kernel(x, y, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n - 1
    a = tl.load(x + o, mask=m)
    b = tl.load(x + (o + 2), mask=m)
    tl.store(y + o, a + b, mask=m)


def skip2(x, y):
    skip2_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
