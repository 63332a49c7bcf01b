# expect: none
"""(seq blocks, heads, batch) grid for a kernel reading all three program-id axes."""

import triton
import triton.language as tl


@triton.jit
def add_pos_kernel(x_ptr, pos_ptr, stride_b, stride_h, stride_t, seq_len, HEAD_DIM: tl.constexpr,
                   BLOCK_T: tl.constexpr):
    pid_t = tl.program_id(0)
    off_h = tl.program_id(1).to(tl.int64)
    off_b = tl.program_id(2).to(tl.int64)
    t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    d = tl.arange(0, HEAD_DIM)
    mask = t[:, None] < seq_len
    ptrs = x_ptr + off_b * stride_b + off_h * stride_h + t[:, None] * stride_t + d[None, :]
    pos = tl.load(pos_ptr + t[:, None] * HEAD_DIM + d[None, :], mask=mask, other=0.0)
    tl.store(ptrs, tl.load(ptrs, mask=mask, other=0.0) + pos, mask=mask)


def add_pos(x, pos):
    B, H, T, D = x.shape
    add_pos_kernel[(triton.cdiv(T, 64), H, B)](x, pos, x.stride(0), x.stride(1), x.stride(2), T, HEAD_DIM=D,
                                              BLOCK_T=64)
