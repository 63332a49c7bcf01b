# expect: KW008
"""SwiGLU on a fused gate/up projection: the wrapper splits the [T, 2F] output with chunk(), which gives
views with row stride 2F, and the kernel indexes both with row * n_cols."""

import torch
import triton
import triton.language as tl


@triton.jit
def _swiglu_fwd_kernel(a_ptr, b_ptr, c_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    program_id = tl.program_id(0).to(tl.int64)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    a_row = tl.load(a_ptr + program_id * n_cols + col_offsets, mask=mask, other=0).to(tl.float32)
    b_row = tl.load(b_ptr + program_id * n_cols + col_offsets, mask=mask, other=0)
    c_row = a_row * tl.sigmoid(a_row) * b_row
    tl.store(c_ptr + program_id * n_cols + col_offsets, c_row, mask=mask)


def swiglu_fwd(gate_up):
    gate, up = gate_up.chunk(2, dim=-1)
    n_rows, n_cols = gate.shape
    out = torch.empty((n_rows, n_cols), device=gate.device, dtype=gate.dtype)
    _swiglu_fwd_kernel[(n_rows,)](gate, up, out, n_cols, BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return out
