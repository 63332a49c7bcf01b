from __future__ import annotations

import torch

from kernelworks.bench.roofline import roofline
from kernelworks.hardware import GPUS, Ceilings, lookup
from kernelworks.spec import Cost


def test_lookup_picks_the_most_specific_entry():
    assert lookup("NVIDIA H100 80GB HBM3").name == "H100-SXM"
    assert lookup("NVIDIA H100 PCIe").name == "H100-PCIe"
    assert lookup("NVIDIA H200").name == "H200"
    assert lookup("NVIDIA A100-SXM4-80GB").name == "A100-SXM4-80GB"
    assert lookup("NVIDIA GeForce RTX 4090").name == "RTX-4090"
    assert lookup("NVIDIA B200").name == "B200"
    assert lookup("Some Other GPU") is None


def test_table_is_sane():
    for g in GPUS.values():
        assert g.sm_count > 0 and g.mem_bandwidth_gbs > 0 and g.peak_tflops["bf16"] > 0
        assert g.smem_per_block <= g.smem_per_sm


def test_roofline_memory_and_compute_bound():
    ceil = Ceilings("x", bandwidth_gbs=1000.0, tflops={"bf16": 100.0}, source="datasheet")
    mem = roofline(Cost(flops=1e6, bytes=1e9), ms=2.0, ceil=ceil, dtype=torch.bfloat16)
    assert mem.bound == "memory" and abs(mem.pct_sol - 50.0) < 1e-9 and abs(mem.gbs - 500.0) < 1e-9
    comp = roofline(Cost(flops=1e12, bytes=1e6), ms=20.0, ceil=ceil, dtype=torch.bfloat16)
    assert comp.bound == "compute" and abs(comp.pct_sol - 50.0) < 1e-9 and abs(comp.tflops - 50.0) < 1e-9


def test_fp8_and_int8_products_use_their_own_tensor_core_peak():
    """fp8_matmul's records showed 1,400-2,200% of speed of light: fp8 fell through to the fp32 SIMT rate."""
    ceil = Ceilings("H100", bandwidth_gbs=3000.0, tflops=dict(GPUS["H100-SXM"].peak_tflops), source="datasheet")
    assert ceil.peak_tflops(torch.float8_e4m3fn) == ceil.peak_tflops(torch.float8_e5m2) == 1979
    assert ceil.peak_tflops(torch.int8) == 1979
    line = roofline(Cost(flops=2 * 8192**3, bytes=3 * 8192**2), ms=1.09, ceil=ceil, dtype=torch.float8_e4m3fn)
    assert line.bound == "compute" and 40 < line.pct_sol < 60  # 1,009 TFLOP/s measured: 51%, not 1,506%


def test_measured_compute_ceiling_never_below_the_datasheet(monkeypatch, tmp_path):
    """Calibration measures cuBLAS (740 TFLOP/s bf16 on our H100) and a kernel can beat that: the ceiling is
    the larger of measured and datasheet peaks; the measured copy rate stays the memory ceiling."""
    import json

    from kernelworks import hardware

    monkeypatch.setenv("KERNELWORKS_CACHE", str(tmp_path))
    (tmp_path / "calibration.json").write_text(json.dumps(
        {"NVIDIA H100 80GB HBM3": {"bandwidth_gbs": 3003.0, "tflops": {"bf16": 739.7, "fp16": 673.0}}}))
    monkeypatch.setattr(hardware, "current_gpu", lambda: GPUS["H100-SXM"])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    ceil = hardware.ceilings()
    assert ceil.source == "measured" and ceil.bandwidth_gbs == 3003.0
    assert ceil.tflops["bf16"] == GPUS["H100-SXM"].peak_tflops["bf16"] and ceil.tflops["fp8"] == 1979
