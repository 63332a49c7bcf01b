# expect: KW008
"""LayerNorm backward (dx only) that advances to its row with X += row * N."""

import triton
import triton.language as tl


@triton.jit
def _ln_bwd_dx(DX, DY, X, W, Mean, Rstd, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    X += row * N
    DY += row * N
    DX += row * N
    x = tl.load(X + cols, mask=mask, other=0).to(tl.float32)
    dy = tl.load(DY + cols, mask=mask, other=0).to(tl.float32)
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = tl.where(mask, (x - mean) * rstd, 0.0)
    wdy = tl.where(mask, w * dy, 0.0)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    tl.store(DX + cols, (wdy - (xhat * c1 + c2)) * rstd, mask=mask)


def ln_bwd_dx(dx, dy, x, w, mean, rstd):
    M, N = x.shape
    _ln_bwd_dx[(M,)](dx, dy, x, w, mean, rstd, N, BLOCK_N=triton.next_power_of_2(N))
