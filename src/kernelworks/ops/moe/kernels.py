"""Triton kernels that move a mixture-of-experts layer's rows between token order and expert order.

A layer routes each of ``T`` tokens to ``top_k`` experts: ``P = T·top_k`` (token, slot) *pairs*, pair
``p = t·top_k + k``. Sorted by expert, pair ``order[i]`` sits at sorted position ``i``, and
``inverse[order[i]] = i``. Three row kernels, each one pass over the ``[P, H]`` rows:

- :func:`_gather_rows_kernel` — ``out[i] = src[order[i] // top_k]``: the tokens in expert order (the
  permutation's forward).
- :func:`_sum_pairs_kernel` — ``out[t] = Σ_k w[t, k] · src[inverse[t·top_k + k]]``: each token's rows summed
  back, weighted (the combine's forward) or not (the permutation's backward). The ``top_k`` rows' loads are
  independent, so they are in flight together; fp32 sums in slot order, one rounding at the store.
- :func:`_scale_rows_kernel` — the combine's backward: ``dy[i] = w[p] · dout[p // top_k]`` and
  ``dw[p] = ⟨dout[p // top_k], y[i]⟩`` for ``p = order[i]``, one program a row (the dot needs the whole row).

None of them writes a row twice or sums with atomics, so results are deterministic. Index values are trusted
for nothing: a position or pair outside ``[0, P)`` reads as a zero row and writes nothing outside the
outputs (``kernelworks.validation()`` reports it instead).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelworks.runtime.alloc import empty
from kernelworks.runtime.device import interpreter_active
from kernelworks.runtime.launch import cached_plan, cdiv, launch, next_pow2


@triton.jit
def _gather_rows_kernel(p_src, p_order, p_out, n_pairs, top_k, width,
                        s_src, s_src_h, s_order, s_out, s_out_h, BLOCK: tl.constexpr):
    """One ``BLOCK``-wide piece of sorted row ``i``: ``out[i] = src[order[i] // top_k]`` (zeros where the
    pair is out of range)."""
    i = tl.program_id(0).to(tl.int64)
    o_h = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m_h = o_h < width
    pair = tl.load(p_order + i * s_order).to(tl.int64)
    valid = (pair >= 0) & (pair < n_pairs)
    token = tl.where(valid, pair, 0) // top_k
    row = tl.load(p_src + token * s_src + o_h * s_src_h, mask=m_h & valid, other=0)
    tl.store(p_out + i * s_out + o_h * s_out_h, row, mask=m_h)


@triton.jit
def _sum_pairs_kernel(p_src, p_inverse, p_w, p_out, n_pairs, top_k, width,
                      s_src, s_src_h, s_inv, s_wt, s_wk, s_out, s_out_h,
                      WEIGHTED: tl.constexpr, K_POW2: tl.constexpr, BLOCK: tl.constexpr):
    """One ``BLOCK``-wide piece of token ``t``'s output: ``Σ_k w[t, k] · src[inverse[t·top_k + k]]``
    (``w ≡ 1`` unless ``WEIGHTED``), summed in fp32 in slot order.

    The slots are an unrolled loop into one ``[BLOCK]`` accumulator, each thread summing its own columns:
    their loads are independent, so they are in flight together, and no sum crosses threads. (A ``[K, BLOCK]``
    tile summed over its first axis put the slots on different warps and reduced them through shared memory:
    1.6 TB/s on an H200, where the gather kernel moves the same rows at 2.6.)"""
    t = tl.program_id(0).to(tl.int64)
    o_h = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m_h = o_h < width
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k in tl.static_range(K_POW2):
        m_k = k < top_k
        pos = tl.load(p_inverse + (t * top_k + k) * s_inv, mask=m_k, other=-1).to(tl.int64)
        valid = m_k & (pos >= 0) & (pos < n_pairs)
        row = tl.load(p_src + tl.where(valid, pos, 0) * s_src + o_h * s_src_h, mask=valid & m_h,
                      other=0).to(tl.float32)
        if WEIGHTED:
            row *= tl.load(p_w + t * s_wt + k * s_wk, mask=valid, other=0).to(tl.float32)
        acc += row
    tl.store(p_out + t * s_out + o_h * s_out_h, acc.to(p_out.dtype.element_ty), mask=m_h)


@triton.jit
def _scale_rows_kernel(p_dout, p_y, p_order, p_w, p_dy, p_dw, n_pairs, top_k, width,
                       s_dout, s_dout_h, s_y, s_y_h, s_order, s_wt, s_wk, s_dy, s_dy_h, s_dwt, s_dwk,
                       NEED_DY: tl.constexpr, NEED_DW: tl.constexpr, BLOCK: tl.constexpr):
    """Sorted row ``i`` of the weighted combine's backward (pair ``p = order[i]``, token ``t = p // top_k``,
    slot ``k``): ``dy[i] = w[t, k] · dout[t]`` and ``dw[t, k] = ⟨dout[t], y[i]⟩``. An out-of-range pair
    gives ``dy[i] = 0`` and writes no ``dw``."""
    i = tl.program_id(0).to(tl.int64)
    pair = tl.load(p_order + i * s_order).to(tl.int64)
    valid = (pair >= 0) & (pair < n_pairs)
    pair = tl.where(valid, pair, 0)
    t, k = pair // top_k, pair % top_k
    w = tl.load(p_w + t * s_wt + k * s_wk, mask=valid, other=0).to(tl.float32)
    dot = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, width, BLOCK):
        o_h = start + tl.arange(0, BLOCK)
        m_h = o_h < width
        g = tl.load(p_dout + t * s_dout + o_h * s_dout_h, mask=m_h & valid, other=0).to(tl.float32)
        if NEED_DY:
            tl.store(p_dy + i * s_dy + o_h * s_dy_h, (g * w).to(p_dy.dtype.element_ty), mask=m_h)
        if NEED_DW:
            y = tl.load(p_y + i * s_y + o_h * s_y_h, mask=m_h & valid, other=0).to(tl.float32)
            dot += g * y
    if NEED_DW:
        tl.store(p_dw + t * s_dwt + k * s_dwk, tl.sum(dot, axis=0).to(p_dw.dtype.element_ty), mask=valid)


# ------------------------------------------------------------------------------------------- launchers

@cached_plan
def row_plan(width: int, rows_at_once: int) -> tuple[int, int]:
    """``(BLOCK, num_warps)``: a program covers ``BLOCK`` columns of ``rows_at_once`` rows, at most 8192
    values (32 fp32 registers a thread at 8 warps). Rows of a Qwen3-MoE or Mixtral layer (2048–4096 wide)
    take one or two programs; under the interpreter 32 columns, so tiny test rows take several."""
    if interpreter_active():
        return min(32, next_pow2(width)), 1
    block = min(next_pow2(width), max(128, 8192 // rows_at_once))
    return block, max(1, min(8, block * rows_at_once // 1024))


def gather_rows(src: torch.Tensor, order: torch.Tensor, top_k: int) -> torch.Tensor:
    """``[P, H]`` in ``src``'s dtype: ``src[order[i] // top_k]`` at row ``i`` (``src`` ``[T, H]``)."""
    n_pairs, width = order.shape[0], src.shape[1]
    out = empty((n_pairs, width), dtype=src.dtype, device=src.device)
    if out.numel():
        block, warps = row_plan(width, 1)
        launch(_gather_rows_kernel, (n_pairs, cdiv(width, block)), src, order, out, n_pairs, top_k, width,
               *src.stride(), order.stride(0), *out.stride(), num_warps=warps, BLOCK=block)
    return out


def sum_pairs(src: torch.Tensor, inverse: torch.Tensor, weights: torch.Tensor | None, top_k: int,
              dtype: torch.dtype) -> torch.Tensor:
    """``[T, H]`` in ``dtype``: ``Σ_k w[t, k] · src[inverse[t·top_k + k]]`` (``w ≡ 1`` when ``weights`` is
    None), ``src`` ``[P, H]``."""
    n_pairs, width = inverse.shape[0], src.shape[1]
    tokens = n_pairs // top_k
    out = empty((tokens, width), dtype=dtype, device=src.device)
    if out.numel():
        k_pow2 = next_pow2(top_k)
        block, warps = row_plan(width, 4)  # one accumulator, each slot's row a 16-byte load a thread
        w_strides = weights.stride() if weights is not None else (0, 0)
        launch(_sum_pairs_kernel, (tokens, cdiv(width, block)), src, inverse,
               weights if weights is not None else src, out, n_pairs, top_k, width,
               *src.stride(), inverse.stride(0), *w_strides, *out.stride(), num_warps=warps,
               WEIGHTED=weights is not None, K_POW2=k_pow2, BLOCK=block)
    return out


def scale_rows_backward(dout: torch.Tensor, y: torch.Tensor, order: torch.Tensor, weights: torch.Tensor,
                        need_dy: bool, need_dw: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(dy [P, H] in y's dtype, dw [T, top_k] in weights' dtype)`` of the weighted combine, each None when
    not needed. Every ``dw`` entry is written once where ``order`` is a permutation."""
    n_pairs, width = y.shape
    top_k = weights.shape[1]
    dy = empty((n_pairs, width), dtype=y.dtype, device=y.device) if need_dy else None
    # zeros, not empty: a pair whose sorted position is out of range (bad input) gets a zero gradient, not
    # whatever the memory held; T·top_k values, nothing next to the rows
    dw = torch.zeros(tuple(weights.shape), dtype=weights.dtype, device=y.device) if need_dw else None
    if n_pairs and (need_dy or need_dw):
        block, warps = row_plan(width, 1)
        dy_arg, dw_arg = (dy if dy is not None else y), (dw if dw is not None else weights)
        launch(_scale_rows_kernel, (n_pairs,), dout, y, order, weights, dy_arg, dw_arg, n_pairs, top_k, width,
               *dout.stride(), *y.stride(), order.stride(0), *weights.stride(), *dy_arg.stride(),
               *dw_arg.stride(), num_warps=warps, NEED_DY=need_dy, NEED_DW=need_dw, BLOCK=block)
    return dy, dw
