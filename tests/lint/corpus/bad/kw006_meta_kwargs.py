# expect: KW006
"""Autotuned kernel with configs in a module list, launched with a **kwargs dict that sets a tuned key."""

import triton
import triton.language as tl

_CONFIGS = [triton.Config({"ROWS": r}, num_warps=w) for r, w in ((1, 4), (2, 8), (4, 8))]


@triton.autotune(configs=_CONFIGS, key=["n_cols"])
@triton.jit
def _rms_kernel(x_ptr, y_ptr, stride, n_rows, n_cols, eps, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    offs = rows[:, None].to(tl.int64) * stride + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)[:, None]
    tl.store(y_ptr + offs, y, mask=mask)


def rms(x, y, eps=1e-6):
    n_rows, n_cols = x.shape
    opts = {"BLOCK_N": triton.next_power_of_2(n_cols), "ROWS": 2}
    _rms_kernel[lambda m: (triton.cdiv(n_rows, m["ROWS"]),)](x, y, x.stride(0), n_rows, n_cols, eps, **opts)
