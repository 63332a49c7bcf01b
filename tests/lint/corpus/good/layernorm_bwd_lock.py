# expect: none
"""LayerNorm dW/dB partial sums: a spin lock (atomic_cas/atomic_xchg) and plain stores, no float atomics."""

import triton
import triton.language as tl


@triton.jit
def _ln_bwd_dwdb(DY, X, Mean, Rstd, DW, DB, Lock, stride, N, GROUP_SIZE_M: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    row64 = row.to(tl.int64)
    x = tl.load(X + row64 * stride + cols, mask=mask, other=0).to(tl.float32)
    dy = tl.load(DY + row64 * stride + cols, mask=mask, other=0).to(tl.float32)
    xhat = (x - tl.load(Mean + row)) * tl.load(Rstd + row)
    lock_id = row % GROUP_SIZE_M
    Lock += lock_id
    Count = Lock + GROUP_SIZE_M
    DW = DW + lock_id * N + cols
    DB = DB + lock_id * N + cols
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = tl.load(Count)
    partial_dw = dy * xhat
    partial_db = dy
    if count == 0:
        tl.atomic_xchg(Count, 1)
    else:
        partial_dw += tl.load(DW, mask=mask)
        partial_db += tl.load(DB, mask=mask)
    tl.store(DW, partial_dw, mask=mask)
    tl.store(DB, partial_db, mask=mask)
    tl.atomic_xchg(Lock, 0)


def ln_bwd_dwdb(dy, x, mean, rstd, dw, db, lock):
    M, N = x.shape
    _ln_bwd_dwdb[(M,)](dy, x, mean, rstd, dw, db, lock, x.stride(0), N, GROUP_SIZE_M=64,
                       BLOCK_N=triton.next_power_of_2(N))
