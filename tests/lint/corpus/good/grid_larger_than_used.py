# expect: none
"""A (n, 1, 1) grid for a kernel that reads only axis 0: extra axes of size 1 are harmless."""

import triton
import triton.language as tl


@triton.jit
def neg_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, -tl.load(x_ptr + offs, mask=mask), mask=mask)


def neg_(x):
    n = x.numel()
    neg_kernel[(triton.cdiv(n, 512), 1, 1)](x, n, BLOCK=512)
