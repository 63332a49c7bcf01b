"""Reshaping helpers that keep strides instead of copying."""

from __future__ import annotations

import torch


def as_rows(x: torch.Tensor) -> torch.Tensor:
    """View ``x [..., n]`` as ``[rows, n]`` with unit stride along ``n``, keeping its row stride.

    Row kernels take the row stride as an argument, so a slice such as ``fused[..., :n]`` of a wider
    projection runs without a copy. Only when the last dimension is itself strided, or the leading
    dimensions cannot merge into one stride, is a contiguous copy made (on purpose: the kernels read
    rows as unit-stride vectors for 16-byte accesses).
    """
    n = x.shape[-1]
    if x.dim() == 2 and (x.stride(1) == 1 or n == 1):
        return x  # already rows: skip the view (host time counts on small calls)
    if x.stride(-1) != 1 and n > 1:
        x = x.contiguous()
    try:
        return x.view(-1, n)
    except RuntimeError:
        return x.contiguous().view(-1, n)
