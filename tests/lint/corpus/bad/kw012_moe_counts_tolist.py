# expect: KW012
"""MoE expert GEMM launcher that pulls the per-expert token counts to the host to build its tile list."""

import torch
import triton
import triton.language as tl


@triton.jit
def _expert_rows(x_ptr, out_ptr, starts_ptr, H, BLOCK_H: tl.constexpr):
    e = tl.program_id(0)
    row = tl.load(starts_ptr + e).to(tl.int64)
    offs = tl.arange(0, BLOCK_H)
    mask = offs < H
    tl.store(out_ptr + row * H + offs, tl.load(x_ptr + row * H + offs, mask=mask), mask=mask)


def expert_rows(x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    sizes = counts.tolist()
    starts = torch.tensor([sum(sizes[:i]) for i in range(len(sizes))], device=x.device)
    out = torch.empty_like(x)
    _expert_rows[(len(sizes),)](x, out, starts, x.shape[1], BLOCK_H=triton.next_power_of_2(x.shape[1]))
    return out
