"""``fused_linear_cross_entropy``: the LM-head projection and the loss, chunked over tokens so the
``[N, V]`` logits never exist.

Per chunk of tokens (rows of ``hidden``), all on one reused ``[chunk, V]`` buffer:

    logits  = hidden_c @ weightᵀ (+ bias)          cuBLAS, input dtype, fp32 accumulation
    loss_c, dlogits written over logits            the cross-entropy kernel, in place (kernels.py)
    grad_hidden_c  = dlogits @ weight              cuBLAS, written straight into its rows
    grad_weight   += dlogitsᵀ @ hidden_c           cuBLAS, accumulated in ``accum_dtype`` (fp32 by default)
    grad_bias     += Σ_rows dlogits                fp32

so every gradient is ready when the forward returns and the backward only scales them by ``grad_output``
(in place, and not at all when it is 1, in eager mode). Chunks run in order and cuBLAS is deterministic
for fixed shapes, so the result is bit-reproducible. Reduction ``none`` is the exception: its per-token
``grad_output`` must weight each row of ``dlogits`` before the rows are summed into ``grad_weight``, so the
forward computes the loss alone (1 read of each chunk's logits) and the backward reruns the chunk loop
with ``grad_output`` as the kernel's per-row scale.

Memory (the rule behind ``chunk_size=None``, :func:`chunk_rows`): beyond the inputs the forward holds
``grad_hidden`` (N·H·itemsize), ``grad_weight``'s accumulator and the chunk buffer.

* ``accum_dtype=weight.dtype``: the accumulator is the output (V·H·itemsize: 1.05 GB at 128256 × 4096
  bf16) and the chunk takes at most 256 MiB (1024 tokens there): extra peak ~1.45 GB at 16k tokens, at
  the price of rounding ``grad_weight`` once per chunk (16 times here) instead of once.
* ``accum_dtype=torch.float32`` (the default, for bf16/fp16 weights): the fp32 accumulator (V·H·4: 2.1 GB)
  and, at the end, the cast into the weight dtype (1.05 GB) after the chunk buffer is freed, so the chunk
  may be as large as that cast without raising the peak (capped at 1 GiB: 4096 tokens there): extra peak
  ~3.3 GB at 16k tokens. fp32 weights accumulate in place, as the first case.
"""

from __future__ import annotations

import torch

from kernelworks.ops.cross_entropy.api import (
    as_loss_dtype,
    check_options,
    check_target,
    check_target_values,
    dtype_option,
    loss_dtype_option,
    loss_fake,
    reduce_rows,
    scale_out_of_place,
    scale_stored,
)
from kernelworks.ops.cross_entropy.kernels import cross_entropy_fwd, target_stats
from kernelworks.runtime.alloc import empty
from kernelworks.runtime.blas import accumulate_mm
from kernelworks.runtime.device import planning_active
from kernelworks.runtime.layout import as_rows
from kernelworks.runtime.replay import replayed_op
from kernelworks.runtime.torch_op import TorchOp
from kernelworks.runtime.validate import FLOAT_DTYPES, check_float_tensor, check_same_device, check_same_dtype

CHUNK_LOGITS_BYTES = 256 << 20
"""Largest chunk of logits (and of its gradient, which reuses the buffer) ``chunk_size=None`` allows."""

MAX_CHUNK_LOGITS_BYTES = 1 << 30
"""With a separate fp32 ``grad_weight`` accumulator the chunk may grow to the size of the final cast
(V·H·itemsize, which sets the peak anyway once the chunk is freed), up to this."""

_CHUNK_ALIGN = 128


def chunk_rows(n_rows: int, n_vocab: int, itemsize: int, *, cast_bytes: int = 0) -> int:
    """Tokens per chunk for ``chunk_size=None``: the chunk's logits within :data:`CHUNK_LOGITS_BYTES` — or
    within ``cast_bytes`` (capped at :data:`MAX_CHUNK_LOGITS_BYTES`) when the forward ends by casting an fp32
    accumulator into that many bytes — a multiple of 128 tokens when that many fit, at most ``n_rows``.

    Fewer, larger chunks matter for the fp32 accumulator: each chunk's ``grad_weight`` GEMM reads and
    writes the whole V×H fp32 accumulator (4.2 GB at 128256 × 4096), so 4 chunks instead of 16 save ~50 GB
    of traffic at 16k tokens."""
    budget = max(CHUNK_LOGITS_BYTES, min(cast_bytes, MAX_CHUNK_LOGITS_BYTES))
    rows = max(1, budget // (n_vocab * itemsize))
    if rows >= _CHUNK_ALIGN:
        rows -= rows % _CHUNK_ALIGN
    return min(rows, n_rows)


def _run(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, bias: torch.Tensor | None,
         scale: torch.Tensor, *, ignore_index: int, label_smoothing: float, z_loss: float, softcap: float | None,
         chunk_size: int, accum_dtype: torch.dtype, need_hidden: bool, need_weight: bool, need_bias: bool):
    """The chunk loop over ``hidden [N, H]`` rows. ``scale``: 1 element (every row) or N (per row).
    Returns ``(loss_rows [N] fp32, grad_hidden, grad_weight, grad_bias)``, None where not needed."""
    n_rows, n_hidden = hidden.shape
    n_vocab = weight.shape[0]
    has_grad = need_hidden or need_weight or need_bias
    device = hidden.device
    separate_acc = need_weight and accum_dtype != weight.dtype
    chunk = chunk_size or chunk_rows(n_rows, n_vocab, hidden.element_size(),
                                     cast_bytes=weight.numel() * weight.element_size() if separate_acc else 0)
    loss_rows = empty((n_rows,), dtype=torch.float32, device=device)
    grad_hidden = empty((n_rows, n_hidden), dtype=hidden.dtype, device=device) if need_hidden else None
    # the first chunk's product writes the accumulator (beta = 0): no fill of V·H elements first (hidden has rows:
    # the op refuses empty inputs)
    acc_w = empty((n_vocab, n_hidden), dtype=accum_dtype, device=device) if need_weight else None
    acc_b = torch.zeros((n_vocab,), dtype=torch.float32, device=device) if need_bias else None
    buf = empty((min(chunk, n_rows), n_vocab), dtype=hidden.dtype, device=device)
    weight_t = weight.t()
    planning = planning_active()
    for start in range(0, n_rows, chunk):
        end = min(start + chunk, n_rows)
        h_c, logits = hidden[start:end], buf[: end - start]
        if not planning:
            if bias is None:
                torch.mm(h_c, weight_t, out=logits)
            else:
                torch.addmm(bias, h_c, weight_t, out=logits)  # the bias add rides in cuBLAS's epilogue
        cross_entropy_fwd(logits, target[start:end], loss_rows[start:end],
                          scale if scale.numel() == 1 else scale[start:end], logits if has_grad else None,
                          ignore_index=ignore_index, label_smoothing=label_smoothing, z_loss=z_loss,
                          softcap=softcap)
        if planning:  # kw inspect: the kernel launch a GPU would see is recorded; no cuBLAS on stand-ins
            break
        if need_hidden:
            torch.mm(logits, weight, out=grad_hidden[start:end])
        if need_weight:
            accumulate_mm(acc_w, logits.t(), h_c, first=start == 0)
        if need_bias:
            acc_b += logits.sum(dim=0, dtype=torch.float32)
    del buf, logits  # free the chunk before the casts below allocate
    grad_weight = None if acc_w is None else acc_w.to(weight.dtype)
    grad_bias = None if acc_b is None else acc_b.to(bias.dtype)
    return loss_rows, grad_hidden, grad_weight, grad_bias


# ------------------------------------------------------------------------------------------- custom op


def _outputs(hidden: torch.Tensor, gh, gw, gb) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients as custom-op outputs: ``grad_hidden`` in ``hidden``'s shape, and a distinct empty
    tensor for each one not computed (outputs may not alias one another)."""
    return (hidden.new_empty(0) if gh is None else gh.view(hidden.shape),
            hidden.new_empty(0) if gw is None else gw,
            hidden.new_empty(0) if gb is None else gb)


def _forward(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, bias: torch.Tensor | None,
             ignore_index: int, label_smoothing: float, reduction: str, z_loss: float, softcap: float | None,
             chunk_size: int, accum_dtype: torch.dtype, need_hidden: bool, need_weight: bool,
             need_bias: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(loss, grad_hidden, grad_weight, grad_bias)``; a gradient not needed (or deferred to the backward,
    for reduction ``none``) is an empty tensor. ``chunk_size`` 0: the default rule."""
    h = as_rows(hidden)
    t = target.reshape(-1)
    n_vocab = weight.shape[0]
    stats = target_stats(t, n_vocab, ignore_index, mean=reduction == "mean")
    check_target_values(stats, t, n_vocab, ignore_index)
    now = reduction != "none"  # "none": gradients need the per-token grad_output (see the module docstring)
    loss_rows, gh, gw, gb = _run(h, weight, t, bias, stats[2:], ignore_index=ignore_index,
                                 label_smoothing=label_smoothing, z_loss=z_loss, softcap=softcap,
                                 chunk_size=chunk_size, accum_dtype=accum_dtype, need_hidden=need_hidden and now,
                                 need_weight=need_weight and now, need_bias=need_bias and now)
    return (reduce_rows(loss_rows, reduction, target.shape), *_outputs(hidden, gh, gw, gb))


def _forward_fake(hidden, weight, target, bias, ignore_index, label_smoothing, reduction, z_loss, softcap,
                  chunk_size, accum_dtype, need_hidden, need_weight, need_bias):
    now = reduction != "none"
    return (loss_fake(hidden, target, reduction),
            hidden.new_empty(hidden.shape if need_hidden and now else (0,)),
            weight.new_empty(weight.shape if need_weight and now else (0,)),
            hidden.new_empty(bias.shape if need_bias and now else (0,)))


def _backward(grad_output: torch.Tensor, saved: list[torch.Tensor], ignore_index: int, label_smoothing: float,
              reduction: str, z_loss: float, softcap: float | None, chunk_size: int, accum_dtype: torch.dtype,
              need_hidden: bool, need_weight: bool, need_bias: bool) -> list[torch.Tensor]:
    """``[grad_hidden, grad_weight, grad_bias]`` (empty where not needed). Mean/sum: ``saved`` holds the
    forward's gradients, scaled here into new buffers. None: ``saved = [hidden, weight, target, bias]``
    (bias empty when absent) and the chunk loop runs again with ``grad_output`` as the per-row scale."""
    if reduction != "none":
        return [scale_out_of_place(grad_output, s) if s.numel() else s.new_empty(0) for s in saved]
    hidden, weight, target, bias = saved
    _, gh, gw, gb = _run(as_rows(hidden), weight, target.reshape(-1), bias if bias.numel() else None,
                         grad_output.reshape(-1), ignore_index=ignore_index, label_smoothing=label_smoothing,
                         z_loss=z_loss, softcap=softcap, chunk_size=chunk_size, accum_dtype=accum_dtype,
                         need_hidden=need_hidden, need_weight=need_weight, need_bias=need_bias)
    return list(_outputs(hidden, gh, gw, gb))


def _backward_fake(grad_output, saved, ignore_index, label_smoothing, reduction, z_loss, softcap, chunk_size,
                   accum_dtype, need_hidden, need_weight, need_bias):
    if reduction != "none":
        return [s.new_empty(s.shape) for s in saved]
    hidden, weight, _, bias = saved
    return [hidden.new_empty(hidden.shape if need_hidden else (0,)),
            weight.new_empty(weight.shape if need_weight else (0,)),
            hidden.new_empty(bias.shape if need_bias else (0,))]


def _setup_context(ctx, inputs, output) -> None:
    hidden, weight, target, bias = inputs[:4]
    ctx.options = inputs[4:]
    ctx.needs = inputs[11:]
    ctx.deferred = inputs[6] == "none"
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)
    ctx.has_bias = bias is not None
    if ctx.deferred:
        ctx.save_for_backward(hidden, weight, target, bias)
    else:
        ctx.save_for_backward(*output[1:])


def _input_grads(ctx, grads, backward) -> tuple:
    grad_output = grads[0]
    rest = (None,) * 10
    if grad_output is None:
        return (None, None, None, None, *rest)
    saved = list(ctx.saved_tensors)
    # eager mean/sum (the traced path calls the custom op): in place, free when grad_output is 1
    if not ctx.deferred and backward is not _FUSED_LINEAR_CROSS_ENTROPY.backward_op:
        picked = [s for s, need in zip(saved, ctx.needs) if need]
        scaled = iter(scale_stored(ctx, grad_output, picked))
        out = [next(scaled) if need else None for need in ctx.needs]
    else:
        if ctx.deferred and saved[3] is None:
            saved[3] = saved[0].new_empty(0)
        out = [g if need else None for g, need in zip(backward(grad_output, saved, *ctx.options), ctx.needs)]
    return (out[0], out[1], None, out[2], *rest)


_FUSED_LINEAR_CROSS_ENTROPY = TorchOp(
    "fused_linear_cross_entropy", forward=_forward, forward_fake=_forward_fake, backward=_backward,
    backward_fake=_backward_fake, setup_context=_setup_context, input_grads=_input_grads)


# ------------------------------------------------------------------------------------------- public API


def check_chunk_size(chunk_size: object) -> None:
    """``chunk_size`` is None (the default rule) or a positive int; shared with the nn module."""
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int)):
        raise TypeError(f"chunk_size: expected an int or None, got {type(chunk_size).__name__}")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size: expected a positive number of tokens, got {chunk_size}")


def accum_dtype_option(accum_dtype: object, weight_dtype: torch.dtype | None = None) -> torch.dtype:
    """The ``accum_dtype`` option (a ``torch.dtype`` or its name) as a dtype: float32 or the weight's dtype
    (any float dtype while the weight is not known yet, in the nn module)."""
    if weight_dtype is None:
        return dtype_option("accum_dtype", accum_dtype, FLOAT_DTYPES)
    return dtype_option("accum_dtype", accum_dtype, (torch.float32, weight_dtype),
                        f"torch.float32 or the weight's dtype {weight_dtype}")


def _check_inputs(hidden: object, weight: object, target: object, bias: object, chunk_size: object,
                  accum_dtype: object) -> torch.dtype:
    """Every tensor and option; returns ``accum_dtype`` as a torch.dtype."""
    check_float_tensor("hidden", hidden)
    check_float_tensor("weight", weight, min_dim=2, max_dim=2)
    check_same_device(("hidden", "weight"), (hidden, weight))
    check_same_dtype(("hidden", "weight"), (hidden, weight))
    if weight.shape[1] != hidden.shape[-1]:
        raise ValueError(f"weight: expected shape [V, {hidden.shape[-1]}] (the hidden size of hidden "
                         f"{tuple(hidden.shape)}), got {tuple(weight.shape)}")
    if bias is not None:
        check_float_tensor("bias", bias, min_dim=1, max_dim=1)
        check_same_device(("weight", "bias"), (weight, bias))
        check_same_dtype(("weight", "bias"), (weight, bias))
        if bias.shape[0] != weight.shape[0]:
            raise ValueError(f"bias: expected shape ({weight.shape[0]},) (the vocabulary of weight "
                             f"{tuple(weight.shape)}), got {tuple(bias.shape)}")
    check_target(target, hidden.shape[:-1], "hidden", hidden)
    check_chunk_size(chunk_size)
    return accum_dtype_option(accum_dtype, weight.dtype)


@replayed_op
def fused_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, *,
                               bias: torch.Tensor | None = None, ignore_index: int = -100,
                               label_smoothing: float = 0.0, reduction: str = "mean", z_loss: float = 0.0,
                               softcap: float | None = None, chunk_size: int | None = None,
                               accum_dtype: torch.dtype = torch.float32,
                               loss_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``cross_entropy(hidden @ weight.T + bias, target)`` without materialising the logits: the LM head
    and its loss, chunked over tokens, every gradient computed in the forward.

    Args:
        hidden: ``[..., H]`` (``[N, H]`` usually) float32, float16 or bfloat16, on CUDA (CPU under the Triton
            interpreter): the last hidden states.
        weight: ``[V, H]``, same dtype and device: the LM head (``lm_head.weight``). An fp32 master weight
            with bf16 activations (autocast) is refused with a TypeError rather than cast silently: pass
            ``weight.to(hidden.dtype)`` (custom ops are not autocast-aware).
        target: ``hidden.shape[:-1]`` int64/int32 class indices in ``[0, V)`` or ``ignore_index``.
        bias: optional ``[V]``, same dtype.
        ignore_index, label_smoothing, reduction, z_loss, softcap: as :func:`cross_entropy` (mean over the
            non-ignored tokens, 0.0 when all are ignored; z-loss included in the returned total).
        chunk_size: tokens per chunk; None picks the most whose logits fit in 256 MiB (1024 tokens at
            vocab 128256, bf16) — in up to 1 GiB with the separate fp32 accumulator, whose final cast
            needs that much anyway — a multiple of 128 (see the module docstring). Larger chunks: fewer,
            longer GEMMs, more memory.
        accum_dtype: ``grad_weight``'s accumulator across chunks: ``torch.float32`` (default: one rounding
            at the end; costs V·H·4 bytes more, 2.1 GB at 128256 × 4096, and V·H·itemsize for the final
            cast) or ``weight.dtype`` (no extra buffer; one rounding per chunk, Liger's default). Measured
            on an H100 at 8192 tokens of the Llama-3-8B head (``benchmarks/checks/flce_memory.py``): extra
            peak 3.22 GB, 40.5 ms forward+backward, ``grad_weight`` relative L2 error 1.28e-3 against fp32
            math (fp32) against 1.38 GB, 40.6 ms, 1.62e-3 (bf16, 1024-token chunks; Liger: 1.18 GB,
            64.3 ms, 1.67e-3). ``kernelworks.patch`` uses the weight's dtype. ``grad_bias`` always
            accumulates in fp32. A dtype's name (``"float32"``) is accepted too.
        loss_dtype: dtype of the returned loss: None (default) for float32, or a ``torch.dtype`` (or its
            name), as :func:`cross_entropy`. Gradients are in the inputs' dtypes either way.

    Returns:
        The loss, computed in float32, in ``loss_dtype`` (float32 by default): a scalar for ``mean``/``sum``,
        ``target``-shaped for ``none``.
        Gradients flow to ``hidden``, ``weight`` and ``bias``. Reduction ``none`` with gradients recomputes
        the logits in the backward (one more projection; the per-token weights must enter before the sum
        over tokens). A target out of range gives a NaN loss for its row, or a ValueError in validation mode,
        as in :func:`cross_entropy`.

    Example::

        loss = kw.fused_linear_cross_entropy(h.view(-1, 4096), lm_head.weight, labels.view(-1))
        loss.backward()                            # h: [B, T, 4096] bf16, lm_head.weight: [128256, 4096]
    """
    accum_dtype = _check_inputs(hidden, weight, target, bias, chunk_size, accum_dtype)
    check_options(ignore_index, label_smoothing, reduction, z_loss, softcap)
    loss_dtype = loss_dtype_option(loss_dtype)
    grad_on = torch.is_grad_enabled()
    needs = (grad_on and hidden.requires_grad, grad_on and weight.requires_grad,
             grad_on and bias is not None and bias.requires_grad)
    args = (hidden, weight, target, bias, ignore_index, float(label_smoothing), reduction, float(z_loss),
            None if softcap is None else float(softcap), chunk_size or 0,
            torch.float32 if weight.dtype == torch.float32 else accum_dtype)
    if not any(needs) and not torch.compiler.is_compiling():
        return as_loss_dtype(_forward(*args, False, False, False)[0], loss_dtype)
    return as_loss_dtype(_FUSED_LINEAR_CROSS_ENTROPY(*args, *needs)[0], loss_dtype)
