"""Public ``matmul``: validation, the custom op (``kernelworks::matmul`` + ``_backward``) and autograd.

The backward reuses the forward kernels: with ``dZ`` the gradient of the pre-activation
``z = alpha·A@B + bias`` (``dC`` itself without an activation), ``dA = alpha·dZ·Bᵀ`` and
``dB = alpha·Aᵀ·dZ`` are the same ``matmul`` on transposed *views* (strides swapped, no copies),
``dbias = Σ_rows dZ`` and ``dresidual = beta·dC``. With an activation, ``z`` is recomputed in fp32 (one more
GEMM, instead of saving an ``[M, N]`` tensor in the forward) and ``dZ = dC · act'(z)`` comes from the
activation family's backward kernel (swiglu: both halves written into one ``[M, 2N]`` gradient).
"""

from __future__ import annotations

import torch

from kernelworks.ops.activation.kernels import activation_bwd
from kernelworks.ops.gemm.forward import matmul_fwd
from kernelworks.runtime.alloc import empty
from kernelworks.runtime.device import cpu_tensors_allowed
from kernelworks.runtime.replay import replayed_op
from kernelworks.runtime.torch_op import TorchOp
from kernelworks.runtime.validate import FLOAT_DTYPES, check_dtype, check_real, check_same_device

ACTIVATIONS = (None, "relu", "gelu", "gelu_tanh", "silu", "swiglu")
"""The epilogue activations ``matmul`` fuses (None: no activation)."""

# ------------------------------------------------------------------------------------------- custom op


def _out_shape(a: torch.Tensor, b: torch.Tensor, activation: str) -> tuple[int, ...]:
    n = b.shape[-1] // 2 if activation == "swiglu" else b.shape[-1]
    if a.dim() == 2 and b.dim() == 2:
        return (a.shape[0], n)
    batch = a.shape[0] if a.dim() == 3 else b.shape[0]
    return (batch, a.shape[-2], n)


def _forward(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
             activation: str, alpha: float, beta: float, out_dtype: torch.dtype) -> torch.Tensor:
    return matmul_fwd(a, b, bias, residual, activation, alpha, beta, out_dtype)


def _forward_fake(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
                  activation: str, alpha: float, beta: float, out_dtype: torch.dtype) -> torch.Tensor:
    return a.new_empty(_out_shape(a, b, activation), dtype=out_dtype)


def _batched_if_empty(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``b`` (2-D, shared across ``x [B, M, K]``'s batch) expanded to ``[B, K, N]`` when K = 0: the launcher
    merges ``x``'s rows into one ``[B·M, K]`` view, which a reshape cannot infer from 0 elements."""
    if x.dim() == 3 and b.dim() == 2 and x.shape[-1] == 0:
        return b.expand(x.shape[0], *b.shape)
    return b


def _grad_a(g: torch.Tensor, a: torch.Tensor, b: torch.Tensor, alpha: float) -> torch.Tensor:
    """``alpha · dC @ Bᵀ`` in A's shape (summed over a batch that A was broadcast across)."""
    bt = _batched_if_empty(g, b.transpose(-1, -2))  # N = 0
    if a.dim() == 2 and b.dim() == 3:  # A shared by every batch entry: Σ_b dC_b @ B_bᵀ, summed in fp32
        return matmul_fwd(g, bt, None, None, "none", alpha, 0.0, torch.float32).sum(0).to(a.dtype)
    return matmul_fwd(g, bt, None, None, "none", alpha, 0.0, a.dtype)


def _grad_b(g: torch.Tensor, a: torch.Tensor, b: torch.Tensor, alpha: float) -> torch.Tensor:
    """``alpha · Aᵀ @ dC`` in B's shape (a 2-D B shared across A's batch: the batch folds into K)."""
    if b.dim() == 2 and a.dim() == 3:
        rows = a.shape[0] * a.shape[1]  # not -1: a reshape cannot infer it from 0 elements (K = 0, N = 0)
        a, g = a.reshape(rows, a.shape[-1]), g.reshape(rows, g.shape[-1])
    return matmul_fwd(a.transpose(-1, -2), g, None, None, "none", alpha, 0.0, b.dtype)


def _activation_grad(grad: torch.Tensor, z: torch.Tensor, activation: str, dtype: torch.dtype) -> torch.Tensor:
    """``dZ = dC · act'(z)`` in ``dtype``, ``z`` the fp32 pre-activation (``[..., 2N]`` for swiglu)."""
    if activation == "relu":
        return (grad * (z > 0)).to(dtype)
    dz = empty(z.shape, dtype=dtype, device=z.device)
    if dz.numel() == 0:  # N = 0 (or M = 0): nothing to launch, and no rows to lay the kernel's grid over
        return dz
    if activation == "swiglu":
        n = grad.shape[-1]
        activation_bwd(grad, z[..., :n], z[..., n:], dz[..., :n], dz[..., n:], "silu")
    else:
        activation_bwd(grad, z, None, dz, None, activation)
    return dz


def _backward(grad: torch.Tensor, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, activation: str,
              alpha: float, beta: float, need_a: bool, need_b: bool, need_bias: bool, need_res: bool,
              bias_dtype: torch.dtype, res_dtype: torch.dtype) -> list[torch.Tensor]:
    """``[dA, dB, dbias, dresidual]``; an empty tensor where not needed."""
    dz = grad
    if activation != "none" and (need_a or need_b or need_bias):
        z = matmul_fwd(a, b, bias, None, "none", alpha, 0.0, torch.float32)
        dz = _activation_grad(grad, z, activation, a.dtype)
    g = dz if dz.dtype == a.dtype else dz.to(a.dtype)  # the kernels take one input dtype
    none = grad.new_empty(0)
    da = _grad_a(g, a, b, alpha) if need_a else none
    db = _grad_b(g, a, b, alpha) if need_b else none.clone()
    dbias = dz.sum(dim=tuple(range(dz.dim() - 1)), dtype=torch.float32).to(bias_dtype) if need_bias \
        else none.clone()
    dres = (grad * beta).to(res_dtype) if need_res else none.clone()
    return [da, db, dbias, dres]


def _backward_fake(grad, a, b, bias, activation, alpha, beta, need_a, need_b, need_bias, need_res, bias_dtype,
                   res_dtype):
    return [a.new_empty(a.shape) if need_a else grad.new_empty(0),
            b.new_empty(b.shape) if need_b else grad.new_empty(0),
            grad.new_empty(b.shape[-1:], dtype=bias_dtype) if need_bias else grad.new_empty(0),
            grad.new_empty(grad.shape, dtype=res_dtype) if need_res else grad.new_empty(0)]


def _setup(ctx, inputs, output) -> None:
    a, b, bias, residual, activation, alpha, beta, _dtype = inputs
    ctx.save_for_backward(a, b, bias)
    ctx.activation, ctx.alpha, ctx.beta = activation, alpha, beta
    ctx.bias_dtype = bias.dtype if bias is not None else a.dtype
    ctx.res_dtype = residual.dtype if residual is not None else a.dtype


def _input_grads(ctx, grads: tuple, backward) -> tuple:
    """Gradients for ``(a, b, bias, residual, activation, alpha, beta, out_dtype)``."""
    (grad,) = grads
    a, b, bias = ctx.saved_tensors
    need = ctx.needs_input_grad
    g = backward(grad, a, b, bias, ctx.activation, ctx.alpha, ctx.beta, need[0], need[1], need[2], need[3],
                 ctx.bias_dtype, ctx.res_dtype)
    return (g[0] if need[0] else None, g[1] if need[1] else None, g[2] if need[2] else None,
            g[3] if need[3] else None, None, None, None, None)


_matmul = TorchOp("matmul", forward=_forward, forward_fake=_forward_fake, backward=_backward,
                  backward_fake=_backward_fake, setup_context=_setup, input_grads=_input_grads)
"""``kernelworks::matmul`` (+ ``_backward``): ``(a, b, bias, residual, activation, alpha, beta, out_dtype)``."""


# ------------------------------------------------------------------------------------------- public API


def check_operand(name: str, t: object, dims: tuple[int, ...], dtypes=FLOAT_DTYPES) -> torch.Tensor:
    """A tensor of rank in ``dims`` and a dtype in ``dtypes`` on a device the kernels use; unlike
    :func:`~kernelworks.runtime.validate.check_tensor` it may be empty (K = 0 is a defined product)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    check_dtype(name, t, dtypes)
    if t.device.type != "cuda" and not (cpu_tensors_allowed() and t.device.type == "cpu"):
        raise ValueError(f"{name}: expected a CUDA tensor, got a tensor on {t.device}")
    if t.dim() not in dims:
        raise ValueError(f"{name}: expected {' or '.join(map(str, dims))} dimensions, got shape {tuple(t.shape)}")
    return t


def _check(a, b, bias, activation, residual, out_dtype) -> tuple[int, ...]:
    """Validate every argument; returns the output shape."""
    check_operand("a", a, (2, 3))
    check_operand("b", b, (2, 3))
    check_same_device(("a", "b"), (a, b))
    if a.dtype != b.dtype:
        raise TypeError(f"a, b: expected one dtype, got a={a.dtype}, b={b.dtype}")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"b: expected {a.shape[-1]} rows (a's last dimension, a: {tuple(a.shape)}), "
                         f"got shape {tuple(b.shape)}")
    if a.dim() == 3 and b.dim() == 3 and a.shape[0] != b.shape[0]:
        raise ValueError(f"b: expected batch {a.shape[0]} (a: {tuple(a.shape)}), got shape {tuple(b.shape)}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation: expected one of {ACTIVATIONS}, got {activation!r}")
    nb = b.shape[-1]
    if activation == "swiglu" and nb % 2:
        raise ValueError(f"b: swiglu needs an even number of columns ([gate | up] halves), got shape "
                         f"{tuple(b.shape)}")
    if out_dtype is not None and out_dtype not in FLOAT_DTYPES:
        raise TypeError(f"out_dtype: expected one of float32, float16, bfloat16 or None, got {out_dtype}")
    if bias is not None:
        check_operand("bias", bias, (1,))
        check_same_device(("a", "bias"), (a, bias))
        if bias.shape[0] != nb:
            raise ValueError(f"bias: expected shape ({nb},) (b's columns), got {tuple(bias.shape)}")
    out_shape = _out_shape(a, b, activation or "none")
    if residual is not None:
        check_operand("residual", residual, (len(out_shape),))
        check_same_device(("a", "residual"), (a, residual))
        if tuple(residual.shape) != out_shape:
            raise ValueError(f"residual: expected the output's shape {out_shape}, got {tuple(residual.shape)}")
    return out_shape


@replayed_op
def matmul(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None, activation: str | None = None,
           residual: torch.Tensor | None = None, alpha: float = 1.0, beta: float = 1.0,
           out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``C = act(alpha · A @ B + bias) + beta · residual`` in one kernel, fp32 accumulation, one rounding.

    Args:
        a: ``[M, K]`` or ``[batch, M, K]``; float16, bfloat16 or float32; any strides (``x.t()`` and
            slices run without copies).
        b: ``[K, N]`` or ``[batch, K, N]``, ``a``'s dtype, any strides: an ``nn.Linear`` weight ``W [N, K]``
            is passed as ``W.t()`` (K-contiguous, the layout the Hopper path reads best). A 2-D operand is
            shared across the other's batch.
        bias: ``[N]`` (any float dtype), added before the activation.
        activation: None, ``"relu"``, ``"gelu"`` (exact erf), ``"gelu_tanh"``, ``"silu"`` or ``"swiglu"``.
            swiglu: B's columns are two halves ``[gate | up]`` (``N`` even; as ``torch.chunk(2, -1)`` of a
            fused gate-up projection, the layout of Phi-3 style ``gate_up_proj``) and the output has
            ``N/2`` columns: ``silu(z[:, :N/2]) · z[:, N/2:]``, ``z = alpha·A@B + bias``. Halves, not
            interleaved columns: each program loads a gate tile and the up tile N/2 columns further with the
            same addressing and keeps two accumulators, with no register shuffles to de-interleave.
            Differentiable: the backward recomputes the pre-activation (one more GEMM) rather than saving it.
        residual: ``C``'s shape, any float dtype and strides; added after the activation, scaled by ``beta``.
        alpha, beta: scalars. ``beta`` scales the residual (default 1: a residual given is added; with
            ``beta=0`` the residual is not read at all, as BLAS treats ``C_in``).
        out_dtype: output dtype (default ``a``'s).

    fp32 inputs use TF32 tensor cores exactly when ``torch.backends.cuda.matmul.allow_tf32`` is set, like
    ``torch.matmul``. ``K = 0`` is defined: ``C = act(bias) + beta·residual``.

    Returns:
        ``[M, N']`` or ``[batch, M, N']`` (``N' = N/2`` for swiglu), contiguous, in ``out_dtype``.

    Example::

        y = kw.matmul(x, w.t(), bias=b, activation="gelu")           # x [T, 4096], w [16384, 4096] bf16
        h = kw.matmul(x, w_gate_up.t(), activation="swiglu")         # w_gate_up [2·14336, 4096] → [T, 14336]
    """
    _check(a, b, bias, activation, residual, out_dtype)
    alpha = check_real("alpha", alpha)
    beta = check_real("beta", beta)
    if beta == 0.0:
        residual = None
    b = _batched_if_empty(a, b)
    return _matmul(a, b, bias, residual, activation or "none", alpha, beta, out_dtype or a.dtype)
