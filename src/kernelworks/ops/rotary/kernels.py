"""Triton kernel for the rotary embedding: one kernel, forward and backward, q and k in one launch.

The rotation pairs feature ``a`` of a head with a partner ``b`` (NeoX: ``b = a + R/2`` for ``a < R/2``;
GPT-J: ``a = 2i``, ``b = 2i + 1``; ``R`` the rotary dim) and, with ``c = cos[token]``, ``s = sin[token]``
read per feature exactly as Hugging Face's ``q·cos + rotate(q)·sin`` reads them::

    y_a = c_a·x_a − s_a·x_b        y_b = c_b·x_b + s_b·x_a        (features ≥ R: y = x)

Its transpose, the backward, is the same map with ``(s_a, s_b) → (−s_b, −s_a)``:
``dx_a = c_a·dy_a + s_b·dy_b``, ``dx_b = c_b·dy_b − s_a·dy_a`` (for HF's tables, where the two halves of
``cos``/``sin`` are equal, a rotation by −θ). So one kernel serves both directions (``TRANSPOSE``).

Grid: ``(tokens, head blocks)``. A program loads its token's ``cos``/``sin`` row once and rotates
``BLOCK_H`` heads of q *and* the same head block of k (masked past each tensor's own head count: GQA), so
the tables cross memory once per token for both tensors. Every tensor is addressed through its four strides
in ``(batch, seq, head, dim)`` order, whatever the public layout (``heads_dim``), which is how strided views
of a fused qkv projection and broadcast (stride-0) tables run with no copy.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelworks.runtime.alloc import empty
from kernelworks.runtime.device import interpreter_active
from kernelworks.runtime.launch import cached_plan, cdiv, launch, next_pow2

LAYOUTS = ("neox", "gptj")
"""Pairings of the rotated features: halves (``i, i + R/2``) or interleaved (``2i, 2i + 1``)."""


# ------------------------------------------------------------------------------------------ device helpers

@triton.jit
def _load_pairs(p_rows, s_d, half, m_rows, ROWS: tl.constexpr, BLOCK_R: tl.constexpr, GPTJ: tl.constexpr):
    """``(x_a, x_b)``, each [ROWS, BLOCK_R] fp32: the two members of every pair of the first ``2·half``
    features of ``ROWS`` rows (``p_rows`` [ROWS, 1] row pointers, ``m_rows`` [ROWS, 1] row mask).

    NeoX: the two halves, two unit-stride loads. GPT-J: one unit-stride load of the ``2·half`` features split
    into even and odd members in registers (two stride-2 loads ran at half speed on an H100).
    """
    if GPTJ:
        o_f = tl.arange(0, 2 * BLOCK_R)
        m = m_rows & (o_f < 2 * half)[None, :]
        b_x = tl.load(p_rows + o_f[None, :] * s_d, mask=m, other=0).to(tl.float32)
        b_a, b_b = tl.split(tl.reshape(b_x, (ROWS, BLOCK_R, 2)))
    else:
        o_r = tl.arange(0, BLOCK_R)
        m = m_rows & (o_r < half)[None, :]
        # Both halves loaded before any math so the two streams overlap.
        b_a = tl.load(p_rows + o_r[None, :] * s_d, mask=m, other=0).to(tl.float32)
        b_b = tl.load(p_rows + (o_r + half)[None, :] * s_d, mask=m, other=0).to(tl.float32)
    return b_a, b_b


@triton.jit
def _store_pairs(p_rows, s_d, half, m_rows, b_a, b_b, ROWS: tl.constexpr, BLOCK_R: tl.constexpr,
                 GPTJ: tl.constexpr):
    """Store the pairs ``(b_a, b_b)`` where :func:`_load_pairs` read them, in ``p_rows``' dtype."""
    dtype = p_rows.dtype.element_ty
    if GPTJ:
        o_f = tl.arange(0, 2 * BLOCK_R)
        b_y = tl.reshape(tl.join(b_a, b_b), (ROWS, 2 * BLOCK_R))
        tl.store(p_rows + o_f[None, :] * s_d, b_y.to(dtype), mask=m_rows & (o_f < 2 * half)[None, :])
    else:
        o_r = tl.arange(0, BLOCK_R)
        m = m_rows & (o_r < half)[None, :]
        tl.store(p_rows + o_r[None, :] * s_d, b_a.to(dtype), mask=m)
        tl.store(p_rows + (o_r + half)[None, :] * s_d, b_b.to(dtype), mask=m)


@triton.jit
def _rotate_heads(p_x, p_y, i_b, i_s, i_hb, n_heads, half, head_dim,
                  s_xb, s_xs, s_xh, s_xd, s_yb, s_ys, s_yh, s_yd,
                  b_ca, b_cb, b_sa, b_sb,
                  GPTJ: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_P: tl.constexpr):
    """Rotate heads ``[i_hb·BLOCK_H, +BLOCK_H)`` of one token of x into y (features past ``2·half`` copied).

    ``b_c*``/``b_s*`` [1, BLOCK_R] are the fp32 table values at the pairs' members. Heads at or past
    ``n_heads`` are masked (no memory touched).
    """
    # int64: head · head-stride passes 2^31 for [batch, heads, seq, dim] tensors at long contexts.
    o_h = (i_hb * BLOCK_H + tl.arange(0, BLOCK_H)).to(tl.int64)
    m_h = (o_h < n_heads)[:, None]
    p_xh = p_x + i_b * s_xb + i_s * s_xs + o_h[:, None] * s_xh
    p_yh = p_y + i_b * s_yb + i_s * s_ys + o_h[:, None] * s_yh
    b_xa, b_xb = _load_pairs(p_xh, s_xd, half, m_h, BLOCK_H, BLOCK_R, GPTJ)
    b_ya = b_xa * b_ca - b_xb * b_sa
    b_yb = b_xb * b_cb + b_xa * b_sb
    _store_pairs(p_yh, s_yd, half, m_h, b_ya, b_yb, BLOCK_H, BLOCK_R, GPTJ)
    if BLOCK_P > 0:  # partial rotary: features [2·half, head_dim) pass through unchanged
        o_p = 2 * half + tl.arange(0, BLOCK_P)
        m_p = m_h & (o_p < head_dim)[None, :]
        b_p = tl.load(p_xh + o_p[None, :] * s_xd, mask=m_p, other=0)
        tl.store(p_yh + o_p[None, :] * s_yd, b_p.to(p_y.dtype.element_ty), mask=m_p)


# ----------------------------------------------------------------------------------------------- kernel

@triton.jit
def _rotary_embedding_kernel(
    p_q, p_k, p_cos, p_sin, p_qo, p_ko,
    seq, n_qh, n_kh, half, head_dim,
    s_qb, s_qs, s_qh, s_qd, s_kb, s_ks, s_kh, s_kd,
    s_qob, s_qos, s_qoh, s_qod, s_kob, s_kos, s_koh, s_kod,
    s_cb, s_cs, s_cd, s_sb, s_ss, s_sd,
    GPTJ: tl.constexpr, TRANSPOSE: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """qo, ko = rotary(q, k) (or its transpose, ``TRANSPOSE``) for one token and one head block.

    q: [B, S, Hq, D], k: [B, S, Hk, D] (by strides), cos/sin: [B, S, R] (batch stride 0 when shared),
    R = 2·half ≤ D. Math in fp32, one rounding at the store; qo/ko in their own dtype.
    """
    i_t = tl.program_id(0).to(tl.int64)  # token = b·S + s; int64: b·stride passes 2^31 on large batches
    i_hb = tl.program_id(1)
    i_b = i_t // seq
    i_s = i_t % seq

    # The tables as one [1, 2·half] row each, read by the same pairing as q and k.
    m_one = tl.full((1, 1), 1, tl.int1)
    b_ca, b_cb = _load_pairs(p_cos + i_b * s_cb + i_s * s_cs + tl.zeros((1, 1), tl.int64), s_cd, half, m_one,
                             1, BLOCK_R, GPTJ)
    b_sa, b_sb = _load_pairs(p_sin + i_b * s_sb + i_s * s_ss + tl.zeros((1, 1), tl.int64), s_sd, half, m_one,
                             1, BLOCK_R, GPTJ)
    if TRANSPOSE:  # the backward: [[c_a, −s_a], [s_b, c_b]]ᵀ = [[c_a, s_b], [−s_a, c_b]]
        b_sa, b_sb = -b_sb, -b_sa

    _rotate_heads(p_q, p_qo, i_b, i_s, i_hb, n_qh, half, head_dim,
                  s_qb, s_qs, s_qh, s_qd, s_qob, s_qos, s_qoh, s_qod,
                  b_ca, b_cb, b_sa, b_sb, GPTJ, BLOCK_H, BLOCK_R, BLOCK_P)
    _rotate_heads(p_k, p_ko, i_b, i_s, i_hb, n_kh, half, head_dim,
                  s_kb, s_ks, s_kh, s_kd, s_kob, s_kos, s_koh, s_kod,
                  b_ca, b_cb, b_sa, b_sb, GPTJ, BLOCK_H, BLOCK_R, BLOCK_P)


# ------------------------------------------------------------------------------------------- launchers

@cached_plan
def _plan(n_heads: int, head_dim: int, rot_dim: int) -> tuple[int, int, int, int]:
    """``(BLOCK_H, BLOCK_R, BLOCK_P, num_warps)``.

    A program holds ``BLOCK_H`` whole heads of q and of k: 4096 features each, one warp per 512 (at most
    8). An H100 sweep (docs/notes/rotary.md: tiles 512–8192, 1–16 warps, the bf16 bench cases) put 4096/8
    warps 2–4% ahead of 2048/4 on Llama-3 8B/70B and GPT-J, within 3% of the best on Qwen3-Next's partial
    rotary (GPT-J's pairs are loaded contiguously: as two stride-2 loads, 4096 ran at half speed). Under
    the interpreter the tile is 256 features, so that small test shapes already take several head blocks.
    """
    tile = 256 if interpreter_active() else 4096
    block_h = max(1, min(next_pow2(n_heads), tile // next_pow2(head_dim)))
    block_p = next_pow2(head_dim - rot_dim) if head_dim > rot_dim else 0
    warps = 1 if interpreter_active() else max(1, min(8, block_h * next_pow2(head_dim) // 512))
    return block_h, next_pow2(rot_dim // 2), block_p, next_pow2(warps)


def memory_order(t: torch.Tensor) -> list[int]:
    """``t``'s dims from the largest stride to the smallest (ties keep their order: an expanded, stride-0
    tensor counts as contiguous)."""
    return sorted(range(t.dim()), key=lambda i: -t.stride(i))


def like_in_memory_order(t: torch.Tensor, new_empty) -> torch.Tensor:
    """A dense tensor shaped like ``t`` whose memory order is ``t``'s (``torch.empty_like``'s rule): HF's
    ``[B, S, H, D]`` projection seen as ``[B, H, S, D]`` gets a rotated output laid out the same way, so
    writes stay contiguous per token and the gradient flowing back through HF's ``transpose``/``view``
    needs no copy. ``new_empty(shape)`` allocates contiguous memory (the real or the fake allocator)."""
    order = memory_order(t)
    out = new_empty([t.shape[i] for i in order])
    return out if order == sorted(order) else out.permute([order.index(i) for i in range(t.dim())])


def _bshd(t: torch.Tensor, heads_dim: int) -> tuple[int, int, int, int]:
    """``t``'s strides in (batch, seq, head, dim) order for a ``[B, H, S, D]`` (heads_dim 1) or
    ``[B, S, H, D]`` (heads_dim 2) tensor."""
    s = t.stride()
    return (s[0], s[2], s[1], s[3]) if heads_dim == 1 else s


def _table_strides(t: torch.Tensor) -> tuple[int, int, int]:
    """(batch, seq, dim) strides of a ``[S, R]``, ``[1, S, R]`` or ``[B, S, R]`` table; batch stride 0
    when the table is shared by the batch."""
    if t.dim() == 2:
        return 0, t.stride(0), t.stride(1)
    return (0 if t.shape[0] == 1 else t.stride(0)), t.stride(1), t.stride(2)


def _rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str,
            heads_dim: int, transpose: bool) -> tuple[torch.Tensor, torch.Tensor]:
    q_out, k_out = (like_in_memory_order(t, lambda shape, t=t: empty(shape, dtype=t.dtype, device=t.device))
                    for t in (q, k))
    batch, seq, head_dim = q.shape[0], q.shape[3 - heads_dim], q.shape[3]
    n_qh, n_kh = q.shape[heads_dim], k.shape[heads_dim]
    rot_dim = cos.shape[-1]
    block_h, block_r, block_p, warps = _plan(max(n_qh, n_kh), head_dim, rot_dim)
    grid = (batch * seq, cdiv(max(n_qh, n_kh), block_h))
    launch(_rotary_embedding_kernel, grid, q, k, cos, sin, q_out, k_out,
           seq, n_qh, n_kh, rot_dim // 2, head_dim,
           *_bshd(q, heads_dim), *_bshd(k, heads_dim), *_bshd(q_out, heads_dim), *_bshd(k_out, heads_dim),
           *_table_strides(cos), *_table_strides(sin),
           num_warps=warps, GPTJ=layout == "gptj", TRANSPOSE=transpose,
           BLOCK_H=block_h, BLOCK_R=block_r, BLOCK_P=block_p)
    return q_out, k_out


def rotary_embedding_fwd(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str,
                         heads_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q_out, k_out)``: q and k rotated (one launch), in their dtypes and memory orders. Shapes as
    :func:`kernelworks.rotary_embedding`; inputs already validated."""
    return _rotary(q, k, cos, sin, layout, heads_dim, transpose=False)


def rotary_embedding_bwd(dq_out: torch.Tensor, dk_out: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         layout: str, heads_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dq, dk)``: the output gradients through the rotation's transpose (one launch), in the gradients'
    memory orders."""
    return _rotary(dq_out, dk_out, cos, sin, layout, heads_dim, transpose=True)
