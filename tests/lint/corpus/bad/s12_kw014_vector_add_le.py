# expect: KW014
"""Residual add, written with `<=` in the mask: the last program touches element n_elements."""

import torch
import triton
import triton.language as tl


@triton.jit
def residual_add_kernel(x_ptr, res_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets <= n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    r = tl.load(res_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + r, mask=mask)


def residual_add(x, res):
    out = torch.empty_like(x)
    n = out.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)  # noqa: E731
    residual_add_kernel[grid](x, res, out, n, BLOCK_SIZE=1024)
    return out
