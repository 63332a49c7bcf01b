"""``kw report``: check (and on a GPU, time) every registered op into a Markdown report."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="the main job: check every op (and time it on a GPU) into a report")
    p.add_argument("--full", action="store_true", help="every case (default: the quick subset)")
    p.add_argument("--out", default="kw-report", help="output folder (default: kw-report)")
    p.add_argument("--op", action="append", help="only this op; repeatable")
    p.add_argument("--no-bench", action="store_true", help="skip timings even on a GPU")


def run(args: argparse.Namespace) -> int:
    from kernelworks.report import make_report

    path, ok = make_report(Path(args.out), full=args.full, ops=args.op, bench=not args.no_bench)
    print(path.read_text())
    print(f"wrote {path}")
    return 0 if ok else 1
