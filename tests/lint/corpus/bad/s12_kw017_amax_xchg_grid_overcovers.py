# expect: KW017
"""Per-block absmax for fp8 scaling written with an atomic exchange into a table of one slot per block;
the grid is rounded up to a multiple of 8 programs, past the table's n_blocks entries, and the
exchange is not guarded."""

import torch
import triton
import triton.language as tl


@triton.jit
def block_amax_kernel(x_ptr, amax_ptr, n_elements, n_blocks, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n_elements, other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), axis=0)
    tl.atomic_xchg(amax_ptr + pid, amax)


def block_amax(x, block=1024):
    n = x.numel()
    n_blocks = triton.cdiv(n, block)
    amax = torch.zeros(n_blocks, device=x.device, dtype=torch.float32)
    grid = (triton.cdiv(n_blocks, 8) * 8,)
    block_amax_kernel[grid](x, amax, n, n_blocks, BLOCK=block)
    return amax
