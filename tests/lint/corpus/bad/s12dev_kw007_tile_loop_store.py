# expect: KW007
"""Dev: persistent elementwise kernel whose tile counter (starting at the program id) scales a runtime
row stride in int32."""

import triton
import triton.language as tl


@triton.jit
def scale_rows_persistent(x_ptr, stride_row, n_rows, n_cols, alpha, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    for r in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        p = x_ptr + r * stride_row + cols
        tl.store(p, tl.load(p, mask=cols < n_cols) * alpha, mask=cols < n_cols)


def scale_rows(x, alpha):
    scale_rows_persistent[(128,)](x, x.stride(0), x.shape[0], x.shape[1], alpha,
                                  BLOCK=triton.next_power_of_2(x.shape[1]))
