"""``kw lint PATH...``: static checks of Triton kernels (no GPU, no compile); exits 1 on findings.

    kw lint src/                          # ruff-style text, one hint line per finding
    kw lint src/ --select KW001,KW007     # only these codes (prefixes work: KW00)
    kw lint kernels.py --format sarif > lint.sarif

Exit status: 0 no findings, 1 findings of the selected codes, 2 usage errors (missing path, unknown code).
Settings come from ``[tool.kernelworks.lint]`` in the nearest pyproject.toml; ``# noqa: KW001`` silences one
line. Usable as a pre-commit hook (``kw-lint`` in .pre-commit-hooks.yaml).
"""

from __future__ import annotations

import argparse
import sys


def _codes(value: str) -> list[str]:
    return [c for c in value.replace(" ", "").split(",") if c]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lint", help="static checks of Triton kernels (AST, no GPU)",
                       description="Find @triton.jit kernels and their launches and report likely bugs "
                                   "(KW001 unmasked access ... KW017 unmasked atomic past the data).")
    add_arguments(p)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``kw lint`` options (shared by the subcommand and :func:`build_parser`)."""
    from kernelworks.lint import FORMATS

    p.add_argument("paths", nargs="+", metavar="PATH", help="files or directories (searched for *.py)")
    p.add_argument("--select", type=_codes, default=None, metavar="CODES",
                   help="comma-separated codes or prefixes to report (default: all, or the pyproject's select)")
    p.add_argument("--ignore", type=_codes, default=None, metavar="CODES",
                   help="comma-separated codes or prefixes to leave out (added to the pyproject's ignore)")
    p.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    p.add_argument("--show-hints", dest="hints", action="store_true", default=True,
                   help="print a fix hint under each finding (default)")
    p.add_argument("--no-hints", dest="hints", action="store_false", help="findings only, no hint lines")


def build_parser() -> argparse.ArgumentParser:
    """A standalone ``kw lint`` parser (tests, and ``python -m kernelworks.cli.lint``)."""
    parser = argparse.ArgumentParser(prog="kw lint", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    from kernelworks.lint import lint_paths, render

    try:
        findings = lint_paths(args.paths, select=args.select, ignore=args.ignore)
    except (FileNotFoundError, ValueError) as e:
        print(f"kw lint: error: {e}", file=sys.stderr)
        return 2
    print(render(findings, args.format, hints=args.hints))
    return 1 if findings else 0


if __name__ == "__main__":
    raise SystemExit(run(build_parser().parse_args()))
