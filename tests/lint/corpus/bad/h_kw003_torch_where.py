# expect: KW003
"""Masked fill written with torch.where inside the kernel."""

import torch
import triton
import triton.language as tl


@triton.jit
def masked_fill_kernel(x_ptr, m_ptr, n, value, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    m = tl.load(m_ptr + offs, mask=mask, other=0)
    tl.store(x_ptr + offs, torch.where(m != 0, value, x), mask=mask)


def masked_fill_(x, m, value):
    masked_fill_kernel[(triton.cdiv(x.numel(), 1024),)](x, m, x.numel(), value, BLOCK=1024)
