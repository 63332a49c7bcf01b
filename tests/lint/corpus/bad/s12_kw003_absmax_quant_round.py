# expect: KW003
"""Per-row int8 quantisation: scale from the row's absmax, values rounded with the builtin round()."""

import torch
import triton
import triton.language as tl


@triton.jit
def _quant_rowwise_kernel(x_ptr, q_ptr, scale_ptr, n_cols, stride_x, stride_q, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    absmax = tl.max(tl.abs(x), axis=0)
    scale = tl.maximum(absmax, 1e-8) / 127.0
    q = round(x / scale)
    tl.store(q_ptr + row * stride_q + cols, q.to(tl.int8), mask=mask)
    tl.store(scale_ptr + row, scale)


def quant_rowwise(x):
    n_rows, n_cols = x.shape
    q = torch.empty_like(x, dtype=torch.int8)
    scale = torch.empty(n_rows, device=x.device, dtype=torch.float32)
    _quant_rowwise_kernel[(n_rows,)](x, q, scale, n_cols, x.stride(0), q.stride(0),
                                     BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return q, scale
