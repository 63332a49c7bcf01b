"""Plain-text and Markdown tables for the workbench's reports."""

from __future__ import annotations

from collections.abc import Sequence


def _cells(rows: Sequence[Sequence[object]]) -> list[list[str]]:
    return [["" if v is None else str(v) for v in row] for row in rows]


def text_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Aligned columns for the terminal (numbers right-aligned)."""
    body = _cells(rows)
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)]

    def fmt(row: Sequence[str]) -> str:
        out = []
        for v, w in zip(row, widths):
            numeric = v[:1].isdigit() or (v[:1] in "-." and v[1:2].isdigit())
            out.append(v.rjust(w) if numeric else v.ljust(w))
        return "  ".join(out).rstrip()

    lines = [fmt(list(headers)), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in body]
    return "\n".join(lines)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table."""
    body = _cells(rows)
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines)


def fmt_num(x: float | None, digits: int = 3) -> str:
    """Compact number: ``1.23e-05``, ``0.0123``, ``1234``, ``1.23e+09``."""
    if x is None or x != x:
        return "—"
    if x == 0:
        return "0"
    if abs(x) >= 1e7:  # a 35-digit integer reads as nothing
        return f"{x:.{digits - 1}e}"
    if abs(x) >= 1000:
        return f"{x:.0f}"
    if abs(x) < 1e-3:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"
