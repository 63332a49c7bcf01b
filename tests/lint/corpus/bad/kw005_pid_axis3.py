# expect: KW005
"""A 4-D layout mapped straight onto four program-id axes."""

import triton
import triton.language as tl


@triton.jit
def add_bias_4d_kernel(x_ptr, b_ptr, s0, s1, s2, D: tl.constexpr):
    i0 = tl.program_id(0).to(tl.int64)
    i1 = tl.program_id(1).to(tl.int64)
    i2 = tl.program_id(2).to(tl.int64)
    i3 = tl.program_id(3)
    offs = tl.arange(0, D)
    p = x_ptr + i0 * s0 + i1 * s1 + i2 * s2 + i3 * D + offs
    tl.store(p, tl.load(p) + tl.load(b_ptr + offs))
