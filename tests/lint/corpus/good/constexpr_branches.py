# expect: none
"""Activation chosen by a string constexpr; module-level tl.constexpr constants; local constexpr."""

import triton
import triton.language as tl

SQRT1_2 = tl.constexpr(0.7071067811865476)


@triton.jit
def act_kernel(x_ptr, y_ptr, n, ACT: tl.constexpr, BLOCK: "tl.constexpr"):
    HALF: tl.constexpr = BLOCK // 2
    offs = tl.program_id(0) * BLOCK + tl.arange(0, HALF * 2)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if ACT == "gelu":
        y = 0.5 * x * (1.0 + tl.erf(x * SQRT1_2))
    elif ACT == "silu":
        y = x * tl.sigmoid(x)
    else:
        y = tl.maximum(x, 0.0)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def act(x, y, name="gelu"):
    act_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), ACT=name, BLOCK=1024)
