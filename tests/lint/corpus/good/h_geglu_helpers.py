# expect: none
"""GeGLU with tanh-GELU in a helper, 2-D row/col masks, and int64 rows."""

import triton
import triton.language as tl


@triton.jit
def _gelu_tanh(x):
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return x * tl.sigmoid(2.0 * inner)


@triton.jit
def geglu_kernel(g_ptr, u_ptr, y_ptr, n_rows, n_cols, stride_g, stride_u, stride_y,
                 BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    m = (r < n_rows)[:, None] & (c < n_cols)[None, :]
    r64 = r.to(tl.int64)[:, None]
    g = tl.load(g_ptr + r64 * stride_g + c[None, :], mask=m, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + r64 * stride_u + c[None, :], mask=m, other=0.0).to(tl.float32)
    tl.store(y_ptr + r64 * stride_y + c[None, :], (_gelu_tanh(g) * u).to(y_ptr.dtype.element_ty), mask=m)


def geglu(g, u, y):
    n_rows, n_cols = g.shape
    grid = (triton.cdiv(n_rows, 8), triton.cdiv(n_cols, 512))
    geglu_kernel[grid](g, u, y, n_rows, n_cols, g.stride(0), u.stride(0), y.stride(0), BLOCK_R=8, BLOCK_C=512)
