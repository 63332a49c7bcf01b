# expect: KW009
"""Embedding backward: scatter-add of the output gradient rows into the weight gradient."""

import triton
import triton.language as tl


@triton.jit
def embedding_bwd_kernel(grad_out_ptr, idx_ptr, grad_w_ptr, stride_go, stride_gw, dim, BLOCK_D: tl.constexpr):
    tok = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < dim
    idx = tl.load(idx_ptr + tok).to(tl.int64)
    g = tl.load(grad_out_ptr + tok * stride_go + cols, mask=mask, other=0.0)
    tl.atomic_add(grad_w_ptr + idx * stride_gw + cols, g, mask=mask)


def embedding_bwd(grad_out, idx, grad_w):
    embedding_bwd_kernel[(idx.numel(),)](grad_out, idx, grad_w, grad_out.stride(0), grad_w.stride(0),
                                         grad_out.shape[1], BLOCK_D=triton.next_power_of_2(grad_out.shape[1]))
