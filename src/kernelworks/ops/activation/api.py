"""Public activation functions, their validation, and the ``torch.library`` custom ops behind them.

Inputs may have any strides (stride-0 expanded views included; a last dimension that is not unit-stride
is copied); empty tensors are refused with a ValueError naming the argument. NaN and ±inf give what PyTorch
gives in float64 (``gelu(+inf) = +inf``; ``gelu(-inf)``, ``silu(-inf)``: NaN, as ``-inf · 0``).

All four public functions go through one :class:`~kernelworks.runtime.torch_op.TorchOp`, ``activation``,
parameterised by the activation name (``silu``, ``gelu``, ``gelu_tanh``) and by whether it is gated: custom
ops ``kernelworks::activation`` / ``activation_backward`` with fake implementations and autograd under
``torch.compile(fullgraph=True)``, an autograd Function running the same bodies in eager mode.
"""

from __future__ import annotations

import torch

from kernelworks.ops.activation.kernels import activation_bwd, activation_fwd
from kernelworks.runtime.alloc import empty, empty_like
from kernelworks.runtime.replay import replayed_op
from kernelworks.runtime.torch_op import TorchOp
from kernelworks.runtime.validate import (
    check_float_tensor,
    check_same_device,
    check_same_dtype,
    check_same_shape,
)

_GELU_ACTS = {"none": "gelu", "tanh": "gelu_tanh"}
"""torch's ``approximate`` argument -> the kernels' activation name."""


# ------------------------------------------------------------------------------------------- custom ops

def _halves(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gate and up halves of a packed ``[..., 2H]`` tensor, as strided views (no copy)."""
    h = t.shape[-1] // 2
    return t[..., :h], t[..., h:]


def _forward(x: torch.Tensor, up: torch.Tensor | None, act: str, gated: bool) -> torch.Tensor:
    """``f(x)`` (not gated), ``f(x) · up``, or ``f(gate) · up`` for a packed ``x = [gate | up]`` (up None)."""
    if gated and up is None:
        x, up = _halves(x)
    out = empty(x.shape, dtype=x.dtype, device=x.device)
    activation_fwd(x, up, out, act)
    return out


def _backward(grad_out: torch.Tensor, x: torch.Tensor, up: torch.Tensor | None, act: str,
              gated: bool) -> list[torch.Tensor]:
    """``[grad_x]`` (not gated, or packed: one ``[..., 2H]`` gradient) or ``[grad_gate, grad_up]``."""
    grad_x = empty_like(x)
    if not gated:
        activation_bwd(grad_out, x, None, grad_x, None, act)
        return [grad_x]
    if up is None:
        # Packed: the kernel writes both halves of the one [..., 2H] gradient through two strided views.
        (gate, up_half), (grad_gate, grad_up_half) = _halves(x), _halves(grad_x)
        activation_bwd(grad_out, gate, up_half, grad_gate, grad_up_half, act)
        return [grad_x]
    grad_up = empty_like(up)
    activation_bwd(grad_out, x, up, grad_x, grad_up, act)
    return [grad_x, grad_up]


def _forward_fake(x: torch.Tensor, up: torch.Tensor | None, act: str, gated: bool) -> torch.Tensor:
    if gated and up is None:
        return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))
    return x.new_empty(x.shape)


def _backward_fake(grad_out: torch.Tensor, x: torch.Tensor, up: torch.Tensor | None, act: str,
                   gated: bool) -> list[torch.Tensor]:
    return [torch.empty_like(x)] if up is None else [torch.empty_like(x), torch.empty_like(up)]


def _setup_context(ctx, inputs, output) -> None:
    x, up, act, gated = inputs
    ctx.save_for_backward(x, up)
    ctx.act, ctx.gated = act, gated


def _input_grads(ctx, grads: tuple, backward) -> tuple:
    """Gradients for ``(x, up, act, gated)`` from the saved inputs, computed by ``backward``."""
    x, up = ctx.saved_tensors
    g = backward(grads[0], x, up, ctx.act, ctx.gated)
    return g[0], g[1] if up is not None else None, None, None


_apply = TorchOp("activation", forward=_forward, forward_fake=_forward_fake, backward=_backward,
                 backward_fake=_backward_fake, setup_context=_setup_context, input_grads=_input_grads)
"""``kernelworks::activation`` (+ ``_backward``) under torch.compile, an autograd Function in eager."""


# ------------------------------------------------------------------------------------------- public API

def _gelu_act(approximate: object) -> str:
    if not isinstance(approximate, str) or approximate not in _GELU_ACTS:
        raise ValueError(f"approximate: expected 'none' or 'tanh', got {approximate!r}")
    return _GELU_ACTS[approximate]


def _check_gated(gate: object, up: object) -> None:
    check_float_tensor("gate", gate)
    if up is None:
        if gate.shape[-1] % 2:
            raise ValueError("gate: with up=None, expected a packed [..., 2H] tensor (even last dimension), "
                             f"got shape {tuple(gate.shape)}")
        return
    check_float_tensor("up", up)
    check_same_device(("gate", "up"), (gate, up))
    check_same_dtype(("gate", "up"), (gate, up))
    check_same_shape(("gate", "up"), (gate, up))


@replayed_op
def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU, as ``torch.nn.functional.gelu``, with autograd.

    Args:
        x: ``[..., n]`` float32, float16 or bfloat16, on CUDA (CPU under the Triton interpreter); any strides.
        approximate: ``"none"`` for the exact ``½x(1 + erf(x/√2))`` (default), ``"tanh"`` for
            ``½x(1 + tanh(√(2/π)(x + 0.044715x³)))``.

    Returns:
        ``[..., n]`` tensor of ``x``'s dtype (contiguous).

    Example::

        y = kw.gelu(torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16), approximate="tanh")
    """
    act = _gelu_act(approximate)
    check_float_tensor("x", x)
    return _apply(x, None, act, False)


@replayed_op
def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU (swish), ``x · σ(x)``, as ``torch.nn.functional.silu``, with autograd.

    Args:
        x: ``[..., n]`` float32, float16 or bfloat16, on CUDA (CPU under the Triton interpreter); any strides.

    Returns:
        ``[..., n]`` tensor of ``x``'s dtype (contiguous).

    Example::

        y = kw.silu(torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16))
    """
    check_float_tensor("x", x)
    return _apply(x, None, "silu", False)


@replayed_op
def swiglu(gate: torch.Tensor, up: torch.Tensor | None = None) -> torch.Tensor:
    """SwiGLU, ``silu(gate) · up``, the gated MLP activation of Llama, Mistral and Qwen; with autograd.

    Two input forms:
        * ``gate`` and ``up`` of one shape ``[..., H]``;
        * one packed ``gate = [..., 2H]`` and ``up=None``: the output of a fused gate-up projection, first
          half gate, second half up (vLLM's ``SiluAndMul`` layout). The halves are read in place (no
          split copy) and the gradient is one ``[..., 2H]`` tensor.

    Args:
        gate: ``[..., H]`` (or packed ``[..., 2H]``) float32, float16 or bfloat16, on CUDA (CPU under the
            Triton interpreter); any strides.
        up: ``[..., H]``, same dtype and device as ``gate``, or None for the packed form.

    Returns:
        ``[..., H]`` tensor of ``gate``'s dtype (contiguous).

    Example::

        gate_up = x @ w_gate_up.T                  # [tokens, 2 * 14336]
        h = kw.swiglu(gate_up)                     # [tokens, 14336]
    """
    _check_gated(gate, up)
    return _apply(gate, up, "silu", True)


@replayed_op
def geglu(gate: torch.Tensor, up: torch.Tensor | None = None, approximate: str = "tanh") -> torch.Tensor:
    """GeGLU, ``gelu(gate) · up``, the gated MLP activation of Gemma; with autograd.

    The default is the tanh approximation, unlike :func:`gelu`: GeGLU models (Gemma's
    ``gelu_pytorch_tanh``) were trained with it. Pass ``approximate="none"`` for the exact erf form.
    Input forms as :func:`swiglu`: ``gate`` and ``up`` of one shape ``[..., H]``, or one packed
    ``[..., 2H]`` tensor (first half gate, second half up) with ``up=None``.

    Args:
        gate: ``[..., H]`` (or packed ``[..., 2H]``) float32, float16 or bfloat16, on CUDA (CPU under the
            Triton interpreter); any strides.
        up: ``[..., H]``, same dtype and device as ``gate``, or None for the packed form.
        approximate: ``"tanh"`` (default) or ``"none"``, as in :func:`gelu`.

    Returns:
        ``[..., H]`` tensor of ``gate``'s dtype (contiguous).

    Example::

        h = kw.geglu(gate, up)                     # gelu_tanh(gate) * up, gate/up: [tokens, 16384]
        h = kw.geglu(gate_up, approximate="none")  # packed [tokens, 2 * 16384], exact erf GELU
    """
    act = _gelu_act(approximate)
    _check_gated(gate, up)
    return _apply(gate, up, act, True)
