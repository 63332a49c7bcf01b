"""Ahead-of-time compiles of small kernels for sm_90 and sm_80 (no GPU): resources, SASS mix, warnings.

Every compile is done once per session (module-scoped fixture); Triton's on-disk cache makes reruns cheap.
"""

from __future__ import annotations

import pytest
from sample_kernels import dot_kernel, row_sum_kernel, scale_kernel

from kernelworks.inspect import KernelReport, inspect_kernel
from kernelworks.inspect.compile import parse_signature, uses_dot

DOT = ("p_a=*fp16,p_b=*fp16,p_c=*fp16", {"BM": 64, "BN": 64, "BK": 32})
CASES = {
    "scale-sm_90": (scale_kernel, "p_x=*fp16,p_y=*fp16,n=i32:16", {"BLOCK": 1024}, "sm_90", {}),
    "scale-sm_80": (scale_kernel, "p_x=*fp16,p_y=*fp16,n=i32:16", {"BLOCK": 1024}, "sm_80", {}),
    "scale-unaligned-n": (scale_kernel, "p_x=*fp16,p_y=*fp16,n=i32", {"BLOCK": 1024}, "sm_90", {}),
    "dot-sm_90": (dot_kernel, *DOT, "sm_90", {}),
    "dot-sm_80": (dot_kernel, *DOT, "sm_80", {}),
    "dot-sm_90-2warps": (dot_kernel, *DOT, "sm_90", {"num_warps": 2}),
    # a 1024-wide fp32 row in one warp is 32 values a lane plus temporaries: capped at 32 registers, it spills
    "row-sum-maxnreg": (row_sum_kernel, "p_x=*fp32,p_y=*fp32,n=i32", {"BLOCK": 1024}, "sm_90",
                        {"num_warps": 1, "maxnreg": 32}),
}


@pytest.fixture(scope="module")
def reports() -> dict[str, KernelReport]:
    return {name: inspect_kernel(fn, sig, consts, target, **opts)
            for name, (fn, sig, consts, target, opts) in CASES.items()}


@pytest.mark.parametrize("name", ["scale-sm_90", "scale-sm_80"])
def test_elementwise_16bit_gets_128bit_accesses(reports, name) -> None:
    r = reports[name]
    assert r.registers > 0
    assert r.mix.global_loads[128] >= 1 and r.mix.global_stores[128] >= 1
    assert r.mix.narrow_global == 0
    assert r.spill_bytes == 0 and r.mix.tensor_core == 0 and not r.uses_dot
    assert r.warnings == []
    assert r.divisible == ("p_x", "p_y", "n")


def test_size_not_divisible_by_16_gives_narrow_loads(reports) -> None:
    r = reports["scale-unaligned-n"]
    assert r.mix.global_loads[128] == 0 and r.mix.narrow_global > 0
    assert any(w.startswith("narrow global accesses") for w in r.warnings)


def test_dot_uses_wgmma_on_hopper(reports) -> None:
    r = reports["dot-sm_90"]
    assert r.uses_dot
    assert r.mix.count("HGMMA") > 0
    assert r.shared_bytes > 0 and r.occupancy.blocks_per_sm > 0
    assert r.warnings == []


def test_dot_uses_mma_sync_on_ampere(reports) -> None:
    r = reports["dot-sm_80"]
    assert r.mix.count("HMMA") > 0 and r.mix.count("HGMMA") == 0
    assert r.warnings == []


def test_hopper_dot_without_wgmma_is_flagged(reports) -> None:
    r = reports["dot-sm_90-2warps"]
    assert r.mix.count("HGMMA") == 0 and r.mix.count("HMMA") > 0
    assert any("no wgmma" in w for w in r.warnings)


def test_register_cap_spills(reports) -> None:
    r = reports["row-sum-maxnreg"]
    assert r.registers <= 32
    assert r.spill_bytes > 0 and r.mix.local > 0
    assert any(w.startswith("spills") for w in r.warnings)


def test_report_to_dict_and_asm(reports) -> None:
    r = reports["dot-sm_90"]
    d = r.to_dict()
    assert d["instructions"]["tensor"] == r.mix.tensor_core and "ptx" not in d
    assert ".target sm_90a" in r.ptx and "HGMMA" in r.sass


def test_parse_signature() -> None:
    spec = parse_signature(scale_kernel, "p_x=*fp16, p_y=*fp16:1, n=i32:16", {"BLOCK": 256})
    assert spec.signature == {"p_x": "*fp16", "p_y": "*fp16", "n": "i32", "BLOCK": "constexpr"}
    assert spec.divisible() == ("p_x", "n")
    assert spec.constexpr_values() == {"BLOCK": 256}
    with pytest.raises(ValueError, match="no parameter named"):
        parse_signature(scale_kernel, "p_x=*fp16,p_y=*fp16,n=i32,m=i32", {"BLOCK": 256})
    with pytest.raises(ValueError, match="needs a value"):
        parse_signature(scale_kernel, "p_x=*fp16,p_y=*fp16,n=i32")
    with pytest.raises(ValueError, match="not a Triton type"):
        parse_signature(scale_kernel, "p_x=*half,p_y=*fp16,n=i32", {"BLOCK": 256})


def test_uses_dot() -> None:
    assert uses_dot(dot_kernel) and not uses_dot(scale_kernel)
