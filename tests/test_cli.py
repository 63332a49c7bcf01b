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


def test_report_without_gpu_writes_markdown(tmp_path, capsys):
    code = main(["report", "--op", "silu", "--out", str(tmp_path), "--no-bench"])
    text = (tmp_path / "report.md").read_text()
    assert code == 0, text
    assert "## Correctness" in text and "| silu |" in text
    assert "## Lint" in text and "No findings." in text
    assert "_activation_fwd_kernel" in text and "_activation_bwd_kernel" in text  # inspected for sm_90
