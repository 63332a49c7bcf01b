# expect: KW013
"""Attention scores of a small head written with expand_dims and a reduction."""

import triton
import triton.language as tl


@triton.jit
def _scores(q_ptr, k_ptr, s_ptr, L, D: tl.constexpr, BL: tl.constexpr):
    offs_l = tl.arange(0, BL)
    offs_d = tl.arange(0, D)
    mask = offs_l[:, None] < L
    q = tl.load(q_ptr + offs_l[:, None] * D + offs_d[None, :], mask=mask, other=0.0)
    k = tl.load(k_ptr + offs_l[:, None] * D + offs_d[None, :], mask=mask, other=0.0)
    s = tl.sum(tl.expand_dims(q, 1) * tl.expand_dims(k, 0), axis=2)
    tl.store(s_ptr + offs_l[:, None] * BL + offs_l[None, :], s, mask=mask & (offs_l[None, :] < L))
