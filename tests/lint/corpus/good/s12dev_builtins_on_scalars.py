# expect: none
"""Dev: builtins on a full reduction (a scalar) and on constexprs are fine; helpers take blocks and use tl.*."""

import triton
import triton.language as tl


@triton.jit
def _clip(x, lo, hi):
    return tl.minimum(tl.maximum(x, lo), hi)


@triton.jit
def norm_clip_kernel(x_ptr, n, max_norm, BLOCK: tl.constexpr, NW: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    norm = tl.sqrt(tl.sum(x * x))
    factor = max_norm / max(norm, 1e-6)
    LANES: tl.constexpr = min(BLOCK, NW * 32)
    tl.static_assert(LANES > 0)
    tl.store(x_ptr + offs, _clip(x * factor, -1.0, 1.0), mask=m)


def norm_clip(x, max_norm):
    norm_clip_kernel[(triton.cdiv(x.numel(), 1024),)](x, x.numel(), max_norm, BLOCK=1024, NW=4)
