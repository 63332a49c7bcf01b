"""Tables of check results: one row per output compared (forward outputs and each gradient)."""

from __future__ import annotations

from collections.abc import Sequence

from kernelworks.check.engine import CaseResult
from kernelworks.tables import fmt_num, markdown_table, text_table

HEADERS = ("op", "case", "mode", "provider", "output", "max abs", "max rel", "‖out−ref‖/‖ref‖", "allowed",
           "verdict")


def _rows(results: Sequence[CaseResult]) -> list[list[str]]:
    rows: list[list[str]] = []
    for r in results:
        head = [r.op, r.case.id, r.mode, r.provider]
        if r.skipped:
            rows.append([*head, "", "", "", "", "", f"skip ({r.skipped})"])
            continue
        for c in r.comparisons:
            verdict = "ok" if c.passed else f"FAIL: {c.problem}"
            rows.append([*head, c.output, fmt_num(c.max_abs), fmt_num(c.max_rel), fmt_num(c.rel_l2),
                         fmt_num(c.allowed), verdict])
        for p in r.problems:
            rows.append([*head, "", "", "", "", "", f"FAIL: {p}"])
    return rows


def check_table(results: Sequence[CaseResult], *, markdown: bool = False) -> str:
    """The check results as a terminal (or Markdown) table."""
    return (markdown_table if markdown else text_table)(HEADERS, _rows(results))


def summarize(results: Sequence[CaseResult]) -> tuple[int, int, int]:
    """(passed, failed, skipped) counts over (case, mode) results."""
    passed = sum(r.passed for r in results)
    skipped = sum(bool(r.skipped) for r in results)
    return passed, len(results) - passed - skipped, skipped
