"""``kw ops [OP|FILE:SPEC ...]``: the registered op specs with their case counts and providers, or, for the
ops named, every case by id (check and bench sets, with tags)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ops", help="list registered ops, their cases and providers",
                       description="List the registered ops (case counts, providers); name ops to list their "
                                   "cases by id, the names `--case` takes.")
    p.add_argument("target", nargs="*", help="op name(s) or FILE.py:SPEC whose cases to list")


def run(args: argparse.Namespace) -> int:
    from kernelworks.spec import load_spec, registry
    from kernelworks.tables import text_table

    if args.target:
        for i, target in enumerate(args.target):
            spec = load_spec(target)
            rows = [[kind, c.id, ", ".join(c.tags)] for kind, cases in (("check", spec.check_cases),
                                                                           ("bench", spec.bench_cases))
                    for c in cases]
            print(("\n" if i else "") + f"{spec.name}")
            print(text_table(["set", "case", "tags"], rows))
        return 0
    rows = []
    for name, spec in registry().items():
        avail = [p + ("" if prov.available()[0] else " (absent)") for p, prov in spec.all_providers().items()]
        rows.append([name, "+".join(spec.modes), len(spec.check_cases), len(spec.bench_cases), ", ".join(avail)])
    print(text_table(["op", "modes", "check cases", "bench cases", "providers"], rows))
    return 0
