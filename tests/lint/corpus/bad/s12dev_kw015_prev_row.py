# expect: KW015
"""Dev: difference with the previous element, lower side unmasked."""

import triton
import triton.language as tl


@triton.jit
def backward_diff_kernel(x, y, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    prev = tl.load(x + o - 1, mask=m, other=0.0)
    tl.store(y + o, tl.load(x + o, mask=m) - prev, mask=m)


def backward_diff(x, y):
    backward_diff_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
