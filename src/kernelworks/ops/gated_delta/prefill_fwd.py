"""Chunked prefill, forward: one program per (sequence, value head, V-block) walks the chunks in order with
the state in registers, so no per-chunk state ever goes to device memory.

The chunk form (derived in docs/notes/gated_delta.md; checked against the recurrence in the tests). For a
chunk of C tokens starting from state ``S_0`` (``[V, K]``), ``G`` the cumulative log-decay from the chunk
start (``γ = exp(G)``), rows ``k_s``, ``v_s``, ``q_t``; the recurrence is ``S_s = α_s S_{s−1} + u_s k_sᵀ``
with the "new values"

    u_s = w_s v_s − β_s γ_s S_0 k_s − Σ_{r<s} β_s (k_s·k_r) e^{G_s − G_r} u_r

i.e. ``(I + A) U = diag(w) V − diag(βγ) K S_0ᵀ`` with ``A`` strictly lower,
``A_sr = β_s (k_s·k_r) e^{G_s−G_r}``. With ``T = (I + A)⁻¹`` (the UT transform):

    W = T (βγ ⊙ K),  Ũ = T (w ⊙ V),  U = Ũ − W S_0ᵀ
    O = scale · [ (γ ⊙ Q) S_0ᵀ + (Q Kᵀ ⊙ e^{G_t − G_s})_{s ≤ t} U ]
    S_C = γ_C S_0 + Uᵀ (e^{G_C − G} ⊙ K)

Every exponent formed is ≤ 0 for g ≤ 0 (``G_t − G_s`` only where ``t ≥ s``), so nothing overflows; g is
floored (``common.log2_gate``: −inf is a reset, not a NaN), and the three products over the chunk's tokens
(``T ·``, ``P U``) are causal (``common.causal_dot``: a NaN or inf in token t reaches no output before t).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelworks.ops.gated_delta.common import (
    causal_dot,
    chunk_decays,
    log2_gate,
    sequence_bounds,
    sequence_offsets,
    zero_gaps,
)
from kernelworks.runtime.alloc import empty
from kernelworks.runtime.device import interpreter_active
from kernelworks.runtime.launch import cached_plan, cdiv, launch, next_pow2


@triton.jit
def _gated_delta_prefill_fwd_kernel(
    p_q, p_k, p_v, p_g, p_beta, p_w, p_h0, p_ht, p_cu, p_o,
    s_qb, s_qt, s_qh, s_kb, s_kt, s_kh, s_vb, s_vt, s_vh, s_gb, s_gt, s_gh, s_bb, s_bt, s_bh,
    s_wb, s_wt, s_wh, s_ob, s_ot, s_oh, s_hn, s_hh, s_hv,
    T, scale, HV_PER_QK,
    K: tl.constexpr, V: tl.constexpr, CHUNK: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
    IS_VARLEN: tl.constexpr, HAS_H0: tl.constexpr, STORE_HT: tl.constexpr, HAS_W: tl.constexpr,
    SPLIT_STATE: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """Gated delta rule over whole sequences, chunk by chunk (formulas in the module docstring).

    Grid ``(cdiv(V, BLOCK_V), H_v, N)``. q, k ``[B, T, H_qk, K]``; v, o ``[B, T, H_v, V]``; g, beta, w
    ``[B, T, H_v]`` (any strides, unit stride in the last dim of q, k, v, o); h0, ht ``[N, H_v, V, K]``
    (unit K stride). Dense: sequence n is batch row n (N = B). Varlen: B = 1 and cu_seqlens ``[N + 1]``
    (bounds clamped into ``[0, T]``; o's rows outside every sequence written as zeros).
    The state ``[BLOCK_V, K]`` stays in fp32 registers from the first chunk to the last.
    """
    i_v = tl.program_id(0)
    i_h = tl.program_id(1).to(tl.int64)
    i_n = tl.program_id(2).to(tl.int64)
    i_hq = i_h // HV_PER_QK  # grouped value heads: integer division, never a product
    # int64 bases: B·T·H·K passes 2^31 at long contexts
    o_v = i_v * BLOCK_V + tl.arange(0, BLOCK_V)
    m_v = o_v < V
    if IS_VARLEN:
        bos, eos = sequence_bounds(p_cu, i_n, T)
        L = (eos - bos).to(tl.int32)
        zero_gaps(p_o + i_h * s_oh, s_ot, bos, eos, T, o_v, m_v, CHUNK)
        p_q += bos * s_qt
        p_k += bos * s_kt
        p_v += bos * s_vt
        p_g += bos * s_gt
        p_beta += bos * s_bt
        p_w += bos * s_wt
        p_o += bos * s_ot
    else:
        L = T
        i_b = i_n
        p_q += i_b * s_qb
        p_k += i_b * s_kb
        p_v += i_b * s_vb
        p_g += i_b * s_gb
        p_beta += i_b * s_bb
        p_w += i_b * s_wb
        p_o += i_b * s_ob
    p_q += i_hq * s_qh
    p_k += i_hq * s_kh
    p_v += i_h * s_vh
    p_g += i_h * s_gh
    p_beta += i_h * s_bh
    p_w += i_h * s_wh
    p_o += i_h * s_oh

    o_k = tl.arange(0, BLOCK_K)
    m_k = o_k < K
    o_c = tl.arange(0, CHUNK)
    m_lower = o_c[:, None] > o_c[None, :]     # strictly lower: A (the UT transform)
    m_causal = o_c[:, None] >= o_c[None, :]   # lower with the diagonal: the intra-chunk output
    m_hk = m_v[:, None] & m_k[None, :]
    o_h = i_n * s_hn + i_h * s_hh + o_v[:, None] * s_hv + o_k[None, :]
    if HAS_H0:
        b_s = tl.load(p_h0 + o_h, mask=m_hk, other=0.0).to(tl.float32)
    else:
        b_s = tl.zeros([BLOCK_V, BLOCK_K], dtype=tl.float32)

    for c0 in range(0, L, CHUNK):
        o_t = c0 + o_c
        m_t = o_t < L
        o_t = o_t.to(tl.int64)
        m_tk = m_t[:, None] & m_k[None, :]
        m_tv = m_t[:, None] & m_v[None, :]
        # q, k, v stay in their 16-bit dtype: the dots' operand type (fp32 inputs: fp32 and ieee dots)
        b_q = tl.load(p_q + o_t[:, None] * s_qt + o_k[None, :], mask=m_tk, other=0.0)
        b_k = tl.load(p_k + o_t[:, None] * s_kt + o_k[None, :], mask=m_tk, other=0.0)
        b_v = tl.load(p_v + o_t[:, None] * s_vt + o_v[None, :], mask=m_tv, other=0.0)
        DT = b_k.dtype
        # rows past the sequence end: g = β = w = 0, so they neither decay nor write (u = 0 there)
        b_g = log2_gate(tl.load(p_g + o_t * s_gt, mask=m_t, other=0.0))
        b_beta = tl.load(p_beta + o_t * s_bt, mask=m_t, other=0.0).to(tl.float32)
        b_w = tl.load(p_w + o_t * s_wt, mask=m_t, other=0.0).to(tl.float32) if HAS_W else b_beta
        # log2 of the decay since the chunk start (≤ 0), of the chunk, between tokens, to the chunk's end
        b_G, b_G_last, b_dG, b_G_rest = chunk_decays(b_g)

        # A = strictly-lower(β_s k_s·k_r e^{G_s − G_r}); the exponent masked before exp2 (upper: > 0)
        b_kk = tl.dot(b_k, tl.trans(b_k), input_precision=DOT_PRECISION)
        b_A = tl.where(m_lower, b_kk * tl.exp2(tl.where(m_lower, b_dG, 0.0)) * b_beta[:, None], 0.0)
        # T = (I + A)⁻¹ by forward substitution: row i of T is e_i − Σ_{j<i} A_ij T_j
        b_T = tl.where(o_c[:, None] == o_c[None, :], 1.0, 0.0)
        for i in range(1, CHUNK):
            b_a = tl.sum(tl.where(o_c[:, None] == i, b_A, 0.0), axis=0)
            b_row = tl.sum(b_a[:, None] * b_T, axis=0)
            b_T = tl.where(o_c[:, None] == i, b_T - b_row[None, :], b_T)
        b_T = b_T.to(DT)

        b_gamma = tl.exp2(b_G)
        # S₀ᵀ as a dot operand. The carried state stays fp32; for 16-bit dots it is split in two 16-bit
        # halves, hi + lo (~16 mantissa bits together), so the products with it are not rounded to bf16
        b_s_t = tl.trans(b_s)
        b_s_hi = b_s_t.to(DT)
        if SPLIT_STATE:
            b_s_lo = (b_s_t - b_s_hi.to(tl.float32)).to(DT)
        # W = T (βγ ⊙ K) [C, K];  U = T (w ⊙ V) − W S₀ᵀ [C, BV]
        b_wk = causal_dot(b_T, (b_k * (b_beta * b_gamma)[:, None]).to(DT), None, DOT_PRECISION).to(DT)
        b_u = causal_dot(b_T, (b_v * b_w[:, None]).to(DT), None, DOT_PRECISION)
        b_u -= tl.dot(b_wk, b_s_hi, input_precision=DOT_PRECISION)
        if SPLIT_STATE:
            b_u -= tl.dot(b_wk, b_s_lo, input_precision=DOT_PRECISION)
        b_u = b_u.to(DT)
        # O = (γ ⊙ Q) S₀ᵀ + causal(Q Kᵀ ⊙ e^{G_t − G_s}) U
        b_qk = tl.dot(b_q, tl.trans(b_k), input_precision=DOT_PRECISION)
        b_p = tl.where(m_causal, b_qk * tl.exp2(tl.where(m_causal, b_dG, 0.0)), 0.0).to(DT)
        b_qg = (b_q * b_gamma[:, None]).to(DT)
        b_o = tl.dot(b_qg, b_s_hi, input_precision=DOT_PRECISION)
        if SPLIT_STATE:
            b_o = tl.dot(b_qg, b_s_lo, b_o, input_precision=DOT_PRECISION)
        b_o = causal_dot(b_p, b_u, b_o, DOT_PRECISION)
        tl.store(p_o + o_t[:, None] * s_ot + o_v[None, :], (b_o * scale).to(p_o.dtype.element_ty), mask=m_tv)
        # S_C = γ_C S₀ + Uᵀ (e^{G_C − G} ⊙ K)
        b_kd = (b_k * tl.exp2(b_G_rest)[:, None]).to(DT)
        b_s = tl.dot(tl.trans(b_u), b_kd, b_s * tl.exp2(b_G_last), input_precision=DOT_PRECISION)

    if STORE_HT:
        tl.store(p_ht + o_h, b_s, mask=m_hk)


MAX_GPU_CHUNK = 32
"""The chunk the GPU kernel takes at most. The chunk is a blocking choice (every chunk size computes the
same recurrence, up to rounding), so a requested 64 runs as 32-token chunks: at 64 the fused kernel's
per-chunk tiles (q, k, W [64, 128], A, T [64, 64], the [64, 128] fp32 state) need more than 255 registers a
thread at 8 warps and spill 670 B/thread (``kw inspect`` for sm_90); at 32 none spill (254 registers)."""


@cached_plan
def _plan(chunk_size: int, K: int, V: int, fp32: bool) -> tuple[int, int, int, int, str]:
    """``(CHUNK, BLOCK_K, BLOCK_V, num_warps, DOT_PRECISION)``: the whole K in the tile (one dot per
    product, K ≤ 256); V in 32-row tiles (B 8 × H 16 × 4 tiles = 512 programs for 132 SMs; a 32 × 128
    fp32 state is 16 registers a thread at 8 warps). 16-bit inputs: 16-bit dot operands (the precision
    argument is moot). fp32 inputs are the accuracy path, not the speed path: fp32 operands with ``ieee``
    (FMA) dots, in 16-token chunks and 16-row V tiles, since fp32 operand tiles take twice the registers
    (sm_90 compile: 592 B/thread spilled there, ~8 KB at chunk 32). The interpreter takes the requested
    chunk as is (the tests cover 16, 32 and 64)."""
    block_k = next_pow2(max(K, 16))
    block_v = min(next_pow2(max(V, 16)), 32)
    if interpreter_active():
        return chunk_size, block_k, block_v, 1, "ieee"
    if fp32:
        return min(chunk_size, 16), block_k, 16, 8, "ieee"
    return min(chunk_size, MAX_GPU_CHUNK), block_k, block_v, 8, "ieee"


def gated_delta_prefill_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                            beta: torch.Tensor, write_strength: torch.Tensor | None,
                            initial_state: torch.Tensor | None, output_final_state: bool,
                            cu_seqlens: torch.Tensor | None, scale: float,
                            chunk_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the forward (inputs validated by the caller): ``(o [B, T, H_v, V] in v's dtype, final state
    [N, H_v, V, K] fp32 — an empty tensor unless output_final_state)``."""
    B, T, H_qk, K = q.shape
    H_v, V = v.shape[2], v.shape[3]
    n_seq = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    if cu_seqlens is not None:
        cu_seqlens = sequence_offsets(cu_seqlens, T)
    o = empty((B, T, H_v, V), dtype=v.dtype, device=v.device)
    ht = empty((n_seq, H_v, V, K) if output_final_state else (0,), dtype=torch.float32, device=v.device)
    chunk, block_k, block_v, warps, precision = _plan(chunk_size, K, V, q.dtype == torch.float32)
    w = write_strength if write_strength is not None else beta
    h0 = initial_state if initial_state is not None else ht
    # h0 and ht share one offset: both contiguous [N, H_v, V, K] (the caller makes h0 contiguous)
    s_hn, s_hh, s_hv = H_v * V * K, V * K, K
    grid = (cdiv(V, block_v), H_v, n_seq)
    launch(_gated_delta_prefill_fwd_kernel, grid,
           q, k, v, g, beta, w, h0, ht, cu_seqlens if cu_seqlens is not None else g, o,
           q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
           v.stride(0), v.stride(1), v.stride(2), g.stride(0), g.stride(1), g.stride(2),
           beta.stride(0), beta.stride(1), beta.stride(2), w.stride(0), w.stride(1), w.stride(2),
           o.stride(0), o.stride(1), o.stride(2), s_hn, s_hh, s_hv,
           T, scale, H_v // H_qk,
           num_warps=warps, K=K, V=V, CHUNK=chunk, BLOCK_K=block_k, BLOCK_V=block_v,
           IS_VARLEN=cu_seqlens is not None, HAS_H0=initial_state is not None, STORE_HT=output_final_state,
           HAS_W=write_strength is not None, SPLIT_STATE=q.dtype != torch.float32,
           DOT_PRECISION=precision)
    return o, ht
