"""The engine behind ``kw bench``: every provider on the same inputs, in the same run, per case and mode.

Before a provider is timed its output is checked once against the reference (float32 upcast) under the
spec's tolerance rule, so a fast wrong answer is recorded as wrong, not as fast. After it is timed, the
probes of :mod:`kernelworks.bench.probes` look for work the timing missed (kernels on a side stream or
another thread, a result computed when read): a call they catch is recorded as ``suspect: …``, its times
kept for the reader to see but out of every comparison.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from kernelworks.bench.probes import timing_problems
from kernelworks.bench.roofline import roofline
from kernelworks.bench.timing import time_fn
from kernelworks.check.compare import compare
from kernelworks.check.engine import as_outputs, upcast, with_grad_leaves
from kernelworks.hardware import Ceilings, ceilings
from kernelworks.spec import STEP, Case, Cost, OpSpec, dtype_name


@dataclass
class BenchRecord:
    """One timed (case, mode, provider). ``status`` is ``ok``, ``skipped: …``, ``wrong: …``, ``error: …`` or
    ``suspect: …`` (timed, but the timing missed work: :mod:`kernelworks.bench.probes`)."""

    op: str
    case: str
    params: dict[str, Any]
    dtype: str
    mode: str
    provider: str
    status: str
    median_ms: float | None = None
    p20_ms: float | None = None
    p80_ms: float | None = None
    tflops: float | None = None
    gbs: float | None = None
    pct_sol: float | None = None
    bound: str | None = None
    rel_l2_err: float | None = None
    sweep: str | None = None  # the param a "sweep:<param>" tagged case varies (plotted as a line)
    series: str | None = None  # "sweep:<param>@<series>": which line (and plot) of that sweep the case is on
    peak_mb: float | None = None  # STEP mode: device memory one step allocates beyond its inputs, at peak
    host_us: float | None = None  # median host time of one call (Python + launches), µs
    cost_model: str | None = None  # why pct_sol is absent: the call beat its speed of light (a wrong cost model)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _record(spec: OpSpec, case: Case, mode: str, provider: str, status: str) -> BenchRecord:
    params = {k: v for k, v in case.params.items() if isinstance(v, (int, float, str, bool))}
    tag = next((t.split(":", 1)[1] for t in sorted(case.tags) if t.startswith("sweep:")), None)
    sweep, _, series = tag.partition("@") if tag else (None, "", "")
    return BenchRecord(spec.name, case.id, params, dtype_name(case.dtype), mode, provider, status, sweep=sweep,
                       series=series or None)


def _verify(spec: OpSpec, case: Case, out: Any, ref: tuple, base: tuple) -> tuple[bool, str, float]:
    tol = spec.case_tolerance(case)
    worst = 0.0
    for i, (o, r, b) in enumerate(zip(as_outputs(out), ref, base)):
        c = compare(f"out[{i}]", o, r, b, tol, expected_dtype=b.dtype)
        worst = max(worst, c.rel_l2 if c.rel_l2 == c.rel_l2 else float("inf"))
        if not c.passed:
            return False, c.problem, worst
    return True, "", worst


def timed_call(spec: OpSpec, mode: str, fn: Callable[..., Any], inputs: dict[str, Any]) -> Callable[[], Any]:
    """The closure to time (or profile): the forward call, the backward alone on a graph built once, or
    (:data:`STEP`) forward and backward together, the graph freed by each call."""
    if mode == "fwd":
        return lambda: fn(**inputs)
    names = [n for n in spec.grad_inputs if isinstance(inputs.get(n), torch.Tensor)]
    leaves = with_grad_leaves(inputs, names, None)
    params = [leaves[n] for n in names]

    def differentiable() -> list[torch.Tensor]:
        return [o for o in as_outputs(fn(**leaves)) if o.is_floating_point() and o.requires_grad]

    outs = differentiable()
    if mode == STEP:
        # a training step: a scalar output is a loss, and ``loss.backward()`` seeds it with exactly 1
        grads = [torch.ones_like(o) if o.dim() == 0 else torch.randn_like(o) for o in outs]
        del outs
        return lambda: torch.autograd.grad(differentiable(), params, grads)
    grads = [torch.randn_like(o) for o in outs]
    return lambda: torch.autograd.grad(outs, params, grads, retain_graph=True)


SOL_LIMIT_PCT = 102.0
"""A call above this % of speed of light has its figure dropped and flagged (``cost_model``): no kernel beats
its roofline, so the cost model is wrong; 2% of slack for timing noise against a measured copy ceiling."""


def step_cost(spec: OpSpec, case: Case, mode: str) -> Cost:
    """The spec's cost for ``mode``; :data:`STEP` costs the forward plus the backward, or the spec's own
    ``step_cost`` where a step needs less than the two apart."""
    if mode != STEP:
        return spec.cost(case, mode)
    if spec.step_cost is not None:
        return spec.step_cost(case)
    fwd, bwd = spec.cost(case, "fwd"), spec.cost(case, "bwd")
    return Cost(flops=fwd.flops + bwd.flops, bytes=fwd.bytes + bwd.bytes)


def peak_extra_mb(call: Callable[[], Any]) -> float:
    """Device memory one call of ``call`` allocates beyond what was live before it, at its peak (MB)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = call()
    torch.cuda.synchronize()
    del result
    return (torch.cuda.max_memory_allocated() - before) / 1e6


def run_bench(spec: OpSpec, cases: Iterable[str] | None = None, *, providers: Iterable[str] | None = None,
              modes: Iterable[str] | None = None, tags: Iterable[str] | None = None, verify: bool = True,
              cuda_graph: bool = False, warmup_ms: float = 25.0, rep_ms: float = 100.0,
              progress: bool = True, ceil: Ceilings | None = None, probes: bool = True) -> list[BenchRecord]:
    """Time the selected cases of ``spec`` for every available provider; needs a CUDA GPU. ``probes``: look
    for work each timing missed (:mod:`kernelworks.bench.probes`; ~50–100 ms a record)."""
    if not torch.cuda.is_available():
        raise RuntimeError("kw bench needs a CUDA GPU: timings on the CPU interpreter mean nothing. "
                           "Use `kw check` for correctness here.")
    ceil = ceil or ceilings()
    assert ceil is not None
    chosen = spec.find_cases(cases, bench=True)
    if tags is not None:
        wanted = set(tags)
        chosen = [c for c in chosen if c.tags & wanted]
    all_prov = spec.all_providers()
    names = list(providers) if providers is not None else list(all_prov)
    unknown = [n for n in names if n not in all_prov]
    if unknown:
        raise KeyError(f"spec {spec.name!r} has no provider {unknown}; known: {list(all_prov)}")
    allowed = spec.modes + ((STEP,) if "bwd" in spec.modes else ())
    modes = [m for m in (modes or spec.bench_modes) if m in allowed]

    jobs = [(c, m, p) for c in chosen for m in modes for p in names]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), desc=f"bench {spec.name}", unit="run", leave=False)
    records: list[BenchRecord] = []
    for case in chosen:
        # A fresh dynamo cache per case: the torch.compile baseline recompiles the reference for every
        # shape and grad mode, and past dynamo's recompile limit (8) it silently runs eagerly instead.
        torch._dynamo.reset()
        spec.reset_compiled()
        torch.manual_seed(0)
        inputs = spec.inputs(case, torch.device("cuda"))
        ref = base = ()
        checked = verify
        if verify:
            try:
                ref = as_outputs(spec.reference(**upcast(inputs, torch.float32)))
                base = as_outputs(spec.reference(**inputs))
            except torch.OutOfMemoryError:  # e.g. attention's materialised scores at 16k tokens
                ref = base = ()
                checked = False
                torch.cuda.empty_cache()
                warnings.warn(f"{spec.name} {case.id}: the reference does not fit in device memory; outputs "
                              "are timed unverified (rel_l2_err stays empty)", stacklevel=1)
        for mode in modes:
            cost = step_cost(spec, case, mode)
            for name in names:
                prov = all_prov[name]
                ok, why = prov.available()
                if not ok or (mode != "fwd" and not prov.supports_backward):
                    records.append(_record(spec, case, mode, name, f"skipped: {why or 'no backward'}"))
                else:
                    records.append(_bench_one(spec, case, mode, prov.fn, inputs, ref, base, cost, ceil,
                                              verify=checked, cuda_graph=cuda_graph, warmup_ms=warmup_ms,
                                              rep_ms=rep_ms, name=name, probes=probes))
                if bar is not None:
                    bar.update(1)
                gc.collect()
                torch.cuda.empty_cache()
        del inputs, ref, base
    if bar is not None:
        bar.close()
    return records


def _bench_one(spec: OpSpec, case: Case, mode: str, fn: Callable[..., Any], inputs: dict[str, Any],
               ref: tuple, base: tuple, cost: Any, ceil: Ceilings, *, verify: bool, cuda_graph: bool,
               warmup_ms: float, rep_ms: float, name: str, probes: bool = True) -> BenchRecord:
    rec = _record(spec, case, mode, name, "ok")
    try:
        if verify and mode == "fwd":
            good, problem, err = _verify(spec, case, fn(**inputs), ref, base)
            rec.rel_l2_err = err
            if not good:
                rec.status = f"wrong: {problem}"
                return rec
        call = timed_call(spec, mode, fn, inputs)
        if mode == STEP:
            rec.peak_mb = peak_extra_mb(call)
        t = time_fn(call, warmup_ms=warmup_ms, rep_ms=rep_ms, cuda_graph=cuda_graph)
        suspect = timing_problems(call, t) if probes else []
    except NotImplementedError as e:
        rec.status = f"skipped: unsupported ({e})"
        return rec
    except Exception as e:  # recorded, not raised: one provider's failure must not lose the others' numbers
        rec.status = f"error: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        return rec
    line = roofline(cost, t.median_ms, ceil, case.dtype)
    rec.median_ms, rec.p20_ms, rec.p80_ms, rec.host_us = t.median_ms, t.p20_ms, t.p80_ms, t.host_us
    rec.tflops, rec.gbs, rec.pct_sol, rec.bound = line.tflops, line.gbs, line.pct_sol, line.bound
    if suspect:
        rec.status = "suspect: " + "; ".join(suspect)
        warnings.warn(f"kw bench {rec.op} {rec.case} {rec.mode} {rec.provider}: {rec.status}", stacklevel=2)
    return flag_beyond_speed_of_light(rec)


def flag_beyond_speed_of_light(rec: BenchRecord) -> BenchRecord:
    """Drop a % of speed of light above :data:`SOL_LIMIT_PCT` from ``rec`` and say why (``cost_model``, and
    a warning): the figure is the cost model's error, not the kernel's speed."""
    if rec.pct_sol is not None and rec.pct_sol > SOL_LIMIT_PCT:
        rec.cost_model = (f"{rec.pct_sol:.0f}% of speed of light: the {rec.op} cost model counts more "
                          f"{'bytes' if rec.bound == 'memory' else 'FLOPs'} than this {rec.mode} call needs")
        rec.pct_sol = None
        warnings.warn(f"kw bench {rec.op} {rec.case} {rec.mode} {rec.provider}: {rec.cost_model}", stacklevel=2)
    return rec
