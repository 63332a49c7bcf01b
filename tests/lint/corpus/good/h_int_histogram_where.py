# expect: none
"""Quantise to int8 with per-row absmax: scalar store of the scale, builtins only on constexprs."""

import triton
import triton.language as tl


@triton.jit
def quant_int8_kernel(x_ptr, q_ptr, s_ptr, stride_x, stride_q, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(x), axis=0), 1e-8)
    scale = amax / 127.0
    q = tl.extra.cuda.libdevice.rint(x / scale)
    q = tl.minimum(tl.maximum(q, -127.0), 127.0).to(tl.int8)
    tl.store(q_ptr + row * stride_q + cols, q, mask=mask)
    tl.store(s_ptr + row, scale)


def quant_int8(x, q, s):
    quant_int8_kernel[(x.shape[0],)](x, q, s, x.stride(0), q.stride(0), x.shape[1],
                                     BLOCK=triton.next_power_of_2(x.shape[1]))
