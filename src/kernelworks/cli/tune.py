"""``kw tune OP|FILE:SPEC``: correctness-gated search over the configs a spec declares (GPU)."""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="search a spec's configs: each compiled, checked against the reference, then "
                                    "timed (GPU)",
                       description="Searches the configs the spec declares on each bench case. Each candidate is "
                                   "first compiled for this GPU in parallel worker processes (--compile-workers, "
                                   "--compile-timeout): one that fails to compile, times out, needs more shared "
                                   "memory than the GPU has or spills more than --spill-limit bytes per thread "
                                   "is recorded and never run. The rest run twice against the reference (the "
                                   "same results both times, the inputs unchanged) and once more on other "
                                   "values: one that raises or is wrong is recorded and never chosen; configs "
                                   "that all compile to the op's own kernels are marked not applied (the spec's "
                                   "hook reaches no launch); the right ones are "
                                   "timed, the fastest three re-timed interleaved, and the simpler config wins "
                                   "unless the faster one beats it by more than the measured spread. Strategies: "
                                   "exhaustive, random, pattern (one knob at a time from the op's own choice); "
                                   "auto = pattern on spaces of more than 48 configs, else exhaustive. Winners "
                                   "are cached per GPU, triton version and source; --write also puts them in the "
                                   "op's shipped table for this GPU, which the op reads at plan time.")
    p.add_argument("target", help="registered op name or path/to/file.py:SPEC")
    p.add_argument("--case", action="append", help="bench case name or id (repeatable; default: all)")
    p.add_argument("--mode", choices=["fwd", "bwd"], default="fwd",
                   help="the pass to tune: the forward (default), or the backward alone (its gradients checked, "
                        "timed on a graph built once; the spec's bwd_configs)")
    p.add_argument("--strategy", choices=["auto", "exhaustive", "random", "pattern"], default="auto")
    p.add_argument("--budget", type=float, default=None, metavar="MINUTES",
                   help="per case, compiles included (random and pattern: the stop)")
    p.add_argument("--max-trials", type=int, default=None, metavar="N", help="per case: candidates tried at most")
    p.add_argument("--spill-limit", type=int, default=64, metavar="BYTES",
                   help="spilled bytes per thread above which a config is not run (default 64)")
    p.add_argument("--compile-timeout", type=float, default=120.0, metavar="SECONDS",
                   help="per kernel compile (default 120)")
    p.add_argument("--compile-workers", type=int, default=None, metavar="N",
                   help="compile processes at once (default: half the cores, at most 8)")
    p.add_argument("--no-compile-check", action="store_true", help="skip the compile gate: run every candidate")
    p.add_argument("--no-cache", action="store_true", help="search even when a cached winner is valid")
    p.add_argument("--write", action="store_true",
                   help="also write the winners into the op's shipped table for this GPU "
                        "(src/kernelworks/ops/<family>/tuned/<gpu>.json), keyed by shape bucket, triton version "
                        "and kernel source hash; the op reads it at plan time")
    p.add_argument("--out", type=Path, default=None, help="folder for tune.json, tune.md and tune.png")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    import torch

    from kernelworks.bench.results import environment
    from kernelworks.spec import load_spec
    from kernelworks.tune import plot, table, tune

    spec = load_spec(args.target)
    configs, hook = spec.search_space(args.mode)
    if not configs or hook is None:
        what = "`bwd_configs` and `bwd_configured`" if args.mode == "bwd" else "`configs` and `configured`"
        print(f"kw tune: spec {spec.name!r} declares no tunable configs"
              f"{' for its backward' if args.mode == 'bwd' else ''} (it needs {what})")
        return 2
    if args.write and args.mode == "bwd":
        print("kw tune: --write fills the forward's shipped tables; backward winners are only cached")
        return 2
    if args.write and spec.tuned is None:
        print(f"kw tune: spec {spec.name!r} has no shipped table (`tuned`) for --write; winners are only cached")
        return 2
    if args.budget is not None and not args.budget > 0:
        print(f"kw tune: --budget: expected minutes > 0, got {args.budget}")
        return 2
    if args.max_trials is not None and args.max_trials < 1:
        print(f"kw tune: --max-trials: expected at least 1, got {args.max_trials}")
        return 2
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        print(f"kw tune: --out: {args.out} is a file, expected a folder")
        return 2
    if not torch.cuda.is_available():
        print("kw tune: no CUDA GPU is visible; it times each candidate. `kw check` and `kw inspect "
              "--all-configs` work without one.")
        return 2
    results = tune(spec, args.case, strategy=args.strategy,
                   budget_s=None if args.budget is None else args.budget * 60, use_cache=not args.no_cache,
                   max_trials=args.max_trials, spill_limit=args.spill_limit, compile_timeout_s=args.compile_timeout,
                   compile_workers=args.compile_workers, target=None if args.no_compile_check else "auto",
                   mode=args.mode)
    doc = [r.to_dict() for r in results]
    env = environment(None)
    if spec.tuned is not None:  # what a table entry written from this run must carry
        env["tuned_source"] = spec.tuned.source_hash()
    if args.write:
        from kernelworks.tune.tables import write

        path = write(spec, results, gpu=torch.cuda.get_device_name(), commit=env.get("commit"),
                     capability=torch.cuda.get_device_capability())
        print(f"kw tune: winners written to {path}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "tune.json").write_text(json.dumps({"environment": env, "results": doc},
                                                       indent=1) + "\n")
        (args.out / "tune.md").write_text(table(results) + "\n")
        with contextlib.suppress(ImportError):  # the plot needs matplotlib (the `plot` extra)
            plot(results, args.out / "tune.png")
    print(json.dumps(doc, indent=1) if args.json else table(results))
    return 0 if all(r.winner is not None for r in results) else 1
