# expect: KW003
"""Dev: Huber loss with the builtin abs() in a helper on a loaded block."""

import triton
import triton.language as tl


@triton.jit
def _huber(d, delta):
    a = abs(d)
    return tl.where(a < delta, 0.5 * d * d, delta * (a - 0.5 * delta))


@triton.jit
def huber_kernel(x_ptr, y_ptr, out_ptr, n, delta, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    d = tl.load(x_ptr + offs, mask=m, other=0.0) - tl.load(y_ptr + offs, mask=m, other=0.0)
    tl.store(out_ptr + offs, _huber(d, delta), mask=m)


def huber(x, y, delta=1.0):
    out = x.new_empty(x.shape)
    huber_kernel[(triton.cdiv(x.numel(), 512),)](x, y, out, x.numel(), delta, BLOCK=512)
    return out
