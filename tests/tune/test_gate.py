"""The compile gate on the CPU: candidates compiled for sm_90 in worker processes before any runs; a compile
error, a time-out or spills above the bound is the candidate's verdict and it never runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from kernelworks.tune import table, tune_case
from kernelworks.tune.gate import CompileGate

_path = Path(__file__).with_name("gate_kernels.py")
_module_spec = importlib.util.spec_from_file_location("gate_kernels", _path)
gk = importlib.util.module_from_spec(_module_spec)
_module_spec.loader.exec_module(gk)

CASE = gk.SPEC.bench_cases[0]


def _timer(fn):
    fn()
    return (1.0, 0.9, 1.1)


@pytest.fixture(autouse=True)
def _fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELWORKS_CACHE", str(tmp_path))
    gk.RUNS.clear()


def test_compile_errors_and_spills_are_verdicts_and_never_run():
    res = tune_case(gk.SPEC, CASE, strategy="exhaustive", timer=_timer, target="sm_90", compile_workers=2)
    verdicts = [c.verdict for c in res.candidates]
    assert verdicts == ["ok", "ok", "compile error", "spills", "ok"], [(c.verdict, c.detail) for c in res.candidates]
    assert "arange" in res.candidates[2].detail or "power of 2" in res.candidates[2].detail
    spill = res.candidates[3]
    assert spill.spill_bytes > 64 and "B per thread > 64 B" in spill.detail and spill.registers <= 32
    assert {c["BLOCK"] for c in gk.RUNS} == {64, 128}, "a config the gate turned away was run"
    assert all(c.registers and c.spill_bytes == 0 for c in res.candidates if c.verdict == "ok")
    md = table([res])
    assert "compiled for sm_90" in md and "| 4 | BLOCK=4096, num_warps=1, maxnreg=32 | spills:" in md


def test_the_spill_bound_is_an_option():
    res = tune_case(gk.SPEC, CASE, strategy="exhaustive", timer=_timer, target="sm_90", spill_limit=1 << 20)
    assert [c.verdict for c in res.candidates] == ["ok", "ok", "compile error", "ok", "ok"]


def test_a_compile_past_the_time_out_is_a_verdict():
    gate = CompileGate(gk.SPEC, CASE, "sm_90", timeout_s=0.01, workers=2)
    checks = gate.check([dict(c) for c in gk.CONFIGS])
    assert {c.verdict for c in checks} == {"compile timeout"}, [(c.verdict, c.detail) for c in checks]
    assert "no result after 0.01 s" in checks[0].detail


def test_no_gpu_and_no_target_skips_the_gate():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the gate compiles for it")
    res = tune_case(gk.SPEC, CASE, strategy="exhaustive", timer=_timer)
    assert res.target is None
    # without the gate the broken config reaches the run, which fails it there
    assert [c.verdict for c in res.candidates][2] == "error"


def test_the_user_example_passes_the_gate():
    path = Path(__file__).parents[2] / "examples" / "user_kernel.py"
    spec_ = importlib.util.spec_from_file_location("user_kernel_example_gate", path)
    module = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(module)
    gate = CompileGate(module.SPEC, module.SPEC.bench_cases[0], "sm_90", workers=2)
    checks = gate.check([{}, *module.CONFIGS])
    assert all(c.verdict == "ok" and c.registers for c in checks), [(c.verdict, c.detail) for c in checks]
