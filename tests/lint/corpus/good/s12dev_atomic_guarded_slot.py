# expect: none
"""Dev: per-program int32 counters in a padded grid, guarded by an enclosing if; masked tiled atomic_min."""

import triton
import triton.language as tl


@triton.jit
def count_nonzero_kernel(x, counts, mins, n, n_progs, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    o = pid * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    v = tl.load(x + o, mask=m, other=0)
    tl.atomic_min(mins + o, v, mask=m)
    if pid < n_progs:
        tl.atomic_add(counts + pid, tl.sum((v != 0).to(tl.int32)))


def count_nonzero(x, counts, mins):
    n_progs = triton.cdiv(x.numel(), 256)
    count_nonzero_kernel[(triton.next_power_of_2(n_progs),)](x, counts, mins, x.numel(), n_progs, BLOCK=256)
