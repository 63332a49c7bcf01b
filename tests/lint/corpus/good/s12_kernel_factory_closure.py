# expect: none
"""Kernels built by a factory (one per activation), with a nested @triton.jit helper defined in the same
closure and a constexpr-only use of the builtin max for the warp count."""

import torch
import triton
import triton.language as tl


def make_act_kernel(kind: str):
    @triton.jit
    def _act(x, KIND: tl.constexpr):
        if KIND == "silu":
            return x * tl.sigmoid(x)
        return tl.maximum(x, 0.0)

    @triton.jit
    def _act_kernel(x_ptr, y_ptr, n, KIND: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + offs, _act(x, KIND).to(y_ptr.dtype.element_ty), mask=mask)

    def run(x):
        y = torch.empty_like(x)
        n = x.numel()
        block = 1024
        _act_kernel[(triton.cdiv(n, block),)](x, y, n, KIND=kind, BLOCK=block, num_warps=max(block // 256, 1))
        return y

    return run
