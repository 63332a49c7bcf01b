# expect: none
"""Unsloth-style RMSNorm whose wrapper flattens and calls .contiguous() before the launch, so the kernel can
step rows by n_cols."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_layernorm_forward(Y, X, W, r, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row_idx = tl.program_id(0).to(tl.int64)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    X_row = tl.load(X + row_idx * n_cols + col_offsets, mask=mask, other=0).to(tl.float32)
    W_row = tl.load(W + col_offsets, mask=mask, other=0)
    inv_var = tl.math.rsqrt(tl.sum(X_row * X_row, axis=0) / n_cols + eps)
    tl.store(r + row_idx, inv_var)
    tl.store(Y + row_idx * n_cols + col_offsets, (X_row * inv_var).to(W_row.dtype) * W_row, mask=mask)


def rms_layernorm(X, W, eps=1e-6):
    shape = X.shape
    X = X.view(-1, shape[-1]).contiguous()
    n_rows, n_cols = X.shape
    Y = torch.empty((n_rows, n_cols), dtype=X.dtype, device=X.device)
    r = torch.empty(n_rows, dtype=torch.float32, device=X.device)
    _rms_layernorm_forward[(n_rows,)](Y, X, W, r, n_cols, eps, BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return Y.view(*shape)
