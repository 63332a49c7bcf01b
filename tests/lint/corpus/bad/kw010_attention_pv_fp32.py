# expect: KW010
"""Attention forward that multiplies fp32 probabilities with V without choosing the dot precision."""

import triton
import triton.language as tl


@triton.jit
def attn_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, stride_t, seq_len, sm_scale,
                    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    off_bh = tl.program_id(1).to(tl.int64)
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, HEAD_DIM)
    base = off_bh * seq_len * stride_t
    q = tl.load(q_ptr + base + rm[:, None] * stride_t + rd[None, :], mask=rm[:, None] < seq_len, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for n0 in range(0, seq_len, BLOCK_N):
        rn = n0 + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + base + rn[None, :] * stride_t + rd[:, None], mask=rn[None, :] < seq_len, other=0.0)
        v = tl.load(v_ptr + base + rn[:, None] * stride_t + rd[None, :], mask=rn[:, None] < seq_len, other=0.0)
        qk = tl.dot(q, k) * sm_scale
        qk = tl.where(rn[None, :] < seq_len, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp(qk - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32))
        m_i = m_new
    tl.store(o_ptr + base + rm[:, None] * stride_t + rd[None, :], acc / l_i[:, None], mask=rm[:, None] < seq_len)


def attn_fwd(q, k, v, o, sm_scale):
    BH, T, D = q.shape
    attn_fwd_kernel[(triton.cdiv(T, 64), BH)](q, k, v, o, q.stride(1), T, sm_scale, HEAD_DIM=D, BLOCK_M=64,
                                              BLOCK_N=64)
