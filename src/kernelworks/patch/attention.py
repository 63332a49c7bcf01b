"""The ``"kernelworks"`` attention implementation registered with transformers: an attention function
(``AttentionInterface``) calling :func:`kernelworks.flash_attention`, and its mask function
(``AttentionMaskInterface``).

The mask function returns None when nothing but causality, the sliding window and packing shapes the
attention (no padding: the kernel does causal / window itself, packing comes from ``position_ids`` or the
flash kwargs), and otherwise the 4-D boolean mask SDPA would get, which sends that call to the torch path.
Torch (SDPA, or the family's eager function where SDPA cannot do it: soft-capping, or the model was on
eager) also takes calls the kernel does not: dropout in training, head_dim above the kernel's limit. With
no mask to hand it builds the dense mask from the same facts, so a fallback is never a different answer.
"""

from __future__ import annotations

import contextvars
import inspect
import sys
import warnings
import weakref

import torch
from transformers import masking_utils
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask, sdpa_mask
from transformers.modeling_utils import AttentionInterface

import kernelworks
from kernelworks.ops.attention.forward import MAX_HEAD_DIM
from kernelworks.runtime.device import runs_kernels
from kernelworks.runtime.validate import FLOAT_DTYPES

NAME = "kernelworks"
"""The ``config._attn_implementation`` a patched model runs with."""

_warned: set[str] = set()


def warn_once(message: str) -> None:
    """One warning per distinct message per process (a fallback is taken per layer per call)."""
    if message not in _warned:
        _warned.add(message)
        warnings.warn(f"kernelworks.patch: {message}", stacklevel=3)


_MASK_PARAMS = tuple(inspect.signature(sdpa_mask).parameters)
"""The mask functions' parameters in order (``batch_size, q_length, kv_length, q_offset, kv_offset, …``), to read
sizes passed by position as by keyword."""


def mask(*args, **kwargs) -> torch.Tensor | None:
    """None where the kernel needs no mask, else SDPA's 4-D boolean mask for the torch fallback. The kernel needs
    none when there is no padding and the queries are the last keys: it aligns a causal mask bottom-right. A
    static (compileable) cache's buffer runs past the tokens written (``kv_length`` is its whole length), so
    there the mask goes to attention; without it the unwritten slots would be attended to."""
    if _queries_end_the_keys(args, kwargs):
        return None if flash_attention_mask(*args, **kwargs) is None else sdpa_mask(*args, **kwargs)
    # SDPA may skip an all-causal mask here (its is_causal aligns top-left, right for a static buffer's
    # prefill); the kernel's causal mask aligns bottom-right, so the fallback must get the mask itself
    return sdpa_mask(*args, **{**kwargs, "allow_is_causal_skip": False})


def _queries_end_the_keys(args: tuple, kwargs: dict) -> bool:
    """True when the last query is the last key: ``q_offset + q_length == kv_offset + kv_length`` (dynamic and
    sliding-window caches, no cache). Offsets given as tensors (a static cache's) count as False: no host
    sync is spent to find out."""
    sizes = {**dict(zip(_MASK_PARAMS, args)), **kwargs}
    q_offset, kv_offset = sizes.get("q_offset", 0), sizes.get("kv_offset", 0)
    if not (isinstance(q_offset, int) and isinstance(kv_offset, int)):
        return False
    return q_offset + sizes["q_length"] == kv_offset + sizes["kv_length"]


# ------------------------------------------------------------------------------------------- packing

WEIGHTS_KWARG = "kernelworks_attention_weights"
"""Keyword the patched ``ForCausalLM.forward`` hands down when the caller asked for ``output_attentions``: the
kernel never forms the weights, so those calls run the model's eager attention, which returns them."""


try:
    from transformers.utils.output_capturing import _active_collector
except ImportError:  # another layout of transformers' internals: only our keyword is seen
    _active_collector = None


def _weights_recorded() -> bool:
    """True while HF's output capture (the ``capture_outputs`` decorator of every base model since transformers
    5.16) records attention weights: ``output_attentions`` asked of a model whose forward is not ours (a base
    model, a classification head), which passes no keyword down."""
    collected = None if _active_collector is None else _active_collector.get()
    return bool(collected) and "attentions" in collected


def idle_capture_hook(hook: object) -> bool:
    """``hook`` is HF's output-capture forward hook and records nothing now. HF installs one on each decoder layer
    and attention module the first time ``output_hidden_states`` or ``output_attentions`` is asked and never
    removes them; each records only while a forward collects its key. Skipping a module that carries only idle
    ones loses nothing."""
    if getattr(hook, "__name__", None) != "output_capturing_hook" or _active_collector is None \
            or not getattr(hook, "__module__", "").startswith("transformers."):
        return False
    collected = _active_collector.get()
    if not collected:
        return True
    names = hook.__code__.co_freevars
    if "key" not in names:
        return False
    return hook.__closure__[names.index("key")].cell_contents not in collected

PACKED_KWARG = "kernelworks_packed"
"""Keyword the patched ``ForCausalLM.forward`` hands down (through HF's layers, as the flash kwargs travel) to
:func:`attention`: whether this forward's ``position_ids`` pack sequences, decided once at the top."""


POSITIONS_KWARG = "kernelworks_position_ids"
"""Keyword under which the patched ``ForCausalLM.forward`` hands a hybrid model's ``position_ids`` down to its
Gated DeltaNet layers: HF's own decoder layer (kept when ``rms_norm=False``) passes its ``**kwargs`` to
``linear_attn`` but not its ``position_ids``, and packed rows are found from them."""


def packed_positions(position_ids: torch.Tensor | None, cache, kwargs: dict) -> bool | None:
    """Whether ``position_ids`` restart inside a row, for the whole forward: False when the model numbers
    the tokens itself (None), for one new token or a continued cache (no packing there); else one host sync
    here — at the model's entry, so under torch.compile at most one graph break before the layers, none in
    them. None (left to each attention call) when the collator's ``cu_seq_lens_*`` say it or our attention
    is not the model's."""
    if kwargs.get("cu_seq_lens_q") is not None:
        return None
    if position_ids is None or position_ids.shape[-1] < 2:
        return False
    if cache is not None and cache.get_seq_length() > 0:
        return False
    return bool(_restarts(position_ids).any())


def _restarts(position_ids: torch.Tensor) -> torch.Tensor:
    """``[..., seq − 1]`` bool: HF's packing rule, a position that does not follow its predecessor by one
    starts a sequence (token 0 left out: it always starts one)."""
    return position_ids[..., 1:] - position_ids[..., :-1] != 1


_last_segments: tuple = (None, -1, -1, None)
"""``(weakref to position_ids, its version, batch, starts)``: every layer of one forward gets the same
``position_ids`` tensor, so the host sync of the packing check is paid once per forward, not per layer."""


def _segments(position_ids: torch.Tensor, batch: int) -> torch.Tensor | None:
    """Sequence starts ``[batch, seq]`` (bool) of packed rows — a position that does not follow its
    predecessor by one starts a sequence, HF's rule — or None when no row is packed (one host sync; a graph
    break under torch.compile, where the collator's ``cu_seq_lens_*`` kwargs avoid it)."""
    global _last_segments
    ref, version, rows, cached = _last_segments
    if ref is not None and ref() is position_ids and version == position_ids._version and rows == batch:
        return cached
    pos = position_ids.expand(batch, -1)
    starts = torch.ones_like(pos, dtype=torch.bool)
    starts[:, 1:] = _restarts(pos)
    starts = starts if bool(starts[:, 1:].any()) else None
    if not torch.compiler.is_compiling():
        _last_segments = (weakref.ref(position_ids), position_ids._version, batch, starts)
    return starts


def _varlen_args(kwargs: dict, batch: int, seq_q: int, seq_k: int):
    """``(cu_q, cu_k, max_q, max_k, starts)`` for packed inputs, or None. The flash kwargs a packing collator
    passes (``cu_seq_lens_q`` …) win; else packing is read from ``position_ids`` (no cache: seq_q == seq_k)."""
    if kwargs.get("cu_seq_lens_q") is not None and kwargs.get("cu_seq_lens_k") is not None:
        cu_q, cu_k = kwargs["cu_seq_lens_q"].to(torch.int32), kwargs["cu_seq_lens_k"].to(torch.int32)
        max_q, max_k = kwargs.get("max_length_q"), kwargs.get("max_length_k")
        max_q = int((cu_q[1:] - cu_q[:-1]).max()) if max_q is None else int(max_q)
        max_k = int((cu_k[1:] - cu_k[:-1]).max()) if max_k is None else int(max_k)
        return cu_q, cu_k, max_q, max_k, None
    position_ids = kwargs.get("position_ids")
    if position_ids is None or seq_q != seq_k or position_ids.shape[-1] != seq_q:
        return None
    starts = _segments(position_ids, batch)
    if starts is None:
        return None
    total = batch * seq_q
    first = starts.reshape(-1).nonzero().reshape(-1)
    cu = torch.cat([first, first.new_tensor([total])]).to(torch.int32)
    longest = int((cu[1:] - cu[:-1]).max())
    return cu, cu, longest, longest, starts


def _starts(varlen, batch: int, seq: int) -> torch.Tensor | None:
    """The ``[batch, seq]`` sequence starts of a varlen call (from ``cu_seqlens`` when the collator gave them)."""
    if varlen is None or varlen[4] is not None:
        return None if varlen is None else varlen[4]
    starts = torch.zeros(batch * seq, dtype=torch.bool, device=varlen[0].device)
    starts[varlen[0][:-1].long().clamp(0, batch * seq - 1)] = True
    return starts.view(batch, seq)


# ------------------------------------------------------------------------------------------- fallback


def _window(sliding_window: int | None, causal: bool) -> tuple[int, int] | None:
    """HF's sliding window as the kernel's ``(left, right)``: causal ``kv > q − W`` (W − 1 keys back),
    bidirectional ``|q − kv| < W`` (Gemma 3's ``use_bidirectional_attention``: W − 1 keys either way)."""
    if not sliding_window:
        return None
    return (sliding_window - 1, 0) if causal else (sliding_window - 1, sliding_window - 1)


def _autocast_dtype(t: torch.Tensor) -> torch.dtype | None:
    """The dtype autocast gives attention on ``t``'s device (SDPA is on its lower-precision list), or None."""
    kind = t.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None


def _dense_mask(query: torch.Tensor, key: torch.Tensor, causal: bool, window: tuple[int, int] | None,
                starts: torch.Tensor | None) -> torch.Tensor:
    """``[batch or 1, 1, seq_q, seq_k]`` boolean mask of what the kernel would compute: queries at the end of
    the keys (bottom-right), the window, and packed sequences kept apart."""
    seq_q, seq_k = query.shape[2], key.shape[2]
    q_pos = torch.arange(seq_q, device=query.device)[:, None] + (seq_k - seq_q)
    k_pos = torch.arange(seq_k, device=query.device)[None, :]
    allowed = torch.ones(seq_q, seq_k, dtype=torch.bool, device=query.device)
    if causal:
        allowed &= k_pos <= q_pos
    if window is not None:
        allowed &= (k_pos >= q_pos - window[0]) & (k_pos <= q_pos + window[1])
    allowed = allowed[None]
    if starts is not None:  # packed (seq_q == seq_k): same sequence only
        seg = starts.cumsum(-1)
        allowed = allowed & (seg[:, :, None] == seg[:, None, :])
    return allowed[:, None]


def _torch_attention(module, query, key, value, attention_mask, *, dropout, scaling, softcap, weights=False,
                     **kwargs):
    """SDPA, or the family's eager attention where SDPA cannot do it (soft-capping, the weights asked for) or the
    model was on eager."""
    if softcap is None and not weights and getattr(module, "_kernelworks_fallback", "sdpa") == "sdpa":
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    # the module's own modeling file, or its Hugging Face base class's for a user's subclass
    hf = next(c for c in type(module).__mro__ if c.__module__.startswith("transformers.") or c is object)
    eager = sys.modules[hf.__module__].eager_attention_forward
    if attention_mask is not None and attention_mask.dtype == torch.bool:  # eager adds its mask to the scores
        attention_mask = torch.zeros((), dtype=query.dtype, device=query.device).masked_fill(
            ~attention_mask, torch.finfo(query.dtype).min)
    if softcap is not None:
        kwargs["softcap"] = softcap
    return eager(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)


def _unsupported(module, query: torch.Tensor, dropout: float) -> str | None:
    if not runs_kernels(query):
        return f"tensors on {query.device}: the kernels take CUDA tensors; attention stays on torch"
    if query.dtype not in FLOAT_DTYPES:
        return f"{query.dtype} tensors: the kernels take float32, float16 and bfloat16; attention stays on torch"
    if dropout > 0.0 and module.training:
        return "attention dropout > 0 in training is not in the kernel; those calls stay on torch"
    if query.shape[-1] > MAX_HEAD_DIM:
        return f"head_dim {query.shape[-1]} > {MAX_HEAD_DIM} is not in the kernel; those calls stay on torch"
    return None


# ------------------------------------------------------------------------------------------- attention


def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
              sliding_window: int | None = None, softcap: float | None = None, is_causal: bool | None = None,
              **kwargs) -> tuple[torch.Tensor, None]:
    """HF attention-interface function: q ``[batch, heads_q, seq_q, head_dim]``, k/v ``[batch, heads_kv,
    seq_k, head_dim]`` (GQA unexpanded) → ``([batch, seq_q, heads_q, head_dim], None)``.

    Causal is bottom-right aligned (decode with a cache: the queries are the last keys); packed sequences
    (``position_ids`` restarting inside a row, or ``cu_seq_lens_*``) take the varlen path.
    """
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    window = _window(sliding_window, causal)
    batch, heads, seq_q, dim = query.shape
    low = _autocast_dtype(query)
    if low is not None:  # an fp32 model under autocast: q and k leave fp32 norms and rotary, v a bf16 Linear
        query, key, value = query.to(low), key.to(low), value.to(low)
    weights = bool(kwargs.pop(WEIGHTS_KWARG, False)) or _weights_recorded()
    reason = ("an attention mask (padding, or a static cache longer than the tokens written) is not in the "
              "kernel; those calls stay on torch") if attention_mask is not None else \
        _unsupported(module, query, dropout)
    if weights:
        reason = "output_attentions: the kernel forms no attention weights; those calls run eager attention"
    packed = kwargs.pop(PACKED_KWARG, None)
    kwargs.pop(POSITIONS_KWARG, None)
    varlen = _varlen_args(kwargs, batch, seq_q, key.shape[2]) if attention_mask is None and packed is not False \
        else None
    if reason is not None:
        warn_once(reason)
        if attention_mask is None:
            attention_mask = _dense_mask(query, key, causal, window, _starts(varlen, batch, seq_q))
        kwargs.pop("position_ids", None)
        return _torch_attention(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                softcap=softcap, weights=weights, is_causal=False, **kwargs)
    options = {"causal": causal, "softmax_scale": scaling, "window": window, "softcap": softcap}
    if varlen is None:
        out = kernelworks.flash_attention(query, key, value, layout="bhsd", **options)
        return out.transpose(1, 2), None
    cu_q, cu_k, max_q, max_k, _ = varlen

    def tokens(t: torch.Tensor) -> torch.Tensor:  # [batch, heads, seq, dim] → [batch·seq, heads, dim]
        return t.transpose(1, 2).reshape(-1, t.shape[1], t.shape[3])

    out = kernelworks.flash_attention(tokens(query), tokens(key), tokens(value), cu_seqlens_q=cu_q,
                                      cu_seqlens_k=cu_k, max_seqlen_q=max_q, max_seqlen_k=max_k, **options)
    return out.view(batch, seq_q, heads, dim), None


_unpacked_known = contextvars.ContextVar("kernelworks_unpacked_known", default=False)
"""Set while a patched ``ForCausalLM.forward`` runs its base model with packing already decided False."""


def call_unpacked(fn, /, **kwargs):
    """``fn(**kwargs)`` (the base model's forward) knowing that its ``position_ids`` pack no sequences
    (:func:`packed_positions` said so): HF's own packing check is skipped. That check,
    ``find_packed_sequence_indices``, runs whenever a training forward has ``position_ids`` and no cache (HF's
    base model numbers the tokens itself when the caller gives none) and ends in ``.all()`` on the device: a
    host sync in every training step, which our attention, finding packing itself, never needed. Not under
    ``torch.compile``, where HF's check skips the sync while tracing."""
    if torch.compiler.is_compiling():
        return fn(**kwargs)
    token = _unpacked_known.set(True)
    try:
        return fn(**kwargs)
    finally:
        _unpacked_known.reset(token)


def _find_packed_sequence_indices(position_ids: torch.Tensor) -> torch.Tensor | None:
    """HF's ``find_packed_sequence_indices``, skipped (None: nothing packed) inside :func:`call_unpacked`."""
    if not torch.compiler.is_compiling() and _unpacked_known.get():  # dynamo reads no ContextVar
        return None
    return _find_packed_sequence_indices.hf(position_ids)


def register() -> None:
    """Register ``"kernelworks"`` with transformers' attention and mask interfaces (idempotent), and put
    :func:`_find_packed_sequence_indices` in front of HF's packing check (it calls HF's own unless a patched
    forward already decided the batch is not packed)."""
    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, mask)
    # once a process: a wrapper another library puts on top of ours later stays there (and calls ours), and a
    # second register() must not wrap that wrapper again (a cycle)
    current = getattr(masking_utils, "find_packed_sequence_indices", None)
    if current is not None and not hasattr(_find_packed_sequence_indices, "hf"):
        _find_packed_sequence_indices.hf = current
        masking_utils.find_packed_sequence_indices = _find_packed_sequence_indices
