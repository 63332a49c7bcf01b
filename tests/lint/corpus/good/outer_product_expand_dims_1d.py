# expect: none
"""Rank-1 update of a tile from two vectors (expand_dims on 1-D blocks), then a row norm."""

import triton
import triton.language as tl


@triton.jit
def _rank1_norm(u_ptr, v_ptr, out_ptr, BU: tl.constexpr, BV: tl.constexpr):
    u = tl.load(u_ptr + tl.arange(0, BU))
    v = tl.load(v_ptr + tl.arange(0, BV))
    tile = tl.expand_dims(u, 1) * tl.expand_dims(v, 0)
    tl.store(out_ptr + tl.arange(0, BU), tl.sqrt(tl.sum(tile * tile, axis=1)))
