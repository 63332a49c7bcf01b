# expect: KW009
"""MoE unpermute: expert outputs scatter-added back to token rows with weights."""

import triton
import triton.language as tl


@triton.jit
def moe_scatter_kernel(y_ptr, w_ptr, idx_ptr, out_ptr, stride_y, stride_o, hidden, BLOCK_H: tl.constexpr):
    i = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask = h < hidden
    tok = tl.load(idx_ptr + i).to(tl.int64)
    w = tl.load(w_ptr + i)
    y = tl.load(y_ptr + i * stride_y + h, mask=mask, other=0.0)
    tl.atomic_add(out_ptr + tok * stride_o + h, (y * w).to(tl.float32), mask=mask)


def moe_scatter(y, w, idx, out):
    n, hidden = y.shape
    moe_scatter_kernel[(n, triton.cdiv(hidden, 1024))](y, w, idx, out, y.stride(0), out.stride(0), hidden,
                                                      BLOCK_H=1024)
