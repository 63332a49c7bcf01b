# expect: KW014
"""Dev: per-column scale over an [R, C] grid of tiles; the scale vector masked with the row count."""

import triton
import triton.language as tl


@triton.jit
def col_scale_kernel(x, s, R, C, stride_r, BR: tl.constexpr, BC: tl.constexpr):
    o_r = tl.program_id(0) * BR + tl.arange(0, BR)
    o_c = tl.program_id(1) * BC + tl.arange(0, BC)
    m = (o_r[:, None] < R) & (o_c[None, :] < C)
    p = x + o_r[:, None].to(tl.int64) * stride_r + o_c[None, :]
    sc = tl.load(s + o_c, mask=o_c < R, other=1.0)
    tl.store(p, tl.load(p, mask=m) * sc[None, :], mask=m)


def col_scale(x, s):
    R, C = x.shape
    col_scale_kernel[(triton.cdiv(R, 16), triton.cdiv(C, 64))](x, s, R, C, x.stride(0), BR=16, BC=64)
