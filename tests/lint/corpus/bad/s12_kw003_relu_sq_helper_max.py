# expect: KW003
"""Squared-ReLU MLP activation (Primer) with the activation in a helper that uses the builtin max on a block."""

import torch
import triton
import triton.language as tl


@triton.jit
def _relu_sq(x):
    r = max(x, 0.0)
    return r * r


@triton.jit
def _relu_sq_fwd_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, _relu_sq(x).to(y_ptr.dtype.element_ty), mask=mask)


def relu_sq(x):
    y = torch.empty_like(x)
    n = x.numel()
    _relu_sq_fwd_kernel[(triton.cdiv(n, 2048),)](x, y, n, BLOCK=2048)
    return y
