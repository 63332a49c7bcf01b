# expect: none
"""Block pointers whose second dimension is a whole constexpr head dimension (block == shape), so only
the sequence dimension needs boundary_check."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate_half_kernel(X, Y, seq_len, stride_xh, stride_xt, HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr):
    i_t, i_h = tl.program_id(0), tl.program_id(1).to(tl.int64)
    p_x = tl.make_block_ptr(X + i_h * stride_xh, (seq_len, HEAD_DIM), (stride_xt, 1), (i_t * BLOCK_T, 0),
                            (BLOCK_T, HEAD_DIM), (1, 0))
    p_y = tl.make_block_ptr(Y + i_h * stride_xh, (seq_len, HEAD_DIM), (stride_xt, 1), (i_t * BLOCK_T, 0),
                            (BLOCK_T, HEAD_DIM), (1, 0))
    b_x = tl.load(p_x, boundary_check=(0,))
    x1, x2 = tl.split(tl.reshape(b_x, (BLOCK_T, 2, HEAD_DIM // 2)).permute(0, 2, 1))
    tl.store(p_y, tl.reshape(tl.join(-x2, x1).permute(0, 2, 1), (BLOCK_T, HEAD_DIM)), boundary_check=(0,))


def rotate_half(x):
    H, T, D = x.shape
    y = torch.empty_like(x)
    _rotate_half_kernel[(triton.cdiv(T, 64), H)](x, y, T, x.stride(0), x.stride(1), HEAD_DIM=D, BLOCK_T=64)
    return y
