# expect: KW012
"""A fused loss whose wrapper synchronises to "make sure" the kernel finished before returning."""

import torch
import triton
import triton.language as tl


@triton.jit
def _sq_err(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    d = tl.load(x_ptr + offs, mask=mask, other=0.0) - tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(d * d, axis=0))


def squared_error(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.zeros((), device=x.device, dtype=torch.float32)
    n = x.numel()
    _sq_err[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    torch.cuda.synchronize()
    return out
