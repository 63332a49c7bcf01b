# expect: none
"""Flash-attention forward: masked q/k/v tiles, online softmax, p cast to V's dtype before the dot."""

import triton
import triton.language as tl


@triton.jit
def attn_fwd_kernel(Q, K, V, Out, stride_qb, stride_qt, seq_len, sm_scale,
                    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1).to(tl.int64)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    base = off_bh * stride_qb
    q = tl.load(Q + base + offs_m[:, None] * stride_qt + offs_d[None, :], mask=offs_m[:, None] < seq_len, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    for start_n in range(0, seq_len, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = offs_n < seq_len
        k = tl.load(K + base + offs_n[None, :] * stride_qt + offs_d[:, None], mask=kv_mask[None, :], other=0.0)
        v = tl.load(V + base + offs_n[:, None] * stride_qt + offs_d[None, :], mask=kv_mask[:, None], other=0.0)
        qk = tl.dot(q, k) * qk_scale
        qk = tl.where(kv_mask[None, :], qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(Out + base + offs_m[:, None] * stride_qt + offs_d[None, :], acc.to(Out.dtype.element_ty),
             mask=offs_m[:, None] < seq_len)


def attn_fwd(q, k, v, o, sm_scale):
    BH, T, D = q.shape
    attn_fwd_kernel[(triton.cdiv(T, 64), BH)](q, k, v, o, q.stride(0), q.stride(1), T, sm_scale, HEAD_DIM=D,
                                              BLOCK_M=64, BLOCK_N=64)
