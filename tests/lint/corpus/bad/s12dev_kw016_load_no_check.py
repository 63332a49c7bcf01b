# expect: KW016
"""Dev: a row-block copy over block pointers with no boundary check on the ragged rows."""

import triton
import triton.language as tl


@triton.jit
def copy_rows_kernel(x, y, n_rows, stride, D: tl.constexpr, BR: tl.constexpr):
    i = tl.program_id(0)
    px = tl.make_block_ptr(x, shape=(n_rows, D), strides=(stride, 1), offsets=(i * BR, 0), block_shape=(BR, D),
                           order=(1, 0))
    py = tl.make_block_ptr(y, shape=(n_rows, D), strides=(stride, 1), offsets=(i * BR, 0), block_shape=(BR, D),
                           order=(1, 0))
    tl.store(py, tl.load(px), boundary_check=(0,))


def copy_rows(x, y):
    copy_rows_kernel[(triton.cdiv(x.shape[0], 32),)](x, y, x.shape[0], x.stride(0), D=x.shape[1], BR=32)
