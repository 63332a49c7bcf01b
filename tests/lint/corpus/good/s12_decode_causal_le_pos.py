# expect: none
"""Single-token decode attention over a contiguous KV cache: keys up to and including the current
position are visible (`<=` against a position, not a length)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_attn_kernel(q_ptr, k_ptr, v_ptr, o_ptr, pos_ptr, stride_kh, stride_kt, sm_scale,
                        HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr):
    i_h = tl.program_id(0).to(tl.int64)
    cur_pos = tl.load(pos_ptr)
    o_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + i_h * HEAD_DIM + o_d).to(tl.float32)
    m_i = float("-inf")
    l_i = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for start in range(0, cur_pos + 1, BLOCK_T):
        o_t = start + tl.arange(0, BLOCK_T)
        visible = o_t <= cur_pos
        kv_off = i_h * stride_kh + o_t[:, None] * stride_kt + o_d[None, :]
        k = tl.load(k_ptr + kv_off, mask=visible[:, None], other=0.0).to(tl.float32)
        s = tl.where(visible, tl.sum(k * q[None, :], axis=1) * sm_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m_i - m_new)
        v = tl.load(v_ptr + kv_off, mask=visible[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    tl.store(o_ptr + i_h * HEAD_DIM + o_d, acc / l_i)


def decode_attn(q, k_cache, v_cache, pos, sm_scale):
    n_heads, head_dim = q.shape
    o = torch.empty_like(q, dtype=torch.float32)
    _decode_attn_kernel[(n_heads,)](q, k_cache, v_cache, o, pos, k_cache.stride(0), k_cache.stride(1), sm_scale,
                                    HEAD_DIM=head_dim, BLOCK_T=64)
    return o
