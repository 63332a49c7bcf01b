"""Run the rules: :func:`lint_source` on one text, :func:`lint_paths` over files and directories."""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.config import config_for, enabled, parse_codes
from kernelworks.lint.findings import Finding, Severity
from kernelworks.lint.noqa import noqa_lines, silenced
from kernelworks.lint.rules import RULES

SYNTAX_ERROR = "KW000"
"""Code of the finding reported for a file that does not parse (always reported)."""

_RECURSION_LIMIT = 4000
"""Headroom for the recursive evaluator on long kernels (its own depth guard stops well before this)."""

_SKIP_DIRS = frozenset({"__pycache__", "node_modules", "build", "dist", "site-packages"})


def lint_source(text: str, path: str = "<string>", select: Sequence[str] | None = None,
                ignore: Sequence[str] | None = None, launchers: Sequence[str] = ()) -> list[Finding]:
    """Lint the Triton kernels in one module's source text.

    Args:
        text: Python source.
        path: the name findings carry (not read).
        select: codes or prefixes to report (default: all); ``ignore``: codes or prefixes to drop.
        launchers: qualified names of your own launch wrappers called as ``f(kernel, grid, *args, **kw)``.

    Returns:
        Findings sorted by position, with ``# noqa`` comments applied.

    Example:
        >>> lint_source("import triton\\n...")
        []
    """
    sel = parse_codes(select, "select") if select is not None else None
    ign = parse_codes(ignore or [], "ignore")
    if "triton" not in text:
        return []
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as e:
        return [Finding(path, e.lineno or 1, (e.offset or 1), SYNTAX_ERROR, Severity.ERROR,
                        f"cannot parse: {e.msg}", "fix the syntax error")]
    analysis = Analysis(tree, path, launchers)
    quiet = noqa_lines(text)
    found: dict[tuple[int, int, str], Finding] = {}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, _RECURSION_LIMIT))
    try:
        hits = [(rule, hit) for rule in RULES if enabled(rule.code, sel, ign) for hit in rule.check(analysis)]
    finally:
        sys.setrecursionlimit(limit)
    for rule, hit in hits:
        line, col = getattr(hit.node, "lineno", 1), getattr(hit.node, "col_offset", 0) + 1
        if silenced(rule.code, line, quiet):
            continue
        key = (line, col, rule.code)
        if key not in found:
            found[key] = Finding(path, line, col, rule.code, hit.severity or rule.severity, hit.message,
                                 hit.hint or rule.hint)
    return sorted(found.values(), key=lambda f: (f.line, f.col, f.code))


def iter_python_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The ``.py`` files named by ``paths`` (directories walked, hidden and build directories skipped).

    Raises ``FileNotFoundError`` for a path that does not exist.
    """
    out: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
        if p.is_file():
            out.append(p)
            continue
        for root, dirs, files in os.walk(p):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS
                             and not d.endswith(".egg-info"))
            out += [Path(root) / f for f in sorted(files) if f.endswith(".py")]
    return out


def lint_paths(paths: Iterable[str | os.PathLike[str]], select: Sequence[str] | None = None,
               ignore: Sequence[str] | None = None) -> list[Finding]:
    """Lint every Python file under ``paths`` with each file's ``[tool.kernelworks.lint]`` config.

    ``select`` replaces the config's ``select``; ``ignore`` adds to its ``ignore``; ``per-file-ignores``
    always apply. Raises ``FileNotFoundError``/``ValueError`` for a missing path or an unknown code.
    """
    sel_arg = parse_codes(select, "--select") if select is not None else None
    ign_arg = parse_codes(ignore or [], "--ignore")
    findings: list[Finding] = []
    for file in iter_python_files(paths):
        cfg = config_for(file)
        sel = sel_arg if sel_arg is not None else (list(cfg.select) if cfg.select is not None else None)
        ign = [*cfg.ignore, *ign_arg, *cfg.ignored_for(file)]
        text = file.read_text(encoding="utf-8", errors="replace")
        findings += lint_source(text, str(file), sel, ign, cfg.launchers)
    return findings
