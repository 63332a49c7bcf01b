"""``kw lint`` on the command line: exit codes, formats, options; the pre-commit hook definition."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from kernelworks.cli import lint as lint_cli

CORPUS = Path(__file__).parent / "corpus"
BAD = CORPUS / "bad" / "kw001_vector_add_nomask.py"
GOOD = CORPUS / "good" / "vector_add_masked.py"
REPO = Path(__file__).resolve().parents[2]


def kw_lint(*argv: str) -> int:
    return lint_cli.run(lint_cli.build_parser().parse_args(list(argv)))


def test_findings_exit_1_with_ruff_style_text(capsys):
    assert kw_lint(str(BAD)) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{BAD}:14:9: KW001 [error] tl.load without a mask")
    assert out[1].startswith("    hint: ")
    assert out[-1] == "Found 3 findings (3 errors)."


def test_clean_exit_0(capsys):
    assert kw_lint(str(GOOD)) == 0
    assert capsys.readouterr().out.strip() == "All checks passed."


def test_select_ignore_and_no_hints(capsys):
    assert kw_lint(str(BAD), "--select", "KW003,KW005") == 0
    assert kw_lint(str(BAD), "--ignore", "KW001") == 0
    capsys.readouterr()
    assert kw_lint(str(BAD), "--no-hints") == 1
    assert "hint:" not in capsys.readouterr().out


def test_json_and_sarif(capsys):
    assert kw_lint(str(BAD), "--format", "json") == 1
    assert {f["code"] for f in json.loads(capsys.readouterr().out)} == {"KW001"}
    assert kw_lint(str(BAD), "--format", "sarif") == 1
    assert len(json.loads(capsys.readouterr().out)["runs"][0]["results"]) == 3


@pytest.mark.parametrize("argv", [["does/not/exist.py"], [str(GOOD), "--select", "KW77"]])
def test_usage_errors_exit_2(argv, capsys):
    assert kw_lint(*argv) == 2
    assert "kw lint: error:" in capsys.readouterr().err


def test_add_parser_registers_the_subcommand():
    parser = argparse.ArgumentParser(prog="kw")
    sub = parser.add_subparsers(dest="command")
    lint_cli.add_parser(sub)
    args = parser.parse_args(["lint", "a.py", "b/", "--select", "KW001, KW007", "--format", "sarif", "--no-hints"])
    assert args.paths == ["a.py", "b/"] and args.select == ["KW001", "KW007"]
    assert args.format == "sarif" and args.hints is False
    with pytest.raises(SystemExit):
        parser.parse_args(["lint", "a.py", "--format", "xml"])


def test_pre_commit_hook_definition():
    text = (REPO / ".pre-commit-hooks.yaml").read_text()
    assert "- id: kw-lint" in text and "entry: kw lint" in text
    assert "language: python" in text and "types: [python]" in text
