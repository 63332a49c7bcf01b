"""The attention family's math in plain PyTorch: scores materialised, any float dtype (float64 for ground
truth), the same signatures as the public functions. Used by ``kw check``, the tests and the benchmarks.

Conventions (shared with the kernels, see ``docs/notes/attention.md``):

* layout ``[batch, seq, heads, head_dim]`` (``layout="bhsd"``: SDPA's ``[batch, heads, seq, head_dim]``);
  varlen: ``[total_tokens, heads, head_dim]`` with ``cu_seqlens`` int32 ``[batch + 1]``;
* grouped-query attention: query head ``h`` reads KV head ``h // (Hq // Hkv)``;
* causal masks and windows are aligned to the bottom-right corner (flash-attn ≥ 2.1): query ``i`` sits at
  key position ``i + Sk − Sq`` and sees keys ``j`` with ``i + Sk − Sq − left ≤ j ≤ i + Sk − Sq + right``
  (``causal`` is ``right = 0``; ``-1`` means unbounded). For ``Sq == Sk`` this is the usual top-left mask.
  A query row that sees no key returns 0 and ``lse = -inf``;
* softcap: ``s = softcap · tanh(scale · q·k / softcap)`` replaces ``scale · q·k`` before the softmax;
* ``lse`` (natural log) is float32 ``[batch, heads, seq_q]`` (varlen: ``[heads, total_q]``), float64 for
  float64 inputs.
"""

from __future__ import annotations

import math

import torch


def window_bounds(window: int | tuple[int, int] | None, causal: bool) -> tuple[int, int]:
    """``(left, right)`` key offsets around each query's diagonal, ``-1`` for unbounded.

    ``window=None``: ``(-1, -1)``; an int ``w``: ``(w, 0)`` — the query and the ``w`` keys before it (a
    causal sliding window, Mistral's); a pair ``(left, right)`` as in flash-attn. ``causal`` forces
    ``right = 0``."""
    if window is None:
        left, right = -1, -1
    elif isinstance(window, int):
        left, right = window, 0
    else:
        left, right = window
    if causal:
        right = 0
    return int(left), int(right)


SCORE_BUDGET = 1 << 27
"""Score elements the reference materialises at once: longer problems go by blocks of query rows (a
varlen benchmark's 8k-token sequence at 32 heads would otherwise hold several 8.6 GB fp32 score tensors)."""


def _dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, left: int, right: int,
           softcap: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch of ``[B, S, H, D]`` tensors: ``(o [B, Sq, Hq, D], lse [B, Hq, Sq])``, by blocks of query
    rows when the scores would pass :data:`SCORE_BUDGET` elements."""
    batch, sq, hq = q.shape[:3]
    sk = k.shape[1]
    rows = max(1, SCORE_BUDGET // max(1, batch * hq * sk))
    if rows >= sq:
        return _dense_rows(q, k, v, scale, left, right, softcap, sk - sq)
    parts = [_dense_rows(q[:, r:r + rows], k, v, scale, left, right, softcap, r + sk - sq)
             for r in range(0, sq, rows)]
    return torch.cat([o for o, _ in parts], dim=1), torch.cat([lse for _, lse in parts], dim=2)


def _dense_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, left: int, right: int,
                softcap: float | None, pos0: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Query rows ``q [B, n, Hq, D]`` whose row i sits at key position ``pos0 + i``."""
    sq, sk, hq, hkv = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    if sk == 0:  # an empty (varlen) key sequence: every row sees nothing
        return q.new_zeros((q.shape[0], sq, hq, v.shape[-1])), q.new_full((q.shape[0], hq, sq), float("-inf"),
                                                                            dtype=lse_dtype)
    if hq != hkv:
        k = k.repeat_interleave(hq // hkv, dim=2)
        v = v.repeat_interleave(hq // hkv, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq, device=q.device)[:, None] + pos0
    j = torch.arange(sk, device=q.device)[None, :]
    valid = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if left >= 0:
        valid &= j >= i - left
    if right >= 0:
        valid &= j <= i + right
    s = s.masked_fill(~valid, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    p = torch.exp(s - m)
    l_sum = p.sum(dim=-1, keepdim=True)
    seen = l_sum > 0
    l_safe = torch.where(seen, l_sum, torch.ones_like(l_sum))
    o = torch.einsum("bhqk,bkhd->bqhd", p / l_safe, v)
    lse = torch.where(seen, m.to(lse_dtype) + torch.log(l_safe.to(lse_dtype)),
                      torch.full_like(l_safe, float("-inf"), dtype=lse_dtype))
    return o, lse.squeeze(-1)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    softmax_scale: float | None = None, window: int | tuple[int, int] | None = None,
                    softcap: float | None = None, cu_seqlens_q: torch.Tensor | None = None,
                    cu_seqlens_k: torch.Tensor | None = None, max_seqlen_q: int | None = None,
                    max_seqlen_k: int | None = None, return_lse: bool = False, layout: str = "bshd"):
    """Attention by the definition (see the module docstring for every convention); returns ``o`` or
    ``(o, lse)``. ``max_seqlen_*`` are accepted for signature parity and ignored."""
    del max_seqlen_q, max_seqlen_k
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    left, right = window_bounds(window, causal)
    if cu_seqlens_q is not None:
        outs, lses = [], []
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        for b in range(len(cq) - 1):
            o_b, lse_b = _dense(q[None, cq[b]:cq[b + 1]], k[None, ck[b]:ck[b + 1]], v[None, ck[b]:ck[b + 1]],
                                scale, left, right, softcap)
            outs.append(o_b[0])
            lses.append(lse_b[0])
        o, lse = torch.cat(outs, dim=0), torch.cat(lses, dim=1)
    else:
        if layout == "bhsd":
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        o, lse = _dense(q, k, v, scale, left, right, softcap)
        if layout == "bhsd":
            o = o.transpose(1, 2)
    return (o, lse) if return_lse else o


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                     context_lens: torch.Tensor, *, softmax_scale: float | None = None,
                     softcap: float | None = None) -> torch.Tensor:
    """Decode attention over a paged cache: ``q [B, Hq, D]`` (or ``[B, T, Hq, D]``: ``T`` new tokens, the
    last at position ``context_len − 1``, causal among themselves), ``k_cache``/``v_cache``
    ``[num_pages, page_size, Hkv, D]``, ``block_table [B, max_pages]``, ``context_lens [B]`` (tokens in
    the cache, the new ones included). Returns ``o`` shaped like ``q``."""
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    page = k_cache.shape[1]
    single = q.dim() == 3
    q4 = q[:, None] if single else q
    outs = []
    for b, n in enumerate(context_lens.tolist()):
        pages = block_table[b, : -(-n // page)].long()
        kb = k_cache[pages].reshape(-1, *k_cache.shape[2:])[:n]
        vb = v_cache[pages].reshape(-1, *v_cache.shape[2:])[:n]
        o_b, _ = _dense(q4[b:b + 1], kb[None], vb[None], scale, -1, 0, softcap)
        outs.append(o_b)
    o = torch.cat(outs, dim=0)
    return o[:, 0] if single else o
