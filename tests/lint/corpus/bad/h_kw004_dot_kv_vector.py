# expect: KW004
"""Decode attention scoring one query vector against keys with tl.dot on the 1-D query."""

import triton
import triton.language as tl


@triton.jit
def decode_scores_kernel(q_ptr, k_ptr, s_ptr, seq_len, stride_k, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    d = tl.arange(0, HEAD_DIM)
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    q = tl.load(q_ptr + d)
    k = tl.load(k_ptr + n[None, :] * stride_k + d[:, None], mask=n[None, :] < seq_len, other=0.0)
    s = tl.dot(q, k)
    tl.store(s_ptr + n, s, mask=n < seq_len)


def decode_scores(q, k, s):
    decode_scores_kernel[(triton.cdiv(k.shape[0], 64),)](q, k, s, k.shape[0], k.stride(0), HEAD_DIM=q.numel(),
                                                        BLOCK_N=64)
