# expect: none
"""SwiGLU over a packed [rows, 2n] gate-up buffer, columns masked, halves addressed by n."""

import triton
import triton.language as tl


@triton.jit
def swiglu_packed_kernel(gu_ptr, y_ptr, stride_gu, stride_y, n, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n
    g = tl.load(gu_ptr + row * stride_gu + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * stride_gu + n + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, (g * tl.sigmoid(g) * u).to(y_ptr.dtype.element_ty), mask=mask)


def swiglu_packed(gu, y):
    rows, n = y.shape
    swiglu_packed_kernel[(rows, triton.cdiv(n, 1024))](gu, y, gu.stride(0), y.stride(0), n, BLOCK=1024)
