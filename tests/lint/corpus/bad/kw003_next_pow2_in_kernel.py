# expect: KW003
"""Block size computed inside the kernel with triton.next_power_of_2 from a runtime argument."""

import triton
import triton.language as tl


@triton.jit
def argmax_kernel(x_ptr, out_ptr, stride, n_cols, MAX_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    width = triton.next_power_of_2(n_cols)
    cols = tl.arange(0, MAX_BLOCK)
    mask = (cols < n_cols) & (cols < width)
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=float("-inf"))
    tl.store(out_ptr + row, tl.argmax(x, axis=0))


def argmax(x, out):
    argmax_kernel[(x.shape[0],)](x, out, x.stride(0), x.shape[1], MAX_BLOCK=triton.next_power_of_2(x.shape[1]))
