"""The Python share of an op's host time, on any machine: the ops' GPU path with the launch stubbed out.

    python benchmarks/host_python.py [--train] [OP ...]

Runs each op's eager call on small CPU tensors as if they were on a GPU: launches are planned for a GPU
(``planning_for_gpu``), the compiled-kernel cache answers every key with a no-op C launch, so what is timed is
everything kernelworks does in Python around a launch (validation, planning, allocation, the specialisation key,
the autograd Function with ``--train``). No kernel runs and no GPU is needed, so a change to the launch path
can be measured here before a GPU session; ``benchmarks/host_time.py`` gives the real figures on a GPU, where
each Python operation costs about twice as much on our H100 host as on a development CPU.
"""

from __future__ import annotations

import argparse
import os
import timeit

os.environ["TRITON_INTERPRET"] = "1"  # CPU tensors pass validation; planning is switched to the GPU's below

import torch
from host_time import cases  # the same calls (benchmarks/ is on the path when run as a script)

import kernelworks.runtime.device as device
from kernelworks.runtime import launch


class _EveryKernelCompiled(dict):
    """Stands in for ``launch._COMPILED``: every key hits, with a direct launcher that does nothing."""

    def get(self, key, default=None):
        return None, (), lambda g0, g1, g2, stream, args: None


def _stub_launches() -> None:
    launch.interpreter_active = lambda: False
    launch.planning_active = lambda: False
    launch._current_device = lambda: 0
    launch._current_stream = lambda index: 0
    launch._COMPILED = _EveryKernelCompiled()
    device._planning_for_gpu = True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ops", nargs="*", help="ops to time (default: all)")
    ap.add_argument("--train", action="store_true", help="inputs require grad: the autograd path")
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--report", action="store_true", help="print which op bodies replay, and why others do not")
    args = ap.parse_args()
    _stub_launches()
    with torch.set_grad_enabled(args.train):
        for name, (call, _) in cases(args.train, "cpu").items():
            if args.ops and name not in args.ops:
                continue
            for _ in range(50):
                call()
            us = min(timeit.repeat(call, number=args.calls, repeat=5)) / args.calls * 1e6
            print(f"{name:30s} {us:7.2f} µs")
    if args.report:
        import json

        from kernelworks.runtime import replay
        print(json.dumps(replay.report(), indent=1))


if __name__ == "__main__":
    main()
