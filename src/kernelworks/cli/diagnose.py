"""``kw diagnose OP --case C``: time one case on the GPU, read its kernels, say what limits it."""

from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diagnose", help="what limits an op on this GPU, and what to try next (GPU)",
                       description="Times one case, reads the cost model and the compiled kernels (kw inspect) "
                                   "and names the regime, the roofline %%, the limiter and the next rungs.")
    p.add_argument("target", help="registered op name or path/to/file.py:SPEC")
    p.add_argument("--case", required=True, help="bench (or check) case name or id")
    p.add_argument("--mode", choices=["fwd", "bwd"], default="fwd")
    p.add_argument("--ncu", action="store_true", help="add Nsight Compute's DRAM and SM throughput")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    import torch

    from kernelworks.inspect.diagnose import diagnose_op, render, to_dict

    if not torch.cuda.is_available():
        print("kw diagnose: no CUDA GPU is visible; it times the op. `kw inspect` reads the compiled kernels "
              "without one.")
        return 2
    d = diagnose_op(args.target, args.case, args.mode, with_ncu=args.ncu)
    print(json.dumps(to_dict(d), indent=1) if args.json else render(d))
    return 0
