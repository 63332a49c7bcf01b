"""``[tool.kernelworks.lint]`` in the nearest ``pyproject.toml``, and which codes apply to which file.

    [tool.kernelworks.lint]
    select = ["KW"]                    # codes or prefixes; default: every rule
    ignore = ["KW009", "KW010"]
    per-file-ignores = { "tests/*" = ["KW001"], "examples/**" = ["KW007", "KW008"] }
    launchers = ["mypkg.runtime.launch"]   # your wrappers called as f(kernel, grid, *args, **constexprs)

Globs are matched against the file's path relative to the directory holding the ``pyproject.toml``
(``fnmatch`` rules; ``*`` also crosses ``/``). On Python 3.10 without ``tomllib`` the file is not read and
the defaults apply.
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: no tomllib in the standard library; config is skipped
    tomllib = None

from kernelworks.lint.rules import CODES


def parse_codes(values: Iterable[str], where: str) -> list[str]:
    """Validate codes or prefixes (``KW001``, ``KW00``, ``KW``, ``ALL``); raise ``ValueError`` naming ``where``."""
    out = []
    for raw in values:
        code = raw.strip().upper()
        if not code:
            continue
        if code != "ALL" and not any(c.startswith(code) for c in CODES):
            raise ValueError(f"{where}: unknown rule code {raw!r} (known: {', '.join(CODES)})")
        out.append(code)
    return out


def _matches(code: str, patterns: Iterable[str]) -> bool:
    return any(p == "ALL" or code.startswith(p) for p in patterns)


def enabled(code: str, select: Sequence[str] | None, ignore: Sequence[str]) -> bool:
    """Whether ``code`` is selected (everything when ``select`` is None) and not ignored."""
    return (select is None or _matches(code, select)) and not _matches(code, ignore)


@dataclass(frozen=True)
class LintConfig:
    """The lint settings of one project (empty when there is no pyproject or no section)."""

    root: Path | None = None
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = field(default_factory=tuple)
    launchers: tuple[str, ...] = ()

    def ignored_for(self, path: Path) -> tuple[str, ...]:
        """The codes ``per-file-ignores`` turns off for ``path``."""
        if self.root is None:
            return ()
        try:
            rel = path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            rel = path.as_posix()
        out: list[str] = []
        for pattern, codes in self.per_file_ignores:
            if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(rel, pattern.rstrip("/") + "/*"):
                out += codes
        return tuple(out)


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` at or above ``start`` (a file or a directory)."""
    here = start.resolve()
    for d in [here, *here.parents] if here.is_dir() else list(here.parents):
        candidate = d / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


@functools.lru_cache(maxsize=64)
def load_config(pyproject: Path | None) -> LintConfig:
    """Read ``[tool.kernelworks.lint]`` from ``pyproject`` (defaults when absent or unreadable)."""
    if pyproject is None or tomllib is None:
        return LintConfig()
    with open(pyproject, "rb") as f:
        try:
            data = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{pyproject}: invalid TOML: {e}") from e
    section = data.get("tool", {}).get("kernelworks", {}).get("lint", {})
    where = f"{pyproject} [tool.kernelworks.lint]"
    select = section.get("select")
    pfi = section.get("per-file-ignores", section.get("per_file_ignores", {}))
    if not isinstance(pfi, dict):
        raise ValueError(f"{where}: per-file-ignores must be a table of glob = [codes]")
    launchers = section.get("launchers", [])
    if not (isinstance(launchers, list) and all(isinstance(x, str) for x in launchers)):
        raise ValueError(f"{where}: launchers must be a list of qualified names")
    return LintConfig(
        launchers=tuple(launchers),
        root=pyproject.parent.resolve(),
        select=tuple(parse_codes(select, where)) if select is not None else None,
        ignore=tuple(parse_codes(section.get("ignore", []), where)),
        per_file_ignores=tuple((glob, tuple(parse_codes(codes, where))) for glob, codes in pfi.items()),
    )


def config_for(path: Path) -> LintConfig:
    """The config that applies to ``path``: from the nearest ``pyproject.toml`` above it."""
    return load_config(find_pyproject(path))
