# expect: KW009
"""LayerNorm weight gradient summed over rows with float atomics."""

import triton
import triton.language as tl


@triton.jit
def ln_dw_kernel(dy_ptr, xhat_ptr, dw_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    dy = tl.load(dy_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    xhat = tl.load(xhat_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    tl.atomic_add(dw_ptr + cols, dy * xhat, mask=mask)


def ln_dw(dy, xhat, dw):
    ln_dw_kernel[(dy.shape[0],)](dy, xhat, dw, dy.stride(0), dy.shape[1], BLOCK=triton.next_power_of_2(dy.shape[1]))
