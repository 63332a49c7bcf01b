# expect: none
"""Cross-entropy forward over a long vocabulary: online logsumexp over masked tiles, int64 row."""

import triton
import triton.language as tl


@triton.jit
def cross_entropy_kernel(logits_ptr, labels_ptr, loss_ptr, stride, n_cols, ignore_index, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    logits_ptr += row * stride
    label = tl.load(labels_ptr + row)
    m = tl.full([], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], dtype=tl.float32)
    for start in tl.range(0, n_cols, BLOCK, num_stages=2):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(logits_ptr + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    lse = m + tl.log(tl.sum(s, axis=0))
    target = tl.load(logits_ptr + label).to(tl.float32)
    loss = tl.where(label == ignore_index, 0.0, lse - target)
    tl.store(loss_ptr + row, loss)


def cross_entropy(logits, labels, loss, ignore_index=-100):
    cross_entropy_kernel[(logits.shape[0],)](logits, labels, loss, logits.stride(0), logits.shape[1], ignore_index,
                                             BLOCK=4096)
