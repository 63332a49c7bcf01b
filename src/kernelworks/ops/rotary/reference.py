"""The rotary embedding in PyTorch eager: the ground truth (run on float64-upcast inputs) and the ``torch``
baseline (run on the native inputs). Same signature as :func:`kernelworks.rotary_embedding`; for NeoX the
math of Hugging Face's ``apply_rotary_pos_emb`` (``q·cos + rotate_half(q)·sin``, partial rotary as in
Qwen3-Next), for GPT-J HF's ``rotate_every_two`` with per-feature tables."""

from __future__ import annotations

import torch


def rotate(x: torch.Tensor, layout: str) -> torch.Tensor:
    """The partner of every feature, signed: NeoX ``cat(−x2, x1)`` over the halves, GPT-J
    ``(−x1, x0, −x3, x2, …)`` over interleaved pairs."""
    if layout == "neox":
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


def rotary_embedding(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *,
                     layout: str = "neox", rotary_dim: int | None = None,
                     heads_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    rot = cos.shape[-1]
    # cos/sin [S, R] or [B, S, R] gain the head axis: [.., 1, S, R] (heads_dim 1) or [.., S, 1, R] (2).
    cos, sin = (t.unsqueeze(-3 if heads_dim == 1 else -2) for t in (cos, sin))

    def apply(x: torch.Tensor) -> torch.Tensor:
        x_rot, x_pass = x[..., :rot], x[..., rot:]
        y = (x_rot * cos + rotate(x_rot, layout) * sin).to(x.dtype)  # fp32 tables promote: back to x's
        return torch.cat((y, x_pass), dim=-1)

    return apply(q), apply(k)
