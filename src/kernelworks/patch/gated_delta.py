"""Qwen3-Next's Gated DeltaNet layer (``Qwen3NextGatedDeltaNet.forward``) on the Gated DeltaNet ops.

The layer: projections → a short causal depthwise convolution (with SiLU) over the concatenated q/k/v
channels → L2-normalised q/k, the gates ``g = −exp(A_log)·softplus(a + dt_bias)`` and ``β = sigmoid(b)`` →
the gated delta rule → an RMSNorm of each head's output gated by ``silu(z)`` → the output projection.

Here the rule runs on :func:`kernelworks.gated_delta_prefill` (whole sequences, with autograd) or, for one new
token with a cache, on :func:`kernelworks.gated_delta_decode` (q/k normalisation and the gates fused, the cached
state updated in place). The projections and the convolution stay the model's (HF's own convolution
functions, or the ``causal_conv1d`` kernels where transformers found them); packed sequences, which those
functions would run into each other, get a segment-aware convolution here.

The recurrent state: ours is ``[N, H_v, V, K]``, HF's cache holds ``[N, H_v, K, V]``. We hand the cache the
transposed view of our final state; the cache allocates its buffer like it (``zeros_like`` keeps strides), so
the buffer is our layout seen transposed, and decode updates it in place with no copy. A cache filled by
the unpatched model (HF's layout) costs one copy per step instead.
"""

from __future__ import annotations

import sys

import torch
from torch.nn import functional

import kernelworks
from kernelworks.ops.gated_delta.reference import l2_normalize
from kernelworks.patch import attention
from kernelworks.patch.layers import CACHE_NAME


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    """HF's ``l2norm`` over the head dim (the op's own ``x / √(Σx² + 1e-6)``), in fp32, back in x's dtype (the
    prefill kernel takes q, k, v in one dtype)."""
    return l2_normalize(x.float()).to(x.dtype)


def _in_sequence_offsets(starts: torch.Tensor) -> torch.Tensor:
    """``[batch, seq]`` bool sequence starts → each token's offset from the start of its sequence."""
    index = torch.arange(starts.shape[-1], device=starts.device).expand_as(starts)
    first = torch.where(starts, index, torch.zeros_like(index)).cummax(-1).values
    return index - first


def _packed_causal_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str | None,
                        offsets: torch.Tensor) -> torch.Tensor:
    """HF's ``causal_conv1d_fn`` (``x [batch, channels, seq]``, depthwise ``weight [channels, width]``) with
    each packed sequence convolved on its own: tap ``s`` (the token ``s`` back) counts only where the token is
    at least ``s`` into its sequence. fp32 accumulation, the output in x's dtype."""
    width = weight.shape[-1]
    x32, w32 = x.float(), weight.float()
    out = x32 * w32[:, width - 1, None]
    for back in range(1, width):
        shifted = functional.pad(x32[..., :-back], (back, 0))
        out = out + shifted * w32[:, width - 1 - back, None] * (offsets >= back)[:, None, :]
    if bias is not None:
        out = out + bias.float()[:, None]
    if activation is not None:
        out = functional.silu(out) if activation in ("silu", "swish") else getattr(functional, activation)(out)
    return out.to(x.dtype)


def _packing(kwargs: dict, batch: int, seq: int, previous: bool):
    """``(cu_seqlens over the flattened batch, starts [batch, seq])`` when this call packs sequences, else
    None: from the collator's ``cu_seq_lens_q`` or restarting ``position_ids``, as the attention layers read
    it (never with a cache that already holds tokens)."""
    packed = kwargs.pop(attention.PACKED_KWARG, None)
    if packed is False or previous or seq < 2:
        return None
    varlen = attention._varlen_args(kwargs, batch, seq, seq)
    if varlen is None:
        return None
    return varlen[0], attention._starts(varlen, batch, seq)


def _gated_rms_norm(norm: torch.nn.Module, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """HF's ``RMSNormGated``: ``rms_norm(x)·weight·silu(gate)`` over the last dim, as two kernels (the
    norm, then SwiGLU with the gate), rounding where HF does."""
    return kernelworks.swiglu(gate, kernelworks.rms_norm(x, norm.weight, norm.variance_epsilon))


def _wants_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def gated_delta_net_forward(self, hidden_states: torch.Tensor, cache_params=None,
                            attention_mask: torch.Tensor | None = None, *, cache=None, past_key_values=None,
                            position_ids: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
    """``Qwen3NextGatedDeltaNet.forward``: ``[batch, seq, hidden] → [batch, seq, hidden]``, the cache (under
    any of HF's names for it) read and updated as HF does."""
    cache = next((c for c in (cache, cache_params, past_key_values, kwargs.pop(CACHE_NAME, None))
                  if c is not None), None)
    hf = sys.modules[type(self).__module__]
    hidden_states = hf.apply_mask_to_padding_states(hidden_states, attention_mask)
    batch, seq = hidden_states.shape[:2]
    layer = cache.layers[self.layer_idx] if cache is not None else None
    previous = layer is not None and bool(layer.has_previous_state[0])
    conv_state = layer.conv_states[0] if previous else None
    recurrent = layer.recurrent_states[0] if previous else None
    handed = kwargs.pop(attention.POSITIONS_KWARG, None)  # from the model's entry, past HF's own decoder layer
    position_ids = handed if position_ids is None else position_ids
    if position_ids is not None:
        kwargs["position_ids"] = position_ids
    packing = _packing(kwargs, batch, seq, previous)

    q, k, v, z, b, a = self.fix_query_key_value_ordering(self.in_proj_qkvz(hidden_states),
                                                         self.in_proj_ba(hidden_states))
    mixed = torch.cat([t.reshape(batch, seq, -1) for t in (q, k, v)], dim=-1).transpose(1, 2)  # [B, C, T]
    weight, bias = self.conv1d.weight.squeeze(1), self.conv1d.bias
    if conv_state is not None and seq == 1 and not getattr(layer, "record_past", False):
        mixed = hf.causal_conv1d_update(mixed, conv_state, weight, bias, self.activation)
    else:
        if cache is not None:
            kept = mixed
            if packing is not None:  # the cache continues each row's last sequence: no earlier tokens in it
                offsets = _in_sequence_offsets(packing[1])
                last_start = seq - 1 - offsets[:, -1:]
                kept = mixed * (torch.arange(seq, device=mixed.device) >= last_start)[:, None, :].to(mixed.dtype)
            full = cache.update_conv_state(kept, self.layer_idx, conv_kernel_size=self.conv_kernel_size)
            if packing is None:
                mixed = full
        if packing is not None:
            mixed = _packed_causal_conv(mixed, weight, bias, self.activation, _in_sequence_offsets(packing[1]))
        else:
            mixed = hf.causal_conv1d_fn(mixed, weight, bias, activation=self.activation)
            mixed = mixed[:, :, -seq:]
    mixed = mixed.transpose(1, 2).contiguous()  # the kernels read heads with a unit stride
    q, k, v = torch.split(mixed, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
    q = q.reshape(batch, seq, -1, self.head_k_dim)
    k = k.reshape(batch, seq, -1, self.head_k_dim)
    v = v.reshape(batch, seq, -1, self.head_v_dim)

    if recurrent is not None and seq == 1 and not _wants_grad(q, self.A_log, self.dt_bias, a, b):
        pool = recurrent.transpose(-1, -2)  # [B, H_v, V, K]: in place when the buffer is our layout
        in_place = pool.stride(-1) == 1
        if not in_place:
            pool = pool.contiguous()
        o = kernelworks.gated_delta_decode(q[:, 0], k[:, 0], v[:, 0], a[:, 0], b[:, 0], pool, A_log=self.A_log,
                                           dt_bias=self.dt_bias, use_qk_l2norm=True)[:, None]
        if not in_place:
            cache.update_recurrent_state(pool.transpose(-1, -2), self.layer_idx)
    else:
        beta = b.sigmoid()
        g = -self.A_log.float().exp() * functional.softplus(a.float() + self.dt_bias)
        q, k = _l2norm(q), _l2norm(k)
        initial = None if recurrent is None else recurrent.transpose(-1, -2)
        if packing is None:
            o, final = kernelworks.gated_delta_prefill(q, k, v, g, beta, initial_state=initial,
                                                       output_final_state=cache is not None)
        else:
            cu, starts = packing
            o, final = kernelworks.gated_delta_prefill(
                *(t.reshape(1, batch * seq, *t.shape[2:]) for t in (q, k, v, g, beta)), cu_seqlens=cu,
                output_final_state=cache is not None)
            o = o.view(batch, seq, *o.shape[2:])
            if final is not None:  # each row's last sequence carries on in the cache
                final = final[starts.reshape(-1).cumsum(0).view(batch, seq)[:, -1] - 1]
        if cache is not None:
            cache.update_recurrent_state(final.transpose(-1, -2), self.layer_idx)
    o = _gated_rms_norm(self.norm, o, z)
    return self.out_proj(o.reshape(batch, seq, -1))
