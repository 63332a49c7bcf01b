"""``cross_entropy``: validation, the ``kernelworks::cross_entropy`` custom op (through :class:`TorchOp`), and
the pieces the fused linear loss shares (option checks, the target check, stored-gradient scaling).

The gradient is computed in the forward, by the same kernel as the loss (see ``kernels.py``), and stored;
the backward only scales it by ``grad_output``:

* eager (the autograd Function): in place, and not at all when ``grad_output`` is one value of exactly 1
  (``loss.backward()`` on a mean or sum, or on ``loss.sum()`` of ``none``) — no pass over the logits, no
  host sync, just a launch of programs that return at once;
* under ``torch.compile`` (the custom ops): functional semantics, so one read + write into a new buffer.

A backward that keeps the graph (``retain_graph=True``) scales into a new buffer instead, leaving the stored
gradient for the next one and the returned one to the caller.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kernelworks.ops.cross_entropy.kernels import (
    SELF_COUNT_MAX_ROWS,
    cross_entropy_bwd,
    cross_entropy_fwd,
    target_stats,
)
from kernelworks.runtime.alloc import empty
from kernelworks.runtime.compat import backward_keeps_graph
from kernelworks.runtime.device import planning_active
from kernelworks.runtime.indices import validation_enabled
from kernelworks.runtime.layout import as_rows
from kernelworks.runtime.replay import forbid, replayed_op
from kernelworks.runtime.torch_op import TorchOp
from kernelworks.runtime.validate import check_dtype, check_float_tensor, check_real, check_same_device, check_tensor

REDUCTIONS = ("mean", "sum", "none")
TARGET_DTYPES = (torch.int64, torch.int32)

# ------------------------------------------------------------------------------------- shared validation


_INT64 = (-(1 << 63), (1 << 63) - 1)


def check_options(ignore_index: object, label_smoothing: object, reduction: object, z_loss: object,
                  softcap: object) -> None:
    """The loss options: TypeError for a wrong kind, ValueError for a value out of range."""
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"ignore_index: expected an int, got {type(ignore_index).__name__}")
    if not _INT64[0] <= ignore_index <= _INT64[1]:
        raise ValueError(f"ignore_index: expected an int64 value (targets are int64 or int32), got {ignore_index}")
    check_real("label_smoothing", label_smoothing, low=0.0, high=1.0)
    if not isinstance(reduction, str) or reduction not in REDUCTIONS:
        raise ValueError(f"reduction: expected one of {', '.join(map(repr, REDUCTIONS))}, got {reduction!r}")
    check_real("z_loss", z_loss, low=0.0)
    if softcap is not None:
        check_real("softcap", softcap, low=0.0, low_inclusive=False)


def dtype_option(name: str, value: object, allowed: Sequence[torch.dtype], what: str = "") -> torch.dtype:
    """``value`` (a ``torch.dtype`` or its name, ``"float32"`` / ``"torch.float32"``) as one of ``allowed``;
    TypeError naming ``name`` otherwise. ``what`` describes the allowed set in the message."""
    dtype = getattr(torch, value.removeprefix("torch."), None) if isinstance(value, str) else value
    want = what or " or ".join(str(d) for d in dict.fromkeys(allowed))
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name}: expected a torch.dtype ({want}) or its name, got {type(value).__name__} "
                        f"{value!r}")
    if dtype not in allowed:
        raise TypeError(f"{name}: expected {want}, got {dtype}")
    return dtype


LOSS_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def loss_dtype_option(loss_dtype: object) -> torch.dtype:
    """The ``loss_dtype`` option: None means float32 (the loss is computed in float32 whatever the input)."""
    return torch.float32 if loss_dtype is None else dtype_option("loss_dtype", loss_dtype, LOSS_DTYPES,
                                                                 "None or a float dtype")


def check_target(target: object, rows_shape: Sequence[int], rows_name: str, rows_tensor: torch.Tensor) -> None:
    """``target`` is an int64/int32 tensor shaped ``rows_shape`` (the leading dims of ``rows_name``), on its
    device. Its values are checked later, on the device (:func:`check_target_values`)."""
    if isinstance(target, torch.Tensor):
        check_dtype("target", target, TARGET_DTYPES)
    check_tensor("target", target, min_dim=0)
    if tuple(target.shape) != tuple(rows_shape):
        raise ValueError(f"target: expected shape {tuple(rows_shape)} (the leading dimensions of {rows_name} "
                         f"{tuple(rows_tensor.shape)}), got {tuple(target.shape)}")
    check_same_device((rows_name, "target"), (rows_tensor, target))


def _can_sync(t: torch.Tensor) -> bool:
    """Reading a device value is allowed: not while a CUDA graph is captured (a sync there is an error), not
    while ``kw inspect`` plans launches (kernels do not run, the values are garbage)."""
    if planning_active():
        return False
    return not (t.is_cuda and torch.cuda.is_current_stream_capturing())


def check_target_values(stats: torch.Tensor, target: torch.Tensor, n_cols: int, ignore_index: int) -> None:
    """ValueError naming ``target`` when a class index lies outside ``[0, n_cols)`` (``ignore_index`` aside).

    The count comes from ``target_stats`` (one tiny kernel that also counts the tokens for the mean); reading
    it is a host sync, so it happens in validation mode only (:func:`kernelworks.validation`), as for every
    index tensor: otherwise out-of-range rows give a NaN loss (the kernel never reads out of bounds), and
    nothing waits for the GPU. Never while a CUDA graph is captured.
    """
    if not validation_enabled() or not _can_sync(stats) or stats[1].item() == 0:
        return
    t = target.long()  # an int32 target against an ignore_index past int32's range compares correctly
    bad = t[(t != ignore_index) & ((t < 0) | (t >= n_cols))]
    raise ValueError(f"target: expected class indices in [0, {n_cols}) or ignore_index={ignore_index}, got "
                     f"{bad.numel()} out of range (e.g. {bad[:4].tolist()})")


def check_bool(name: str, value: object) -> None:
    """``value`` is a bool (not merely truthy: ``inplace_backward=1`` is refused)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")


# --------------------------------------------------------------------------------- stored-gradient scaling


def _as_2d(t: torch.Tensor) -> torch.Tensor:
    return t.view(1, -1) if t.dim() == 1 else as_rows(t)


def scale_stored(ctx, grad_output: torch.Tensor, stored: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The eager backward of a loss whose forward stored its gradients: ``stored · grad_output``.

    A backward that frees the graph scales in place and hands the stored buffers over (nothing moves when
    ``grad_output`` is a scalar 1). One that keeps it (``retain_graph``) writes into new buffers and leaves the
    stored values as they are: the caller owns what it gets back and may edit it in place (a hook, clipping,
    ``.grad`` arithmetic) while the graph still needs the stored values for its next backward.
    """
    g = grad_output.detach().reshape(-1)
    if not backward_keeps_graph():
        for t in stored:
            cross_entropy_bwd(g, _as_2d(t))
        return list(stored)
    out = []
    for t in stored:
        o = empty(t.shape, dtype=t.dtype, device=t.device)
        cross_entropy_bwd(g, _as_2d(t), _as_2d(o))
        out.append(o)
    return out


def scale_out_of_place(grad_output: torch.Tensor, stored: torch.Tensor) -> torch.Tensor:
    """``stored · grad_output`` into a new contiguous tensor (the custom-op backward)."""
    out = empty(stored.shape, dtype=stored.dtype, device=stored.device)
    cross_entropy_bwd(grad_output.reshape(-1), _as_2d(stored), _as_2d(out))
    return out


def reduce_rows(loss_rows: torch.Tensor, reduction: str, shape: Sequence[int]) -> torch.Tensor:
    """The per-row fp32 losses (already divided by the token count for the mean) as the op's fp32 output."""
    return loss_rows.view(tuple(shape)) if reduction == "none" else loss_rows.sum()


def loss_fake(like: torch.Tensor, target: torch.Tensor, reduction: str) -> torch.Tensor:
    """The fake (meta) loss output: fp32, a scalar or ``target``-shaped."""
    return like.new_empty(tuple(target.shape) if reduction == "none" else (), dtype=torch.float32)


def as_loss_dtype(loss: torch.Tensor, loss_dtype: torch.dtype) -> torch.Tensor:
    """The op's fp32 loss in the caller's ``loss_dtype`` (a differentiable cast, outside the custom op)."""
    return loss if loss_dtype == torch.float32 else loss.to(loss_dtype)


# ------------------------------------------------------------------------------------------- custom op


def _forward(logits: torch.Tensor, target: torch.Tensor, ignore_index: int, label_smoothing: float,
             reduction: str, z_loss: float, softcap: float | None, compute_grad: bool,
             inplace: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, dlogits)``; ``dlogits`` is empty when ``compute_grad`` is False, and also when ``inplace``
    wrote it over ``logits`` (only where ``logits`` has unit column stride and rows that do not overlap;
    otherwise it gets a buffer)."""
    x = as_rows(logits)
    t = target.reshape(-1)
    n_rows, n_cols = x.shape
    # The target statistics (one more launch) only where something needs them before the rows are done: the
    # out-of-range count of validation mode, or the mean's scale of a gradient row past a small batch (a small
    # one counts it in every program). Otherwise the launch's last program reduces the rows, the mean counting
    # its own targets.
    stats, scale = None, None
    mean_grad = compute_grad and reduction == "mean"
    if validation_enabled() or (mean_grad and n_rows > SELF_COUNT_MAX_ROWS):
        stats = target_stats(t, n_cols, ignore_index, mean=reduction == "mean")
        check_target_values(stats, t, n_cols, ignore_index)
        scale = stats[2:]
    elif mean_grad:
        scale = "mean"
    reduce = "" if reduction == "none" else "mean" if reduction == "mean" and scale is None else "sum"
    total = empty((), dtype=torch.float32, device=logits.device) if reduce else None
    loss_rows = empty((n_rows,), dtype=torch.float32, device=logits.device)
    grad = logits.new_empty(0)
    dx = None
    if compute_grad:
        if inplace and x.untyped_storage().data_ptr() == logits.untyped_storage().data_ptr() and \
                (n_rows <= 1 or x.stride(0) >= n_cols):  # rows that overlap (an expanded view) get a buffer
            dx = x
            # Whatever else saved logits for its backward must now fail loudly, not read gradients.
            torch.autograd.graph.increment_version(logits)
            forbid("bumps the logits' version counter")  # on every call: never replayed
        else:
            grad = empty(logits.shape, dtype=logits.dtype, device=logits.device)
            dx = grad.view(n_rows, n_cols)
    cross_entropy_fwd(x, t, loss_rows, scale, dx, ignore_index=ignore_index,
                      label_smoothing=label_smoothing, z_loss=z_loss, softcap=softcap, total=total, reduce=reduce)
    return (loss_rows.view(tuple(target.shape)) if total is None else total), grad


def _forward_fake(logits, target, ignore_index, label_smoothing, reduction, z_loss, softcap, compute_grad,
                  inplace):
    loss = loss_fake(logits, target, reduction)
    grad = logits.new_empty(logits.shape) if compute_grad and not inplace else logits.new_empty(0)
    return loss, grad


def _backward(grad_output: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """``grad · grad_output`` (per row for reduction ``none``) into a new buffer."""
    return scale_out_of_place(grad_output, grad)


def _backward_fake(grad_output, grad):
    return grad.new_empty(grad.shape)


def _setup_context(ctx, inputs, output) -> None:
    logits, compute_grad = inputs[0], inputs[7]
    grad = output[1]
    ctx.mark_non_differentiable(grad)
    ctx.set_materialize_grads(False)  # no zeros for the unused dlogits output
    ctx.grad_in_logits = compute_grad and grad.numel() == 0  # inplace: the gradient is in logits' memory
    ctx.save_for_backward(logits if ctx.grad_in_logits else grad)
    ctx.scaled_by = None


def _input_grads(ctx, grads, backward) -> tuple:
    none = (None,) * 8
    grad_output = grads[0]
    if grad_output is None:
        return (None, *none)
    (stored,) = ctx.saved_tensors
    if backward is not _CROSS_ENTROPY.backward_op:  # eager (not the traced custom op): in place, free at 1
        return (scale_stored(ctx, grad_output, [stored])[0], *none)
    return (backward(grad_output, stored), *none)


_CROSS_ENTROPY = TorchOp("cross_entropy", forward=_forward, forward_fake=_forward_fake, backward=_backward,
                         backward_fake=_backward_fake, setup_context=_setup_context, input_grads=_input_grads)


# ------------------------------------------------------------------------------------------- public API


@replayed_op
def cross_entropy(logits: torch.Tensor, target: torch.Tensor, *, ignore_index: int = -100,
                  label_smoothing: float = 0.0, reduction: str = "mean", z_loss: float = 0.0,
                  softcap: float | None = None, inplace_backward: bool = False,
                  loss_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Cross-entropy of ``logits`` against class indices, as ``torch.nn.functional.cross_entropy``, with
    z-loss and soft-capping; the gradient is computed in the same kernel as the loss.

    Args:
        logits: ``[..., V]`` (``[N, V]`` usually) float32, float16 or bfloat16, on CUDA (CPU under the Triton
            interpreter); any row stride. V up to 256k and beyond (rows longer than 32768 are streamed).
        target: ``logits.shape[:-1]`` int64 or int32 class indices in ``[0, V)``, or ``ignore_index``.
        ignore_index: rows with this target add nothing to the loss (gradient 0) nor to the mean's count.
        label_smoothing: ε in [0, 1]: the target is ``(1 − ε)·onehot + ε/V``, as in torch.
        reduction: ``"mean"`` (over non-ignored rows), ``"sum"`` or ``"none"`` (one loss per row).
        z_loss: ζ ≥ 0: adds ``ζ·logsumexp(x)²`` per non-ignored row (PaLM's auxiliary loss), included in the
            returned loss (and reduced with it); the total is all that is returned.
        softcap: c > 0: logits become ``c·tanh(logits/c)`` first (Gemma 2), the gradient chained through.
        inplace_backward: write the stored gradient over ``logits``' memory instead of a new buffer, saving
            one ``[N, V]`` buffer (~2 GB for 8192 × 128k bf16), as Liger does. ``logits`` then holds the
            gradient after the call: do not read it again, and nothing else may need it for its own backward
            (its version counter is bumped, so autograd raises if something does). Eager mode only, and only
            when ``logits`` has unit column stride and rows that do not overlap (not an expanded view);
            otherwise ignored. Default False.
        loss_dtype: dtype of the returned loss: None (default) for float32, or a ``torch.dtype`` (or its
            name), e.g. ``logits.dtype`` for torch's behaviour. A bf16 loss near 10.56 moves in steps of
            0.0625, so a training curve printed from it stands still. The gradient is in ``logits``' dtype
            either way.

    Returns:
        The loss, computed in float32, in ``loss_dtype`` (float32 by default): a scalar for
        ``mean``/``sum``, ``target``-shaped for ``none``. When every target is ``ignore_index`` the mean is
        0.0 (torch gives NaN; a batch of padding then contributes nothing instead of poisoning the step).

    Cost: with ``logits.requires_grad``, 2 reads + 1 write of the logits in the forward (1 read + 1 write up
    to V = 32768) and nothing in the backward when ``grad_output`` is 1 (one scaling pass otherwise); without,
    1 read. A target out of range gives that row a NaN loss (the kernel never reads out of bounds); in
    validation mode (:func:`kernelworks.validation`, one host sync per call) it raises a ValueError instead.

    Example::

        loss = kw.cross_entropy(logits.view(-1, vocab), labels.view(-1))   # logits [B·T, V] bf16
        loss.backward()
    """
    check_float_tensor("logits", logits)
    check_target(target, logits.shape[:-1], "logits", logits)
    check_options(ignore_index, label_smoothing, reduction, z_loss, softcap)
    check_bool("inplace_backward", inplace_backward)
    loss_dtype = loss_dtype_option(loss_dtype)
    softcap = None if softcap is None else float(softcap)
    compute_grad = torch.is_grad_enabled() and logits.requires_grad
    compiling = torch.compiler.is_compiling()
    args = (logits, target, ignore_index, float(label_smoothing), reduction, float(z_loss), softcap)
    if not compute_grad and not compiling:  # nothing to differentiate: the loss alone, one read of the logits
        return as_loss_dtype(_CROSS_ENTROPY._forward(*args, False, False)[0], loss_dtype)  # replayed
    loss = _CROSS_ENTROPY(*args, compute_grad, inplace_backward and compute_grad and not compiling)[0]
    return as_loss_dtype(loss, loss_dtype)
