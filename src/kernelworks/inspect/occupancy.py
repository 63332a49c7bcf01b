"""Occupancy: how many blocks of a kernel fit on one SM at once, and which resource runs out first.

The arithmetic of CUDA's occupancy calculator for compute capability 8.0 and later:

* **registers** are allocated per warp in units of 256 (``regs/thread`` rounded up to a multiple of 8, × 32
  lanes), out of four SM sub-partitions that each hold a quarter of the register file; a warp lives in one
  sub-partition, so the warps that fit are ``4 · floor((regs_per_sm / 4) / regs_per_warp)``, and a block
  needs all its warps (``floor(warps / warps_per_block)`` blocks);
* **shared memory**: the kernel's bytes plus 1 KiB the driver reserves per block, in 128-byte units;
* **threads**: ``max_threads_per_sm / threads_per_block``;
* **blocks**: the hardware's per-SM block limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelworks.hardware import GPUSpec

WARP_SIZE = 32
REG_ALLOC_UNIT = 256
"""Registers are handed to a warp 256 at a time: regs/thread rounded up to a multiple of 8."""
SUB_PARTITIONS = 4
"""An SM's register file is split among four schedulers; a warp's registers come from one of them."""
MAX_REGS_PER_BLOCK = 65536
SMEM_RESERVED_PER_BLOCK = 1024
"""Shared memory the CUDA driver keeps per resident block (sm_80 and later)."""
SMEM_ALLOC_UNIT = 128

LIMITERS = ("registers", "shared memory", "threads", "blocks")


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks and warps per SM, the resources that bound them, and the fraction of the SM's warps.

    ``limiters`` names every resource that alone would allow no more blocks (several can tie; the first is
    reported as ``limiter``). ``blocks_per_sm == 0`` means the kernel cannot launch on this GPU at all.
    """

    blocks_per_sm: int
    warps_per_sm: int
    max_warps_per_sm: int
    limiters: tuple[str, ...]
    blocks_by: dict[str, int]

    @property
    def fraction(self) -> float:
        """Resident warps over the SM's maximum (1.0 = full occupancy)."""
        return self.warps_per_sm / self.max_warps_per_sm if self.max_warps_per_sm else 0.0

    @property
    def limiter(self) -> str:
        """The first of :attr:`limiters` in the order registers, shared memory, threads, blocks."""
        return self.limiters[0] if self.limiters else ""


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def blocks_by_registers(gpu: GPUSpec, registers: int, num_warps: int) -> int:
    """Blocks per SM the register file allows (0 when one block alone exceeds a limit)."""
    regs = max(registers, 1)
    if regs > gpu.max_regs_per_thread:
        return 0
    per_warp = _round_up(regs * WARP_SIZE, REG_ALLOC_UNIT)
    if per_warp * num_warps > MAX_REGS_PER_BLOCK:
        return 0
    warps = SUB_PARTITIONS * ((gpu.regs_per_sm // SUB_PARTITIONS) // per_warp)
    return warps // num_warps


def blocks_by_shared(gpu: GPUSpec, shared_bytes: int) -> int:
    """Blocks per SM shared memory allows (0 when the kernel asks for more than one block may have)."""
    if shared_bytes > gpu.smem_per_block:
        return 0
    per_block = _round_up(shared_bytes + SMEM_RESERVED_PER_BLOCK, SMEM_ALLOC_UNIT)
    return gpu.smem_per_sm // per_block


def occupancy(gpu: GPUSpec, *, registers: int, shared_bytes: int, num_warps: int) -> Occupancy:
    """Occupancy of a kernel using ``registers`` per thread and ``shared_bytes`` per block at ``num_warps``.

    Example: on an H100 (64k registers, 2048 threads), 128 registers at 8 warps gives
    ``4 · floor(16384 / 4096) = 16`` warps = 2 blocks, 25%, limited by registers.
    """
    max_warps = gpu.max_threads_per_sm // WARP_SIZE
    threads = num_warps * WARP_SIZE
    by = {
        "registers": blocks_by_registers(gpu, registers, num_warps),
        "shared memory": blocks_by_shared(gpu, shared_bytes),
        "threads": gpu.max_threads_per_sm // threads if threads <= 1024 else 0,
        "blocks": gpu.max_blocks_per_sm,
    }
    blocks = min(by.values())
    limiters = tuple(name for name in LIMITERS if by[name] == blocks)
    return Occupancy(blocks, blocks * num_warps, max_warps, limiters, by)
