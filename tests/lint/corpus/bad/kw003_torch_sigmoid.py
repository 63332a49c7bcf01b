# expect: KW003
"""SwiGLU that reaches for torch.sigmoid inside the kernel."""

import torch
import triton
import triton.language as tl


@triton.jit
def swiglu_kernel(g_ptr, u_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = g * torch.sigmoid(g) * u
    tl.store(y_ptr + offs, y, mask=mask)


def swiglu(g, u):
    y = torch.empty_like(g)
    swiglu_kernel[(triton.cdiv(g.numel(), 1024),)](g, u, y, g.numel(), BLOCK=1024)
    return y
