"""Public ``rotary_embedding``, its validation, and the custom op behind it.

One :class:`~kernelworks.runtime.torch_op.TorchOp`, ``rotary_embedding``: ``(q, k, cos, sin, layout,
heads_dim) → (q_out, k_out)``, custom ops ``kernelworks::rotary_embedding`` / ``_backward`` under
``torch.compile``, an autograd Function in eager. The backward is the same kernel run on the output
gradients with the rotation transposed; ``cos``/``sin`` get no gradient (a call that would need one is
refused up front, see :func:`rotary_embedding`).
"""

from __future__ import annotations

import torch

from kernelworks.ops.rotary.kernels import LAYOUTS, like_in_memory_order, rotary_embedding_bwd, rotary_embedding_fwd
from kernelworks.runtime.replay import replayed_op
from kernelworks.runtime.torch_op import TorchOp
from kernelworks.runtime.validate import check_float_tensor, check_same_device, check_same_dtype

# ------------------------------------------------------------------------------------------- custom ops


def _forward(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str,
             heads_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    return rotary_embedding_fwd(q, k, cos, sin, layout, heads_dim)


def _forward_fake(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str,
                  heads_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    return like_in_memory_order(q, q.new_empty), like_in_memory_order(k, k.new_empty)


def _backward(dq_out: torch.Tensor, dk_out: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str,
              heads_dim: int) -> list[torch.Tensor]:
    return list(rotary_embedding_bwd(dq_out, dk_out, cos, sin, layout, heads_dim))


def _backward_fake(dq_out: torch.Tensor, dk_out: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   layout: str, heads_dim: int) -> list[torch.Tensor]:
    return [like_in_memory_order(dq_out, dq_out.new_empty), like_in_memory_order(dk_out, dk_out.new_empty)]


def _setup_context(ctx, inputs, output) -> None:
    q, k, cos, sin, layout, heads_dim = inputs
    ctx.save_for_backward(cos, sin)
    ctx.layout, ctx.heads_dim = layout, heads_dim
    ctx.shapes, ctx.dtype = (q.shape, k.shape), q.dtype


def _input_grads(ctx, grads: tuple, backward) -> tuple:
    """Gradients for ``(q, k, cos, sin, layout, heads_dim)``; an unused output's gradient is None (read
    as zeros: the kernel rotates both tensors in its one launch)."""
    cos, sin = ctx.saved_tensors
    dq_out, dk_out = (torch.zeros(shape, dtype=ctx.dtype, device=cos.device) if g is None else g
                      for g, shape in zip(grads, ctx.shapes))
    dq, dk = backward(dq_out, dk_out, cos, sin, ctx.layout, ctx.heads_dim)
    return (dq if ctx.needs_input_grad[0] else None, dk if ctx.needs_input_grad[1] else None,
            None, None, None, None)


_apply = TorchOp("rotary_embedding", forward=_forward, forward_fake=_forward_fake, backward=_backward,
                 backward_fake=_backward_fake, setup_context=_setup_context, input_grads=_input_grads)
"""``kernelworks::rotary_embedding`` (+ ``_backward``) under torch.compile, an autograd Function in eager."""


# ------------------------------------------------------------------------------------------- public API


def _check_int(name: str, value: object, allowed: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int ({allowed}), got {type(value).__name__}")
    return value


def _check(q: object, k: object, cos: object, sin: object, layout: object, rotary_dim: object,
           heads_dim: object) -> None:
    """Types, ranks, dtypes, devices and shapes; the tables' sizes against q's, rotary_dim against both."""
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
    if _check_int("heads_dim", heads_dim, "1 or 2") not in (1, 2):
        raise ValueError(f"heads_dim: expected 1 ([batch, heads, seq, head_dim]) or 2 ([batch, seq, heads, "
                         f"head_dim]), got {heads_dim}")
    check_float_tensor("q", q, min_dim=4, max_dim=4)
    check_float_tensor("k", k, min_dim=4, max_dim=4)
    check_same_device(("q", "k"), (q, k))
    check_same_dtype(("q", "k"), (q, k))
    seq_dim = 3 - heads_dim
    # batch, seq and head_dim must agree; the head counts may differ (GQA).
    for dim, what in ((0, "batch"), (seq_dim, "seq"), (3, "head_dim")):
        if q.shape[dim] != k.shape[dim]:
            raise ValueError(f"q, k: expected the same {what} size (dim {dim}), got q {tuple(q.shape)} and "
                             f"k {tuple(k.shape)}")
    batch, seq, head_dim = q.shape[0], q.shape[seq_dim], q.shape[3]
    table_dtypes = (torch.float32,) if q.dtype == torch.float32 else (torch.float32, q.dtype)
    for name, t in (("cos", cos), ("sin", sin)):
        check_float_tensor(name, t, min_dim=2, max_dim=3, dtypes=table_dtypes)
        check_same_device(("q", name), (q, t))
        if t.shape[-2] != seq or (t.dim() == 3 and t.shape[0] not in (1, batch)):
            want = f"[{seq}, rotary_dim], [1, {seq}, rotary_dim] or [{batch}, {seq}, rotary_dim]"
            raise ValueError(f"{name}: expected {want} to match q's batch {batch} and seq {seq} "
                             f"(q: {tuple(q.shape)}, heads_dim={heads_dim}), got {tuple(t.shape)}")
        if t.requires_grad and torch.is_grad_enabled():
            raise ValueError(f"{name}: gradients with respect to cos/sin are not supported (the tables are "
                             f"constants of the positions); got a tensor that requires grad: pass "
                             f"{name}.detach()")
    if cos.shape != sin.shape:
        raise ValueError(f"cos, sin: expected one shape, got cos {tuple(cos.shape)} and sin {tuple(sin.shape)}")
    rot = cos.shape[-1]
    if rot % 2 or rot > head_dim:
        raise ValueError(f"cos: expected an even last dimension (rotary_dim) of at most head_dim {head_dim}, "
                         f"got {rot} (cos: {tuple(cos.shape)})")
    if rotary_dim is not None and _check_int("rotary_dim", rotary_dim, "or None") != rot:
        raise ValueError(f"rotary_dim: expected cos/sin's last dimension {rot} (the tables hold one value "
                         f"per rotated feature), got {rotary_dim}")


@replayed_op
def rotary_embedding(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *,
                     layout: str = "neox", rotary_dim: int | None = None,
                     heads_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embedding of queries and keys, as Hugging Face's ``apply_rotary_pos_emb(q, k, cos,
    sin, unsqueeze_dim=heads_dim)``: ``x·cos + rotate(x)·sin`` over the first ``rotary_dim`` features, the
    rest passed through (partial rotary). q and k in one launch, with autograd; works under
    ``torch.compile(fullgraph=True)``.

    Args:
        q: ``[batch, heads, seq, head_dim]`` (``heads_dim=1``, HF's layout) or ``[batch, seq, heads,
            head_dim]`` (``heads_dim=2``); float32, float16 or bfloat16 on CUDA (CPU under the Triton
            interpreter); any strides (the transposed view HF passes, slices of a fused qkv projection).
        k: like ``q`` with its own head count (GQA); same dtype, batch, seq and head_dim.
        cos, sin: ``[seq, rotary_dim]`` (shared by the batch) or ``[batch or 1, seq, rotary_dim]`` (HF's
            ``[batch, seq, head_dim]`` when the whole head rotates); float32 or q's dtype; any strides
            (expanded views are fine). One value per rotated feature, as HF builds them (NeoX:
            ``cat(freqs, freqs)``; GPT-J: each frequency repeated twice, interleaved). No gradient flows to
            them: a call in grad mode with ``cos`` or ``sin`` requiring grad raises ``ValueError``.
        layout: ``"neox"`` (default; Llama, Mistral, Qwen, Gemma in HF: feature ``i`` pairs with
            ``i + rotary_dim/2``) or ``"gptj"`` (GPT-J, interleaved pairs ``2i, 2i + 1``).
        rotary_dim: even, ``≤ head_dim``; None (default) takes ``cos.shape[-1]``, which it must equal.
        heads_dim: where the head axis is, 1 or 2 (HF's ``unsqueeze_dim``).

    Returns:
        ``(q_out, k_out)``: shaped and typed like ``q`` and ``k``, dense, in their memory order (as
        ``torch.empty_like``: HF's transposed q comes back laid out like q, so no copy follows in the
        backward); math in fp32, one rounding.

    Example::

        cos, sin = rotary_emb(hidden, position_ids)             # HF: [batch, seq, head_dim]
        q, k = kw.rotary_embedding(q, k, cos, sin)              # q: [batch, 32, seq, 128], k: [batch, 8, seq, 128]
    """
    _check(q, k, cos, sin, layout, rotary_dim, heads_dim)
    return _apply(q, k, cos, sin, layout, heads_dim)
