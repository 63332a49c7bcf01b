# expect: KW003
"""Attention scale computed with math.sqrt of a runtime head size inside the kernel."""

import math

import triton
import triton.language as tl


@triton.jit
def scale_qk_kernel(s_ptr, n, head_dim, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    scale = 1.0 / math.sqrt(head_dim)
    tl.store(s_ptr + offs, tl.load(s_ptr + offs, mask=mask) * scale, mask=mask)


def scale_qk(s, head_dim):
    scale_qk_kernel[(triton.cdiv(s.numel(), 1024),)](s, s.numel(), head_dim, BLOCK=1024)
