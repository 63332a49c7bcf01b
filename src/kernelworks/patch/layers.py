"""The forwards a patched model's modules run: each is the Hugging Face forward of that module with the
math routed through the public ops (RMSNorm, the gated MLP, rotary, the decoder layer's residual + norm,
the LM head + loss). Signatures and return types are those of transformers 5.x; the attention itself is
the registered attention function (:mod:`kernelworks.patch.attention`), reached through HF's dispatch.

The forwards read their per-family constants from class attributes that :func:`kernelworks.patch.patch`
sets on the patched subclass (``_kw_offset``, ``_kw_glu``, ``_kw_attn_kwargs``).
"""

from __future__ import annotations

import sys

import torch
from torch.nn import functional
from torch.nn.modules import module as nn_module
from transformers import modeling_utils
from transformers.modeling_outputs import CausalLMOutputWithPast, MoeCausalLMOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import can_return_tuple

import kernelworks
from kernelworks.ops.activation.mlp import GATED_ACTIVATIONS
from kernelworks.ops.attention.api import MAX_GRID_Y
from kernelworks.ops.attention.forward import MAX_HEAD_DIM
from kernelworks.ops.attention.reference import window_bounds
from kernelworks.patch import attention, decoder
from kernelworks.runtime.device import runs_kernels
from kernelworks.runtime.replay import replayed_op
from kernelworks.runtime.validate import FLOAT_DTYPES


def norm_eps(norm: torch.nn.Module) -> float:
    """The epsilon of an HF RMSNorm (``variance_epsilon`` in Llama/Mistral/Qwen, ``eps`` in Gemma)."""
    eps = getattr(norm, "variance_epsilon", None)
    return norm.eps if eps is None else eps


# ------------------------------------------------------------------------------------------- norm, MLP


def rms_norm_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """HF RMSNorm: ``[..., hidden] → [..., hidden]`` through :func:`kernelworks.rms_norm`."""
    y = kernelworks.rms_norm(hidden_states, self.weight, norm_eps(self), offset=self._kw_offset)
    if self._kw_offset == 0.0:
        # Llama's norm returns weight · x̂, so an fp32 weight promotes a 16-bit input; Gemma's casts back to x's
        return y if self.weight.dtype == y.dtype else y.to(torch.promote_types(self.weight.dtype, y.dtype))
    return y


def _unhooked(m: torch.nn.Module) -> bool:
    """No forward or backward hooks (or pre-hooks) on ``m`` or on every module (``register_module_*_hook``),
    and no per-instance ``forward`` (accelerate's device-placement hooks replace it): calling ``m`` runs its
    class's forward alone, so reading its parameters instead of calling it loses nothing."""
    return not (m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
                or nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks
                or nn_module._global_backward_hooks or nn_module._global_backward_pre_hooks
                or "forward" in m.__dict__ or "_hf_hook" in m.__dict__)  # dict look-ups: no __getattr__ miss


def _plain_linear(m: torch.nn.Module, *, bias: bool = False) -> bool:
    """An ``nn.Linear`` itself (no LoRA or quantised wrapper, no subclass), bias-free unless ``bias``, unhooked:
    ``F.linear(x, m.weight, m.bias)`` is all its forward does."""
    return type(m) is torch.nn.Linear and (bias or m.bias is None) and _unhooked(m)


def _add_norm(norm: torch.nn.Module, hidden_states: torch.Tensor, residual: torch.Tensor,
              offset: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(norm(residual + hidden_states), residual + hidden_states)``: one :func:`kernelworks.rms_norm` pass
    with the residual add fused, unless ``norm`` is hooked (its hooks must see the call) or is not an RMSNorm we
    patched (a user's replacement or subclass, or ``rms_norm=False``): then the add on torch and the module
    called."""
    if not _unhooked(norm) or not getattr(type(norm), "_kernelworks", "").startswith("rms_norm"):
        # hooked, or not a norm we patched (a user's LayerNorm or RMSNorm subclass): it runs as itself
        residual = residual + hidden_states
        return norm(residual), residual
    return kernelworks.rms_norm(_as_residual(hidden_states, residual), norm.weight, norm_eps(norm),
                                residual=residual, offset=offset)


def gated_mlp_forward(self, x: torch.Tensor) -> torch.Tensor:
    """``down(act(gate(x)) · up(x))``. Plain bias-free projections in ``x``'s dtype (no autocast) run as one
    :func:`kernelworks.gated_mlp`, which keeps gate and up for the backward but recomputes the activation;
    other projections (LoRA, quantised or hooked modules) stay the model's own, with the gated activation
    as one kernel between them."""
    glu, approximate = self._kw_glu
    gate_proj, up_proj, down_proj = self.gate_proj, self.up_proj, self.down_proj
    if (_plain_linear(gate_proj) and _plain_linear(up_proj) and _plain_linear(down_proj)
            and gate_proj.weight.dtype == x.dtype and not torch.is_autocast_enabled(x.device.type)):
        return kernelworks.gated_mlp(x, gate_proj.weight, up_proj.weight, down_proj.weight, activation=glu,
                                     approximate=approximate or "tanh")
    gate, up = gate_proj(x), up_proj(x)
    h = kernelworks.swiglu(gate, up) if glu == "swiglu" else kernelworks.geglu(gate, up, approximate=approximate)
    return down_proj(h)


def experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                    top_k_weights: torch.Tensor) -> torch.Tensor:
    """HF's mixture-of-experts ``*Experts.forward`` (Qwen3-MoE, Mixtral): ``[tokens, hidden]`` with each
    token's ``top_k`` experts and routing weights ``[tokens, top_k]`` → ``[tokens, hidden]``.

    :func:`kernelworks.moe_sort` groups the (token, expert) pairs by expert on the device (no host sync,
    static shapes for torch.compile and CUDA graphs); :func:`kernelworks.moe_permute` copies the tokens into
    that order in one pass; two :func:`kernelworks.grouped_matmul` (the stacked ``gate_up_proj [E, 2I, H]``
    and ``down_proj [E, H, I]`` read as transposed views, no copy) run around one gated-activation kernel on
    the packed halves; :func:`kernelworks.moe_unpermute` weights each output by its routing weight and sums a
    token's ``top_k`` in one pass, in fp32. Gradients reach the tokens, the expert weights and the routing
    weights. (HF's own loop, and this function before :mod:`kernelworks.ops.moe`, took a gather, a multiply,
    a scatter and a sum, each a pass over the ``[tokens·top_k, hidden]`` rows, and their backwards.)"""
    order, inverse, sizes = kernelworks.moe_sort(top_k_index, self.num_experts)
    x = kernelworks.moe_permute(hidden_states, order, inverse)
    gate_up_w, down_w = self.gate_up_proj, self.down_proj
    if gate_up_w.dtype != x.dtype:  # autocast: fp32 master weights, 16-bit activations
        gate_up_w, down_w = gate_up_w.to(x.dtype), down_w.to(x.dtype)
    gate_up = kernelworks.grouped_matmul(x, gate_up_w.transpose(1, 2), sizes)
    glu, approximate = self._kw_glu
    # the packed form reads both halves in place and returns one [pairs, 2I] gradient: two slices of
    # gate_up would each cost the backward a zero-filled [pairs, 2I] buffer and a copy (autograd's
    # SliceBackward; ~0.2 ms a layer each at Qwen3-30B-A3B's 65536 pairs, prof-moe-kw-eager-train.txt)
    h = kernelworks.swiglu(gate_up) if glu == "swiglu" else kernelworks.geglu(gate_up, approximate=approximate)
    y = kernelworks.grouped_matmul(h, down_w.transpose(1, 2), sizes)
    return kernelworks.moe_unpermute(y, top_k_weights, order, inverse).to(hidden_states.dtype)


# ------------------------------------------------------------------------------------------- the KV cache

CACHE_NAME = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"
"""The KV cache's keyword in the installed transformers: ``past_key_values`` up to 5.23, ``cache`` from 5.24
(the old name deprecated). Our forwards take both and pass it on under this one, never as None beside it."""


def _with_cache(cache, kwargs: dict) -> dict:
    """``kwargs`` with the cache (given under either name) under :data:`CACHE_NAME`."""
    cache = cache if cache is not None else kwargs.pop("cache", None)
    kwargs.pop("past_key_values", None)
    if cache is not None:
        kwargs[CACHE_NAME] = cache
    return kwargs


# ------------------------------------------------------------------------------------------- decoder layers


def _as_residual(branch: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """The branch in the residual stream's dtype: under autocast an fp32 model's stream stays fp32 while its
    Linear outputs are 16-bit, and HF's ``residual + branch`` promotes to fp32; the fused add does the same."""
    return branch if branch.dtype == residual.dtype else branch.to(torch.promote_types(branch.dtype, residual.dtype))


def llama_layer_forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                        position_ids: torch.LongTensor | None = None, past_key_values=None,
                        use_cache: bool | None = False,
                        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
                        **kwargs) -> torch.Tensor:
    """Llama/Mistral/Qwen decoder layer with the mid-layer ``residual + attn`` and
    ``post_attention_layernorm`` in one :func:`kernelworks.rms_norm` pass; ``[batch, seq, hidden]`` in and out.
    Qwen3-Next's linear-attention layers run their Gated DeltaNet where the others run attention (its norms
    take ``1 + weight``: ``_kw_offset``)."""
    args = _dense_layer_args(self, hidden_states, attention_mask, past_key_values, position_embeddings, kwargs)
    if args is not None:
        node = _one_node_args(args)
        return _dense_layer(*args) if node is None else decoder.decoder_layer(*node)[0]
    residual = hidden_states
    hidden_states = self.input_layernorm(hidden_states)
    kwargs = _with_cache(past_key_values, kwargs)
    if getattr(self, "block_type", None) == "linear_attention":  # Qwen3-Next's token mixer
        cache = kwargs.pop(CACHE_NAME, None)
        hidden_states = self.linear_attn(hidden_states=hidden_states, attention_mask=attention_mask,
                                         position_ids=position_ids, **{self._kw_mixer_cache: cache}, **kwargs)
    else:
        hidden_states, _ = self.self_attn(hidden_states=hidden_states, attention_mask=attention_mask,
                                          position_ids=position_ids, use_cache=use_cache,
                                          position_embeddings=position_embeddings, **kwargs)
    hidden_states, residual = _add_norm(self.post_attention_layernorm, hidden_states, residual, self._kw_offset)
    hidden_states = self.mlp(hidden_states)
    if isinstance(hidden_states, tuple):  # MoE blocks of some versions return (hidden, router logits)
        hidden_states = hidden_states[0]
    return residual + hidden_states


_DENSE_LAYER_KWARGS = frozenset({CACHE_NAME, "past_key_values", "position_ids", attention.PACKED_KWARG})
"""The keywords a decoder layer may get on the one-call path (the cache among them only as None)."""


def _ours(m: torch.nn.Module, piece: str) -> bool:
    """``m`` is one of our swapped classes for ``piece`` (not a user's class, not HF's own) and unhooked but for
    HF's idle output-capture hooks (:func:`kernelworks.patch.attention.idle_capture_hook`)."""
    if not getattr(type(m), "_kernelworks", "").startswith(piece):
        return False
    if m._forward_hooks and all(attention.idle_capture_hook(h) for h in m._forward_hooks.values()):
        return not (m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
                    or nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks
                    or nn_module._global_backward_hooks or nn_module._global_backward_pre_hooks
                    or "forward" in m.__dict__ or "_hf_hook" in m.__dict__)
    return _unhooked(m)


def _dense_layer_args(self, x: torch.Tensor, attention_mask, past_key_values, position_embeddings,
                      kwargs: dict) -> tuple | None:
    """The arguments of :func:`_dense_layer` for this call of a Llama/Mistral/Qwen2/Qwen3 decoder layer, or
    None when the modules must run one by one: a cache, a mask or packed rows, a piece left on torch or of a
    user's class, a hook or a wrapped projection (LoRA), autocast, torch.compile (which traces the modules),
    attention weights asked for, dropout, soft-capping, mixed dtypes."""
    if (attention_mask is not None or past_key_values is not None or position_embeddings is None
            or kwargs.get(attention.PACKED_KWARG) is not False or kwargs.get(CACHE_NAME) is not None
            or not _DENSE_LAYER_KWARGS.issuperset(kwargs) or torch.compiler.is_compiling()
            or torch.is_autocast_enabled(x.device.type) or x.dim() != 3):
        return None
    attn, mlp = getattr(self, "self_attn", None), self.mlp
    norm1, norm2 = self.input_layernorm, self.post_attention_layernorm
    # the layer's own hooks run around this forward: only the pieces it will not call must be unhooked
    if not (attn is not None and getattr(type(self), "_kernelworks", "").startswith("layer:")
            and _ours(attn, "attention:False") and _ours(mlp, "mlp:") and _ours(norm1, "rms_norm")
            and _ours(norm2, "rms_norm")):
        return None
    q_proj, k_proj, v_proj, o_proj = attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj
    gate_proj, up_proj, down_proj = mlp.gate_proj, mlp.up_proj, mlp.down_proj
    if not (_plain_linear(q_proj, bias=True) and _plain_linear(k_proj, bias=True) and _plain_linear(v_proj, bias=True)
            and _plain_linear(o_proj, bias=True) and _plain_linear(gate_proj) and _plain_linear(up_proj)
            and _plain_linear(down_proj)):
        return None
    q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
    if (q_norm is None) != (k_norm is None) or (q_norm is not None and not (
            _ours(q_norm, "rms_norm") and _ours(k_norm, "rms_norm") and norm_eps(q_norm) == norm_eps(k_norm)
            and q_norm._kw_offset == k_norm._kw_offset)):
        return None
    weights = [norm1.weight, q_proj.weight, k_proj.weight, v_proj.weight, o_proj.weight, norm2.weight,
               gate_proj.weight, up_proj.weight, down_proj.weight]
    if q_norm is not None:
        weights += [q_norm.weight, k_norm.weight]
    if any(w.dtype != x.dtype for w in weights):
        return None
    if attn.config._attn_implementation != attention.NAME or attention._weights_recorded():
        return None
    dropout = attn.attention_dropout if attn.training else 0.0
    causal = getattr(attn, "is_causal", True)
    extra = attn._kw_attn_kwargs(attn)
    if (dropout > 0.0 or attn.head_dim > MAX_HEAD_DIM or x.dtype not in FLOAT_DTYPES or not runs_kernels(x)
            or extra.get("softcap") is not None or not isinstance(causal, bool)):
        return None
    glu, approximate = mlp._kw_glu
    cos, sin = position_embeddings
    q_norm_args = (None, None, 0.0, 0.0) if q_norm is None else \
        (q_norm.weight, k_norm.weight, norm_eps(q_norm), q_norm._kw_offset)
    return (x, cos, sin, norm1.weight, q_proj.weight, q_proj.bias, k_proj.weight, k_proj.bias, v_proj.weight,
            v_proj.bias, o_proj.weight, o_proj.bias, *q_norm_args, norm2.weight, gate_proj.weight, up_proj.weight,
            down_proj.weight, norm_eps(norm1), norm1._kw_offset, norm_eps(norm2), self._kw_offset, attn.head_dim,
            causal, attn.scaling, attention._window(extra.get("sliding_window"), causal), glu,
            approximate or "tanh")


def _one_node_args(args: tuple) -> tuple | None:
    """:func:`kernelworks.patch.decoder.decoder_layer`'s arguments for a call of :func:`_dense_layer` that
    records an autograd graph (the layer then makes one node), or None: no graph, per-head q/k norms (Qwen3),
    which that node does not compute, or a layer too large for it (:data:`kernelworks.patch.decoder.
    MAX_NODE_MLP_BYTES`)."""
    (x, cos, sin, norm1, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, q_norm, _k_norm, _qk_eps, _qk_offset, norm2, gate_w,
     up_w, down_w, eps1, offset1, eps2, offset2, head_dim, causal, scaling, window, glu, approximate) = args
    if q_norm is not None or not torch.is_grad_enabled():
        return None
    if x.numel() // x.shape[-1] * gate_w.shape[0] * x.element_size() > decoder.MAX_NODE_MLP_BYTES:
        return None
    # what the public ops would refuse, which the node does not check: a launch grid too tall, or a gradient
    # asked of cos/sin (the rotary op raises; the node would drop it)
    if x.shape[0] * (q_w.shape[0] // head_dim) > MAX_GRID_Y or cos.requires_grad or sin.requires_grad:
        return None
    if not any(t is not None and t.requires_grad for t in (x, norm1, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, norm2,
                                                            gate_w, up_w, down_w)):
        return None
    left, right = window_bounds(window, causal)
    return (x, cos, sin, norm1, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, norm2, gate_w, up_w, down_w, eps1, offset1,
            eps2, offset2, head_dim, scaling, left, right, GATED_ACTIVATIONS[glu, approximate])


@replayed_op
def _dense_layer(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, norm1_weight: torch.Tensor,
                 q_weight: torch.Tensor, q_bias: torch.Tensor | None, k_weight: torch.Tensor,
                 k_bias: torch.Tensor | None, v_weight: torch.Tensor, v_bias: torch.Tensor | None,
                 o_weight: torch.Tensor, o_bias: torch.Tensor | None, q_norm_weight: torch.Tensor | None,
                 k_norm_weight: torch.Tensor | None, qk_eps: float, qk_offset: float, norm2_weight: torch.Tensor,
                 gate_weight: torch.Tensor, up_weight: torch.Tensor, down_weight: torch.Tensor, eps1: float,
                 offset1: float, eps2: float, offset2: float, head_dim: int, causal: bool, scaling: float,
                 window: tuple[int, int] | None, glu: str, approximate: str) -> torch.Tensor:
    """A Llama-shaped decoder layer ``[batch, seq, hidden] → [batch, seq, hidden]`` as one call: the same ops,
    in the same order, as the patched modules make (:func:`llama_layer_forward`, :func:`attention_forward`,
    :func:`gated_mlp_forward`; cuBLAS projections through ``F.linear``). Its point is host time: as a public op
    (``replayed_op``), from its second call of a shape on it replays those ops straight through, with no module
    calls, no per-op validation and one signature key for the whole layer (``runtime.replay_grad``); each op
    still builds its own autograd node."""
    batch, seq = x.shape[0], x.shape[1]
    h = kernelworks.rms_norm(x, norm1_weight, eps1, offset=offset1)
    q = functional.linear(h, q_weight, q_bias).view(batch, seq, -1, head_dim)
    k = functional.linear(h, k_weight, k_bias).view(batch, seq, -1, head_dim)
    v = functional.linear(h, v_weight, v_bias).view(batch, seq, -1, head_dim)
    if q_norm_weight is not None:  # Qwen3's per-head norms
        q = kernelworks.rms_norm(q, q_norm_weight, qk_eps, offset=qk_offset)
        k = kernelworks.rms_norm(k, k_norm_weight, qk_eps, offset=qk_offset)
    q, k = kernelworks.rotary_embedding(q.transpose(1, 2), k.transpose(1, 2), cos, sin, layout="neox", heads_dim=1)
    o = kernelworks.flash_attention(q, k, v.transpose(1, 2), layout="bhsd", causal=causal, softmax_scale=scaling,
                                    window=window)
    o = functional.linear(o.transpose(1, 2).reshape(batch, seq, -1), o_weight, o_bias)
    h, residual = kernelworks.rms_norm(o, norm2_weight, eps2, residual=x, offset=offset2)
    return residual + kernelworks.gated_mlp(h, gate_weight, up_weight, down_weight, activation=glu,
                                            approximate=approximate)


def gemma_layer_forward(self, hidden_states: torch.Tensor,
                        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
                        attention_mask: torch.Tensor | None = None, position_ids: torch.LongTensor | None = None,
                        past_key_values=None, **kwargs) -> torch.Tensor:
    """Gemma 2/3 decoder layer (sandwich norms): ``residual + post_attention_layernorm(attn)`` and
    ``pre_feedforward_layernorm`` in one :func:`kernelworks.rms_norm` pass (``1 + weight``)."""
    residual = hidden_states
    hidden_states = self.input_layernorm(hidden_states)
    hidden_states, _ = self.self_attn(hidden_states=hidden_states, position_embeddings=position_embeddings,
                                      attention_mask=attention_mask, position_ids=position_ids,
                                      **_with_cache(past_key_values, kwargs))
    hidden_states = self.post_attention_layernorm(hidden_states)
    hidden_states, residual = _add_norm(self.pre_feedforward_layernorm, hidden_states, residual, 1.0)
    hidden_states = self.post_feedforward_layernorm(self.mlp(hidden_states))
    return residual + hidden_states


# ------------------------------------------------------------------------------------------- attention module


def attention_forward(self, hidden_states: torch.Tensor,
                      position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
                      attention_mask: torch.Tensor | None = None, past_key_values=None,
                      **kwargs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """HF attention module with rotary through :func:`kernelworks.rotary_embedding` (q/k ``[batch, heads,
    seq, head_dim]``, cos/sin ``[batch, seq, rotary_dim]``: partial rotary when ``rotary_dim < head_dim``);
    Qwen3/Gemma3/Qwen3-Next's q/k norms run on the heads first. Qwen3-Next (``_kw_gated``): ``q_proj`` gives
    each head's query and output gate side by side, and the output is scaled by ``sigmoid(gate)``."""
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    gate = None
    if self._kw_gated:
        query, gate = self.q_proj(hidden_states).view(*input_shape, -1, 2 * self.head_dim).chunk(2, dim=-1)
        gate = gate.reshape(*input_shape, -1)
    else:
        query = self.q_proj(hidden_states).view(hidden_shape)
    key = self.k_proj(hidden_states).view(hidden_shape)
    value = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    if getattr(self, "q_norm", None) is not None:  # per-head RMSNorm over head_dim (Qwen3, Gemma3, Qwen3-Next)
        query, key = self.q_norm(query), self.k_norm(key)
    cos, sin = position_embeddings
    query, key = kernelworks.rotary_embedding(query.transpose(1, 2), key.transpose(1, 2), cos, sin, layout="neox",
                                              heads_dim=1)
    cache = _with_cache(past_key_values, kwargs).pop(CACHE_NAME, None)
    if cache is not None:
        key, value = cache.update(key, value, self.layer_idx)
    eager = sys.modules[type(self).__module__].eager_attention_forward
    interface = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager)
    out, weights = interface(self, query, key, value, attention_mask,
                             dropout=self.attention_dropout if self.training else 0.0, scaling=self.scaling,
                             **self._kw_attn_kwargs(self), **kwargs)
    out = out.reshape(*input_shape, -1).contiguous()
    if gate is not None:
        out = out * torch.sigmoid(gate)
    return self.o_proj(out), weights


# ------------------------------------------------------------------------------------------- LM head + loss


def _keep(hidden: torch.Tensor, logits_to_keep: int | torch.Tensor) -> torch.Tensor:
    """HF's ``logits_to_keep`` slice (its own helper where the installed version has one)."""
    keep = getattr(modeling_utils, "slice_logits_to_keep", None)
    if keep is not None:
        return keep(hidden, logits_to_keep)
    index = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
    return hidden[:, index, :]


def _shifted(labels: torch.Tensor, shift_labels: torch.Tensor | None, ignore_index: int) -> torch.Tensor:
    """HF's causal shift: token t predicts label t + 1; the last position gets ``ignore_index``."""
    if shift_labels is None:
        shift_labels = functional.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    return shift_labels.reshape(-1)


def _mean(loss_sum: torch.Tensor, num_items_in_batch) -> torch.Tensor:
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss_sum.device)
    return loss_sum / num_items_in_batch


def causal_lm_loss(hidden: torch.Tensor, lm_head: torch.nn.Module, labels: torch.Tensor, softcap: float | None,
                   *, ignore_index: int = -100, num_items_in_batch=None, shift_labels=None,
                   accum_dtype: torch.dtype | None = None) -> torch.Tensor:
    """HF's ``ForCausalLMLoss`` on ``lm_head(hidden)`` without the logits: :func:`kernelworks.
    fused_linear_cross_entropy` on hidden ``[batch, seq, H]`` and ``lm_head.weight [V, H]``; mean over the
    non-ignored tokens, or their sum over ``num_items_in_batch`` (gradient accumulation). float32 result.
    ``accum_dtype``: the head's weight-gradient accumulator (None: the parameter's dtype, so fp32 master weights
    under autocast accumulate in fp32)."""
    target = _shifted(labels, shift_labels, ignore_index).to(hidden.device)
    weight, bias = lm_head.weight, lm_head.bias
    accum_dtype = accum_dtype or weight.dtype  # the parameter's: an fp32 master weight keeps an fp32 accumulator
    if weight.dtype != hidden.dtype:  # autocast: fp32 master weight, 16-bit activations (as the Linear would run)
        weight = weight.to(hidden.dtype)
        bias = None if bias is None else bias.to(hidden.dtype)
    reduction = "mean" if num_items_in_batch is None else "sum"
    loss = kernelworks.fused_linear_cross_entropy(hidden.reshape(-1, hidden.shape[-1]), weight, target, bias=bias,
                                                  ignore_index=ignore_index, reduction=reduction, softcap=softcap,
                                                  accum_dtype=accum_dtype)
    return loss if num_items_in_batch is None else _mean(loss, num_items_in_batch)


def logits_loss(logits: torch.Tensor, labels: torch.Tensor, *, ignore_index: int = -100, num_items_in_batch=None,
                shift_labels=None) -> torch.Tensor:
    """HF's ``ForCausalLMLoss`` on given logits (``[batch, seq, V]``) through :func:`kernelworks.cross_entropy`:
    evaluation with labels, where the logits are returned anyway. HF upcasts the logits to fp32 first; the
    kernel reads them in their dtype and computes in fp32 (the same math without an fp32 copy of the logits)."""
    target = _shifted(labels, shift_labels, ignore_index).to(logits.device)
    reduction = "mean" if num_items_in_batch is None else "sum"
    rows = logits.reshape(-1, logits.shape[-1])
    if rows.dtype in FLOAT_DTYPES:
        loss = kernelworks.cross_entropy(rows, target, ignore_index=ignore_index, reduction=reduction)
    else:  # float64 logits (a model cast to double runs on torch): HF's own loss, in float32 as HF computes it
        loss = functional.cross_entropy(rows.float(), target, ignore_index=ignore_index, reduction=reduction)
    return loss if num_items_in_batch is None else _mean(loss, num_items_in_batch)


@can_return_tuple
def causal_lm_forward(self, input_ids: torch.LongTensor | None = None, attention_mask: torch.Tensor | None = None,
                      position_ids: torch.LongTensor | None = None, past_key_values=None,
                      inputs_embeds: torch.Tensor | None = None, labels: torch.LongTensor | None = None,
                      use_cache: bool | None = None, logits_to_keep: int | torch.Tensor = 0,
                      **kwargs) -> CausalLMOutputWithPast:
    """HF's dense ``ForCausalLM.forward``, arguments in its order: see :func:`_causal_lm`."""
    return _causal_lm(self, input_ids, attention_mask, position_ids, past_key_values, inputs_embeds, labels,
                      use_cache, None, logits_to_keep, **kwargs)


@can_return_tuple
def moe_causal_lm_forward(self, input_ids: torch.LongTensor | None = None,
                          attention_mask: torch.Tensor | None = None, position_ids: torch.LongTensor | None = None,
                          past_key_values=None, inputs_embeds: torch.Tensor | None = None,
                          labels: torch.LongTensor | None = None, use_cache: bool | None = None,
                          output_router_logits: bool | None = None, logits_to_keep: int | torch.Tensor = 0,
                          **kwargs) -> MoeCausalLMOutputWithPast:
    """HF's mixture-of-experts ``ForCausalLM.forward`` (Qwen3-MoE, Mixtral, Qwen3-Next), arguments in its order
    (``output_router_logits`` before ``logits_to_keep``): see :func:`_causal_lm`."""
    return _causal_lm(self, input_ids, attention_mask, position_ids, past_key_values, inputs_embeds, labels,
                      use_cache, output_router_logits, logits_to_keep, **kwargs)


def _call(fn, /, **kwargs):
    return fn(**kwargs)


def _causal_lm(self, input_ids: torch.LongTensor | None, attention_mask: torch.Tensor | None,
               position_ids: torch.LongTensor | None, past_key_values, inputs_embeds: torch.Tensor | None,
               labels: torch.LongTensor | None, use_cache: bool | None, output_router_logits: bool | None,
               logits_to_keep: int | torch.Tensor, **kwargs) -> CausalLMOutputWithPast:
    """HF ``ForCausalLM.forward``. Training with labels: the LM head and the loss fused (the logits never exist;
    ``logits=None`` as Liger does) when the head is a plain, unhooked ``nn.Linear`` (a LoRA-wrapped or hooked
    head runs as itself, its logits then through :func:`kernelworks.cross_entropy`), and no KV cache built
    unless ``use_cache=True`` is passed. Otherwise the logits
    as HF computes them (final soft-capping included), and with labels the loss from them through
    :func:`kernelworks.cross_entropy`. A mixture-of-experts model (its config has ``output_router_logits``) returns
    HF's MoE output: with router logits asked for, the load-balancing loss as ``aux_loss``, added to the loss times
    ``router_aux_loss_coef``."""
    kwargs = _with_cache(past_key_values, kwargs)
    if use_cache is None and labels is not None and self.training and CACHE_NAME not in kwargs:
        # a training step with labels fills no KV cache unless asked to (HF's default, config.use_cache, builds
        # one each step: a cache update per layer, and for Qwen3-Next the recurrent states written out)
        use_cache = False
    packed = None
    if self.config._attn_implementation == attention.NAME:  # packing decided once, not in every layer
        packed = attention.packed_positions(position_ids, kwargs.get(CACHE_NAME), kwargs)
        if packed is not None:
            kwargs[attention.PACKED_KWARG] = packed
        weights = kwargs.get("output_attentions")
        if weights or (weights is None and getattr(self.config, "output_attentions", False)):
            kwargs[attention.WEIGHTS_KWARG] = True
    if position_ids is not None and "linear_attention" in (getattr(self.config, "layer_types", None) or ()):
        kwargs[attention.POSITIONS_KWARG] = position_ids  # for the Gated DeltaNet layers' packing (see there)
    moe = hasattr(self.config, "output_router_logits")
    if moe:
        if output_router_logits is None:
            output_router_logits = self.config.output_router_logits
        kwargs["output_router_logits"] = output_router_logits
    base = attention.call_unpacked if packed is False and attention_mask is None else _call
    outputs = base(self.model, input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   inputs_embeds=inputs_embeds, use_cache=use_cache, **kwargs)
    kwargs.pop("output_router_logits", None)
    hidden = _keep(outputs.last_hidden_state, logits_to_keep)
    softcap = getattr(self.config, "final_logit_softcapping", None)
    loss_kwargs = {name: kwargs[name] for name in ("ignore_index", "num_items_in_batch", "shift_labels")
                   if kwargs.get(name) is not None}
    logits = loss = None
    if labels is not None and self.training and _plain_linear(self.lm_head, bias=True) and hidden.dtype in FLOAT_DTYPES:
        loss = causal_lm_loss(hidden, self.lm_head, labels, softcap, accum_dtype=self._kw_loss_accum, **loss_kwargs)
    else:
        logits = self.lm_head(hidden)
        if softcap is not None:
            logits = torch.tanh(logits / softcap) * softcap
        if labels is not None:
            loss = logits_loss(logits, labels, **loss_kwargs)
    common = dict(loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions)
    cache = getattr(outputs, CACHE_NAME)
    if not moe:
        return CausalLMOutputWithPast(**common, **{CACHE_NAME: cache})
    aux_loss = None
    if output_router_logits:
        balance = sys.modules[type(self).__module__].load_balancing_loss_func
        aux_loss = balance(outputs.router_logits, self.num_experts, self.num_experts_per_tok, attention_mask)
        if loss is not None:
            common["loss"] = loss + self.router_aux_loss_coef * aux_loss.to(loss.device)
    cache_field = "cache" if "cache" in MoeCausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"
    return MoeCausalLMOutputWithPast(aux_loss=aux_loss, router_logits=outputs.router_logits, **common,
                                     **{cache_field: cache})
