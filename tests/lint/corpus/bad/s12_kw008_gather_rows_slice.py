# expect: KW008
"""Row gather for a MoE dispatch: rows of a hidden-state slice (hidden[:, :d_model]) are copied by index
with n_cols as the row stride."""

import torch
import triton
import triton.language as tl


@triton.jit
def gather_rows_kernel(src_ptr, idx_ptr, dst_ptr, n_cols, BLOCK_N: tl.constexpr):
    i = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    src_row = tl.load(idx_ptr + i).to(tl.int64)
    cols = j * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    v = tl.load(src_ptr + src_row * n_cols + cols, mask=mask)
    tl.store(dst_ptr + i * n_cols + cols, v, mask=mask)


def gather_rows(hidden, idx, d_model):
    src = hidden[:, :d_model]
    out = torch.empty((idx.numel(), d_model), device=hidden.device, dtype=hidden.dtype)
    gather_rows_kernel[(idx.numel(), triton.cdiv(d_model, 256))](src, idx, out, d_model, BLOCK_N=256)
    return out
