# expect: KW017
"""Embedding backward as a scatter-add: one program per token, the hidden dimension padded to a power of
two, and the atomic add into the weight gradient is not masked to the real width."""

import torch
import triton
import triton.language as tl


@triton.jit
def embedding_bwd_kernel(grad_out_ptr, ids_ptr, grad_w_ptr, hidden, stride_go, stride_gw,
                         BLOCK_D: tl.constexpr):
    tok = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    idx = tl.load(ids_ptr + tok).to(tl.int64)
    g = tl.load(grad_out_ptr + tok * stride_go + cols, mask=cols < hidden, other=0.0)
    tl.atomic_add(grad_w_ptr + idx * stride_gw + cols, g.to(tl.float32))


def embedding_bwd(grad_out, ids, vocab):
    n_tok, hidden = grad_out.shape
    grad_w = torch.zeros(vocab, hidden, device=grad_out.device, dtype=torch.float32)
    embedding_bwd_kernel[(n_tok,)](grad_out, ids, grad_w, hidden, grad_out.stride(0), grad_w.stride(0),
                                   BLOCK_D=triton.next_power_of_2(hidden))
    return grad_w
