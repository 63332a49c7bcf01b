"""What ``kw inspect`` says about one compiled kernel: resources, occupancy, instruction mix, warnings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernelworks.inspect.occupancy import Occupancy
from kernelworks.inspect.sass import InstructionMix

LOW_OCCUPANCY = 0.25
"""Below this fraction of the SM's warps a memory-bound kernel usually cannot hide DRAM latency."""
SIXTEEN_BIT = ("*fp16", "*bf16", "*i16", "*u16")


@dataclass
class KernelReport:
    """One kernel compiled for one target.

    ``shared_bytes`` is what a block asks for (Triton's dynamic shared memory plus any static, not counting
    the 1 KiB per block the system reserves, which the occupancy adds); the spill
    figures are per thread (``stack_bytes``: the stack frame spilled registers live in). ``grid`` and
    ``launches`` come from a captured launch (None / 1 for a kernel compiled from a signature alone).
    """

    name: str
    target: str
    gpu: str
    num_warps: int
    num_stages: int
    signature: dict[str, str]
    constexprs: dict[str, Any]
    divisible: tuple[str, ...]
    registers: int
    stack_bytes: int
    local_bytes: int
    shared_bytes: int
    occupancy: Occupancy
    mix: InstructionMix
    uses_dot: bool
    sm_count: int
    ptx: str = field(default="", repr=False)
    sass: str = field(default="", repr=False)
    case: str | None = None
    mode: str = "fwd"
    grid: tuple[int, ...] | None = None
    launches: int = 1
    config: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def spill_bytes(self) -> int:
        """Per-thread local memory: the stack frame plus other local arrays."""
        return self.stack_bytes + self.local_bytes

    @property
    def programs(self) -> int | None:
        """Blocks in the launch grid."""
        if self.grid is None:
            return None
        n = 1
        for g in self.grid:
            n *= g
        return n

    @property
    def waves(self) -> float | None:
        """Grid blocks over the blocks the whole GPU holds at once (a partial last wave idles SMs)."""
        per_gpu = self.occupancy.blocks_per_sm * self.sm_count
        return None if self.programs is None or per_gpu == 0 else self.programs / per_gpu

    def to_dict(self, *, with_asm: bool = False) -> dict[str, Any]:
        """A JSON-friendly dict (PTX and SASS only when asked)."""
        occ = self.occupancy
        out = {
            "name": self.name, "target": self.target, "gpu": self.gpu, "case": self.case, "mode": self.mode,
            "config": self.config, "num_warps": self.num_warps, "num_stages": self.num_stages,
            "signature": self.signature, "constexprs": {k: repr(v) for k, v in self.constexprs.items()},
            "divisible": list(self.divisible), "grid": list(self.grid) if self.grid else None,
            "launches": self.launches, "registers": self.registers, "stack_bytes": self.stack_bytes,
            "local_bytes": self.local_bytes, "shared_bytes": self.shared_bytes,
            "occupancy": {"blocks_per_sm": occ.blocks_per_sm, "warps_per_sm": occ.warps_per_sm,
                          "fraction": occ.fraction, "limiters": list(occ.limiters), "blocks_by": occ.blocks_by},
            "waves": self.waves, "instructions": self.mix.summary(),
            "global_loads_by_bits": dict(sorted(self.mix.global_loads.items())),
            "global_stores_by_bits": dict(sorted(self.mix.global_stores.items())),
            "opcodes": dict(self.mix.opcodes.most_common()), "warnings": self.warnings,
        }
        if with_asm:
            out["ptx"], out["sass"] = self.ptx, self.sass
        return out


def _widths(counts: dict[int, int]) -> str:
    return ", ".join(f"{n}×{w}-bit" for w, n in sorted(counts.items(), reverse=True))


def diagnose(r: KernelReport) -> list[str]:
    """The warnings a report earns: a dot without tensor cores (or, on Hopper, without wgmma), spills, low
    occupancy, a block that cannot launch at all, narrow global accesses on 16-bit data."""
    out: list[str] = []
    mix, occ = r.mix, r.occupancy
    if r.uses_dot and mix.tensor_core == 0:
        out.append("tl.dot in the source but no tensor-core instruction in the SASS: the product runs on FMA "
                   "units (fp32 inputs with input_precision='ieee'? K or the tile under 16?)")
    elif r.uses_dot and r.target == "sm_90" and mix.count("HGMMA", "QGMMA", "IGMMA", "BGMMA") == 0:
        out.append("Hopper target but no wgmma (HGMMA): tl.dot fell back to mma.sync (HMMA), about half "
                   "Hopper's tensor rate; wgmma needs num_warps a multiple of 4 and a tile M of 64 or more")
    if r.spill_bytes or mix.local:
        out.append(f"spills: {r.stack_bytes} B stack + {r.local_bytes} B local per thread, "
                   f"{mix.count('STL')} STL / {mix.count('LDL')} LDL: the tile does not fit in registers "
                   f"({r.registers}/thread); use a smaller tile or more warps")
    if occ.blocks_per_sm == 0:
        stepped = occ.limiter == "shared memory" and r.num_stages > 1
        out.append(f"cannot launch on {r.gpu}: one block exceeds the SM's {occ.limiter} "
                   f"({r.registers} registers × {r.num_warps * 32} threads, {r.shared_bytes} B shared)"
                   + (f"; a kernelworks launch retries it with fewer than {r.num_stages} stages, at less "
                      "overlap of loads and math" if stepped else ""))
    elif occ.fraction < LOW_OCCUPANCY:
        out.append(f"low occupancy: {occ.warps_per_sm}/{occ.max_warps_per_sm} warps per SM "
                   f"({occ.fraction:.0%}), limited by {' and '.join(occ.limiters)}")
    sixteen = [name for name, ty in r.signature.items() if ty in SIXTEEN_BIT]
    if sixteen and mix.narrow_global:
        narrow = {w: n for w, n in (mix.global_loads + mix.global_stores).items() if w <= 32}
        pointers = [name for name, ty in r.signature.items() if ty.startswith("*")]
        hinted = set(r.divisible)
        cause = (f"every pointer is hinted 16-byte aligned here, so likely too few elements per thread: a "
                 f"128-bit access needs 8 contiguous 16-bit elements in each of the {r.num_warps * 32} threads "
                 f"(a larger block, or fewer warps)" if pointers and hinted.issuperset(pointers) else
                 f"unaligned pointers, strides and sizes not divisible by 16 (hinted here: "
                 f"{', '.join(r.divisible) or 'none'}), or fewer than 8 contiguous elements per thread "
                 f"({r.num_warps * 32} threads)")
        out.append(f"narrow global accesses: {_widths(narrow)} loads/stores on 16-bit data "
                   f"({', '.join(sixteen)}), where 128-bit ones move 8 elements each; {cause}")
    return out
