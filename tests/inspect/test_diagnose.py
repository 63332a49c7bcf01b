"""The diagnosis logic on synthetic numbers (no GPU), and the ncu CSV reader."""

from __future__ import annotations

import pytest
import torch

from kernelworks.hardware import Ceilings
from kernelworks.inspect.diagnose import classify, parse_ncu_csv
from kernelworks.spec import Cost

CEIL = Ceilings("H100", bandwidth_gbs=3000.0, tflops={"bf16": 700.0}, source="measured")
BYTES = 268e6  # an 8192² bf16 read + write


def test_at_the_memory_roofline_only_fusion_helps():
    line, regime, limiters, rungs = classify(Cost(flops=1e8, bytes=BYTES), 0.095, CEIL, torch.bfloat16)
    assert regime == "memory-bound" and line.pct_sol > 90
    assert limiters == [] and "fuse" in rungs[0]


def test_far_from_roofline_memory_bound_gets_the_memory_ladder():
    _, regime, _, rungs = classify(Cost(flops=1e8, bytes=BYTES), 0.3, CEIL, torch.bfloat16)
    assert regime == "memory-bound"
    assert rungs[0].startswith("tile sweep") and any("fuse" in r for r in rungs)


def test_compute_bound_gets_the_gemm_ladder():
    n = 8192
    _, regime, _, rungs = classify(Cost(flops=2 * n**3, bytes=3 * n * n * 2), 3.0, CEIL, torch.bfloat16)
    assert regime == "compute-bound" and any("Hopper" in r for r in rungs)


def test_tiny_call_is_latency_bound():
    _, regime, _, rungs = classify(Cost(flops=4096 * 5, bytes=4096 * 4), 0.008, CEIL, torch.bfloat16)
    assert regime == "latency-bound" and "CUDA graphs" in rungs[0]


def test_kernel_limiters_come_first():
    from sample_kernels import scale_kernel

    from kernelworks.inspect import inspect_kernel

    report = inspect_kernel(scale_kernel, "p_x=*fp16,p_y=*fp16,n=i32:16", {"BLOCK": 1024}, "sm_90")
    report.grid = (4,)  # 4 programs on 132 SMs
    _, _, limiters, rungs = classify(Cost(bytes=BYTES), 0.3, CEIL, torch.float16, [report])
    assert any("4 programs for 132 SMs" in lim for lim in limiters)
    assert rungs[0].startswith("more programs")


def _scan_report(fraction_warps: int = 8):
    """A compiled kernel of ours, its occupancy pinned to ``fraction_warps`` of 64 warps per SM."""
    import dataclasses

    from sample_kernels import scale_kernel

    from kernelworks.inspect import inspect_kernel

    report = inspect_kernel(scale_kernel, "p_x=*fp16,p_y=*fp16,n=i32:16", {"BLOCK": 1024}, "sm_90")
    report.occupancy = dataclasses.replace(report.occupancy, warps_per_sm=fraction_warps, max_warps_per_sm=64)
    return report


def test_long_call_at_low_occupancy_keeping_no_unit_busy_is_latency_bound():
    """A 2 ms call at 12% occupancy reaching 15% of the copy rate: latency, with parallelism advice first
    (not the memory ladder a length-only rule gave it)."""
    ms = 2.0
    cost = Cost(flops=1e9, bytes=0.15 * 3000e9 * ms * 1e-3)
    _, regime, limiters, rungs = classify(cost, ms, CEIL, torch.bfloat16, [_scan_report()])
    assert regime == "latency-bound"
    assert limiters[0].startswith("neither unit is busy: memory 15%")
    assert rungs[0].startswith("raise occupancy") and not any(r.startswith("tile sweep") for r in rungs)


def test_same_call_at_full_occupancy_keeps_the_memory_ladder():
    ms = 2.0
    cost = Cost(flops=1e9, bytes=0.15 * 3000e9 * ms * 1e-3)
    _, regime, _, rungs = classify(cost, ms, CEIL, torch.bfloat16, [_scan_report(64)])
    assert regime == "memory-bound" and rungs[0].startswith("tile sweep")


def test_nsight_figures_outrank_the_cost_model():
    """ncu says DRAM 20%, SM 10% at low occupancy: latency-bound although the cost model counts enough bytes
    for 60% of the copy rate; DRAM busy well beyond the useful bytes is named as extra traffic."""
    ms = 1.0
    cost = Cost(flops=1e9, bytes=0.6 * 3000e9 * ms * 1e-3)
    ncu = {"k1": {"DRAM %": 20.0, "SM %": 10.0, "time": 900.0}, "k2": {"DRAM %": 20.0, "SM %": 10.0, "time": 100.0}}
    _, regime, limiters, _ = classify(cost, ms, CEIL, torch.bfloat16, [_scan_report()], ncu=ncu)
    assert regime == "latency-bound" and "(Nsight Compute)" in limiters[0]
    busy = {"k": {"DRAM %": 90.0, "SM %": 20.0, "time": 1000.0}}
    _, regime, limiters, _ = classify(Cost(flops=1e9, bytes=0.3 * 3000e9 * ms * 1e-3), ms, CEIL, torch.bfloat16,
                                      ncu=busy)
    assert regime == "memory-bound" and any(lim.startswith("DRAM 90% busy for 30%") for lim in limiters)


NCU_CSV = '''==PROF== Connected to process 1
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","python","h","_softmax_fwd_kernel","1","7","(512, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","91.52"
"0","1","python","h","_softmax_fwd_kernel","1","7","(512, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","sm__throughput.avg.pct_of_peak_sustained_elapsed","%","38.10"
"0","1","python","h","_softmax_fwd_kernel","1","7","(512, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","93.9"
'''


def test_parse_ncu_csv():
    out = parse_ncu_csv(NCU_CSV)
    assert out == {"_softmax_fwd_kernel": {"DRAM %": pytest.approx(91.52), "SM %": pytest.approx(38.1),
                                           "time": pytest.approx(93.9)}}
    assert parse_ncu_csv("no profile here") == {}
