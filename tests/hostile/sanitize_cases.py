"""Every out-of-range index case of every op, once, with validation off, on CUDA tensors — for
``compute-sanitizer --tool memcheck``::

    compute-sanitizer --tool memcheck --log-file sanitize.log python tests/hostile/sanitize_cases.py

Each case runs on plain tensors (no guard buffers: memcheck must see the kernels' real accesses), host
checks off (``kernelworks.validation(False)``), and the device is synchronised after each call so a fault
is attributed to the case printed just before it. The class of each case is printed as well (the
documented-behaviour checks still run); the exit status is 1 if any case is wrong, unclear or crashed.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: import the suite as the package ``hostile``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from hostile.harness import GOOD, run_case
    from hostile.table import cases, ops
else:
    from .harness import GOOD, run_case
    from .table import cases, ops


def index_cases():
    """The cases that feed bad index values to the kernels with host checks off (the guarded ones)."""
    return [dataclasses.replace(c, guard=False, validate=False) for c in cases() if c.guard]


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA GPU (this script is for compute-sanitizer on one)", file=sys.stderr)
        return 2
    bad = 0
    chosen = index_cases()
    for i, case in enumerate(chosen):
        print(f"[{i + 1}/{len(chosen)}] {case.id} ...", flush=True)
        out = run_case(case, ops()[case.op])
        torch.cuda.synchronize()
        print(f"    {out.cls} {out.detail[:200]}", flush=True)
        bad += out.cls not in GOOD
    print(f"{len(chosen)} index cases, {bad} not error/correct/documented")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
