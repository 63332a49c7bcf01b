"""``gated_mlp``: a transformer's gated MLP, ``down(f(x·Wgᵀ) · (x·Wuᵀ))``, that keeps the gate and up
projections for its backward but not the activation between them.

Autograd through ``down_proj(swiglu(gate_proj(x), up_proj(x)))`` saves four tensors: x, gate, up (for the
activation's and the projections' gradients) and ``h = f(gate)·up`` (for ``down_proj``'s weight gradient).
``h`` is as large as gate or up — ``tokens × intermediate`` — and costs one elementwise kernel to rebuild from
them, so this op saves only x, gate and up and recomputes ``h`` at the start of the backward: a quarter less
activation memory in the MLP (235 MB a layer at 8192 tokens of Llama-3-8B, bf16), for one extra pass over
``gate`` and ``up``. The backward walks the intermediate dimension in blocks about as wide as the layer
(:func:`inner_block`; one block where the temporaries are small), so the rebuilt ``h`` and the activation's
gradients exist a block at a time.

The GEMMs are cuBLAS's (``torch.mm``, fp32 accumulation); the activation and its gradient are the family's
kernels (``kernels.py``). A gradient nobody needs is not computed: frozen weights (adapters, fine-tuning a
part of the model) skip their weight GEMMs.
"""

from __future__ import annotations

import torch

from kernelworks.ops.activation.kernels import activation_bwd, activation_fwd
from kernelworks.runtime.alloc import empty
from kernelworks.runtime.blas import accumulate_mm, mm
from kernelworks.runtime.layout import as_rows
from kernelworks.runtime.replay import replayed_op
from kernelworks.runtime.torch_op import TorchOp
from kernelworks.runtime.validate import check_float_tensor, check_same_device, check_same_dtype

GATED_ACTIVATIONS = {("swiglu", "tanh"): "silu", ("swiglu", "none"): "silu", ("geglu", "tanh"): "gelu_tanh",
                     ("geglu", "none"): "gelu"}
"""(activation, approximate) → the kernels' activation name."""


def _forward(x: torch.Tensor, gate_weight: torch.Tensor, up_weight: torch.Tensor, down_weight: torch.Tensor,
             act: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(y [N, H], gate [N, I], up [N, I])`` for rows ``x [N, H]``: gate and up are returned (as outputs no
    gradient flows into) so that the backward can be given them."""
    gate = mm(x, gate_weight.t())
    up = mm(x, up_weight.t())
    h = empty(gate.shape, dtype=gate.dtype, device=gate.device)
    activation_fwd(gate, up, h, act)
    return mm(h, down_weight.t()), gate, up


def _forward_fake(x, gate_weight, up_weight, down_weight, act):
    n, inner = x.shape[0], gate_weight.shape[0]
    return x.new_empty((n, down_weight.shape[0])), x.new_empty((n, inner)), x.new_empty((n, inner))


GRAD_X_ACCUM = torch.float32
"""dtype of ``grad_x``'s accumulator across the backward's blocks (``benchmarks/checks/mlp_memory.py`` tries
bfloat16). The backward body reads it, so change it only under ``kernelworks.runtime.replay.paused()``."""


ONE_BLOCK_BYTES = 64 << 20
"""A ``[tokens, intermediate]`` temporary up to this size is not worth blocking: the backward takes the whole
intermediate dimension in one step. Each block costs about eight launches and, past one block, an fp32
accumulator for ``grad_x``; on a small model (hidden 1024, 8192 tokens: three blocks) that host time is what
the training step waits on, while the temporaries blocking saves are ~60 MB."""


def inner_block(tokens: int, hidden: int, inner: int, itemsize: int) -> int:
    """Intermediate columns per step of the backward: all of them when a ``[tokens, inner]`` temporary of
    ``itemsize``-byte elements fits :data:`ONE_BLOCK_BYTES`; else the layer's width rounded up to a multiple of
    8 (16-byte aligned 16-bit views), so that each step's temporaries, ``[tokens, block]``, are about the size
    of ``x`` (4096 of Llama-3-8B's 14336 at 8192 tokens: four steps)."""
    if tokens * inner * itemsize <= ONE_BLOCK_BYTES:
        return inner
    return min(inner, -(-hidden // 8) * 8)


def _backward(grad_y: torch.Tensor, x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor,
              gate_weight: torch.Tensor, up_weight: torch.Tensor, down_weight: torch.Tensor, act: str,
              need_x: bool, need_gate_weight: bool, need_up_weight: bool,
              need_down_weight: bool) -> list[torch.Tensor]:
    """``[grad_x, grad_gate_weight, grad_up_weight, grad_down_weight]``, an empty tensor where not needed.

    The intermediate dimension is walked in blocks of :func:`inner_block` columns. A block's rows of the gate
    and up weight gradients and its columns of the down weight gradient are complete products over every
    token (one GEMM each, nothing accumulated across blocks, no precision lost), so only ``grad_x`` sums over
    blocks: in an fp32 accumulator, rounded once. What a block needs — ``h``, ``grad_h`` (overwritten by
    ``grad_gate``) and ``grad_up`` — is ``[tokens, block]``: the backward's temporaries stay near the size of
    ``x`` instead of three ``[tokens, intermediate]`` tensors, which set a training step's peak when the
    backward starts with every activation still live.
    """
    n, hidden = x.shape
    inner = gate.shape[1]

    def none() -> torch.Tensor:  # one per unneeded slot: a custom op's outputs may not alias each other
        return x.new_empty(0)

    block = inner_block(n, hidden, inner, x.element_size())
    need_h = need_x or need_gate_weight or need_up_weight
    grad_gate_weight = empty(gate_weight.shape, dtype=x.dtype, device=x.device) if need_gate_weight else none()
    grad_up_weight = empty(up_weight.shape, dtype=x.dtype, device=x.device) if need_up_weight else none()
    grad_down = empty(down_weight.shape, dtype=x.dtype, device=x.device) if need_down_weight else none()
    one_block = block == inner
    acc = None
    if need_x and not one_block:
        acc = empty((n, hidden), dtype=GRAD_X_ACCUM, device=x.device)  # the first block writes it (beta = 0)
    grad_x = none()
    for start in range(0, inner, block):
        cols = slice(start, min(start + block, inner))
        gate_b, up_b = gate[:, cols], up[:, cols]
        if need_down_weight:
            h = empty(gate_b.shape, dtype=x.dtype, device=x.device)
            activation_fwd(gate_b, up_b, h, act)  # the recomputation this op exists for
            mm(grad_y.t(), h, out=grad_down[:, cols])
            del h
        if not need_h:
            continue
        grad_h = mm(grad_y, down_weight[:, cols])
        grad_up = empty(grad_h.shape, dtype=x.dtype, device=x.device)
        # The kernel loads a tile's grad_h before it stores that tile's grad_gate, so grad_gate may overwrite
        # grad_h in place: one [tokens, block] buffer fewer.
        activation_bwd(grad_h, gate_b, up_b, grad_h, grad_up, act)
        grad_gate = grad_h
        if need_gate_weight:
            mm(grad_gate.t(), x, out=grad_gate_weight[cols])
        if need_up_weight:
            mm(grad_up.t(), x, out=grad_up_weight[cols])
        if need_x and one_block:
            grad_x = mm(grad_gate, gate_weight)
            accumulate_mm(grad_x, grad_up, up_weight)
        elif need_x:
            accumulate_mm(acc, grad_gate, gate_weight[cols], first=start == 0)
            accumulate_mm(acc, grad_up, up_weight[cols])
        del grad_h, grad_gate, grad_up
    if acc is not None:
        grad_x = acc.to(x.dtype)
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
    if (activation, approximate) not in GATED_ACTIVATIONS:
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
    return GATED_ACTIVATIONS[activation, approximate]


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
