# expect: none
"""Stream-K style fix-up over partials [n_tiles, SPLITS, N]: each program takes a per-tile lock with atomic_cas,
bumps an int32 semaphore (one slot per program, grid == number of tiles) and the last split reduces."""

import torch
import triton
import triton.language as tl


@triton.jit
def tile_done_kernel(partial_ptr, stride_pt, stride_ps, out_ptr, sem_ptr, lock_ptr, N, SPLITS: tl.constexpr,
                     BLOCK: tl.constexpr):
    tile = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    while tl.atomic_cas(lock_ptr + tile, 0, 1) == 1:
        pass
    arrived = tl.atomic_add(sem_ptr + tile, 1)
    if arrived == SPLITS - 1:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for s in tl.static_range(SPLITS):
            p = partial_ptr + tile.to(tl.int64) * stride_pt + s * stride_ps
            acc += tl.load(p + cols, mask=mask, other=0.0)
        tl.store(out_ptr + tile.to(tl.int64) * N + cols, acc, mask=mask)  # out: allocated contiguous below
    tl.atomic_xchg(lock_ptr + tile, 0)


def tile_done(partial, n_tiles, N, splits):
    out = torch.empty(n_tiles, N, device=partial.device, dtype=torch.float32)
    sem = torch.zeros(n_tiles, dtype=torch.int32, device=partial.device)
    lock = torch.zeros(n_tiles, dtype=torch.int32, device=partial.device)
    tile_done_kernel[(n_tiles,)](partial, partial.stride(0), partial.stride(1), out, sem, lock, N, SPLITS=splits,
                                 BLOCK=triton.next_power_of_2(N))
    return out
