# expect: none
"""Embedding gather: row ids come from memory, each row masked on its columns."""

import triton
import triton.language as tl


@triton.jit
def embedding_kernel(idx_ptr, weight_ptr, out_ptr, n_tokens, dim, stride_w, stride_o,
                     BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    m_t = t < n_tokens
    m_d = d < dim
    ids = tl.load(idx_ptr + t, mask=m_t, other=0).to(tl.int64)
    mask = m_t[:, None] & m_d[None, :]
    rows = tl.load(weight_ptr + ids[:, None] * stride_w + d[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + t.to(tl.int64)[:, None] * stride_o + d[None, :], rows, mask=mask)


def embedding(idx, weight, out):
    n, dim = idx.numel(), weight.shape[1]
    embedding_kernel[(triton.cdiv(n, 16), triton.cdiv(dim, 128))](idx, weight, out, n, dim, weight.stride(0),
                                                                 out.stride(0), BLOCK_T=16, BLOCK_D=128)
