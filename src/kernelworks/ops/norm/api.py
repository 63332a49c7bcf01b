"""Public ``layer_norm`` / ``rms_norm``, their validation, and the custom ops behind them.

Both functions go through two :class:`~kernelworks.runtime.torch_op.TorchOp` s that share every body and
differ only in their outputs: ``norm`` (``x → (y, stats)``) and ``add_norm`` (``x, residual →
(y, h, stats)``, ``h = x + residual`` the new residual stream); ``rms`` picks the statistics. ``stats`` is
the fp32 ``[1, rows]`` rstd (RMSNorm) or ``[2, rows]`` mean and rstd (LayerNorm) the backward reads instead
of recomputing them; it is marked non-differentiable and not returned to the caller.
"""

from __future__ import annotations

import torch

from kernelworks.ops.norm.backward import norm_bwd
from kernelworks.ops.norm.forward import norm_fwd
from kernelworks.runtime.replay import replayed_op
from kernelworks.runtime.torch_op import TorchOp
from kernelworks.runtime.validate import (
    check_float_tensor,
    check_real,
    check_same_device,
    check_same_dtype,
    check_same_shape,
)

# ------------------------------------------------------------------------------------------- custom ops


def _n_rows(x: torch.Tensor) -> int:
    return x.numel() // x.shape[-1]


def _stats_fake(x: torch.Tensor, rms: bool) -> torch.Tensor:
    return x.new_empty((1 if rms else 2, _n_rows(x)), dtype=torch.float32)


def _forward(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
             offset: float, rms: bool) -> tuple[torch.Tensor, torch.Tensor]:
    y, _, stats = norm_fwd(x, None, weight, bias, eps=eps, offset=offset, rms=rms)
    return y, stats


def _forward_fake(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
                  offset: float, rms: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape), _stats_fake(x, rms)


def _forward_add(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                 eps: float, offset: float, rms: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return norm_fwd(x, residual, weight, bias, eps=eps, offset=offset, rms=rms)


def _forward_add_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
                      bias: torch.Tensor | None, eps: float, offset: float,
                      rms: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape), x.new_empty(x.shape), _stats_fake(x, rms)


def _backward(dy: torch.Tensor, dh: torch.Tensor | None, h: torch.Tensor, weight: torch.Tensor | None,
              bias: torch.Tensor | None, stats: torch.Tensor, offset: float, rms: bool, need_dw: bool,
              need_db: bool) -> list[torch.Tensor]:
    """``[dx]`` followed by ``dw`` (when ``need_dw``) and ``db`` (when ``need_db``); ``bias`` is passed
    only for its dtype (the gradient's)."""
    dx, dw, db = norm_bwd(dy, dh, h, weight, stats, offset=offset, rms=rms,
                          dw_dtype=weight.dtype if need_dw else None, db_dtype=bias.dtype if need_db else None)
    return [t for t in (dx, dw, db) if t is not None]


def _backward_fake(dy: torch.Tensor, dh: torch.Tensor | None, h: torch.Tensor, weight: torch.Tensor | None,
                   bias: torch.Tensor | None, stats: torch.Tensor, offset: float, rms: bool, need_dw: bool,
                   need_db: bool) -> list[torch.Tensor]:
    out = [h.new_empty(h.shape)]
    if need_dw:
        out.append(weight.new_empty(weight.shape))
    if need_db:
        out.append(bias.new_empty(bias.shape))
    return out


def _save(ctx, h: torch.Tensor, weight, bias, stats: torch.Tensor, offset: float, rms: bool) -> None:
    # h (x, or the returned x + residual) rather than y: x̂ = (h − μ)·rstd is exact from h, while y would
    # need a division by (offset + w), which may be 0.
    ctx.save_for_backward(h, weight, bias, stats)
    ctx.offset, ctx.rms = offset, rms
    ctx.mark_non_differentiable(stats)
    ctx.set_materialize_grads(False)  # an unused output's gradient stays None: no zeros read back


def _setup(ctx, inputs, output) -> None:
    x, weight, bias, _eps, offset, rms = inputs
    _save(ctx, x, weight, bias, output[1], offset, rms)


def _setup_add(ctx, inputs, output) -> None:
    _x, _residual, weight, bias, _eps, offset, rms = inputs
    _save(ctx, output[1], weight, bias, output[2], offset, rms)


def _grads(ctx, dy, dh, i_weight: int, backward) -> tuple:
    """``(dx, dw, db)`` from the saved state; dw/db only where an input wants one."""
    h, weight, bias, stats = ctx.saved_tensors
    if dy is None:  # only the returned residual stream is used downstream
        dy = torch.zeros_like(h)
    need_dw = weight is not None and ctx.needs_input_grad[i_weight]
    need_db = bias is not None and ctx.needs_input_grad[i_weight + 1]
    g = backward(dy, dh, h, weight, bias, stats, ctx.offset, ctx.rms, need_dw, need_db)
    return g[0], g[1] if need_dw else None, g[-1] if need_db else None


def _input_grads(ctx, grads: tuple, backward) -> tuple:
    """Gradients for ``(x, weight, bias, eps, offset, rms)``."""
    if grads[0] is None:
        return (None,) * 6
    dx, dw, db = _grads(ctx, grads[0], None, 1, backward)
    return dx, dw, db, None, None, None


def _input_grads_add(ctx, grads: tuple, backward) -> tuple:
    """Gradients for ``(x, residual, weight, bias, eps, offset, rms)``: h = x + residual, so x and the
    residual both get dh = (the norm's gradient) + (the returned h's own gradient)."""
    dy, dh = grads[0], grads[1]
    if dy is None and dh is None:
        return (None,) * 7
    dx, dw, db = _grads(ctx, dy, dh, 2, backward)
    need_x, need_r = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    return dx if need_x else None, dx if need_r else None, dw, db, None, None, None


_norm = TorchOp("norm", forward=_forward, forward_fake=_forward_fake, backward=_backward,
                backward_fake=_backward_fake, setup_context=_setup, input_grads=_input_grads)
"""``kernelworks::norm`` (+ ``_backward``): ``(x, weight, bias, eps, offset, rms) → (y, stats)``."""

_add_norm = TorchOp("add_norm", forward=_forward_add, forward_fake=_forward_add_fake, backward=_backward,
                    backward_fake=_backward_fake, setup_context=_setup_add, input_grads=_input_grads_add)
"""``kernelworks::add_norm`` (+ ``_backward``): ``(x, residual, weight, bias, eps, offset, rms) →
(y, x + residual, stats)``."""


# ------------------------------------------------------------------------------------------- public API


def _check(x: object, weight: object, bias: object, residual: object) -> None:
    """Shapes, dtypes, devices. ``weight``/``bias`` may have their own float dtype (fp32 parameters with
    16-bit activations is the usual mixed-precision layout); ``residual`` must match ``x`` exactly."""
    check_float_tensor("x", x)
    n = x.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        check_float_tensor(name, t)
        if tuple(t.shape) != (n,):
            raise ValueError(f"{name}: expected shape ({n},) to match x's last dimension "
                             f"(x: {tuple(x.shape)}), got {tuple(t.shape)}")
        check_same_device(("x", name), (x, t))
    if residual is not None:
        check_float_tensor("residual", residual)
        check_same_device(("x", "residual"), (x, residual))
        check_same_dtype(("x", "residual"), (x, residual))
        check_same_shape(("x", "residual"), (x, residual))


def _apply(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor | None,
           bias: torch.Tensor | None, eps: float, offset: float, rms: bool):
    if residual is None:
        return _norm(x, weight, bias, eps, offset, rms)[0]
    y, h, _ = _add_norm(x, residual, weight, bias, eps, offset, rms)
    return y, h


@replayed_op
def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6,
             residual: torch.Tensor | None = None, offset: float = 0.0):
    """RMSNorm over the last dimension: ``y = h / √(mean(h²) + eps) · (offset + weight)``, ``h = x``
    (or ``x + residual``), with autograd; works under ``torch.compile(fullgraph=True)``.

    Args:
        x: ``[..., hidden]`` float32, float16 or bfloat16, on CUDA (CPU under the Triton interpreter); any
            row stride. Any hidden size (one pass in registers up to 32768, looped beyond).
        weight: ``[hidden]`` of any of those float dtypes (an fp32 weight with bf16 ``x`` is fine; the
            weight gradient comes back in the weight's dtype), or None for no scaling.
        eps: added to the mean square (default 1e-6).
        residual: optional ``[..., hidden]`` like ``x`` (same dtype): the pre-norm pattern
            ``h = x + residual; y = norm(h)`` in one pass, which also returns ``h``.
        offset: the weight's offset, ``(offset + weight)``: 1.0 for Gemma (whose weights are stored as
            ``w − 1``), 0.0 otherwise. Needs a weight.

    Returns:
        ``y`` (without ``residual``) or ``(y, h)``: contiguous, in ``x``'s dtype; statistics in fp32, one
        rounding at the store. ``h`` is rounded to ``x``'s dtype before it is normalised, exactly as
        ``x + residual`` followed by a norm (on a GPU; Triton's CPU interpreter rounds fp32 → bf16 by
        truncation, so there ``h`` can sit one bf16 step from torch's sum).

    Example::

        y = kw.rms_norm(x, w)                                  # x: [tokens, 4096] bf16, w: [4096]
        y, residual = kw.rms_norm(attn_out, w, residual=residual)  # add + norm, one pass
    """
    _check(x, weight, None, residual)
    eps = check_real("eps", eps, low=0.0)
    offset = check_real("offset", offset)
    if weight is None and offset != 0.0:
        raise ValueError(f"offset: scales (offset + weight), so it needs a weight; got offset={offset} "
                         "with weight=None")
    return _apply(x, residual, weight, None, eps, offset, True)


@replayed_op
def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5, residual: torch.Tensor | None = None):
    """LayerNorm over the last dimension, as ``torch.nn.functional.layer_norm(x, (hidden,), weight, bias,
    eps)``: ``y = (h − mean(h)) / √(var(h) + eps) · weight + bias``, ``h = x`` (or ``x + residual``), with
    autograd; works under ``torch.compile(fullgraph=True)``.

    Args:
        x: ``[..., hidden]`` float32, float16 or bfloat16, on CUDA (CPU under the Triton interpreter); any
            row stride. Any hidden size (one pass in registers up to 32768, looped beyond).
        weight, bias: ``[hidden]`` of any of those float dtypes (each independently; fp32 parameters with
            bf16 ``x`` are fine, gradients come back in each parameter's dtype), or None (default) for no
            scale / no shift.
        eps: added to the (biased) variance (default 1e-5).
        residual: optional ``[..., hidden]`` like ``x`` (same dtype): ``h = x + residual; y = norm(h)`` in
            one pass, which also returns ``h``.

    Returns:
        ``y`` (without ``residual``) or ``(y, h)``: contiguous, in ``x``'s dtype; mean and variance in
        fp32 (the variance from a second pass over the row, never E[h²] − E[h]²).

    Example::

        y = kw.layer_norm(x, w, b)                             # x: [tokens, 1024] bf16
        y, residual = kw.layer_norm(x, w, b, residual=residual)
    """
    _check(x, weight, bias, residual)
    eps = check_real("eps", eps, low=0.0)
    return _apply(x, residual, weight, bias, eps, 0.0, False)
