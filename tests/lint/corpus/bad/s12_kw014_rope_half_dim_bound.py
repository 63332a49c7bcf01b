# expect: KW014
"""Unsloth-style rotary embedding: one program per (token, head); cos/sin have head_dim // 2 entries but the
mask lets the offsets run to head_dim."""

import triton
import triton.language as tl


@triton.jit
def _rope_embedding(Q, Q_row_stride, cos, cos_row_stride, sin, sin_row_stride, seqlen, head_dim, n_heads,
                    BLOCK_SIZE: tl.constexpr):
    row_position = tl.program_id(0)
    head_position = tl.program_id(1)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    half_head_dim = head_dim // 2
    mask = col_offsets < head_dim

    sin1 = tl.load(sin + (row_position % seqlen) * sin_row_stride + col_offsets, mask=mask, other=0)
    cos1 = tl.load(cos + (row_position % seqlen) * cos_row_stride + col_offsets, mask=mask, other=0)

    q_row = Q + row_position.to(tl.int64) * Q_row_stride + head_position * head_dim
    Q1 = tl.load(q_row + col_offsets, mask=col_offsets < half_head_dim, other=0)
    Q2 = tl.load(q_row + half_head_dim + col_offsets, mask=col_offsets < half_head_dim, other=0)
    tl.store(q_row + col_offsets, Q1 * cos1 - Q2 * sin1, mask=col_offsets < half_head_dim)
    tl.store(q_row + half_head_dim + col_offsets, Q2 * cos1 + Q1 * sin1, mask=col_offsets < half_head_dim)


def rope_(Q, cos, sin):
    batch, seq_len, n_heads, head_dim = Q.shape
    Q = Q.view(batch * seq_len, n_heads * head_dim)
    BLOCK_SIZE = triton.next_power_of_2(head_dim // 2)
    _rope_embedding[(batch * seq_len, n_heads)](Q, Q.stride(0), cos, cos.stride(0), sin, sin.stride(0), seq_len,
                                                 head_dim, n_heads, BLOCK_SIZE=BLOCK_SIZE)
    return Q
