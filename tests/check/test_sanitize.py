"""``kw check --sanitize``: the refusal, the log parser, the child's command line and environment, the runs
end to end through a stand-in compute-sanitizer (any machine), and on a GPU the real tool: a quick case of a
real op comes back clean, a kernel with an unmasked tail comes back with memcheck errors.

The sample logs follow the format compute-sanitizer's user guide documents (``========= `` before every line
of the tool's own, a report's details indented under its first line, ``ERROR SUMMARY: N errors`` at the end;
racecheck's ``RACECHECK SUMMARY: … (N errors, M warnings)``), with Triton-style kernel names.
"""

from __future__ import annotations

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
    judge,
    parse_log,
    parse_tools,
    run_sanitize,
    sanitize_summary,
    spec_target,
    unavailable,
)
from kernelworks.check.sanitize_child import SKIP_MARK, SKIPPED, run_case
from kernelworks.cli.main import build_parser, main
from kernelworks.spec import load_spec

FIXTURES = Path(__file__).resolve().parent / "sanitize_fixtures.py"

# ------------------------------------------------------------------------------------------ sample logs

CLEAN = """\
========= COMPUTE-SANITIZER
========= ERROR SUMMARY: 0 errors
"""

MEMCHECK_OOB = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 16 bytes
=========     at _oob_copy_kernel+0x1b0 in /work/tests/check/sanitize_fixtures.py:31
=========     by thread (250,0,0) in block (0,0,0)
=========     Address 0x7f2a3e000fa0 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f2a3e000000 of size 4,000 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f4c1e] in libcuda.so.1
=========         Host Frame: _launch [0x12a4] in cuda_utils.so
=========
========= Invalid __global__ read of size 16 bytes
=========     at _oob_copy_kernel+0x1b0 in /work/tests/check/sanitize_fixtures.py:31
=========     by thread (251,0,0) in block (0,0,0)
=========     Address 0x7f2a3e000fb0 is out of bounds
=========     and is 17 bytes after the nearest allocation at 0x7f2a3e000000 of size 4,000 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f4c1e] in libcuda.so.1
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call \
to cudaStreamSynchronize.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: [0x4a1f6e] in libcuda.so.1
=========
========= Target application returned an error
========= ERROR SUMMARY: 3 errors
"""

RACECHECK = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at _attn_fwd_kernel+0x90 in /src/attention.py:41
=========     and Read access at _attn_fwd_kernel+0x100 in /src/attention.py:51 [508 hazards]
=========
========= Warning: Race reported between Write access at _attn_fwd_kernel+0x200 in /src/attention.py:60
=========     and Write access at _attn_fwd_kernel+0x240 in /src/attention.py:61 [4 hazards]
=========
========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)
"""

RACECHECK_CLEAN = """\
========= COMPUTE-SANITIZER
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""

INITCHECK = """\
========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 4 bytes
=========     at _rms_norm_fwd_kernel+0x70 in /src/norm/forward.py:88
=========     by thread (31,0,0) in block (1,0,0)
=========     Address 0x7f3c7ec000fc
=========     Saved host backtrace up to driver entry point at kernel launch time
=========
========= ERROR SUMMARY: 1 error
"""

SYNCCHECK = """\
 ========= COMPUTE-SANITIZER
 ========= Barrier error detected. Divergent thread(s) in block.
 =========     at _reduce_kernel+0x11f0 in /src/reduce.py:42
 =========     by thread (32,0,0) in block (0,0,0)
 =========         Device Frame: _reduce_kernel+0xe40 in /src/reduce.py:60
 =========
 ========= ERROR SUMMARY: 32 errors
"""

PRINT_LIMIT = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at _k+0x10
=========
========= ERROR SUMMARY: 1,532 errors
========= ERROR SUMMARY: 1,432 errors were not printed. Use --print-limit option to adjust the number of printed errors
"""

# the tool gave up: no summary at all
CRASHED = """\
========= COMPUTE-SANITIZER
========= Error: No attachable process found. compute-sanitizer timed-out.
========= Default timeout can be adjusted with --launch-timeout. Awaiting target completion.
"""

TRACEBACK = """\
Traceback (most recent call last):
  File "/src/kernelworks/check/sanitize_child.py", line 60, in run_case
    torch.cuda.synchronize()
torch.AcceleratorError: CUDA error: unspecified launch failure
"""


# ------------------------------------------------------------------------------------------------ parser

def test_parse_clean_log():
    log = parse_log(CLEAN)
    assert (log.errors, log.warnings, log.records) == (0, 0, [])


def test_parse_memcheck_errors_keeps_the_first_reports_without_host_frames():
    log = parse_log(MEMCHECK_OOB)
    assert log.errors == 3
    first = log.first_errors()
    assert len(first) == 3
    assert first[0].splitlines() == [
        "Invalid __global__ read of size 16 bytes",
        "at _oob_copy_kernel+0x1b0 in /work/tests/check/sanitize_fixtures.py:31",
        "by thread (250,0,0) in block (0,0,0)",
        "Address 0x7f2a3e000fa0 is out of bounds",
        "and is 1 bytes after the nearest allocation at 0x7f2a3e000000 of size 4,000 bytes",
    ]
    assert first[2].startswith("Program hit cudaErrorLaunchFailure")
    assert not any("Host Frame" in r or "Target application" in r for r in first)
    assert len(log.first_errors(1)) == 1


def test_parse_racecheck_counts_errors_not_warnings_and_shows_errors_first():
    log = parse_log(RACECHECK)
    assert (log.errors, log.warnings) == (1, 1)
    assert log.first_errors()[0].startswith("Error: Race reported between Write access at _attn_fwd_kernel")
    assert "[508 hazards]" in log.first_errors()[0]
    clean = parse_log(RACECHECK_CLEAN)
    assert (clean.errors, clean.records) == (0, [])


def test_parse_initcheck_and_synccheck():
    log = parse_log(INITCHECK)
    assert log.errors == 1 and log.first_errors()[0].startswith("Uninitialized __global__ memory read")
    log = parse_log(SYNCCHECK)  # a leading space before the prefix, as the guide prints it
    assert log.errors == 32
    assert log.first_errors() == ["Barrier error detected. Divergent thread(s) in block.\n"
                                  "at _reduce_kernel+0x11f0 in /src/reduce.py:42\n"
                                  "by thread (32,0,0) in block (0,0,0)\n"
                                  "Device Frame: _reduce_kernel+0xe40 in /src/reduce.py:60"]


def test_parse_reads_the_total_past_the_print_limit():
    assert parse_log(PRINT_LIMIT).errors == 1532


def test_parse_log_without_summary_and_with_the_application_output_mixed_in():
    log = parse_log(CRASHED)
    assert log.errors is None
    assert log.first_errors()[0].startswith("Error: No attachable process found")
    assert parse_log("hello from the app\n" + CLEAN + "Traceback: x\n").errors == 0
    assert parse_log("").errors is None


# ------------------------------------------------------------------------------------------------- judge

def test_judge_clean_skip_and_errors():
    assert judge("memcheck", parse_log(CLEAN), 0, "kw-sanitize: ran").status == "clean"
    out = judge("memcheck", parse_log(CLEAN), SKIPPED, f"{SKIP_MARK}liger_kernel is not installed\n")
    assert (out.status, out.message) == ("skipped", "liger_kernel is not installed")
    out = judge("memcheck", parse_log(""), SKIPPED, f"{SKIP_MARK}unsupported: fp8 needs sm_89\n")
    assert (out.status, out.message) == ("skipped", "unsupported: fp8 needs sm_89")  # even with no summary
    out = judge("racecheck", parse_log(RACECHECK), ERROR_EXITCODE, "")
    assert out.status == "errors"
    assert out.message.startswith("racecheck: 1 error and 1 warning: Error: Race reported between")


def test_judge_errors_win_over_the_crash_they_cause():
    out = judge("memcheck", parse_log(MEMCHECK_OOB), 1, TRACEBACK)
    assert out.status == "errors"
    assert out.message.startswith("memcheck: 3 errors: Invalid __global__ read of size 16 bytes\n"
                                  "at _oob_copy_kernel+0x1b0")


def test_judge_runs_that_did_not_finish():
    out = judge("memcheck", parse_log(CLEAN), 1, TRACEBACK)  # clean log, but the case raised
    assert out.status == "failed"
    assert out.message.startswith("memcheck did not finish: the case raised or crashed (exit status 1): "
                                  "torch.AcceleratorError: CUDA error: unspecified launch failure")
    out = judge("racecheck", parse_log(""), None, "compiling...", timed_out=True, timeout=900)
    assert out.status == "failed" and out.message.startswith("racecheck did not finish: timed out after 900 s")
    out = judge("memcheck", parse_log(CRASHED), 255, "")
    assert out.status == "failed" and "without an error summary" in out.message
    assert "No attachable process" in out.message
    out = judge("memcheck", parse_log(CLEAN), ERROR_EXITCODE, "")
    assert out.status == "failed" and "counts none" in out.message


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
    logs = {{"clean": {clean!r}, "errors": {errors!r}, "skip": {clean!r}, "crash": {crashed!r}}}
    open(log, "w").write(logs[mode])
    if mode == "skip":
        print({skip!r} + "peer_kernels is not installed")
    if mode == "errors":
        print({traceback!r})
    sys.exit({{"clean": 0, "errors": 1, "skip": {skipped}, "crash": 255}}[mode])
""")


@pytest.fixture
def fake_sanitizer(tmp_path, monkeypatch):
    path = _executable(tmp_path / "bin" / "compute-sanitizer", FAKE.format(
        python=sys.executable, clean=CLEAN, errors=MEMCHECK_OOB, crashed=CRASHED, skip=SKIP_MARK,
        traceback=TRACEBACK, skipped=SKIPPED))
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
    for line in out.splitlines():
        if "(log: " in line:
            Path(line.split("(log: ", 1)[1].rstrip(")")).unlink(missing_ok=True)


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
