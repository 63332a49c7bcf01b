# expect: KW003
"""Gemma-style logit soft-capping in a cross-entropy chunk: logits clamped with builtin min/max on the
row's running maxima."""

import triton
import triton.language as tl


@triton.jit
def _clamp_scores(s, lo, hi):
    return min(max(s, lo), hi)


@triton.jit
def _softcap_ce_fwd_kernel(logits_ptr, stride_l, loss_ptr, labels_ptr, n_cols, softcap,
                           BLOCK_SIZE: tl.constexpr, ROWS: tl.constexpr):
    rows = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    m_row = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(logits_ptr + rows[:, None] * stride_l + cols[None, :], mask=cols[None, :] < n_cols,
                    other=float("-inf")).to(tl.float32)
        m_row = tl.maximum(m_row, tl.max(x, axis=1))
    capped = _clamp_scores(m_row, -softcap, softcap)
    label = tl.load(labels_ptr + rows)
    tl.store(loss_ptr + rows, capped - label.to(tl.float32))


def softcap_ce(logits, labels, softcap=30.0):
    n_rows, n_cols = logits.shape
    loss = logits.new_empty(n_rows, dtype=logits.dtype)
    _softcap_ce_fwd_kernel[(n_rows // 4,)](logits, logits.stride(0), loss, labels, n_cols, softcap,
                                           BLOCK_SIZE=4096, ROWS=4)
    return loss
