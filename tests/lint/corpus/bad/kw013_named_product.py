# expect: KW013
"""Chunk-local state update (linear attention) with the outer products named before the sum."""

import triton
import triton.language as tl


@triton.jit
def _chunk_state(k_ptr, v_ptr, h_ptr, C: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr):
    t = tl.arange(0, C)
    dk = tl.arange(0, DK)
    dv = tl.arange(0, DV)
    k = tl.load(k_ptr + t[:, None] * DK + dk[None, :])
    v = tl.load(v_ptr + t[:, None] * DV + dv[None, :])
    outer = k[:, :, None] * v[:, None, :]
    h = tl.sum(outer, axis=0)
    tl.store(h_ptr + dk[:, None] * DV + dv[None, :], h)
