"""``kw tune OP|FILE:SPEC``: correctness-gated search over the configs a spec declares (GPU)."""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="search a spec's configs: each checked against the reference, then timed (GPU)",
                       description="Runs every config the spec declares (or a random sample within --budget) on "
                                   "each bench case: a config that raises or is wrong is recorded and never "
                                   "chosen; the right ones are timed, the fastest three re-timed interleaved, "
                                   "and the simpler config wins unless the faster one beats it by more than the "
                                   "measured spread. Winners are cached per GPU, triton version and source.")
    p.add_argument("target", help="registered op name or path/to/file.py:SPEC")
    p.add_argument("--case", action="append", help="bench case name or id (repeatable; default: all)")
    p.add_argument("--strategy", choices=["exhaustive", "random"], default="exhaustive")
    p.add_argument("--budget", type=float, default=None, metavar="MINUTES", help="per case (random: the stop)")
    p.add_argument("--no-cache", action="store_true", help="search even when a cached winner is valid")
    p.add_argument("--out", type=Path, default=None, help="folder for tune.json, tune.md and tune.png")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    import torch

    from kernelworks.bench.results import environment
    from kernelworks.spec import load_spec
    from kernelworks.tune import plot, table, tune

    spec = load_spec(args.target)
    if not spec.configs or spec.configured is None:
        print(f"kw tune: spec {spec.name!r} declares no tunable configs (it needs `configs` and `configured`)")
        return 2
    if not torch.cuda.is_available():
        print("kw tune: no CUDA GPU is visible; it times each candidate. `kw check` and `kw inspect "
              "--all-configs` work without one.")
        return 2
    results = tune(spec, args.case, strategy=args.strategy,
                   budget_s=None if args.budget is None else args.budget * 60, use_cache=not args.no_cache)
    doc = [r.to_dict() for r in results]
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "tune.json").write_text(json.dumps({"environment": environment(None), "results": doc},
                                                       indent=1) + "\n")
        (args.out / "tune.md").write_text(table(results) + "\n")
        with contextlib.suppress(ImportError):  # the plot needs matplotlib (the `plot` extra)
            plot(results, args.out / "tune.png")
    print(json.dumps(doc, indent=1) if args.json else table(results))
    return 0 if all(r.winner is not None for r in results) else 1
