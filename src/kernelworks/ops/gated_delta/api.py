"""Public ``gated_delta_decode`` / ``gated_delta_prefill``, their validation, and the custom ops behind them.

``kernelworks::gated_delta_decode`` is a forward-only ``torch.library`` custom op (it mutates its ``state``
argument), taken while ``torch.compile`` traces; eager calls launch the kernel directly (a custom op costs
~100 µs of host time per call, more than a decode step takes on the GPU). It has no backward: a call that
would need one (grad mode on and an input requiring grad) raises ``NotImplementedError`` rather than
return an output gradients silently stop at.

``gated_delta_prefill`` is a :class:`~kernelworks.runtime.torch_op.TorchOp`: ``kernelworks::gated_delta_prefill``
(``→ (o, final_state, T, G, h, U)``, the last four the chunk inverses, decays, chunk-start states and corrected
values kept for the backward; h and U only for a call that records a graph) +
``kernelworks::gated_delta_prefill_backward`` under ``torch.compile``, an autograd Function in eager mode;
gradients for q, k, v, g, beta, write_strength and initial_state (``prefill_bwd_chunked.py`` for 16-bit
inputs, ``prefill_bwd.py`` for fp32).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

import torch

from kernelworks.ops.gated_delta.decode import gated_delta_decode_fwd
from kernelworks.ops.gated_delta.prefill_bwd import gated_delta_prefill_bwd
from kernelworks.ops.gated_delta.prefill_bwd_chunked import gated_delta_prefill_bwd_chunked, states_dtype
from kernelworks.ops.gated_delta.prefill_chunked import (
    chunk_slots,
    chunked_prefill_fwd,
    kernel_chunk,
    prefill_segments,
    segmented_prefill_fwd,
)
from kernelworks.ops.gated_delta.prefill_fwd import gated_delta_prefill_fwd
from kernelworks.runtime.alloc import empty
from kernelworks.runtime.device import interpreter_active, interpreter_dot_operand
from kernelworks.runtime.indices import check_index_values, check_offsets, validation_enabled
from kernelworks.runtime.replay import replayed_op
from kernelworks.runtime.torch_op import ForwardOp, TorchOp
from kernelworks.runtime.validate import (
    check_dtype,
    check_float_tensor,
    check_last_dim_contiguous,
    check_real,
    check_same_device,
    check_same_dtype,
    check_tensor,
    refuse_autograd,
)

MAX_HEAD_DIM = 256
"""K and V up to 256: the kernels hold a whole K row of the state (and, in the prefill, of q and k) in
registers."""

_INDEX_DTYPES = (torch.int32, torch.int64)
# ------------------------------------------------------------------------------------------- custom ops


def _decode_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
               state: torch.Tensor, state_indices: torch.Tensor | None, scale: float, A_log: torch.Tensor | None,
               dt_bias: torch.Tensor | None, use_qk_l2norm: bool,
               write_strength: torch.Tensor | None) -> torch.Tensor:
    return gated_delta_decode_fwd(q, k, v, g, beta, state, state_indices, scale, A_log, dt_bias, use_qk_l2norm,
                                  write_strength)


def _decode_fake(q, k, v, g, beta, state, state_indices, scale, A_log, dt_bias, use_qk_l2norm, write_strength):
    return v.new_empty(v.shape)


_decode = ForwardOp("gated_delta_decode", _decode_forward, fake=_decode_fake, mutates_args=("state",))
"""``kernelworks::gated_delta_decode``: forward only, updates ``state`` in place."""


GPU_CHECKED_HEADS = {64, 128}
"""Head sizes (K and V) whose chunk-parallel backward is checked on the GPU (the GPU tests of
test_gated_delta_bwd_chunked); others take the sequential backward there."""


def _keeps_states(keep_states: bool, q: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor | None) -> bool:
    """Whether a forward asked to ``keep_states`` stores its chunk-start states and U for the backward: the
    16-bit path's single fused scan (not the segmented forward, not fp32), where the chunk-parallel backward
    takes them (:func:`_prefill_backward`)."""
    if not keep_states or q.dtype == torch.float32:
        return False
    # int(): the fake runs this on symbolic sizes under torch.compile(dynamic=True), which do not hash
    if not (interpreter_active() or (int(q.shape[3]) in GPU_CHECKED_HEADS and int(v.shape[3]) in GPU_CHECKED_HEADS)):
        return False
    return cu_seqlens is not None or prefill_segments(q.shape[0], q.shape[1], v.shape[2], v.shape[3], v.device) == 1


def _kept_states_shape(q: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor | None,
                       chunk_size: int) -> tuple[int, int, int, int]:
    """``[n_slots, H_v, V, K]``: the chunk-start states of ``chunked_prefill_fwd`` (one row a chunk; varlen:
    ``cdiv(T, C) + N`` slots, :func:`~kernelworks.ops.gated_delta.prefill_chunked._varlen_chunks`)."""
    B, T, _, K = q.shape
    return (chunk_slots(B, T, kernel_chunk(chunk_size), cu_seqlens), v.shape[2], v.shape[3], K)


def _prefill_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                     write_strength: torch.Tensor | None, initial_state: torch.Tensor | None,
                     output_final_state: bool, cu_seqlens: torch.Tensor | None, scale: float,
                     chunk_size: int, keep_states: bool,
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(o, final_state, T, G, h, U)``: final_state empty without ``output_final_state``; ``T`` ``[B, T, H_v,
    C]`` and ``G`` ``[B, T, H_v]`` the chunk inverses and log2 decays the 16-bit forward computed (kept for
    the backward, which then skips recomputing them; the fp32 path returns them empty); ``h`` ``[n_slots,
    H_v, V, K]`` and ``U`` ``[B, T, H_v, V]`` the chunk-start states and corrected values, stored by the scan
    where ``keep_states`` asks and :func:`_keeps_states` allows (the backward then skips its recompute
    scan), else empty. bf16 under the interpreter (whose ``tl.dot`` on bf16 is wrong) runs the 16-bit path
    on fp32 operands and rounds o, T, h and U to bf16 after, as the GPU stores them."""
    def no_tensor() -> torch.Tensor:  # a fresh one each time: custom-op outputs must not alias
        return empty((0,), dtype=torch.float32, device=v.device)

    dtype = v.dtype
    keep = _keeps_states(keep_states, q, v, cu_seqlens)
    q, k, v = (interpreter_dot_operand(t) for t in (q, k, v))
    if dtype != torch.float32:
        # 16-bit inputs: the chunk-parallel kernels (prefill_chunked.py). fp32 keeps the sequential-scan
        # kernel, whose fp32 dots the chunk-parallel ones cannot hold in registers (they spill ~4.8 KB).
        # the fused form: chunk inverses, then one scan that forms U and the output (no W, Ũ, U or chunk
        # state through memory). Single-stage builds of it were miscompiled on sm_90 by triton 3.6 (invalid
        # shared-memory reads, an illegal address); the 2-stage plan the GPU gets is sanitizer-clean.
        # A dense batch too small to fill the GPU runs its sequences' segments in parallel.
        n_seg = prefill_segments(q.shape[0], q.shape[1], v.shape[2], v.shape[3], v.device) if cu_seqlens is None else 1
        if n_seg > 1:
            o, final, saved = segmented_prefill_fwd(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                                                    output_final_state=output_final_state, n_segments=n_seg,
                                                    chunk_size=chunk_size, write_strength=write_strength)
        else:
            # keeping the states for the backward costs the scan their stores (~3× v's bytes at K = 128) and
            # spares the backward a second serial walk over every chunk
            kept_dt = states_dtype(dtype, q.shape[3], v.shape[3]) if keep else None
            o, final, saved = chunked_prefill_fwd(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                                                  output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                                                  chunk_size=chunk_size, write_strength=write_strength,
                                                  fuse_output=True, store_states=keep, states_dtype=kept_dt)
        h, u = (saved["h"], saved["v_new"].to(dtype)) if keep else (no_tensor(), no_tensor())
        # the custom op's schema returns tensors: empty where there is none, as the fake says
        return (o.to(dtype), (final if final is not None else no_tensor()), saved["T"].to(dtype), saved["G"],
                h, u)
    o, final = gated_delta_prefill_fwd(q, k, v, g, beta, write_strength, initial_state, output_final_state,
                                       cu_seqlens, scale, chunk_size)
    return o, final, no_tensor(), no_tensor(), no_tensor(), no_tensor()


def _prefill_forward_fake(q, k, v, g, beta, write_strength, initial_state, output_final_state, cu_seqlens, scale,
                          chunk_size, keep_states):
    n = q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    shape = (n, v.shape[2], v.shape[3], q.shape[3]) if output_final_state else (0,)
    none = [v.new_empty((0,), dtype=torch.float32) for _ in range(4)]
    if q.dtype == torch.float32:
        return (v.new_empty(v.shape), v.new_empty(shape, dtype=torch.float32), *none)
    kept = ((v.new_empty(_kept_states_shape(q, v, cu_seqlens, chunk_size),
                         dtype=states_dtype(v.dtype, q.shape[3], v.shape[3])), v.new_empty(v.shape))
            if _keeps_states(keep_states, q, v, cu_seqlens) else none[2:])
    return (v.new_empty(v.shape), v.new_empty(shape, dtype=torch.float32),
            v.new_empty((*v.shape[:3], kernel_chunk(chunk_size))), v.new_empty(v.shape[:3], dtype=torch.float32),
            *kept)


def _prefill_backward(do: torch.Tensor, dht: torch.Tensor | None, q: torch.Tensor, k: torch.Tensor,
                      v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, write_strength: torch.Tensor | None,
                      initial_state: torch.Tensor | None, cu_seqlens: torch.Tensor | None, scale: float,
                      chunk_size: int, need_dh0: bool, chunk_T: torch.Tensor | None,
                      chunk_G: torch.Tensor | None, chunk_h: torch.Tensor | None = None,
                      chunk_U: torch.Tensor | None = None) -> list[torch.Tensor]:
    """``[dq, dk, dv, dg, dbeta]`` + ``[dw]`` (with write_strength) + ``[dh0]`` (when ``need_dh0``).

    16-bit inputs (the chunk-parallel forward's): the chunk-parallel backward (``prefill_bwd_chunked.py``:
    the forward's intermediates recomputed, a reverse dS scan, then two kernels parallel over chunks).
    fp32 inputs keep the sequential reverse-scan kernel of ``prefill_bwd.py`` (the forward's fp32 path is
    the sequential one too; the chunk kernels' fp32 operand tiles would not fit in registers).

    On a GPU the chunk-parallel backward is taken only for the head sizes checked there, K and V in
    {64, 128} (H100, triton 3.6: dense, tails, varlen, grouped heads, saturated gates): at K = 16, V = 32
    its dk/dg are wrong on the H100 (a triton miscompile: right in the interpreter; once an illegal
    address), so other head sizes keep the sequential backward. The interpreter (CI) always runs the
    chunk-parallel one, which is correct there at every size. ``chunk_T``/``chunk_G``: the forward's chunk
    inverses and log2 decays (or None/empty), which spare the chunk-parallel backward their recompute;
    ``chunk_h``/``chunk_U``: the chunk-start states and U the forward kept (or None/empty), which spare it
    the recompute scan too."""
    K, V = q.shape[-1], v.shape[-1]
    dtype = q.dtype
    if dtype != torch.float32 and not (interpreter_active() or {K, V} <= GPU_CHECKED_HEADS):
        return gated_delta_prefill_bwd(do, dht, q, k, v, g, beta, write_strength, initial_state, cu_seqlens,
                                       scale, chunk_size, need_dh0)
    # bf16 under the interpreter: fp32 operands (its bf16 tl.dot is wrong), gradients rounded after
    do, q, k, v, chunk_T, chunk_h, chunk_U = (interpreter_dot_operand(t) if t is not None else None
                                              for t in (do, q, k, v, chunk_T, chunk_h, chunk_U))
    args = (do, dht, q, k, v, g, beta, write_strength, initial_state, cu_seqlens, scale, chunk_size, need_dh0)
    if dtype == torch.float32:
        return gated_delta_prefill_bwd(*args)
    saved = chunk_T is not None and chunk_G is not None and chunk_T.numel() > 0
    kept = saved and chunk_h is not None and chunk_U is not None and chunk_h.numel() > 0
    out = gated_delta_prefill_bwd_chunked(*args, inverses=(chunk_T, chunk_G) if saved else None,
                                          states=(chunk_h, chunk_U) if kept else None)
    return [t.to(dtype) for t in out[:3]] + out[3:]


def _prefill_backward_fake(do, dht, q, k, v, g, beta, write_strength, initial_state, cu_seqlens, scale, chunk_size,
                           need_dh0, chunk_T, chunk_G, chunk_h=None, chunk_U=None):
    out = [q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), g.new_empty(g.shape),
           beta.new_empty(beta.shape)]
    if write_strength is not None:
        out.append(write_strength.new_empty(write_strength.shape))
    if need_dh0:
        out.append(initial_state.new_empty(initial_state.shape, dtype=torch.float32))
    return out


def _prefill_setup(ctx, inputs, output) -> None:
    q, k, v, g, beta, write_strength, initial_state, output_final_state, cu_seqlens, scale, chunk_size = inputs[:11]
    # the inputs, the chunk inverses (T, G: [B, T, H_v, C + 1], half of v's bytes at C = 64, V = 128) and,
    # where the forward kept them, the chunk-start states and U (3× v's bytes at K = 128: the backward then
    # skips its recompute scan; empty otherwise)
    _, _, chunk_T, chunk_G, chunk_h, chunk_U = output
    ctx.mark_non_differentiable(chunk_T, chunk_G, chunk_h, chunk_U)
    ctx.save_for_backward(q, k, v, g, beta, write_strength, initial_state, cu_seqlens, chunk_T, chunk_G, chunk_h,
                          chunk_U)
    ctx.scale, ctx.chunk_size, ctx.output_final_state = scale, chunk_size, output_final_state
    ctx.set_materialize_grads(False)


def _prefill_input_grads(ctx, grads: tuple, backward) -> tuple:
    """Gradients for ``(q, k, v, g, beta, write_strength, initial_state, output_final_state, cu_seqlens,
    scale, chunk_size, keep_states)``."""
    do, dht = grads[:2]  # the last four outputs (T, G, h, U) are not differentiable
    if not ctx.output_final_state:
        dht = None
    if do is None and dht is None:
        return (None,) * 12
    q, k, v, g, beta, write_strength, initial_state, cu_seqlens, chunk_T, chunk_G, chunk_h, chunk_U = ctx.saved_tensors
    if do is None:
        do = torch.zeros_like(v)
    need_dh0 = initial_state is not None and ctx.needs_input_grad[6]
    out = list(backward(do, dht, q, k, v, g, beta, write_strength, initial_state, cu_seqlens, ctx.scale,
                        ctx.chunk_size, need_dh0, chunk_T, chunk_G, chunk_h, chunk_U))
    dq, dk, dv, dg, dbeta = out[:5]
    dw = out[5] if write_strength is not None else None
    dh0 = out[-1] if need_dh0 else None
    need = ctx.needs_input_grad
    return (dq if need[0] else None, dk if need[1] else None, dv if need[2] else None, dg if need[3] else None,
            dbeta if need[4] else None, dw if need[5] else None, dh0, None, None, None, None, None)


_prefill = TorchOp("gated_delta_prefill", forward=_prefill_forward, forward_fake=_prefill_forward_fake,
                   backward=_prefill_backward, backward_fake=_prefill_backward_fake, setup_context=_prefill_setup,
                   input_grads=_prefill_input_grads)
"""``kernelworks::gated_delta_prefill`` (+ ``_backward``): ``(q, k, v, g, beta, write_strength, initial_state,
output_final_state, cu_seqlens, scale, chunk_size, keep_states) → (o, final_state, T, G, h, U)``."""

_prefill_op = _prefill.custom_op


# ------------------------------------------------------------------------------------------- validation


def _check_shape(name: str, t: torch.Tensor, want: tuple[int, ...], what: str) -> None:
    if tuple(t.shape) != want:
        raise ValueError(f"{name}: expected shape {want} ({what}), got {tuple(t.shape)}")


def _check_heads(q: torch.Tensor, v: torch.Tensor) -> None:
    h_qk, h_v = q.shape[-2], v.shape[-2]
    if h_v % h_qk:
        raise ValueError(f"v: expected a number of value heads that is a multiple of q's heads {h_qk} "
                         f"(value head h reads q/k head h // (H_v / H_qk)), got {h_v}")
    for name, d in (("q", q.shape[-1]), ("v", v.shape[-1])):
        if d > MAX_HEAD_DIM:
            raise ValueError(f"{name}: expected a head dim of at most {MAX_HEAD_DIM}, got {d}")


def _check_gates(lead: tuple[int, ...], names: tuple[str, ...], tensors: tuple, device_of: torch.Tensor,
                 what: str) -> None:
    for name, t in zip(names, tensors):
        if t is None:
            continue
        check_float_tensor(name, t, min_dim=len(lead), max_dim=len(lead))
        _check_shape(name, t, lead, what)
        check_same_device(("q", name), (device_of, t))


def _check_fused_gate(A_log: object, dt_bias: object, h_v: int, q: torch.Tensor) -> None:
    if A_log is None:
        if dt_bias is not None:
            raise ValueError("dt_bias: given without A_log; the fused gate needs A_log (pass both, or "
                             "neither and a ready g)")
        return
    for name, t in (("A_log", A_log), ("dt_bias", dt_bias)):
        if t is None:
            continue
        check_float_tensor(name, t, min_dim=1, max_dim=1)
        _check_shape(name, t, (h_v,), "one per value head")
        check_same_device(("q", name), (q, t))


def _check_qkv(q: object, k: object, v: object, rank: int) -> None:
    check_float_tensor("q", q, min_dim=rank, max_dim=rank)
    check_float_tensor("k", k, min_dim=rank, max_dim=rank)
    check_float_tensor("v", v, min_dim=rank, max_dim=rank)
    check_same_dtype(("q", "k", "v"), (q, k, v))
    check_same_device(("q", "k", "v"), (q, k, v))
    if tuple(k.shape) != tuple(q.shape):
        raise ValueError(f"k: expected q's shape {tuple(q.shape)}, got {tuple(k.shape)}")
    if tuple(v.shape[:-2]) != tuple(q.shape[:-2]):
        raise ValueError(f"v: expected leading dims {tuple(q.shape[:-2])} like q's, got shape {tuple(v.shape)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_last_dim_contiguous(name, t)
    _check_heads(q, v)


def _check_slots(state_indices: torch.Tensor, slots: int) -> None:
    """Validation mode only: live (non-negative) pool slots are ``< slots`` and distinct."""
    if not validation_enabled():
        return
    check_index_values("state_indices", state_indices, 0, slots, mask=state_indices >= 0)
    live = state_indices[state_indices >= 0].sort().values
    twice = live[1:][live[1:] == live[:-1]]
    if twice.numel():
        raise ValueError(f"state_indices: expected distinct pool slots (two sequences on one slot race), got "
                         f"slot {int(twice[0])} more than once")


def _check_chunk_size(chunk_size: object) -> int:
    """An integer (not a float equal to one, not a bool: the kernels take it as a compile-time size)."""
    try:
        if isinstance(chunk_size, bool):
            raise TypeError
        size = operator.index(chunk_size)
    except TypeError:
        raise TypeError(f"chunk_size: expected an int (16, 32 or 64), got {type(chunk_size).__name__} "
                        f"{chunk_size!r}") from None
    if size not in (16, 32, 64):
        raise ValueError(f"chunk_size: expected 16, 32 or 64, got {size}")
    return size


def _scale(scale: object, K: int) -> float:
    return K ** -0.5 if scale is None else check_real("scale", scale)


# ------------------------------------------------------------------------------------------- public API


def _bumps_the_pool_version(op: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``op`` followed, in eager mode, by a bump of its ``state`` pool's version counter, as torch's own
    in-place ops bump theirs: a tensor saved for a backward (a prefill's ``initial_state``) that the step
    overwrote then fails loudly there instead of being read with its new values. Outside the replayed call,
    which repeats launches only; under ``torch.compile`` the custom op's ``mutates_args`` does it."""

    @functools.wraps(op)
    def bumped(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = op(*args, **kwargs)
        if not torch.compiler.is_compiling():
            torch.autograd.graph.increment_version(args[5] if len(args) > 5 else kwargs["state"])
        return out
    return bumped


@_bumps_the_pool_version
@replayed_op
def gated_delta_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                       state: torch.Tensor, *, state_indices: torch.Tensor | None = None,
                       scale: float | None = None, A_log: torch.Tensor | None = None,
                       dt_bias: torch.Tensor | None = None, use_qk_l2norm: bool = False,
                       write_strength: torch.Tensor | None = None) -> torch.Tensor:
    """One Gated DeltaNet decode step for a batch of sequences, their states updated in place in a pool.

    Per sequence b and value head h, with ``S = state[state_indices[b], h]`` (``[V, K]``, float32):
    ``S ← exp(g)·S·(I − β k kᵀ) + w·v kᵀ`` (``w = beta`` unless ``write_strength``), then
    ``o = scale · S q``. One kernel reads and writes each state row once (decay, erase, write and output
    fused); no gather/scatter of the pool.

    Args:
        q, k: ``[B, H_qk, K]`` float32/float16/bfloat16 (unit stride in the last dim). K ≤ 256.
        v: ``[B, H_v, V]``, q's dtype; ``H_v`` a multiple of ``H_qk``: value head h reads q/k head
            ``h // (H_v / H_qk)``.
        g: ``[B, H_v]`` log-decay (``α = exp(g)``), any float dtype. With ``A_log`` given it is instead
            the raw gate input ``a``: ``g = −exp(A_log) · softplus(a + dt_bias)`` is computed in-kernel.
        beta: ``[B, H_v]`` erase (and write) strength in [0, 1]. With ``A_log`` it is the raw logit ``b``
            and ``beta = sigmoid(b)``.
        state: the pool ``[slots, H_v, V, K]`` float32 (unit K stride), updated IN PLACE.
        state_indices: ``[B]`` int32/int64 (any stride), the pool row of each sequence (default
            ``arange(B)``). A negative index marks a padding row (vLLM's ``PAD_SLOT_ID``): its output is
            zero and no slot is touched. Live indices must be ``< slots`` and distinct: in validation mode
            (:func:`kernelworks.validation`) a ValueError names a bad one; otherwise an index ``≥ slots`` is
            skipped like padding (never a write outside the pool), and two rows on one slot race.
        scale: output scale, default ``K ** -0.5``.
        A_log, dt_bias: ``[H_v]`` fused-gate parameters (Qwen3-Next's; any stride); ``dt_bias`` optional.
        use_qk_l2norm: L2-normalise q and k in-kernel (``x / √(Σx² + 1e-6)``).
        write_strength: ``[B, H_v]`` a separate write strength ``dt`` (``S ← α S (I − β k kᵀ) + dt·v kᵀ``),
            used as given; ``beta`` when None.

    Returns:
        o ``[B, H_v, V]`` in v's dtype (fp32 math, one rounding). Inference only: no autograd (a call
        with grad mode on and an input requiring grad raises ``NotImplementedError``).

    Example::

        o = kw.gated_delta_decode(q, k, v, g, beta, pool, state_indices=slots)  # pool updated in place
        o = kw.gated_delta_decode(q, k, v, a, b, pool, A_log=A_log, dt_bias=dt_bias, use_qk_l2norm=True)
    """
    _check_qkv(q, k, v, 3)
    B, _, K = q.shape
    H_v, V = v.shape[1], v.shape[2]
    _check_gates((B, H_v), ("g", "beta", "write_strength"), (g, beta, write_strength), q,
                 "[batch, value heads]")
    _check_fused_gate(A_log, dt_bias, H_v, q)
    check_tensor("state", state, min_dim=4, max_dim=4)
    check_dtype("state", state, (torch.float32,))
    check_same_device(("q", "state"), (q, state))
    if tuple(state.shape[1:]) != (H_v, V, K):
        raise ValueError(f"state: expected a pool [slots, {H_v}, {V}, {K}] ([slots, H_v, V, K]), "
                         f"got {tuple(state.shape)}")
    check_last_dim_contiguous("state", state)
    if state_indices is not None:
        check_tensor("state_indices", state_indices, min_dim=1, max_dim=1)
        check_dtype("state_indices", state_indices, _INDEX_DTYPES)
        _check_shape("state_indices", state_indices, (B,), "one pool row per sequence")
        check_same_device(("q", "state_indices"), (q, state_indices))
        _check_slots(state_indices, state.shape[0])
    elif state.shape[0] < B:
        raise ValueError(f"state: without state_indices sequence b uses slot b, so the pool needs at least "
                         f"{B} slots, got {state.shape[0]}")
    scale = _scale(scale, K)
    use_qk_l2norm = bool(use_qk_l2norm)
    tensors = [q, k, v, g, beta, state, state_indices, A_log, dt_bias, write_strength]
    refuse_autograd("gated_delta_decode", **dict(zip(
        ("q", "k", "v", "g", "beta", "state", "state_indices", "A_log", "dt_bias", "write_strength"), tensors)))
    return _decode(q, k, v, g, beta, state, state_indices, scale, A_log, dt_bias, use_qk_l2norm, write_strength)


@replayed_op
def gated_delta_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                        beta: torch.Tensor, *, initial_state: torch.Tensor | None = None,
                        output_final_state: bool = False, cu_seqlens: torch.Tensor | None = None,
                        scale: float | None = None, chunk_size: int = 64,
                        write_strength: torch.Tensor | None = None, keep_states: bool = True,
                        ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Gated DeltaNet over whole sequences (prefill), chunkwise-parallel, with autograd.

    The recurrence ``S_t = exp(g_t)·S_{t−1}·(I − β_t k_t k_tᵀ) + w_t·v_t k_tᵀ``, ``o_t = scale·S_t q_t``
    (``w = beta`` unless ``write_strength``), computed in chunks of ``chunk_size`` tokens (UT transform
    within a chunk, the state carried across chunks in fp32 registers: no per-chunk state in memory).

    Args:
        q, k: ``[B, T, H_qk, K]`` float32/float16/bfloat16 (unit stride in the last dim; other strides
            free). K ≤ 256. q and k are used as given (normalise them first if the model does).
        v: ``[B, T, H_v, V]``, q's dtype; ``H_v`` a multiple of ``H_qk`` (value head h reads q/k head
            ``h // (H_v / H_qk)``).
        g: ``[B, T, H_v]`` log-decay (``α = exp(g)``; g ≤ 0), any float dtype, used in fp32.
        beta: ``[B, T, H_v]`` erase (and write) strength in [0, 1].
        initial_state: ``[N, H_v, V, K]`` float32, N = B (or the number of sequences with ``cu_seqlens``);
            zero when None. (Copied first when not contiguous.)
        output_final_state: also return each sequence's final state.
        cu_seqlens: ``[N + 1]`` int32/int64 (any stride) cumulative lengths of packed sequences, with
            ``B = 1``: sequence n is tokens ``[cu[n], cu[n + 1])``, the state restarting at each;
            ``cu[0] = 0``, non-decreasing, ``cu[-1] ≤ T`` (tokens past it are padding: o and their
            gradients are zero, and nothing in them reaches a sequence). Checked on the host in validation
            mode (:func:`kernelworks.validation`: a ValueError names the bad entry); otherwise the kernels
            clamp the entries into ``[0, T]`` and take a running maximum (an entry below the one before
            it makes an empty sequence), so no value reaches memory outside the tensors.
        scale: output scale, default ``K ** -0.5``.
        chunk_size: an int, 16, 32 or 64 tokens per chunk (default 64). The chunk is a blocking choice (every size
            computes the same recurrence, up to rounding): on the GPU the 16-bit kernels always run
            64-token chunks (the sequential fp32 path 16); the interpreter runs the requested one.
        write_strength: ``[B, T, H_v]`` a separate write strength; ``beta`` when None.
        keep_states: in a call that records a graph, keep the scan's chunk-start states and corrected values
            for the backward (the default: 3× v's bytes at K = 128, held until the backward); False makes
            the backward recompute them in one more serial scan instead (less memory, a slower backward:
            3.97 against 3.42 ms forward + backward at B 1, T 16k, 32 value heads on the H200). No effect on
            calls that record no graph. Under non-reentrant activation checkpointing the first forward
            records one too, and its stores are dropped with the other saved tensors (the recomputed
            forward keeps them for the backward).

    Returns:
        ``(o, final_state)``: o ``[B, T, H_v, V]`` in v's dtype; final_state ``[N, H_v, V, K]`` float32,
        or None without ``output_final_state``. Differentiable in q, k, v, g, beta, write_strength and
        initial_state (also through final_state), deterministically (no atomics). The forward keeps its
        chunk inverses for the backward (``[B, T, H_v, 64]`` in v's dtype plus ``[B, T, H_v]`` fp32). For
        16-bit inputs with K, V ∈ {64, 128} (and everything under the interpreter), a call that records a
        graph also keeps (unless ``keep_states=False``) the scan's chunk-start states and corrected values
        (``[n_chunks, H_v, V, K]`` and ``[B, T, H_v, V]`` in v's dtype; the segmented forward of a long
        batch that leaves most of the GPU idle keeps none, and its backward recomputes them in one more
        scan); the backward then runs a reverse state-gradient scan and two chunk-parallel
        kernels (``prefill_bwd_chunked.py``); fp32 inputs and other head sizes on the GPU take the
        sequential reverse walk of ``prefill_bwd.py`` (much slower: 21 ms against 2.0 ms at B8 T4096 H16
        on the H100).

    Example::

        o, _ = kw.gated_delta_prefill(q, k, v, g, beta)                     # q: [8, 4096, 16, 128] bf16
        # packed sequences: q [1, T_total, 16, 128], cu = [0, len_0, len_0 + len_1, …] (int32)
        o, s = kw.gated_delta_prefill(q1, k1, v1, g1, beta1, cu_seqlens=cu, output_final_state=True)
    """
    _check_qkv(q, k, v, 4)
    B, T, _, K = q.shape
    H_v, V = v.shape[2], v.shape[3]
    _check_gates((B, T, H_v), ("g", "beta", "write_strength"), (g, beta, write_strength), q,
                 "[batch, tokens, value heads]")
    n_seq = B
    if cu_seqlens is not None:
        check_tensor("cu_seqlens", cu_seqlens, min_dim=1, max_dim=1)
        check_dtype("cu_seqlens", cu_seqlens, _INDEX_DTYPES)
        check_same_device(("q", "cu_seqlens"), (q, cu_seqlens))
        if cu_seqlens.shape[0] < 2:
            raise ValueError(f"cu_seqlens: expected at least 2 entries ([N + 1]), got {cu_seqlens.shape[0]}")
        if B != 1:
            raise ValueError(f"q: with cu_seqlens the sequences are packed into batch 1, got batch {B}")
        check_offsets("cu_seqlens", cu_seqlens, T)
        n_seq = cu_seqlens.shape[0] - 1
    if initial_state is not None:
        check_tensor("initial_state", initial_state, min_dim=4, max_dim=4)
        check_dtype("initial_state", initial_state, (torch.float32,))
        check_same_device(("q", "initial_state"), (q, initial_state))
        _check_shape("initial_state", initial_state, (n_seq, H_v, V, K), "[N, H_v, V, K]")
        initial_state = initial_state.contiguous()
    chunk_size = _check_chunk_size(chunk_size)
    scale = _scale(scale, K)
    output_final_state = bool(output_final_state)
    if not isinstance(keep_states, bool):
        raise TypeError(f"keep_states: expected a bool, got {type(keep_states).__name__}")
    # a call that records a graph keeps the scan's chunk-start states for its backward (no recompute scan)
    keep_states = keep_states and torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (q, k, v, g, beta, write_strength, initial_state))
    o, final = _prefill(q, k, v, g, beta, write_strength, initial_state, output_final_state, cu_seqlens,
                        scale, chunk_size, keep_states)[:2]
    return o, (final if output_final_state else None)
