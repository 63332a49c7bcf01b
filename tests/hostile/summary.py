"""``python -m tests.hostile.summary``: every hostile case's class, counted per op, and the cases that missed
their expected class. Exits 1 unless there are 0 wrong, 0 crash and 0 unclear_error (the issue's bar).

Options: ``--op NAME`` (repeatable) to run only some ops; ``--all`` to list every case with its class.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterable

from .harness import CLASSES, GOOD, Case, Outcome, expected_here
from .table import cases, ops, outcome


def render(results: Iterable[tuple[Case, Outcome]]) -> str:
    """The per-op count table and the misses (class not among the expected ones), as plain text."""
    results = list(results)
    counts: dict[str, Counter] = {}
    for case, out in results:
        counts.setdefault(case.op, Counter())[out.cls] += 1
    width = max([len(op) for op in counts] + [5])
    lines = [f"{'op':<{width}}  " + "  ".join(f"{c:>13}" for c in CLASSES)]
    total: Counter = Counter()
    for op, c in counts.items():
        total.update(c)
        lines.append(f"{op:<{width}}  " + "  ".join(f"{c.get(k, 0):>13}" for k in CLASSES))
    lines.append(f"{'total':<{width}}  " + "  ".join(f"{total.get(k, 0):>13}" for k in CLASSES))
    misses = [(case, out) for case, out in results if out.cls not in expected_here(case, ops()[case.op])]
    if misses:
        lines += ["", f"{len(misses)} case(s) not in their expected class:"]
        lines += [f"  {case.id}: {out.cls} (expected {'/'.join(expected_here(case, ops()[case.op]))}): "
                  f"{out.detail[:300]}" for case, out in misses]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.hostile.summary", description=__doc__.split("\n")[0])
    parser.add_argument("--op", action="append", help="only this op (repeatable)")
    parser.add_argument("--all", action="store_true", help="list every case with its class")
    args = parser.parse_args(argv)
    chosen = [c for c in cases() if not args.op or c.op in args.op]
    results = []
    for case in chosen:
        out = outcome(case)
        results.append((case, out))
        if args.all:
            print(f"{case.id}: {out.cls} {out.detail[:200]}", flush=True)
    print(render(results))
    bad = sum(out.cls not in GOOD for _, out in results)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
