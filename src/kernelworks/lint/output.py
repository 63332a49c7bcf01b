"""Findings as text (ruff-style), JSON, or SARIF 2.1.0."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from kernelworks.lint.findings import Finding, Severity
from kernelworks.lint.rules import RULES

FORMATS = ("text", "json", "sarif")
_SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_INFO_URI = "https://github.com/kernelworks/kernelworks"


def format_text(findings: Sequence[Finding], hints: bool = True) -> str:
    """``path:line:col: KW001 [error] message`` lines (each with an indented hint) and a summary line."""
    lines = []
    for f in findings:
        lines.append(f"{f.path}:{f.line}:{f.col}: {f.code} [{f.severity.value}] {f.message}")
        if hints and f.hint:
            lines.append(f"    hint: {f.hint}")
    if findings:
        by = Counter(f.severity for f in findings)
        parts = [f"{by[s]} {s.value}{'s' if by[s] != 1 and s is not Severity.INFO else ''}"
                 for s in Severity if by[s]]
        lines.append(f"Found {len(findings)} finding{'s' if len(findings) != 1 else ''} ({', '.join(parts)}).")
    else:
        lines.append("All checks passed.")
    return "\n".join(lines)


def format_json(findings: Sequence[Finding]) -> str:
    """A JSON list of findings (``path, line, col, code, severity, message, hint``)."""
    return json.dumps([f.to_dict() for f in findings], indent=2)


def format_sarif(findings: Sequence[Finding]) -> str:
    """A minimal valid SARIF 2.1.0 log: one run, every rule described, one result per finding."""
    rules = [{
        "id": r.code,
        "name": type(r).__name__,
        "shortDescription": {"text": r.summary},
        "help": {"text": r.hint},
        "defaultConfiguration": {"level": _SARIF_LEVEL[r.severity]},
    } for r in RULES]
    index = {r.code: i for i, r in enumerate(RULES)}
    results = []
    for f in findings:
        result: dict[str, object] = {
            "ruleId": f.code,
            "level": _SARIF_LEVEL[f.severity],
            "message": {"text": f"{f.message}. Hint: {f.hint}" if f.hint else f.message},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": f.path.replace("\\", "/")},
                "region": {"startLine": f.line, "startColumn": f.col},
            }}],
        }
        if f.code in index:
            result["ruleIndex"] = index[f.code]
        results.append(result)
    log = {
        "$schema": _SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{"tool": {"driver": {"name": "kw lint", "informationUri": _INFO_URI, "rules": rules}},
                  "results": results}],
    }
    return json.dumps(log, indent=2)


def render(findings: Sequence[Finding], fmt: str = "text", hints: bool = True) -> str:
    """Findings in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "text":
        return format_text(findings, hints)
    if fmt == "json":
        return format_json(findings)
    if fmt == "sarif":
        return format_sarif(findings)
    raise ValueError(f"format: expected one of {FORMATS}, got {fmt!r}")
