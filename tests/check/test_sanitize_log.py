"""Reading compute-sanitizer logs (:mod:`kernelworks.check.sanitize_log`): each tool's reports and summary from
the sample logs in ``sanitize_logs/`` (their README says where the format comes from; real logs from
``benchmarks/checks/sanitize_samples.sh`` go in ``sanitize_logs/real/`` and need an entry in
:data:`EXPECTED`), the kernel each report is in, the ignore rules, and the verdict on a run."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelworks.check.sanitize_child import KERNELS_MARK, SKIP_MARK, SKIPPED
from kernelworks.check.sanitize_log import (
    ERROR_EXITCODE,
    OUTSIDE,
    IgnoreRule,
    bare_name,
    child_kernels,
    judge,
    parse_ignore,
    parse_ignores,
    parse_log,
)

LOGS = Path(__file__).resolve().parent / "sanitize_logs"


def sample(name: str) -> str:
    return (LOGS / name).read_text()


TRACEBACK = """\
Traceback (most recent call last):
  File "/src/kernelworks/check/sanitize_child.py", line 60, in run_case
    torch.cuda.synchronize()
torch.AcceleratorError: CUDA error: unspecified launch failure
"""

# ------------------------------------------------------------------------------------- every sample log

EXPECTED: dict[str, tuple[int | None, int, list[str], str]] = {
    # file: (errors counted, warnings, the kernel (or API call) of each report, the first report's first line)
    "memcheck-clean.log": (0, 0, [], ""),
    "memcheck-oob.log": (3, 0, ["_oob_copy_kernel", "_oob_copy_kernel", "cudaStreamSynchronize"],
                         "Invalid __global__ read of size 16 bytes"),
    "memcheck-print-limit.log": (1532, 0, ["_k"], "Invalid __global__ write of size 4 bytes"),
    "memcheck-api-probe.log": (2, 0, ["cuGetProcAddress_v2"] * 2, "Program hit CUDA_ERROR_INVALID_VALUE (error 1)"),
    "initcheck-uninit.log": (2, 0, ["_scale_kernel"] * 2, "Uninitialized __global__ memory read of size 16 bytes"),
    "initcheck-torch-kernel.log": (2, 0, ["_rms_norm_fwd_kernel", "at::native::reduce_kernel"],
                                   "Uninitialized __global__ memory read of size 4 bytes"),
    "racecheck-errors.log": (1, 1, ["_attn_fwd_kernel"] * 2,
                             "Error: Race reported between Write access at _attn_fwd_kernel+0x90"),
    "racecheck-warnings.log": (0, 2, ["_softmax_fwd_kernel", "_softmax_bwd_kernel"],
                               "Warning: Race reported between Write access at _softmax_fwd_kernel+0x4f0"),
    "racecheck-clean.log": (0, 0, [], ""),
    "synccheck-divergent.log": (16, 0, ["myKernel"] * 2, "Barrier error detected. Divergent thread(s) in block."),
    "synccheck-cuda-memcheck.log": (1, 0, ["globFunction"], "Barrier error detected. Divergent thread(s) in block"),
    "no-summary.log": (None, 0, ["", ""], "Error: No attachable process found."),
    # real logs: benchmarks/checks/sanitize_samples.sh on an H100, compute-sanitizer 2025.3.1 (CUDA 13), torch 2.11,
    # triton 3.6 (the README in sanitize_logs/ says which were trimmed and how)
    "real/clean-memcheck.log": (0, 0, [], ""),
    "real/clean-initcheck.log": (0, 0, [], ""),
    "real/clean-racecheck.log": (0, 0, [], ""),
    "real/clean-synccheck.log": (0, 0, [], ""),
    "real/divergent_barrier-synccheck.log": (0, 0, [], ""),  # the bug, not reported there (see the README)
    "real/oob_write-memcheck.log": (8, 0, ["_copy_kernel"] * 6 + ["cudaDeviceSynchronize", "cudaGetLastError"],
                                    "Invalid __global__ write of size 16 bytes"),
    "real/uninit_read-initcheck.log": (1000, 0, ["_scale_kernel"] * 10,  # 100 printed, the first 10 kept
                                       "Uninitialized __global__ memory read of size 4 bytes"),
    "real/padding_read-initcheck.log": (24, 0, ["_padded_rows_kernel"] * 24,
                                        "Uninitialized __global__ memory read of size 16 bytes"),
    "real/torch_uninit-initcheck.log": (8, 0, ["at::native::reduce_kernel"] * 8,
                                        "Uninitialized __global__ memory read of size 4 bytes"),
    "real/smem_race-racecheck.log": (1, 0, ["smem_race"],
                                     "Error: Race reported between Write access at smem_race+0x200 in smem_race.cu:5"),
    "real/warp_race-racecheck.log": (0, 1, ["smem_race"],  # the same kernel, one warp: a warning
                                     "Warning: Race reported between Write access at smem_race+0x200"),
    # a second H100 run (the same stack): the split barrier synccheck does report, and a kw child's own log
    "real/split_barrier-synccheck.log": (48, 0, ["split_barrier"] * 48,
                                         "Barrier error detected. Divergent thread(s) in block."),
    "real/kw/sanitize_oob-1000-fp32-mine-memcheck.log": (
        8, 0, ["_oob_copy_kernel"] * 6 + ["cudaDeviceSynchronize", "cudaGetLastError"],
        "Invalid __global__ read of size 16 bytes"),
}


@pytest.mark.parametrize("name", sorted(p.relative_to(LOGS).as_posix() for p in LOGS.rglob("*.log")))
def test_each_sample_log_reads_as_expected(name):
    assert name in EXPECTED, f"sanitize_logs/{name} has no entry in EXPECTED: say what it must read as"
    errors, warnings, sites, first_line = EXPECTED[name]
    log = parse_log(sample(name))
    assert (log.errors, log.warnings) == (errors, warnings)
    assert [bare_name(r.kernel) if r.kernel else r.api_call for r in log.records] == sites
    assert all(r.lines[0] for r in log.records) and not any(line.startswith(("Host Frame", "Saved host"))
                                                            for r in log.records for line in r.lines)
    if first_line:
        assert log.records[0].lines[0].startswith(first_line)


def test_every_expected_sample_exists():
    assert sorted(EXPECTED) == sorted(p.relative_to(LOGS).as_posix() for p in LOGS.rglob("*.log"))


# ------------------------------------------------------------------------------------------------ parser

def test_a_report_keeps_its_first_lines_without_the_host_backtrace():
    log = parse_log(sample("memcheck-oob.log"))
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
    assert not any("Target application" in r for r in first)
    assert len(log.first_errors(1)) == 1


def test_the_kernel_is_the_outermost_device_frame():
    log = parse_log(sample("synccheck-divergent.log"))
    assert log.records[0].kernel == "myKernel(int *, int *)"  # not block_sum, the device function it is in
    assert log.records[0].lines[1] == "at block_sum(int *, int)+0x1f0 in /samples/Synccheck/divergent_threads.cu:42"
    old = parse_log(sample("synccheck-cuda-memcheck.log"))  # the older form, a space before each prefix
    assert old.records[0].kernel == "globFunction(int*)"


def test_racecheck_counts_errors_not_warnings_and_lists_errors_first():
    log = parse_log(sample("racecheck-errors.log"))
    assert log.first_errors()[0].startswith("Error: Race reported between Write access at _attn_fwd_kernel")
    assert "[508 hazards]" in log.first_errors()[0]
    assert [r.warning for r in log.records] == [False, True]
    warned = parse_log(sample("racecheck-warnings.log"))
    assert warned.first_errors()[0].startswith("Warning: Race reported")  # warnings when there are no errors


def test_racecheck_summary_with_its_counts_on_the_next_line():
    text = ("========= RACECHECK SUMMARY: 100 hazards displayed\n"
            "========= (4,528,176 errors, 661,824 warnings)\n")
    assert (parse_log(text).errors, parse_log(text).warnings) == (4528176, 661824)
    assert parse_log(text).records == []


def test_the_application_output_mixed_in_is_not_read():
    clean = sample("memcheck-clean.log")
    assert parse_log("hello from the app\n" + clean + "Traceback: x\n").errors == 0
    assert parse_log("").errors is None
    assert parse_log("ERROR SUMMARY: 5 errors\n").errors is None  # the application's line, without the prefix


def test_bare_name():
    assert bare_name("_k") == "_k"
    assert bare_name("myKernel(int *, int *)") == "myKernel"
    assert bare_name("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
                     "std::array<char *, 1>>(int, T2, T3)") == "at::native::vectorized_elementwise_kernel"
    assert bare_name("std::iterator_traits<T2>::value_type cub::CUB_200500_NS::ThreadLoad<(cub::CUB_200500_NS::"
                     "CacheLoadModifier)5, const unsigned long long *>(T2)") == "cub::CUB_200500_NS::ThreadLoad"


# ------------------------------------------------------------------------------------------ ignore rules

def test_parse_ignore():
    assert parse_ignore("initcheck:at::native::*") == IgnoreRule("initcheck", "at::native::*")
    assert parse_ignore("*:_fill_*") == IgnoreRule("", "_fill_*")
    assert parse_ignore("at::native::*") == IgnoreRule("", "at::native::*")  # no tool: any
    assert parse_ignore("memcheck:cuGetProcAddress*") == IgnoreRule("memcheck", "cuGetProcAddress*")
    assert str(parse_ignore("*:x")) == "*:x" and str(parse_ignore("racecheck:*")) == "racecheck:*"
    for bad, why in [("memchek:_k", "unknown compute-sanitizer tool 'memchek'"), ("memcheck:", "TOOL:KERNEL_GLOB"),
                     ("initcheck", "TOOL:KERNEL_GLOB"), ("", "TOOL:KERNEL_GLOB")]:
        with pytest.raises(ValueError, match=why):
            parse_ignore(bad)
    assert parse_ignores(["racecheck:*", IgnoreRule("", "x")]) == (IgnoreRule("racecheck", "*"), IgnoreRule("", "x"))


def test_a_rule_matches_the_tool_and_the_kernel_full_or_bare():
    torch_report, ours = reversed(parse_log(sample("initcheck-torch-kernel.log")).records)
    assert parse_ignore("initcheck:at::native::*").matches("initcheck", torch_report)
    assert parse_ignore("initcheck:void at::native::reduce_kernel<512*").matches("initcheck", torch_report)
    assert not parse_ignore("initcheck:at::native::*").matches("initcheck", ours)
    assert not parse_ignore("memcheck:at::native::*").matches("initcheck", torch_report)  # another tool's rule
    assert parse_ignore("_rms_norm_*").matches("initcheck", ours)
    assert not parse_ignore("native::*").matches("initcheck", torch_report)  # a glob matches the whole name
    api = parse_log(sample("memcheck-api-probe.log")).records[0]
    assert parse_ignore("memcheck:cuGetProcAddress*").matches("memcheck", api)
    nowhere = parse_log(sample("no-summary.log")).records[0]
    assert parse_ignore("memcheck:*").matches("memcheck", nowhere)
    assert not parse_ignore("memcheck:?*").matches("memcheck", nowhere)


# ------------------------------------------------------------------------------------------------- judge

def test_judge_clean_skip_and_errors():
    clean = judge("memcheck", parse_log(sample("memcheck-clean.log")), 0, "kw-sanitize: ran")
    assert (clean.status, clean.verdict, clean.noteworthy) == ("clean", "clean", False)
    out = judge("memcheck", parse_log(""), SKIPPED, f"{SKIP_MARK}unsupported: fp8 needs sm_89\n")
    assert (out.status, out.message, out.verdict) == ("skipped", "unsupported: fp8 needs sm_89", "skip")
    out = judge("racecheck", parse_log(sample("racecheck-errors.log")), ERROR_EXITCODE, "")
    assert (out.status, out.errors, out.warnings, out.verdict) == ("errors", 1, 1, "1 error (1 warning)")
    assert out.message.startswith("racecheck: 1 error and 1 warning: Error: Race reported between")
    assert len(out.records) == 1  # the warning is not one of the errors shown


def test_judge_errors_win_over_the_crash_they_cause():
    out = judge("memcheck", parse_log(sample("memcheck-oob.log")), 1, TRACEBACK)
    assert out.status == "errors" and out.verdict == "3 errors"
    assert out.message.startswith("memcheck: 3 errors: Invalid __global__ read of size 16 bytes\n"
                                  "at _oob_copy_kernel+0x1b0")
    assert out.first == out.records[0] and len(out.records) == 3


def test_judge_runs_that_did_not_finish():
    clean = parse_log(sample("memcheck-clean.log"))
    out = judge("memcheck", clean, 1, TRACEBACK + KERNELS_MARK + "_k\n")  # clean log, but the case raised
    assert (out.status, out.verdict) == ("failed", "did not finish")
    assert out.message.startswith("memcheck did not finish: the case raised or crashed (exit status 1): "
                                  "torch.AcceleratorError: CUDA error: unspecified launch failure")
    assert KERNELS_MARK not in out.message
    out = judge("racecheck", parse_log(""), None, "compiling...", timed_out=True, timeout=900)
    assert out.status == "failed" and out.message.startswith("racecheck did not finish: timed out after 900 s")
    out = judge("memcheck", parse_log(sample("no-summary.log")), 255, "")
    assert out.status == "failed" and "without an error summary" in out.message
    assert "No attachable process" in out.message
    out = judge("memcheck", clean, ERROR_EXITCODE, "")
    assert out.status == "failed" and "counts none" in out.message


def test_racecheck_warnings_alone_are_clean_and_shown():
    for returncode in (0, ERROR_EXITCODE):  # whether or not the tool's exit status counts warnings
        out = judge("racecheck", parse_log(sample("racecheck-warnings.log")), returncode, "")
        assert (out.status, out.errors, out.warnings, out.verdict) == ("clean", 0, 2, "clean (2 warnings)")
        assert out.noteworthy and out.notes[0].startswith("racecheck: 2 warnings (not counted as errors): Warning: "
                                                          "Race reported between Write access at _softmax_fwd")


def test_reports_outside_the_ops_kernels_count_and_are_labelled():
    log = parse_log(sample("initcheck-torch-kernel.log"))
    out = judge("initcheck", log, ERROR_EXITCODE, f"{KERNELS_MARK}_rms_norm_bwd_kernel _rms_norm_fwd_kernel\n")
    assert (out.status, out.errors, out.outside) == ("errors", 2, 1)
    assert out.verdict == "2 errors (1 outside the op)"
    assert out.message.startswith("initcheck: 2 errors, 1 of them outside the op's kernels: Uninitialized")
    assert not out.records[0].startswith(OUTSIDE)
    assert out.records[1].startswith(OUTSIDE + "Uninitialized __global__ memory read of size 4 bytes\n"
                                     "at void at::native::reduce_kernel<512, 1,")
    # the op's kernels unknown (no line from the child, or a provider with no Triton kernel): no label
    unknown = judge("initcheck", log, ERROR_EXITCODE, "")
    assert unknown.outside == 0 and not any(OUTSIDE in r for r in unknown.records)
    assert child_kernels(f"x\n{KERNELS_MARK}\n") == frozenset() and child_kernels("") == frozenset()


def test_ignored_reports_are_counted_and_shown_not_dropped():
    log = parse_log(sample("initcheck-torch-kernel.log"))
    kernels = f"{KERNELS_MARK}_rms_norm_fwd_kernel\n"
    rule = parse_ignore("initcheck:at::native::*")
    out = judge("initcheck", log, ERROR_EXITCODE, kernels, ignore=[rule])
    assert (out.status, out.errors, out.ignored, out.outside) == ("errors", 1, 1, 0)
    assert out.verdict == "1 error (1 ignored)"
    assert out.message.startswith("initcheck: 1 error (1 more ignored): Uninitialized __global__ memory read of "
                                  "size 4 bytes\nat _rms_norm_fwd_kernel")
    assert out.notes == ["initcheck: 1 report ignored (initcheck:at::native::*), the first: " + OUTSIDE
                         + "\n".join(log.records[1].lines)]
    both = judge("initcheck", log, ERROR_EXITCODE, kernels, ignore=[rule, parse_ignore("*:_rms_norm_*"),
                                                                     parse_ignore("memcheck:*")])
    assert (both.status, both.verdict, both.noteworthy) == ("clean", "clean (2 ignored)", True)
    assert "(initcheck:at::native::*, *:_rms_norm_*)" in both.notes[0]  # the rules that matched, not memcheck's
    assert judge("memcheck", log, ERROR_EXITCODE, kernels, ignore=[rule]).errors == 2  # another tool's rule


def test_reports_past_the_print_limit_cannot_be_ignored():
    out = judge("memcheck", parse_log(sample("memcheck-print-limit.log")), ERROR_EXITCODE, "",
                ignore=[parse_ignore("memcheck:_k")])
    assert (out.status, out.errors, out.ignored) == ("errors", 1531, 1)
    assert out.message.endswith("none of its counted reports is in the log (past --print-limit)")


def test_failed_api_calls_can_be_ignored_by_name():
    log = parse_log(sample("memcheck-api-probe.log"))
    out = judge("memcheck", log, ERROR_EXITCODE, "", ignore=[parse_ignore("memcheck:cuGetProcAddress*")])
    assert out.verdict == "clean (2 ignored)"
    assert judge("memcheck", log, ERROR_EXITCODE, "").verdict == "2 errors"


def test_an_outcome_as_json():
    out = judge("racecheck", parse_log(sample("racecheck-errors.log")), ERROR_EXITCODE, "")
    out.log = "/logs/x.log"
    data = out.as_dict()
    assert {k: data[k] for k in ("status", "errors", "warnings", "ignored", "outside", "log", "verdict")} == {
        "status": "errors", "errors": 1, "warnings": 1, "ignored": 0, "outside": 0, "log": "/logs/x.log",
        "verdict": "1 error (1 warning)"}
    assert data["records"][0].startswith("Error: Race reported")


# -------------------------------------------------------------------------------------- real logs, judged

REAL_RUNS = {  # log: (tool, the exit status compute-sanitizer returned (index.txt of the run), kw's verdict)
    "real/clean-memcheck.log": ("memcheck", 0, "clean"),
    "real/clean-initcheck.log": ("initcheck", 0, "clean"),
    "real/clean-racecheck.log": ("racecheck", 0, "clean"),
    "real/clean-synccheck.log": ("synccheck", 0, "clean"),
    "real/divergent_barrier-synccheck.log": ("synccheck", 0, "clean"),  # synccheck did not report the bug
    "real/oob_write-memcheck.log": ("memcheck", ERROR_EXITCODE, "8 errors"),
    "real/uninit_read-initcheck.log": ("initcheck", ERROR_EXITCODE, "1000 errors"),
    "real/padding_read-initcheck.log": ("initcheck", ERROR_EXITCODE, "24 errors"),
    "real/torch_uninit-initcheck.log": ("initcheck", ERROR_EXITCODE, "8 errors"),
    "real/smem_race-racecheck.log": ("racecheck", ERROR_EXITCODE, "1 error"),
    "real/warp_race-racecheck.log": ("racecheck", ERROR_EXITCODE, "clean (1 warning)"),  # 86 for a warning alone
    "real/split_barrier-synccheck.log": ("synccheck", ERROR_EXITCODE, "48 errors"),
    # kw's child (kw check --sanitize-tools memcheck on sanitize_fixtures.py:OOB …:MASKED): index.txt holds kw's
    # exit status (1), not the child's; kw runs the tool with --error-exitcode 86 and it found errors
    "real/kw/sanitize_oob-1000-fp32-mine-memcheck.log": ("memcheck", ERROR_EXITCODE, "8 errors"),
}


@pytest.mark.parametrize("name", sorted(REAL_RUNS))
def test_each_real_run_is_judged_as_its_exit_status_and_log_say(name):
    tool, returncode, verdict = REAL_RUNS[name]
    out = judge(tool, parse_log(sample(name)), returncode, "")
    assert out.verdict == verdict
    assert out.status == ("errors" if "error" in verdict else "clean")


def test_every_real_log_is_judged():
    assert sorted(REAL_RUNS) == sorted(k for k in EXPECTED if k.startswith("real/"))


def test_real_memcheck_report_and_the_api_errors_it_causes():
    log = parse_log(sample("real/oob_write-memcheck.log"))
    assert log.records[0].lines == [
        "Invalid __global__ write of size 16 bytes",
        "at _copy_kernel+0x260 in sanitize_samples.py:46",
        "by thread (122,0,0) in block (0,0,0)",
        "Access to 0x7f59acc00fa0 is out of bounds",  # CUDA 13's wording ("Address … is out of bounds" before)
        "and is 1 bytes after the nearest allocation at 0x7f59acc00000 of size 4,000 bytes",
    ]
    assert log.records[-1].lines[0].startswith("Program hit cudaErrorLaunchFailure (error 719)")
    out = judge("memcheck", log, ERROR_EXITCODE, f"{TRACEBACK}{KERNELS_MARK}_copy_kernel\n")
    assert out.message.startswith("memcheck: 8 errors: Invalid __global__ write of size 16 bytes\nat _copy_kernel")
    assert out.outside == 0  # the API calls' reports name no kernel: not labelled


def test_real_racecheck_warning_alone_exits_86_and_is_clean():
    out = judge("racecheck", parse_log(sample("real/warp_race-racecheck.log")), ERROR_EXITCODE, "")
    assert (out.status, out.errors, out.warnings) == ("clean", 0, 1)
    assert out.notes == ["racecheck: 1 warning (not counted as errors): Warning: Race reported between Write access "
                         "at smem_race+0x200 in smem_race.cu:5\nand Read access at smem_race+0x210 in smem_race.cu:6 "
                         "[128 hazards]"]


def test_real_initcheck_past_the_print_limit():
    log = parse_log(sample("real/uninit_read-initcheck.log"))
    assert log.errors == 1000  # not 900, the count of the "errors were not printed" line after it
    out = judge("initcheck", log, ERROR_EXITCODE, "", ignore=[parse_ignore("initcheck:_scale_kernel")])
    assert (out.status, out.errors, out.ignored) == ("errors", 990, 10)  # the ten reports in the (trimmed) log
    assert out.message.endswith("(past --print-limit)")


def test_real_padding_reads_ignored_and_torch_reports_labelled():
    padding = parse_log(sample("real/padding_read-initcheck.log"))
    out = judge("initcheck", padding, ERROR_EXITCODE, "", ignore=[parse_ignore("initcheck:_padded_rows_*")])
    assert (out.status, out.verdict) == ("clean", "clean (24 ignored)")
    torch_log = parse_log(sample("real/torch_uninit-initcheck.log"))
    assert torch_log.records[0].kernel.startswith("void at::native::reduce_kernel<(int)512, (int)1,")
    out = judge("initcheck", torch_log, ERROR_EXITCODE, f"{KERNELS_MARK}_copy_kernel\n")
    assert out.verdict == "8 errors (8 outside the op)" and out.records[0].startswith(OUTSIDE)
    assert judge("initcheck", torch_log, ERROR_EXITCODE, "", ignore=[parse_ignore("initcheck:at::native::*")]
                 ).verdict == "clean (8 ignored)"


def test_real_split_barrier_reported_per_thread_at_each_barrier():
    """Threads 0-47 wait at the ``if``'s ``__syncthreads()`` (line 29), 48-63 at the ``else``'s (line 32):
    synccheck reports warp 0 as divergent in the block there, threads 48-63 as divergent in their warp."""
    log = parse_log(sample("real/split_barrier-synccheck.log"))
    assert log.records[0].lines == ["Barrier error detected. Divergent thread(s) in block.",
                                    "at split_barrier+0x130 in split_barrier.cu:29",
                                    "by thread (0,0,0) in block (0,0,0)"]
    where = [(r.lines[0].rsplit(" ", 1)[1], r.lines[1].rsplit(":", 1)[1], r.lines[2].split()[2]) for r in log.records]
    assert where == [("block.", "29", f"({t},0,0)") for t in range(32)] + \
                    [("warp.", "32", f"({t},0,0)") for t in range(48, 64)]
    out = judge("synccheck", log, ERROR_EXITCODE, f"{KERNELS_MARK}split_barrier\n")
    assert out.message.startswith("synccheck: 48 errors: Barrier error detected. Divergent thread(s) in block.\n"
                                  "at split_barrier+0x130 in split_barrier.cu:29") and out.outside == 0


def test_real_kw_child_log_reads_as_kw_check_printed_it():
    """The log kw's child kept for ``kw check sanitize_fixtures.py:OOB …:MASKED --sanitize-tools memcheck`` on the
    H100, judged with the op's kernel named: what that run printed (8 errors, none outside the op)."""
    log = parse_log(sample("real/kw/sanitize_oob-1000-fp32-mine-memcheck.log"))
    out = judge("memcheck", log, ERROR_EXITCODE, f"{TRACEBACK}{KERNELS_MARK}_oob_copy_kernel\n")
    assert out.message.startswith("memcheck: 8 errors: Invalid __global__ read of size 16 bytes\n"
                                  "at _oob_copy_kernel+0xb0 in sanitize_fixtures.py:38\n"
                                  "by thread (122,0,0) in block (0,0,0)\n"
                                  "Access to 0x7fc92a800fa0 is out of bounds")
    assert (out.status, out.outside) == ("errors", 0)
