"""``kw bench OP|FILE:SPEC``: GPU timing of every provider, same run, same inputs."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="time an op against its baselines (GPU)",
                       description="Device-event timing after warm-up, median of many, L2 flushed; "
                                   "time, TFLOP/s, GB/s and % of speed of light per provider.")
    p.add_argument("target", nargs="+", help="registered op name(s), 'all', or path/to/file.py:SPEC")
    p.add_argument("--case", action="append", help="only this case (name or id); repeatable")
    p.add_argument("--providers", help="comma-separated providers (default: all available)")
    p.add_argument("--mode", choices=["fwd", "bwd", "fwd+bwd"], action="append",
                   help="direction(s) to time; fwd+bwd is a whole training step, with its extra peak memory "
                        "(default: the spec's bench modes)")
    p.add_argument("--quick", action="store_true", help="only cases tagged 'quick'")
    p.add_argument("--cuda-graph", action="store_true", help="replay a CUDA graph (kernel time, no launch gaps)")
    p.add_argument("--no-probes", action="store_true",
                   help="skip the probes for work the timing missed (side streams, threads, lazy results)")
    p.add_argument("--save", nargs="?", const="benchmarks/results", default=None, metavar="DIR",
                   help="write DIR/<gpu>/<op>.json (default DIR: benchmarks/results)")
    p.add_argument("--plot", metavar="DIR", help="also write PNG plots into DIR")


def run(args: argparse.Namespace) -> int:
    import torch

    from kernelworks.bench import bench_table, run_bench
    from kernelworks.bench.render import plot_op
    from kernelworks.bench.results import environment, save
    from kernelworks.hardware import ceilings
    from kernelworks.spec import load_spec, registry

    # what to run is checked first (an unknown op, spec file or case is an error, GPU or not), the GPU second
    targets = list(registry()) if args.target == ["all"] else args.target
    specs = [load_spec(t) for t in targets]
    if args.case:
        if args.target == ["all"]:  # `all --case X`: the ops that have such a case
            specs = [spec for spec in specs if spec.has_cases(args.case, bench=True)]
            if not specs:
                print(f"kw bench: error: no op has a bench case named {args.case}")
                return 2
        else:
            for spec in specs:
                spec.find_cases(args.case, bench=True)  # KeyError naming the known cases
    for option, folder in (("--save", args.save), ("--plot", args.plot)):
        if folder is not None and Path(folder).exists() and not Path(folder).is_dir():
            print(f"kw bench: {option}: {folder} is a file, expected a folder")  # before the timings, not after
            return 2
    if not torch.cuda.is_available():
        print("kw bench: no CUDA GPU is visible. Timings need a GPU (the CPU interpreter's times mean "
              "nothing); `kw check` runs correctness here.")
        return 2
    ceil = ceilings()
    assert ceil is not None
    print(f"{ceil.gpu}: ceilings from the {ceil.source} (copy {ceil.bandwidth_gbs:.0f} GB/s)"
          + ("" if ceil.source == "measured" else "; run `kw calibrate` to measure them"))
    providers = args.providers.split(",") if args.providers else None
    env = environment(ceil)
    for spec in specs:
        records = run_bench(spec, args.case, providers=providers, modes=args.mode, ceil=ceil,
                            tags=["quick"] if args.quick else None, cuda_graph=args.cuda_graph,
                            probes=not args.no_probes)
        print(f"\n{spec.name}")
        print(bench_table(records, subject=spec.subject))
        result = {"op": spec.name, "environment": env, "records": [r.as_dict() for r in records]}
        if args.save:
            # a --case / --mode run updates its (case, mode) pairs in the op's file and keeps the others
            # (tagged with their run)
            merge = bool(args.case) or args.mode is not None
            print(f"saved {save(records, spec.name, env, Path(args.save), merge=merge)}")
        if args.plot:
            for path in plot_op(result, Path(args.plot)):
                print(f"plot {path}")
    return 0
