"""Issue 17: ``kw tune`` against Helion's autotuner on the same ops and shapes (GPU).

    python3 benchmarks/tune/helion_compare.py --out $OUT/helion.json
        [--ops rms_norm,matmul] [--shapes rms_norm:8192x4096,matmul:4096x4096x4096]
        [--helion-effort quick|full|none] [--helion-budget SECONDS] [--kw-budget MINUTES] [--deadline-s 480]

Two ops, each written in Helion here (our own kernels, not Helion's examples): a matmul (bf16 operands, an fp32
accumulator per output tile, bf16 out) and an RMSNorm forward with ``kw.rms_norm``'s semantics (x ``[M, N]``
bf16, weight ``[N]`` bf16, eps; fp32 statistics and scaling, one rounding at the store). Shapes are ``MxNxK``
for matmul (``a [M, K] @ b [K, N]``, both row-major: ``8192x14336x4096`` is a Llama-3-8B gate projection at
8192 tokens) and ``MxN`` for rms_norm. For each op and shape:

1. Helion's autotuner runs on the shape (``kernel.autotune(args, force=True)``: no cached result is used) at
   ``--helion-effort`` (Helion's own default is ``full``; ``quick`` is the default here because ``full`` takes
   many minutes per kernel), optionally under ``--helion-budget`` (Helion's ``autotune_budget_seconds``);
   its wall-clock time (tracing, compiles and benchmarking included) and best config are recorded;
2. kernelworks' tuner runs on a case of the same shape (:func:`kernelworks.tune.tune_case`, the per-case engine
   of ``kernelworks.tune`` and ``kw tune``: compile gate, correctness check, timing; no cache), and its
   wall-clock time and winner are recorded;
3. Helion's tuned kernel, kw's winner (run under the spec's ``configured(winner)``), kw's default plan and
   torch (``torch.matmul``, ``F.rms_norm``) are each checked against the float64 reference under the spec's
   tolerance, then timed interleaved (``--rounds`` rounds of kernelworks' ``time_fn``: device events, L2
   flushed, host kept ahead; the median of the round medians).

Each (op, shape) runs in its own process with fresh Triton, Helion and Inductor caches, so both tuners start
cold: neither reuses compiles or tuned configs of the other, of an earlier shape or of an earlier run
(``--in-process`` runs them in this process instead, caches as they are). The JSON (``--out``) is merged into
an existing file, entry by entry (key ``op:shape``, each with the environment it was measured in), and saved
after every phase, so a run cut short (``--deadline-s``) keeps what it measured; the last thing printed is a
markdown table of the whole file (``--table-only`` prints it alone; ``--merge FILE`` folds other runs in).
Without a GPU, ``--smoke`` runs the pipeline on tiny shapes in Triton's interpreter (Helion untuned, in its
eager reference mode; times are wall-clock and meaningless).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
OPS = ("rms_norm", "matmul")
"""In the default run's order: the quick tunes first, so a ``--deadline-s`` cut falls on the largest matmul."""
DEFAULT_SHAPES = {"matmul": ("4096x4096x4096", "8192x14336x4096"), "rms_norm": ("8192x4096", "4096x8192")}
SMOKE_SHAPES = {"matmul": ("64x48x32",), "rms_norm": ("8x96",)}

_T0 = time.perf_counter()
hl: Any = None
"""``helion.language``, bound on first use (:func:`_helion`): the kernels below read it as a global, and the
orchestrating process, ``--help`` and a machine without Helion never import it."""


def log(msg: str) -> None:
    """A progress line stamped with the seconds since this process started."""
    print(f"[{time.perf_counter() - _T0:7.1f} s] {msg}", flush=True)


# ------------------------------------------------------------------------------------------ Helion kernels
# Written for this comparison. Helion turns each ``hl.tile`` loop into program ids and tile sizes that its
# autotuner picks (block sizes, warps, stages, loop orders, indexing: pointers, block pointers or TMA
# descriptors, persistent or not); the bodies are plain PyTorch on tiles.


def helion_matmul_body(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a [M, K] @ b [K, N]``: an fp32 accumulator per ``[tile_m, tile_n]`` output tile, summed over K
    tiles, rounded once to ``a``'s dtype."""
    m, k = a.size()
    _, n = b.size()
    out = torch.empty([m, n], dtype=a.dtype, device=a.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = hl.dot(a[tile_m, tile_k], b[tile_k, tile_n], acc=acc)
        out[tile_m, tile_n] = acc.to(out.dtype)
    return out


def helion_rms_norm_body(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over rows of ``x [M, N]``: ``y = x·rsqrt(mean(x²) + eps)·w`` in fp32, one rounding to ``x``'s
    dtype (``kw.rms_norm`` and the spec's reference without a residual or offset)."""
    m, _ = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        h = x[tile_m, :].to(torch.float32)
        rstd = torch.rsqrt(torch.mean(h * h, dim=-1, keepdim=True) + eps)
        out[tile_m, :] = (h * rstd * weight[:].to(torch.float32)[None, :]).to(out.dtype)
    return out


_SHIM_SOURCE = """\
try:  # written by benchmarks/tune/helion_compare.py: see _torch_shims there (torch 2.11 lacks IntelGPUError)
    from torch._inductor.runtime import triton_compat as _tc
    if not hasattr(_tc, "IntelGPUError"):
        _tc.IntelGPUError = type("IntelGPUError", (RuntimeError,), {})
except Exception:
    pass
"""


def _torch_shims() -> None:
    """Helion 1.5.1 imports ``IntelGPUError`` from ``torch._inductor.runtime.triton_compat``, which torch 2.11 (the
    GPU image's) does not define yet; Helion only tests exceptions against it, so a stand-in class that nothing
    raises keeps its meaning (no Intel GPU here). The same source as the subprocesses' ``sitecustomize``."""
    exec(_SHIM_SOURCE, {})


def _shim_subprocesses(folder: Path) -> None:
    """Helion benchmarks and precompiles its candidates in fresh Python processes, which import Helion before any
    code of ours runs there: a ``sitecustomize`` module in ``folder``, put first on ``PYTHONPATH`` for every
    process this one starts, applies :func:`_torch_shims` in them too."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_SHIM_SOURCE)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)


def _helion() -> Any:
    """Import Helion (and bind ``hl`` for the kernel bodies)."""
    global hl
    _torch_shims()
    import helion
    import helion.language

    hl = helion.language
    return helion


def _helion_kernel(op: str, args: argparse.Namespace, log_base: str) -> Any:
    """The Helion kernel of ``op`` with this run's settings: shapes baked in (Helion's default), the
    effort, an optional time budget, no progress bar, every tried config logged to ``log_base``.csv."""
    helion = _helion()
    settings: dict[str, Any] = {"static_shapes": True, "autotune_effort": args.helion_effort,
                                "autotune_progress_bar": False, "autotune_log": log_base}
    if args.helion_budget is not None:
        settings["autotune_budget_seconds"] = int(args.helion_budget)
    if args.helion_seed is not None:
        settings["autotune_random_seed"] = args.helion_seed
    if args.smoke:
        settings["ref_mode"] = helion.RefMode.EAGER  # no GPU: Helion's eager reference mode
    body = helion_matmul_body if op == "matmul" else helion_rms_norm_body
    return helion.kernel(body, **settings)


def _helion_log_counts(log_base: str) -> dict[str, int]:
    """Configs Helion's autotuner tried, by status, from its CSV log."""
    import csv

    path = Path(log_base).with_suffix(".csv")
    counts: dict[str, int] = {}
    if path.exists():
        with path.open(newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                counts[row.get("status") or "?"] = counts.get(row.get("status") or "?", 0) + 1
    return counts


# ------------------------------------------------------------------------------------------- one op/shape


def parse_shape(op: str, shape: str) -> dict[str, int]:
    """``MxNxK`` (matmul) or ``MxN`` (rms_norm) as the spec's case params."""
    dims = [int(d) for d in shape.lower().split("x")]
    if op == "matmul" and len(dims) == 3:
        return {"M": dims[0], "N": dims[1], "K": dims[2]}
    if op == "rms_norm" and len(dims) == 2:
        return {"rows": dims[0], "hidden": dims[1]}
    raise ValueError(f"shape {shape!r}: {op} takes {'MxNxK' if op == 'matmul' else 'MxN'}")


def _spec_and_case(op: str, shape: str, dtype: Any) -> tuple[Any, Any]:
    """The registered spec with one bench case of this shape (what ``kernelworks.tune(spec, [case])`` tunes)."""
    import dataclasses

    from kernelworks.spec import case, registry

    c = case(f"helion-{shape}", dtype, **parse_shape(op, shape))
    spec = registry()[op]
    return dataclasses.replace(spec, bench_cases=[c]), c


def _helion_args(op: str, inputs: Mapping[str, Any]) -> tuple[Any, ...]:
    return (inputs["a"], inputs["b"]) if op == "matmul" else (inputs["x"], inputs["weight"], inputs["eps"])


def _torch_fn(op: str, inputs: Mapping[str, Any]) -> Callable[[], Any]:
    """The torch baseline: cuBLAS through ``torch.matmul``, or ``torch.nn.functional.rms_norm``."""
    if op == "matmul":
        return lambda: torch.matmul(inputs["a"], inputs["b"])
    x, w = inputs["x"], inputs["weight"]
    return lambda: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, inputs["eps"])


def _cpu_timer(fn: Callable[[], object]) -> tuple[float, float, float]:
    """``--smoke``'s stand-in for ``time_fn``: the wall time of one call (the interpreter's: meaningless)."""
    t0 = time.perf_counter()
    fn()
    ms = (time.perf_counter() - t0) * 1e3
    return ms, ms, ms


def _gpu_timer(fn: Callable[[], object]) -> tuple[float, float, float]:
    from kernelworks.bench.timing import time_fn

    t = time_fn(fn)
    return t.median_ms, t.p20_ms, t.p80_ms


def _summary(config: Mapping[str, Any] | None) -> str:
    if config is None:
        return "none"
    return "default" if not config else ", ".join(f"{k}={v}" for k, v in config.items())


def compare_one(op: str, shape: str, args: argparse.Namespace, save: Callable[[dict[str, Any]], None]) -> dict:
    """Tune ``op`` on ``shape`` with Helion, then with kw; time the results interleaved. ``save`` is called with
    the record after every phase (a run killed later keeps what it had)."""
    from kernelworks.check.compare import first_failure
    from kernelworks.check.engine import as_outputs, upcast
    from kernelworks.runtime.device import default_device
    from kernelworks.tune import tune_case

    device = default_device()
    gpu = device.type == "cuda"
    timer = _gpu_timer if gpu else _cpu_timer
    rec: dict[str, Any] = {"op": op, "shape": shape, "helion_effort": args.helion_effort,
                           "helion_budget_s": args.helion_budget, "kw_budget_min": args.kw_budget}
    dtype = torch.bfloat16
    spec, case = _spec_and_case(op, shape, dtype)
    torch.manual_seed(0)
    inputs = spec.inputs(case, device)
    ref = as_outputs(spec.reference(**upcast(inputs)))
    base = as_outputs(spec.reference(**inputs))
    tol = spec.case_tolerance(case)
    if gpu:  # CUDA context, cuBLAS and the allocator warm before either tuner's clock starts
        torch.matmul(torch.randn(256, 256, device=device), torch.randn(256, 256, device=device))
        torch.cuda.synchronize()

    # 1. Helion's autotuner
    hk = None
    log(f"{op} {shape}: Helion autotune (effort {args.helion_effort}) ...")
    with tempfile.TemporaryDirectory(prefix="helion-log-") as tmp:
        log_base = str(Path(tmp) / "autotune")
        try:
            hk = _helion_kernel(op, args, log_base)
            hargs = _helion_args(op, inputs)
            t0 = time.perf_counter()
            if args.smoke:  # the eager reference mode has no configs to tune: one traced call stands in
                hk(*hargs)
                config: Any = "eager reference mode"
                rec["helion_config"] = {"ref_mode": "eager"}
            else:
                config = hk.autotune(hargs, force=True)
                torch.cuda.synchronize()
                rec["helion_config"] = json.loads(config.to_json())
            rec["helion_tune_s"] = time.perf_counter() - t0
            rec["helion_configs_tried"] = _helion_log_counts(log_base)
            log(f"{op} {shape}: Helion tuned in {rec['helion_tune_s']:.1f} s "
                f"({rec['helion_configs_tried']}): {config}")
        except Exception as e:  # an import, tracing or tuning failure is a result here, not the end of the run
            hk = None
            rec["helion_error"] = f"{type(e).__name__}: {e}"[:2000]
            log(f"{op} {shape}: Helion failed: {rec['helion_error'][:300]}")
    save(rec)

    # 2. kernelworks' tuner (the per-case engine of kernelworks.tune / kw tune; cache neither read nor written)
    log(f"{op} {shape}: kw tune ({len(spec.configs)} configs declared) ...")

    def on_candidate(c: Any) -> None:
        ms = "" if c.ms is None else f" {c.ms:.4f} ms"
        log(f"  kw candidate {_summary(c.config)}: {c.verdict}{ms}{' — ' + c.detail[:120] if c.detail else ''}")

    t0 = time.perf_counter()
    res = tune_case(spec, case, strategy=args.kw_strategy, device=device, timer=None if gpu else _cpu_timer,
                    budget_s=None if args.kw_budget is None else args.kw_budget * 60, on_candidate=on_candidate)
    rec["kw_tune_s"] = time.perf_counter() - t0
    rec["kw_config"] = res.winner
    rec["kw_reason"] = res.reason
    rec["kw_strategy"] = res.strategy
    rec["kw_gate_target"] = res.target
    verdicts: dict[str, int] = {}
    for c in res.candidates:
        verdicts[c.verdict] = verdicts.get(c.verdict, 0) + 1
    rec["kw_configs_tried"] = verdicts
    log(f"{op} {shape}: kw tuned in {rec['kw_tune_s']:.1f} s ({verdicts}): {_summary(res.winner)} — {res.reason}")
    save(rec)

    # 3. every contender checked, then timed interleaved
    fn = spec.providers[spec.subject].fn
    winner = res.winner or {}

    def kw_winner() -> Any:
        with spec.configured(winner) if winner else contextlib.nullcontext():
            return fn(**inputs)

    contenders: dict[str, Callable[[], Any]] = {}
    if hk is not None:
        hargs = _helion_args(op, inputs)
        contenders["helion"] = lambda: hk(*hargs)
    if res.winner is not None:
        contenders["kw"] = kw_winner
    contenders["kw_default"] = lambda: fn(**inputs)
    contenders["torch"] = _torch_fn(op, inputs)
    checks: dict[str, str] = {}
    for name, call in list(contenders.items()):
        try:
            bad = first_failure(as_outputs(call()), ref, base, tol)
        except Exception as e:
            bad = f"raised {type(e).__name__}: {e}"[:300]
            del contenders[name]  # nothing to time
        checks[name] = bad or "ok"
        log(f"{op} {shape}: check {name}: {checks[name]}")
    rec["checks"] = checks
    rounds: dict[str, list[tuple[float, float, float]]] = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:  # rotate who goes first
            rounds[name].append(timer(contenders[name]))
    for name, got in rounds.items():
        rec[f"{name}_round_ms"] = [g[0] for g in got]  # in round order: drift shows
        med, p20, p80 = sorted(got)[len(got) // 2]
        rec[f"{name}_ms"], rec[f"{name}_p20_ms"], rec[f"{name}_p80_ms"] = med, p20, p80
    if "kw_ms" not in rec and "kw_default_ms" in rec:  # no winner: kw's answer is its default
        rec["kw_ms"] = rec["kw_default_ms"]
    _ratios(rec)
    log(f"{op} {shape}: " + ", ".join(f"{n} {rec[f'{n}_ms']:.4f} ms" for n in names if f"{n}_ms" in rec))
    save(rec)
    return rec


def _ratios(rec: dict[str, Any]) -> None:
    """Speed and tuning-time ratios; ``meets_issue``: kw's config at least as fast as Helion's (median), found in
    at most half of Helion's tuning time."""
    kw = rec.get("kw_ms")
    for name in ("helion", "kw_default", "torch"):
        if kw and rec.get(f"{name}_ms"):
            rec[f"{name}_over_kw"] = rec[f"{name}_ms"] / kw
    if rec.get("helion_tune_s") and rec.get("kw_tune_s") is not None:
        rec["tune_time_kw_over_helion"] = rec["kw_tune_s"] / rec["helion_tune_s"]
    if "helion_over_kw" in rec and "tune_time_kw_over_helion" in rec:
        rec["meets_issue"] = rec["helion_over_kw"] >= 1.0 and rec["tune_time_kw_over_helion"] <= 0.5
        spread = max((rec[f"{n}_p80_ms"] - rec[f"{n}_p20_ms"]) / rec[f"{n}_ms"] for n in ("helion", "kw"))
        rec["kw_within_spread_of_helion"] = rec["helion_over_kw"] >= 1.0 - spread


# ------------------------------------------------------------------------------------------ the JSON file


def environment() -> dict[str, Any]:
    """kw bench's provenance (GPU, torch, triton, CUDA, Python, commit, date) plus Helion's version."""
    from importlib.metadata import PackageNotFoundError, version

    from kernelworks.bench.results import environment as bench_environment

    try:
        helion_version = version("helion")
    except PackageNotFoundError:
        helion_version = None
    env = bench_environment(None)
    return {**env, "gpu": env["gpu"] or "cpu (Triton interpreter)", "helion": helion_version}


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {"environment": {}, "results": {}}


def merge(doc: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """``other``'s entries into ``doc`` (same key replaced), each entry tagged with the environment it was
    measured in, so merged runs keep their own GPU, versions and commit."""
    env = other.get("environment", {})
    for key, rec in other.get("results", {}).items():
        doc.setdefault("results", {})[key] = {**rec, "environment": rec.get("environment", env)}
    doc["environment"] = env or doc.get("environment", {})
    return doc


def save(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    tmp.replace(path)


def _fmt(v: Any, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def table(doc: dict[str, Any]) -> str:
    """Markdown: per op and shape, both tuners' times and configs' speed, kw's default and torch beside."""
    lines = ["| op | shape | Helion effort | Helion tune s | kw tune s | kw/Helion tune | Helion ms | kw ms | "
             "Helion/kw | kw default ms | torch ms | kw config | meets issue |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for rec in doc.get("results", {}).values():
        note = rec.get("error") or rec.get("helion_error")
        meets = {True: "yes", False: "no"}.get(rec.get("meets_issue"), "—")
        cells = [rec["op"], rec["shape"], rec.get("helion_effort", "—"), _fmt(rec.get("helion_tune_s"), ".1f"),
                 _fmt(rec.get("kw_tune_s"), ".1f"), _fmt(rec.get("tune_time_kw_over_helion"), ".2f"),
                 _fmt(rec.get("helion_ms"), ".4f"), _fmt(rec.get("kw_ms"), ".4f"),
                 _fmt(rec.get("helion_over_kw"), ".3f"), _fmt(rec.get("kw_default_ms"), ".4f"),
                 _fmt(rec.get("torch_ms"), ".4f"), _summary(rec.get("kw_config")) if "kw_config" in rec else "—",
                 meets + (f" ({note[:80]})" if note else "")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------- driver


def _jobs(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(op, shape) pairs to run: ``--shapes`` (``op:shape``, or a bare shape for every selected op that takes
    its form), else each selected op's defaults."""
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    unknown = set(ops) - set(OPS)
    if unknown:
        raise SystemExit(f"--ops: unknown {sorted(unknown)}; known: {', '.join(OPS)}")
    if not args.shapes:
        defaults = SMOKE_SHAPES if args.smoke else DEFAULT_SHAPES
        return [(op, s) for op in ops for s in defaults[op]]
    jobs = []
    for item in (s.strip() for s in args.shapes.split(",") if s.strip()):
        op, _, shape = item.rpartition(":")
        for o in [op] if op else ops:
            if o in ops and (op or shape.count("x") == (2 if o == "matmul" else 1)):
                parse_shape(o, shape)  # a malformed shape fails here, before any GPU time is spent
                jobs.append((o, shape))
    return jobs


def _run_isolated(op: str, shape: str, args: argparse.Namespace, timeout_s: float) -> dict[str, Any]:
    """One (op, shape) in a child process of this script, caches fresh; its record (partial, with why, if the
    child died or ran out of time)."""
    with tempfile.TemporaryDirectory(prefix="helion-compare-") as tmp:
        out = Path(tmp) / "record.json"
        # cold caches for both tuners: Triton's (kw's kernels), Helion's (its best configs, which its quick effort
        # would seed from, and its kernels) and Inductor's (Helion's generated code)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "TRITON_CACHE_DIR": f"{tmp}/triton",
               "HELION_CACHE_DIR": f"{tmp}/helion", "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/inductor"}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", f"{op}:{shape}", "--worker-out", str(out),
               *_passthrough(args)]
        # its own process group: on a time-out the worker's own children (Helion's benchmark and precompile
        # processes, kw's compile workers) are stopped with it, not left holding the GPU
        proc = subprocess.Popen(cmd, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
            why = None if rc == 0 else f"worker exited {rc}"
        except subprocess.TimeoutExpired:
            why = f"timed out after {timeout_s:.0f} s (--deadline-s)"
            _stop_group(proc)
        rec = json.loads(out.read_text()) if out.exists() else {"op": op, "shape": shape}
        if why:
            rec["error"] = why
        return rec


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the worker's process group, SIGKILL after 10 s if it is still there."""
    import signal

    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _passthrough(args: argparse.Namespace) -> list[str]:
    """The options a worker needs from the parent's command line."""
    out = ["--helion-effort", args.helion_effort, "--kw-strategy", args.kw_strategy, "--rounds", str(args.rounds)]
    for flag, value in (("--helion-budget", args.helion_budget), ("--kw-budget", args.kw_budget),
                        ("--helion-seed", args.helion_seed)):
        if value is not None:
            out += [flag, str(value)]
    return out + (["--smoke"] if args.smoke else [])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("helion_compare.json"),
                   help="results JSON (merged into when it exists)")
    p.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of {', '.join(OPS)}")
    p.add_argument("--shapes", default=None,
                   help="comma-separated op:shape (matmul:MxNxK, rms_norm:MxN) or bare shapes; default: "
                        + "; ".join(f"{op} {', '.join(s)}" for op, s in DEFAULT_SHAPES.items()))
    p.add_argument("--helion-effort", choices=["none", "quick", "full"], default="quick",
                   help="Helion's autotune_effort (its own default is full; default here quick)")
    p.add_argument("--helion-budget", type=int, default=None, metavar="SECONDS",
                   help="Helion's autotune_budget_seconds per kernel (default: none)")
    p.add_argument("--helion-seed", type=int, default=0, help="Helion's autotune_random_seed (default 0)")
    p.add_argument("--kw-budget", type=float, default=None, metavar="MINUTES",
                   help="kw tune's per-case budget (default: none, every declared config)")
    p.add_argument("--kw-strategy", default="auto", choices=["auto", "exhaustive", "random", "pattern"])
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (default 5)")
    p.add_argument("--deadline-s", type=float, default=480.0,
                   help="wall-clock bound of the whole run: no shape starts after it, a running one is stopped "
                        "(its partial record kept); default 480")
    p.add_argument("--in-process", action="store_true", help="run every shape in this process (warm caches)")
    p.add_argument("--smoke", action="store_true", help="no GPU: tiny shapes, the interpreter, Helion untuned")
    p.add_argument("--merge", type=Path, action="append", default=[], metavar="FILE",
                   help="fold another run's results file into --out and print the table; runs nothing (repeatable)")
    p.add_argument("--table-only", action="store_true", help="print --out's table (after --merge), run nothing")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-out", type=Path, default=None, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.smoke:
        args.helion_effort = "none"  # Helion's autotuner times on a GPU
        args.rounds = min(args.rounds, 2)
    sys.path.insert(0, str(ROOT / "src"))  # runnable without PYTHONPATH from a checkout
    import kernelworks  # noqa: F401  (the interpreter switches on here without a GPU)

    if not args.smoke:
        _shim_subprocesses(Path(tempfile.mkdtemp(prefix="helion-compare-shim-")))
    if args.worker:  # a child of _run_isolated: one shape, its record written after every phase
        op, _, shape = args.worker.partition(":")
        env = environment()
        compare_one(op, shape, args, lambda rec: save(args.worker_out, {**rec, "environment": env}))
        return 0

    doc = load(args.out)
    for other in args.merge:
        doc = merge(doc, load(other))
    if args.merge:
        save(args.out, doc)
    if args.table_only or args.merge:
        print(table(doc))
        return 0
    if not torch.cuda.is_available() and not args.smoke:
        print("helion_compare: no CUDA GPU is visible (both tuners time on one); --smoke runs the pipeline on CPU")
        return 2
    env = environment()
    log(f"{env['gpu']}; torch {env['torch']}, triton {env['triton']}, helion {env['helion']}, commit "
        f"{env['commit']}; Helion effort {args.helion_effort}")
    jobs = _jobs(args)
    failed = 0
    for op, shape in jobs:
        left = args.deadline_s - (time.perf_counter() - _T0)
        key = f"{op}:{shape}"
        if left < 30:
            log(f"{key}: skipped, {left:.0f} s left of --deadline-s")
            continue
        if args.in_process:
            def keep(rec: dict[str, Any], key: str = key, doc: dict[str, Any] = doc,
                     env: dict[str, Any] = env) -> None:
                save(args.out, merge(doc, {"environment": env, "results": {key: rec}}))
            try:
                rec = compare_one(op, shape, args, keep)
            except Exception as e:
                rec = {**doc.get("results", {}).get(key, {"op": op, "shape": shape}),
                       "error": f"{type(e).__name__}: {e}"[:2000]}
        else:
            rec = _run_isolated(op, shape, args, left)
            env = rec.pop("environment", env)
        failed += bool(rec.get("error"))
        doc = merge(doc, {"environment": env, "results": {key: rec}})
        save(args.out, doc)
        log(f"{key}: saved to {args.out}")
    print()
    print(table(doc))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
