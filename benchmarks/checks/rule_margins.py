"""How close every checked output comes to the tolerance rule's two halves, op by op, on this machine.

    python benchmarks/checks/rule_margins.py [OP ...] [--out F.json] [--quick] [--budget S]

Runs ``kw check``'s checklist (no probes) on every case of every op (or the named ones) and records, per
output: its verdict, its max abs error beside the element rule's allowance, and its ‖out − ref‖/‖ref‖ against
the normwise half's bound (``rtol + factor × PyTorch's own``, or the case's ``max_rel_l2``; for a gradient its
``max_rel_l2_grads`` entry where it has one). ``l2_margin`` is bound / error: above 1 passes the normwise half,
and how far above says how much room an honest kernel leaves (none where that half does not run: no baseline,
an all-zero reference, a rule without relative slack). A case's other failures (a provider that raised, a race,
an input modified) are rows of their own. What a change of the rule would do to every op is read here before
it is made (session 19 added the normwise half after this run on the H100). ``--budget`` stops starting new
ops after S seconds (the ops not reached are listed).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time

import torch

from kernelworks.bench.results import git_commit
from kernelworks.check import run_check
from kernelworks.check.compare import l2_promise
from kernelworks.check.engine import where_checks_run
from kernelworks.spec import registry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ops", nargs="*")
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true", help="only the cases tagged quick")
    ap.add_argument("--budget", type=float, default=math.inf, help="seconds after which no new op starts")
    args = ap.parse_args()
    specs = registry()
    names = args.ops or list(specs)
    rows, skipped_ops, t0 = [], [], time.perf_counter()
    for name in names:
        if time.perf_counter() - t0 > args.budget:
            skipped_ops.append(name)
            continue
        spec = specs[name]
        t_op = time.perf_counter()
        for r in run_check(spec, tags=("quick",) if args.quick else None, probes=False):
            if r.skipped:
                continue
            for c in r.comparisons:
                tol = (spec.case_tolerance(r.case) if r.mode == "fwd" else
                       spec.gradient_tolerance(r.case, c.output.removeprefix("grad ")))
                bound = l2_promise(tol, c.baseline_rel_l2) if not math.isnan(c.baseline_rel_l2) else math.nan
                rows.append({"op": name, "case": r.case.id, "mode": r.mode, "output": c.output,
                             "passed": c.passed, "problem": c.problem[:200], "max_abs": c.max_abs,
                             "allowed": c.allowed, "rel_l2": c.rel_l2, "baseline_rel_l2": c.baseline_rel_l2,
                             "l2_bound": bound, "l2_margin": bound / c.rel_l2 if c.rel_l2 else math.inf})
            for p in r.problems:
                rows.append({"op": name, "case": r.case.id, "mode": r.mode, "output": r.tool or "-",
                             "passed": False, "problem": p[:200], "max_abs": math.nan, "allowed": math.nan,
                             "rel_l2": math.nan, "baseline_rel_l2": math.nan, "l2_bound": math.nan,
                             "l2_margin": math.nan})
        print(f"{name}: {sum(r['op'] == name for r in rows)} outputs, {time.perf_counter() - t_op:.0f} s",
              flush=True)
    env = {"where": where_checks_run(), "torch": torch.__version__, "python": platform.python_version(),
           "commit": git_commit()}
    try:
        import triton
        env["triton"] = triton.__version__
    except ImportError:
        pass
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"environment": env, "ops_not_reached": skipped_ops, "outputs": rows}, f, indent=1,
                      default=str)
    failed = [r for r in rows if not r["passed"]]
    finite = [r for r in rows if math.isfinite(r["l2_margin"])]
    print(f"\n{env['where']}: {len(rows)} outputs, {len(failed)} failed; ops not reached: {skipped_ops or 'none'}")
    for r in failed:
        print(f"  FAILED {r['op']} {r['case']} {r['mode']} {r['output']}: {r['problem']}")
    print("closest to the normwise bound (bound / error):")
    for r in sorted(finite, key=lambda r: r["l2_margin"])[:12]:
        print(f"  {r['l2_margin']:7.2f}  {r['op']} {r['case']} {r['mode']} {r['output']}: "
              f"{r['rel_l2']:.3g} against {r['l2_bound']:.3g} (PyTorch {r['baseline_rel_l2']:.3g})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
