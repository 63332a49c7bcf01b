# expect: KW001
"""fla-style chunk kernel: b_ loads of a [T, K] tile with the time mask missing."""

import triton
import triton.language as tl


@triton.jit
def chunk_local_cumsum_kernel(s, o, T, H: tl.constexpr, BT: tl.constexpr, S: tl.constexpr):
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    o_t = i_t * BT + tl.arange(0, BT)
    o_s = tl.arange(0, S)
    p_s = s + i_bh.to(tl.int64) * T * S + o_t[:, None] * S + o_s[None, :]
    b_s = tl.load(p_s).to(tl.float32)
    b_o = tl.cumsum(b_s, axis=0)
    p_o = o + i_bh.to(tl.int64) * T * S + o_t[:, None] * S + o_s[None, :]
    tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=(o_t < T)[:, None])


def chunk_local_cumsum(s, o, BT=64):
    B, H, T, S = s.shape
    chunk_local_cumsum_kernel[(triton.cdiv(T, BT), B * H)](s, o, T, H=H, BT=BT, S=S)
