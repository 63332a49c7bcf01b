"""Backward kernels of LayerNorm and RMSNorm (``IS_RMS``), with deterministic weight/bias gradients.

From the saved ``h`` (x, or x + residual), ``mean`` and ``rstd`` (fp32 ``[rows]``), per row, with
``x̂ = (h − μ)·rstd`` and ``g = dy·(offset + w)`` (``g = dy`` without a weight):

    dh = rstd · (g − x̂·mean(g·x̂) − mean(g))        (RMSNorm: μ = 0 and no mean(g) term)
    dx = dh + dh_out        (dh_out: the gradient of the returned residual stream; with a residual,
                             x and residual both receive dx, since h = x + residual)
    dw = Σ_rows dy·x̂,   db = Σ_rows dy

The weight/bias sums never use atomics: a persistent grid of ``programs`` programs walks the row blocks
(program p takes blocks p, p + programs, …), each accumulating its own fp32 partial ``[hidden]`` in
registers, written to a ``[programs, hidden]`` buffer that a second tiny kernel sums in a fixed order — so
repeated runs agree bit for bit.

Rows up to :data:`BWD_ONE_PASS_MAX_COLS` are held whole (the two row sums come from registers). Longer rows
are *split*: a looped kernel computes the two row sums first (one pass over dy and h), then the main
kernel runs on column chunks (a 2-D grid: programs × chunks) with the sums read back — two reads of dy and
h instead of one, but no row and no ``[hidden]`` accumulator has to fit in registers.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelworks.ops.norm.forward import INTERPRETER_ONE_PASS_MAX_COLS, INTERPRETER_TILE, unit_stride, weight_scale
from kernelworks.runtime.alloc import empty, empty_like
from kernelworks.runtime.device import interpreter_active, sm_count
from kernelworks.runtime.launch import MAX_FUSED_ROW_BYTES, cached_plan, cdiv, launch, row_launch
from kernelworks.runtime.layout import as_rows

BWD_ONE_PASS_MAX_COLS = MAX_FUSED_ROW_BYTES // 8
"""Longest row (16384) the backward holds whole. Half the forward's limit: per row it keeps dy, x̂ and
g = dy·w live, plus the dw (and db) accumulators across rows — at 16384 columns over 16 warps about 4 × 32
registers a thread, the budget softmax's one-pass backward (2 × 64) runs at without spilling."""
BWD_CHUNK = 8192
"""Column chunk of the split backward (rows past BWD_ONE_PASS_MAX_COLS)."""
ROWSUM_TILE, ROWSUM_WARPS = 8192, 16
"""The split backward's row-sum kernel: columns per step and warps."""
PROGRAMS_PER_SM = 2
"""Persistent backward grid: programs per SM (capped by the number of row blocks). Two rather than one so
that a program waiting on its last loads overlaps another's; to be tuned on the GPU."""
PREFETCH_MAX_VALUES = 64
"""Prefetch the next row block only while the fp32 values a thread keeps live across blocks fit this
budget: (prefetched row streams dy, h (+ dh) + dw (+ db) accumulators) × elements per thread. sm_90
compile (``kw inspect``), 8192 columns on 16 warps (16 elements a thread): RMSNorm + residual, 4 streams
= 64 values, 118 registers, no spill; LayerNorm + residual, 5 streams = 80 values, spilled 56 bytes with
the prefetch (measured 56% of copy on the H100 at 16384 × 8192) and none without it."""
REDUCE_BLOCK_P, REDUCE_BLOCK_N = 16, 256
"""The partial-sum reduction: partial rows per step and columns per program."""

# Interpreter (CPU tests): tiny row blocks and 3 programs, so the persistent loop takes several row blocks
# per program and the padding rows of a block occur; the split path runs past 512 columns, in 256-column
# chunks (hidden 1000 has a masked last chunk).
_INTERPRETER_PROGRAMS = 3
_INTERPRETER_MIN_ELEMS = 32
_INTERPRETER_CHUNK = 256


# ------------------------------------------------------------------------------------------------ kernels


@triton.jit
def _xhat_g(b_dy, b_h, b_mean, b_rstd, p_w, o_n, m_n, offset, HAS_W: tl.constexpr):
    """``(x̂, g) = ((h − μ)·rstd, dy·(offset + w))`` for a row block ``[R, C]``; shared by both backward
    kernels (μ = 0 for RMSNorm: its mean pointer is never read, the caller passes zeros)."""
    b_xhat = (b_h - b_mean[:, None]) * b_rstd[:, None]
    return b_xhat, weight_scale(b_dy, p_w, o_n, m_n, offset, HAS_W)


@triton.jit
def _load_block(p_dy, p_dh, p_h, p_mean, p_rstd, p_c1, p_c2, i_b, o_n, m_n, n_rows, stride_dy, stride_dh,
                stride_h, ROWS: tl.constexpr, IS_RMS: tl.constexpr, HAS_DH: tl.constexpr, SPLIT: tl.constexpr):
    """What ``_norm_bwd_kernel`` reads for row block ``i_b``: ``(dy, h, dh)`` ``[ROWS, C]`` in their
    storage dtypes (dh only when HAS_DH, else dy stands in) and ``(mean, rstd, c1, c2)`` fp32 ``[ROWS]``
    (zeros when absent). A block past the last row loads nothing (all masked): the prefetch after the last
    block is free."""
    o_r = i_b * ROWS + tl.arange(0, ROWS)
    m_r = o_r < n_rows
    m_t = m_r[:, None] & m_n[None, :]
    o_r64 = o_r.to(tl.int64)  # rows · stride can pass 2^31
    # padding rows load dy = 0, so they add nothing to the partials (and their dx is never stored)
    b_dy = tl.load(p_dy + o_r64[:, None] * stride_dy + o_n[None, :], mask=m_t, other=0.0)
    b_h = tl.load(p_h + o_r64[:, None] * stride_h + o_n[None, :], mask=m_t, other=0.0)
    b_dh = b_dy
    if HAS_DH:
        b_dh = tl.load(p_dh + o_r64[:, None] * stride_dh + o_n[None, :], mask=m_t, other=0.0)
    b_zero = tl.zeros([ROWS], dtype=tl.float32)
    b_rstd = tl.load(p_rstd + o_r, mask=m_r, other=0.0)
    b_mean = b_zero if IS_RMS else tl.load(p_mean + o_r, mask=m_r, other=0.0)
    b_c1, b_c2 = b_zero, b_zero
    if SPLIT:
        b_c1 = tl.load(p_c1 + o_r, mask=m_r, other=0.0)
        if not IS_RMS:
            b_c2 = tl.load(p_c2 + o_r, mask=m_r, other=0.0)
    return b_dy, b_h, b_dh, b_mean, b_rstd, b_c1, b_c2


@triton.jit
def _norm_bwd_kernel(p_dy, p_dh, p_h, p_w, p_mean, p_rstd, p_c1, p_c2, p_dx, p_pw, p_pb,
                     n_rows, n_cols, stride_dy, stride_dh, stride_h, stride_dx, offset,
                     BLOCK_N: tl.constexpr, ROWS: tl.constexpr, IS_RMS: tl.constexpr, HAS_DH: tl.constexpr,
                     HAS_W: tl.constexpr, NEED_DW: tl.constexpr, NEED_DB: tl.constexpr, SPLIT: tl.constexpr,
                     PREFETCH: tl.constexpr):
    """dx and per-program partial dw/db. dy, dh, h, dx: ``[n_rows, n_cols]`` (own row strides); w
    ``[n_cols]``; mean, rstd, c1, c2: fp32 ``[n_rows]``; partials pw, pb: fp32 ``[programs, n_cols]``.

    Grid ``(programs, chunks)``: program (p, c) takes columns ``[c·BLOCK_N, (c+1)·BLOCK_N)`` of row blocks
    p, p + programs, … (ROWS rows each). Unsplit (one chunk, the whole row): the row sums
    c1 = mean(g·x̂), c2 = mean(g) come from registers. SPLIT: read from c1, c2 (``_norm_bwd_rowsum_kernel``).
    Then dx = rstd·(g − x̂·c1 − c2) (+ dh), and the partials accumulate dy·x̂ and dy.

    PREFETCH: the next block's loads are issued before this block's math. The dw/db accumulators cost
    registers that leave room for one or two programs per SM at hidden 4096-8192, and each block's
    reductions serialise load → sum → store; without the prefetch an SM has one or two rows in flight
    and waits out the DRAM latency on every row. (Off where the row already fills the registers.)
    """
    i_p, i_c = tl.program_id(0), tl.program_id(1)
    n_prog = tl.num_programs(0)
    o_n = i_c * BLOCK_N + tl.arange(0, BLOCK_N)
    m_n = o_n < n_cols
    b_dw = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    b_db = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    if PREFETCH:
        nxt = _load_block(p_dy, p_dh, p_h, p_mean, p_rstd, p_c1, p_c2, i_p, o_n, m_n, n_rows,
                          stride_dy, stride_dh, stride_h, ROWS, IS_RMS, HAS_DH, SPLIT)
    for i_b in range(i_p, tl.cdiv(n_rows, ROWS), n_prog):
        o_r = i_b * ROWS + tl.arange(0, ROWS)
        m_t = (o_r < n_rows)[:, None] & m_n[None, :]
        o_r64 = o_r.to(tl.int64)
        if PREFETCH:
            b_dy, b_h, b_dh, b_mean, b_rstd, b_c1, b_c2 = nxt
            nxt = _load_block(p_dy, p_dh, p_h, p_mean, p_rstd, p_c1, p_c2, i_b + n_prog, o_n, m_n, n_rows,
                              stride_dy, stride_dh, stride_h, ROWS, IS_RMS, HAS_DH, SPLIT)
        else:
            # dh is loaded where it is added (below): held through the math it would cost registers
            b_dy, b_h, b_dh, b_mean, b_rstd, b_c1, b_c2 = _load_block(
                p_dy, p_dh, p_h, p_mean, p_rstd, p_c1, p_c2, i_b, o_n, m_n, n_rows,
                stride_dy, stride_dh, stride_h, ROWS, IS_RMS, False, SPLIT)
        b_dy = b_dy.to(tl.float32)
        b_xhat, b_g = _xhat_g(b_dy, b_h.to(tl.float32), b_mean, b_rstd, p_w, o_n, m_n, offset, HAS_W)
        if not SPLIT:
            # g is 0 in masked lanes (dy is), so the sums need no extra mask
            b_c1 = tl.sum(b_g * b_xhat, axis=1) / n_cols
            if not IS_RMS:
                b_c2 = tl.sum(b_g, axis=1) / n_cols
        b_dx = (b_g - b_xhat * b_c1[:, None] - b_c2[:, None]) * b_rstd[:, None]  # c2 = 0 for RMSNorm
        if HAS_DH:
            if not PREFETCH:
                b_dh = tl.load(p_dh + o_r64[:, None] * stride_dh + o_n[None, :], mask=m_t, other=0.0)
            b_dx += b_dh.to(tl.float32)
        tl.store(p_dx + o_r64[:, None] * stride_dx + o_n[None, :], b_dx.to(p_dx.dtype.element_ty), mask=m_t)
        if NEED_DW:
            b_dw += b_dy * b_xhat
        if NEED_DB:
            b_db += b_dy
    o_p = i_p.to(tl.int64) * n_cols + o_n
    if NEED_DW:
        tl.store(p_pw + o_p, tl.sum(b_dw, axis=0), mask=m_n)
    if NEED_DB:
        tl.store(p_pb + o_p, tl.sum(b_db, axis=0), mask=m_n)


@triton.jit
def _norm_bwd_rowsum_kernel(p_dy, p_h, p_w, p_mean, p_rstd, p_c1, p_c2, n_cols, stride_dy, stride_h, offset,
                            TILE: tl.constexpr, IS_RMS: tl.constexpr, HAS_W: tl.constexpr):
    """The split backward's row sums, one row per program, TILE columns per step:
    c1 = mean(g·x̂), c2 = mean(g) (fp32 ``[n_rows]`` each; c2 unused by RMSNorm and not written)."""
    i_r = tl.program_id(0)
    o_r = (i_r + tl.arange(0, 1)).to(tl.int64)  # [1]: the helpers work on [rows, cols] blocks
    o_t = tl.arange(0, TILE)
    b_rstd = tl.load(p_rstd + o_r)
    b_mean = tl.zeros([1], dtype=tl.float32) if IS_RMS else tl.load(p_mean + o_r)
    b_s1 = tl.zeros([1, TILE], dtype=tl.float32)
    b_s2 = tl.zeros([1, TILE], dtype=tl.float32)
    for i_t in range(0, n_cols, TILE):
        o_n = i_t + o_t
        m_n = o_n < n_cols
        m = m_n[None, :]
        b_dy = tl.load(p_dy + o_r[:, None] * stride_dy + o_n[None, :], mask=m, other=0.0).to(tl.float32)
        b_h = tl.load(p_h + o_r[:, None] * stride_h + o_n[None, :], mask=m, other=0.0).to(tl.float32)
        b_xhat, b_g = _xhat_g(b_dy, b_h, b_mean, b_rstd, p_w, o_n, m_n, offset, HAS_W)
        b_s1 += b_g * b_xhat
        b_s2 += b_g
    tl.store(p_c1 + o_r, tl.sum(b_s1, axis=1) / n_cols)
    if not IS_RMS:
        tl.store(p_c2 + o_r, tl.sum(b_s2, axis=1) / n_cols)


@triton.jit
def _norm_bwd_reduce_kernel(p_part, p_out0, p_out1, n_part, n_cols,
                            BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    """``out_a[n] = Σ_p part[a, p, n]`` for partials ``part`` fp32 ``[outputs, n_part, n_cols]``; the sum
    runs in a fixed order (deterministic). Grid ``(cdiv(n_cols, BLOCK_N), outputs)``: axis 1 picks the
    output (0: out0, 1: out1), each stored in its own dtype."""
    i_c, i_a = tl.program_id(0), tl.program_id(1)
    o_n = i_c * BLOCK_N + tl.arange(0, BLOCK_N)
    m_n = o_n < n_cols
    # the launcher allocates the partials contiguous: n_cols is their row stride
    p_part += i_a.to(tl.int64) * n_part * n_cols  # noqa: KW008
    b_acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    for i_p in range(0, n_part, BLOCK_P):
        o_p = (i_p + tl.arange(0, BLOCK_P)).to(tl.int64)
        m = (o_p < n_part)[:, None] & m_n[None, :]
        b_acc += tl.load(p_part + o_p[:, None] * n_cols + o_n[None, :], mask=m, other=0.0)  # noqa: KW008
    b_sum = tl.sum(b_acc, axis=0)
    if i_a == 0:
        tl.store(p_out0 + o_n, b_sum.to(p_out0.dtype.element_ty), mask=m_n)
    else:
        tl.store(p_out1 + o_n, b_sum.to(p_out1.dtype.element_ty), mask=m_n)


# ---------------------------------------------------------------------------------------------- launchers


@cached_plan
def _plan(n_rows: int, n_cols: int, device_index: int, streams: int = 4) -> tuple[bool, tuple[int, int],
                                                                                dict[str, int]]:
    """``(split, grid, options)`` of the main backward kernel; cached per shape. ``streams``: row-sized fp32
    vectors a program keeps live across row blocks when prefetching (see :data:`PREFETCH_MAX_VALUES`)."""
    interp = interpreter_active()
    limit = INTERPRETER_ONE_PASS_MAX_COLS if interp else BWD_ONE_PASS_MAX_COLS
    split = n_cols > limit
    width = (_INTERPRETER_CHUNK if interp else BWD_CHUNK) if split else n_cols
    cfg = row_launch(width, n_rows, **({"min_elems": _INTERPRETER_MIN_ELEMS} if interp else {}))
    chunks = cdiv(n_cols, cfg.BLOCK_N)
    target = _INTERPRETER_PROGRAMS if interp else PROGRAMS_PER_SM * sm_count(device_index)
    programs = max(1, min(cdiv(n_rows, cfg.ROWS), cdiv(target, chunks)))
    prefetch = streams * cfg.BLOCK_N * cfg.ROWS <= PREFETCH_MAX_VALUES * cfg.num_warps * 32
    return split, (programs, chunks), {"BLOCK_N": cfg.BLOCK_N, "ROWS": cfg.ROWS, "PREFETCH": prefetch,
                                       "num_warps": cfg.num_warps}


def norm_bwd(dy: torch.Tensor, dh: torch.Tensor | None, h: torch.Tensor, weight: torch.Tensor | None,
             stats: torch.Tensor, *, offset: float, rms: bool, dw_dtype: torch.dtype | None,
             db_dtype: torch.dtype | None) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Launch the backward: returns ``(dx, dw, db)``.

    ``h`` is the normalised input (x, or x + residual) and ``stats`` the forward's (``norm_fwd``); ``dh``
    the gradient of the returned residual stream (None: none). ``dw``/``db`` are computed (in
    ``dw_dtype``/``db_dtype``) only when a dtype is given, else None. ``dx`` is contiguous in h's dtype.
    """
    weight = unit_stride(weight)  # see norm_fwd
    dy2, h2 = as_rows(dy), as_rows(h)
    n_rows, n_cols = h2.shape
    dh2 = as_rows(dh) if dh is not None else dy2
    dx = empty_like(h)
    dx2 = dx.view(n_rows, n_cols)
    mean, rstd = stats[0], stats[-1]
    w = weight if weight is not None else h2
    need = [d for d in (dw_dtype, db_dtype) if d is not None]
    streams = 2 + (dh is not None) + len(need)
    split, grid, opts = _plan(n_rows, n_cols, h.device.index or 0, streams)
    programs = grid[0]
    part = empty((max(len(need), 1), programs, n_cols), dtype=torch.float32, device=h.device) if need else stats
    c = stats
    if split:
        c = empty((2, n_rows), dtype=torch.float32, device=h.device)
        tile = INTERPRETER_TILE if interpreter_active() else ROWSUM_TILE
        warps = 1 if interpreter_active() else ROWSUM_WARPS
        launch(_norm_bwd_rowsum_kernel, (n_rows,), dy2, h2, w, mean, rstd, c[0], c[1], n_cols, dy2.stride(0),
               h2.stride(0), offset, num_warps=warps, TILE=tile, IS_RMS=rms, HAS_W=weight is not None)
    launch(_norm_bwd_kernel, grid, dy2, dh2, h2, w, mean, rstd, c[0], c[-1], dx2, part[0], part[-1],
           n_rows, n_cols, dy2.stride(0), dh2.stride(0), h2.stride(0), n_cols, offset,
           IS_RMS=rms, HAS_DH=dh is not None, HAS_W=weight is not None, NEED_DW=dw_dtype is not None,
           NEED_DB=db_dtype is not None, SPLIT=split, **opts)
    outs = [empty((n_cols,), dtype=d, device=h.device) for d in need]
    if outs:
        # interpreter: 2 partial rows a step, so its 3 programs' partials take a loop with a masked tail
        block_p = 2 if interpreter_active() else REDUCE_BLOCK_P
        launch(_norm_bwd_reduce_kernel, (cdiv(n_cols, REDUCE_BLOCK_N), len(outs)), part, outs[0], outs[-1],
               programs, n_cols, num_warps=4, BLOCK_P=block_p, BLOCK_N=REDUCE_BLOCK_N)
    dw = outs[0] if dw_dtype is not None else None
    db = outs[-1] if db_dtype is not None else None
    return dx, dw, db

