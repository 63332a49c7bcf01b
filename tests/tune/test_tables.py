"""Shipped per-GPU tables: ``kw tune --write``'s writer and matmul reading them at plan time (planned for
sm_90 with the launches captured, as ``kw inspect`` does: no GPU needed), stale entries ignored."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import kernelworks
from kernelworks.inspect.capture import capture_op
from kernelworks.ops.gemm import forward
from kernelworks.ops.gemm.spec import MATMUL_CONFIGS, MATMUL_SPEC
from kernelworks.runtime import tuned
from kernelworks.spec import Case
from kernelworks.tune import Candidate, CaseTuning, tables

H100 = "NVIDIA H100 80GB HBM3"
DECODE = Case("64x512x256-b_t", {"M": 64, "N": 512, "K": 256, "b_t": True}, torch.bfloat16)
TUNED_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4}


@pytest.fixture
def spec(monkeypatch, tmp_path):
    """matmul reading its table from an empty folder, on a (pretend) H100."""
    table = dataclasses.replace(forward.TUNED, folder=tmp_path)
    monkeypatch.setattr(forward, "TUNED", table)
    monkeypatch.setattr(tuned, "gpu_name", lambda index: H100)
    tuned.clear_cache()
    yield dataclasses.replace(MATMUL_SPEC, tuned=table, bench_cases=[DECODE])
    tuned.clear_cache()


def _launch(spec, case=DECODE):
    (launch,) = capture_op(spec, case)
    return launch.name, {k: launch.args[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")}, launch.options


def _won(config, case=DECODE):
    return CaseTuning("matmul", case.id, winner=config, reason="test",
                      candidates=[Candidate({}, "ok", ms=2.0), Candidate(config, "ok", ms=1.0, order=1)])


def test_no_table_means_the_heuristic(spec):
    assert not list(spec.tuned.folder.iterdir())
    name, blocks, options = _launch(spec)
    assert (name, blocks, options["num_stages"]) == ("_matmul_kernel", {"BLOCK_M": 64, "BLOCK_N": 128,
                                                                         "BLOCK_K": 128}, 4)


def test_a_written_entry_changes_the_plan_matmul_picks(spec):
    path = tables.write(spec, [_won(TUNED_CONFIG)], gpu=H100)
    assert path.name == "h100-80gb-hbm3.json"
    entries = json.loads(path.read_text())["entries"]["matmul"]
    assert list(entries) == ["M64-N512-K256-2B-ieee"]
    entry = entries["M64-N512-K256-2B-ieee"]
    assert entry["config"] == TUNED_CONFIG and entry["source"] == spec.tuned.source_hash()
    assert entry["ms"] == 1.0 and entry["default_ms"] == 2.0 and entry["case"] == DECODE.id
    name, blocks, options = _launch(spec)
    assert blocks == {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128} and options["num_stages"] == 4
    # the same bucket (M rounded up to 64), another bucket
    assert _launch(spec, dataclasses.replace(DECODE, params={**DECODE.params, "M": 40}))[1]["BLOCK_N"] == 64
    assert _launch(spec, dataclasses.replace(DECODE, params={**DECODE.params, "K": 512}))[1]["BLOCK_N"] == 128
    # a TMA config is played back on the Hopper kernel
    tables.write(spec, [_won(MATMUL_CONFIGS[0])], gpu=H100)
    name, blocks, _ = _launch(spec)
    assert name == "_matmul_tma_kernel" and blocks["BLOCK_N"] == 256


@pytest.mark.parametrize("field,value", [("source", "0123456789abcdef"), ("triton", "3.5.0")])
def test_a_stale_entry_is_ignored(spec, field, value):
    path = tables.write(spec, [_won(TUNED_CONFIG)], gpu=H100)
    data = json.loads(path.read_text())
    data["entries"]["matmul"]["M64-N512-K256-2B-ieee"][field] = value
    path.write_text(json.dumps(data))
    tuned.clear_cache()
    assert _launch(spec)[1]["BLOCK_N"] == 128  # the heuristic's


def test_another_gpu_reads_its_own_table(spec, monkeypatch):
    tables.write(spec, [_won(TUNED_CONFIG)], gpu=H100)
    monkeypatch.setattr(tuned, "gpu_name", lambda index: "NVIDIA H200")
    tuned.clear_cache()
    assert _launch(spec)[1]["BLOCK_N"] == 128


def test_the_default_winning_keeps_a_fresh_entry_and_drops_a_stale_one(spec):
    path = tables.write(spec, [_won(TUNED_CONFIG)], gpu=H100)
    tables.write(spec, [_won({})], gpu=H100)
    assert "M64-N512-K256-2B-ieee" in json.loads(path.read_text())["entries"]["matmul"]
    data = json.loads(path.read_text())
    data["entries"]["matmul"]["M64-N512-K256-2B-ieee"]["source"] = "stale"
    path.write_text(json.dumps(data))
    tables.write(spec, [_won({})], gpu=H100)
    assert json.loads(path.read_text())["entries"]["matmul"] == {}


def test_a_spec_without_a_table_cannot_be_written():
    with pytest.raises(ValueError, match="no shipped table"):
        tables.write(dataclasses.replace(MATMUL_SPEC, tuned=None), [], gpu=H100)


def test_the_interpreter_never_reads_a_table(spec, device, monkeypatch):
    """On the CPU the kernels run in the interpreter: its own small plans, whatever a table says."""
    if device.type != "cpu":
        pytest.skip("a GPU reads its table")
    tables.write(spec, [_won(TUNED_CONFIG)], gpu=H100)
    calls = []
    spy = dataclasses.replace(forward.TUNED)
    object.__setattr__(spy, "get", lambda *a: calls.append(a))  # a frozen dataclass: set past it
    monkeypatch.setattr(forward, "TUNED", spy)
    a = torch.randn(64, 256, dtype=torch.bfloat16)
    b = torch.randn(512, 256, dtype=torch.bfloat16).t()
    kernelworks.matmul(a, b)
    assert calls == []
    capture_op(spec, DECODE)  # planned for a GPU: asked
    assert len(calls) == 1


def test_shipped_tables_are_well_formed():
    """Every shipped entry names a declared matmul config and a bucket of the documented form."""
    knobs = {k for c in MATMUL_CONFIGS for k in c}
    for path in forward.TUNED.folder.glob("*.json"):
        data = json.loads(path.read_text())
        assert tuned.gpu_slug(data["gpu"]) == path.stem
        for bucket, entry in data["entries"]["matmul"].items():
            assert bucket.split("-")[0].startswith("M") and set(entry["config"]) <= knobs
            assert entry["config"] in MATMUL_CONFIGS
            assert {"triton", "source", "case"} <= set(entry)


def test_tables_can_be_turned_off(spec):
    tables.write(spec, [_won(TUNED_CONFIG)], gpu=H100)
    assert _launch(spec)[1]["BLOCK_N"] == 64
    with tuned.ignored():
        assert _launch(spec)[1]["BLOCK_N"] == 128
