# expect: KW016
"""Row-block RMSNorm with block pointers: rows are tiled in blocks of BLOCK_R and the hidden dimension is
padded to a power of two, but neither dimension is boundary-checked."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_rows_fwd_kernel(X, W, Y, n_rows, n_cols, stride_x, stride_y, eps,
                             BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    i_r = tl.program_id(0)
    p_x = tl.make_block_ptr(X, (n_rows, n_cols), (stride_x, 1), (i_r * BLOCK_R, 0), (BLOCK_R, BLOCK_C), (1, 0))
    p_y = tl.make_block_ptr(Y, (n_rows, n_cols), (stride_y, 1), (i_r * BLOCK_R, 0), (BLOCK_R, BLOCK_C), (1, 0))
    o_c = tl.arange(0, BLOCK_C)
    b_w = tl.load(W + o_c, mask=o_c < n_cols, other=0.0).to(tl.float32)
    b_x = tl.load(p_x).to(tl.float32)
    b_rstd = 1.0 / tl.sqrt(tl.sum(b_x * b_x, axis=1) / n_cols + eps)
    tl.store(p_y, (b_x * b_rstd[:, None] * b_w[None, :]).to(p_y.dtype.element_ty))


def rmsnorm_rows(x, w, eps=1e-6):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    BLOCK_C = triton.next_power_of_2(n_cols)
    _rmsnorm_rows_fwd_kernel[(triton.cdiv(n_rows, 8),)](x, w, y, n_rows, n_cols, x.stride(0), y.stride(0), eps,
                                                         BLOCK_R=8, BLOCK_C=BLOCK_C)
    return y
