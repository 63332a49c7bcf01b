"""The ``kw`` command end to end, in-process (plus one real subprocess for the entry point)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from kernelworks.cli.main import main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "user_kernel.py"


def test_python_dash_m_entry_point():
    out = subprocess.run([sys.executable, "-m", "kernelworks", "--version"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("kernelworks ") and "triton" in out.stdout


def test_ops_lists_registry(capsys):
    assert main(["ops"]) == 0
    out = capsys.readouterr().out
    for name in ("softmax", "log_softmax", "gelu", "silu", "swiglu", "geglu"):
        assert name in out


def test_check_user_spec_passes(capsys):
    assert main(["check", f"{EXAMPLE}:SPEC"]) == 0
    out = capsys.readouterr().out
    assert "one_row-fp32" in out and "0 failed" in out


def test_check_exits_nonzero_on_a_buggy_kernel(tmp_path, capsys):
    buggy = tmp_path / "buggy.py"
    buggy.write_text(textwrap.dedent(f"""
        import importlib.util, torch
        spec = importlib.util.spec_from_file_location("uk", {str(EXAMPLE)!r})
        uk = importlib.util.module_from_spec(spec); spec.loader.exec_module(uk)
        from kernelworks.spec import OpSpec, Provider
        import dataclasses
        # off by one slope: a plausible bug
        SPEC = dataclasses.replace(uk.SPEC, providers={{"mine": Provider("mine",
            lambda x, slope: uk.leaky_relu(x, slope * 1.5))}})
    """))
    assert main(["check", f"{buggy}:SPEC"]) == 1
    assert "FAIL" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_bench_refuses_without_gpu(capsys):
    assert main(["bench", "softmax"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().out


def test_unknown_op_is_a_clear_error(capsys):
    assert main(["check", "nonexistent_op"]) == 2
    assert "no op named 'nonexistent_op'" in capsys.readouterr().err


def test_a_case_filter_matching_nothing_is_an_error_not_a_pass(capsys):
    assert main(["check", "softmax", "--case", "3x13-fp16", "--quick"]) == 2
    assert "no case matched" in capsys.readouterr().err


def test_a_check_where_every_case_skipped_is_not_a_pass(capsys, monkeypatch):
    """A provider that is not installed (here: made absent) checks nothing; that exits 2, not 0."""
    from kernelworks.spec import load_spec

    spec = load_spec("softmax")
    monkeypatch.setattr(type(spec.provider("kernelworks")), "available", lambda self: (False, "made absent"))
    assert main(["check", "softmax", "--quick", "--no-probes"]) == 2
    assert "nothing was checked" in capsys.readouterr().err


def test_check_all_with_a_case_runs_the_ops_that_have_it(capsys):
    assert main(["check", "all", "--case", "t5-k2-h24-fp32", "--no-probes"]) == 0
    out = capsys.readouterr().out
    assert "moe_permute" in out and "moe_unpermute" in out and "softmax" not in out


def test_unknown_provider_lists_the_providers(capsys):
    assert main(["check", "softmax", "--quick", "--provider", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "no provider 'nosuch'" in err and "kernelworks" in err


@pytest.mark.parametrize("source, what", [("SPEC = (\n", "bad.py, line 1"),
                                            ("import no_such_module_xyz\n", "no_such_module"),
                                            ("SPEC = undefined_name\n", "NameError: name 'undefined_name'"),
                                            ("import sys\nsys.exit(0)\n", "SystemExit: 0")],
                         ids=["syntax_error", "import_error", "name_error", "exits_at_import"])
def test_a_broken_spec_file_is_a_one_line_error(tmp_path, capsys, source, what):
    bad = tmp_path / "bad.py"
    bad.write_text(source)
    assert main(["check", f"{bad}:SPEC"]) == 2
    assert what in capsys.readouterr().err


def test_a_spec_file_without_its_attribute_name_hints_at_the_form(tmp_path, capsys):
    assert main(["check", "my_specs.py"]) == 2
    assert "FILE.py:SPEC" in capsys.readouterr().err


def test_render_refuses_a_missing_or_malformed_results_folder(tmp_path, capsys):
    """A mistyped --results must not replace the page with an empty one; a malformed file is named."""
    out = tmp_path / "BENCHMARKS.md"
    out.write_text("kept")
    assert main(["render", "--results", str(tmp_path / "resluts"), "--out", str(out), "--no-plots"]) == 2
    assert out.read_text() == "kept" and "no results folder" in capsys.readouterr().err
    bad = tmp_path / "results" / "gpu" / "softmax.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"op": "softmax", "environment": {}, "records": [{"case": "a"}]}')
    assert main(["render", "--results", str(tmp_path / "results"), "--out", str(out), "--no-plots"]) == 2
    assert "softmax.json: record 0 is not a bench record" in capsys.readouterr().err and out.read_text() == "kept"


def test_report_out_that_is_a_file_is_an_error(tmp_path, capsys):
    out = tmp_path / "a_file"
    out.write_text("")
    assert main(["report", "--op", "softmax", "--out", str(out)]) == 2
    assert "kw report: error" in capsys.readouterr().err


def test_inspect_refuses_a_config_knob_the_search_space_lacks(capsys):
    assert main(["inspect", f"{EXAMPLE}:SPEC", "--config", "BLOK=2048"]) == 2
    assert "BLOK" in capsys.readouterr().err


def test_report_without_gpu_writes_markdown(tmp_path, capsys):
    code = main(["report", "--op", "silu", "--out", str(tmp_path), "--no-bench"])
    text = (tmp_path / "report.md").read_text()
    assert code == 0, text
    assert "## Correctness" in text and "| silu |" in text
    assert "## Lint" in text and "No findings." in text
    assert "_activation_fwd_kernel" in text and "_activation_bwd_kernel" in text  # inspected for sm_90


# ----------------------------------------------------------------------------- errors and streaming output

_SPECS = textwrap.dedent("""
    import torch
    from kernelworks.spec import Case, Cost, OpSpec, Provider, randn

    def _spec(name, fn):
        return OpSpec(name=name, reference=lambda x: torch.relu(x),
                      inputs=lambda case, device: {"x": randn((2, 5), case, device)},
                      check_cases=[Case("tiny", {}, torch.float32)], bench_cases=[], cost=lambda c, m: Cost(),
                      providers={"mine": Provider("mine", fn)}, subject="mine", baselines=("torch",))

    def _interrupted(x):
        raise KeyboardInterrupt  # the run is cut short while this op is being checked

    def _long_error(x):
        raise RuntimeError("first line\\n" + "a very long interpreter repr " * 100)

    def _stale():  # the first answer returned again for any input of the same shape
        memo = {}
        return lambda x: memo.setdefault(x.shape, torch.relu(x)).clone()

    GOOD = _spec("good", torch.relu)
    STALE = _spec("stale", _stale())
    CUT = _spec("cut", _interrupted)
    LOUD = _spec("loud", _long_error)
    NOT_A_SPEC = 3
""")


@pytest.fixture
def specs_file(tmp_path):
    path = tmp_path / "specs.py"
    path.write_text(_SPECS)
    return path


def test_check_unknown_attribute_names_what_the_file_has(specs_file, capsys):
    assert main(["check", f"{specs_file}:NOPE"]) == 2
    err = capsys.readouterr().err
    assert "has no 'NOPE'" in err and "CUT, GOOD, LOUD, STALE" in err and "NoneType" not in err
    assert main(["check", f"{specs_file}:NOT_A_SPEC"]) == 2
    assert "'NOT_A_SPEC' is a int" in capsys.readouterr().err


def test_check_prints_each_op_as_it_finishes(specs_file, capsys):
    """A run cut short (here: interrupted while the second op runs) has already printed the first op."""
    with pytest.raises(KeyboardInterrupt):
        main(["check", f"{specs_file}:GOOD", f"{specs_file}:CUT"])
    out = capsys.readouterr().out
    assert "good" in out and "tiny-fp32" in out and "ok" in out


def test_check_failures_are_one_line_unless_verbose(specs_file, capsys):
    assert main(["check", f"{specs_file}:LOUD"]) == 1
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if "FAIL" in line]
    verdict = row[row.index("FAIL"):]
    assert verdict.startswith("FAIL: raised RuntimeError: first line a very long") and len(verdict) <= 126
    assert "a very long interpreter repr " * 100 not in out
    assert main(["check", f"{specs_file}:LOUD", "--verbose"]) == 1
    assert "first line\n" + "a very long interpreter repr " * 100 in capsys.readouterr().out


def test_check_probes_for_a_stale_result_unless_told_not_to(specs_file, capsys):
    """Plain ``kw check`` runs the cheap probes: a result cached by shape fails; ``--no-probes`` lets it pass."""
    assert main(["check", f"{specs_file}:STALE", "--verbose"]) == 1
    assert "adversarial (fresh values in the same tensors)" in capsys.readouterr().out
    assert main(["check", f"{specs_file}:STALE", "--no-probes"]) == 0
    with pytest.raises(SystemExit):  # all probes and none: contradictory
        main(["check", f"{specs_file}:STALE", "--no-probes", "--adversarial"])


def test_diagnose_without_a_case_lists_the_cases(capsys):
    assert main(["diagnose", "softmax"]) == 2
    out = capsys.readouterr().out
    assert "--case" in out and "8192x8192-bf16" in out and "1x7-fp32" in out
    assert main(["diagnose", "softmax", "--case", "nope"]) == 2
    assert "no case named 'nope'" in capsys.readouterr().err


def test_report_prints_a_summary_not_the_report(tmp_path, capsys):
    assert main(["report", "--op", "silu", "--op", "gelu", "--out", str(tmp_path), "--no-bench"]) == 0
    out = capsys.readouterr().out
    assert "## Lint" not in out and "| op |" not in out  # the report stays in its file
    assert "gelu:" in out and "silu:" in out and "2 ops:" in out and " 0 failed" in out
    assert str(tmp_path / "report.md") in out
    assert main(["report", "--op", "nope", "--out", str(tmp_path)]) == 2
    assert "no op named 'nope'" in capsys.readouterr().err


def test_report_keeps_what_it_found_when_cut_short(tmp_path):
    from kernelworks.report import make_report

    def stop_after_first(line: str) -> None:
        raise KeyboardInterrupt(line)

    with pytest.raises(KeyboardInterrupt):
        make_report(tmp_path, ops=["gelu", "silu"], bench=False, log=stop_after_first)
    text = (tmp_path / "report.md").read_text()
    assert "| gelu |" in text and "| silu |  |  |  | not run (cut short) |" in text


def test_bench_names_a_bad_op_or_case_before_asking_for_a_gpu(capsys):
    """A typo is reported as such on any machine, not hidden behind the GPU message."""
    assert main(["bench", "softmx"]) == 2
    assert "no op named 'softmx'" in capsys.readouterr().err
    assert main(["bench", "swiglu", "--case", "nope"]) == 2
    assert "has no bench case named ['nope']" in capsys.readouterr().err
    assert main(["bench", "all", "--case", "nope"]) == 2
    assert "no op has a bench case named ['nope']" in capsys.readouterr().out


def test_a_subcommand_reports_its_own_unknown_flags(capsys):
    with pytest.raises(SystemExit) as e:
        main(["check", "softmax", "--qick"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: kw check") and "unrecognized arguments: --qick" in err


def test_ops_lists_an_ops_case_ids(capsys):
    assert main(["ops", "softmax"]) == 0
    out = capsys.readouterr().out
    assert "1x4096-bf16" in out and "bench" in out and "check" in out


def test_an_unknown_case_is_a_value_error_printed_without_quotes():
    from kernelworks.spec import UnknownCaseError, load_spec

    with pytest.raises(ValueError, match="no bench case named") as e:
        load_spec("softmax").find_cases(["nope"], bench=True)
    assert isinstance(e.value, KeyError) and isinstance(e.value, UnknownCaseError)
    assert str(e.value).startswith("spec 'softmax' has no bench case")


def test_report_takes_a_users_own_spec(tmp_path, capsys):
    """README: the workbench is generic over a spec, so ``kw report --op FILE.py:SPEC`` reports your kernel (it
    answered "no op named"); a spec of your own runs all its cases, having no quick subset of ours."""
    assert main(["report", "--op", f"{EXAMPLE}:SPEC", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1 ops:" in out and "0 failed" in out
    assert "| one_row-fp32 |" in (tmp_path / "report.md").read_text()
