"""Gated DeltaNet in PyTorch eager: the plain token-by-token recurrence, the ground truth for every check.

Per value head, state ``S ∈ R^{V×K}`` (float32, float64 on float64 inputs), per token t, with decay
``α_t = exp(g_t)``, erase strength ``β_t`` and write strength ``w_t`` (``β_t`` in the standard rule):

    S_t = α_t · S_{t−1} · (I − β_t k_t k_tᵀ) + w_t · v_t k_tᵀ,      o_t = scale · S_t q_t

computed as ``S ← α S;  u = w v − β (S k);  S ← S + u kᵀ`` (the same matrix: ``α S (I − β k kᵀ) =
α S − β (α S k) kᵀ``; ``tests/ops/test_gated_delta.py`` checks the identity against the formula written
out with matrices). Grouped value heads: value head ``h`` reads query/key head ``h // (H_v / H_qk)``.

Layouts (the library's): ``q, k [B, T, H_qk, K]``, ``v [B, T, H_v, V]``, ``g, beta [B, T, H_v]``, states
``[N, H_v, V, K]`` (K contiguous). Variable-length batches are packed: ``B = 1`` with ``cu_seqlens`` int
``[N + 1]`` giving each sequence's token range; the state restarts (from ``initial_state[n]`` or zero) at
every sequence start.
"""

from __future__ import annotations

import torch
from torch.nn import functional

L2NORM_EPS = 1e-6
"""``x / √(Σx² + eps)``: the L2-normalisation of q and k (fla's and vLLM's constant)."""


def compute_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """float64 when any input is float64 (the ground truth), else float32 (the recurrence never runs in a
    16-bit dtype: the state is float32 always)."""
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


def fused_gates(a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor | None,
                dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen3-Next's gates from raw projections: ``g = −exp(A_log) · softplus(a + dt_bias)`` and
    ``beta = sigmoid(b)``; ``a, b [..., H_v]``, ``A_log, dt_bias [H_v]``."""
    x = a.to(dtype) + (dt_bias.to(dtype) if dt_bias is not None else 0.0)
    return -torch.exp(A_log.to(dtype)) * functional.softplus(x), torch.sigmoid(b.to(dtype))


def l2_normalize(x: torch.Tensor) -> torch.Tensor:
    """``x / √(Σ x² + 1e-6)`` over the last dimension."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + L2NORM_EPS)


def gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, *,
                     scale: float | None = None, initial_state: torch.Tensor | None = None,
                     output_final_state: bool = False, cu_seqlens: torch.Tensor | None = None,
                     write_strength: torch.Tensor | None = None, A_log: torch.Tensor | None = None,
                     dt_bias: torch.Tensor | None = None, use_qk_l2norm: bool = False,
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The recurrence, token by token (slow; the truth).

    Args:
        q, k: ``[B, T, H_qk, K]``. v: ``[B, T, H_v, V]``; ``H_v`` a multiple of ``H_qk``.
        g: ``[B, T, H_v]`` log-decay (``α = exp(g)``, so g ≤ 0 keeps the state bounded); with ``A_log``
            it is the raw gate input ``a`` instead (see :func:`fused_gates`).
        beta: ``[B, T, H_v]`` erase strength in [0, 1]; with ``A_log`` the raw logit ``b``.
        scale: output scale, default ``K ** -0.5``.
        initial_state: ``[N, H_v, V, K]`` (N = B, or the number of sequences with ``cu_seqlens``); zero
            when None.
        output_final_state: also return the state after each sequence's last token.
        cu_seqlens: ``[N + 1]`` int32/int64 cumulative sequence lengths (``B`` must be 1).
        write_strength: ``[B, T, H_v]``, the write's strength ``w_t`` (models with a separate ``dt``);
            ``beta`` when None. Taken as given (not passed through the fused gates).
        A_log, dt_bias: ``[H_v]`` fused-gate parameters (``dt_bias`` optional, zero when None).
        use_qk_l2norm: L2-normalise q and k first (eps 1e-6 inside the root).

    Returns:
        ``(o, final_state)``: o ``[B, T, H_v, V]`` in v's dtype; final_state ``[N, H_v, V, K]`` in the
        compute dtype (float32, float64 on float64 inputs), or None.
    """
    B, T, H_qk, K = q.shape
    H_v, V = v.shape[2], v.shape[3]
    dt = compute_dtype(q, k, v, g, beta, initial_state)
    scale = K ** -0.5 if scale is None else scale
    qf, kf, vf = q.to(dt), k.to(dt), v.to(dt)
    if A_log is not None:
        gf, bf = fused_gates(g, beta, A_log, dt_bias, dt)
    else:
        gf, bf = g.to(dt), beta.to(dt)
    wf = bf if write_strength is None else write_strength.to(dt)
    if use_qk_l2norm:
        qf, kf = l2_normalize(qf), l2_normalize(kf)
    # value head h reads query/key head h // (H_v // H_qk): repeat_interleave lays heads out exactly so
    qf = qf.repeat_interleave(H_v // H_qk, dim=2)
    kf = kf.repeat_interleave(H_v // H_qk, dim=2)
    if cu_seqlens is None:
        spans = [(b, 0, T) for b in range(B)]
    else:
        bounds = cu_seqlens.tolist()
        spans = [(0, bounds[n], bounds[n + 1]) for n in range(len(bounds) - 1)]
    o = torch.zeros(B, T, H_v, V, dtype=dt, device=v.device)
    finals = []
    for n, (b, t0, t1) in enumerate(spans):
        S = (initial_state[n].to(dt).clone() if initial_state is not None
             else torch.zeros(H_v, V, K, dtype=dt, device=v.device))
        for t in range(t0, t1):
            kt = kf[b, t]                                            # [H_v, K]
            S = torch.exp(gf[b, t])[:, None, None] * S               # decay
            u = wf[b, t][:, None] * vf[b, t] - bf[b, t][:, None] * torch.einsum("hvk,hk->hv", S, kt)
            S = S + u[:, :, None] * kt[:, None, :]                   # erase + write, one rank-1 update
            o[b, t] = scale * torch.einsum("hvk,hk->hv", S, qf[b, t])
        finals.append(S)
    final = torch.stack(finals) if output_final_state else None
    return o.to(v.dtype), final


def gated_delta_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                       state: torch.Tensor, *, state_indices: torch.Tensor | None = None,
                       scale: float | None = None, A_log: torch.Tensor | None = None,
                       dt_bias: torch.Tensor | None = None, use_qk_l2norm: bool = False,
                       write_strength: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode step on a state pool, out of place: ``(o, pool_after)``; the caller's pool is untouched.

    ``q, k [B, H_qk, K]``, ``v [B, H_v, V]``, ``g, beta (, write_strength) [B, H_v]``, ``state`` the pool
    ``[slots, H_v, V, K]``, ``state_indices [B]`` (default ``arange(B)``; a negative index is a padding
    row: its output is zero and no slot changes). ``pool_after`` is in the compute dtype.
    """
    B, H_qk, K = q.shape
    H_v = v.shape[1]
    dt = compute_dtype(q, k, v, g, beta, state)
    scale = K ** -0.5 if scale is None else scale
    idx = (torch.arange(B, device=q.device) if state_indices is None else state_indices).long()
    pool = state.to(dt).clone()
    o = torch.zeros(v.shape, dtype=v.dtype, device=v.device)
    live = (idx >= 0).nonzero().flatten()
    if not live.numel():
        return o, pool
    # the same step as gated_delta_rule's loop body, vectorised over the live rows (one token each)
    qf, kf, vf = q[live].to(dt), k[live].to(dt), v[live].to(dt)
    if A_log is not None:
        gf, bf = fused_gates(g[live], beta[live], A_log, dt_bias, dt)
    else:
        gf, bf = g[live].to(dt), beta[live].to(dt)
    wf = bf if write_strength is None else write_strength[live].to(dt)
    if use_qk_l2norm:
        qf, kf = l2_normalize(qf), l2_normalize(kf)
    qf = qf.repeat_interleave(H_v // H_qk, dim=1)
    kf = kf.repeat_interleave(H_v // H_qk, dim=1)
    S = torch.exp(gf)[..., None, None] * pool[idx[live]]
    u = wf[..., None] * vf - bf[..., None] * torch.einsum("nhvk,nhk->nhv", S, kf)
    S = S + u[..., None] * kf[..., None, :]
    o[live] = (scale * torch.einsum("nhvk,nhk->nhv", S, qf)).to(v.dtype)
    pool[idx[live]] = S
    return o, pool
