"""Tables of check results: one row per output compared (forward outputs and each gradient), and one per
compute-sanitizer run (its tool in the output column: ``clean``, ``clean (2 ignored)`` or what it found);
:func:`sanitize_grid` lays the sanitizer's runs out case by tool, for the report.

A failure's text can be long (an interpreter error carries the kernel's source; a compile error several
kilobytes): table cells show it on one line, cut to :data:`CELL_CHARS`, and :func:`failure_details` gives
every failure's full text, for ``kw check --verbose`` and the report file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from kernelworks.check.engine import CaseResult
from kernelworks.tables import fmt_num, markdown_table, text_table

HEADERS = ("op", "case", "mode", "provider", "output", "max abs", "max rel", "‖out−ref‖/‖ref‖", "allowed",
           "verdict")
CELL_CHARS = 120
"""Longest verdict a table cell shows (one line); the full text is in :func:`failure_details`."""


def one_line(text: str, limit: int = CELL_CHARS) -> str:
    """``text`` with its whitespace runs (newlines included) collapsed to one space, cut to ``limit``
    characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _failures(r: CaseResult) -> list[tuple[str, str]]:
    """``(output, problem)`` for every failure of one result."""
    return [(c.output, c.problem) for c in r.comparisons if not c.passed] + [(r.tool, p) for p in r.problems]


def _rows(results: Sequence[CaseResult], full: bool) -> list[list[str]]:
    rows: list[list[str]] = []
    for r in results:
        head = [r.op, r.case.id, r.mode, r.provider]
        if r.skipped:
            rows.append([*head, r.tool, "", "", "", "", f"skip ({r.skipped if full else one_line(r.skipped)})"])
            continue
        if r.tool and not r.problems:
            rows.append([*head, r.tool, "", "", "", "", r.sanitizer.verdict if r.sanitizer else "clean"])
        for c in r.comparisons:
            verdict = "ok" if c.passed else f"FAIL: {c.problem if full else one_line(c.problem)}"
            rows.append([*head, c.output, fmt_num(c.max_abs), fmt_num(c.max_rel), fmt_num(c.rel_l2),
                         fmt_num(c.allowed), verdict])
        for p in r.problems:
            rows.append([*head, r.tool, "", "", "", "", f"FAIL: {p if full else one_line(p)}"])
    return rows


def check_table(results: Sequence[CaseResult], *, markdown: bool = False, full: bool = False) -> str:
    """The check results as a terminal (or Markdown) table; a failure's text on one line of at most
    :data:`CELL_CHARS` characters unless ``full`` (terminal only: a Markdown cell cannot hold newlines)."""
    if markdown:
        return markdown_table(HEADERS, _rows(results, False))
    return text_table(HEADERS, _rows(results, full))


def failure_details(results: Sequence[CaseResult], *, markdown: bool = False) -> str:
    """Every failure's full text, one block each (empty when nothing failed); Markdown puts each text in a
    code block."""
    blocks = []
    for r in results:
        for output, problem in _failures(r):
            title = f"{r.op} · {r.case.id} · {r.mode} · {r.provider}" + (f" · {output}" if output else "")
            blocks.append(f"**{title}**\n\n```\n{problem}\n```" if markdown else f"{title}:\n{problem}")
    return "\n\n".join(blocks)


def summarize(results: Sequence[CaseResult]) -> tuple[int, int, int]:
    """(passed, failed, skipped) counts over (case, mode) results."""
    passed = sum(r.passed for r in results)
    skipped = sum(bool(r.skipped) for r in results)
    return passed, len(results) - passed - skipped, skipped


def sanitize_grid(results: Sequence[CaseResult], *, links_from: Path | None = None) -> str:
    """The compute-sanitizer runs among ``results`` as a Markdown table (empty when there are none): one row per
    op, case, mode and provider, one column per tool, each cell the run's verdict (``clean``, ``clean (2
    ignored)``, ``3 errors (1 outside the op)``, ``did not finish``, ``skip``); with ``links_from``, a kept log
    is linked, relative to that folder."""
    runs = [r for r in results if r.tool]
    tools = list(dict.fromkeys(r.tool for r in runs))
    cells: dict[tuple[str, str, str, str], dict[str, str]] = {}
    for r in runs:
        verdict = r.sanitizer.verdict if r.sanitizer else "skip"
        log = r.sanitizer.log if r.sanitizer else ""
        if links_from is not None and log:
            verdict = f"[{verdict}]({os.path.relpath(log, links_from)})"
        cells.setdefault((r.op, r.case.id, r.mode, r.provider), {})[r.tool] = verdict
    rows = [[*key, *(by_tool.get(t, "") for t in tools)] for key, by_tool in cells.items()]
    return markdown_table(["op", "case", "mode", "provider", *tools], rows) if rows else ""
