"""Read a compiled kernel's cubin with the tools Triton's wheel ships (``cuobjdump``): resources and SASS.

Nothing here needs a GPU. :func:`resource_usage` gives what ptxas allotted (registers per thread, stack and
local bytes, static shared memory); :func:`instruction_mix` counts the SASS opcodes that say where a kernel's
time can go: tensor-core ops, fp32 math, MUFU (exp2/log2/rcp), global accesses by width, shared and local
memory traffic, barriers.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


def _cuobjdump() -> str:
    from triton import knobs

    return knobs.nvidia.cuobjdump.path


def _run_cuobjdump(cubin: bytes, *flags: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        done = subprocess.run([_cuobjdump(), *flags, str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"cuobjdump {' '.join(flags)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def disassemble(cubin: bytes) -> str:
    """The SASS of a cubin as ``cuobjdump -sass`` prints it."""
    return _run_cuobjdump(cubin, "-sass")


# ------------------------------------------------------------------------------------------------ resources


@dataclass(frozen=True)
class Resources:
    """What ptxas allotted one thread / one block (``cuobjdump --dump-resource-usage``).

    ``stack_bytes`` is the per-thread stack frame (where spilled registers go), ``local_bytes`` other
    per-thread local memory; ``static_shared_bytes`` is shared memory fixed in the binary (Triton's own is
    dynamic and comes from the kernel's metadata instead; on sm_90+ ptxas lists the 1 KiB system reserve
    here whenever the kernel uses shared memory).
    """

    registers: int
    stack_bytes: int
    local_bytes: int
    static_shared_bytes: int


_RESOURCE_RE = re.compile(r"Function (?P<name>\S+):\s*\n\s*REG:(?P<reg>\d+) STACK:(?P<stack>\d+) "
                          r"SHARED:(?P<shared>\d+) LOCAL:(?P<local>\d+)")


def parse_resource_usage(text: str, function: str | None = None) -> Resources:
    """Resources of ``function`` (default: the first function listed) from ``--dump-resource-usage`` text."""
    found = {m["name"]: m for m in _RESOURCE_RE.finditer(text)}
    if not found:
        raise RuntimeError(f"no function in cuobjdump's resource usage:\n{text}")
    m = found.get(function or "") or next(iter(found.values()))
    return Resources(int(m["reg"]), int(m["stack"]), int(m["local"]), int(m["shared"]))


def resource_usage(cubin: bytes, function: str | None = None) -> Resources:
    """:func:`parse_resource_usage` of a cubin."""
    return parse_resource_usage(_run_cuobjdump(cubin, "--dump-resource-usage"), function)


# ------------------------------------------------------------------------------------------ instruction mix

# An instruction line of `cuobjdump -sass`: /*0410*/  @!P0 HGMMA.64x64x16.F32 R24, ... ;
_INSTR_RE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?(?P<op>[A-Z][A-Z0-9_]*)(?P<mods>(?:\.\w+)*)")

FP32_OPS = ("FFMA", "FADD", "FMUL")
GLOBAL_ATOMIC_OPS = ("ATOMG", "RED", "ATOM")
SHARED_OPS = ("LDS", "STS", "LDSM", "STSM", "ATOMS")
LOCAL_OPS = ("LDL", "STL")
TMA_OPS = ("UTMALDG", "UTMASTG", "UTMAREDG", "UTMAPF", "UBLKCP")


def access_width(mods: str) -> int:
    """Bits per thread of a memory access from its SASS modifiers: ``.128``, ``.64``, ``.U16``, ``.U8``, or the
    32 bits an unsuffixed ``LDG.E`` moves."""
    parts = mods.split(".")
    for bits in ("256", "128", "64"):
        if bits in parts:
            return int(bits)
    if any(p in ("U16", "S16", "16") for p in parts):
        return 16
    if any(p in ("U8", "S8", "8") for p in parts):
        return 8
    return 32


@dataclass
class InstructionMix:
    """Opcode counts of one kernel's SASS, with global loads and stores split by access width (bits)."""

    opcodes: Counter[str] = field(default_factory=Counter)
    global_loads: Counter[int] = field(default_factory=Counter)
    global_stores: Counter[int] = field(default_factory=Counter)

    def count(self, *ops: str) -> int:
        """Instructions whose base opcode is one of ``ops``."""
        return sum(self.opcodes[op] for op in ops)

    @property
    def total(self) -> int:
        """Every instruction but ``NOP`` padding."""
        return sum(n for op, n in self.opcodes.items() if op != "NOP")

    @property
    def tensor_core(self) -> int:
        """Tensor-core ops: HMMA/IMMA (mma.sync), HGMMA/QGMMA/IGMMA (wgmma), UTC*MMA (tcgen05)."""
        return sum(n for op, n in self.opcodes.items() if op.endswith("MMA"))

    @property
    def fp32(self) -> int:
        """FFMA + FADD + FMUL (and their paired ``…2`` forms on Blackwell)."""
        return self.count(*FP32_OPS, *(op + "2" for op in FP32_OPS))

    @property
    def mufu(self) -> int:
        """Special-function unit ops (exp2, log2, rcp, rsqrt, sin, cos)."""
        return self.count("MUFU")

    @property
    def shared(self) -> int:
        """Shared-memory loads and stores (LDS, STS, LDSM, STSM, ATOMS)."""
        return self.count(*SHARED_OPS)

    @property
    def local(self) -> int:
        """Local-memory loads and stores (LDL, STL): register spills, or arrays indexed at run time."""
        return self.count(*LOCAL_OPS)

    @property
    def barriers(self) -> int:
        """Block-wide barriers (BAR)."""
        return self.count("BAR")

    @property
    def tma(self) -> int:
        """Tensor Memory Accelerator copies (UTMALDG, UTMASTG, bulk copies)."""
        return self.count(*TMA_OPS)

    @property
    def cp_async(self) -> int:
        """Asynchronous global→shared copies (LDGSTS, Ampere's cp.async)."""
        return self.count("LDGSTS")

    @property
    def narrow_global(self) -> int:
        """Global loads and stores moving 32 bits or fewer per thread."""
        return sum(n for w, n in (self.global_loads + self.global_stores).items() if w <= 32)

    def summary(self) -> dict[str, int]:
        """The headline counts, in display order."""
        return {"total": self.total, "tensor": self.tensor_core, "FFMA": self.count("FFMA", "FFMA2"),
                "FADD": self.count("FADD", "FADD2"), "FMUL": self.count("FMUL", "FMUL2"), "MUFU": self.mufu,
                "LDG": self.count("LDG"), "STG": self.count("STG"), "TMA": self.tma, "LDGSTS": self.cp_async,
                "shared": self.shared, "local": self.local, "BAR": self.barriers}


def instruction_mix(sass: str) -> InstructionMix:
    """Count the opcodes of ``cuobjdump -sass`` text (every function in it)."""
    mix = InstructionMix()
    for line in sass.splitlines():
        m = _INSTR_RE.match(line)
        if m is None:
            continue
        op, mods = m["op"], m["mods"]
        mix.opcodes[op] += 1
        if op == "LDG":
            mix.global_loads[access_width(mods)] += 1
        elif op == "STG":
            mix.global_stores[access_width(mods)] += 1
    return mix
