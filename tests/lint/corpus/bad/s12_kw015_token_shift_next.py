# expect: KW015
"""RWKV-style token shift over a flattened sequence: the next token is read with the current token's mask."""

import torch
import triton
import triton.language as tl


@triton.jit
def token_shift_diff_kernel(x_ptr, out_ptr, n_tokens, BLOCK: tl.constexpr):
    o_t = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m_t = o_t < n_tokens
    b_x = tl.load(x_ptr + o_t, mask=m_t, other=0.0).to(tl.float32)
    b_next = tl.load(x_ptr + o_t + 1, mask=m_t, other=0.0).to(tl.float32)
    tl.store(out_ptr + o_t, b_next - b_x, mask=m_t)


def token_shift_diff(x):
    out = torch.empty_like(x)
    n = x.numel()
    token_shift_diff_kernel[(triton.cdiv(n, 512),)](x, out, n, BLOCK=512)
    return out
