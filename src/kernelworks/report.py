"""``kw report``: the main job. Check every registered op, time them when a GPU is present, and write a
Markdown report with tables and plots. With no GPU it still runs the checks (in Triton's interpreter)
and says that timings need a GPU. Asked to (``sanitize``: GPU), it also runs each case under
compute-sanitizer's tools and adds a case × tool table of verdicts, the first report of every run that found
something, the logs (``sanitize-logs/``) and the runs as JSON (``sanitize.json``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import torch

from kernelworks.check import check_table, failure_details, run_check, summarize
from kernelworks.check.engine import CaseResult, where_checks_run
from kernelworks.check.render import sanitize_grid
from kernelworks.check.sanitize import parse_tools, run_sanitize, sanitize_summary
from kernelworks.check.sanitize_log import IgnoreRule, parse_ignores
from kernelworks.spec import registry
from kernelworks.tables import markdown_table


def _lint_section() -> list[str]:
    """``kw lint`` over the library's own kernels."""
    from kernelworks.lint import lint_paths
    from kernelworks.lint.output import format_text

    ops_dir = Path(__file__).parent / "ops"
    findings = lint_paths([ops_dir])
    body = ["No findings."] if not findings else ["```", format_text(findings), "```"]
    return ["## Lint (`kw lint` over `kernelworks/ops`)", "", *body, ""]


def _inspect_section(specs: dict, target: str = "sm_90") -> list[str]:
    """``kw inspect`` of every op's default case, compiled ahead of time for ``target`` (no GPU needed)."""
    from kernelworks.inspect import inspect_op
    from kernelworks.inspect.render import format_table

    lines = [f"## Compiled kernels (`kw inspect`, {target}, ahead of time)", ""]
    warned = []
    for name, spec in specs.items():
        try:
            reports = inspect_op(spec, target=target, modes=spec.modes)
        except Exception as e:  # one op's compile failure is reported, not fatal to the report
            lines += [f"**{name}**: inspection failed: {type(e).__name__}: {e}", ""]
            continue
        case = reports[0].case if reports else "?"
        lines += [f"**{name}** ({case})", "", format_table(reports, markdown=True), ""]
        warned += [f"- {name}: {r.name} ({r.mode}): {w}" for r in reports for w in r.warnings]
    lines += (["Warnings:", "", *warned, ""] if warned else ["No warnings.", ""])
    return lines


class ReportResult(NamedTuple):
    """What :func:`make_report` did: the report's path, whether every check (and sanitizer run) passed, and
    per op ``(op, passed, failed, skipped)``, sanitizer runs included."""

    path: Path
    ok: bool
    summary: list[tuple[str, int, int, int]]


def _correctness_section(all_results: dict[str, list[CaseResult]], pending: Sequence[str]) -> list[str]:
    """The summary table, every comparison (one-line cells) and the failures' full text."""
    rows = []
    for name, results in all_results.items():
        p, f, s = summarize(results)
        rows.append([name, p, f, s, "ok" if f == 0 else "FAIL"])
    rows += [[name, "", "", "", "not run (cut short)"] for name in pending]
    flat = [r for rs in all_results.values() for r in rs]
    lines = [f"## Correctness ({where_checks_run()})", "",
             markdown_table(["op", "passed", "failed", "skipped", "verdict"], rows), "",
             "<details><summary>every comparison</summary>", "", check_table(flat, markdown=True), "",
             "</details>", ""]
    details = failure_details(flat, markdown=True)
    if details:
        lines += ["### Failures (full text)", "", details, ""]
    return lines


SANITIZE_LOGS = "sanitize-logs"
"""The report folder's subfolder holding every compute-sanitizer log of a ``kw report --sanitize`` run."""


def _sanitize_section(sanitized: dict[str, list[CaseResult]], out_dir: Path) -> list[str]:
    """The case × tool table of compute-sanitizer verdicts (each linked to its log) and, for every run that
    found something, did not finish, or had reports ignored or only warned of, what it says first."""
    flat = [r for rs in sanitized.values() for r in rs]
    lines = ["## compute-sanitizer (`kw check --sanitize`)", "", sanitize_summary(flat) or "No runs yet.", ""]
    if flat:
        lines += [sanitize_grid(flat, links_from=out_dir), ""]
    for r in flat:
        if r.sanitizer is not None and r.sanitizer.noteworthy and r.sanitizer.status != "skipped":
            lines += [f"**{r.op} · {r.case.id} · {r.mode} · {r.provider} · {r.tool}**: {r.sanitizer.verdict}", "",
                      "```", r.sanitizer.first, "```", ""]
    return lines


def _save_sanitized(sanitized: dict[str, list[CaseResult]], path: Path) -> None:
    """``sanitize.json``: every run's op, case, mode, provider, tool, seconds and verdict (status, counts,
    first reports, notes, log path)."""
    runs = [{"op": r.op, "case": r.case.id, "mode": r.mode, "provider": r.provider, "tool": r.tool,
             "seconds": round(r.seconds, 2),
             **(r.sanitizer.as_dict() if r.sanitizer else {"status": "skipped", "message": r.skipped})}
            for rs in sanitized.values() for r in rs]
    path.write_text(json.dumps({"runs": runs}, indent=1) + "\n")


def make_report(out_dir: Path, *, full: bool = False, ops: Iterable[str] | None = None, bench: bool = True,
                log: Callable[[str], None] | None = None, sanitize: Sequence[str] = (),
                sanitize_ignore: Iterable[str | IgnoreRule] = (),
                sanitize_timeout: float | None = None) -> ReportResult:
    """Write ``out_dir/report.md`` (+ results and plots).

    The file is rewritten after each op's checks, so a run cut short keeps what it found; ``log`` (e.g.
    ``print``) receives one line per op as its checks finish. ``sanitize``: compute-sanitizer tools each case
    also runs under (GPU; empty: none), with ``sanitize_ignore``'s ``TOOL:KERNEL_GLOB`` rules and
    ``sanitize_timeout`` seconds a run; their failures count as the op's. Raises ``RuntimeError`` before
    anything runs when the sanitizer cannot run here.
    """
    import triton

    from kernelworks.check.sanitize import unavailable
    from kernelworks.runtime.device import device_name

    tools, rules = (parse_tools(sanitize) if sanitize else ()), parse_ignores(sanitize_ignore)
    why = unavailable() if tools else None
    if why:  # refused before anything runs, as kw check --sanitize does
        raise RuntimeError(f"kw report --sanitize cannot run here:\n{why}")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "report.md"
    specs = registry()
    if ops is not None:  # registered names, or your own specs as FILE.py:SPEC / package.module:SPEC
        from kernelworks.spec import load_spec

        chosen = [load_spec(op) for op in ops]
        specs = {spec.name: spec for spec in chosen}
    tags = None if full else ["quick"]
    started = time.perf_counter()
    head = ["# kernelworks report", "",
            f"Device: {device_name()} · torch {torch.__version__} · triton {triton.__version__} · "
            f"{'full' if full else 'quick (cases tagged quick; --full for all)'}", ""]

    def write(lines: list[str]) -> None:
        path.write_text("\n".join(lines) + "\n")

    all_results: dict[str, list[CaseResult]] = {}
    sanitized: dict[str, list[CaseResult]] = {}

    def checked() -> list[str]:
        lines = head + _correctness_section(all_results, [n for n in specs if n not in all_results])
        return lines + (_sanitize_section(sanitized, out_dir) if tools else [])

    for name, spec in specs.items():
        t0 = time.perf_counter()
        # a spec of the user's own runs every case: the quick subset is our specs' tag, which theirs may not use
        quick = tags if getattr(spec.reference, "__module__", "").startswith("kernelworks.") else None
        all_results[name] = run_check(spec, tags=quick, progress=True)
        write(checked())
        p, f, s = summarize(all_results[name])
        if log is not None:
            log(f"{name}: {p} passed, {f} failed, {s} skipped ({time.perf_counter() - t0:.0f} s)")
        if tools:
            t0 = time.perf_counter()
            sanitized[name] = run_sanitize(spec, tags=quick, tools=tools, ignore=rules, timeout=sanitize_timeout,
                                           log_dir=out_dir / SANITIZE_LOGS, progress=True)
            _save_sanitized(sanitized, out_dir / "sanitize.json")
            write(checked())
            if log is not None:
                log(f"{name}: {sanitize_summary(sanitized[name])} ({time.perf_counter() - t0:.0f} s)")
    summary = [(name, *summarize(results + sanitized.get(name, []))) for name, results in all_results.items()]
    ok = all(f == 0 for _, _, f, _ in summary)
    lines = checked()

    lines += _lint_section()
    lines += _inspect_section(specs)
    write(lines)
    lines += ["## Speed", ""]
    if not torch.cuda.is_available():
        lines += ["No CUDA GPU is visible: timings need one (the interpreter's times mean nothing). "
                  "Run `kw report` on a GPU machine, or see `benchmarks/BENCHMARKS.md` for committed results.", ""]
    elif bench:
        from kernelworks.bench import run_bench
        from kernelworks.bench.render import op_markdown, plot_op
        from kernelworks.bench.results import environment, save
        from kernelworks.hardware import ceilings

        ceil = ceilings()
        env = environment(ceil)
        for name, spec in specs.items():
            records = run_bench(spec, tags=tags, ceil=ceil)
            save(records, name, env, out_dir / "results")
            result = {"op": name, "environment": env, "records": [r.as_dict() for r in records]}
            lines.append(op_markdown(result, subject=spec.subject))
            try:
                for png in plot_op(result, out_dir / "plots"):
                    lines.append(f"\n![{name}]({png.relative_to(out_dir).as_posix()})")
            except ImportError:
                lines.append("\n(plots need matplotlib: pip install 'kernelworks[plot]')")
            lines.append("")
            write(lines)
            if log is not None:
                log(f"{name}: timed ({len(records)} records)")
    lines.append(f"_Took {time.perf_counter() - started:.0f} s._")
    write(lines)
    return ReportResult(path, ok, summary)
