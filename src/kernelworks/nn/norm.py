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
from kernelworks.runtime.validate import FLOAT_DTYPES, check_real


def _hidden_size(hidden: object) -> int:
    """A positive int; a one-element tuple/list (``torch.nn.LayerNorm``'s ``normalized_shape``) is accepted."""
    if isinstance(hidden, (tuple, list, torch.Size)):
        if len(hidden) != 1:
            raise ValueError(f"hidden: only the last dimension is normalised, so expected one size, got "
                             f"{tuple(hidden)}")
        hidden = hidden[0]
    if isinstance(hidden, bool) or not isinstance(hidden, int):
        raise TypeError(f"hidden: expected a positive int (the size of the last dimension), got "
                        f"{type(hidden).__name__} {hidden!r}")
    if hidden < 1:
        raise ValueError(f"hidden: expected a positive int (the size of the last dimension), got {hidden}")
    return hidden


def _check_flag(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__} {value!r}")


def _check_dtype(dtype: object) -> None:
    """The parameters' dtype: None (torch's default) or one the kernels take."""
    if dtype is not None and dtype not in FLOAT_DTYPES:
        names = ", ".join(str(d) for d in FLOAT_DTYPES)
        raise TypeError(f"dtype: expected None or one of {names} (the parameters' dtype), got {dtype!r}")


class RMSNorm(nn.Module):
    """RMSNorm over the last dimension: ``y = h / √(mean(h²) + eps) · (offset + weight)``.

    Args:
        hidden: size of the last dimension, a positive int.
        eps: added to the mean square (default 1e-6), a float ≥ 0.
        offset: 0.0 (Llama, Mistral, Qwen) or 1.0 (Gemma, whose checkpoints store ``weight − 1``); the
            weight starts at ``1 − offset`` so a fresh module scales by exactly 1 either way.
        elementwise_affine: hold a learnable ``weight`` (default True); without one ``offset`` must be 0.
        device, dtype: of the weight (float32, float16 or bfloat16; an fp32 weight with bf16 activations is
            fine).

    Example::

        norm = RMSNorm(4096).cuda()
        y = norm(x)                          # x: [batch, seq, 4096]
        y, residual = norm(attn_out, residual)
    """

    def __init__(self, hidden: int, eps: float = 1e-6, offset: float = 0.0, *, elementwise_affine: bool = True,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        hidden = _hidden_size(hidden)
        eps = check_real("eps", eps, low=0.0)
        offset = check_real("offset", offset)
        _check_flag("elementwise_affine", elementwise_affine)
        _check_dtype(dtype)
        if offset != 0.0 and not elementwise_affine:
            raise ValueError(f"offset: scales (offset + weight), so it needs elementwise_affine=True; got "
                             f"offset={offset} with elementwise_affine=False")
        self.hidden_size = hidden
        self.normalized_shape = (hidden,)  # torch.nn.LayerNorm / RMSNorm's attributes, for code that reads them
        self.elementwise_affine = elementwise_affine
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
        return (f"{self.hidden_size}, eps={self.eps}, offset={self.offset}, "
                f"elementwise_affine={self.weight is not None}")


class LayerNorm(nn.Module):
    """LayerNorm over the last dimension; arguments in ``torch.nn.LayerNorm``'s order, so it drops in.

    Args:
        hidden: size of the last dimension, a positive int (or ``(hidden,)``, as ``normalized_shape``).
        eps: added to the variance (default 1e-5), a float ≥ 0.
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
        hidden = _hidden_size(hidden)
        eps = check_real("eps", eps, low=0.0)
        _check_flag("elementwise_affine", elementwise_affine)
        _check_flag("bias", bias)
        _check_dtype(dtype)
        self.hidden_size = hidden
        self.normalized_shape = (hidden,)  # torch.nn.LayerNorm / RMSNorm's attributes, for code that reads them
        self.elementwise_affine = elementwise_affine
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
        return (f"{self.hidden_size}, eps={self.eps}, elementwise_affine={self.weight is not None}, "
                f"bias={self.bias is not None}")
