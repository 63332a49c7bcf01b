# expect: KW003
"""Looped softmax statistics whose tile count uses the host helper triton.cdiv on a runtime size."""

import triton
import triton.language as tl


@triton.jit
def logsumexp_kernel(x_ptr, out_ptr, stride, n_cols, TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    m = tl.full([], float("-inf"), tl.float32)
    s = tl.zeros([], dtype=tl.float32)
    for t in range(0, triton.cdiv(n_cols, TILE)):
        cols = t * TILE + tl.arange(0, TILE)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(out_ptr + row, m + tl.log(s))


def logsumexp(x, out):
    logsumexp_kernel[(x.shape[0],)](x, out, x.stride(0), x.shape[1], TILE=1024)
