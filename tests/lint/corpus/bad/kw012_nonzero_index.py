# expect: KW012
"""Gather of the non-padding tokens: nonzero() sizes its output on the host before the launch."""

import torch
import triton
import triton.language as tl


@triton.jit
def _gather_rows(x_ptr, idx_ptr, out_ptr, H, BLOCK_H: tl.constexpr):
    i = tl.program_id(0)
    src = tl.load(idx_ptr + i).to(tl.int64)
    offs = tl.arange(0, BLOCK_H)
    mask = offs < H
    tl.store(out_ptr + i.to(tl.int64) * H + offs, tl.load(x_ptr + src * H + offs, mask=mask), mask=mask)


def unpad(x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    idx = attention_mask.reshape(-1).nonzero().reshape(-1)
    out = x.new_empty(idx.numel(), x.shape[-1])
    _gather_rows[(idx.numel(),)](x, idx, out, x.shape[-1], BLOCK_H=triton.next_power_of_2(x.shape[-1]))
    return out
