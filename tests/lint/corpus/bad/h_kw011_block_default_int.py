# expect: KW011
"""Block size given a default value but no constexpr annotation."""

import triton
import triton.language as tl


@triton.jit
def zero_kernel(x_ptr, n, BLOCK_SIZE=1024):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(x_ptr + offs, 0.0, mask=offs < n)


def zero_(x):
    zero_kernel[(triton.cdiv(x.numel(), 1024),)](x, x.numel())
