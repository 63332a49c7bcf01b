# expect: none
"""Three-point smoothing along rows: interior points only, masked with 0 < col < n_cols - 1, so both
neighbours stay in the row."""

import triton
import triton.language as tl


@triton.jit
def _smooth3_kernel(u_ptr, v_ptr, n_cols, stride_row, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    interior = (cols >= 1) & (cols < n_cols - 1)
    base = u_ptr + row * stride_row
    left = tl.load(base + cols - 1, mask=interior, other=0.0)
    mid = tl.load(base + cols, mask=interior, other=0.0)
    right = tl.load(base + cols + 1, mask=interior, other=0.0)
    tl.store(v_ptr + row * stride_row + cols, 0.25 * left + 0.5 * mid + 0.25 * right, mask=interior)


def smooth3(u):
    v = u.clone()
    rows, cols = u.shape
    _smooth3_kernel[(rows, triton.cdiv(cols, 256))](u, v, cols, u.stride(0), BLOCK_SIZE=256)
    return v
