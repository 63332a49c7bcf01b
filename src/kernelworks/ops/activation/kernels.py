"""Triton kernels for the activation family: one forward and one backward kernel serve all four ops.

Every op is elementwise over ``[..., n]``: ``y = f(x)`` (gelu, silu) or ``y = f(gate) · up`` (swiglu,
geglu). The activation ``ACT`` and ``GATED`` are ``tl.constexpr``, so each combination compiles to its own
straight-line kernel with no run-time branches. Inputs are viewed as ``[rows, n]`` with their own row
strides (:func:`~kernelworks.runtime.layout.as_rows`), which is what lets a packed ``[..., 2n]``
gate-up projection run as two strided views of one buffer — no split copy in the forward, and in the
backward both gradient halves written straight into one ``[..., 2n]`` tensor.

``ACT`` names:
    ``"silu"``       f(x) = x·σ(x)
    ``"gelu"``       f(x) = ½x(1 + erf(x/√2)) = x·Φ(x)               (exact, torch ``approximate="none"``)
    ``"gelu_tanh"``  f(x) = ½x(1 + tanh(√(2/π)(x + 0.044715x³)))    (torch ``approximate="tanh"``)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelworks.ops._math import LOG2E, erfc, sigmoid, sigmoid_pair
from kernelworks.runtime.launch import cdiv, launch, tile_launch
from kernelworks.runtime.layout import as_rows

ACTS = ("silu", "gelu", "gelu_tanh")
"""The activations the kernels implement (the ``ACT`` constexpr)."""

_INV_SQRT2 = tl.constexpr(0.7071067811865476)       # 1/√2
_INV_SQRT_2PI = tl.constexpr(0.3989422804014327)    # 1/√(2π)
_TWO_SQRT_2_OVER_PI = tl.constexpr(1.5957691216057308)  # 2·√(2/π)
_GELU_CUBIC = tl.constexpr(0.044715)


# ------------------------------------------------------------------------------------------ device helpers

@triton.jit
def _tile(n_rows, n_cols, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    """This program's ``ROWS × BLOCK_N`` tile of the ``[n_rows, n_cols]`` grid.

    One flat grid axis walks the tiles row-block-major (a 1-D grid has no 65535 limit, so any row count
    launches). Returns the row indices in int64 (``row · stride`` passes 2^31 on large inputs), the column
    indices, and the in-bounds mask.
    """
    i_t = tl.program_id(0)
    n_col_blocks = tl.cdiv(n_cols, BLOCK_N)
    i_m = i_t // n_col_blocks
    i_n = i_t % n_col_blocks
    o_m = (i_m * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    o_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_t = (o_m < n_rows)[:, None] & (o_n < n_cols)[None, :]
    return o_m, o_n, m_t


@triton.jit
def _at(p, stride, o_m, o_n):
    """Pointers to ``p[o_m, o_n]`` of a ``[rows, n]`` view with row stride ``stride`` (unit column stride)."""
    return p + o_m[:, None] * stride + o_n[None, :]


@triton.jit
def _normal_cdf(x):
    """Φ(x) = ½(1 + erf(x/√2)) = ½·erfc(−x/√2): through erfc, cheaper than libdevice's erf and accurate in
    relative terms for x ≪ 0 (see :func:`~kernelworks.ops._math.erfc`)."""
    return 0.5 * erfc(-_INV_SQRT2 * x)


@triton.jit
def _activate(x, ACT: tl.constexpr):
    """f(x) for the activation ``ACT`` (fp32 in, fp32 out).

    gelu_tanh uses ½(1 + tanh(z)) = σ(2z): the same function with no 1 + tanh cancellation for x ≪ 0.
    """
    if ACT == "silu":
        y = x * sigmoid(x)
    elif ACT == "gelu":
        y = x * _normal_cdf(x)
    else:  # "gelu_tanh"
        y = x * sigmoid(_TWO_SQRT_2_OVER_PI * x * (1.0 + _GELU_CUBIC * x * x))
    return y


@triton.jit
def _activate_grad(x, ACT: tl.constexpr):
    """``(f(x), f'(x))``, sharing the expensive term (σ or Φ) between the two.

    silu:       f' = σ(x)(1 + x(1 − σ(x))) = σ + f·(1 − σ)
    gelu:       f' = Φ(x) + x·φ(x) = ½(1 + erf(x/√2)) + x·e^(−x²/2)/√(2π)
    gelu_tanh:  with t = tanh(z), z = √(2/π)(x + 0.044715x³), the textbook
                f' = ½(1 + t) + ½x(1 − t²)·z'  is, through ½(1 + t) = σ(2z) and 1 − t² = 4σ(2z)(1 − σ(2z)),
                f' = s + f·(1 − s)·2z'  with s = σ(2z), f = x·s. This form has no 1 ± t cancellation: for
                x ≈ −5 (t ≈ −1 + 1e-7) the textbook form in fp32 is off by ~1e-6 absolute on an f' of ~1e-5.
    """
    if ACT == "gelu":
        cdf = _normal_cdf(x)
        f = x * cdf
        df = cdf + x * _INV_SQRT_2PI * tl.exp2(-0.5 * LOG2E * x * x)
    else:
        if ACT == "silu":
            s, s_c = sigmoid_pair(x)
            dz = 1.0
        else:  # "gelu_tanh": σ of 2z, and d(2z)/dx
            x2 = x * x
            s, s_c = sigmoid_pair(_TWO_SQRT_2_OVER_PI * x * (1.0 + _GELU_CUBIC * x2))
            dz = _TWO_SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_CUBIC * x2)
        f = x * s
        df = s + f * s_c * dz
    return f, df


# ----------------------------------------------------------------------------------------------- kernels

@triton.jit
def _activation_fwd_kernel(
    p_x, p_u, p_y,
    n_rows, n_cols,
    s_x, s_u, s_y,
    ACT: tl.constexpr, GATED: tl.constexpr,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr,
):
    """y = f(x) · u if GATED else f(x);  x, u, y: [n_rows, n_cols] with row strides s_x, s_u, s_y.

    Math in fp32 with one rounding, at the store (torch eager in bf16 also rounds f(x) before the product).
    When not GATED, ``p_u`` is never read.
    """
    o_m, o_n, m_t = _tile(n_rows, n_cols, BLOCK_N, ROWS)
    # Both loads are issued before any math so the two DRAM streams overlap.
    b_x = tl.load(_at(p_x, s_x, o_m, o_n), mask=m_t, other=0).to(tl.float32)
    if GATED:
        b_u = tl.load(_at(p_u, s_u, o_m, o_n), mask=m_t, other=0).to(tl.float32)
    b_y = _activate(b_x, ACT)
    if GATED:
        b_y = b_y * b_u
    tl.store(_at(p_y, s_y, o_m, o_n), b_y.to(p_y.dtype.element_ty), mask=m_t)


@triton.jit
def _activation_bwd_kernel(
    p_dy, p_x, p_u, p_dx, p_du,
    n_rows, n_cols,
    s_dy, s_x, s_u, s_dx, s_du,
    ACT: tl.constexpr, GATED: tl.constexpr,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr,
):
    """Gradients of y = f(x)·u (GATED) or y = f(x); all operands [n_rows, n_cols] with row strides s_*.

    GATED:  dx = dy · u · f'(x),  du = dy · f(x)
    else:   dx = dy · f'(x)        (``p_u``/``p_du`` never touched)
    f is recomputed from x rather than saved: recomputing costs a few FLOPs, saving it would cost a
    write in the forward and a read here.
    """
    o_m, o_n, m_t = _tile(n_rows, n_cols, BLOCK_N, ROWS)
    b_dy = tl.load(_at(p_dy, s_dy, o_m, o_n), mask=m_t, other=0).to(tl.float32)
    b_x = tl.load(_at(p_x, s_x, o_m, o_n), mask=m_t, other=0).to(tl.float32)
    if GATED:
        b_u = tl.load(_at(p_u, s_u, o_m, o_n), mask=m_t, other=0).to(tl.float32)
    b_f, b_df = _activate_grad(b_x, ACT)
    if GATED:
        tl.store(_at(p_du, s_du, o_m, o_n), (b_dy * b_f).to(p_du.dtype.element_ty), mask=m_t)
        b_df = b_df * b_u
    tl.store(_at(p_dx, s_dx, o_m, o_n), (b_dy * b_df).to(p_dx.dtype.element_ty), mask=m_t)


# --------------------------------------------------------------------------------------------- launchers

def _rows_out(t: torch.Tensor) -> torch.Tensor:
    """``as_rows`` for a tensor the kernel writes: it must stay a view, or the writes would land in a copy."""
    rows = as_rows(t)
    if rows.data_ptr() != t.data_ptr():
        raise RuntimeError(f"internal: output of shape {tuple(t.shape)} strides {t.stride()} "
                           "cannot be viewed as rows")
    return rows


def _launch(kernel, ins: list[torch.Tensor], outs: list[torch.Tensor], act: str, gated: bool) -> None:
    """View every operand as ``[rows, n]`` and launch ``kernel`` over tiles of the common shape."""
    if act not in ACTS:
        raise ValueError(f"act: expected one of {ACTS}, got {act!r}")
    views = [as_rows(t) for t in ins] + [_rows_out(t) for t in outs]
    n_rows, n_cols = views[0].shape
    cfg = tile_launch(n_cols, n_rows)
    # Three grid dims: launch()'s cached path hands the grid to CompiledKernel, which reads grid[0..2].
    grid = (cdiv(n_rows, cfg.ROWS) * cdiv(n_cols, cfg.BLOCK_N), 1, 1)
    launch(kernel, grid, *views, n_rows, n_cols, *(v.stride(0) for v in views),
           num_warps=cfg.num_warps, ACT=act, GATED=gated, BLOCK_N=cfg.BLOCK_N, ROWS=cfg.ROWS)


def activation_fwd(x: torch.Tensor, up: torch.Tensor | None, out: torch.Tensor, act: str) -> None:
    """Write ``f(x) · up`` (or ``f(x)`` when ``up`` is None) into ``out``; all ``[..., n]`` of one shape.

    Operands may be strided views (a half of a packed gate-up buffer); ``out`` must be row-viewable.
    """
    gated = up is not None
    # Ungated: the kernel never reads p_u; pass x so the argument list (and the kernel) stays one.
    _launch(_activation_fwd_kernel, [x, up if gated else x], [out], act, gated)


def activation_bwd(grad_out: torch.Tensor, x: torch.Tensor, up: torch.Tensor | None,
                   grad_x: torch.Tensor, grad_up: torch.Tensor | None, act: str) -> None:
    """Write the gradients of :func:`activation_fwd` into ``grad_x`` (and ``grad_up`` when gated).

    ``grad_x``/``grad_up`` may be the two halves of one packed ``[..., 2n]`` gradient.
    """
    gated = up is not None
    if gated != (grad_up is not None):
        raise ValueError("grad_up: expected a tensor exactly when up is given")
    # Ungated: p_u / p_du are never touched; x and grad_x stand in for them.
    _launch(_activation_bwd_kernel, [grad_out, x, up if gated else x],
            [grad_x, grad_up if gated else grad_x], act, gated)
