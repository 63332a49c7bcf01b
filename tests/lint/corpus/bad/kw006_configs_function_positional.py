# expect: KW006
"""Configs built by a function; the launch passes the tuned block sizes positionally."""

import triton
import triton.language as tl


def get_configs():
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=3) for bm in (32, 64) for bn in (64, 128)]


@triton.autotune(configs=get_configs(), key=["M", "N"])
@triton.jit
def add_bias_kernel(x_ptr, b_ptr, M, N, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    p = x_ptr + rm[:, None].to(tl.int64) * stride + rn[None, :]
    tl.store(p, tl.load(p, mask=mask) + tl.load(b_ptr + rn, mask=rn < N)[None, :], mask=mask)


def add_bias(x, b):
    M, N = x.shape
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))  # noqa: E731
    add_bias_kernel[grid](x, b, M, N, x.stride(0), 64, 128)
