"""Public ``flash_attention`` and ``decode_attention``: validation and the custom ops behind them.

``flash_attention`` goes through one :class:`~kernelworks.runtime.torch_op.TorchOp`,
``kernelworks::flash_attention`` ``(q, k, v, cu_q, cu_k, max_q, max_k, scale, left, right, softcap) →
(o, lse)`` (+ ``_backward``), always in the ``[batch, seq, heads, dim]`` layout: SDPA's ``[batch, heads,
seq, dim]`` is transposed as a view (strides go to the kernels, nothing is copied) and the outputs are
transposed back. ``lse`` is differentiable (its gradient only shifts Δ in the backward).
``decode_attention`` is forward-only: ``kernelworks::decode_attention`` (a
:class:`~kernelworks.runtime.torch_op.ForwardOp`). ``flash_attention`` calls shaped like decoding (a few
queries over a longer dense cache, inference) go to the same split-KV kernel, reading the dense K/V as one
page per sequence (``kernelworks::dense_decode_attention``).
"""

from __future__ import annotations

import math

import torch

from kernelworks.ops.attention.backward import attention_bwd
from kernelworks.ops.attention.decode import decode_fwd, dense_decode_fwd
from kernelworks.ops.attention.forward import MAX_HEAD_DIM, attention_fwd
from kernelworks.ops.attention.reference import window_bounds
from kernelworks.runtime.indices import (
    check_index_tensor,
    check_index_values,
    check_offsets,
    validation,
    validation_enabled,
)
from kernelworks.runtime.replay import replayed_op
from kernelworks.runtime.torch_op import ForwardOp, TorchOp
from kernelworks.runtime.validate import (
    check_float_tensor,
    check_real,
    check_same_device,
    check_same_dtype,
    refuse_autograd,
)

LAYOUTS = ("bshd", "bhsd")
MAX_GRID_Y = 65535
"""CUDA's limit on a grid's second axis, which carries batch × heads."""

# ------------------------------------------------------------------------------------------- custom ops


def _unit_d(t: torch.Tensor) -> torch.Tensor:
    # the kernels read head_dim as unit-stride vectors; any other stride is copied (rare: a view that
    # transposes the head dim itself)
    return t if t.stride(-1) == 1 or t.shape[-1] == 1 else t.contiguous()


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: torch.Tensor | None,
             cu_k: torch.Tensor | None, max_q: int, max_k: int, scale: float, left: int, right: int,
             softcap: float) -> tuple[torch.Tensor, torch.Tensor]:
    return attention_fwd(_unit_d(q), _unit_d(k), _unit_d(v), cu_q, cu_k, max_q, max_k, scale, left, right, softcap)


def _lse_shape(q: torch.Tensor, varlen: bool) -> tuple[int, ...]:
    return (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])


def _forward_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: torch.Tensor | None,
                  cu_k: torch.Tensor | None, max_q: int, max_k: int, scale: float, left: int, right: int,
                  softcap: float) -> tuple[torch.Tensor, torch.Tensor]:
    return q.new_empty(q.shape), q.new_empty(_lse_shape(q, cu_q is not None), dtype=torch.float32)


def _backward(do: torch.Tensor, dlse: torch.Tensor | None, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              o: torch.Tensor, lse: torch.Tensor, cu_q: torch.Tensor | None, cu_k: torch.Tensor | None,
              max_q: int, max_k: int, scale: float, left: int, right: int,
              softcap: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return attention_bwd(_unit_d(do), dlse, _unit_d(q), _unit_d(k), _unit_d(v), o, lse, cu_q, cu_k, max_q, max_k,
                         scale, left, right, softcap)


def _backward_fake(do: torch.Tensor, dlse: torch.Tensor | None, q: torch.Tensor, k: torch.Tensor,
                   v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor, cu_q: torch.Tensor | None,
                   cu_k: torch.Tensor | None, max_q: int, max_k: int, scale: float, left: int, right: int,
                   softcap: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup(ctx, inputs, output) -> None:
    q, k, v, cu_q, cu_k, max_q, max_k, scale, left, right, softcap = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k)
    ctx.args = (max_q, max_k, scale, left, right, softcap)
    ctx.set_materialize_grads(False)


def _input_grads(ctx, grads: tuple, backward) -> tuple:
    """Gradients for ``(q, k, v, cu_q, cu_k, max_q, max_k, scale, left, right, softcap)``."""
    do, dlse = grads
    q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
    if do is None and dlse is None:
        return (None,) * 11
    if do is None:
        do = torch.zeros_like(o)
    dq, dk, dv = backward(do, dlse, q, k, v, o, lse, cu_q, cu_k, *ctx.args)
    return dq, dk, dv, *(None,) * 8


_flash = TorchOp("flash_attention", forward=_forward, forward_fake=_forward_fake, backward=_backward,
                 backward_fake=_backward_fake, setup_context=_setup, input_grads=_input_grads)
"""``kernelworks::flash_attention`` (+ ``_backward``)."""


def _decode_fake(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                 context_lens: torch.Tensor, scale: float, softcap: float) -> torch.Tensor:
    return q.new_empty(q.shape)


_decode = ForwardOp("decode_attention", decode_fwd, fake=_decode_fake)
"""``kernelworks::decode_attention``: paged cache, forward only."""


def _dense_decode_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                       softcap: float) -> torch.Tensor:
    return q.new_empty(q.shape)


_dense_decode = ForwardOp("dense_decode_attention", dense_decode_fwd, fake=_dense_decode_fake)
"""``kernelworks::dense_decode_attention``: :func:`flash_attention`'s decode shapes on the split-KV kernel."""

DECODE_MAX_Q = 16
"""Longest ``seq_q`` :func:`flash_attention` hands to the split-KV decode kernel (inference, no window)."""
DECODE_MIN_KV = 64
"""Shortest ``seq_k`` it does so for: below it the flash kernel's one tile holds every key anyway."""
DECODE_MAX_ROWS = 64
"""Most query rows (``seq_q × heads_q / heads_kv``) the decode kernel packs into one tile on this route; more
(many new tokens with a wide GQA group) stay on the flash kernel, whose tiles are sized for them."""


def _decode_shaped(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, left: int,
                   want_lse: bool) -> bool:
    """A dense call the split-KV decode kernel computes faster than the flash forward, whose 64–128-row
    query tiles hold one live row when a generated token attends to its cache (90 µs a call at batch 32
    on the H100, where reading the cache takes ~10): a few queries (``seq_q ≤ DECODE_MAX_Q``, causal among
    themselves, or one query), no window that bites, no lse or gradient wanted."""
    seq_q, seq_k = q.shape[1], k.shape[1]
    if seq_q > DECODE_MAX_Q or seq_k < DECODE_MIN_KV or seq_q > seq_k or want_lse:
        return False
    if seq_q * (q.shape[2] // k.shape[2]) > DECODE_MAX_ROWS:  # the packed tile of one KV head's queries
        return False
    if not causal and seq_q > 1:
        return False
    if 0 <= left < seq_k - 1:  # the window drops keys: the flash kernel does windows
        return False
    return not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad))


# ------------------------------------------------------------------------------------------- validation


def _check_int(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name}: expected an int >= {low}, got {value}")
    return value


def _check_window(window: object) -> None:
    if window is None:
        return
    if isinstance(window, bool):
        raise TypeError("window: expected None, an int or a pair of ints, got bool")
    if isinstance(window, int):
        _check_int("window", window, 0)
        return
    if not isinstance(window, (tuple, list)) or len(window) != 2:
        raise TypeError(f"window: expected None, an int or a pair (left, right) of ints, got {window!r}")
    for side, w in zip(("left", "right"), window):
        _check_int(f"window ({side})", w, -1)


def _scale(softmax_scale: object, head_dim: int) -> float:
    if softmax_scale is None:
        return 1.0 / math.sqrt(head_dim)
    return check_real("softmax_scale", softmax_scale, low=0.0, low_inclusive=False)


def _softcap(softcap: object) -> float:
    if softcap is None:
        return 0.0
    return check_real("softcap", softcap, low=0.0, low_inclusive=False)


def _check_head_dim(name: str, d: int) -> None:
    if d > MAX_HEAD_DIM:
        raise ValueError(f"{name}: head_dim up to {MAX_HEAD_DIM} is supported, got {d}")


def _check_heads(hq: int, hkv: int) -> None:
    if hq % hkv:
        raise ValueError(f"k: the number of KV heads ({hkv}) must divide the number of query heads ({hq})")


def _check_cu(name: str, cu: object, q: torch.Tensor) -> torch.Tensor:
    # any strides (the kernels take them); int32 only: the kernels' offset arithmetic
    check_index_tensor(name, cu, ndim=1, like=q, dtypes=(torch.int32,))
    if cu.shape[0] < 2:
        raise ValueError(f"{name}: expected [batch + 1] >= 2 offsets, got shape {tuple(cu.shape)}")
    return cu


def _max_seqlen(name: str, value: object, cu: torch.Tensor, total: int) -> int:
    """The grid's sequence length: the given hint or, when None, the longest ``cu_seqlens`` step (a host
    sync, and a graph break under torch.compile: pass max_seqlen_* to avoid it); never more than the packed
    length ``total``, which bounds every sequence the kernels see, so a garbage table cannot blow up the grid."""
    if value is None:
        return min(max(0, int((cu[1:] - cu[:-1]).max().item())), total)
    return min(_check_int(name, value, 0), total)


def _host_checks(t: torch.Tensor) -> bool:
    """Index values are checked on the host now: validation mode is on (:mod:`kernelworks.runtime.indices`)
    and no CUDA graph is being captured (the check's sync would break the capture)."""
    return validation_enabled() and not (t.device.type == "cuda" and torch.cuda.is_current_stream_capturing())


def _check_varlen_values(q: torch.Tensor, k: torch.Tensor, cu_q: torch.Tensor, cu_k: torch.Tensor,
                         max_q: int | None, max_k: int | None) -> None:
    """Validation mode: each ``cu_seqlens`` non-decreasing from 0 up to at most its packed length, each
    given ``max_seqlen`` at least its longest sequence (one host sync). The kernels stay in bounds without
    this; it turns a bad table into a ``ValueError`` instead of an answer for the clamped table."""
    if not _host_checks(q):
        return
    check_offsets("cu_seqlens_q", cu_q, q.shape[0])
    check_offsets("cu_seqlens_k", cu_k, k.shape[0])
    for name, cu, given in (("max_seqlen_q", cu_q, max_q), ("max_seqlen_k", cu_k, max_k)):
        if given is None:
            continue  # computed from cu_seqlens: exact
        lens = cu[1:] - cu[:-1]
        longest = int(lens.max())
        if longest > given:
            raise ValueError(f"{name}: expected at least the longest sequence, {longest} (sequence "
                             f"{int(lens.argmax())}), got {given}")


def _check_decode_values(k_cache: torch.Tensor, block_table: torch.Tensor, context_lens: torch.Tensor) -> None:
    """Validation mode: context lengths within the block table (``max_pages × page_size``), the pages they
    use within the pool (one host sync)."""
    if not _host_checks(k_cache):
        return
    num_pages, page = k_cache.shape[0], k_cache.shape[1]
    check_index_values("context_lens", context_lens, 0, block_table.shape[1] * page + 1)
    used = torch.arange(block_table.shape[1], device=block_table.device)[None, :] * page < context_lens[:, None]
    check_index_values("block_table", block_table, 0, num_pages, mask=used)


# ------------------------------------------------------------------------------------------- public API


@replayed_op
def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    softmax_scale: float | None = None, window: int | tuple[int, int] | None = None,
                    softcap: float | None = None, cu_seqlens_q: torch.Tensor | None = None,
                    cu_seqlens_k: torch.Tensor | None = None, max_seqlen_q: int | None = None,
                    max_seqlen_k: int | None = None, return_lse: bool = False, layout: str = "bshd"):
    """Exact attention ``softmax(scale · q kᵀ + mask) v`` without materialising the scores, with autograd
    (deterministic backward); works under ``torch.compile(fullgraph=True)``.

    The backward is always deterministic (bitwise repeatable, no atomics). Its cost: QKᵀ and dO Vᵀ are
    recomputed in a second pass (7/5 of an atomic backward's matmul work), and with grouped heads each
    query head's share of dK and dV goes through fp32 scratch (2 · heads_q · seq_k · head_dim · 4 bytes per
    batch row) before a fixed-order sum over the group.

    Args:
        q: ``[batch, seq_q, heads_q, head_dim]`` (``layout="bshd"``, the default) or ``[batch, heads_q,
            seq_q, head_dim]`` (``layout="bhsd"``, SDPA's order: taken as a strided view, no copy); varlen:
            ``[total_q, heads_q, head_dim]``. float16, bfloat16 or float32 (exact fp32 products), on CUDA
            (CPU under the Triton interpreter); head_dim ≤ 256 (64/128 are the tuned sizes; others are
            padded to a power of two inside). Any strides (unit stride on head_dim avoids a copy).
        k, v: ``[batch, seq_k, heads_kv, head_dim]`` (same layout as q; varlen ``[total_k, heads_kv,
            head_dim]``), q's dtype and device. ``heads_kv`` divides ``heads_q``: query head ``h`` reads KV
            head ``h // (heads_q // heads_kv)`` (GQA, MQA with ``heads_kv = 1``).
        causal: mask keys after each query, aligned to the bottom-right corner when ``seq_q != seq_k``
            (flash-attn's convention: query ``i`` sits at key position ``i + seq_k − seq_q``; top-left and
            bottom-right agree when ``seq_q == seq_k``). Query rows that see no key return 0.
        softmax_scale: default ``1/√head_dim``.
        window: sliding window: None (no window), an int ``w`` — each query sees itself and the ``w`` keys
            before it (``(w, 0)``) — or a pair ``(left, right)`` as in flash-attn, ``-1`` for unbounded.
            ``causal=True`` sets ``right = 0``. Blocks outside the band are skipped.
        softcap: logit soft-capping (Gemma 2): ``s = softcap · tanh(scale · q·k / softcap)``.
        cu_seqlens_q, cu_seqlens_k: int32 ``[batch + 1]`` cumulative sequence lengths for packed
            (varlen) q/k/v; empty sequences are allowed. Give both or neither.
        max_seqlen_q, max_seqlen_k: the longest sequences (varlen). Computed from ``cu_seqlens`` when
            None, which costs a host sync — pass them under ``torch.compile`` and CUDA graphs.
        return_lse: also return the fp32 log-sum-exp ``[batch, heads_q, seq_q]`` (varlen ``[heads_q,
            total_q]``; ``-inf`` for rows that see no key); it is differentiable.
        layout: ``"bshd"`` or ``"bhsd"`` (see q); the output comes back in the same layout.

    Returns:
        ``o`` shaped like ``q`` (q's dtype), or ``(o, lse)``.

    Inference calls shaped like decoding (no varlen, ``seq_q ≤ 16`` new tokens — causal, or one — over
    ``seq_k ≥ 64`` keys, no window that drops keys, no lse, no gradient) run the split-KV kernel of
    :func:`decode_attention` on the dense K/V (the same math, the query heads of a KV head in one tile).

    Example::

        o = kw.flash_attention(q, k, v, causal=True)          # q [4, 4096, 32, 128], k/v [4, 4096, 8, 128]
        o = kw.flash_attention(q, k, v, layout="bhsd")        # SDPA-shaped tensors
    """
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected a bool, got {type(causal).__name__}")
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    rank = 3 if varlen else 4
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_float_tensor(name, t, min_dim=rank, max_dim=rank)
    check_same_dtype(("q", "k", "v"), (q, k, v))
    check_same_device(("q", "k", "v"), (q, k, v))
    if varlen and layout != "bshd":
        raise ValueError("layout: varlen inputs are [total_tokens, heads, head_dim]; use layout='bshd'")
    if layout == "bhsd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    if tuple(k.shape) != tuple(v.shape):
        raise ValueError(f"v: expected the shape of k {tuple(k.shape)}, got {tuple(v.shape)}")
    d = q.shape[-1]
    if k.shape[-1] != d:
        raise ValueError(f"k: expected head_dim {d} (q's), got {k.shape[-1]}")
    _check_head_dim("q", d)
    _check_heads(q.shape[-2], k.shape[-2])
    if not varlen and k.shape[0] != q.shape[0]:
        raise ValueError(f"k: expected batch {q.shape[0]} (q's), got {k.shape[0]}")
    _check_window(window)
    left, right = window_bounds(window, causal)
    scale = _scale(softmax_scale, d)
    cap = _softcap(softcap)
    if varlen:
        if cu_seqlens_q is None or cu_seqlens_k is None:
            raise ValueError("cu_seqlens_q, cu_seqlens_k: give both (varlen) or neither")
        _check_cu("cu_seqlens_q", cu_seqlens_q, q)
        _check_cu("cu_seqlens_k", cu_seqlens_k, q)
        if cu_seqlens_q.shape != cu_seqlens_k.shape:
            raise ValueError(f"cu_seqlens_k: expected shape {tuple(cu_seqlens_q.shape)} (cu_seqlens_q's), "
                             f"got {tuple(cu_seqlens_k.shape)}")
        max_q = _max_seqlen("max_seqlen_q", max_seqlen_q, cu_seqlens_q, q.shape[0])
        max_k = _max_seqlen("max_seqlen_k", max_seqlen_k, cu_seqlens_k, k.shape[0])
        _check_varlen_values(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    else:
        max_q, max_k = q.shape[1], k.shape[1]
    batch = cu_seqlens_q.shape[0] - 1 if varlen else q.shape[0]
    if batch * q.shape[-2] > MAX_GRID_Y:
        raise ValueError(f"q: batch × heads = {batch} × {q.shape[-2]} exceeds {MAX_GRID_Y} (the launch grid's "
                         "second axis); split the batch")
    if not varlen and _decode_shaped(q, k, v, causal, left, return_lse):
        o = _dense_decode(q, k, v, scale, cap)
    else:
        o, lse = _flash(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, scale, left, right, cap)
    if layout == "bhsd":
        o = o.transpose(1, 2)
    return (o, lse) if return_lse else o


@replayed_op
def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                     context_lens: torch.Tensor, *, softmax_scale: float | None = None,
                     softcap: float | None = None, check_indices: bool | None = None) -> torch.Tensor:
    """Attention of one (or a few) new query tokens per sequence over a paged KV cache (forward only);
    split-KV ("flash decoding") with the query heads of one KV head packed into one tile, so every KV byte
    is read once. Works under ``torch.compile(fullgraph=True)`` and CUDA graphs (fixed maximum sizes).

    Args:
        q: ``[batch, heads_q, head_dim]``, or ``[batch, q_len, heads_q, head_dim]`` for ``q_len`` new
            tokens (speculative decoding), the last at position ``context_len − 1``, causal among
            themselves. float16, bfloat16 or float32; head_dim ≤ 256.
        k_cache, v_cache: ``[num_pages, page_size, heads_kv, head_dim]``, q's dtype; any page size ≥ 1
            (16…256 typical); ``heads_kv`` divides ``heads_q``.
        block_table: int32 ``[batch, max_pages]``, any strides: the pages of each sequence, in order,
            anywhere in the pool; entries past a sequence's last page are not read.
        context_lens: int32 ``[batch]``, any stride: tokens in the cache per sequence (the new ones
            included); 0 gives a zero output.
        softmax_scale: default ``1/√head_dim``. softcap: as in :func:`flash_attention`.
        check_indices: ``None`` (default): check ``block_table``/``context_lens`` values on the host in
            validation mode only (:func:`kernelworks.validation`, ``KERNELWORKS_VALIDATE=1``); ``True``:
            check on this call regardless; ``False``: never on this call. A check costs one host sync and
            raises ``ValueError`` naming the argument and the first bad value; it is skipped while tracing
            or capturing a CUDA graph. Unchecked, bad values stay in bounds: context lengths are clamped to
            ``[0, max_pages × page_size]`` and keys on pages outside ``[0, num_pages)`` are skipped.

    Returns:
        ``o`` shaped like ``q``.

    Example::

        o = kw.decode_attention(q, k_cache, v_cache, block_table, context_lens)   # q [64, 32, 128]

    It has no backward: with grad mode on and an input that requires grad it raises, rather than return an
    output cut off from the graph (call it under ``torch.no_grad()``, as ``generate`` does).
    """
    check_float_tensor("q", q, min_dim=3, max_dim=4)
    check_float_tensor("k_cache", k_cache, min_dim=4, max_dim=4)
    check_float_tensor("v_cache", v_cache, min_dim=4, max_dim=4)
    refuse_autograd("decode_attention", q=q, k_cache=k_cache, v_cache=v_cache)
    check_same_dtype(("q", "k_cache", "v_cache"), (q, k_cache, v_cache))
    check_same_device(("q", "k_cache", "v_cache"), (q, k_cache, v_cache))
    if tuple(k_cache.shape) != tuple(v_cache.shape):
        raise ValueError(f"v_cache: expected the shape of k_cache {tuple(k_cache.shape)}, got {tuple(v_cache.shape)}")
    batch, d = q.shape[0], q.shape[-1]
    if k_cache.shape[-1] != d:
        raise ValueError(f"k_cache: expected head_dim {d} (q's), got {k_cache.shape[-1]}")
    _check_head_dim("q", d)
    hq, hkv = q.shape[-2], k_cache.shape[2]
    if hq % hkv:
        raise ValueError(f"k_cache: the number of KV heads ({hkv}) must divide the number of query heads ({hq})")
    for name, t, rank in (("block_table", block_table, 2), ("context_lens", context_lens, 1)):
        check_index_tensor(name, t, ndim=rank, like=q, dtypes=(torch.int32,))  # any strides: kernel arguments
        if t.shape[0] != batch:
            raise ValueError(f"{name}: expected {batch} rows (q's batch), got shape {tuple(t.shape)}")
    scale = _scale(softmax_scale, d)
    cap = _softcap(softcap)
    if check_indices is not None and not isinstance(check_indices, bool):
        raise TypeError(f"check_indices: expected None or a bool, got {type(check_indices).__name__}")
    if check_indices is None:
        _check_decode_values(k_cache, block_table, context_lens)
    elif check_indices:
        with validation():
            _check_decode_values(k_cache, block_table, context_lens)
    return _decode(q, k_cache, v_cache, block_table, context_lens, scale, cap)
