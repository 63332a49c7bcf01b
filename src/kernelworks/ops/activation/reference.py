"""The activations in PyTorch eager: the ground truth (run on float64-upcast inputs) and the ``torch``
baseline (run on the native inputs). Same signatures as the public functions."""

from __future__ import annotations

import torch
from torch.nn import functional


def _split(gate: torch.Tensor, up: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(gate, up)``, splitting a packed ``[..., 2H]`` gate when ``up`` is None."""
    if up is None:
        gate, up = gate.chunk(2, dim=-1)
    return gate, up


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return functional.gelu(x, approximate=approximate)


def silu(x: torch.Tensor) -> torch.Tensor:
    return functional.silu(x)


def swiglu(gate: torch.Tensor, up: torch.Tensor | None = None) -> torch.Tensor:
    gate, up = _split(gate, up)
    return functional.silu(gate) * up


def geglu(gate: torch.Tensor, up: torch.Tensor | None = None, approximate: str = "tanh") -> torch.Tensor:
    gate, up = _split(gate, up)
    return functional.gelu(gate, approximate=approximate) * up


def gated_mlp(x: torch.Tensor, gate_weight: torch.Tensor, up_weight: torch.Tensor, down_weight: torch.Tensor, *,
              activation: str = "swiglu", approximate: str = "tanh") -> torch.Tensor:
    gate, up = functional.linear(x, gate_weight), functional.linear(x, up_weight)
    h = swiglu(gate, up) if activation == "swiglu" else geglu(gate, up, approximate=approximate)
    return functional.linear(h, down_weight)
