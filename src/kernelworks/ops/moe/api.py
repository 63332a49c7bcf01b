"""Public ``moe_sort``, ``moe_permute`` and ``moe_unpermute``, their validation, and the custom ops behind them.

Two :class:`~kernelworks.runtime.torch_op.TorchOp` s:

- ``moe_permute``: ``(hidden, order, inverse) → x_sorted``; backward: each token's ``top_k`` row gradients
  summed (:func:`~kernelworks.ops.moe.kernels.sum_pairs`, unweighted).
- ``moe_unpermute``: ``(y_sorted, weights, order, inverse) → out``; backward:
  :func:`~kernelworks.ops.moe.kernels.scale_rows_backward` (``dy`` and the routing weights' ``dw``).

``moe_sort`` is plain torch (a stable sort, a scatter, a count): no host sync, static shapes, so a patched
model stays one graph under ``torch.compile`` and CUDA graphs.
"""

from __future__ import annotations

import torch

from kernelworks.ops.moe.kernels import gather_rows, scale_rows_backward, sum_pairs
from kernelworks.runtime.indices import check_index_tensor, check_index_values, validation_enabled
from kernelworks.runtime.replay import replayed_op
from kernelworks.runtime.torch_op import TorchOp
from kernelworks.runtime.validate import check_float_tensor, check_same_device

# ------------------------------------------------------------------------------------------- custom ops


def _permute_forward(hidden: torch.Tensor, order: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
    return gather_rows(hidden, order, order.shape[0] // hidden.shape[0])


def _permute_forward_fake(hidden: torch.Tensor, order: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
    return hidden.new_empty((order.shape[0], hidden.shape[1]))


def _permute_backward(dx: torch.Tensor, inverse: torch.Tensor, tokens: int) -> torch.Tensor:
    return sum_pairs(dx, inverse, None, inverse.shape[0] // tokens, dx.dtype)


def _permute_backward_fake(dx: torch.Tensor, inverse: torch.Tensor, tokens: int) -> torch.Tensor:
    return dx.new_empty((tokens, dx.shape[1]))


def _permute_setup(ctx, inputs, output) -> None:
    hidden, _, inverse = inputs
    ctx.save_for_backward(inverse)
    ctx.tokens = hidden.shape[0]
    ctx.set_materialize_grads(False)


def _permute_grads(ctx, grads: tuple, backward) -> tuple:
    """Gradients for ``(hidden, order, inverse)``."""
    (dx,) = grads
    if dx is None or not ctx.needs_input_grad[0]:
        return None, None, None
    (inverse,) = ctx.saved_tensors
    return backward(dx, inverse, ctx.tokens), None, None


_permute = TorchOp("moe_permute", forward=_permute_forward, forward_fake=_permute_forward_fake,
                   backward=_permute_backward, backward_fake=_permute_backward_fake, setup_context=_permute_setup,
                   input_grads=_permute_grads)
"""``kernelworks::moe_permute`` (+ ``_backward``) under torch.compile, an autograd Function in eager."""


def _unpermute_forward(y: torch.Tensor, weights: torch.Tensor, order: torch.Tensor,
                       inverse: torch.Tensor) -> torch.Tensor:
    return sum_pairs(y, inverse, weights, weights.shape[1], y.dtype)


def _unpermute_forward_fake(y: torch.Tensor, weights: torch.Tensor, order: torch.Tensor,
                            inverse: torch.Tensor) -> torch.Tensor:
    return y.new_empty((weights.shape[0], y.shape[1]))


def _unpermute_backward(dout: torch.Tensor, y: torch.Tensor, weights: torch.Tensor, order: torch.Tensor,
                        need_dy: bool, need_dw: bool) -> list[torch.Tensor]:
    dy, dw = scale_rows_backward(dout, y, order, weights, need_dy, need_dw)
    return [g for g in (dy, dw) if g is not None]


def _unpermute_backward_fake(dout: torch.Tensor, y: torch.Tensor, weights: torch.Tensor, order: torch.Tensor,
                             need_dy: bool, need_dw: bool) -> list[torch.Tensor]:
    # contiguous, as the kernels allocate them, whatever y's and weights' strides
    return ([y.new_empty(y.shape)] if need_dy else []) + ([weights.new_empty(weights.shape)] if need_dw else [])


def _unpermute_setup(ctx, inputs, output) -> None:
    y, weights, order, _ = inputs
    ctx.save_for_backward(y, weights, order)
    ctx.set_materialize_grads(False)


def _unpermute_grads(ctx, grads: tuple, backward) -> tuple:
    """Gradients for ``(y, weights, order, inverse)``."""
    (dout,) = grads
    need_dy, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if dout is None or not (need_dy or need_dw):
        return None, None, None, None
    y, weights, order = ctx.saved_tensors
    out = backward(dout, y, weights, order, need_dy, need_dw)
    return out[0] if need_dy else None, out[-1] if need_dw else None, None, None


_unpermute = TorchOp("moe_unpermute", forward=_unpermute_forward, forward_fake=_unpermute_forward_fake,
                     backward=_unpermute_backward, backward_fake=_unpermute_backward_fake,
                     setup_context=_unpermute_setup, input_grads=_unpermute_grads)
"""``kernelworks::moe_unpermute`` (+ ``_backward``) under torch.compile, an autograd Function in eager."""


# ------------------------------------------------------------------------------------------- public API


def _check_routing(order: object, inverse: object, tokens: int, like: torch.Tensor) -> int:
    """``order`` and ``inverse``: 1-D integer tensors of one length ``P``, a multiple of ``tokens``, on
    ``like``'s device (any strides); in validation mode, values in ``[0, P)`` and each the other's inverse.
    Returns ``top_k = P / tokens``."""
    check_index_tensor("order", order, ndim=1, like=like)
    check_index_tensor("inverse", inverse, ndim=1, like=like)
    n_pairs = order.shape[0]
    if inverse.shape[0] != n_pairs:
        raise ValueError(f"order, inverse: expected one length, got {n_pairs} and {inverse.shape[0]}")
    if n_pairs % tokens:
        raise ValueError(f"order: expected tokens × top_k = a multiple of {tokens} entries, got {n_pairs}")
    check_index_values("order", order, 0, n_pairs)
    check_index_values("inverse", inverse, 0, n_pairs)
    if validation_enabled():  # both in range: also inverse permutations of each other (no repeated entry)
        position = torch.arange(n_pairs, device=order.device)
        bad = inverse[order] != position
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            raise ValueError(f"order, inverse: expected inverse permutations (inverse[order[i]] == i), got "
                             f"order[{i}] = {int(order[i])}, inverse[{int(order[i])}] = {int(inverse[order[i]])}")
    return n_pairs // tokens


def moe_sort(top_k_index: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sort a router's ``(token, slot)`` pairs by expert, on the device, with no host sync.

    Args:
        top_k_index: ``[T, top_k]`` int32/int64 expert of each token's slots (a router's ``topk`` indices).
        num_experts: ``E``.

    Returns:
        ``(order, inverse, group_sizes)``: ``order`` ``[T·top_k]`` int64, the pair ``t·top_k + k`` at each
        sorted position (a stable sort by expert: tokens keep their order within an expert); ``inverse`` its
        inverse permutation; ``group_sizes`` ``[E]`` int32 pairs per expert, for
        :func:`kernelworks.grouped_matmul`. A pair whose expert lies outside ``[0, E)`` sorts last and is in no
        group: its rows come out of the grouped matmul as zeros, so it adds nothing to its token.

    Example::

        order, inverse, sizes = kw.moe_sort(top_k_index, num_experts)
        x = kw.moe_permute(hidden, order, inverse)                 # [T·top_k, H], grouped by expert
        y = kw.grouped_matmul(x, w.transpose(1, 2), sizes)         # one product per expert
        out = kw.moe_unpermute(y, top_k_weights, order, inverse)   # [T, H]: Σ_k w[t, k] · y[t's pair k]
    """
    check_index_tensor("top_k_index", top_k_index, ndim=2, like=top_k_index, allow_empty=True)
    if isinstance(num_experts, bool) or not isinstance(num_experts, int) or num_experts < 1:
        raise ValueError(f"num_experts: expected an int >= 1, got {num_experts!r}")
    experts = top_k_index.reshape(-1)
    # Out-of-range experts become expert E: sorted past every group and counted in a slot that is dropped.
    experts = torch.where((experts >= 0) & (experts < num_experts), experts, num_experts)
    order = torch.argsort(experts, stable=True)
    inverse = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=order.device))
    sizes = torch.zeros(num_experts + 1, dtype=torch.int32, device=experts.device).scatter_add_(
        0, experts, torch.ones_like(experts, dtype=torch.int32))
    return order, inverse, sizes[:num_experts]


@replayed_op
def moe_permute(hidden: torch.Tensor, order: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
    """Tokens in expert order: row ``i`` of the result is ``hidden[order[i] // top_k]``.

    Args:
        hidden: ``[T, H]`` float32, float16 or bfloat16, any strides.
        order: ``[T·top_k]`` int32/int64 pair at each sorted position (:func:`moe_sort`), any stride.
        inverse: ``[T·top_k]`` its inverse permutation, any stride (the backward's gather).

    Returns:
        ``[T·top_k, H]`` in ``hidden``'s dtype. Gradient: ``dhidden[t] = Σ_k dx[inverse[t·top_k + k]]``,
        summed in fp32 (no atomics: deterministic). ``order`` and ``inverse`` are checked in validation mode
        (:func:`kernelworks.validation`: in range and inverse permutations, a few syncs); otherwise a value
        outside ``[0, T·top_k)`` reads as a zero row and nothing is written outside the outputs.
    """
    check_float_tensor("hidden", hidden, min_dim=2, max_dim=2)
    _check_routing(order, inverse, hidden.shape[0], hidden)
    return _permute(hidden, order, inverse)


@replayed_op
def moe_unpermute(y: torch.Tensor, weights: torch.Tensor, order: torch.Tensor,
                  inverse: torch.Tensor) -> torch.Tensor:
    """Each token's expert outputs, weighted and summed: ``out[t] = Σ_k weights[t, k] · y[inverse[t·top_k + k]]``.

    Args:
        y: ``[T·top_k, H]`` expert outputs in sorted order, float32, float16 or bfloat16, any strides.
        weights: ``[T, top_k]`` routing weights, float32, float16 or bfloat16 (not necessarily ``y``'s), any
            strides.
        order, inverse: as :func:`moe_permute`.

    Returns:
        ``[T, H]`` in ``y``'s dtype: products and sums in fp32, one rounding (Hugging Face rounds each product
        and each partial sum to ``y``'s dtype). Gradients reach ``y`` (``w · dout`` of the pair's token) and
        ``weights`` (``⟨dout[t], y[i]⟩`` in fp32, in ``weights``' dtype), contiguous. Bad index values: as
        :func:`moe_permute`; a pair whose sorted position is out of range gets a zero ``weights`` gradient.
    """
    check_float_tensor("y", y, min_dim=2, max_dim=2)
    check_float_tensor("weights", weights, min_dim=2, max_dim=2,
                       dtypes=(torch.float32, torch.float16, torch.bfloat16))
    check_same_device(("y", "weights"), (y, weights))
    pairs = weights.shape[0] * weights.shape[1]
    if y.shape[0] != pairs:
        raise ValueError(f"y, weights: expected y's rows to be weights' T·top_k = {pairs}, got {tuple(y.shape)} "
                         f"and {tuple(weights.shape)}")
    _check_routing(order, inverse, weights.shape[0], y)
    if order.shape[0] != pairs:
        raise ValueError(f"order, weights: expected T·top_k = {pairs} entries, got {order.shape[0]}")
    return _unpermute(y, weights, order, inverse)
