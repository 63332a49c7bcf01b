# expect: KW012
"""Varlen softmax whose wrapper reads the longest row back to size the block."""

import torch
import triton
import triton.language as tl


@triton.jit
def _varlen_softmax(x_ptr, y_ptr, lengths_ptr, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    n = tl.load(lengths_ptr + row)
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + row.to(tl.int64) * stride + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row.to(tl.int64) * stride + offs, e / tl.sum(e, axis=0), mask=mask)


def varlen_softmax(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    longest = int(lengths.max().item())
    _varlen_softmax[(x.shape[0],)](x, y, lengths, x.stride(0), BLOCK=triton.next_power_of_2(longest))
    return y
