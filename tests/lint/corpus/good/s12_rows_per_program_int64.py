# expect: none
"""Liger-style RMSNorm backward with rows_per_program rows per program, walked with an int64 row index."""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_bwd_dx_kernel(dY_ptr, dY_row_stride, X_ptr, X_row_stride, RSTD_ptr, W_ptr, dX_ptr, dX_row_stride,
                            n_rows, n_cols, rows_per_program, BLOCK_SIZE: tl.constexpr):
    row_block_id = tl.program_id(0).to(tl.int64)
    row_start = row_block_id * rows_per_program
    row_end = tl.minimum((row_block_id + 1) * rows_per_program, n_rows)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    W_row = tl.load(W_ptr + col_offsets, mask=mask, other=0.0).to(tl.float32)
    for row_idx in range(row_start, row_end):
        dY_row = tl.load(dY_ptr + row_idx * dY_row_stride + col_offsets, mask=mask, other=0.0).to(tl.float32)
        X_row = tl.load(X_ptr + row_idx * X_row_stride + col_offsets, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD_ptr + row_idx)
        m = dY_row * W_row
        dX_row = rstd * m - rstd * rstd * rstd / n_cols * tl.sum(m * X_row, axis=0) * X_row
        tl.store(dX_ptr + row_idx * dX_row_stride + col_offsets, dX_row, mask=mask)


def rms_norm_bwd_dx(dY, X, W, RSTD, sm_count=132):
    n_rows, n_cols = dY.shape
    rows_per_program = math.ceil(n_rows / sm_count)
    dX = torch.empty_like(X)
    _rms_norm_bwd_dx_kernel[(sm_count,)](dY, dY.stride(0), X, X.stride(0), RSTD, W, dX, dX.stride(0), n_rows,
                                         n_cols, rows_per_program, BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return dX
