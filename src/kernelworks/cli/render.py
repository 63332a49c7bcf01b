"""``kw render``: regenerate BENCHMARKS.md and its plots from the committed results JSON."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("render", help="regenerate BENCHMARKS.md and plots from results JSON (no GPU needed)")
    p.add_argument("--results", default="benchmarks/results", help="folder of <gpu>/<op>.json files")
    p.add_argument("--out", default="benchmarks/BENCHMARKS.md")
    p.add_argument("--plots", default="benchmarks/plots")
    p.add_argument("--no-plots", action="store_true")


def run(args: argparse.Namespace) -> int:
    from kernelworks.bench.render import render

    path = render(Path(args.results), Path(args.out), Path(args.plots), with_plots=not args.no_plots)
    print(f"wrote {path}")
    return 0
