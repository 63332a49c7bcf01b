"""Forward kernels of LayerNorm and RMSNorm over the last dimension (``IS_RMS`` picks the statistics).

With ``h = x`` (or ``h = round(x + residual)`` to the input dtype, the new residual stream, written out):

    LayerNorm:  μ = mean(h),  σ² = mean((h − μ)²),  rstd = 1/√(σ² + eps),  y = (h − μ)·rstd·w + b
    RMSNorm:    μ = 0,        σ² = mean(h²),        rstd = 1/√(σ² + eps),  y = h·rstd·(offset + w)

Statistics are fp32 and saved (``mean``, ``rstd``: fp32 ``[rows]`` each) for the backward; ``y`` is in the
input dtype, rounded once at the store. The norm reads the *rounded* sum, so ``y`` equals norm(the returned
residual) exactly, as an unfused add-then-norm computes it. Rows whose squares overflow fp32 (|h| past
~1e19, where torch's fp32 norms return the bias) have their statistics recomputed on h scaled by a power
of two (exact), so they match float64; other rows pay one finiteness test. Two kernel shapes:

* **one-pass** (row ≤ :data:`FWD_ONE_PASS_MAX_COLS`): whole rows in registers, several per program for
  short rows (``row_launch``): every byte read once, written once.
* **looped** (longer rows): one row per program; pass 1 streams the row for the statistics (per-lane
  Welford for LayerNorm, so a large mean cannot cancel the variance away), pass 2 re-reads it — mostly
  from L2, walking the row backwards so the freshest tiles come first — and writes ``y``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelworks.runtime.alloc import empty, empty_like
from kernelworks.runtime.device import interpreter_active
from kernelworks.runtime.launch import MAX_FUSED_ROW_BYTES, cached_plan, cdiv, launch, next_pow2, row_launch
from kernelworks.runtime.layout import as_rows
from kernelworks.runtime.plans import ForcedPlan

FWD_ONE_PASS_MAX_COLS = MAX_FUSED_ROW_BYTES // 4
"""Longest row (32768) the one-pass forward keeps in registers as fp32 (one live row, ``h``: the same
register budget as softmax's one-pass forward, measured without spills at 32768 on an H100)."""
LOOP_FWD_TILE, LOOP_FWD_WARPS = 8192, 16
"""Looped forward: columns per step and warps (softmax's measured best up to 65536 columns)."""

# Under Triton's interpreter the looped kernels take over past 512 columns with 128-column tiles, so the
# tiny CPU cases (hidden 1000) run both kernel shapes and the loops' masked tails.
INTERPRETER_ONE_PASS_MAX_COLS = 512
INTERPRETER_TILE = 128

FORCED_PLAN: ForcedPlan[dict] = ForcedPlan("norm_fwd")
"""A plan forced on :func:`norm_fwd` (``kw tune rms_norm``'s hook): ``{"LOOPED": False, "ROWS", "num_warps"}``
(the one-pass kernel, ``BLOCK_N`` the row rounded up to a power of two) or ``{"LOOPED": True, "TILE",
"num_warps"}`` (the looped kernel, any row length)."""

CONFIGS = [{"LOOPED": False, "ROWS": r, "num_warps": w} for r in (1, 2, 4, 8) for w in (2, 4, 8, 16, 32)] + [
    {"LOOPED": True, "TILE": t, "num_warps": w} for t in (2048, 4096, 8192, 16384) for w in (4, 8, 16)]
"""``kw tune rms_norm``'s space (32 configs: exhaustive): rows per program × warps of the one-pass kernel, then
the looped kernel's tile × warps (which also runs rows that would fit in registers, reading them twice).
The default plan is among them at Llama widths (4096: 1 row, 8 warps; 8192: 1 row, 16 warps)."""


# ------------------------------------------------------------------------------------------ device helpers
# Shared by the forward and backward kernels (both import them from here).


@triton.jit
def load_input(p_x, p_r, p_h, m_ld, m_st, HAS_RES: tl.constexpr, STORE: tl.constexpr):
    """The row block ``h`` in fp32: ``x``, or ``round(x + r)`` to the input dtype, stored to ``p_h`` (when
    STORE).

    Rounded before the statistics so the normalised value is norm(h) of the stored h (as in torch's
    ``x + residual`` followed by a norm). ``m_ld`` masks the loads (padding rows may re-read a real row),
    ``m_st`` the store of ``h``.
    """
    b_x = tl.load(p_x, mask=m_ld, other=0.0)
    if HAS_RES:
        b_x = (b_x.to(tl.float32) + tl.load(p_r, mask=m_ld, other=0.0).to(tl.float32)).to(p_h.dtype.element_ty)
        if STORE:
            # kept in L2 (evict_last): the looped kernel reads h back in its second pass
            tl.store(p_h, b_x, mask=m_st, eviction_policy="evict_last")
    return b_x.to(tl.float32)


@triton.jit
def weight_scale(b_v, p_w, o_n, m_n, offset, HAS_W: tl.constexpr):
    """``b_v [R, C] · (offset + w[o_n])`` in fp32 (``b_v`` unchanged without a weight). Shared by the
    forward (``xhat·w``) and the backward (``dy·w``); ``w`` may be fp32 while the rows are 16-bit."""
    if HAS_W:
        b_w = offset + tl.load(p_w + o_n, mask=m_n, other=0.0).to(tl.float32)
        b_v = b_v * b_w[None, :]
    return b_v


@triton.jit
def _moments(b_h, m_n, n_cols, b_c, b_inv, IS_RMS: tl.constexpr):
    """``(mean, var)`` of ``h / c`` per row of ``b_h [R, BLOCK_N]`` (masked lanes 0; ``b_c``, ``b_inv``:
    powers of two ``[R]``, or 1.0), both fp32 ``[R]``; mean is 0 for RMSNorm (var: the mean square). Exact
    two-step variance (the whole row is in registers, so no E[h²] − E[h]² cancellation). ``div_rn``: a
    correctly rounded mean makes a constant row's h − μ exactly 0 (y = bias, as in float64). The scaled
    values are formed where they are summed, never held: (h − c·mean)/c is h/c − mean exactly."""
    if IS_RMS:
        b_mean = tl.zeros([b_h.shape[0]], dtype=tl.float32)
        b_hs = b_h * b_inv[:, None]
        b_var = tl.sum(b_hs * b_hs, axis=1) / n_cols
    else:
        b_mean = tl.div_rn(tl.sum(b_h * b_inv[:, None], axis=1), n_cols * 1.0)
        b_d = tl.where(m_n[None, :], (b_h - (b_mean * b_c)[:, None]) * b_inv[:, None], 0.0)
        b_var = tl.sum(b_d * b_d, axis=1) / n_cols
    return b_mean, b_var


@triton.jit
def pow2_scale(b_amax):
    """``(c, 1/c)``: the power of two at or below ``b_amax`` (its exponent bits), clamped to [1, 2^126], so
    that both are exact (scaling by them rounds nothing) and 1/c stays a normal float."""
    b_bits = b_amax.to(tl.int32, bitcast=True) & 0x7F800000
    b_bits = tl.minimum(tl.maximum(b_bits, 0x3F800000), 0x7E800000)
    return b_bits.to(tl.float32, bitcast=True), (0x7F000000 - b_bits).to(tl.float32, bitcast=True)


@triton.jit
def unscale_stats(b_mean_s, b_var_s, b_c, b_inv, eps):
    """``(mean, rstd)`` from the statistics of ``h / c``: mean = c·mean_s, rstd = 1/√(c²·var_s + eps), or
    (1/c)/√var_s where c²·var_s overflows (eps is then negligible). For rows that did not overflow this
    equals the unscaled computation bit for bit: c is a power of two."""
    b_var = b_var_s * b_c * b_c  # left to right: 0·c·c is 0, never 0·inf
    b_rstd = tl.where(b_var < float("inf"), tl.rsqrt(b_var + eps), b_inv * tl.rsqrt(b_var_s))
    return b_mean_s * b_c, b_rstd


@triton.jit
def overflowed(b_var):
    """True when any row's variance (or mean square) is not finite: |h| ≳ 1e19 squares past fp32's range."""
    return tl.max(tl.where(b_var < float("inf"), 0, 1), axis=0) > 0


@triton.jit
def row_stats(b_h, m_n, n_cols, eps, IS_RMS: tl.constexpr):
    """``(mean, rstd)`` per row of ``b_h [R, BLOCK_N]`` (masked lanes 0), both fp32 ``[R]``; mean is 0 for
    RMSNorm.

    When a row's squares overflow fp32 (|h| near 1e20: torch's fp32 norm returns the bias there) the block
    is redone on h scaled by a per-row power of two near max|h| (``pow2_scale``): exact, so the other rows
    of the block keep their bits, and the usual rows pay only the finiteness test."""
    b_one = tl.full([b_h.shape[0]], 1.0, dtype=tl.float32)
    b_mean, b_var = _moments(b_h, m_n, n_cols, b_one, b_one, IS_RMS)
    b_rstd = tl.rsqrt(b_var + eps)
    if overflowed(b_var):
        b_c, b_inv = pow2_scale(tl.max(tl.abs(b_h), axis=1))
        b_mean_s, b_var_s = _moments(b_h, m_n, n_cols, b_c, b_inv, IS_RMS)
        b_mean, b_rstd = unscale_stats(b_mean_s, b_var_s, b_c, b_inv, eps)
    return b_mean, b_rstd


@triton.jit
def _normalize(b_h, b_mean, b_rstd, p_w, p_b, o_n, m_n, offset, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    """``y = (h − mean)·rstd·(offset + w) + b`` for a row block ``[R, C]``, in fp32."""
    b_y = weight_scale((b_h - b_mean[:, None]) * b_rstd[:, None], p_w, o_n, m_n, offset, HAS_W)
    if HAS_B:
        b_y += tl.load(p_b + o_n, mask=m_n, other=0.0).to(tl.float32)[None, :]
    return b_y


@triton.jit
def _welford_combine(b_mean_a, b_m2_a, b_n_a, b_mean_b, b_m2_b, b_n_b):
    """Chan et al.'s merge of two (mean, M2, count) partial statistics; an empty side (count 0) is
    neutral."""
    b_n = b_n_a + b_n_b
    b_wb = tl.where(b_n > 0, b_n_b / tl.maximum(b_n, 1.0), 0.0)
    b_d = b_mean_b - b_mean_a
    return b_mean_a + b_d * b_wb, b_m2_a + b_m2_b + b_d * b_d * b_n_a * b_wb, b_n


# ------------------------------------------------------------------------------------------------ kernels


@triton.jit
def _norm_fwd_kernel(p_x, p_r, p_w, p_b, p_y, p_h, p_mean, p_rstd, n_rows, n_cols,
                     stride_x, stride_r, stride_y, stride_h, eps, offset,
                     BLOCK_N: tl.constexpr, ROWS: tl.constexpr, IS_RMS: tl.constexpr, HAS_RES: tl.constexpr,
                     HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    """One pass, whole rows in registers: x, r, y, h ``[n_rows, n_cols]`` (unit column stride, own row
    strides), w, b ``[n_cols]``, mean, rstd fp32 ``[n_rows]``; ROWS rows per program, BLOCK_N =
    next_pow2(n_cols). Formulas in the module docstring.
    """
    i_r = tl.program_id(0)
    o_r = i_r * ROWS + tl.arange(0, ROWS)
    o_n = tl.arange(0, BLOCK_N)
    m_n = o_n < n_cols
    m_r = o_r < n_rows
    m_t = m_r[:, None] & m_n[None, :]
    # the last program's padding rows re-read the last row (never stored); int64: rows · stride > 2^31
    o_r64 = tl.minimum(o_r, n_rows - 1).to(tl.int64)
    m_ld = m_n[None, :]
    b_h = load_input(p_x + o_r64[:, None] * stride_x + o_n[None, :], p_r + o_r64[:, None] * stride_r + o_n[None, :],
                     p_h + o_r64[:, None] * stride_h + o_n[None, :], m_ld, m_t, HAS_RES, True)
    b_mean, b_rstd = row_stats(b_h, m_n, n_cols, eps, IS_RMS)
    b_y = _normalize(b_h, b_mean, b_rstd, p_w, p_b, o_n, m_n, offset, HAS_W, HAS_B)
    tl.store(p_y + o_r64[:, None] * stride_y + o_n[None, :], b_y.to(p_y.dtype.element_ty), mask=m_t)
    if not IS_RMS:
        tl.store(p_mean + o_r, b_mean, mask=m_r)
    tl.store(p_rstd + o_r, b_rstd, mask=m_r)


@triton.jit
def _looped_moments(p_xr, p_rr, p_hr, n_cols, b_inv, TILE: tl.constexpr, IS_RMS: tl.constexpr,
                    HAS_RES: tl.constexpr, SCALED: tl.constexpr):
    """``(mean, var)`` ``[1]`` of one row's ``h`` (times ``b_inv`` when SCALED), streamed TILE columns a
    step: Σh² per lane for RMSNorm (mean 0); per-lane Welford (mean, M2) of h − k for LayerNorm (k: the
    first tile's mean), merged across lanes at the end (``_welford_combine``), because E[h²] − μ² in fp32
    loses the variance when |μ| ≫ σ. With HAS_RES, h = x + r is formed and stored (read it back from
    ``p_hr`` afterwards); the row pointers are ``[1, 1]``-shaped blocks' bases."""
    o_t = tl.arange(0, TILE)
    b_k = tl.zeros([1], dtype=tl.float32)
    if not IS_RMS:
        # LN: Welford runs on h − k, k = the first tile's mean, so the running means are O(σ), not O(μ):
        # their rounding errors scale with what they hold (at μ = 100σ, unshifted, 10× torch's error)
        m_0 = (o_t < n_cols)[None, :]
        b_h0 = load_input(p_xr + o_t[None, :], p_rr + o_t[None, :], p_hr + o_t[None, :], m_0, m_0, HAS_RES, False)
        if SCALED:
            b_h0 = b_h0 * b_inv[:, None]
        b_k = tl.sum(b_h0, axis=1) / tl.minimum(n_cols, TILE)
    b_a = tl.zeros([1, TILE], dtype=tl.float32)   # RMS: Σh²; LN: running mean of h − k per lane
    b_m2 = tl.zeros([1, TILE], dtype=tl.float32)  # LN: Σ(h − mean)² per lane
    for i_t in range(0, n_cols, TILE):
        o_n = i_t + o_t
        m = (o_n < n_cols)[None, :]
        # keep x in L2 for pass 2 when it is what pass 2 re-reads; with a residual, pass 2 reads h instead
        if HAS_RES:
            b_h = load_input(p_xr + o_n[None, :], p_rr + o_n[None, :], p_hr + o_n[None, :], m, m, HAS_RES, True)
        else:
            b_h = tl.load(p_xr + o_n[None, :], mask=m, other=0.0, eviction_policy="evict_last").to(tl.float32)
        if SCALED:
            b_h = b_h * b_inv[:, None]
        if IS_RMS:
            b_a += b_h * b_h
        else:
            # every lane still in the row has seen i_t // TILE + 1 values: one scalar reciprocal per tile
            b_hk = b_h - b_k[:, None]
            b_d = tl.where(m, b_hk - b_a, 0.0)
            b_a += b_d * (1.0 / (i_t // TILE + 1))
            b_m2 += b_d * (b_hk - b_a)
    if IS_RMS:
        b_mean = b_k
        b_var = tl.sum(b_a, axis=1) / n_cols
    else:
        b_cnt = (n_cols // TILE + (o_t < n_cols % TILE).to(tl.int32)).to(tl.float32)[None, :]
        b_mean, b_m2s, _ = tl.reduce((b_a, b_m2, b_cnt), 1, _welford_combine)
        b_mean += b_k
        b_var = b_m2s / n_cols
    return b_mean, b_var


@triton.jit
def _norm_fwd_looped_kernel(p_x, p_r, p_w, p_b, p_y, p_h, p_mean, p_rstd, n_cols,
                            stride_x, stride_r, stride_y, stride_h, eps, offset,
                            TILE: tl.constexpr, IS_RMS: tl.constexpr, HAS_RES: tl.constexpr,
                            HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    """Rows too long for registers, one row per program, TILE columns per step; same math and shapes as
    ``_norm_fwd_kernel``. Pass 1: statistics (and h stored), ``_looped_moments``. Only if they overflowed
    (|h| near 1e20), two more reads: max|h|, then the statistics of h scaled by a power of two near it
    (``row_stats`` explains). Pass 2, backwards (L2-fresh tiles first): y from h re-read (x, or the h just
    stored — a CTA barrier makes those writes visible).
    """
    i_r = tl.program_id(0)
    o_r = (i_r + tl.arange(0, 1)).to(tl.int64)  # [1]: the helpers work on [rows, cols] blocks
    o_t = tl.arange(0, TILE)
    p_xr = p_x + o_r[:, None] * stride_x
    p_rr = p_r + o_r[:, None] * stride_r
    p_hr = p_h + o_r[:, None] * stride_h
    p_yr = p_y + o_r[:, None] * stride_y
    p_sr = p_hr if HAS_RES else p_xr  # where h is read back from

    b_one = tl.full([1], 1.0, dtype=tl.float32)
    b_mean, b_var = _looped_moments(p_xr, p_rr, p_hr, n_cols, b_one, TILE, IS_RMS, HAS_RES, False)
    b_rstd = tl.rsqrt(b_var + eps)
    if HAS_RES:
        tl.debug_barrier()  # h written by other threads of this program must be visible before it is re-read
    if overflowed(b_var):
        b_amax = tl.zeros([1, TILE], dtype=tl.float32)
        for i_t in range(0, n_cols, TILE):
            o_n = i_t + o_t
            b_h = tl.load(p_sr + o_n[None, :], mask=(o_n < n_cols)[None, :], other=0.0).to(tl.float32)
            b_amax = tl.maximum(b_amax, tl.abs(b_h))
        b_c, b_inv = pow2_scale(tl.max(b_amax, axis=1))
        b_mean_s, b_var_s = _looped_moments(p_sr, p_sr, p_sr, n_cols, b_inv, TILE, IS_RMS, False, True)
        b_mean, b_rstd = unscale_stats(b_mean_s, b_var_s, b_c, b_inv, eps)
    if not IS_RMS:
        tl.store(p_mean + o_r, b_mean)
    tl.store(p_rstd + o_r, b_rstd)

    o_last = (n_cols - 1) // TILE * TILE  # first column of the last tile
    for i_k in range(0, n_cols, TILE):
        o_n = (o_last - i_k) + o_t
        m_n = o_n < n_cols
        m = m_n[None, :]
        b_h = tl.load(p_sr + o_n[None, :], mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32)
        b_y = _normalize(b_h, b_mean, b_rstd, p_w, p_b, o_n, m_n, offset, HAS_W, HAS_B)
        # streamed past L2 (.cs) so the writes do not evict rows other programs still have to re-read
        tl.store(p_yr + o_n[None, :], b_y.to(p_y.dtype.element_ty), mask=m, cache_modifier=".cs")


# ---------------------------------------------------------------------------------------------- launchers


def unit_stride(t: torch.Tensor | None) -> torch.Tensor | None:
    """``t`` itself when its elements are adjacent (a no-op for parameters), else a contiguous copy."""
    return t if t is None or t.is_contiguous() else t.contiguous()


@cached_plan
def _plan(n_rows: int, n_cols: int) -> tuple[bool, tuple[int, ...], dict[str, int]]:
    """``(looped, grid, launch options)``; cached, host time is most of a small call's cost."""
    limit = INTERPRETER_ONE_PASS_MAX_COLS if interpreter_active() else FWD_ONE_PASS_MAX_COLS
    if n_cols > limit:
        if interpreter_active():
            return True, (n_rows,), {"TILE": INTERPRETER_TILE, "num_warps": 1}
        return True, (n_rows,), {"TILE": LOOP_FWD_TILE, "num_warps": LOOP_FWD_WARPS}
    cfg = row_launch(n_cols, n_rows)
    return False, (cdiv(n_rows, cfg.ROWS),), {"BLOCK_N": cfg.BLOCK_N, "ROWS": cfg.ROWS,
                                               "num_warps": cfg.num_warps}


def _forced_launch(plan: dict, n_rows: int, n_cols: int) -> tuple[bool, tuple[int, ...], dict[str, int]]:
    """``_plan``'s answer for a forced plan (:data:`FORCED_PLAN`), its knobs checked first: a bad knob is a
    ``ValueError`` naming it, not a compile error deep in Triton."""
    looped = plan.get("LOOPED", False)
    knobs = ("TILE", "num_warps") if looped else ("ROWS", "num_warps")
    unknown = sorted(set(plan) - {"LOOPED", *knobs})
    if unknown or any(k not in plan for k in knobs):
        raise ValueError(f"plan: a {'looped' if looped else 'one-pass'} plan takes LOOPED, {', '.join(knobs)}; "
                         f"got {sorted(plan)}")
    bad = {k: plan[k] for k in knobs if not (isinstance(plan[k], int) and plan[k] > 0 and plan[k] & (plan[k] - 1) == 0)}
    if bad:
        raise ValueError(f"plan: {', '.join(knobs)} must be positive powers of two, got {bad}")
    if looped:
        return True, (n_rows,), {"TILE": plan["TILE"], "num_warps": plan["num_warps"]}
    if n_cols > FWD_ONE_PASS_MAX_COLS:
        raise ValueError(f"plan: the one-pass kernel holds rows of at most {FWD_ONE_PASS_MAX_COLS} columns in "
                         f"registers; rows of {n_cols} need the looped kernel (LOOPED: True)")
    rows = plan["ROWS"]
    return False, (cdiv(n_rows, rows),), {"BLOCK_N": next_pow2(n_cols), "ROWS": rows, "num_warps": plan["num_warps"]}


def norm_fwd(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor | None,
             bias: torch.Tensor | None, *, eps: float, offset: float,
             rms: bool) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Launch the forward on ``x [..., n]`` (any row stride): returns ``(y, h, stats)``.

    ``y`` and ``h = x + residual`` (None without a residual) are contiguous in ``x``'s dtype; ``stats`` is
    fp32 ``[1, rows]`` (rstd, RMSNorm) or ``[2, rows]`` (mean, rstd, LayerNorm).
    A plan forced in :data:`FORCED_PLAN` replaces the op's own (``_plan``).
    """
    # the kernels index weight and bias with unit stride: a strided view (w[::2]) is copied on purpose
    weight, bias = unit_stride(weight), unit_stride(bias)
    x2 = as_rows(x)
    n_rows, n_cols = x2.shape
    y = empty_like(x)
    y2 = y.view(n_rows, n_cols)
    h = h2 = None
    r2 = x2  # placeholders for absent operands: never read (constexpr flags), keep one argument list
    if residual is not None:
        r2 = as_rows(residual)
        h = empty_like(x)
        h2 = h.view(n_rows, n_cols)
    stats = empty((1 if rms else 2, n_rows), dtype=torch.float32, device=x.device)
    forced = FORCED_PLAN.get()
    looped, grid, opts = _plan(n_rows, n_cols) if forced is None else _forced_launch(forced, n_rows, n_cols)
    # mean and rstd pointers: row 0 of stats is stats itself (no indexing, ~1 µs of host time a view)
    args = (x2, r2, weight if weight is not None else x2, bias if bias is not None else x2, y2,
            h2 if h2 is not None else y2, stats, stats if rms else stats[1])
    strides = (x2.stride(0), r2.stride(0), n_cols, n_cols)
    flags = {"IS_RMS": rms, "HAS_RES": residual is not None, "HAS_W": weight is not None,
             "HAS_B": bias is not None, **opts}
    if looped:
        launch(_norm_fwd_looped_kernel, grid, *args, n_cols, *strides, eps, offset, **flags)
    else:
        launch(_norm_fwd_kernel, grid, *args, n_rows, n_cols, *strides, eps, offset, **flags)
    return y, h, stats
