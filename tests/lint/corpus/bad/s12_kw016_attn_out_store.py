# expect: KW016
"""Attention forward over block pointers: K and V are checked, but the output tile is stored without a
boundary check, so the last query block writes past seq_len."""

import torch
import triton
import triton.language as tl


@triton.jit
def _attn_fwd(Q, K, V, Out, sm_scale, seq_len, stride_qh, stride_qm, stride_kh, stride_kn, stride_oh, stride_om,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    off_h = tl.program_id(1).to(tl.int64)
    q_bp = tl.make_block_ptr(Q + off_h * stride_qh, (seq_len, HEAD_DIM), (stride_qm, 1), (start_m * BLOCK_M, 0),
                             (BLOCK_M, HEAD_DIM), (1, 0))
    k_bp = tl.make_block_ptr(K + off_h * stride_kh, (HEAD_DIM, seq_len), (1, stride_kn), (0, 0),
                             (HEAD_DIM, BLOCK_N), (0, 1))
    v_bp = tl.make_block_ptr(V + off_h * stride_kh, (seq_len, HEAD_DIM), (stride_kn, 1), (0, 0),
                             (BLOCK_N, HEAD_DIM), (1, 0))
    o_bp = tl.make_block_ptr(Out + off_h * stride_oh, (seq_len, HEAD_DIM), (stride_om, 1), (start_m * BLOCK_M, 0),
                             (BLOCK_M, HEAD_DIM), (1, 0))
    q = tl.load(q_bp, boundary_check=(0,), padding_option="zero")
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, seq_len, BLOCK_N):
        k = tl.load(k_bp, boundary_check=(1,), padding_option="zero")
        s = tl.dot(q, k) * sm_scale
        s = tl.where((start_n + tl.arange(0, BLOCK_N))[None, :] < seq_len, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        v = tl.load(v_bp, boundary_check=(0,), padding_option="zero")
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new
        k_bp = tl.advance(k_bp, (0, BLOCK_N))
        v_bp = tl.advance(v_bp, (BLOCK_N, 0))
    tl.store(o_bp, (acc / l_i[:, None]).to(Out.type.element_ty))


def attn_fwd(q, k, v, sm_scale):
    H, S, D = q.shape
    o = torch.empty_like(q)
    grid = (triton.cdiv(S, 128), H)
    _attn_fwd[grid](q, k, v, o, sm_scale, S, q.stride(0), q.stride(1), k.stride(0), k.stride(1), o.stride(0),
                    o.stride(1), HEAD_DIM=D, BLOCK_M=128, BLOCK_N=64)
    return o
