# expect: none
"""Offsets, masks and math in helper @triton.jit functions, like kernelworks' own activations."""

import triton
import triton.language as tl


@triton.jit
def _tile(n_rows, n_cols, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    i_t = tl.program_id(0)
    n_col_blocks = tl.cdiv(n_cols, BLOCK_N)
    o_m = ((i_t // n_col_blocks) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    o_n = (i_t % n_col_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    return o_m, o_n, (o_m < n_rows)[:, None] & (o_n < n_cols)[None, :]


@triton.jit
def _at(p, stride, o_m, o_n):
    return p + o_m[:, None] * stride + o_n[None, :]


@triton.jit
def _silu(x):
    return x * tl.sigmoid(x)


@triton.jit
def silu_kernel(p_x, p_y, n_rows, n_cols, s_x, s_y, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    o_m, o_n, m_t = _tile(n_rows, n_cols, BLOCK_N, ROWS)
    b_x = tl.load(_at(p_x, s_x, o_m, o_n), mask=m_t, other=0).to(tl.float32)
    tl.store(_at(p_y, s_y, o_m, o_n), _silu(b_x).to(p_y.dtype.element_ty), mask=m_t)


def silu(x, y):
    n_rows, n_cols = x.shape
    grid = (triton.cdiv(n_rows, 4) * triton.cdiv(n_cols, 1024),)
    silu_kernel[grid](x, y, n_rows, n_cols, x.stride(0), y.stride(0), BLOCK_N=1024, ROWS=4)
