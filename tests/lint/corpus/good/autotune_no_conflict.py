# expect: none
"""Autotuned kernel launched without the tuned parameters; key arguments and num_warps are fine."""

import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE": 512}, num_warps=4, num_stages=2),
        triton.Config({"BLOCK_SIZE": 1024}, num_warps=8, num_stages=3),
    ],
    key=["n_elements"],
)
@triton.jit
def exp_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    tl.store(y_ptr + offs, tl.exp(tl.load(x_ptr + offs, mask=mask, other=0.0)), mask=mask)


def exp(x):
    y = torch.empty_like(x)
    n_elements = x.numel()
    exp_kernel[lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)](x, y, n_elements)
    return y
