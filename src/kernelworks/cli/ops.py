"""``kw ops``: list the registered op specs with their cases and providers."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("ops", help="list registered ops, their cases and providers")


def run(args: argparse.Namespace) -> int:
    from kernelworks.spec import registry
    from kernelworks.tables import text_table

    rows = []
    for name, spec in registry().items():
        avail = [p + ("" if prov.available()[0] else " (absent)") for p, prov in spec.all_providers().items()]
        rows.append([name, "+".join(spec.modes), len(spec.check_cases), len(spec.bench_cases), ", ".join(avail)])
    print(text_table(["op", "modes", "check cases", "bench cases", "providers"], rows))
    return 0
