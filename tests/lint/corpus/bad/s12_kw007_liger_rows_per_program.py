# expect: KW007
"""Liger-style RMSNorm backward: each program owns rows_per_program rows and walks them with an int32 row
index, so row_idx * stride wraps on a 2^31-element activation."""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_backward_kernel(dY_ptr, dY_row_stride, X_ptr, X_row_stride, RSTD_ptr, W_ptr, dW_ptr, dW_row_stride,
                              n_rows, n_cols, rows_per_program, BLOCK_SIZE: tl.constexpr):
    row_block_id = tl.program_id(0)
    row_start = row_block_id * rows_per_program
    row_end = tl.minimum((row_block_id + 1) * rows_per_program, n_rows)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    dW_row = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    W_row = tl.load(W_ptr + col_offsets, mask=mask, other=0.0).to(tl.float32)
    for row_idx in range(row_start, row_end):
        dY_row = tl.load(dY_ptr + row_idx * dY_row_stride + col_offsets, mask=mask, other=0.0).to(tl.float32)
        X_row = tl.load(X_ptr + row_idx * X_row_stride + col_offsets, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD_ptr + row_idx)
        m = dY_row * W_row
        dX_row = rstd * m - rstd * rstd * rstd / n_cols * tl.sum(m * X_row, axis=0) * X_row
        dW_row += dY_row * (X_row * rstd)
        tl.store(dY_ptr + row_idx * dY_row_stride + col_offsets, dX_row, mask=mask)
    tl.store(dW_ptr + row_block_id * dW_row_stride + col_offsets, dW_row, mask=mask)


def rms_norm_backward(dY, X, W, RSTD, sm_count=132):
    n_rows, n_cols = dY.shape
    rows_per_program = math.ceil(n_rows / sm_count)
    _dW = torch.empty((sm_count, n_cols), dtype=torch.float32, device=W.device)
    _rms_norm_backward_kernel[(sm_count,)](dY, dY.stride(0), X, X.stride(0), RSTD, W, _dW, _dW.stride(0), n_rows,
                                           n_cols, rows_per_program, BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return dY, _dW.sum(dim=0).to(W.dtype)
