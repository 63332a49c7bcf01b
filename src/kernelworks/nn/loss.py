"""Thin ``nn.Module`` s over :func:`~kernelworks.ops.cross_entropy.cross_entropy` and
:func:`~kernelworks.ops.cross_entropy.fused_linear_cross_entropy`. They hold the options (validated at
construction) and no parameters: the fused loss takes the LM head's weight at call time, so a model keeps its
``lm_head`` and state dicts are unchanged.
"""

from __future__ import annotations

import torch
from torch import nn

from kernelworks.ops.cross_entropy.api import check_bool, check_options, cross_entropy, loss_dtype_option
from kernelworks.ops.cross_entropy.fused_linear import (
    accum_dtype_option,
    check_chunk_size,
    fused_linear_cross_entropy,
)


def _options_repr(module: nn.Module) -> str:
    parts = [f"ignore_index={module.ignore_index}", f"reduction={module.reduction!r}"]
    if module.loss_dtype is not None:
        parts.append(f"loss_dtype={module.loss_dtype}")
    if module.label_smoothing:
        parts.append(f"label_smoothing={module.label_smoothing}")
    if module.z_loss:
        parts.append(f"z_loss={module.z_loss}")
    if module.softcap is not None:
        parts.append(f"softcap={module.softcap}")
    return ", ".join(parts)


class CrossEntropyLoss(nn.Module):
    """Cross-entropy over class indices, as ``torch.nn.CrossEntropyLoss`` (same option names), plus z-loss
    and soft-capping; ``forward(logits [..., V], target [...])``. See :func:`cross_entropy` for the options
    (a mean over an all-ignored batch is 0.0, not NaN; the loss is float32 unless ``loss_dtype`` says
    otherwise, e.g. ``loss_dtype=torch.bfloat16``).

    Example::

        loss_fn = CrossEntropyLoss(ignore_index=-100, label_smoothing=0.1)
        loss = loss_fn(logits.view(-1, vocab), labels.view(-1))
    """

    def __init__(self, *, ignore_index: int = -100, label_smoothing: float = 0.0, reduction: str = "mean",
                 z_loss: float = 0.0, softcap: float | None = None, inplace_backward: bool = False,
                 loss_dtype: torch.dtype | None = None) -> None:
        super().__init__()
        check_options(ignore_index, label_smoothing, reduction, z_loss, softcap)
        check_bool("inplace_backward", inplace_backward)
        self.loss_dtype = None if loss_dtype is None else loss_dtype_option(loss_dtype)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing
        self.reduction = reduction
        self.z_loss = z_loss
        self.softcap = softcap
        self.inplace_backward = inplace_backward

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return cross_entropy(logits, target, ignore_index=self.ignore_index, label_smoothing=self.label_smoothing,
                             reduction=self.reduction, z_loss=self.z_loss, softcap=self.softcap,
                             inplace_backward=self.inplace_backward, loss_dtype=self.loss_dtype)

    def extra_repr(self) -> str:
        return _options_repr(self) + (", inplace_backward=True" if self.inplace_backward else "")


class FusedLinearCrossEntropyLoss(nn.Module):
    """The LM head and its cross-entropy in one chunked op: ``forward(hidden [..., H], weight [V, H],
    target [...], bias=None)`` equals ``CrossEntropyLoss(...)(hidden @ weight.T + bias, target)`` without
    the ``[N, V]`` logits. See :func:`fused_linear_cross_entropy` for the options and the memory rule
    (``accum_dtype`` must be float32 or the weight's dtype; the loss is float32 unless ``loss_dtype``).

    Example::

        loss_fn = FusedLinearCrossEntropyLoss(ignore_index=-100)
        loss = loss_fn(hidden_states.view(-1, 4096), model.lm_head.weight, labels.view(-1))
    """

    def __init__(self, *, ignore_index: int = -100, label_smoothing: float = 0.0, reduction: str = "mean",
                 z_loss: float = 0.0, softcap: float | None = None, chunk_size: int | None = None,
                 accum_dtype: torch.dtype = torch.float32, loss_dtype: torch.dtype | None = None) -> None:
        super().__init__()
        check_options(ignore_index, label_smoothing, reduction, z_loss, softcap)
        check_chunk_size(chunk_size)
        accum_dtype = accum_dtype_option(accum_dtype)  # against the weight's dtype at call time
        self.loss_dtype = None if loss_dtype is None else loss_dtype_option(loss_dtype)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing
        self.reduction = reduction
        self.z_loss = z_loss
        self.softcap = softcap
        self.chunk_size = chunk_size
        self.accum_dtype = accum_dtype

    def forward(self, hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        return fused_linear_cross_entropy(hidden, weight, target, bias=bias, ignore_index=self.ignore_index,
                                          label_smoothing=self.label_smoothing, reduction=self.reduction,
                                          z_loss=self.z_loss, softcap=self.softcap, chunk_size=self.chunk_size,
                                          accum_dtype=self.accum_dtype, loss_dtype=self.loss_dtype)

    def extra_repr(self) -> str:
        extra = "" if self.chunk_size is None else f", chunk_size={self.chunk_size}"
        if self.accum_dtype != torch.float32:
            extra += f", accum_dtype={self.accum_dtype}"
        return _options_repr(self) + extra
