# expect: KW001
"""Scale kernel: the load is masked, the store was forgotten."""

import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, out_ptr, scale, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * scale)


def scale(x, out, s):
    n = x.numel()
    _scale_kernel[(triton.cdiv(n, 2048),)](x, out, s, n, BLOCK=2048)
