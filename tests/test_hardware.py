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
