# expect: KW003
"""Cast to a torch dtype inside the kernel instead of a Triton one."""

import torch
import triton
import triton.language as tl


@triton.jit
def to_half_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x.to(torch.float16), mask=mask)


def to_half(x):
    y = torch.empty_like(x, dtype=torch.float16)
    to_half_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y
