"""Occupancy arithmetic against hand-computed examples (no compile)."""

from __future__ import annotations

import pytest

from kernelworks.hardware import GPUS
from kernelworks.inspect.occupancy import occupancy

H100, A100 = GPUS["H100-SXM"], GPUS["A100-SXM4-80GB"]


@pytest.mark.parametrize(
    ("gpu", "regs", "smem", "warps", "blocks", "limiters"),
    [
        # 32 regs → 1024 per warp; 16384/1024 = 16 warps per sub-partition → 64 warps = 16 blocks of 4;
        # threads 2048/128 = 16 too: full occupancy, both limits tie
        pytest.param(H100, 32, 0, 4, 16, ("registers", "threads"), id="full"),
        # 128 regs → 4096 per warp → 4 per sub-partition → 16 warps = 2 blocks of 8 (25%)
        pytest.param(H100, 128, 0, 8, 2, ("registers",), id="regs-128"),
        # 50 regs round up to 56 → 1792 per warp → 9 per sub-partition → 36 warps → 2 blocks of 16 (50%)
        pytest.param(H100, 50, 1088, 16, 2, ("registers",), id="regs-rounded-to-8"),
        # 80 regs → 2560 per warp → 6 per sub-partition = 24 warps (a whole-SM division would say 25)
        pytest.param(H100, 80, 0, 1, 24, ("registers",), id="sub-partitions"),
        # A100: 48 KiB + 1 KiB reserve per block; 164 KiB / 49 KiB = 3 blocks
        pytest.param(A100, 32, 48 * 1024, 4, 3, ("shared memory",), id="smem-a100"),
        # 16 regs, 1 warp: registers allow 128 blocks, threads 64, the block limit 32 wins
        pytest.param(H100, 16, 0, 1, 32, ("blocks",), id="block-limit"),
        # more shared memory than one block may have on an A100 (163 KiB): cannot launch
        pytest.param(A100, 32, 200 * 1024, 4, 0, ("shared memory",), id="smem-too-big"),
        # 256 registers per thread is past the 255 limit
        pytest.param(H100, 256, 0, 4, 0, ("registers",), id="regs-too-many"),
    ],
)
def test_occupancy_examples(gpu, regs, smem, warps, blocks, limiters) -> None:
    occ = occupancy(gpu, registers=regs, shared_bytes=smem, num_warps=warps)
    assert occ.blocks_per_sm == blocks
    assert occ.warps_per_sm == blocks * warps
    assert occ.limiters == limiters
    assert occ.fraction == pytest.approx(blocks * warps / 64)


def test_fraction_and_limiter() -> None:
    occ = occupancy(H100, registers=128, shared_bytes=0, num_warps=8)
    assert (occ.warps_per_sm, occ.max_warps_per_sm, occ.fraction, occ.limiter) == (16, 64, 0.25, "registers")
    assert occ.blocks_by == {"registers": 2, "shared memory": 228, "threads": 8, "blocks": 32}
