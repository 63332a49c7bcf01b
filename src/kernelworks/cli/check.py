"""``kw check OP|FILE:SPEC``: the correctness checklist; exits 1 on any failure."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="run an op's correctness checklist",
                       description="Check every case of a spec against its reference: tolerance rule, "
                                   "NaN-poisoned outputs, repeat-run race detection, gradients.")
    p.add_argument("target", nargs="+", help="registered op name(s), 'all', or path/to/file.py:SPEC")
    p.add_argument("--case", action="append", help="only this case (name or id); repeatable")
    p.add_argument("--provider", help="provider to check (default: the spec's subject, ours)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="only cases tagged 'quick'")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")


def run(args: argparse.Namespace) -> int:
    from kernelworks.check import check_table, run_check, summarize
    from kernelworks.check.engine import where_checks_run
    from kernelworks.spec import load_spec, registry

    targets = list(registry()) if args.target == ["all"] else args.target
    results = []
    for t in targets:
        spec = load_spec(t)
        results += run_check(spec, args.case, provider=args.provider, seed=args.seed,
                             tags=["quick"] if args.quick else None, progress=True)
    print(check_table(results, markdown=args.markdown))
    passed, failed, skipped = summarize(results)
    print(f"\n{where_checks_run()}: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0
