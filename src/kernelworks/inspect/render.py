"""Text for ``kw inspect``: one block per kernel, and a table when several kernels or configs are compared."""

from __future__ import annotations

from collections.abc import Sequence

from kernelworks.inspect.report import KernelReport
from kernelworks.inspect.targets import Target
from kernelworks.tables import fmt_num, markdown_table, text_table


def target_line(target: Target) -> str:
    """``sm_90 (H100-SXM: 132 SMs, 64k registers, 228 KiB shared, 64 warps per SM)``."""
    g = target.gpu
    return (f"{target.name} ({g.name}: {g.sm_count} SMs, {g.regs_per_sm // 1024}k registers, "
            f"{g.smem_per_sm // 1024} KiB shared, {g.max_threads_per_sm // 32} warps per SM)")


def _bytes(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n >= 10 * 1024 else f"{n} B"


def _widths(counts: dict[int, int]) -> str:
    return "/".join(f"{n}×{w}b" for w, n in sorted(counts.items(), reverse=True)) or "0"


def mix_line(r: KernelReport) -> str:
    """The instruction mix in one line, global accesses with their widths."""
    m = r.mix
    parts = [f"{m.total} total", f"tensor {m.tensor_core}",
             f"FFMA {m.count('FFMA', 'FFMA2')} FADD {m.count('FADD', 'FADD2')} FMUL {m.count('FMUL', 'FMUL2')}",
             f"MUFU {m.mufu}", f"LDG {_widths(m.global_loads)}", f"STG {_widths(m.global_stores)}"]
    if m.tma:
        parts.append(f"TMA {m.tma}")
    if m.cp_async:
        parts.append(f"LDGSTS {m.cp_async}")
    parts += [f"shared {m.shared} (LDS {m.count('LDS')} STS {m.count('STS')} LDSM {m.count('LDSM')})",
              f"local {m.local}", f"BAR {m.barriers}"]
    return " · ".join(parts)


def format_report(r: KernelReport) -> str:
    """One kernel: launch, signature, resources, occupancy, instruction mix, warnings."""
    occ = r.occupancy
    head = f"{r.name}  [{r.mode}]  num_warps={r.num_warps} num_stages={r.num_stages}"
    if r.grid is not None:
        head += f"  grid={r.grid}"
    if r.launches > 1:
        head += f"  ×{r.launches} launches"
    sig = " ".join(f"{k}={v}{'/16' if k in r.divisible else ''}" for k, v in r.signature.items()
                   if v != "constexpr")
    consts = " ".join(f"{k}={v!r}" for k, v in r.constexprs.items()) or "—"
    waves = f" · {fmt_num(r.waves)} waves over {r.sm_count} SMs" if r.waves is not None else ""
    blocks = f"{occ.blocks_per_sm} block{'' if occ.blocks_per_sm == 1 else 's'}"
    lines = [
        head,
        f"  constexprs    {consts}",
        f"  signature     {sig}   (/16: divisible by 16)",
        f"  resources     {r.registers} registers/thread · spills {r.stack_bytes} B stack + {r.local_bytes} B "
        f"local · {_bytes(r.shared_bytes)} shared/block (+1 KiB system reserve)",
        f"  occupancy     {blocks} = {occ.warps_per_sm}/{occ.max_warps_per_sm} warps per SM "
        f"({occ.fraction:.0%}), limited by {', '.join(occ.limiters) or '—'}{waves}",
        f"  instructions  {mix_line(r)}",
    ]
    if r.config:
        lines.insert(1, f"  config        {r.config}")
    if r.warnings:
        lines += [f"  warning       {w}" for w in r.warnings]
    else:
        lines.append("  warnings      none")
    return "\n".join(lines)


TABLE_HEADERS = ("config", "kernel", "mode", "warps", "regs", "spill B", "smem", "blocks/SM", "occupancy",
                 "limiter", "tensor", "LDG", "STG", "warnings")


def format_table(reports: Sequence[KernelReport], *, markdown: bool = False) -> str:
    """One row per kernel (per config): the figures to compare side by side."""
    rows = []
    for r in reports:
        cfg = ",".join(f"{k}={v}" for k, v in (r.config or {}).items()) or "default"
        rows.append([cfg, r.name, r.mode, r.num_warps, r.registers, r.spill_bytes, _bytes(r.shared_bytes),
                     r.occupancy.blocks_per_sm, f"{r.occupancy.fraction:.0%}", r.occupancy.limiter,
                     r.mix.tensor_core, _widths(r.mix.global_loads), _widths(r.mix.global_stores),
                     len(r.warnings)])
    return (markdown_table if markdown else text_table)(TABLE_HEADERS, rows)
