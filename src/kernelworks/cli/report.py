"""``kw report``: check (and on a GPU, time) every registered op into a Markdown report; prints one line
per op as it finishes and a summary at the end (the report itself is in the file). ``--sanitize`` (GPU) adds
every case under compute-sanitizer: a case × tool table, the first report of each finding, the logs."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

from kernelworks.cli.check import add_sanitize_arguments, sanitize_request


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="the main job: check every op (and time it on a GPU) into a report",
                       description="Check every op (and time it on a GPU) into OUT/report.md. With --sanitize "
                                   "(GPU), each case also runs under compute-sanitizer: a case × tool table of "
                                   "verdicts, the first report of each finding, the logs in OUT/sanitize-logs "
                                   "and the runs in OUT/sanitize.json.")
    p.add_argument("--full", action="store_true", help="every case (default: the quick subset)")
    p.add_argument("--out", default="kw-report", help="output folder (default: kw-report)")
    p.add_argument("--op", action="append", help="only this op (a registered name, or your own spec as FILE.py:SPEC); "
                   "repeatable")
    p.add_argument("--no-bench", action="store_true", help="skip timings even on a GPU")
    add_sanitize_arguments(p, logs=False)


def run(args: argparse.Namespace) -> int:
    from kernelworks.report import make_report

    tools, rules = sanitize_request(args)
    Path(args.out).mkdir(parents=True, exist_ok=True)  # an --out that is a file fails here, before any check
    result = make_report(Path(args.out), full=args.full, ops=args.op, bench=not args.no_bench,
                         log=functools.partial(print, flush=True), sanitize=tools, sanitize_ignore=rules,
                         sanitize_timeout=args.sanitize_timeout)
    passed, failed, skipped = (sum(row[i] for row in result.summary) for i in (1, 2, 3))
    failing = [op for op, _, f, _ in result.summary if f]
    print(f"\n{len(result.summary)} ops: {passed} passed, {failed} failed, {skipped} skipped"
          + (f" (failing: {', '.join(failing)})" if failing else ""))
    print(f"wrote {result.path}")
    return 0 if result.ok else 1
