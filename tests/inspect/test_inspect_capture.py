"""The capture hook, ``inspect_op`` on the softmax op, and the ``kw inspect`` command (no GPU)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest
import torch
from sample_kernels import launch_scale, launch_tuned_scale, scale_kernel

from kernelworks.cli import inspect as cli
from kernelworks.inspect import apply_config, capture_launches, capture_op, inspect_op
from kernelworks.spec import load_spec

HERE = Path(__file__).parent


def test_capture_records_instead_of_running(device) -> None:
    x = torch.randn(1000, dtype=torch.float16, device=device)
    y = torch.zeros_like(x)
    with capture_launches() as launches:
        launch_scale(x, y)
    assert torch.all(y == 0)  # nothing ran
    (launch,) = launches
    assert launch.name == "scale_kernel"
    assert launch.args["p_x"] is x and launch.args["n"] == 1000 and launch.args["BLOCK"] == 256
    assert launch.options == {"num_warps": 2}
    assert launch.grid == (4,)  # the grid lambda, evaluated on the bound arguments
    launch_scale(x, y)  # the hook is gone: the kernel runs again (interpreter or GPU)
    torch.testing.assert_close(y, 2 * x)


def test_capture_autotuned_records_each_config(device) -> None:
    x = torch.randn(1000, dtype=torch.float16, device=device)
    with capture_launches() as launches:
        launch_tuned_scale(x, torch.empty_like(x))
    assert [(la.name, la.args["BLOCK"], la.options["num_warps"]) for la in launches] == [
        ("tuned_scale_kernel", 256, 2), ("tuned_scale_kernel", 1024, 4)]
    assert launches[1].grid == (1,)


def test_capture_softmax_plans_for_a_gpu() -> None:
    spec = load_spec("softmax")
    env = os.environ.get("TRITON_INTERPRET")
    (fwd,) = capture_op(spec, spec.find_cases(["13x127"], bench=False)[0])
    assert fwd.name == "_softmax_fwd_kernel"
    # the GPU plan (row_launch), not the interpreter's one-warp plan
    assert fwd.args["BLOCK_N"] == 128 and fwd.args["ROWS"] == 16 and fwd.options["num_warps"] == 4
    assert fwd.args["p_x"].dtype == torch.bfloat16 and fwd.grid == (1,)
    (bwd,) = capture_op(spec, spec.find_cases(["13x127"], bench=False)[0], mode="bwd")
    assert bwd.name == "_softmax_bwd_kernel"
    # a bench case far too large for real CPU inputs: stand-ins with the same layout
    big = capture_op(spec, spec.bench_cases[0])
    assert big[0].args["n_rows"] == 8192 and big[0].options["num_warps"] == 16
    assert os.environ.get("TRITON_INTERPRET") == env  # the GPU plan does not leak out


def test_capture_a_training_forward() -> None:
    """``mode="train"``: the forward of a call recording a graph, which may launch other kernels than an
    inference call: the Gated DeltaNet scan then also stores its chunk-start states and U for the backward.
    A spec without gradients has no training forward."""
    spec = load_spec("gated_delta_prefill")
    case = spec.find_cases(["b2-t300-h0"], bench=False)[0]  # K = V = 128: the chunk-parallel backward

    def scan(mode):
        (launch,) = [la for la in capture_op(spec, case, mode=mode)
                     if la.name == "_state_pass_kernel" and not la.args.get("EXACT")]
        return launch.args["STORE_HS"], launch.args["STORE_VN"]

    assert scan("fwd") == (False, False)
    assert scan("train") == (True, True)
    assert "_state_pass_kernel" not in {la.name for la in capture_op(spec, case, mode="bwd")}  # nothing recomputed
    decode = load_spec("gated_delta_decode")
    with pytest.raises(ValueError, match="no backward"):
        capture_op(decode, decode.check_cases[0], mode="train")


def test_real_runs_around_a_capture(device) -> None:
    """A capture between two real calls of the same shape changes neither (no plan, no compiled kernel and
    no launch cache entry leaks either way)."""
    import kernelworks

    spec = load_spec("softmax")
    case = spec.find_cases(["13x127"], bench=False)[0]
    x = spec.inputs(case, device)["x"]
    ref = torch.softmax(x.double(), -1).to(x.dtype)
    torch.testing.assert_close(kernelworks.softmax(x), ref)
    (launch,) = capture_op(spec, case)
    assert launch.options["num_warps"] == 4
    torch.testing.assert_close(kernelworks.softmax(x), ref)


def test_capture_compiled_kernel_launch() -> None:
    """``CompiledKernel[grid](*all_args)`` (a launch cache's hit path) is recorded, not run."""
    from types import SimpleNamespace

    from triton.compiler.compiler import CompiledKernel

    from kernelworks.inspect.compile import as_jit

    fake = SimpleNamespace(src=SimpleNamespace(fn=as_jit(scale_kernel)),
                           metadata=SimpleNamespace(num_warps=8, num_stages=3, num_ctas=1, maxnreg=None))
    x = torch.empty(64, dtype=torch.float16)
    with capture_launches() as launches:
        CompiledKernel.__getitem__(fake, (2, 1, 1))(x, x, 64, 32)
    (launch,) = launches
    assert launch.args == {"p_x": x, "p_y": x, "n": 64, "BLOCK": 32}
    assert launch.options == {"num_warps": 8, "num_stages": 3, "num_ctas": 1} and launch.grid == (2, 1, 1)


def test_apply_config() -> None:
    spec = load_spec("softmax")
    (launch,) = capture_op(spec, spec.check_cases[0])
    changed, used = apply_config(launch, {"num_warps": 8, "BLOCK_N": 64, "bogus": 1})
    assert changed.options["num_warps"] == 8 and changed.args["BLOCK_N"] == 64 and used == {"num_warps", "BLOCK_N"}
    with pytest.raises(ValueError, match="bogus"):
        inspect_op(spec, spec.check_cases[0].id, "sm_90", config={"bogus": 1})


def test_inspect_softmax_sm90() -> None:
    (r,) = inspect_op("softmax", "13x127", "sm_90")
    assert (r.name, r.case, r.mode, r.target) == ("_softmax_fwd_kernel", "13x127-bf16", "fwd", "sm_90")
    assert r.registers > 0 and r.spill_bytes == 0 and r.mix.mufu > 0
    assert r.occupancy.blocks_per_sm > 0
    # 127 columns: no 16-byte vectors possible, and the report says so
    assert any(w.startswith("narrow global accesses") for w in r.warnings)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["inspect", *argv])


def test_cli_op(capsys) -> None:
    assert cli.run(_parse(["softmax", "--case", "13x127", "--all-configs"])) == 0
    out = capsys.readouterr().out
    assert "softmax · case 13x127-bf16 · sm_90 (H100-SXM" in out
    assert "declares no configs" in out and "_softmax_fwd_kernel" in out and "occupancy" in out


def test_cli_file_kernel(capsys) -> None:
    argv = [f"{HERE / 'sample_kernels.py'}:scale_kernel", "--signature", "p_x=*fp16,p_y=*fp16,n=i32:16",
            "--constexpr", "BLOCK=1024", "--num-warps", "4", "--target", "sm_80", "--json"]
    assert cli.run(_parse(argv)) == 0
    out = capsys.readouterr().out
    assert '"name": "scale_kernel"' in out and '"128": 1' in out
    with pytest.raises(ValueError, match="--signature"):
        cli.run(_parse([f"{HERE / 'sample_kernels.py'}:scale_kernel"]))


def test_parse_assignments() -> None:
    assert cli.parse_assignments("num_warps=8, BLOCK_N=4096,ACT=silu", "--config") == {
        "num_warps": 8, "BLOCK_N": 4096, "ACT": "silu"}
    with pytest.raises(ValueError, match="NAME=VALUE"):
        cli.parse_assignments("num_warps", "--config")


def test_a_config_is_captured_under_the_specs_configured_hook() -> None:
    """matmul's decode shapes plan the pointer kernel; a TMA config (``EPI_SPLIT``) forces the Hopper kernel:
    the captured launch must be that kernel with the config's tiles, not the default launch with the
    config's numbers pasted in (which fails: the pointer kernel has no ``EPI_SPLIT``)."""
    spec = load_spec("matmul")
    case = spec.find_cases(["llama3_8b-qkv-M64"], bench=True)[0]
    (default,) = capture_op(spec, case)
    assert default.name == "_matmul_kernel"
    config = spec.configs[0]
    (forced,) = capture_op(spec, case, config=config)
    assert forced.name == "_matmul_tma_kernel"
    assert {k: forced.args[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "EPI_SPLIT")} == \
        {k: config[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "EPI_SPLIT")}
    assert forced.options["num_stages"] == config["num_stages"]
