# expect: none
"""A quantisation helper written with tl.abs / tl.max / tl.extra rounding; the builtin abs is only used
on a constexpr inside it."""

import torch
import triton
import triton.language as tl


@triton.jit
def _absmax_scale(x, QMAX: tl.constexpr):
    amax = tl.max(tl.abs(x), axis=0)
    return tl.maximum(amax, 1e-8) / abs(QMAX)


@triton.jit
def _quant_kernel(x_ptr, q_ptr, s_ptr, n_cols, stride, QMAX: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    scale = _absmax_scale(x, QMAX)
    q = tl.floor(x / scale + 0.5)
    tl.store(q_ptr + row * stride + cols, q.to(tl.int8), mask=mask)
    tl.store(s_ptr + row, scale)


def quant(x):
    rows, cols = x.shape
    q = torch.empty(x.shape, dtype=torch.int8, device=x.device)
    s = torch.empty(rows, dtype=torch.float32, device=x.device)
    x = x.contiguous()
    _quant_kernel[(rows,)](x, q, s, cols, x.stride(0), QMAX=127, BLOCK=triton.next_power_of_2(cols))
    return q, s
