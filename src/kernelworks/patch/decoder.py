"""A Llama-shaped decoder layer's training step as one autograd node.

The patched modules make about thirty autograd nodes a layer: five kernelworks Functions (norm, rotary, flash
attention, add + norm, gated MLP), whose backwards run Python, and around them torch's nodes for each
projection and view, each a trip through the engine. On a small model the GPU finishes a layer's kernels
sooner than the host issues them (issue 16's small Llama: host-bound). ``decoder_layer`` runs the same kernel
bodies and cuBLAS products, in the same order, as one :class:`~kernelworks.runtime.torch_op.TorchOp`: one
Function whose backward runs the layer's backward bodies in reverse. Its forward and backward bodies replay
per signature (``runtime.replay``) as any op's do, so a repeated layer costs two straight-line replays.

It saves what the per-op path saves (x, the normed x, rotated q and k, v, the attention output and its
log-sum-exp, the residual stream after attention, the MLP input, gate and up, the norm statistics), so memory
is unchanged. One numerical difference: the normed input's gradient from the q, k and v projections is
summed inside cuBLAS (``addmm_``, fp32 accumulation) instead of by autograd in the activation dtype.

Used by :func:`kernelworks.patch.layers.llama_layer_forward` when an autograd graph is recorded and the layer
qualifies (:func:`kernelworks.patch.layers._dense_layer_args`) and is small enough (:data:`MAX_NODE_MLP_BYTES`);
inference, larger layers and ``torch.compile`` take the modules' ops (``_dense_layer``, the custom ops).
"""

from __future__ import annotations

import torch

from kernelworks.ops.activation import mlp
from kernelworks.ops.attention.api import _backward as attention_backward
from kernelworks.ops.attention.api import _forward as attention_forward
from kernelworks.ops.norm.backward import norm_bwd
from kernelworks.ops.norm.forward import norm_fwd
from kernelworks.ops.rotary.kernels import rotary_embedding_bwd, rotary_embedding_fwd
from kernelworks.runtime.torch_op import TorchOp

Tensor = torch.Tensor
OptTensor = torch.Tensor | None

MAX_NODE_MLP_BYTES = 64 << 20
"""Layers whose MLP gate (or up), ``[tokens, intermediate]``, is larger keep one node per op. One node holds
every tensor the layer saved until its whole backward has run, where per-op nodes free the MLP's gate and up
(the largest) as soon as the MLP's backward is done: on the Llama-3-8B-shaped step (8192 tokens, 235 MB
each) the peak rose from 12.5 to 12.8 GB (H200, session 22). Such layers keep the GPU busy longer than the host
takes to issue them, so they lose no time; the small model's layers (46 MB) are host-bound and gain."""

SAVED = ("h1", "q", "k", "v", "o", "lse", "h", "stats1", "stats2", "h2", "gate", "up")
"""The forward's outputs after the layer's output: what the backward reads (q/k/v as flash attention got
them, ``h`` the residual stream after attention, ``h2`` the MLP's input rows)."""


def _linear(x: Tensor, weight: Tensor, bias: OptTensor) -> Tensor:
    """``F.linear`` on rows, as it runs on them: ``mm``, or ``addmm`` with a bias."""
    return torch.mm(x, weight.t()) if bias is None else torch.addmm(bias, x, weight.t())


def _forward(x: Tensor, cos: Tensor, sin: Tensor, norm1_weight: Tensor, q_weight: Tensor, q_bias: OptTensor,
             k_weight: Tensor, k_bias: OptTensor, v_weight: Tensor, v_bias: OptTensor, o_weight: Tensor,
             o_bias: OptTensor, norm2_weight: Tensor, gate_weight: Tensor, up_weight: Tensor, down_weight: Tensor,
             eps1: float, offset1: float, eps2: float, offset2: float, head_dim: int, scale: float, left: int,
             right: int, act: str) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor,
                                            Tensor, Tensor, Tensor, Tensor]:
    """``(out, *SAVED)`` for ``x [batch, seq, hidden]``; cos/sin ``[batch, seq, head_dim]`` (NeoX layout)."""
    batch, seq, hidden = x.shape
    h1, _, stats1 = norm_fwd(x, None, norm1_weight, None, eps=eps1, offset=offset1, rms=True)
    rows = h1.view(-1, hidden)
    q = _linear(rows, q_weight, q_bias).view(batch, seq, -1, head_dim)
    k = _linear(rows, k_weight, k_bias).view(batch, seq, -1, head_dim)
    v = _linear(rows, v_weight, v_bias).view(batch, seq, -1, head_dim)
    # rotary on [batch, heads, seq, dim] views, as the patched attention module calls it
    q, k = rotary_embedding_fwd(q.transpose(1, 2), k.transpose(1, 2), cos, sin, "neox", 1)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    o, lse = attention_forward(q, k, v, None, None, seq, seq, scale, left, right, 0.0)
    attn = _linear(o.reshape(batch * seq, -1), o_weight, o_bias).view(batch, seq, hidden)
    y2, h, stats2 = norm_fwd(attn, x, norm2_weight, None, eps=eps2, offset=offset2, rms=True)
    h2 = y2.view(-1, hidden)
    m, gate, up = mlp._forward(h2, gate_weight, up_weight, down_weight, act)
    return h + m.view(batch, seq, hidden), h1, q, k, v, o, lse, h, stats1, stats2, h2, gate, up


def _forward_fake(x, cos, sin, norm1_weight, q_weight, q_bias, k_weight, k_bias, v_weight, v_bias, o_weight,
                  o_bias, norm2_weight, gate_weight, up_weight, down_weight, eps1, offset1, eps2, offset2,
                  head_dim, scale, left, right, act):
    batch, seq, hidden = x.shape
    heads, kv_heads, inner = q_weight.shape[0] // head_dim, k_weight.shape[0] // head_dim, gate_weight.shape[0]
    rows = batch * seq
    stats = x.new_empty((1, rows), dtype=torch.float32)
    return (x.new_empty(x.shape), x.new_empty(x.shape), x.new_empty((batch, seq, heads, head_dim)),
            x.new_empty((batch, seq, kv_heads, head_dim)), x.new_empty((batch, seq, kv_heads, head_dim)),
            x.new_empty((batch, seq, heads, head_dim)), x.new_empty((batch, heads, seq), dtype=torch.float32),
            x.new_empty(x.shape), stats, stats.clone(), x.new_empty((rows, hidden)), x.new_empty((rows, inner)),
            x.new_empty((rows, inner)))


def _backward(grad: Tensor, x: Tensor, cos: Tensor, sin: Tensor, norm1_weight: Tensor, q_weight: Tensor,
              q_bias: OptTensor, k_weight: Tensor, k_bias: OptTensor, v_weight: Tensor, v_bias: OptTensor,
              o_weight: Tensor, o_bias: OptTensor, norm2_weight: Tensor, gate_weight: Tensor, up_weight: Tensor,
              down_weight: Tensor, h1: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, h: Tensor,
              stats1: Tensor, stats2: Tensor, h2: Tensor, gate: Tensor, up: Tensor, offset1: float, offset2: float,
              scale: float, left: int, right: int, act: str, needs: list[bool]) -> list[Tensor]:
    """The gradients of ``(x, norm1_weight, q_weight, q_bias, k_weight, k_bias, v_weight, v_bias, o_weight,
    o_bias, norm2_weight, gate_weight, up_weight, down_weight)``, an empty tensor for each one ``needs`` says
    nobody wants; the layer's ops in reverse."""
    batch, seq, hidden = x.shape
    rows = batch * seq
    (need_x, need_n1, need_qw, need_qb, need_kw, need_kb, need_vw, need_vb, need_ow, need_ob, need_n2, need_gw,
     need_uw, need_dw) = needs
    none = x.new_empty(0)

    def linear_grads(g: Tensor, inp: Tensor, need_w: bool, need_b: bool) -> tuple[Tensor, Tensor]:
        return (torch.mm(g.t(), inp) if need_w else none), (g.sum(0) if need_b else none)

    g_mlp = grad.reshape(rows, hidden)
    g_h2, g_gate_w, g_up_w, g_down_w = mlp._backward(g_mlp, h2, gate, up, gate_weight, up_weight, down_weight, act,
                                                     True, need_gw, need_uw, need_dw)
    # h = attn + x: its gradient is the norm's plus the layer output's own (the residual stream)
    g_h, g_n2, _ = norm_bwd(g_h2.view(batch, seq, hidden), grad, h, norm2_weight, stats2, offset=offset2, rms=True,
                            dw_dtype=norm2_weight.dtype if need_n2 else None, db_dtype=None)
    g_attn = g_h.view(rows, hidden)
    g_o = torch.mm(g_attn, o_weight)
    g_ow, g_ob = linear_grads(g_attn, o.reshape(rows, -1), need_ow, need_ob)
    g_q, g_k, g_v = attention_backward(g_o.view(o.shape), None, q, k, v, o, lse, None, None, seq, seq, scale, left,
                                       right, 0.0)
    g_q, g_k = rotary_embedding_bwd(g_q.transpose(1, 2), g_k.transpose(1, 2), cos, sin, "neox", 1)
    g_q, g_k = g_q.transpose(1, 2).reshape(rows, -1), g_k.transpose(1, 2).reshape(rows, -1)
    g_v = g_v.reshape(rows, -1)
    x_rows = h1.view(rows, hidden)
    g_h1 = torch.mm(g_q, q_weight)
    g_h1.addmm_(g_k, k_weight)
    g_h1.addmm_(g_v, v_weight)
    g_qw, g_qb = linear_grads(g_q, x_rows, need_qw, need_qb)
    g_kw, g_kb = linear_grads(g_k, x_rows, need_kw, need_kb)
    g_vw, g_vb = linear_grads(g_v, x_rows, need_vw, need_vb)
    g_x, g_n1, _ = norm_bwd(g_h1.view(batch, seq, hidden), None, x, norm1_weight, stats1, offset=offset1, rms=True,
                            dw_dtype=norm1_weight.dtype if need_n1 else None, db_dtype=None)
    g_x = g_x + g_h if need_x else none
    return [g_x, g_n1 if need_n1 else none, g_qw, g_qb, g_kw, g_kb, g_vw, g_vb, g_ow, g_ob,
            g_n2 if need_n2 else none, g_gate_w if need_gw else none, g_up_w if need_uw else none,
            g_down_w if need_dw else none]


_GRAD_OF = (0, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
"""The forward's argument positions that ``_backward``'s gradients belong to, in its order."""


def _backward_fake(grad, x, cos, sin, norm1_weight, q_weight, q_bias, k_weight, k_bias, v_weight, v_bias,
                   o_weight, o_bias, norm2_weight, gate_weight, up_weight, down_weight, *rest):
    needs = rest[-1]
    params = (x, norm1_weight, q_weight, q_bias, k_weight, k_bias, v_weight, v_bias, o_weight, o_bias,
              norm2_weight, gate_weight, up_weight, down_weight)
    return [p.new_empty(p.shape) if need else x.new_empty(0) for p, need in zip(params, needs)]


def _setup_context(ctx, inputs, output) -> None:
    (x, cos, sin, n1, qw, qb, kw, kb, vw, vb, ow, ob, n2, gw, uw, dw, _eps1, offset1, _eps2, offset2, _head_dim,
     scale, left, right, act) = inputs
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(x, cos, sin, n1, qw, qb, kw, kb, vw, vb, ow, ob, n2, gw, uw, dw, *output[1:])
    ctx.args = (offset1, offset2, scale, left, right, act)


def _input_grads(ctx, grads: tuple, backward) -> tuple:
    """Gradients for the forward's 25 arguments."""
    out = [None] * 25
    if grads[0] is None:
        return tuple(out)
    saved = ctx.saved_tensors
    params = (saved[0], *saved[3:16])
    needs = [bool(ctx.needs_input_grad[i]) and p is not None for i, p in zip(_GRAD_OF, params)]
    for i, g, need in zip(_GRAD_OF, backward(grads[0], *saved, *ctx.args, needs), needs):
        if need:
            out[i] = g
    return tuple(out)


decoder_layer = TorchOp("llama_decoder_layer", forward=_forward, forward_fake=_forward_fake, backward=_backward,
                        backward_fake=_backward_fake, setup_context=_setup_context, input_grads=_input_grads)
"""``decoder_layer(x, cos, sin, norm1_weight, q_weight, q_bias, k_weight, k_bias, v_weight, v_bias, o_weight,
o_bias, norm2_weight, gate_weight, up_weight, down_weight, eps1, offset1, eps2, offset2, head_dim, scale, left,
right, act)[0]``: the layer's output, ``[batch, seq, hidden]`` like x (float32, float16 or bfloat16; every
weight in x's dtype); ``left``/``right`` the attention window (``-1`` unbounded), ``act`` the gated MLP's
activation (``"silu"``, ``"gelu_tanh"``, ``"gelu"``)."""
