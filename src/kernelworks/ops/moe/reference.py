"""The MoE row moves in PyTorch eager: the ground truth (run on float64-upcast inputs) and the ``torch``
baseline (run on the native inputs). Same signatures as :func:`kernelworks.moe_permute` and
:func:`kernelworks.moe_unpermute`; the combine is Hugging Face's (``y · w`` back in token order, summed over
the top-k), with the product taken in the wider of the two dtypes."""

from __future__ import annotations

import torch


def moe_permute(hidden: torch.Tensor, order: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
    return hidden[order // (order.shape[0] // hidden.shape[0])]


def moe_unpermute(y: torch.Tensor, weights: torch.Tensor, order: torch.Tensor,
                  inverse: torch.Tensor) -> torch.Tensor:
    tokens, top_k = weights.shape
    dtype = torch.promote_types(y.dtype, weights.dtype)
    pairs = y[inverse].view(tokens, top_k, -1).to(dtype) * weights[..., None].to(dtype)
    return pairs.sum(dim=1).to(y.dtype)
