# expect: KW007
"""The row offset is cast to int64 only after the int32 multiply has already wrapped."""

import triton
import triton.language as tl


@triton.jit
def cross_entropy_fwd_kernel(logits_ptr, labels_ptr, loss_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    row_off = (row * stride).to(tl.int64)
    label = tl.load(labels_ptr + row)
    m = tl.full([], float("-inf"), tl.float32)
    s = tl.zeros([], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(logits_ptr + row_off + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    target = tl.load(logits_ptr + row_off + label).to(tl.float32)
    tl.store(loss_ptr + row, m + tl.log(s) - target)


def cross_entropy(logits, labels, loss):
    cross_entropy_fwd_kernel[(logits.shape[0],)](logits, labels, loss, logits.stride(0), logits.shape[1], BLOCK=4096)
