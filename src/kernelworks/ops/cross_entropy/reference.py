"""The loss family in plain PyTorch: the ground truth (run on float64-upcast inputs) and the ``torch``
baseline (run on the native inputs). Same signatures as the public functions, minus the memory options
(``inplace_backward``, ``chunk_size``, ``accum_dtype``), which do not change the math.

The definitions follow ``torch.nn.functional.cross_entropy`` with class-index targets (mean over the
non-ignored tokens; label smoothing mixing in the uniform distribution), plus the PaLM z-loss (ζ·lse² per
token, added to the loss) and Gemma-2 soft-capping (logits → c·tanh(logits/c) first). Where they differ
from torch: a mean over a batch whose targets are all ``ignore_index`` is 0, not NaN; and the loss comes
back in float32 (``loss_dtype=None``) or ``loss_dtype``, as the public functions return it. The math itself
runs in the input dtype (the ``torch`` baseline's error scale), or float64 for the ground truth, which is
returned unrounded.
"""

from __future__ import annotations

import torch


def _loss_out(loss: torch.Tensor, loss_dtype: torch.dtype | None) -> torch.Tensor:
    """``loss`` in the dtype the public ops return: float64 (the ground truth) unrounded, else ``loss_dtype``
    (float32 when None)."""
    if loss.dtype == torch.float64:
        return loss
    return loss.to(loss_dtype or torch.float32)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, *, ignore_index: int = -100,
                  label_smoothing: float = 0.0, reduction: str = "mean", z_loss: float = 0.0,
                  softcap: float | None = None, loss_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Loss of ``logits [..., V]`` against ``target [...]``: a scalar (mean, sum) or ``target``-shaped (none)."""
    x = logits.reshape(-1, logits.shape[-1])
    t = target.reshape(-1)
    if softcap is not None:
        x = softcap * torch.tanh(x / softcap)
    lse = torch.logsumexp(x, dim=-1)
    valid = t != ignore_index
    x_t = x.gather(1, torch.where(valid, t, 0).long()[:, None])[:, 0]
    loss = lse - x_t
    if label_smoothing > 0:
        loss = (1 - label_smoothing) * loss + label_smoothing * (lse - x.mean(dim=-1))
    if z_loss > 0:
        loss = loss + z_loss * lse * lse
    loss = torch.where(valid, loss, torch.zeros_like(loss))
    if reduction == "none":
        loss = loss.reshape(target.shape)
    elif reduction == "sum":
        loss = loss.sum()
    else:
        loss = loss.sum() / valid.sum().clamp(min=1)
    return _loss_out(loss, loss_dtype)


def fused_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, *,
                               bias: torch.Tensor | None = None, ignore_index: int = -100,
                               label_smoothing: float = 0.0, reduction: str = "mean", z_loss: float = 0.0,
                               softcap: float | None = None, loss_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``cross_entropy(hidden @ weight.T + bias, target, ...)``, the full logits materialised."""
    logits = hidden @ weight.T
    if bias is not None:
        logits = logits + bias
    return cross_entropy(logits, target, ignore_index=ignore_index, label_smoothing=label_smoothing,
                         reduction=reduction, z_loss=z_loss, softcap=softcap, loss_dtype=loss_dtype)
