"""The engine around the rules: noqa, select/ignore, pyproject config, file discovery, output formats."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from kernelworks.lint import CODES, RULES, Finding, Severity, iter_python_files, lint_paths, lint_source, render
from kernelworks.lint import config as config_module
from kernelworks.lint.noqa import noqa_lines

BUGGY = textwrap.dedent("""\
    import math

    import triton
    import triton.language as tl


    @triton.jit
    def k(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs){noqa_load}
        tl.store(x_ptr + offs, math.exp(x), mask=offs < n){noqa_store}


    def f(x):
        k[(triton.cdiv(x.numel(), 256),)](x, x.numel(), BLOCK=256)
    """)


def buggy(noqa_load: str = "", noqa_store: str = "") -> str:
    return BUGGY.format(noqa_load=noqa_load, noqa_store=noqa_store)


def test_findings_carry_everything():
    found = lint_source(buggy(), "pkg/kern.py")
    assert [(f.code, f.line, f.col) for f in found] == [("KW001", 10, 9), ("KW003", 11, 28)]
    f = found[0]
    assert f.path == "pkg/kern.py" and f.severity is Severity.ERROR and f.message and f.hint
    assert f.to_dict()["severity"] == "error"


@pytest.mark.parametrize(("load", "store", "left"), [
    ("  # noqa", "", {"KW003"}),
    ("  # noqa: KW001", "", {"KW003"}),
    ("  # noqa: E501, KW001", "  # NOQA:KW003", set()),
    ("  # noqa: KW003", "", {"KW001", "KW003"}),
    ("  # noqa: F841", "", {"KW001", "KW003"}),
])
def test_noqa(load, store, left):
    assert {f.code for f in lint_source(buggy(load, store))} == left


def test_noqa_inside_a_string_does_not_count():
    lines = noqa_lines('x = "# noqa"\ny = 1  # noqa: KW001\n')
    assert 1 not in lines and lines[2] == {"KW001"}


def test_select_and_ignore_with_prefixes():
    assert {f.code for f in lint_source(buggy(), select=["KW003"])} == {"KW003"}
    assert {f.code for f in lint_source(buggy(), ignore=["KW00"])} == set()
    assert {f.code for f in lint_source(buggy(), select=["ALL"], ignore=["KW001"])} == {"KW003"}
    with pytest.raises(ValueError, match="unknown rule code"):
        lint_source(buggy(), select=["KW999"])


def test_no_triton_no_work_and_syntax_errors_reported():
    assert lint_source("def f(:\n") == []  # no triton: not even parsed
    bad = lint_source("import triton\ndef f(:\n", "x.py")
    assert [(f.code, f.line) for f in bad] == [("KW000", 2)]


def _project(tmp_path: Path, section: str) -> Path:
    config_module.load_config.cache_clear()
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n\n" + section)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "kernels" / "a.py").write_text(buggy())
    (tmp_path / "tests" / "b.py").write_text(buggy())
    return tmp_path


def test_pyproject_select_ignore_and_per_file_ignores(tmp_path):
    root = _project(tmp_path, textwrap.dedent("""\
        [tool.kernelworks.lint]
        ignore = ["KW003"]
        per-file-ignores = { "tests/*" = ["KW001"] }
        """))
    found = {(Path(f.path).parent.name, f.code) for f in lint_paths([root])}
    assert found == {("kernels", "KW001")}
    # the command line adds to ignore and replaces select
    assert lint_paths([root], ignore=["KW001"]) == []
    assert {f.code for f in lint_paths([root / "kernels"], select=["KW003"])} == set()  # still ignored by config


def test_pyproject_select(tmp_path):
    root = _project(tmp_path, '[tool.kernelworks.lint]\nselect = ["KW003"]\n')
    assert {f.code for f in lint_paths([root])} == {"KW003"}


def test_pyproject_with_a_bad_code_is_a_usage_error(tmp_path):
    root = _project(tmp_path, '[tool.kernelworks.lint]\nignore = ["KW42"]\n')
    with pytest.raises(ValueError, match=r"pyproject\.toml"):
        lint_paths([root])


def test_without_tomllib_config_is_skipped(tmp_path, monkeypatch):
    root = _project(tmp_path, '[tool.kernelworks.lint]\nselect = ["KW003"]\n')
    monkeypatch.setattr(config_module, "tomllib", None)
    config_module.load_config.cache_clear()
    try:
        assert {f.code for f in lint_paths([root])} == {"KW001", "KW003"}
    finally:
        config_module.load_config.cache_clear()


def test_file_discovery_skips_hidden_and_build_dirs(tmp_path):
    for rel in ("a.py", "pkg/b.py", ".venv/c.py", "pkg/__pycache__/d.py", "build/e.py", "notes.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in iter_python_files([tmp_path])) == ["a.py", "pkg/b.py"]
    with pytest.raises(FileNotFoundError):
        iter_python_files([tmp_path / "missing"])


SAMPLE = [Finding("k.py", 3, 5, "KW001", Severity.ERROR, "msg one", "hint one"),
          Finding("k.py", 9, 1, "KW009", Severity.INFO, "msg two", "hint two")]


def test_text_format():
    text = render(SAMPLE)
    assert text.splitlines()[0] == "k.py:3:5: KW001 [error] msg one"
    assert "    hint: hint one" in text and text.endswith("Found 2 findings (1 error, 1 info).")
    assert "hint" not in render(SAMPLE, hints=False)
    assert render([]) == "All checks passed."


def test_json_format():
    data = json.loads(render(SAMPLE, "json"))
    assert data[0] == {"path": "k.py", "line": 3, "col": 5, "code": "KW001", "severity": "error",
                       "message": "msg one", "hint": "hint one"}


def test_sarif_format_is_minimal_valid_2_1_0():
    log = json.loads(render(SAMPLE, "sarif"))
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] and [r["id"] for r in driver["rules"]] == list(CODES)
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"]
        assert rule["defaultConfiguration"]["level"] in ("error", "warning", "note")
    first, second = run["results"]
    assert first["ruleId"] == "KW001" and first["level"] == "error" and second["level"] == "note"
    assert driver["rules"][first["ruleIndex"]]["id"] == "KW001"
    region = first["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 3, "startColumn": 5}
    assert first["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "k.py"
    assert "hint one" in first["message"]["text"]


def test_unknown_format():
    with pytest.raises(ValueError, match="format"):
        render(SAMPLE, "xml")


def test_rules_have_unique_ordered_codes():
    assert list(CODES) == sorted(set(CODES)) == [f"KW{i:03d}" for i in range(1, 18)]
    assert len(RULES) == 17


def test_pyproject_launchers_reach_the_rules(tmp_path):
    config_module.load_config.cache_clear()
    (tmp_path / "pyproject.toml").write_text('[tool.kernelworks.lint]\nlaunchers = ["rt.go"]\n')
    (tmp_path / "k.py").write_text(textwrap.dedent("""\
        import triton
        import triton.language as tl
        from rt import go


        @triton.jit
        def k(x_ptr):
            tl.store(x_ptr + tl.program_id(1), 0.0)


        def f(x):
            go(k, (4,), x)
        """))
    try:
        assert [f.code for f in lint_paths([tmp_path])] == ["KW005"]
    finally:
        config_module.load_config.cache_clear()
