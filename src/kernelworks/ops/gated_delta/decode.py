"""The decode step: one token per sequence, the state pool updated in place, one pass over the state.

Per (sequence b, value head h), with ``S`` the pool row ``state[state_indices[b], h]`` (``[V, K]`` fp32):

    S ← α S;   u = w v − β (S k);   S ← S + u kᵀ;   o = scale · S q

which is ``S_t = α S (I − β k kᵀ) + w v kᵀ`` (reference.py). A step reads and writes the state once; q,
k, v, gates and o are < 1% of the bytes at K = V = 128, so the kernel is a copy of the state with a little
arithmetic on the way: its speed of light is the copy bandwidth.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelworks.ops._math import LOG2E, sigmoid, softplus
from kernelworks.ops.gated_delta.reference import L2NORM_EPS
from kernelworks.runtime.alloc import empty
from kernelworks.runtime.device import interpreter_active, sm_count
from kernelworks.runtime.launch import cached_plan, cdiv, launch, next_pow2
from kernelworks.runtime.plans import ForcedPlan

_EPS = tl.constexpr(L2NORM_EPS)


@triton.jit
def _gated_delta_decode_kernel(
    p_q, p_k, p_v, p_g, p_beta, p_w, p_A, p_dtb, p_state, p_idx, p_o,
    s_qb, s_qh, s_kb, s_kh, s_vb, s_vh, s_gb, s_gh, s_bb, s_bh, s_wb, s_wh, s_A, s_dtb,
    s_sn, s_sh, s_sv, s_idx, s_ob, s_oh,
    scale, HV_PER_QK, N_SLOTS,
    K: tl.constexpr, V: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, FUSED_GATE: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr, HAS_W: tl.constexpr, HAS_INDICES: tl.constexpr, L2NORM: tl.constexpr,
):
    """One ``[BLOCK_V, K]`` tile of one head's state, one decode step.

    Grid ``(cdiv(V, BLOCK_V), H_v, B)``. q, k ``[B, H_qk, K]`` and v, o ``[B, H_v, V]`` (unit stride in the
    last dim), g, beta, w ``[B, H_v]``, A_log, dt_bias ``[H_v]``, state ``[slots, H_v, V, K]`` (unit K
    stride), state_indices ``[B]``: pool row of sequence b; a slot outside ``[0, N_SLOTS)`` (negative:
    padding) skips the sequence (o = 0, the pool untouched). 1-D tensors at their strides.
    With FUSED_GATE, g and beta hold the raw ``a`` and ``b``: ``g = −exp(A_log)·softplus(a + dt_bias)``,
    ``beta = σ(b)``. Everything in fp32; o rounded once at the store.
    """
    # int64 ids: slots × H_v × V × K passes 2^31 past 4096 slots at 32 heads of 128 × 128
    i_v = tl.program_id(0)
    i_h = tl.program_id(1).to(tl.int64)
    i_b = tl.program_id(2).to(tl.int64)
    i_hq = i_h // HV_PER_QK  # grouped value heads: integer division, never a product
    slot = tl.load(p_idx + i_b * s_idx).to(tl.int64) if HAS_INDICES else i_b
    live = (slot >= 0) & (slot < N_SLOTS)
    slot = tl.where(live, slot, 0)  # skipped rows load and store nothing (masked), but keep the address valid

    o_k = tl.arange(0, BLOCK_K)
    m_k = o_k < K
    o_v = i_v * BLOCK_V + tl.arange(0, BLOCK_V)
    m_v = o_v < V
    m_s = (m_v[:, None] & m_k[None, :]) & live

    b_q = tl.load(p_q + i_b * s_qb + i_hq * s_qh + o_k, mask=m_k, other=0.0).to(tl.float32)
    b_k = tl.load(p_k + i_b * s_kb + i_hq * s_kh + o_k, mask=m_k, other=0.0).to(tl.float32)
    b_v = tl.load(p_v + i_b * s_vb + i_h * s_vh + o_v, mask=m_v, other=0.0).to(tl.float32)
    b_g = tl.load(p_g + i_b * s_gb + i_h * s_gh).to(tl.float32)
    b_beta = tl.load(p_beta + i_b * s_bb + i_h * s_bh).to(tl.float32)
    if FUSED_GATE:
        x = b_g
        if HAS_DT_BIAS:
            x += tl.load(p_dtb + i_h * s_dtb).to(tl.float32)
        b_g = -tl.exp2(LOG2E * tl.load(p_A + i_h * s_A).to(tl.float32)) * softplus(x)
        b_beta = sigmoid(b_beta)
    b_w = tl.load(p_w + i_b * s_wb + i_h * s_wh).to(tl.float32) if HAS_W else b_beta
    if L2NORM:
        b_q = b_q * tl.rsqrt(tl.sum(b_q * b_q) + _EPS)
        b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k) + _EPS)

    p_s = p_state + slot * s_sn + i_h * s_sh + o_v[:, None].to(tl.int64) * s_sv + o_k[None, :]
    b_s = tl.load(p_s, mask=m_s, other=0.0) * tl.exp2(LOG2E * b_g)        # decay
    b_u = b_w * b_v - b_beta * tl.sum(b_s * b_k[None, :], axis=1)          # [BLOCK_V]: w v − β S k
    b_s += b_u[:, None] * b_k[None, :]                                     # erase + write, one rank-1 update
    b_o = tl.sum(b_s * b_q[None, :], axis=1) * scale
    tl.store(p_s, b_s, mask=m_s)
    b_o = tl.where(live, b_o, 0.0)
    tl.store(p_o + i_b * s_ob + i_h * s_oh + o_v, b_o.to(p_o.dtype.element_ty), mask=m_v)


FORCED_PLAN: ForcedPlan[dict] = ForcedPlan("gated_delta_decode")
"""``BLOCK_V`` (state rows per program) and ``num_warps`` forced on the decode kernel (``kw tune``'s hook)."""

CONFIGS = [{"BLOCK_V": bv, "num_warps": w} for bv in (8, 16, 32, 64) for w in (1, 2, 4, 8)
           if bv * 128 // (w * 32) <= 128]
"""``kw tune gated_delta_decode``'s space: V rows per program × warps, at most 128 state values a thread (K
128)."""


@cached_plan
def _plan(batch: int, heads: int, K: int, V: int) -> tuple[int, int, int]:
    """``(BLOCK_K, BLOCK_V, num_warps)``: the whole K row in the tile (coalesced 512-byte rows of the
    K-contiguous state), 32 V rows on 8 warps (16 fp32 values a thread), halved down to 8 rows while that
    leaves fewer than 4 programs per SM. Measured on an H200 (a sweep script since replaced by ``kw tune
    gated_delta_decode``,
    H_v 32, K = V = 128): 32/8 moved 3649 and 3886 GB/s of state at batch 64 and 256, against 2914 and 3189
    for the first plan (64 rows on 4 warps: 137 registers, 3 blocks an SM); 32 rows on 1 warp matched it
    with 254 registers (12% occupancy), so the occupancy-friendly one is kept. Batch 1 is latency-bound
    (~7 µs whatever the tile)."""
    block_k = next_pow2(max(K, 16))
    if interpreter_active():
        return block_k, min(next_pow2(V), 32), 1
    block_v = 32
    while block_v > 8 and batch * heads * cdiv(V, block_v) < 4 * sm_count():
        block_v //= 2
    block_v = min(block_v, next_pow2(V))
    return block_k, block_v, max(1, block_v // 4)


def gated_delta_decode_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                           beta: torch.Tensor, state: torch.Tensor, state_indices: torch.Tensor | None,
                           scale: float, A_log: torch.Tensor | None, dt_bias: torch.Tensor | None,
                           use_qk_l2norm: bool, write_strength: torch.Tensor | None) -> torch.Tensor:
    """Launch the decode kernel (inputs validated by the caller); updates ``state`` in place, returns o
    ``[B, H_v, V]`` in v's dtype."""
    B, H_qk, K = q.shape
    H_v, V = v.shape[1], v.shape[2]
    o = empty((B, H_v, V), dtype=v.dtype, device=v.device)
    block_k, block_v, warps = _plan(B, H_v, K, V)
    forced = FORCED_PLAN.get()
    if forced is not None:
        block_v, warps = forced["BLOCK_V"], forced["num_warps"]
    w = write_strength if write_strength is not None else beta
    A = A_log if A_log is not None else g  # unused pointers (constexpr-disabled) are stand-ins
    dtb = dt_bias if dt_bias is not None else g
    idx = state_indices if state_indices is not None else g
    grid = (cdiv(V, block_v), H_v, B)
    launch(_gated_delta_decode_kernel, grid,
           q, k, v, g, beta, w, A, dtb, state, idx, o,
           q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
           g.stride(0), g.stride(1), beta.stride(0), beta.stride(1), w.stride(0), w.stride(1), A.stride(0),
           dtb.stride(0), state.stride(0), state.stride(1), state.stride(2), idx.stride(0), o.stride(0), o.stride(1),
           scale, H_v // H_qk, state.shape[0],
           num_warps=warps, K=K, V=V, BLOCK_K=block_k, BLOCK_V=block_v, FUSED_GATE=A_log is not None,
           HAS_DT_BIAS=dt_bias is not None, HAS_W=write_strength is not None,
           HAS_INDICES=state_indices is not None, L2NORM=bool(use_qk_l2norm))
    return o
