# expect: none
"""Helpers calling helpers (Liger-style): a tile helper builds offsets and masks, a load helper takes them,
a math helper works on blocks with tl.* only."""

import torch
import triton
import triton.language as tl


@triton.jit
def _row_cols(n_cols, BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    return cols, cols < n_cols


@triton.jit
def _load_row(ptr, row, stride, n_cols, BLOCK_SIZE: tl.constexpr):
    cols, mask = _row_cols(n_cols, BLOCK_SIZE)
    return tl.load(ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _store_row(ptr, row, stride, vals, n_cols, BLOCK_SIZE: tl.constexpr):
    cols, mask = _row_cols(n_cols, BLOCK_SIZE)
    tl.store(ptr + row * stride + cols, vals.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gelu_tanh(x):
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + (2.0 * tl.sigmoid(2.0 * inner) - 1.0))


@triton.jit
def _geglu(a, b):
    return _gelu_tanh(a) * b


@triton.jit
def _geglu_forward_kernel(a_ptr, b_ptr, c_ptr, stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    a = _load_row(a_ptr, row, stride, n_cols, BLOCK_SIZE)
    b = _load_row(b_ptr, row, stride, n_cols, BLOCK_SIZE)
    _store_row(c_ptr, row, stride, _geglu(a, b), n_cols, BLOCK_SIZE)


def geglu_forward(a, b):
    a, b = a.contiguous(), b.contiguous()
    n_rows, n_cols = a.shape
    c = torch.empty_like(a)
    _geglu_forward_kernel[(n_rows,)](a, b, c, c.stride(0), n_cols, BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return c
