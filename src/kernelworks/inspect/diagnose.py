"""``kw diagnose``: measured time + the op's cost model + the compiled kernels' resources -> a verdict.

The verdict names the regime (memory-, compute- or latency-bound), how far the op is from its roofline,
the limiter the compiled code shows (spills, occupancy, narrow accesses, missing tensor cores, too few
programs), and the next rungs of the optimisation ladder to try, in order (shared/PERF.md): tile sweep →
warps → stages → memory access → fusion → Hopper features (TMA, persistent grid, warp specialisation).

The regime comes from what the call achieved, not from its length alone: the fraction of the copy bandwidth
and of the matrix peak it reached (Nsight Compute's DRAM and SM throughput when it ran, else the cost model's
bytes and FLOPs over the time), and whether the compiled kernels can fill the GPU (occupancy, programs per
SM). A call under ~20 µs is launch-latency-bound; a longer call that keeps neither memory nor compute busy
while its kernels leave the SMs short of warps or programs is latency-bound too (a sequential scan at 12%
occupancy is not helped by memory advice); otherwise the busier of the two units names the regime.

:func:`classify` is pure (numbers in, verdict out) so it is tested without a GPU; :func:`diagnose_op`
does the measuring on one.
"""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelworks.bench.roofline import Roofline, roofline
from kernelworks.hardware import Ceilings
from kernelworks.inspect.report import KernelReport
from kernelworks.spec import Cost

LATENCY_MS = 0.02
"""Below ~20 µs a call is dominated by launch and host time, whatever its kernels do."""
AT_ROOFLINE = 80.0
"""% of speed of light from which only doing less work (fusion, fewer bytes) can still help much."""
BUSY = 0.5
"""Fraction of a unit's peak (copy bandwidth, matrix rate) below which it is not what the call waits on."""
STARVED_OCCUPANCY = 0.25
"""Resident warps over the SM's maximum below which too few warps are in flight to hide latency."""


@dataclass
class Diagnosis:
    """What limits one (case, mode) of an op, and what to try next."""

    op: str
    case: str
    mode: str
    median_ms: float
    cost: Cost
    line: Roofline
    regime: str
    limiters: list[str] = field(default_factory=list)
    next_rungs: list[str] = field(default_factory=list)
    kernels: list[KernelReport] = field(default_factory=list)
    ncu: dict[str, dict[str, float]] | None = None


def _kernel_limiters(kernels: list[KernelReport], sm_count: int) -> list[str]:
    out: list[str] = []
    for k in kernels:
        name = k.name
        if k.uses_dot and k.mix.tensor_core == 0:
            out.append(f"{name}: matrix products on FMA units (no tensor-core instructions)")
        if k.spill_bytes or k.mix.local:
            out.append(f"{name}: register spills ({k.spill_bytes} B/thread to local memory)")
        if k.occupancy.fraction < 0.25:
            out.append(f"{name}: low occupancy ({k.occupancy.fraction:.0%}, limited by "
                       f"{' and '.join(k.occupancy.limiters)})")
        if k.mix.narrow_global and any(ty in ("*bf16", "*fp16") for ty in k.signature.values()):
            out.append(f"{name}: narrow (≤32-bit) global accesses on 16-bit data")
        if k.programs is not None and k.programs < sm_count:
            out.append(f"{name}: {k.programs} programs for {sm_count} SMs (part of the GPU idles)")
    return list(dict.fromkeys(out))  # one line per finding: a kernel compiled for several launches repeats them


def utilisation(line: Roofline, ceil: Ceilings, dtype: torch.dtype,
                ncu: dict[str, dict[str, float]] | None = None) -> tuple[float, float]:
    """``(memory, compute)`` busy fractions of the call: Nsight Compute's DRAM and SM throughput (the
    time-weighted mean over the call's kernels) when it ran, else the cost model's rates over the ceilings."""
    timed = [m for m in (ncu or {}).values() if "DRAM %" in m and "SM %" in m]
    if timed:
        weights = [m.get("time") or 1.0 for m in timed]
        total = sum(weights)
        return (sum(w * m["DRAM %"] for w, m in zip(weights, timed)) / total / 100,
                sum(w * m["SM %"] for w, m in zip(weights, timed)) / total / 100)
    peak = ceil.peak_tflops(dtype)
    return (line.gbs / ceil.bandwidth_gbs if ceil.bandwidth_gbs else 0.0,
            line.tflops / peak if peak else 0.0)


def classify(cost: Cost, median_ms: float, ceil: Ceilings, dtype: torch.dtype,
             kernels: list[KernelReport] | None = None, sm_count: int = 132,
             ncu: dict[str, dict[str, float]] | None = None) -> tuple[Roofline, str, list[str], list[str]]:
    """``(roofline, regime, limiters, next rungs)`` for a call of ``cost`` that took ``median_ms`` (with
    Nsight Compute's per-kernel figures from :func:`run_ncu` when they were measured)."""
    kernels = kernels or []
    line = roofline(cost, median_ms, ceil, dtype)
    limiters = _kernel_limiters(kernels, sm_count)
    few_programs = any("programs for" in lim for lim in limiters)
    low_occupancy = any(k.occupancy.fraction < STARVED_OCCUPANCY for k in kernels)
    if median_ms < LATENCY_MS and line.pct_sol < 50:
        regime = "latency-bound"
        rungs = ["take launch and host time out: CUDA graphs (`kw bench --cuda-graph` shows the kernel-only "
                 "time), fewer launches per call", "fuse with the neighbouring op so one launch does more work",
                 "programmatic dependent launch (launch_pdl) to overlap the prologue with the previous kernel"]
        if few_programs:
            rungs.insert(0, "split the work over more programs (several per SM)")
        return line, regime, limiters, rungs
    memory, compute = utilisation(line, ceil, dtype, ncu)
    if max(memory, compute) < BUSY and (few_programs or low_occupancy):
        limiters.insert(0, f"neither unit is busy: memory {memory:.0%} of the copy rate, compute {compute:.0%} "
                           f"of the matrix peak{' (Nsight Compute)' if ncu else ''}: the kernels wait on latency "
                           "with too few warps or programs in flight")
        rungs = []
        if few_programs:
            rungs.append("more programs: split the sequential dimension (segments of a scan, split-K / "
                         "split-row) or a persistent grid over finer work items")
        if low_occupancy:
            rungs.append("raise occupancy: fewer registers (smaller tile per thread, fewer live values) or "
                         "less shared memory (fewer stages)")
        rungs += ["more independent work per warp while it waits: prefetch the next block (num_stages), "
                  "unroll the inner loop, shorten dependent chains",
                  "fuse with neighbouring ops so the waits are shared"]
        return line, "latency-bound", limiters, rungs
    bound = line.bound
    if ncu:  # what the hardware counters saw outranks the cost model's split
        bound = "memory" if memory >= compute else "compute"
        useful = line.gbs / ceil.bandwidth_gbs if ceil.bandwidth_gbs else 0.0
        if memory > 1.5 * useful + 0.05:
            limiters.append(f"DRAM {memory:.0%} busy for {useful:.0%} of useful traffic: the kernels move more "
                            "bytes than the cost model needs (re-reads past L2, uncoalesced or partial sectors)")
    regime = f"{bound}-bound"
    rungs: list[str] = []
    if line.pct_sol >= AT_ROOFLINE:
        rungs.append(f"at {line.pct_sol:.0f}% of the {line.bound} roofline: only less work helps now — fuse with "
                     "neighbouring ops, or move fewer bytes (lower-precision storage, recompute instead of "
                     "saving)")
        return line, regime, limiters, rungs
    if any("FMA units" in lim for lim in limiters):
        rungs.append("put every product on tensor cores: tl.dot with K ≥ 16, 16-bit inputs or tf32")
    if any("spills" in lim for lim in limiters):
        rungs.append("remove the spills: smaller tiles, more warps per tile, or a looped kernel")
    if few_programs:
        rungs.append("more programs: smaller tiles, split-K / split-row, or a persistent grid")
    if any("occupancy" in lim for lim in limiters):
        rungs.append("raise occupancy: fewer registers (smaller tile per thread) or less shared memory "
                     "(fewer stages)")
    if bound == "memory":
        if any("narrow" in lim for lim in limiters):
            rungs.append("16-byte accesses: aligned pointers, strides divisible by 16 (tl.multiple_of), "
                         "unit-stride inner dimension")
        rungs += ["tile sweep (BLOCK sizes, rows per program) to put more bytes in flight",
                  "warps sweep (4/8/16) at the best tile", "more loads in flight: num_stages or loop unrolling",
                  "fewer passes over memory: keep rows in registers, cache hints (evict_last) for re-reads",
                  "fuse with neighbouring ops to remove a round trip through memory"]
    else:
        rungs += ["tile sweep (BLOCK_M/N/K; 128×256×64 is the Hopper starting point)",
                  "warps (4/8) and stages (3/4) sweep at the best tile",
                  "grouped tile order for L2 reuse",
                  "Hopper: TMA tensor descriptors, a persistent grid, warp specialisation"]
    return line, regime, limiters, rungs


# --------------------------------------------------------------------------------------------------- ncu

NCU_METRICS = {
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM %",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM %",
    "gpu__time_duration.sum": "time",
}


def parse_ncu_csv(text: str) -> dict[str, dict[str, float]]:
    """``{kernel name: {metric label: value}}`` from ``ncu --csv`` output (last launch of each kernel)."""
    start = text.find('"ID"')
    if start < 0:
        return {}
    out: dict[str, dict[str, float]] = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        metric = row.get("Metric Name", "")
        if metric not in NCU_METRICS:
            continue
        try:
            value = float(row.get("Metric Value", "").replace(",", ""))
        except ValueError:
            continue
        out.setdefault(row.get("Kernel Name", "?"), {})[NCU_METRICS[metric]] = value
    return out


def run_ncu(op: str, case: str, mode: str, kernel_regex: str = "regex:.*") -> dict[str, dict[str, float]] | None:
    """Profile one call of the op under Nsight Compute (clocks left alone); None when ncu is missing."""
    from shutil import which

    if which("ncu") is None:
        return None
    script = ("import torch, kernelworks as kw; from kernelworks.spec import load_spec; "
              "from kernelworks.bench.engine import timed_call; "
              f"s = load_spec({op!r}); c = s.find_cases([{case!r}], bench=True)[0]; "
              "x = s.inputs(c, torch.device('cuda')); "
              f"f = timed_call(s, {mode!r}, s.providers[s.subject].fn, x); f(); torch.cuda.synchronize()")
    cmd = ["ncu", "--clock-control", "none", "--csv", "-k", kernel_regex,
           "--metrics", ",".join(NCU_METRICS), sys.executable, "-c", script]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    return parse_ncu_csv(done.stdout)


# --------------------------------------------------------------------------------------------- on a GPU

def diagnose_op(op: str, case: str, mode: str = "fwd", *, with_ncu: bool = False) -> Diagnosis:
    """Time the subject provider on one bench case, inspect its kernels for this GPU, and classify."""
    from kernelworks.bench import run_bench
    from kernelworks.hardware import ceilings, current_gpu
    from kernelworks.inspect.api import inspect_op
    from kernelworks.spec import load_spec

    if not torch.cuda.is_available():
        raise RuntimeError("kw diagnose times the op and needs a CUDA GPU; `kw inspect` works without one")
    spec = load_spec(op)
    try:
        c = spec.find_cases([case], bench=True)[0]
    except KeyError:
        c = spec.find_cases([case], bench=False)[0]
    ceil = ceilings()
    assert ceil is not None
    (rec,) = run_bench(spec, [c.id], providers=[spec.subject], modes=[mode], progress=False, ceil=ceil)
    if rec.status != "ok" or rec.median_ms is None:
        raise RuntimeError(f"{op} {c.id} {mode}: {rec.status}")
    major, minor = torch.cuda.get_device_capability()
    kernels = inspect_op(spec, c, f"sm_{major}{minor}", modes=(mode,))
    gpu = current_gpu()
    ncu = run_ncu(spec.name, c.id, mode, _kernel_regex(kernels)) if with_ncu else None
    line, regime, limiters, rungs = classify(spec.cost(c, mode), rec.median_ms, ceil, c.dtype, kernels,
                                             gpu.sm_count if gpu else 132, ncu)
    return Diagnosis(spec.name, c.id, mode, rec.median_ms, spec.cost(c, mode), line, regime, limiters, rungs,
                     kernels, ncu)


def _kernel_regex(kernels: list) -> str:
    """An ncu ``-k`` filter naming the op's own kernels (not the input maker's or the reference's)."""
    names = sorted({k.name for k in kernels if getattr(k, "name", None)})
    return "regex:^(" + "|".join(re.escape(n) for n in names) + ")$" if names else "regex:.*"


def render(d: Diagnosis) -> str:
    """The verdict as text."""
    ln = d.line
    lines = [f"{d.op} · {d.case} · {d.mode}: {d.median_ms * 1e3:.1f} µs",
             f"  roofline   {ln.pct_sol:.0f}% of speed of light ({ln.gbs:.0f} GB/s, {ln.tflops:.1f} TFLOP/s; "
             f"the {ln.bound} ceiling sets it: {ln.sol_ms * 1e3:.1f} µs)",
             f"  regime     {d.regime}"]
    lines += [f"  limiter    {lim}" for lim in d.limiters] or ["  limiter    none visible in the compiled code"]
    lines += [f"  next {i + 1}.    {r}" for i, r in enumerate(d.next_rungs)]
    if d.ncu:
        for name, metrics in d.ncu.items():
            shown = ", ".join(f"{k} {v:.1f}" for k, v in metrics.items())
            lines.append(f"  ncu        {name}: {shown}")
    return "\n".join(lines)


def to_dict(d: Diagnosis) -> dict[str, Any]:
    """JSON-friendly form."""
    return {"op": d.op, "case": d.case, "mode": d.mode, "median_ms": d.median_ms, "pct_sol": d.line.pct_sol,
            "bound": d.line.bound, "regime": d.regime, "limiters": d.limiters, "next_rungs": d.next_rungs,
            "ncu": d.ncu, "kernels": [k.to_dict() for k in d.kernels]}
