# expect: none
"""Liger-style RMSNorm forward: pointers advanced per row in int64, masks everywhere, fp32 math."""

import triton
import triton.language as tl


@triton.jit
def _rms_norm_forward_kernel(Y_ptr, Y_row_stride, X_ptr, X_row_stride, W_ptr, RSTD_ptr, n_cols, eps, offset,
                             BLOCK_SIZE: tl.constexpr):
    row_idx = tl.program_id(0).to(tl.int64)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    Y_ptr += row_idx * Y_row_stride
    X_ptr += row_idx * X_row_stride
    RSTD_ptr += row_idx
    X_row = tl.load(X_ptr + col_offsets, mask=mask, other=0).to(tl.float32)
    W_row = tl.load(W_ptr + col_offsets, mask=mask, other=0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(X_row * X_row, axis=0) / n_cols + eps)
    tl.store(RSTD_ptr, rstd)
    tl.store(Y_ptr + col_offsets, (X_row * rstd * (offset + W_row)).to(Y_ptr.dtype.element_ty), mask=mask)


def rms_norm_forward(X, W, Y, RSTD, eps, offset=0.0):
    n_rows, n_cols = X.shape
    _rms_norm_forward_kernel[(n_rows,)](Y, Y.stride(0), X, X.stride(0), W, RSTD, n_cols, eps, offset,
                                        BLOCK_SIZE=triton.next_power_of_2(n_cols))
