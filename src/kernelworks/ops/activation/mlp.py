"""``gated_mlp``: a transformer's gated MLP, ``down(f(x·Wgᵀ) · (x·Wuᵀ))``, that keeps the gate and up
projections for its backward but not the activation between them.

Autograd through ``down_proj(swiglu(gate_proj(x), up_proj(x)))`` saves four tensors: x, gate, up (for the
activation's and the projections' gradients) and ``h = f(gate)·up`` (for ``down_proj``'s weight gradient).
``h`` is as large as gate or up — ``tokens × intermediate`` — and costs one elementwise kernel to rebuild from
them, so this op saves only x, gate and up and recomputes ``h`` at the start of the backward: a quarter less
activation memory in the MLP (235 MB a layer at 8192 tokens of Llama-3-8B, bf16), for one extra pass over
``gate`` and ``up``. The rebuilt ``h`` lives only while the down projection's weight gradient is computed.

The GEMMs are cuBLAS's (``torch.mm``, fp32 accumulation); the activation and its gradient are the family's
kernels (``kernels.py``). A gradient nobody needs is not computed: frozen weights (adapters, fine-tuning a
part of the model) skip their weight GEMMs.
"""

from __future__ import annotations

import torch

from kernelworks.ops.activation.kernels import activation_bwd, activation_fwd
from kernelworks.runtime.alloc import empty
from kernelworks.runtime.layout import as_rows
from kernelworks.runtime.replay import replayed_op
from kernelworks.runtime.torch_op import TorchOp
from kernelworks.runtime.validate import check_float_tensor, check_same_device, check_same_dtype

_ACTIVATIONS = {("swiglu", "tanh"): "silu", ("swiglu", "none"): "silu", ("geglu", "tanh"): "gelu_tanh",
                ("geglu", "none"): "gelu"}
"""(activation, approximate) → the kernels' activation name."""


def _forward(x: torch.Tensor, gate_weight: torch.Tensor, up_weight: torch.Tensor, down_weight: torch.Tensor,
             act: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(y [N, H], gate [N, I], up [N, I])`` for rows ``x [N, H]``: gate and up are returned (as outputs no
    gradient flows into) so that the backward can be given them."""
    gate = torch.mm(x, gate_weight.t())
    up = torch.mm(x, up_weight.t())
    h = empty(gate.shape, dtype=gate.dtype, device=gate.device)
    activation_fwd(gate, up, h, act)
    return torch.mm(h, down_weight.t()), gate, up


def _forward_fake(x, gate_weight, up_weight, down_weight, act):
    n, inner = x.shape[0], gate_weight.shape[0]
    return x.new_empty((n, down_weight.shape[0])), x.new_empty((n, inner)), x.new_empty((n, inner))


def _backward(grad_y: torch.Tensor, x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor,
              gate_weight: torch.Tensor, up_weight: torch.Tensor, down_weight: torch.Tensor, act: str,
              need_x: bool, need_gate_weight: bool, need_up_weight: bool,
              need_down_weight: bool) -> list[torch.Tensor]:
    """``[grad_x, grad_gate_weight, grad_up_weight, grad_down_weight]``, an empty tensor where not needed."""
    none = x.new_empty(0)
    grad_down = none
    if need_down_weight:
        h = empty(gate.shape, dtype=gate.dtype, device=gate.device)
        activation_fwd(gate, up, h, act)  # the recomputation this op exists for
        grad_down = torch.mm(grad_y.t(), h)
        del h
    if not (need_x or need_gate_weight or need_up_weight):
        return [none, none, none, grad_down]
    grad_h = torch.mm(grad_y, down_weight)
    grad_up = empty(up.shape, dtype=up.dtype, device=up.device)
    # The kernel loads a tile's grad_h before it stores that tile's grad_gate, so grad_gate may overwrite
    # grad_h in place: one [N, I] buffer fewer at the backward's peak.
    activation_bwd(grad_h, gate, up, grad_h, grad_up, act)
    grad_gate = grad_h
    grad_x = none
    if need_x:
        grad_x = torch.mm(grad_gate, gate_weight)
        grad_x.addmm_(grad_up, up_weight)
    grad_gate_weight = torch.mm(grad_gate.t(), x) if need_gate_weight else none
    grad_up_weight = torch.mm(grad_up.t(), x) if need_up_weight else none
    return [grad_x, grad_gate_weight, grad_up_weight, grad_down]


def _backward_fake(grad_y, x, gate, up, gate_weight, up_weight, down_weight, act, need_x, need_gate_weight,
                   need_up_weight, need_down_weight):
    def maybe(t: torch.Tensor, need: bool) -> torch.Tensor:
        return t.new_empty(t.shape if need else (0,))

    return [maybe(x, need_x), maybe(gate_weight, need_gate_weight), maybe(up_weight, need_up_weight),
            maybe(down_weight, need_down_weight)]


def _setup_context(ctx, inputs, output) -> None:
    x, gate_weight, up_weight, down_weight, act = inputs
    ctx.mark_non_differentiable(output[1], output[2])
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(x, output[1], output[2], gate_weight, up_weight, down_weight)
    ctx.act = act


def _input_grads(ctx, grads: tuple, backward) -> tuple:
    grad_y = grads[0]
    if grad_y is None:
        return None, None, None, None, None
    needs = tuple(bool(n) for n in ctx.needs_input_grad[:4])
    out = backward(grad_y, *ctx.saved_tensors, ctx.act, *needs)
    return (*(g if need else None for g, need in zip(out, needs)), None)


_GATED_MLP = TorchOp("gated_mlp", forward=_forward, forward_fake=_forward_fake, backward=_backward,
                     backward_fake=_backward_fake, setup_context=_setup_context, input_grads=_input_grads)


def _check(x: object, gate_weight: object, up_weight: object, down_weight: object, activation: object,
           approximate: object) -> str:
    """Validate the arguments; returns the kernels' activation name."""
    if (activation, approximate) not in _ACTIVATIONS:
        raise ValueError(f"activation, approximate: expected 'swiglu' or 'geglu' and 'tanh' or 'none', got "
                         f"{activation!r}, {approximate!r}")
    names = ("x", "gate_weight", "up_weight", "down_weight")
    tensors = (x, gate_weight, up_weight, down_weight)
    for name, t in zip(names, tensors):
        check_float_tensor(name, t)
    check_same_device(names, tensors)
    check_same_dtype(names, tensors)
    hidden = x.shape[-1]
    inner = gate_weight.shape[0] if gate_weight.dim() == 2 else -1
    expected = {"gate_weight": (inner, hidden), "up_weight": (inner, hidden), "down_weight": (hidden, inner)}
    for name, t in zip(names[1:], tensors[1:]):
        if tuple(t.shape) != expected[name]:
            raise ValueError(f"{name}: expected shape {expected[name]} (gate/up [intermediate, hidden], down "
                             f"[hidden, intermediate], hidden = x.shape[-1] = {hidden}), got {tuple(t.shape)}")
    return _ACTIVATIONS[activation, approximate]


@replayed_op
def gated_mlp(x: torch.Tensor, gate_weight: torch.Tensor, up_weight: torch.Tensor, down_weight: torch.Tensor,
              *, activation: str = "swiglu", approximate: str = "tanh") -> torch.Tensor:
    """A gated MLP, ``down(f(x·gate_weightᵀ) · (x·up_weightᵀ))`` (Llama/Mistral/Qwen with SwiGLU, Gemma with
    GeGLU), with autograd that saves x, gate and up but recomputes the activation in the backward.

    Same math as ``down_proj(act(gate_proj(x)) * up_proj(x))`` with bias-free ``nn.Linear`` projections;
    the saved activations are a quarter smaller (see the module docstring). Gradients flow to ``x`` and to
    each weight that requires them.

    Args:
        x: ``[..., H]`` float32, float16 or bfloat16, on CUDA (CPU under the Triton interpreter).
        gate_weight, up_weight: ``[I, H]`` (``nn.Linear`` layout), ``x``'s dtype and device.
        down_weight: ``[H, I]``, same.
        activation: ``"swiglu"`` (``silu(gate) · up``, default) or ``"geglu"`` (``gelu(gate) · up``).
        approximate: GeGLU's GELU: ``"tanh"`` (default, Gemma's ``gelu_pytorch_tanh``) or ``"none"`` (erf);
            ignored for SwiGLU.

    Returns:
        ``[..., H]`` tensor of ``x``'s dtype.

    Example::

        mlp = model.model.layers[0].mlp
        y = kw.gated_mlp(x, mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight)
    """
    act = _check(x, gate_weight, up_weight, down_weight, activation, approximate)
    y = _GATED_MLP(as_rows(x), gate_weight, up_weight, down_weight, act)[0]
    return y.view(*x.shape[:-1], down_weight.shape[0])
