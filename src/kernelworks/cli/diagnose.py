"""``kw diagnose OP --case C``: time one case on the GPU, read its kernels, say what limits it."""

from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diagnose", help="what limits an op on this GPU, and what to try next (GPU)",
                       description="Times one case, reads the cost model and the compiled kernels (kw inspect) "
                                   "and names the regime, the roofline %, the limiter and the next rungs. "
                                   "Without --case, lists the op's cases.")
    p.add_argument("target", help="registered op name or path/to/file.py:SPEC")
    p.add_argument("--case", help="bench (or check) case name or id; omit it to list them")
    p.add_argument("--mode", choices=["fwd", "bwd"], default="fwd")
    p.add_argument("--ncu", action="store_true", help="add Nsight Compute's DRAM and SM throughput")
    p.add_argument("--json", action="store_true")


def _case_list(spec) -> str:
    def ids(cases) -> str:
        return ", ".join(c.id for c in cases) or "(none)"

    return f"bench cases: {ids(spec.bench_cases)}\ncheck cases: {ids(spec.check_cases)}"


def run(args: argparse.Namespace) -> int:
    import torch

    from kernelworks.spec import load_spec

    spec = load_spec(args.target)
    if args.case is None:
        print(f"kw diagnose: which case? pass --case NAME; {spec.name} has\n{_case_list(spec)}")
        return 2
    if not any(args.case in (c.name, c.id) for c in (*spec.bench_cases, *spec.check_cases)):
        raise KeyError(f"{spec.name} has no case named {args.case!r}; its {_case_list(spec)}")
    if not torch.cuda.is_available():
        print("kw diagnose: no CUDA GPU is visible; it times the op. `kw inspect` reads the compiled kernels "
              "without one.")
        return 2
    from kernelworks.inspect.diagnose import diagnose_op, render, to_dict

    d = diagnose_op(args.target, args.case, args.mode, with_ncu=args.ncu)
    print(json.dumps(to_dict(d), indent=1) if args.json else render(d))
    return 0
