"""Thin ``nn.Module`` s over :func:`~kernelworks.ops.norm.layer_norm` and :func:`~kernelworks.ops.norm.rms_norm`:
they hold the parameters (named ``weight`` and ``bias``, as ``torch.nn.LayerNorm`` and Hugging Face's RMSNorm
name them, so state dicts load unchanged) and call the functional ops.

``forward(x)`` returns ``y``; ``forward(x, residual)`` returns ``(y, x + residual)`` — the pre-norm
transformer pattern in one pass (see the functional ops).
"""

from __future__ import annotations

import torch
from torch import nn

from kernelworks.ops.norm.api import layer_norm, rms_norm


class RMSNorm(nn.Module):
    """RMSNorm over the last dimension: ``y = h / √(mean(h²) + eps) · (offset + weight)``.

    Args:
        hidden: size of the last dimension.
        eps: added to the mean square (default 1e-6).
        offset: 0.0 (Llama, Mistral, Qwen) or 1.0 (Gemma, whose checkpoints store ``weight − 1``); the
            weight starts at ``1 − offset`` so a fresh module scales by exactly 1 either way.
        elementwise_affine: hold a learnable ``weight`` (default True); without one ``offset`` must be 0.
        device, dtype: of the weight (an fp32 weight with bf16 activations is fine).

    Example::

        norm = RMSNorm(4096).cuda()
        y = norm(x)                          # x: [batch, seq, 4096]
        y, residual = norm(attn_out, residual)
    """

    def __init__(self, hidden: int, eps: float = 1e-6, offset: float = 0.0, *, elementwise_affine: bool = True,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if offset != 0.0 and not elementwise_affine:
            raise ValueError(f"offset: scales (offset + weight), so it needs elementwise_affine=True; got "
                             f"offset={offset} with elementwise_affine=False")
        self.hidden_size = hidden
        self.eps = eps
        self.offset = offset
        weight = nn.Parameter(torch.empty(hidden, device=device, dtype=dtype)) if elementwise_affine else None
        self.register_parameter("weight", weight)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.constant_(self.weight, 1.0 - self.offset)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        return rms_norm(x, self.weight, self.eps, residual=residual, offset=self.offset)

    def extra_repr(self) -> str:
        return f"{self.hidden_size}, eps={self.eps}, offset={self.offset}"


class LayerNorm(nn.Module):
    """LayerNorm over the last dimension; arguments in ``torch.nn.LayerNorm``'s order, so it drops in.

    Args:
        hidden: size of the last dimension.
        eps: added to the variance (default 1e-5).
        elementwise_affine: hold a learnable ``weight`` (and ``bias``) at all (default True).
        bias: hold a learnable ``bias`` (default True).
        device, dtype: of the parameters.

    Example::

        norm = LayerNorm(1024).cuda()
        y = norm(x)
        y, residual = norm(x, residual)
    """

    def __init__(self, hidden: int, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True, *,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.hidden_size = hidden
        self.eps = eps
        def param() -> nn.Parameter:
            return nn.Parameter(torch.empty(hidden, device=device, dtype=dtype))

        self.register_parameter("weight", param() if elementwise_affine else None)
        self.register_parameter("bias", param() if elementwise_affine and bias else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        return layer_norm(x, self.weight, self.bias, self.eps, residual=residual)

    def extra_repr(self) -> str:
        return f"{self.hidden_size}, eps={self.eps}, bias={self.bias is not None}"
