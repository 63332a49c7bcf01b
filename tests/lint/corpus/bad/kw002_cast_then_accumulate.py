# expect: KW002
"""Weighted sum over experts: the accumulator is cast down to fp16 before the loop."""

import triton
import triton.language as tl


@triton.jit
def moe_combine_kernel(x_ptr, w_ptr, out_ptr, n_experts, hidden, stride_e, stride_t, BLOCK_H: tl.constexpr):
    tok = tl.program_id(0).to(tl.int64)
    pid_h = tl.program_id(1)
    offs = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    mask = offs < hidden
    acc = tl.zeros([BLOCK_H], dtype=tl.float32).to(tl.float16)
    for e in range(n_experts):
        w = tl.load(w_ptr + tok * n_experts + e)
        x = tl.load(x_ptr + e * stride_e + tok * stride_t + offs, mask=mask, other=0.0)
        acc = acc + w * x
    tl.store(out_ptr + tok * hidden + offs, acc, mask=mask)


def moe_combine(x, w, out):
    n_experts, n_tok, hidden = x.shape
    moe_combine_kernel[(n_tok, triton.cdiv(hidden, 512))](x, w, out, n_experts, hidden, x.stride(0), x.stride(1),
                                                           BLOCK_H=512)
