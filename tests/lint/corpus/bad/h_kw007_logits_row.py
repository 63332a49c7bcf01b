# expect: KW007
"""Fused linear cross-entropy style gradient write: logits row pointer from an int32 program id."""

import triton
import triton.language as tl


@triton.jit
def softmax_grad_kernel(logits_ptr, logits_stride, label_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    program_id = tl.program_id(0)
    logits_ptr += program_id * logits_stride
    label = tl.load(label_ptr + program_id)
    m = float("-inf")
    d = 0.0
    for i in range(0, n_cols, BLOCK_SIZE):
        offs = i + tl.arange(0, BLOCK_SIZE)
        x = tl.load(logits_ptr + offs, mask=offs < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x))
        d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new))
        m = m_new
    for i in range(0, n_cols, BLOCK_SIZE):
        offs = i + tl.arange(0, BLOCK_SIZE)
        x = tl.load(logits_ptr + offs, mask=offs < n_cols, other=float("-inf")).to(tl.float32)
        g = tl.exp(x - m) / d - tl.where(offs == label, 1.0, 0.0)
        tl.store(logits_ptr + offs, g, mask=offs < n_cols)


def softmax_grad(logits, labels):
    softmax_grad_kernel[(logits.shape[0],)](logits, logits.stride(0), labels, logits.shape[1], BLOCK_SIZE=4096)
