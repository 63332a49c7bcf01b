"""``kw check OP|FILE:SPEC``: the correctness checklist; exits 1 on any failure.

Each op's table is printed (and flushed) as soon as its cases are done, so a run cut short keeps what it
found; failures show on one line each, their full text with ``--verbose``. The two cheapest cheat probes
(:data:`~kernelworks.check.adversarial.DEFAULT_PROBES`) run unless ``--no-probes``; ``--adversarial`` runs
all four. ``--sanitize`` adds a run of each case under every compute-sanitizer tool, one row each
(:mod:`kernelworks.check.sanitize`); where it cannot run (no GPU, no compute-sanitizer) it refuses before
any case runs, saying what is missing, with exit status 2. ``--sanitize-ignore TOOL:KERNEL_GLOB`` sets known
false positives apart: counted and shown, not failures.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelworks.check.sanitize_log import IgnoreRule


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="run an op's correctness checklist",
                       description="Check every case of a spec against its reference: tolerance rule, "
                                   "NaN-poisoned outputs, repeat-run race detection, gradients, and two probes for "
                                   "cached results (fresh values, fresh tensors). With --sanitize "
                                   "(GPU), each case also runs under compute-sanitizer, one row per tool.")
    p.add_argument("target", nargs="+", help="registered op name(s), 'all', or path/to/file.py:SPEC")
    p.add_argument("--case", action="append", help="only this case (name or id); repeatable")
    p.add_argument("--provider", help="provider to check (default: the spec's subject, ours)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="only cases tagged 'quick'")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    probes = p.add_mutually_exclusive_group()
    probes.add_argument("--adversarial", action="store_true",
                        help="run all four cheat probes: also outputs ignoring an input and hard-coded sizes (a "
                             "few more calls per case)")
    probes.add_argument("--no-probes", dest="probes", action="store_false",
                        help="skip the two probes every check runs by default (fresh values in the same tensors, "
                             "fresh tensors: results cached by address or shape; one more forward call each)")
    add_sanitize_arguments(p)
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print each failure's full text after its op's table (cells show one line), and the "
                        "notes: probes that could not run, sanitizer reports ignored or only warned of")


def add_sanitize_arguments(p: argparse.ArgumentParser, *, logs: bool = True) -> None:
    """The ``--sanitize*`` options, shared by ``kw check`` and ``kw report`` (``logs``: offer
    ``--sanitize-logs``)."""
    p.add_argument("--sanitize", action="store_true",
                   help="GPU: also run each case (forward, and backward where the op has gradients) under "
                        "NVIDIA compute-sanitizer, a fresh process per case and tool, one result each: clean, N "
                        "errors (the first reports in the details, those in a kernel that is not one of the op's "
                        "own marked [outside the op]), or did not finish. Slow: seconds to minutes a run")
    p.add_argument("--sanitize-tools", metavar="TOOLS",
                   help="comma-separated compute-sanitizer tools (implies --sanitize; default all: "
                        "memcheck,racecheck,initcheck,synccheck)")
    p.add_argument("--sanitize-timeout", type=float, metavar="SECONDS",
                   help="time limit of one sanitizer run (default per tool: memcheck and synccheck 300, "
                        "initcheck 600, racecheck 900); a run past it fails as 'did not finish'. Implies --sanitize")
    if logs:
        p.add_argument("--sanitize-logs", metavar="DIR",
                       help="keep every sanitizer log in DIR (default: a temporary folder keeping only the logs "
                            "with something to read: errors, warnings, ignored reports, runs that did not "
                            "finish). Implies --sanitize")
    p.add_argument("--sanitize-ignore", action="append", metavar="TOOL:KERNEL_GLOB", default=[],
                   help="set aside the reports of TOOL (or * for any) in kernels matching the glob, e.g. "
                        "initcheck:at::native::* (matched against the kernel's full demangled name and its bare "
                        "name; for a failed CUDA API call, the call's name): counted and shown ('clean (2 "
                        "ignored)'), not failures. Repeatable; implies --sanitize")


def sanitize_request(args: argparse.Namespace) -> tuple[tuple[str, ...], tuple[IgnoreRule, ...]]:
    """The tools (empty: no sanitizer run asked for) and ignore rules the ``--sanitize*`` options ask for;
    ``ValueError`` for an unknown tool or a malformed rule, before anything runs."""
    from kernelworks.check.sanitize import TOOLS, parse_tools
    from kernelworks.check.sanitize_log import parse_ignores

    rules = parse_ignores(args.sanitize_ignore)
    asked = (args.sanitize or args.sanitize_tools or rules or args.sanitize_timeout is not None
             or getattr(args, "sanitize_logs", None))
    return (parse_tools(args.sanitize_tools or TOOLS) if asked else ()), rules


def run(args: argparse.Namespace) -> int:
    from kernelworks.check import check_table, failure_details, run_check, summarize
    from kernelworks.check.engine import where_checks_run
    from kernelworks.spec import load_spec, registry

    tools, rules = sanitize_request(args)
    if tools:
        from kernelworks.check.sanitize import unavailable

        why = unavailable()
        if why:  # refused before any case runs: the checklist alone would read as a pass of --sanitize
            print(f"kw check --sanitize cannot run here:\n{why}", file=sys.stderr)
            return 2
    targets = list(registry()) if args.target == ["all"] else args.target
    specs = [load_spec(t) for t in targets]  # every target resolved before the first case runs
    if args.target == ["all"] and args.case:  # `all --case X`: the ops that have such a case
        specs = [spec for spec in specs if spec.has_cases(args.case, bench=False)]
    passed = failed = skipped = 0
    sanitized = []
    for i, spec in enumerate(specs):
        tags = ["quick"] if args.quick else None
        results = run_check(spec, args.case, provider=args.provider, seed=args.seed, tags=tags, progress=True,
                            probes=args.probes, adversarial=args.adversarial)
        if tools:
            from kernelworks.check.sanitize import run_sanitize

            ran = run_sanitize(spec, args.case, tools=tools, provider=args.provider, seed=args.seed, tags=tags,
                               timeout=args.sanitize_timeout, log_dir=args.sanitize_logs, progress=True,
                               ignore=rules)
            results, sanitized = results + ran, sanitized + ran
        print(("\n" if i else "") + check_table(results, markdown=args.markdown), flush=True)
        details = failure_details(results, markdown=args.markdown) if args.verbose else ""
        if details:
            print("\n" + details, flush=True)
        notes = [f"{r.op} · {r.case.id} · {r.mode} · {r.provider}: {n}" for r in results for n in r.notes]
        if args.verbose and notes:
            print("\n" + "\n".join(notes), flush=True)
        p, f, s = summarize(results)
        passed, failed, skipped = passed + p, failed + f, skipped + s
    print(f"\n{where_checks_run()}: {passed} passed, {failed} failed, {skipped} skipped", flush=True)
    if not passed + failed + skipped:  # a filter that matched nothing checked nothing: not a pass
        print("kw check: error: no case matched" + (f" --case {' '.join(args.case)}" if args.case else "")
              + (" --quick" if args.quick else ""), file=sys.stderr)
        return 2
    if not passed + failed:  # every case skipped (a provider absent, GPU-only cases on a CPU): not a pass either
        print("kw check: nothing was checked: every selected case was skipped (the table says why)", file=sys.stderr)
        return 2
    if tools:
        from kernelworks.check.sanitize import sanitize_summary

        print(sanitize_summary(sanitized), flush=True)
    return 1 if failed else 0
