"""Softmax and log-softmax over the last dimension: Triton kernels, autograd, torch.library ops, specs.

    y = softmax(x)      = exp(x − max x) / Σ exp(x − max x)
    y = log_softmax(x)  = (x − max x) − log Σ exp(x − max x)

Both share every kernel through a ``LOG`` constexpr. Two kernel shapes per direction:

* **one-pass** (row ≤ :data:`ONE_PASS_MAX_COLS`): the whole row sits in registers, so every input byte is
  read once and every output byte written once (2 passes of traffic forward, 3 backward). Short rows are
  packed several to a program (``row_launch``) so programs are not tiny.
* **looped** (longer rows): the register file cannot hold the row (past 32k fp32 values per program the
  compiler spills, see ``MAX_FUSED_ROW_BYTES``), so pass 1 streams the row keeping online statistics and
  pass 2 re-reads it and writes. One row is in flight per program and pass 1 asks L2 to keep what it reads
  (``evict_last``), so the re-read mostly hits L2; pass 2 walks the row backwards, starting on the tiles
  pass 1 read last (the freshest in L2), and streams its output past L2 (``.cs`` stores) so the writes do
  not evict rows still to be re-read. A row that has left L2 costs 3 passes of traffic instead of 2, which
  is why rows of 256k (512 KiB in bf16, more rows in flight than L2 holds) run near 60% of copy bandwidth.

Statistics are fp32 whatever the input dtype; outputs are in the input dtype. Rows whose entries are all
``-inf`` give NaN, as in PyTorch (0/0); one finite entry is enough for a finite result, and ``-inf`` entries
(masked logits) give exactly 0 (softmax) or ``-inf`` (log_softmax).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelworks.ops._math import LOG2E
from kernelworks.runtime.alloc import empty_like
from kernelworks.runtime.device import interpreter_active
from kernelworks.runtime.launch import MAX_FUSED_ROW_BYTES, cached_plan, launch, row_launch
from kernelworks.runtime.layout import as_rows
from kernelworks.runtime.replay import replayed_op
from kernelworks.runtime.torch_op import TorchOp
from kernelworks.runtime.validate import check_float_tensor
from kernelworks.spec import Case, Cost, OpSpec, Provider, case, randn, register

__all__ = ["LOG_SOFTMAX_SPEC", "SOFTMAX_SPEC", "log_softmax", "log_softmax_bwd", "log_softmax_fwd",
           "online_max_sum", "softmax", "softmax_bwd", "softmax_fwd"]

ONE_PASS_MAX_COLS = MAX_FUSED_ROW_BYTES // 4
"""Longest row (32768) the one-pass kernels hold in registers as fp32; longer rows take the looped kernels.
Measured on an H100, bf16, 64M elements: one pass at 32768 columns runs at 92% of copy bandwidth forward
and 96% backward (y and dy both held), against 80% / 68% looped; at 65536 it spills (73% / 14%)."""
# Looped kernels' tiles (columns per step) and warps: 16 fp32 values a thread, 16-byte loads. Measured on an
# H100 (bf16): forward 8192/16 is best up to 65536 columns (82% of copy), 16384/16 past it (75% at 131072);
# backward 16384/32 beats 8192/16 by 5-20% from 65536 to 262144 columns.
LOOP_FWD_TILE, LOOP_FWD_TILE_LONG, LOOP_FWD_WARPS = 8192, 16384, 16
LOOP_BWD_TILE, LOOP_BWD_WARPS = 16384, 32

# Under Triton's interpreter (CPU tests, `kw check` without a GPU) the looped kernels take over past 1024
# columns with 256-column tiles, so tiny cases exercise both paths and the loops' masked tails. Speed is
# meaningless there; on a GPU the limits above apply.
_INTERPRETER_ONE_PASS_MAX_COLS = 1024
_INTERPRETER_LOOP_TILE = 256


@cached_plan
def _plan(n_rows: int, n_cols: int, backward: bool = False) -> tuple[bool, tuple[int], dict[str, int]]:
    """``(looped, grid, launch options)`` for a ``[n_rows, n_cols]`` problem (cached: host time is most of
    a small call's cost — a 1×4096 softmax runs ~3 µs on the GPU)."""
    if interpreter_active():
        if n_cols > _INTERPRETER_ONE_PASS_MAX_COLS:
            return True, (n_rows,), {"TILE": _INTERPRETER_LOOP_TILE, "num_warps": 1}
    elif n_cols > ONE_PASS_MAX_COLS:
        if backward:
            return True, (n_rows,), {"TILE": LOOP_BWD_TILE, "num_warps": LOOP_BWD_WARPS}
        tile = LOOP_FWD_TILE if n_cols <= 65536 else LOOP_FWD_TILE_LONG
        return True, (n_rows,), {"TILE": tile, "num_warps": LOOP_FWD_WARPS}
    cfg = row_launch(n_cols, n_rows)
    return False, (triton.cdiv(n_rows, cfg.ROWS),), {"BLOCK_N": cfg.BLOCK_N, "ROWS": cfg.ROWS,
                                                      "num_warps": cfg.num_warps}


# ------------------------------------------------------------------------------------------------ kernels


@triton.jit
def online_max_sum(b_m, b_s, b_x):
    """One step of the online softmax statistics (Milakov & Gimelshein, 2018) over a tile of one row.

    b_m: fp32 scalar, running max of the row so far (-inf until a finite value is seen);
    b_s: fp32 [TILE], per-lane running sums of exp(x - b_m) — kept per lane so the sum needs one
         cross-warp reduction at the end of the row, not one per tile;
    b_x: fp32 [TILE], the tile, masked lanes -inf.
    Returns the updated (b_m, b_s). While every value seen is -inf the max stays -inf, and exp of
    (-inf) - (-inf) would be NaN and poison the sums for good: the shift is taken as 0 then, which keeps
    the sums at exactly 0 until the first finite value (a leading run of masked logits).
    """
    b_m_new = tl.maximum(b_m, tl.max(b_x, axis=0))
    b_shift = tl.where(b_m_new == float("-inf"), 0.0, b_m_new)
    b_s = b_s * tl.exp2((b_m - b_shift) * LOG2E) + tl.exp2((b_x - b_shift) * LOG2E)
    return b_m_new, b_s


@triton.jit
def _softmax_fwd_kernel(p_x, p_y, n_rows, n_cols, stride_x, stride_y,
                        BLOCK_N: tl.constexpr, ROWS: tl.constexpr, LOG: tl.constexpr):
    """One pass, whole rows in registers. x, y: [n_rows, n_cols] with unit column stride; ROWS rows per
    program, BLOCK_N = next_pow2(n_cols) columns.

        m = max_j x_j,  e_j = exp(x_j - m),  s = Σ_j e_j
        y_j = e_j / s                    (LOG = False)
        y_j = (x_j - m) - log s          (LOG = True)
    """
    i_r = tl.program_id(0)
    o_r = i_r * ROWS + tl.arange(0, ROWS)
    o_n = tl.arange(0, BLOCK_N)
    m_n = o_n < n_cols
    m_y = (o_r < n_rows)[:, None] & m_n[None, :]
    # the last program's padding rows re-read the last row (never stored), so no empty row makes NaNs;
    # int64: n_rows · stride can pass 2^31
    o_r = tl.minimum(o_r, n_rows - 1).to(tl.int64)
    # -inf in the masked lanes: they add nothing to the max, and exp(-inf - m) = 0 to the sum
    b_x = tl.load(p_x + o_r[:, None] * stride_x + o_n[None, :], mask=m_n[None, :],
                  other=float("-inf")).to(tl.float32)
    b_m = tl.max(b_x, axis=1)
    # a row of only -inf: shift by 0 instead of -inf so no (-inf) - (-inf) appears; the row then ends as
    # 0/0 = NaN, as in PyTorch
    b_m = tl.where(b_m == float("-inf"), 0.0, b_m)
    b_xm = b_x - b_m[:, None]
    b_e = tl.exp2(b_xm * LOG2E)
    b_s = tl.sum(b_e, axis=1)
    b_y = b_xm - tl.log(b_s)[:, None] if LOG else b_e * (1.0 / b_s)[:, None]
    tl.store(p_y + o_r[:, None] * stride_y + o_n[None, :], b_y.to(p_y.dtype.element_ty), mask=m_y)


@triton.jit
def _softmax_fwd_looped_kernel(p_x, p_y, n_cols, stride_x, stride_y, TILE: tl.constexpr, LOG: tl.constexpr):
    """Rows too long for registers, one row per program, TILE columns per step. Same math as
    ``_softmax_fwd_kernel``: pass 1 streams the row for the online max m and sum s (``online_max_sum``),
    pass 2 re-reads it and writes y. Only one row is in flight per program, so the re-read usually hits L2;
    when the row has left L2 this costs 3 passes of traffic (read, read, write) instead of 2.
    """
    i_r = tl.program_id(0).to(tl.int64)
    p_x += i_r * stride_x
    p_y += i_r * stride_y
    o_t = tl.arange(0, TILE)
    o_last = (n_cols - 1) // TILE * TILE  # first column of the last tile

    b_m = tl.full([], float("-inf"), tl.float32)
    b_s = tl.zeros([TILE], dtype=tl.float32)
    for i_t in range(0, n_cols, TILE):
        o_n = i_t + o_t
        b_x = tl.load(p_x + o_n, mask=o_n < n_cols, other=float("-inf"),
                      eviction_policy="evict_last").to(tl.float32)  # wanted again in pass 2
        b_m, b_s = online_max_sum(b_m, b_s, b_x)
    b_m = tl.where(b_m == float("-inf"), 0.0, b_m)  # an all -inf row ends as 0/0 = NaN, as in PyTorch
    b_sum = tl.sum(b_s, axis=0)
    b_log_s = tl.log(b_sum)
    b_inv_s = 1.0 / b_sum

    # backwards: the last tiles of pass 1 are the freshest in L2; done with x, and y is not read again here
    for i_k in range(0, n_cols, TILE):
        o_n = (o_last - i_k) + o_t
        m_n = o_n < n_cols
        b_xm = tl.load(p_x + o_n, mask=m_n, other=0.0, eviction_policy="evict_first").to(tl.float32) - b_m
        b_y = b_xm - b_log_s if LOG else tl.exp2(b_xm * LOG2E) * b_inv_s
        tl.store(p_y + o_n, b_y.to(p_y.dtype.element_ty), mask=m_n, cache_modifier=".cs")


@triton.jit
def _softmax_bwd_kernel(p_dy, p_y, p_dx, n_rows, n_cols, stride_dy, stride_y, stride_dx,
                        BLOCK_N: tl.constexpr, ROWS: tl.constexpr, LOG: tl.constexpr):
    """One pass, whole rows of y and dy in registers; shapes and packing as ``_softmax_fwd_kernel``.

        dx_j = y_j · (dy_j − Σ_k dy_k · y_k)          (LOG = False, y = softmax)
        dx_j = dy_j − exp(y_j) · Σ_k dy_k             (LOG = True,  y = log_softmax)
    """
    i_r = tl.program_id(0)
    o_r = i_r * ROWS + tl.arange(0, ROWS)
    o_n = tl.arange(0, BLOCK_N)
    m_n = o_n < n_cols
    m_dx = (o_r < n_rows)[:, None] & m_n[None, :]
    o_r = tl.minimum(o_r, n_rows - 1).to(tl.int64)  # padding rows re-read the last row, never stored
    m_ld = m_n[None, :]
    b_dy = tl.load(p_dy + o_r[:, None] * stride_dy + o_n[None, :], mask=m_ld, other=0.0).to(tl.float32)
    b_y = tl.load(p_y + o_r[:, None] * stride_y + o_n[None, :], mask=m_ld, other=0.0).to(tl.float32)
    if LOG:
        b_dx = b_dy - tl.exp2(b_y * LOG2E) * tl.sum(b_dy, axis=1)[:, None]
    else:
        b_dx = b_y * (b_dy - tl.sum(b_dy * b_y, axis=1)[:, None])
    tl.store(p_dx + o_r[:, None] * stride_dx + o_n[None, :], b_dx.to(p_dx.dtype.element_ty), mask=m_dx)


@triton.jit
def _softmax_bwd_looped_kernel(p_dy, p_y, p_dx, n_cols, stride_dy, stride_y, stride_dx,
                               TILE: tl.constexpr, LOG: tl.constexpr):
    """Rows too long for registers, one row per program: pass 1 accumulates Σ dy·y (softmax) or Σ dy
    (log_softmax) per lane, pass 2 walks the row backwards (L2-fresh tiles first) and writes dx with the
    formulas of ``_softmax_bwd_kernel``; cache hints as in ``_softmax_fwd_looped_kernel``. 5 passes of
    traffic when the row has left L2, 3 when it has not. (log_softmax's pass 1 reads dy only.)
    """
    i_r = tl.program_id(0).to(tl.int64)
    p_dy += i_r * stride_dy
    p_y += i_r * stride_y
    p_dx += i_r * stride_dx
    o_t = tl.arange(0, TILE)
    o_last = (n_cols - 1) // TILE * TILE

    b_acc = tl.zeros([TILE], dtype=tl.float32)
    for i_t in range(0, n_cols, TILE):
        o_n = i_t + o_t
        m_n = o_n < n_cols
        b_dy = tl.load(p_dy + o_n, mask=m_n, other=0.0, eviction_policy="evict_last").to(tl.float32)
        if LOG:
            b_acc += b_dy
        else:
            b_acc += b_dy * tl.load(p_y + o_n, mask=m_n, other=0.0, eviction_policy="evict_last").to(tl.float32)
    b_sum = tl.sum(b_acc, axis=0)

    for i_k in range(0, n_cols, TILE):
        o_n = (o_last - i_k) + o_t
        m_n = o_n < n_cols
        b_dy = tl.load(p_dy + o_n, mask=m_n, other=0.0, eviction_policy="evict_first").to(tl.float32)
        b_y = tl.load(p_y + o_n, mask=m_n, other=0.0, eviction_policy="evict_first").to(tl.float32)
        b_dx = b_dy - tl.exp2(b_y * LOG2E) * b_sum if LOG else b_y * (b_dy - b_sum)
        tl.store(p_dx + o_n, b_dx.to(p_dx.dtype.element_ty), mask=m_n, cache_modifier=".cs")


# ---------------------------------------------------------------------------------------------- launchers


def softmax_fwd(x: torch.Tensor, *, log: bool = False) -> torch.Tensor:
    """Launch the forward kernels on ``x [..., n]`` (any row stride); returns a contiguous ``y``."""
    x2 = as_rows(x)
    n_rows, n_cols = x2.shape
    y = empty_like(x)
    y2 = y if y.dim() == 2 else y.view(n_rows, n_cols)
    looped, grid, opts = _plan(n_rows, n_cols)
    if looped:
        launch(_softmax_fwd_looped_kernel, grid, x2, y2, n_cols, x2.stride(0), y2.stride(0), LOG=log, **opts)
    else:
        launch(_softmax_fwd_kernel, grid, x2, y2, n_rows, n_cols, x2.stride(0), y2.stride(0), LOG=log, **opts)
    return y


def softmax_bwd(dy: torch.Tensor, y: torch.Tensor, *, log: bool = False) -> torch.Tensor:
    """Launch the backward kernels: ``dx`` from the forward's output ``y`` and the incoming ``dy``."""
    dy2, y2 = as_rows(dy), as_rows(y)
    n_rows, n_cols = y2.shape
    dx = empty_like(y)
    dx2 = dx if dx.dim() == 2 else dx.view(n_rows, n_cols)
    looped, grid, opts = _plan(n_rows, n_cols, True)
    strides = (dy2.stride(0), y2.stride(0), dx2.stride(0))
    if looped:
        launch(_softmax_bwd_looped_kernel, grid, dy2, y2, dx2, n_cols, *strides, LOG=log, **opts)
    else:
        launch(_softmax_bwd_kernel, grid, dy2, y2, dx2, n_rows, n_cols, *strides, LOG=log, **opts)
    return dx


def log_softmax_fwd(x: torch.Tensor) -> torch.Tensor:
    """``softmax_fwd(x, log=True)``."""
    return softmax_fwd(x, log=True)


def log_softmax_bwd(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``softmax_bwd(dy, y, log=True)``."""
    return softmax_bwd(dy, y, log=True)


# ------------------------------------------------------------------------------- torch.library and autograd


def _define_op(name: str, *, log: bool) -> TorchOp:
    """``kernelworks::<name>`` (+ ``_backward``): the same kernels with ``LOG=log``; autograd saves the
    output, which is all either gradient needs."""

    def forward(x: torch.Tensor) -> torch.Tensor:
        return softmax_fwd(x, log=log)

    def backward(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return softmax_bwd(dy, y, log=log)

    def forward_fake(x: torch.Tensor) -> torch.Tensor:
        return x.new_empty(x.shape)  # contiguous, like the real output

    def backward_fake(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return y.new_empty(y.shape)

    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(output)

    def input_grads(ctx, grads: tuple, bwd) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return bwd(grads[0], y)

    return TorchOp(name, forward=forward, forward_fake=forward_fake, backward=backward,
                   backward_fake=backward_fake, setup_context=setup_context, input_grads=input_grads)


_softmax_op = _define_op("softmax", log=False)
_log_softmax_op = _define_op("log_softmax", log=True)


# ------------------------------------------------------------------------------------------------- public


def _check_inputs(x: object, dim: object) -> None:
    check_float_tensor("x", x)
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dim: expected an int, got {type(dim).__name__}")
    last = x.dim() - 1
    if dim not in (-1, last):
        raise ValueError(f"dim: only the last dimension is supported (dim=-1 or dim={last} for shape "
                         f"{tuple(x.shape)}), got dim={dim}; move the dimension last first, e.g. with "
                         f"x.movedim({dim}, -1)")


@replayed_op
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax over the last dimension: ``exp(x − max) / Σ exp(x − max)``.

    Args:
        x: ``[..., n]`` float32, float16 or bfloat16, on CUDA (or the CPU under ``TRITON_INTERPRET=1``);
            any strides (a slice of a wider tensor runs without a copy; expanded views are honoured).
            Empty tensors are refused (ValueError). NaN and ``+inf`` make their row NaN, as in PyTorch.
        dim: must name the last dimension (``-1``, the default, or ``x.dim() − 1``).

    Returns:
        ``y`` shaped like ``x``, contiguous, in ``x``'s dtype (statistics in float32). ``-inf`` entries give
        0; a row of only ``-inf`` gives NaN, as in PyTorch. Differentiable; works under ``torch.compile``.

    Example:
        >>> probs = kernelworks.softmax(torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16))
        >>> probs.float().sum(-1)  # ≈ 1 per row
    """
    _check_inputs(x, dim)
    return _softmax_op(x)


@replayed_op
def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Log-softmax over the last dimension: ``(x − max) − log Σ exp(x − max)``.

    Args:
        x: ``[..., n]`` float32, float16 or bfloat16, on CUDA (or the CPU under ``TRITON_INTERPRET=1``);
            any strides. Empty tensors are refused (ValueError). NaN and ``+inf`` make their row NaN, as in
            PyTorch.
        dim: must name the last dimension (``-1``, the default, or ``x.dim() − 1``).

    Returns:
        ``y`` shaped like ``x``, contiguous, in ``x``'s dtype (statistics in float32). ``-inf`` entries stay
        ``-inf``; a row of only ``-inf`` gives NaN, as in PyTorch. Differentiable; works under
        ``torch.compile``.

    Example:
        >>> logp = kernelworks.log_softmax(torch.randn(8, 32000, device="cuda"))
        >>> logp.exp().sum(-1)  # ≈ 1 per row
    """
    _check_inputs(x, dim)
    return _log_softmax_op(x)


# --------------------------------------------------------------------------------------------------- specs


def _reference_softmax(x: torch.Tensor) -> torch.Tensor:
    """PyTorch eager softmax over the last dimension (the ground truth, run in float64 by the checker)."""
    return torch.softmax(x, dim=-1)


def _reference_log_softmax(x: torch.Tensor) -> torch.Tensor:
    """PyTorch eager log-softmax over the last dimension."""
    return torch.log_softmax(x, dim=-1)


def _inputs(case: Case, device: torch.device) -> dict[str, torch.Tensor]:
    """``x [*batch, rows, cols]`` ~ N(0, 2²); ``extreme`` plants ±1e4 and -inf (masked logits) in every row,
    with a leading quarter of -inf (longer than a looped tile under the interpreter, so the online max starts
    on an all -inf tile) and a finite last column; ``row_padding`` makes a strided view."""
    shape = (*case.get("batch", ()), case["rows"], case["cols"])
    x = randn(shape, case, device, scale=2.0, row_padding=case.get("row_padding", 0))
    if case.get("extreme"):
        x[..., 1::5] = float("-inf")
        x[..., 2::7] = 1e4
        x[..., 3::11] = -1e4
        x[..., : case["cols"] // 4] = float("-inf")
        x[..., -1] = 0.5
    return {"x": x}


def _cost(case: Case, mode: str) -> Cost:
    n = case["rows"] * case["cols"] * _batch(case)
    if mode == "fwd":  # read x, write y; max, subtract, exp, sum, scale
        return Cost(flops=5 * n, bytes=2 * n * case.itemsize)
    return Cost(flops=4 * n, bytes=3 * n * case.itemsize)  # read y and dy, write dx


def _batch(case: Case) -> int:
    out = 1
    for b in case.get("batch", ()):
        out *= b
    return out


def _check_cases() -> list[Case]:
    f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16
    looped = _INTERPRETER_ONE_PASS_MAX_COLS + 1000  # looped under the interpreter; one-pass on a GPU
    return [
        case("1x7", f32, rows=1, cols=7, tags=("quick",)),
        case("single-col", f32, rows=5, cols=1),
        case("3x13", f16, rows=3, cols=13),
        case("13x127", bf16, rows=13, cols=127, tags=("quick",)),
        case("2x3x50", f32, batch=(2,), rows=3, cols=50),
        case("4x1000-strided", f32, rows=4, cols=1000, row_padding=24),
        case("4x1000-strided", bf16, rows=4, cols=1000, row_padding=24),
        case(f"2x{looped}-looped", f32, rows=2, cols=looped, tags=("quick",)),
        case(f"2x{looped}-looped-strided", bf16, rows=2, cols=looped, row_padding=40),
        case("6x300-extreme", f32, rows=6, cols=300, extreme=True),
        case("6x300-extreme", bf16, rows=6, cols=300, extreme=True),
        case("6x300-extreme", f16, rows=6, cols=300, extreme=True),
        case(f"2x{looped}-looped-extreme", f32, rows=2, cols=looped, extreme=True),
        # GPU only: the real looped kernels (past ONE_PASS_MAX_COLS), and the largest one-pass row
        case("8x16384", bf16, rows=8, cols=16384, tags=("gpu",)),
        case("16x65536", bf16, rows=16, cols=65536, tags=("gpu",)),
        case("4x262144", bf16, rows=4, cols=262144, tags=("gpu",)),
        case("4x65537-extreme", f32, rows=4, cols=65537, extreme=True, tags=("gpu",)),
    ]


def _bench_cases() -> list[Case]:
    bf16 = torch.bfloat16
    cases = [
        case("8192x8192", bf16, rows=8192, cols=8192, tags=("gpu", "quick", "sweep:cols")),  # 64M too
        case("1x4096", bf16, rows=1, cols=4096, tags=("gpu", "quick")),  # latency
    ]
    for cols in (256, 1024, 4096, 16384, 65536, 262144):  # row-length sweep at 64M elements
        rows = (1 << 26) // cols
        cases.append(case(f"{rows}x{cols}", bf16, rows=rows, cols=cols, tags=("gpu", "sweep:cols")))
    return cases


def _liger_softmax(x: torch.Tensor) -> torch.Tensor:
    from liger_kernel.ops.softmax import LigerSoftmaxFunction

    return LigerSoftmaxFunction.apply(x)


def _make_spec(name: str, fn, reference, description: str, peers: dict[str, Provider]) -> OpSpec:
    return OpSpec(
        name=name,
        reference=reference,
        inputs=_inputs,
        check_cases=_check_cases(),
        bench_cases=_bench_cases(),
        cost=_cost,
        providers={"kernelworks": Provider("kernelworks", fn), **peers},
        grad_inputs=("x",),
        description=description,
    )


SOFTMAX_SPEC = register(_make_spec(
    "softmax", softmax, _reference_softmax, "softmax over the last dimension",
    {"liger": Provider("liger", _liger_softmax, requires=("liger_kernel",), gpu_only=True)}))
LOG_SOFTMAX_SPEC = register(_make_spec(
    "log_softmax", log_softmax, _reference_log_softmax, "log-softmax over the last dimension", {}))
