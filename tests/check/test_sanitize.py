"""``kw check --sanitize``: the refusal, the child's command line, environment and the kernels it reports,
the runs end to end through a stand-in compute-sanitizer (any machine: verdicts, ignore rules, kept logs, the
CLI and ``kw report``), and on a GPU the real tool: a quick case of a real op comes back clean, a kernel with
an unmasked tail comes back with memcheck errors, reads of unwritten memory with initcheck errors (in the op's
kernel, or outside it). The log parser's own tests, on the sample logs in ``sanitize_logs/``, are in
``test_sanitize_log.py``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import stat
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from kernelworks.check.sanitize import (
    ERROR_EXITCODE,
    MEMCHECK_PADDING,
    TIMEOUTS,
    TOOLS,
    child_command,
    child_env,
    find_sanitizer,
    parse_tools,
    run_sanitize,
    sanitize_summary,
    spec_target,
    unavailable,
)
from kernelworks.check.sanitize_child import KERNELS_MARK, SKIP_MARK, SKIPPED, recording_kernel_loads, run_case
from kernelworks.check.sanitize_log import OUTSIDE, IgnoreRule
from kernelworks.cli.check import sanitize_request
from kernelworks.cli.main import build_parser, main
from kernelworks.spec import load_spec

FIXTURES = Path(__file__).resolve().parent / "sanitize_fixtures.py"

SAMPLES = Path(__file__).resolve().parent / "sanitize_logs"
CLEAN, MEMCHECK_OOB, INITCHECK_TORCH, CRASHED = ((SAMPLES / name).read_text() for name in (
    "memcheck-clean.log", "memcheck-oob.log", "initcheck-torch-kernel.log", "no-summary.log"))
TRACEBACK = """\
Traceback (most recent call last):
  File "/src/kernelworks/check/sanitize_child.py", line 60, in run_case
    torch.cuda.synchronize()
torch.AcceleratorError: CUDA error: unspecified launch failure
"""


# ------------------------------------------------------------------------------------- the child process

def test_child_command_for_memcheck_and_the_other_tools(tmp_path):
    log = tmp_path / "x.log"
    assert child_command("/cuda/bin/compute-sanitizer", "memcheck", "softmax", "1x7-fp32", 3, log,
                         python="/py") == [
        "/cuda/bin/compute-sanitizer", "--tool", "memcheck", "--error-exitcode", str(ERROR_EXITCODE),
        "--log-file", str(log), "--padding", str(MEMCHECK_PADDING),
        "/py", "-m", "kernelworks.check.sanitize_child", "softmax", "1x7-fp32", "--seed", "3"]
    cmd = child_command("cs", "racecheck", "/a/b.py:SPEC", "odd-fp16", 0, log, provider="triton", python="/py")
    assert "--padding" not in cmd
    assert cmd[-8:] == ["-m", "kernelworks.check.sanitize_child", "/a/b.py:SPEC", "odd-fp16", "--seed", "0",
                        "--provider", "triton"]
    assert "--padding" not in child_command("cs", "memcheck", "t", "c", 0, log, padding=0)


def test_child_env_turns_the_caching_allocator_and_the_interpreter_off():
    base = {"PATH": "/bin", "PYTHONPATH": "/elsewhere", "TRITON_INTERPRET": "1",
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "PYTORCH_ALLOC_CONF": "backend:cudaMallocAsync"}
    env = child_env(base)
    assert env["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1"
    assert not {"TRITON_INTERPRET", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"} & set(env)
    src = str(Path(__file__).resolve().parents[2] / "src")
    assert env["PYTHONPATH"].split(os.pathsep) == [src, "/elsewhere"]
    assert env["PATH"] == "/bin" and "PYTORCH_NO_CUDA_MEMORY_CACHING" not in base


def test_child_runs_forward_and_backward_once(device):
    spec = load_spec("softmax")
    assert run_case(spec, "1x7-fp32", seed=0, device=device) == "fwd+bwd"
    assert run_case(load_spec(f"{FIXTURES}:MASKED"), "1000", device=device) == "fwd"


def test_child_records_the_triton_kernels_loaded_while_the_provider_runs():
    import triton

    load = triton.knobs.runtime.kernel_load_end_hook  # what CompiledKernel calls once it has loaded a kernel
    names: set[str] = set()
    load(None, None, "_before", None, "h0")
    with recording_kernel_loads(names):
        load(None, None, "_softmax_fwd_kernel", None, "h1")
        load(None, None, "_softmax_bwd_kernel", None, "h2")
    load(None, None, "_after", None, "h3")
    assert names == {"_softmax_fwd_kernel", "_softmax_bwd_kernel"}
    assert not triton.knobs.runtime.kernel_load_end_hook.calls  # the hook is removed again


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the child's no-GPU refusal")
def test_child_refuses_without_gpu(capsys):
    from kernelworks.check.sanitize_child import main as child_main

    assert child_main(["softmax", "1x7"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_spec_target_names_a_registered_op_or_the_file_of_a_loaded_spec():
    assert spec_target(load_spec("softmax")) == "softmax"
    assert spec_target(load_spec(f"{FIXTURES}:OOB")) == f"{FIXTURES}:OOB"
    import dataclasses

    loose = dataclasses.replace(load_spec(f"{FIXTURES}:OOB"), name="nowhere")
    with pytest.raises(ValueError, match="define it at module level"):
        spec_target(loose)


def test_spec_target_of_several_specs_loaded_from_one_file():
    # kw check F:OOB F:MASKED loads both before either runs: the second load must not drop the first's module
    # (it did: sanitize_samples.sh's kw-fixtures runs failed with "not registered nor bound")
    oob, masked = load_spec(f"{FIXTURES}:OOB"), load_spec(f"{FIXTURES}:MASKED")
    assert (spec_target(oob), spec_target(masked)) == (f"{FIXTURES}:OOB", f"{FIXTURES}:MASKED")
    assert load_spec(f"{FIXTURES}:OOB") is oob  # the file ran once


def test_parse_tools():
    assert parse_tools(True) == TOOLS
    assert parse_tools("memcheck, racecheck,memcheck") == ("memcheck", "racecheck")
    assert parse_tools(["synccheck"]) == ("synccheck",)
    with pytest.raises(ValueError, match="unknown compute-sanitizer tool"):
        parse_tools("memcheck,leakcheck")
    assert set(TIMEOUTS) == set(TOOLS)


# ------------------------------------------------------------------------------------------- the refusal

def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_find_sanitizer_looks_on_path_then_in_cuda_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    if Path("/usr/local/cuda/bin/compute-sanitizer").exists():
        pytest.skip("this machine has /usr/local/cuda/bin/compute-sanitizer")
    assert find_sanitizer() is None or "nvidia" in find_sanitizer()  # a pip wheel may still provide one
    (tmp_path / "cuda" / "bin").mkdir(parents=True)
    (tmp_path / "cuda" / "bin" / "compute-sanitizer").write_text("not executable")
    found = find_sanitizer()
    assert found is None or "nvidia" in found
    home = _executable(tmp_path / "cuda" / "bin" / "compute-sanitizer")
    assert find_sanitizer() == str(home)
    on_path = _executable(tmp_path / "path" / "compute-sanitizer")
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert find_sanitizer() == str(on_path)


def test_unavailable_says_what_is_missing(monkeypatch):
    sanitize_module = importlib.import_module("kernelworks.check.sanitize")  # kernelworks.check is a function

    monkeypatch.setattr(sanitize_module, "find_sanitizer", lambda: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    why = unavailable()
    assert why is not None and why.count("\n- ") == 1
    assert "no CUDA GPU is visible" in why and "compute-sanitizer was not found" in why
    assert "nvidia-cuda-sanitizer-api" in why and "CUDA_HOME" in why
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert "GPU" not in unavailable()
    monkeypatch.setattr(sanitize_module, "find_sanitizer", lambda: "/x/compute-sanitizer")
    assert unavailable() is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_cli_refuses_without_gpu_before_any_case_runs(capsys):
    assert main(["check", "softmax", "--sanitize"]) == 2
    out = capsys.readouterr()
    assert out.out == ""  # no table: not one case ran
    assert out.err.startswith("kw check --sanitize cannot run here:\n- no CUDA GPU is visible")
    assert "Traceback" not in out.err
    assert main(["check", "softmax", "--sanitize-tools", "memcheck"]) == 2  # the tools imply --sanitize


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_api_refuses_without_gpu():
    import kernelworks

    with pytest.raises(RuntimeError, match="cannot run here:\n- no CUDA GPU"):
        kernelworks.check("softmax", sanitize=True, verbose=False)


def test_cli_arguments():
    args = build_parser().parse_args(["check", "softmax", "--quick", "--sanitize-tools", "memcheck,initcheck",
                                      "--sanitize-timeout", "45", "--sanitize-logs", "logs"])
    assert (args.sanitize, args.sanitize_tools, args.sanitize_timeout, args.sanitize_logs) == (
        False, "memcheck,initcheck", 45.0, "logs")
    args = build_parser().parse_args(["check", "softmax", "--sanitize"])
    assert args.sanitize and args.sanitize_tools is None and args.sanitize_timeout is None
    assert args.sanitize_ignore == [] and sanitize_request(args) == (TOOLS, ())
    args = build_parser().parse_args(["check", "softmax", "--sanitize-ignore", "initcheck:at::*",
                                      "--sanitize-ignore", "_k"])
    assert sanitize_request(args) == (TOOLS, (IgnoreRule("initcheck", "at::*"), IgnoreRule("", "_k")))
    assert sanitize_request(build_parser().parse_args(["check", "softmax"])) == ((), ())
    args = build_parser().parse_args(["report", "--sanitize-tools", "synccheck", "--sanitize-ignore", "*:x"])
    assert sanitize_request(args) == (("synccheck",), (IgnoreRule("", "x"),))
    assert not hasattr(args, "sanitize_logs")  # the report keeps its logs in OUT/sanitize-logs
    assert main(["check", "softmax", "--sanitize-tools", "memcheck,valgrind"]) == 2


# ------------------------------------------------------------- end to end through a stand-in sanitizer

FAKE = textwrap.dedent("""\
    #!{python}
    # Stands in for compute-sanitizer: records its command line and environment, writes the log asked for.
    import json, os, sys, time
    argv = sys.argv[1:]
    tool, log = argv[argv.index("--tool") + 1], argv[argv.index("--log-file") + 1]
    with open(os.environ["FAKE_RECORD"], "a") as f:
        f.write(json.dumps({{"argv": argv, "caching": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING"),
                            "interpret": os.environ.get("TRITON_INTERPRET")}}) + "\\n")
    mode = os.environ["FAKE_MODE"]
    if mode == "hang":
        time.sleep(60)
    if mode == "mixed":  # initcheck finds reads of unwritten memory, the other tools nothing
        mode = "torch" if tool == "initcheck" else "clean"
    logs = {{"clean": {clean!r}, "errors": {errors!r}, "skip": {clean!r}, "crash": {crashed!r}, "torch": {torch!r}}}
    open(log, "w").write(logs[mode])
    if mode == "skip":
        print({skip!r} + "peer_kernels is not installed")
    if mode == "errors":
        print({kernels!r} + "_oob_copy_kernel")
        print({traceback!r})
    if mode == "torch":
        print({kernels!r} + "_rms_norm_fwd_kernel")
    sys.exit({{"clean": 0, "errors": 1, "skip": {skipped}, "crash": 255, "torch": {exitcode}}}[mode])
""")


@pytest.fixture
def fake_sanitizer(tmp_path, monkeypatch):
    path = _executable(tmp_path / "bin" / "compute-sanitizer", FAKE.format(
        python=sys.executable, clean=CLEAN, errors=MEMCHECK_OOB, crashed=CRASHED, torch=INITCHECK_TORCH,
        skip=SKIP_MARK, kernels=KERNELS_MARK, traceback=TRACEBACK, skipped=SKIPPED, exitcode=ERROR_EXITCODE))
    monkeypatch.setenv("FAKE_RECORD", str(tmp_path / "record.jsonl"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")

    def records() -> list[dict]:
        return [json.loads(x) for x in (tmp_path / "record.jsonl").read_text().splitlines()]

    return str(path), records


def test_runs_each_case_under_each_tool(fake_sanitizer, tmp_path, monkeypatch):
    sanitizer, records = fake_sanitizer
    monkeypatch.setenv("FAKE_MODE", "clean")
    spec = load_spec("softmax")
    results = run_sanitize(spec, ["1x7-fp32", "13x127-bf16"], tools="memcheck,racecheck", seed=5,
                           sanitizer=sanitizer, log_dir=tmp_path / "logs")
    assert [(r.case.id, r.tool, r.mode, r.passed) for r in results] == [
        ("1x7-fp32", "memcheck", "fwd+bwd", True), ("1x7-fp32", "racecheck", "fwd+bwd", True),
        ("13x127-bf16", "memcheck", "fwd+bwd", True), ("13x127-bf16", "racecheck", "fwd+bwd", True)]
    runs = records()
    assert [r["argv"][1] for r in runs] == ["memcheck", "racecheck"] * 2
    child = runs[2]["argv"][runs[2]["argv"].index("kernelworks.check.sanitize_child") + 1:]
    assert child == ["softmax", "13x127-bf16", "--seed", "6"]  # case i gets seed + i, as in the checklist
    assert all(r["caching"] == "1" and r["interpret"] is None for r in runs)
    assert len(list((tmp_path / "logs").iterdir())) == 4  # every log kept when a folder is given
    assert sanitize_summary(results) == "compute-sanitizer (memcheck, racecheck): 4 clean, 0 with errors, " \
                                        "0 did not finish, 0 skipped"


def test_errors_fail_the_case_and_keep_the_log(fake_sanitizer, monkeypatch):
    sanitizer, _ = fake_sanitizer
    monkeypatch.setenv("FAKE_MODE", "errors")
    (res,) = run_sanitize(load_spec(f"{FIXTURES}:OOB"), tools=["memcheck"], sanitizer=sanitizer)
    assert not res.passed and res.mode == "fwd" and res.tool == "memcheck"
    (problem,) = res.problems
    assert problem.startswith("memcheck: 3 errors: Invalid __global__ read of size 16 bytes")
    log = Path(problem.rsplit("(log: ", 1)[1].rstrip(")"))
    try:
        assert log.read_text() == MEMCHECK_OOB  # kept: it found something
    finally:
        log.unlink()
        log.parent.rmdir()
    assert "1 with errors" in sanitize_summary([res])


def test_clean_logs_are_not_kept_by_default(fake_sanitizer, monkeypatch):
    sanitizer, _ = fake_sanitizer
    monkeypatch.setenv("FAKE_MODE", "clean")
    before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("kw-sanitize-*"))
    (res,) = run_sanitize(load_spec(f"{FIXTURES}:MASKED"), tools="initcheck", sanitizer=sanitizer)
    assert res.passed
    assert set(Path(os.environ.get("TMPDIR", "/tmp")).glob("kw-sanitize-*")) == before


def test_time_out_skip_and_crash(fake_sanitizer, monkeypatch, tmp_path):
    sanitizer, _ = fake_sanitizer
    spec = load_spec(f"{FIXTURES}:MASKED")
    monkeypatch.setenv("FAKE_MODE", "hang")
    (res,) = run_sanitize(spec, tools="racecheck", sanitizer=sanitizer, timeout=2, log_dir=tmp_path)
    assert res.problems[0].startswith("racecheck did not finish: timed out after 2 s") and res.seconds < 30
    monkeypatch.setenv("FAKE_MODE", "skip")
    (res,) = run_sanitize(spec, tools="memcheck", sanitizer=sanitizer, log_dir=tmp_path)
    assert res.skipped == "peer_kernels is not installed" and not res.problems
    monkeypatch.setenv("FAKE_MODE", "crash")
    (res,) = run_sanitize(spec, tools="synccheck", sanitizer=sanitizer, log_dir=tmp_path)
    assert res.problems[0].startswith("synccheck did not finish: it exited (status 255) without an error summary")
    assert "did not finish" in sanitize_summary([res])


def test_cli_table_details_and_exit_status(fake_sanitizer, monkeypatch, capsys):
    sanitize_module = importlib.import_module("kernelworks.check.sanitize")  # kernelworks.check is a function

    sanitizer, _ = fake_sanitizer
    monkeypatch.setattr(sanitize_module, "unavailable", lambda: None)
    monkeypatch.setattr(sanitize_module, "find_sanitizer", lambda: sanitizer)
    monkeypatch.setenv("FAKE_MODE", "clean")
    assert main(["check", f"{FIXTURES}:MASKED", "--sanitize-tools", "memcheck,synccheck"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "sanitize_masked" in line and "check " in line]
    assert len(rows) == 2 and all(line.rstrip().endswith("clean") for line in rows)
    assert "compute-sanitizer (memcheck, synccheck): 2 clean" in out
    monkeypatch.setenv("FAKE_MODE", "errors")
    assert main(["check", f"{FIXTURES}:MASKED", "--sanitize-tools", "memcheck", "-v"]) == 1
    out = capsys.readouterr().out
    assert "FAIL: memcheck: 3 errors: Invalid __global__ read of size 16 bytes at _oob_copy_kernel" in out
    assert "sanitize_masked · 1000-fp32 · fwd · mine · memcheck:\nmemcheck: 3 errors" in out  # -v details
    _remove_logs(out)


def _remove_logs(text: str) -> None:
    for line in text.splitlines():
        if "(log: " in line:
            log = Path(line.split("(log: ", 1)[1].rstrip(")"))
            log.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                log.parent.rmdir()


def test_reports_ignored_and_outside_the_op(fake_sanitizer, monkeypatch):
    sanitizer, _ = fake_sanitizer
    monkeypatch.setenv("FAKE_MODE", "torch")  # one report in the op's kernel, one in torch's reduction
    spec = load_spec(f"{FIXTURES}:MASKED")
    (res,) = run_sanitize(spec, tools="initcheck", sanitizer=sanitizer)
    assert not res.passed and res.sanitizer.verdict == "2 errors (1 outside the op)"
    assert res.problems[0].startswith("initcheck: 2 errors, 1 of them outside the op's kernels: ")
    assert f"\n\n{OUTSIDE}Uninitialized __global__ memory read" in res.problems[0]
    _remove_logs(res.problems[0])
    (res,) = run_sanitize(spec, tools="initcheck", sanitizer=sanitizer,
                          ignore=["initcheck:at::native::*", "*:_rms_norm_*"])
    assert res.passed and res.sanitizer.verdict == "clean (2 ignored)" and not res.problems
    (note,) = res.notes
    assert note.startswith("initcheck: 2 reports ignored (initcheck:at::native::*, *:_rms_norm_*), the first: "
                           "Uninitialized __global__ memory read")
    log = Path(res.sanitizer.log)
    assert note.endswith(f"(log: {log})") and log.read_text() == INITCHECK_TORCH  # kept: something to read
    _remove_logs(note)
    with pytest.raises(ValueError, match="unknown compute-sanitizer tool 'initchek'"):
        run_sanitize(spec, tools="initcheck", sanitizer=sanitizer, ignore=["initchek:x"])


def test_cli_ignore_rules(fake_sanitizer, monkeypatch, capsys):
    sanitize_module = importlib.import_module("kernelworks.check.sanitize")

    sanitizer, records = fake_sanitizer
    monkeypatch.setattr(sanitize_module, "unavailable", lambda: None)
    monkeypatch.setattr(sanitize_module, "find_sanitizer", lambda: sanitizer)
    monkeypatch.setenv("FAKE_MODE", "mixed")
    argv = ["check", f"{FIXTURES}:MASKED", "--sanitize-tools", "memcheck,initcheck", "-v"]
    assert main([*argv, "--sanitize-ignore", "initcheck:at::native::*", "--sanitize-ignore", "*:_rms_norm_*"]) == 0
    out = capsys.readouterr().out
    rows = [line.rstrip() for line in out.splitlines() if "sanitize_masked" in line and "check " in line]
    assert [(row.split()[4], row.split(maxsplit=5)[-1]) for row in rows] == [
        ("memcheck", "clean"), ("initcheck", "clean (2 ignored)")]
    assert "sanitize_masked · 1000-fp32 · fwd · mine: initcheck: 2 reports ignored" in out  # -v notes
    assert "compute-sanitizer (memcheck, initcheck): 2 clean, 0 with errors, 0 did not finish, 0 skipped; " \
           "2 reports ignored" in out
    _remove_logs(out)
    ran = len(records())
    assert main(["check", f"{FIXTURES}:MASKED", "--sanitize-ignore", "memchek:_k"]) == 2  # before anything runs
    captured = capsys.readouterr()
    assert "unknown compute-sanitizer tool 'memchek'" in captured.err and captured.out == ""
    assert len(records()) == ran


def test_report_sanitize_section(fake_sanitizer, monkeypatch, tmp_path, capsys):
    from kernelworks.report import SANITIZE_LOGS

    sanitize_module = importlib.import_module("kernelworks.check.sanitize")
    sanitizer, _ = fake_sanitizer
    monkeypatch.setattr(sanitize_module, "unavailable", lambda: None)
    monkeypatch.setattr(sanitize_module, "find_sanitizer", lambda: sanitizer)
    monkeypatch.setenv("FAKE_MODE", "mixed")
    code = main(["report", "--op", "silu", "--out", str(tmp_path), "--no-bench", "--sanitize-tools",
                 "memcheck,initcheck"])
    text = (tmp_path / "report.md").read_text()
    assert code == 1, text  # initcheck's errors fail the op
    out = capsys.readouterr().out
    assert "silu: compute-sanitizer (memcheck, initcheck): " in out and "(failing: silu)" in out
    section = text.split("## compute-sanitizer (`kw check --sanitize`)", 1)[1].split("\n## ", 1)[0]
    runs = json.loads((tmp_path / "sanitize.json").read_text())["runs"]
    cases = sorted({r["case"] for r in runs})
    assert cases and [(r["tool"], r["status"]) for r in runs] == [("memcheck", "clean"), ("initcheck", "errors")] * \
        len(cases)
    assert "| op | case | mode | provider | memcheck | initcheck |" in section
    for case in cases:
        log = f"{SANITIZE_LOGS}/silu-{case}-kernelworks-initcheck.log"
        assert f"| silu | {case} | fwd+bwd | kernelworks | [clean]({SANITIZE_LOGS}/silu-{case}-kernelworks-memcheck" \
               f".log) | [2 errors (1 outside the op)]({log}) |" in section
        assert (tmp_path / log).read_text() == INITCHECK_TORCH
        assert f"**silu · {case} · fwd+bwd · kernelworks · initcheck**: 2 errors (1 outside the op)\n\n```\n" \
               "Uninitialized __global__ memory read of size 4 bytes\nat _rms_norm_fwd_kernel" in section
    assert all(r["log"].endswith(f"-{r['tool']}.log") and r["verdict"] for r in runs)
    assert runs[1]["records"][1].startswith(OUTSIDE)
    assert main(["report", "--op", "silu", "--out", str(tmp_path / "again"), "--no-bench", "--sanitize",
                 "--sanitize-ignore", "initcheck:*"]) == 0  # all four tools; initcheck's reports ignored
    again = (tmp_path / "again" / "report.md").read_text()
    assert "| memcheck | racecheck | initcheck | synccheck |" in again and "clean (2 ignored)" in again


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_report_refuses_to_sanitize_without_gpu(tmp_path, capsys):
    assert main(["report", "--op", "silu", "--out", str(tmp_path), "--no-bench", "--sanitize"]) == 2
    assert "kw report --sanitize cannot run here:\n- no CUDA GPU is visible" in capsys.readouterr().err
    assert not (tmp_path / "report.md").exists()  # refused before any check ran


# ------------------------------------------------------------------------------------------ on a GPU

def _need_sanitizer() -> str:
    found = find_sanitizer()
    if found is None:
        pytest.skip("compute-sanitizer is not installed on this GPU machine")
    return found


@pytest.mark.gpu
def test_gpu_quick_case_of_a_real_op_is_clean_under_memcheck(tmp_path):
    _need_sanitizer()
    results = run_sanitize(load_spec("softmax"), ["1x7-fp32"], tools=["memcheck"], log_dir=tmp_path)
    assert [(r.tool, r.mode) for r in results] == [("memcheck", "fwd+bwd")]
    assert results[0].passed, results[0].problems
    assert "ERROR SUMMARY: 0 errors" in next(tmp_path.glob("*memcheck.log")).read_text()


@pytest.mark.gpu
def test_gpu_unmasked_tail_is_reported_by_memcheck(tmp_path):
    _need_sanitizer()
    (bad,) = run_sanitize(load_spec(f"{FIXTURES}:OOB"), tools=["memcheck"], log_dir=tmp_path)
    (good,) = run_sanitize(load_spec(f"{FIXTURES}:MASKED"), tools=["memcheck"], log_dir=tmp_path)
    assert good.passed, good.problems  # the same kernel with its mask: the mask is the only difference
    assert not bad.passed and not bad.skipped
    (problem,) = bad.problems
    assert problem.startswith("memcheck: ") and " error" in problem and ": Invalid __global__ " in problem, problem
    assert "_oob_copy_kernel" in problem and "out of bounds" in problem, problem


@pytest.mark.gpu
def test_gpu_cli_sanitize_row_is_clean(capsys):
    _need_sanitizer()
    assert main(["check", "softmax", "--case", "1x7-fp32", "--sanitize-tools", "memcheck"]) == 0
    out = capsys.readouterr().out
    assert "compute-sanitizer (memcheck): 1 clean, 0 with errors" in out


@pytest.mark.gpu
def test_gpu_child_names_the_triton_kernels_the_provider_loaded():
    kernels: set[str] = set()
    run_case(load_spec(f"{FIXTURES}:TORCH_UNINIT"), "1000", kernels=kernels)
    assert kernels == {"_oob_copy_kernel"}  # not torch's reduction, nor the input maker's randn


@pytest.mark.gpu
def test_gpu_unwritten_reads_are_reported_by_initcheck_in_the_op_or_outside_it(tmp_path):
    _need_sanitizer()
    (own,) = run_sanitize(load_spec(f"{FIXTURES}:UNINIT"), tools=["initcheck"], log_dir=tmp_path)
    (torchs,) = run_sanitize(load_spec(f"{FIXTURES}:TORCH_UNINIT"), tools=["initcheck"], log_dir=tmp_path)
    (good,) = run_sanitize(load_spec(f"{FIXTURES}:MASKED"), tools=["initcheck"], log_dir=tmp_path)
    assert good.passed, good.problems
    assert own.sanitizer.status == "errors" and own.sanitizer.outside == 0, own.problems
    assert own.sanitizer.records[0].startswith("Uninitialized __global__ memory read"), own.problems
    assert "_scale_kernel" in own.sanitizer.records[0], own.problems
    assert torchs.sanitizer.status == "errors" and torchs.sanitizer.outside > 0, torchs.problems
    assert all(r.startswith(OUTSIDE + "Uninitialized __global__ memory read") for r in torchs.sanitizer.records)
    (ignored,) = run_sanitize(load_spec(f"{FIXTURES}:TORCH_UNINIT"), tools=["initcheck"], log_dir=tmp_path,
                              ignore=["initcheck:at::native::*"])
    assert ignored.passed and ignored.sanitizer.ignored == torchs.sanitizer.errors, ignored.sanitizer

