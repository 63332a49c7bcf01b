"""GEMM family: ``matmul`` against the float64 reference (every epilogue, layouts, batching, empty K,
split-K), its backward, bad input, torch.compile, and the Hopper kernels compiled ahead of time for sm_90.
CPU tests run under Triton's interpreter (bf16 too: the launchers feed its dots fp32 operands). The
grouped kernels' index tensors are bounded in the kernel whatever their values (validation off), and checked
on the host in validation mode (on in the test suite)."""

from __future__ import annotations

import contextlib
import itertools

import pytest
import torch

import kernelworks
from kernelworks.check.compare import compare
from kernelworks.inspect import inspect_op
from kernelworks.ops.gemm import FP8_MATMUL_SPEC, GROUPED_MATMUL_SPEC, MATMUL_SPEC, forward, reference
from kernelworks.ops.gemm import grouped as grouped_module
from kernelworks.ops.gemm.api import matmul
from kernelworks.ops.gemm.forward import Plan, forced_plan, matmul_plan
from kernelworks.ops.gemm.fp8 import fp8_matmul
from kernelworks.ops.gemm.grouped import grouped_matmul
from kernelworks.ops.gemm.spec import expert_sizes
from kernelworks.runtime import alloc, replay, tuned
from kernelworks.runtime.alloc import poison_outputs
from kernelworks.runtime.device import default_device, planning_for_gpu
from kernelworks.spec import case, default_tolerance

DEVICE = default_device()
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


def _rand(*shape, dtype=F32, scale=1.0):
    return (torch.randn(shape, device=DEVICE) * scale).to(dtype)


def _check(out, kw, dtype):
    """``out`` against the float64 reference, within 2× PyTorch's own error in ``dtype``."""
    up = {k: v.double() if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    ref = reference.matmul(**up)
    base = reference.matmul(**kw)
    c = compare("out", out, ref, base, default_tolerance(dtype), expected_dtype=base.dtype)
    assert c.passed, c


@pytest.mark.parametrize("dtype", [F32, F16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("act", [None, "relu", "gelu", "gelu_tanh", "silu", "swiglu"])
def test_epilogues_match_reference(act, dtype):
    torch.manual_seed(0)
    m, n, k = 19, 40, 37
    kw = {"a": _rand(m, k, dtype=dtype), "b": _rand(k, n, dtype=dtype, scale=k ** -0.5),
          "bias": _rand(n, dtype=dtype, scale=0.5), "activation": act,
          "residual": _rand(m, n // 2 if act == "swiglu" else n, dtype=dtype), "alpha": 0.7, "beta": 1.5}
    with poison_outputs():
        out = matmul(**kw)
    _check(out, kw, dtype)


@pytest.mark.parametrize("layout", ["a_t", "b_t", "both_t", "sliced"])
def test_strided_operands_need_no_copy(layout):
    """Transposed and sliced operands give the same result as their contiguous copies."""
    torch.manual_seed(1)
    m, n, k = 21, 30, 45
    a = _rand(k, m, dtype=F16).t() if layout in ("a_t", "both_t") else _rand(m, k + 7, dtype=F16)[:, :k]
    b = _rand(n, k, dtype=F16).t() if layout in ("b_t", "both_t") else _rand(k, n + 5, dtype=F16)[:, :n]
    out = matmul(a, b)
    torch.testing.assert_close(out, matmul(a.contiguous(), b.contiguous()), rtol=0, atol=0)
    _check(out, {"a": a, "b": b}, F16)


@pytest.mark.parametrize("shapes", [((2, 9, 24), (2, 24, 20)), ((3, 9, 24), (24, 20)), ((9, 24), (3, 24, 20))],
                         ids=["both_3d", "shared_b", "shared_a"])
def test_batched(shapes):
    torch.manual_seed(2)
    kw = {"a": _rand(*shapes[0]), "b": _rand(*shapes[1]), "bias": _rand(20)}
    out = matmul(**kw)
    assert out.shape == torch.matmul(kw["a"], kw["b"]).shape
    _check(out, kw, F32)


def test_empty_k_is_epilogue_of_zeros():
    bias, res = _rand(7), _rand(5, 7)
    a, b = torch.empty(5, 0, device=DEVICE), torch.empty(0, 7, device=DEVICE)
    with poison_outputs():
        out = matmul(a, b, bias=bias, activation="gelu", residual=res)
    torch.testing.assert_close(out, torch.nn.functional.gelu(bias).expand(5, 7) + res)


def test_empty_k_with_a_batched_a_and_a_shared_b():
    """``a [B, M, 0]`` and a 2-D ``b [0, N]`` (shared across the batch), forward and backward; and N = 0 the
    same way. A reshape cannot infer ``-1`` from 0 elements, so these once raised inside the op."""
    bias = _rand(6).requires_grad_(True)
    a = torch.empty(3, 4, 0, device=DEVICE, requires_grad=True)
    b = torch.empty(0, 6, device=DEVICE, requires_grad=True)
    out = matmul(a, b, bias=bias, activation="gelu")
    want = torch.nn.functional.gelu(bias.detach()).expand(3, 4, 6)
    torch.testing.assert_close(out, want)
    out.sum().backward()
    assert a.grad.shape == a.shape and b.grad.shape == b.shape
    (want_bias,) = torch.autograd.grad(torch.nn.functional.gelu(bias).expand(3, 4, 6).sum(), bias)
    torch.testing.assert_close(bias.grad, want_bias)
    a = _rand(3, 4, 5).requires_grad_(True)
    b = torch.empty(5, 0, device=DEVICE, requires_grad=True)
    out = matmul(a, b)
    out.sum().backward()
    assert out.shape == (3, 4, 0) and b.grad.shape == (5, 0) and not a.grad.any()


@pytest.mark.parametrize("act", ["gelu", "silu", "swiglu", "relu"])
def test_empty_n_with_an_activation_backward(act):
    """N = 0 with a fused activation: the backward's activation gradient has no rows to launch over (it
    raised from a reshape of 0 elements); gradients come back empty or zero, as torch's."""
    a = _rand(3, 4).requires_grad_(True)
    b = torch.empty(4, 0, device=DEVICE, requires_grad=True)
    bias = torch.empty(0, device=DEVICE, requires_grad=True)
    out = matmul(a, b, bias=bias, activation=act)
    out.sum().backward()
    assert out.shape == (3, 0) and b.grad.shape == (4, 0) and bias.grad.shape == (0,) and not a.grad.any()


@pytest.mark.parametrize("shapes", [((0, 3, 4), (4, 5)), ((3, 4), (0, 4, 5)), ((0, 3, 4), (0, 4, 5))],
                         ids=["a_batch0", "b_batch0", "both"])
def test_an_empty_batch_gives_an_empty_output(shapes):
    """A batch of 0 broadcast against a shared operand is an empty batch, as in torch (it was taken as 1: the
    kernel ran over a 0-batch B, reading past it, or indexed an empty A)."""
    a, b = torch.randn(*shapes[0], device=DEVICE), torch.randn(*shapes[1], device=DEVICE)
    out = matmul(a, b)
    assert out.shape == torch.matmul(a, b).shape == (0, 3, 5)


@pytest.mark.interpreter
def test_split_k_is_deterministic_and_correct():
    """Decode shapes (M ≤ 16, long K) split K under the interpreter too; the reduction is ordered."""
    plan = matmul_plan(2, 48, 300, 1, 4, False, False, 132)
    assert plan.SPLIT_K > 1
    torch.manual_seed(3)
    kw = {"a": _rand(2, 300), "b": _rand(300, 48, scale=300 ** -0.5), "bias": _rand(48)}
    first, second = matmul(**kw), matmul(**kw)
    assert torch.equal(first, second)
    _check(first, kw, F32)


@pytest.mark.parametrize("batched", [False, True], ids=["2d", "shared_b"])
def test_backward_matches_reference(batched):
    torch.manual_seed(4)
    lead = (2,) if batched else ()
    kw = {"a": _rand(*lead, 11, 24), "b": _rand(24, 18), "bias": _rand(18), "residual": _rand(*lead, 11, 18),
          "alpha": 0.5, "beta": 2.0}
    names = ("a", "b", "bias", "residual")
    go = torch.randn(*lead, 11, 18, device=DEVICE, dtype=torch.float64)

    def grads(fn, dtype):
        leaves = {k: (v.detach().to(dtype).requires_grad_(True) if k in names else v) for k, v in kw.items()}
        return torch.autograd.grad(fn(**leaves), [leaves[n] for n in names], go.to(dtype))

    ours, ref = grads(matmul, F32), grads(reference.matmul, torch.float64)
    for name, g, r in zip(names, ours, ref):
        torch.testing.assert_close(g.double(), r, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("act", ["relu", "gelu", "gelu_tanh", "silu", "swiglu"])
def test_activation_backward_matches_reference(act):
    """The backward recomputes the pre-activation and goes through the activation family's kernel."""
    torch.manual_seed(10)
    n = 20
    kw = {"a": _rand(2, 9, 24), "b": _rand(24, n, scale=24 ** -0.5), "bias": _rand(n), "activation": act,
          "residual": _rand(2, 9, n // 2 if act == "swiglu" else n), "alpha": 0.8}
    names = ("a", "b", "bias", "residual")
    go = torch.randn(kw["residual"].shape, device=DEVICE, dtype=torch.float64)

    def grads(fn, dtype):
        leaves = {k: (v.detach().to(dtype).requires_grad_(True) if k in names else v) for k, v in kw.items()}
        return torch.autograd.grad(fn(**leaves), [leaves[n] for n in names], go.to(dtype))

    with poison_outputs():
        ours = grads(matmul, F32)
    for name, g, r in zip(names, ours, grads(reference.matmul, torch.float64)):
        torch.testing.assert_close(g.double(), r, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("kwargs,exc,name", [
    ({"a": "x"}, TypeError, "a"),
    ({"a": torch.zeros(4, 8, dtype=torch.int32)}, TypeError, "a"),
    ({"b": torch.zeros(8, 5, dtype=F16)}, TypeError, "a, b"),
    ({"b": torch.zeros(7, 5)}, ValueError, "b"),
    ({"a": torch.zeros(4)}, ValueError, "a"),
    ({"a": torch.zeros(2, 4, 8), "b": torch.zeros(3, 8, 5)}, ValueError, "b"),
    ({"bias": torch.zeros(4)}, ValueError, "bias"),
    ({"residual": torch.zeros(4, 4)}, ValueError, "residual"),
    ({"activation": "tanh"}, ValueError, "activation"),
    ({"activation": "swiglu"}, ValueError, "b"),
    ({"alpha": float("nan")}, ValueError, "alpha"),
    ({"out_dtype": torch.int8}, TypeError, "out_dtype"),
])
def test_bad_input(kwargs, exc, name):
    kw = {"a": torch.zeros(4, 8, device=DEVICE), "b": torch.zeros(8, 5, device=DEVICE), **kwargs}
    kw = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    with pytest.raises(exc, match=rf"^{name}:"):
        matmul(**kw)


def test_torch_compile_fullgraph_forward_and_backward():
    torch.manual_seed(5)
    a, b, bias = _rand(9, 16).requires_grad_(True), _rand(16, 12).requires_grad_(True), _rand(12)

    def f(a, b, bias):
        return matmul(a, b, bias=bias).square().sum()

    loss = torch.compile(f, backend="aot_eager", fullgraph=True)(a, b, bias)
    ga, gb = torch.autograd.grad(loss, [a, b])
    a2, b2 = a.detach().double().requires_grad_(True), b.detach().double().requires_grad_(True)
    ra, rb = torch.autograd.grad(reference.matmul(a2, b2, bias.double()).square().sum(), [a2, b2])
    torch.testing.assert_close(ga.double(), ra, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gb.double(), rb, rtol=1e-4, atol=1e-4)

    g = torch.compile(lambda a, b: matmul(a, b, activation="swiglu"), backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        a0, b0 = a.detach(), _rand(16, 12)
        torch.testing.assert_close(g(a0, b0), matmul(a0, b0, activation="swiglu"))


# ------------------------------------------------------------------------------- ahead-of-time for sm_90


@pytest.mark.parametrize("name", ["square-4096", "8192-swiglu", "8192-bias-gelu", "llama3_8b-gate_up-M1024"])
def test_hopper_path_compiles_for_sm90(name):
    """Aligned bench shapes take the persistent TMA kernel: wgmma, no spills, one program per SM."""
    reports = inspect_op(MATMUL_SPEC, name, "sm_90")
    assert [r.name for r in reports] == ["_matmul_tma_kernel"]
    r = reports[0]
    assert r.spill_bytes == 0 and r.mix.count("HGMMA") > 0
    assert r.grid == (132, 1, 1)
    assert r.shared_bytes <= 227 * 1024



@pytest.mark.parametrize("name", ["llama3_8b-o-M64-bf16", "qwen2.5_7b-qkv-M32-bf16"])
def test_decode_plans_find_stages_that_fit_an_ada_gpu(name):
    """Compiled for an Ada GPU (99 KiB of shared memory a block), the decode plans' 4 stages do not fit (144 KiB
    at M = 64, 120 at M = 32); the launch then steps the stages down (``runtime.launch._run_fitting``), and 3
    stages of the same tiles fit with no spills. The H100 plans and tables are untouched."""
    (planned,) = inspect_op(MATMUL_SPEC, name, "sm_89")
    assert planned.occupancy.blocks_per_sm == 0 and planned.num_stages == 4
    config = {k: planned.constexprs[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K")}
    (fewer,) = inspect_op(MATMUL_SPEC, name, "sm_89", config={**config, "num_warps": planned.num_warps,
                                                               "num_stages": planned.num_stages - 1})
    assert fewer.occupancy.blocks_per_sm >= 1 and fewer.spill_bytes == 0, fewer.shared_bytes
    assert (fewer.constexprs["BLOCK_M"], fewer.constexprs["BLOCK_N"]) == (config["BLOCK_M"], config["BLOCK_N"])

def test_plan_takes_the_tile_with_fewer_rounds():
    """Wave quantisation: 8B qkv M=1024 (N 6144) is 192 tiles of 128×256 (2 rounds on 132 SMs, the second
    half empty) or 384 of 128×128 (3 rounds of half the work) → 128×128; 8B o M=1024 (N 4096): 128 tiles of
    128×256 in one round → 128×256; 8B qkv M=256: 64×128×128 tiles (measured on an H200: 1.5× the 128×128
    tiles there)."""
    with planning_for_gpu((9, 0)):
        qkv = matmul_plan(1024, 6144, 4096, 1, 2, False, True, 132)
        o = matmul_plan(1024, 4096, 4096, 1, 2, False, True, 132)
        small = matmul_plan(256, 6144, 4096, 1, 2, False, True, 132)
        square = matmul_plan(8192, 8192, 8192, 1, 2, False, True, 132)
    assert (qkv.BLOCK_M, qkv.BLOCK_N) == (128, 128)
    assert (o.BLOCK_M, o.BLOCK_N) == (128, 256)
    assert (small.BLOCK_M, small.BLOCK_N, small.BLOCK_K) == (64, 128, 128)
    assert (square.BLOCK_M, square.BLOCK_N, square.num_stages) == (128, 256, 3)


def test_forced_plan_overrides_the_default():
    """``forced_plan`` (the config sweep's hook): another tiling and split-K give the same product; a TMA
    plan the Hopper kernel cannot run (a batched product) is refused, naming the plan."""
    torch.manual_seed(11)
    a, b = _rand(20, 160, dtype=F16), _rand(160, 40, dtype=F16, scale=160 ** -0.5)
    with forced_plan(Plan(False, 16, 16, 32, 4, 1, SPLIT_K=4)):
        out = matmul(a, b)
    _check(out, {"a": a, "b": b}, F16)
    with forced_plan(Plan(True, 16, 32, 32, 4, 1)), pytest.raises(ValueError, match=r"^plan:"):
        matmul(_rand(2, 20, 32, dtype=F16), _rand(2, 32, 40, dtype=F16))


@pytest.mark.parametrize("layout", ["b_row", "b_t", "a_t", "swiglu", "strided"])
def test_hopper_kernel_reads_misaligned_operands_from_aligned_copies(layout):
    """Rows off 16 bytes (K = 150 and N = 45 fp16: 300 and 90 B) cannot be TMA descriptors: a TMA plan runs
    on aligned copies of the operands and writes an aligned stand-in for the output, copied into it. Under
    the interpreter (which runs device-side descriptors): the product is right with bias and residual, the
    inputs are untouched, and nothing of the output is left unwritten (poisoned outputs)."""
    torch.manual_seed(15)
    m, n, k = 20, 24 if layout == "swiglu" else 45, 150
    nb = 2 * n if layout == "swiglu" else n
    a = _rand(k, m, dtype=F16).t() if layout == "a_t" else _rand(m, k, dtype=F16)
    b = _rand(nb, k, dtype=F16, scale=k ** -0.5).t() if layout == "b_t" else _rand(k, nb, dtype=F16, scale=k ** -0.5)
    if layout == "strided":  # 16-byte aligned rows, a base 2 bytes in: only the base is off
        a = _rand(m, k + 2, dtype=F16)[:, 1:k + 1]
    kw = {"a": a, "b": b, "bias": _rand(nb, dtype=F16), "residual": _rand(m, n, dtype=F16)}
    if layout == "swiglu":
        kw["activation"] = "swiglu"
    before = {name: t.clone() for name, t in kw.items() if torch.is_tensor(t)}
    assert forward._tma_operand(a) is None or forward._tma_operand(b) is None or (n * 2) % 16
    with poison_outputs(), forced_plan(Plan(True, 16, 32, 32, 4, 1)):
        out = matmul(**kw)
    assert out.shape == (m, n) and out.is_contiguous()
    _check(out, kw, F16)
    assert all(torch.equal(kw[name], t) for name, t in before.items())


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["fp16", "bf16"])
def test_swiglu_over_an_odd_width_is_not_staged(dtype):
    """swiglu's up half starts N columns into a row-major B: with N = 12 16-bit columns that is off 16 bytes,
    which no TMA box may start at, so a TMA plan is refused rather than run on a copy — for bf16 too, which
    the interpreter computes in fp32 (the decision follows the caller's dtype, as on a GPU)."""
    a, b = _rand(20, 64, dtype=dtype), _rand(64, 24, dtype=dtype)
    with forced_plan(Plan(True, 16, 32, 32, 4, 1)), pytest.raises(ValueError, match=r"^plan:"):
        matmul(a, b, activation="swiglu")


def test_staging_rule():
    """Misaligned products go to the Hopper kernel on copies past decode sizes (M > 64) with N and K of at
    least 128; decode products stream B once, and a copy of it would double the traffic."""
    assert forward._worth_staging(8191, 4095, 3583) and forward._worth_staging(128, 4095, 3583)
    assert not forward._worth_staging(64, 4095, 3583)
    assert not forward._worth_staging(8191, 17, 3583) and not forward._worth_staging(8191, 4095, 100)


def test_misaligned_products_compile_to_the_hopper_kernel_for_sm90():
    """The heuristic plan of a large misaligned product on Hopper is the TMA kernel (on aligned copies); a
    decode-sized one stays on the pointer kernel."""
    with tuned.ignored():  # on a GPU its table's winner runs (at M = 128 a split-K pointer plan, measured)
        (big,) = inspect_op(MATMUL_SPEC, "unaligned-512x4095x3583-b_t", "sm_90")
    assert big.name == "_matmul_tma_kernel" and big.constexprs["B_T"]
    with planning_for_gpu((9, 0)):
        assert forward.matmul_plan(64, 4095, 3583, 1, 2, False, False, 132).tma is False


@pytest.mark.parametrize("act,bias,res", [(None, False, False), ("gelu", True, True), ("swiglu", True, True)])
@pytest.mark.parametrize("split", [2, 3, 5])
def test_inline_split_k_matches_two_launch_reduction_bitwise(split, act, bias, res):
    """The in-launch reduction (last split of a tile sums the partials in split order) gives the very bits
    of the two-launch one, whatever split arrives last; every counter is back at 0 afterwards (the next
    launch reuses them); the epilogue (bias, activation, swiglu halves, residual) runs once, in the last
    split. K = 160 → 5 K blocks of 32: split 3 is uneven (2, 2, 1)."""
    torch.manual_seed(13)
    n = 48 if act == "swiglu" else 40
    kw = {"a": _rand(20, 160, dtype=F16), "b": _rand(160, n, dtype=F16, scale=160 ** -0.5)}
    if bias:
        kw["bias"] = _rand(n, dtype=F16)
    if act:
        kw["activation"] = act
    if res:
        kw["residual"] = _rand(20, n // 2 if act == "swiglu" else n, dtype=F16)
    outs = []
    for inline in (True, False):
        with poison_outputs(), forced_plan(Plan(False, 16, 16, 32, 4, 1, SPLIT_K=split, SPLIT_INLINE=inline)):
            outs.append(matmul(**kw))
    assert torch.equal(outs[0], outs[1])
    _check(outs[0], kw, F16)
    assert all(int(t.abs().sum()) == 0 for t in alloc._COUNTERS.values())


@pytest.mark.parametrize("split,flatten", [(1, True), (3, True), (4, False), (5, False)])
@pytest.mark.parametrize("act", [None, "swiglu"])
def test_hopper_kernel_split_k_under_interpreter(split, flatten, act):
    """The TMA kernel's split-K (work units = tile × split, the last split of a tile reduces) forced under
    the interpreter, which runs device descriptors: uneven splits, more units than programs would be on a
    GPU, swiglu's two accumulators, bias and residual in the last split only; bit-equal to the pointer
    kernel's split-K with the same split (the same partials summed in the same order)."""
    torch.manual_seed(14)
    n = 64 if act == "swiglu" else 48
    kw = {"a": _rand(20, 160, dtype=F16), "b": _rand(n, 160, dtype=F16, scale=160 ** -0.5).t(),
          "bias": _rand(n, dtype=F16), "residual": _rand(20, n // 2 if act == "swiglu" else n, dtype=F16)}
    if act:
        kw["activation"] = act
    with poison_outputs(), forced_plan(Plan(True, 16, 32, 32, 4, 1, SPLIT_K=split, FLATTEN=flatten)):
        out = matmul(**kw)
    _check(out, kw, F16)
    with poison_outputs(), forced_plan(Plan(False, 16, 32, 32, 4, 1, SPLIT_K=split)):
        ptr = matmul(**kw)
    if split > 1:
        assert torch.equal(out, ptr)
    assert all(int(t.abs().sum()) == 0 for t in alloc._COUNTERS.values())


def test_decode_split_fills_one_wave():
    """Split-K for decode: the most splits that still run in one wave of 132 SMs, ≥ 4 K blocks each."""
    assert forward.decode_split(32, 4096, 128, 132) == 4    # 8B o, M=64 (64×128 tiles): 128 units
    assert forward.decode_split(48, 4096, 128, 132) == 2    # 8B qkv: 96 (3 would be 144 > 132)
    assert forward.decode_split(80, 8192, 128, 132) == 1    # 70B qkv
    assert forward.decode_split(224, 4096, 128, 132) == 1   # 8B gate_up: already > 1 wave
    assert forward.decode_split(8, 1024, 128, 132) == 2     # 8 K blocks: ≥ 4 per split
    with planning_for_gpu((9, 0)):
        p64 = matmul_plan(64, 4096, 4096, 1, 2, False, True, 132)
        p16 = matmul_plan(16, 6144, 4096, 1, 2, False, True, 132)
    assert (p64.tma, p64.BLOCK_M, p64.BLOCK_N, p64.SPLIT_K, p64.SPLIT_INLINE) == (False, 64, 128, 4, True)
    assert (p16.BLOCK_N, p16.BLOCK_K, p16.SPLIT_K) == (64, 256, 1)  # 96 tiles: no split, long K steps


def test_fp8_block_scales_cost_one_fma_per_element_per_k_block():
    """Block scales fold into the accumulator with one FFMA per element per 128-K block (the scale is
    ``sa[row]·sb`` with ``sb`` one scalar per 128-column tile), and the second fp32 tile fits: 128×128
    tiles at 8 warps hold 64 elements per thread → 64 FFMA in the (single-copy) K loop."""
    (r,) = inspect_op(FP8_MATMUL_SPEC, "8192-block", "sm_90")
    assert r.constexprs["BLOCK_M"] * r.constexprs["BLOCK_N"] == 128 * 128 and r.num_warps == 8
    assert r.mix.count("FFMA") == 64
    assert r.spill_bytes == 0 and r.registers <= 200


def test_fp8_fast_accumulation_allows_128x256_tiles():
    """Without promotion every K block (``Plan.FAST_ACCUM``) no second fp32 tile is live: 128×256×128 fits."""
    (r,) = inspect_op(FP8_MATMUL_SPEC, "8192-tensor", "sm_90",
                      config={"BLOCK_N": 256, "num_stages": 3, "MAX_IMPRECISE": None})
    assert r.spill_bytes == 0 and r.mix.count("QGMMA") > 0


def test_backward_compiles_for_sm90():
    """The backward of bias + GELU: the fp32 pre-activation recompute, the activation gradient, and dA, dB
    on transposed views — all TMA-eligible, no spills."""
    reports = inspect_op(MATMUL_SPEC, "8192-bias-gelu", "sm_90", modes=("bwd",))
    names = sorted(r.name for r in reports)
    assert names == ["_activation_bwd_kernel", "_matmul_tma_kernel", "_matmul_tma_kernel", "_matmul_tma_kernel"]
    assert all(r.spill_bytes == 0 for r in reports)
    assert {(r.constexprs["A_T"], r.constexprs["B_T"]) for r in reports if r.name == "_matmul_tma_kernel"} == \
        {(False, True), (False, False), (True, False)}


def test_hopper_warp_specialized_config_compiles():
    config = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3, "EPI_SPLIT": 2,
              "FLATTEN": False, "WARP_SPECIALIZE": True}  # a whole plan: configs run under the spec's hook
    assert config in MATMUL_SPEC.configs
    (r,) = inspect_op(MATMUL_SPEC, "square-4096", "sm_90", config=config)
    assert r.spill_bytes == 0 and r.mix.count("HGMMA") > 0


@pytest.mark.parametrize("name", ["llama3_8b-down-M1", "llama3_8b-o-M64", "llama3_8b-qkv-M64"])
def test_decode_takes_split_k_pointer_path_for_sm90(name):
    """Decode splits K in ONE launch: partial stores, a CTA barrier, then the acq_rel arrival atomic (the
    order the reduction's correctness rests on); no spills (the rolled reduction loop: 64×128 tiles at 4
    warps spilled 656 B when the partial loads were unrolled)."""
    with tuned.ignored():  # the heuristic's plan (a GPU's shipped table may pick another)
        (r,) = inspect_op(MATMUL_SPEC, name, "sm_90")
    assert r.name == "_matmul_kernel" and r.grid[1] > 1  # K is split
    assert r.spill_bytes == 0
    ptx = r.ptx
    atom = ptx.index("atom.global.gpu.acq_rel.add")
    assert ptx.count("atom.global") == 1
    assert "bar.sync" in ptx[ptx.rindex("st.global.cg", 0, atom):atom]


@pytest.mark.parametrize("plan", [Plan(True, 64, 128, 128, 4, 4, SPLIT_K=4, FLATTEN=False),
                                  Plan(True, 64, 128, 128, 4, 4, SPLIT_K=4),
                                  Plan(True, 64, 64, 128, 4, 6, SPLIT_K=4, FLATTEN=False)], ids=str)
def test_hopper_split_k_compiles_for_sm90(plan):
    """The TMA kernel's split-K candidates (forced) compile for sm_90: wgmma, the arrival atomic, no spills,
    shared memory within the 227 KB a block may take; the grid covers tile × split units."""
    with forced_plan(plan):
        (r,) = inspect_op(MATMUL_SPEC, "llama3_8b-o-M64", "sm_90")
    assert r.name == "_matmul_tma_kernel" and r.spill_bytes == 0 and r.mix.count("HGMMA") > 0
    assert "atom.global.gpu.acq_rel.add" in r.ptx
    assert r.shared_bytes <= 227 * 1024
    assert r.grid[0] == min(132, 4096 // plan.BLOCK_N * 4)


def test_misaligned_operand_is_copied_for_the_hopper_kernel():
    """A transposed A whose row stride (300 bf16 = 600 B) is not 16-byte aligned cannot be a TMA operand as
    it is: the product runs on the TMA kernel from an aligned copy, still transposed (``A_T``)."""
    reports = inspect_op(MATMUL_SPEC, "300x256x200-a_t-res", "sm_90")
    assert [r.name for r in reports] == ["_matmul_tma_kernel"]
    assert reports[0].constexprs["A_T"] and reports[0].spill_bytes == 0


# ------------------------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("mnk", [(4096, 4096, 4096), (1, 4096, 14336), (16, 6144, 4096), (300, 520, 264)])
@pytest.mark.parametrize("act", [None, "gelu", "swiglu"])
def test_gpu_bf16_within_twice_cublas_error(mnk, act):
    m, n, k = mnk
    c = case("gpu", BF16, M=m, N=n, K=k, b_t=True, bias=True, act=act)
    torch.manual_seed(6)
    kw = MATMUL_SPEC.inputs(c, DEVICE)
    _check(matmul(**kw), kw, BF16)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["b_row", "b_t", "a_t", "odd_vocab"])
def test_gpu_misaligned_products_run_staged_and_replay_right(layout):
    """Misaligned products past decode sizes run on aligned copies; repeated calls (replayed from the second:
    the copies, the launch and the copy-out are recorded) follow new input values, and their bias, residual
    and gelu epilogue; the output is contiguous like torch's. An odd vocabulary (N = 50257 over K = 4096)
    leaves only the output rows off 16 bytes."""
    torch.manual_seed(16)
    m, n, k = (300, 50257, 256) if layout == "odd_vocab" else (300, 4095, 3583)
    for step in range(3):
        a = _rand(k, m, dtype=BF16).t() if layout == "a_t" else _rand(m, k, dtype=BF16)
        b = _rand(k, n, dtype=BF16, scale=k ** -0.5)
        if layout in ("b_t", "odd_vocab"):
            b = _rand(n, k, dtype=BF16, scale=k ** -0.5).t()
        kw = {"a": a, "b": b, "bias": _rand(n, dtype=BF16), "residual": _rand(m, n, dtype=BF16),
              "activation": "gelu"}
        out = matmul(**kw)
        assert out.is_contiguous(), step
        _check(out, kw, BF16)


@pytest.mark.gpu
def test_gpu_fp32_follows_allow_tf32():
    torch.manual_seed(7)
    a, b = _rand(512, 512), _rand(512, 512)
    exact = a.double() @ b.double()
    prev = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        assert (matmul(a, b).double() - exact).abs().max() < 1e-3
        torch.backends.cuda.matmul.allow_tf32 = True
        assert (matmul(a, b).double() - exact).abs().max() > 1e-3  # TF32 keeps 10 mantissa bits
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


# ------------------------------------------------------------------------------------------------- fp8

E4M3 = torch.float8_e4m3fn


def _fp8(*shape):
    return torch.randn(shape, device=DEVICE).to(E4M3)


@pytest.mark.parametrize("kwargs,exc,name", [
    ({"a": torch.zeros(4, 256, dtype=F16)}, TypeError, "a"),
    ({"b": torch.zeros(128, 64).to(E4M3)}, ValueError, "b"),
    ({"scale_a": torch.ones(3)}, ValueError, "scale_a"),
    ({"scale_a": torch.ones(4, dtype=F16)}, TypeError, "scale_a"),
    ({"scale_b": torch.ones(64, 2)}, ValueError, "scale_b"),
    ({"scale_a": torch.ones(4, 2)}, ValueError, "scale_a, scale_b"),  # block scales for a only
    ({"bias": torch.zeros(3)}, ValueError, "bias"),
    ({"activation": "tanh"}, ValueError, "activation"),
    ({"out_dtype": torch.int32}, TypeError, "out_dtype"),
    ({"fast_accum": 1}, TypeError, "fast_accum"),
])
def test_fp8_bad_input(kwargs, exc, name):
    kw = {"a": _fp8(4, 256), "b": _fp8(64, 256).t(), "scale_a": torch.ones(()), "scale_b": torch.ones(()),
          **kwargs}
    kw = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    with pytest.raises(exc, match=rf"^{name}:"):
        fp8_matmul(**kw)


@pytest.mark.parametrize("m,k,n,shape_a,shape_b", [(4, 64, 256, (4, 1), (2, 1)), (4, 200, 2, (4, 2), (1, 2))],
                         ids=["K-one-block", "N-two"])
def test_fp8_block_scales_that_also_read_per_row(m, k, n, shape_a, shape_b):
    """Block scales whose shape is also a per-row one (``[M, 1]`` when K ≤ 128; b's ``[1, 2]`` for N = 2 and
    K ≤ 256) are read as blocks beside an unambiguous block scale: accepted (they were refused as "not
    together"), and on a GPU equal to the reference, which reads them the same way."""
    a, b = _fp8(m, k), _fp8(n, k).t()
    scale_a = torch.rand(shape_a, device=DEVICE) + 0.5
    scale_b = torch.rand(shape_b, device=DEVICE) + 0.5
    exact = reference.fp8_matmul(a, b, scale_a.double(), scale_b.double())
    by_hand = (a.double() * scale_a.double().repeat_interleave(128, 1)[:, :k]) @ \
        (b.double() * scale_b.double().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k].t())
    torch.testing.assert_close(exact, by_hand)
    if not torch.cuda.is_available():  # validation passed: the refusal is the interpreter's, not the scales'
        with pytest.raises(NotImplementedError, match="compute capability"):
            fp8_matmul(a, b, scale_a, scale_b)
        return
    torch.testing.assert_close(fp8_matmul(a, b, scale_a, scale_b, out_dtype=torch.float32).double(), exact,
                               rtol=2e-2, atol=2e-2)

@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where no fp8 GPU is present")
def test_fp8_refused_under_the_interpreter():
    with pytest.raises(NotImplementedError, match="compute capability"):
        fp8_matmul(_fp8(4, 256), _fp8(64, 256).t(), torch.ones(()), torch.ones(()))


@pytest.mark.parametrize("name", ["8192-tensor", "8192-row", "8192-block", "256x512x512-block-swiglu",
                                  "llama3_8b-down-M16-tensor"])
def test_fp8_compiles_for_sm90(name):
    """fp8 kernels compile for sm_90 with fp8 wgmma (QGMMA) on the TMA path and no spills."""
    reports = inspect_op(FP8_MATMUL_SPEC, name, "sm_90")
    assert reports and all(r.spill_bytes == 0 for r in reports)
    tma = [r for r in reports if r.name == "_matmul_tma_kernel"]
    (c,) = [c for c in (*FP8_MATMUL_SPEC.bench_cases, *FP8_MATMUL_SPEC.check_cases) if c.name == name]
    if c["M"] > 64:
        assert len(tma) == 1 and tma[0].mix.count("QGMMA") > 0
    else:
        assert [r.name for r in reports] == ["_matmul_kernel"]  # split K reduced in the same launch


@pytest.mark.parametrize("name", ["8192-tensor-fast_accum", "8192-row-fast_accum",
                                  "256x512x512-tensor-swiglu-fast_accum"])
def test_fp8_fast_accum_plan_compiles_for_sm90(name):
    """``fast_accum=True``: no promotion (``MAX_IMPRECISE`` None), so 128×256×128 tiles with 4 stages fit
    (224 KB of shared memory, no spills); swiglu's two accumulators take 128×128."""
    (r,) = inspect_op(FP8_MATMUL_SPEC, name, "sm_90")
    assert r.name == "_matmul_tma_kernel" and r.constexprs["MAX_IMPRECISE"] is None
    assert r.spill_bytes == 0 and r.mix.count("QGMMA") > 0 and r.shared_bytes <= 227 * 1024
    assert r.constexprs["BLOCK_N"] == (128 if "swiglu" in name else 256)


def test_fp8_fast_accum_plans():
    """The option reaches the plan for per tensor/row scales; block scales ignore it (each 128-K block is
    folded into fp32 anyway); the default keeps promotion."""
    with planning_for_gpu((9, 0)):
        fast = matmul_plan(8192, 8192, 8192, 1, 1, False, True, 132, False, True)
        block = matmul_plan(8192, 8192, 8192, 1, 1, False, True, 132, True, True)
        default = matmul_plan(8192, 8192, 8192, 1, 1, False, True, 132, False, False)
        decode = matmul_plan(16, 4096, 14336, 1, 1, False, True, 132, False, True)
    assert (fast.BLOCK_N, fast.FAST_ACCUM) == (256, True)
    assert not block.FAST_ACCUM and not default.FAST_ACCUM and default.BLOCK_N == 128
    assert decode.FAST_ACCUM and not decode.tma


@pytest.mark.gpu
@pytest.mark.parametrize("scaling", ["tensor", "row", "block"])
@pytest.mark.parametrize("mnk", [(17, 256, 384), (300, 512, 1024), (1, 4096, 4096), (2048, 2048, 8192)])
def test_gpu_fp8_matches_reference(scaling, mnk):
    m, n, k = mnk
    c = case("gpu", E4M3, M=m, N=n, K=k, scaling=scaling, bias=True, act="gelu")
    torch.manual_seed(8)
    kw = FP8_MATMUL_SPEC.inputs(c, DEVICE)
    out = fp8_matmul(**kw)
    up = {k: v.double() if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    res = compare("out", out, reference.fp8_matmul(**up), reference.fp8_matmul(**kw), default_tolerance(BF16),
                  expected_dtype=BF16)
    assert res.passed, res


@pytest.mark.gpu
@pytest.mark.parametrize("scaling", ["row", "block"])
@pytest.mark.parametrize("m", [16, 300], ids=["decode", "tma"])
def test_gpu_fp8_strided_scales_and_bias_equal_contiguous(scaling, m):
    """Scale vectors / blocks and the bias as strided views (every other element of a wider buffer, a
    transposed block table) give the bits of their contiguous copies: the kernels take their strides."""
    torch.manual_seed(21)
    n, k = 256, 384
    a, b = _fp8(m, k), _fp8(n, k).t()
    if scaling == "row":
        sa = (torch.rand(m, 2, device=DEVICE) + 0.5)[:, :1]        # [M, 1], row stride 2
        sb = (torch.rand(2 * n, device=DEVICE) + 0.5)[::2]          # [N], stride 2
    else:
        sa = (torch.rand(3, m, device=DEVICE) + 0.5).t()            # [M, 3] column-major
        sb = (torch.rand(2, 3, 2, device=DEVICE) + 0.5)[:, :, 0]    # [2, 3], strides (6, 2)
    bias = torch.randn(3 * n, device=DEVICE).to(BF16)[::3]
    out = fp8_matmul(a, b, sa, sb, bias=bias)
    assert torch.equal(out, fp8_matmul(a, b, sa.contiguous(), sb.contiguous(), bias=bias.contiguous()))


@pytest.mark.gpu
@pytest.mark.parametrize("scaling", ["tensor", "row"])
@pytest.mark.parametrize("mnk", [(64, 4096, 8192), (2048, 2048, 8192), (16, 4096, 14336)])
def test_gpu_fp8_fast_accum_within_tolerance(scaling, mnk):
    """Fast accumulation (no fp32 promotion over K = 8192–14336) stays within the spec's bf16 tolerance of
    the float64 reference, and the default (promoted) path is at least as accurate in relative L2."""
    m, n, k = mnk
    c = case("gpu", E4M3, M=m, N=n, K=k, scaling=scaling)
    torch.manual_seed(9)
    kw = FP8_MATMUL_SPEC.inputs(c, DEVICE)
    up = {k: v.double() if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    ref, base = reference.fp8_matmul(**up), reference.fp8_matmul(**kw)
    fast = compare("out", fp8_matmul(**kw, fast_accum=True), ref, base, default_tolerance(BF16),
                   expected_dtype=BF16)
    slow = compare("out", fp8_matmul(**kw), ref, base, default_tolerance(BF16), expected_dtype=BF16)
    assert fast.passed, fast
    assert slow.passed and slow.rel_l2 <= fast.rel_l2 * 1.05, (slow, fast)


@pytest.mark.gpu
@pytest.mark.parametrize("plan", [None, Plan(False, 64, 128, 128, 4, 4, SPLIT_K=4),
                                  Plan(True, 64, 128, 128, 4, 4, SPLIT_K=4, FLATTEN=False),
                                  Plan(True, 64, 64, 128, 4, 6, SPLIT_K=3)], ids=str)
def test_gpu_decode_split_k_is_deterministic(plan):
    """bf16 decode at M = 64 (Llama-3 8B o: 32 output tiles) with K split in one launch, default and forced
    TMA/pointer plans: within 2× cuBLAS's error, and bit-identical over repeated calls (the arrival order of
    the splits varies run to run; the summation order does not)."""
    torch.manual_seed(15)
    kw = {"a": _rand(64, 4096, dtype=BF16), "b": _rand(4096, 4096, dtype=BF16, scale=4096 ** -0.5).t(),
          "bias": _rand(4096, dtype=BF16)}
    with contextlib.ExitStack() as stack:
        if plan is not None:
            stack.enter_context(forced_plan(plan))
        outs = [matmul(**kw) for _ in range(5)]
    assert all(torch.equal(outs[0], o) for o in outs[1:])
    _check(outs[0], kw, BF16)


# --------------------------------------------------------------------------------------------- grouped


def _grouped_inputs(sizes, k, n, dtype=F32):
    a = _rand(sum(sizes), k, dtype=dtype)
    b = _rand(len(sizes), n, k, dtype=dtype, scale=k ** -0.5).transpose(1, 2)
    return a, b


@pytest.mark.parametrize("sizes", [[5, 0, 17, 1, 33], [40], [0, 0, 9], [16, 16, 16]], ids=str)
@pytest.mark.parametrize("dtype", [F32, F16], ids=["fp32", "fp16"])
def test_grouped_matches_loop_of_matmuls(sizes, dtype):
    torch.manual_seed(9)
    a, b = _grouped_inputs(sizes, 37, 24, dtype)
    t = torch.tensor(sizes, dtype=torch.int32, device=DEVICE)
    with poison_outputs():
        out = grouped_matmul(a, b, t)
    ref = reference.grouped_matmul(a.double(), b.double(), t)
    c = compare("out", out, ref, reference.grouped_matmul(a, b, t), default_tolerance(dtype),
                expected_dtype=dtype)
    assert c.passed, c
    offsets = [0]
    for s in sizes:
        offsets.append(offsets[-1] + s)
    assert torch.equal(out, grouped_matmul(a, b, offsets=offsets))
    assert torch.equal(out, grouped_matmul(a, b, sizes))


@pytest.mark.parametrize("kwargs,exc,name", [
    ({"group_sizes": [3, 6]}, ValueError, "group_sizes"),         # sums to 9, a has 8 rows
    ({"group_sizes": [-1, 5]}, ValueError, "group_sizes"),        # lists are checked on the host, always
    ({"group_sizes": [3, True]}, TypeError, "group_sizes"),
    ({"group_sizes": None, "offsets": [0, 5, 3]}, ValueError, "offsets"),   # decreasing
    ({"group_sizes": None, "offsets": [0, 3, 9]}, ValueError, "offsets"),   # past a's 8 rows
    ({"group_sizes": [8]}, ValueError, "group_sizes"),            # 1 size for 2 experts
    ({"group_sizes": torch.tensor([4.0, 4.0])}, TypeError, "group_sizes"),
    ({"group_sizes": None}, ValueError, "group_sizes, offsets"),
    ({"b": torch.zeros(2, 5, 6)}, ValueError, "b"),
    ({"b": torch.zeros(5, 6)}, ValueError, "b"),
])
def test_grouped_bad_input(kwargs, exc, name):
    kw = {"a": torch.zeros(8, 4), "b": torch.zeros(2, 4, 6), "group_sizes": [3, 5], **kwargs}
    kw = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    with pytest.raises(exc, match=rf"^{name}:"):
        grouped_matmul(**kw)


@pytest.mark.parametrize("offsets", [False, True], ids=["sizes", "offsets"])
def test_grouped_torch_compile_fullgraph(offsets):
    a, b = _grouped_inputs([3, 0, 6], 16, 8)
    t = torch.tensor([0, 3, 3, 9] if offsets else [3, 0, 6], dtype=torch.int32, device=DEVICE)
    kw = {"offsets": t} if offsets else {"group_sizes": t}
    out = torch.compile(lambda a, b: grouped_matmul(a, b, **kw), backend="aot_eager", fullgraph=True)(a, b)
    assert torch.equal(out, grouped_matmul(a, b, **kw))


def test_expert_sizes_are_skewed_and_exact():
    sizes = expert_sizes(16384, 64, "zipf")
    assert sum(sizes) == 16384 and sizes.count(0) == 16 and max(sizes) > 10 * (16384 // 64)


@pytest.mark.parametrize("name", ["mixtral-e8-16k", "finegrained-e64-2k"])
def test_grouped_compiles_for_sm90(name):
    """K-major expert weights on sm_90 take the persistent TMA kernel: wgmma, no spills, one program per SM."""
    (r,) = inspect_op(GROUPED_MATMUL_SPEC, name, "sm_90")
    assert r.name == "_grouped_tma_kernel" and r.grid == (132, 1, 1)
    assert r.spill_bytes == 0 and r.mix.count("HGMMA") > 0
    assert r.shared_bytes <= 227 * 1024


def test_grouped_warp_specialized_config_compiles():
    config = next(c for c in GROUPED_MATMUL_SPEC.configs if c.get("WARP_SPECIALIZE"))
    (r,) = inspect_op(GROUPED_MATMUL_SPEC, "mixtral-e8-16k", "sm_90", config=config)
    assert r.spill_bytes == 0 and r.mix.count("HGMMA") > 0


@pytest.mark.parametrize("b_t", [True, False], ids=["b_t", "b_row"])
@pytest.mark.parametrize("dtype", [F32, F16], ids=["fp32", "fp16"])
def test_grouped_tma_kernel_under_interpreter(b_t, dtype):
    """The TMA grouped kernel, forced (the interpreter runs device descriptors): empty experts, a group
    shorter than a tile, N not a multiple of BLOCK_N (the tail tile reads the next expert's rows)."""
    torch.manual_seed(10)
    sizes = [5, 0, 40, 19]
    a = _rand(sum(sizes), 64, dtype=dtype)
    b = _rand(4, 40, 64, dtype=dtype, scale=0.125).transpose(1, 2) if b_t else _rand(4, 64, 40, dtype=dtype)
    t = torch.tensor(sizes, dtype=torch.int32, device=DEVICE)
    with poison_outputs(), forced_plan(Plan(True, 16, 32, 32, 4, 1)):
        out = grouped_matmul(a, b, t)
    c = compare("out", out, reference.grouped_matmul(a.double(), b.double(), t), reference.grouped_matmul(a, b, t),
                default_tolerance(dtype), expected_dtype=dtype)
    assert c.passed, c


@pytest.mark.gpu
@pytest.mark.parametrize("b_t", [True, False], ids=["b_t", "b_row"])
def test_gpu_grouped_tma_path(b_t):
    """bf16 on the Hopper TMA kernel (default plan): skewed groups with empty experts, N = 1000 (a tail
    tile), both weight layouts; within 2× the error of the torch loop."""
    torch.manual_seed(12)
    sizes = expert_sizes(3000, 8, "zipf")
    a = _rand(3000, 512, dtype=BF16)
    b = _rand(8, 1000, 512, dtype=BF16, scale=512 ** -0.5).transpose(1, 2)
    if not b_t:
        b = b.contiguous()
    t = torch.tensor(sizes, dtype=torch.int32, device=DEVICE)
    with poison_outputs():
        out = grouped_matmul(a, b, t)
    c = compare("out", out, reference.grouped_matmul(a.double(), b.double(), t), reference.grouped_matmul(a, b, t),
                default_tolerance(BF16), expected_dtype=BF16)
    assert c.passed, c


def test_grouped_tma_plan_refuses_unreadable_operands():
    a, b = _grouped_inputs([3, 5], 36, 24)  # row-major view of K-major storage is fine; a sliced A is not
    with forced_plan(Plan(True, 16, 32, 32, 4, 1)), pytest.raises(ValueError, match=r"^plan:"):
        grouped_matmul(a[:, 1:33], b[:, 1:33], [3, 5])


# ------------------------------------------------- grouped: index tensors are bounded in the kernel (issue 15)

_TMA_PLAN = Plan(True, 16, 32, 32, 4, 1)  # the Hopper grouped kernel, forced (the interpreter runs it too)


def _paths():
    return pytest.mark.parametrize("tma", [False, True], ids=["pointer", "tma"])


def _run_grouped(tma, *args, **kwargs):
    with contextlib.ExitStack() as stack:
        if tma:
            stack.enter_context(forced_plan(_TMA_PLAN))
        return grouped_matmul(*args, **kwargs)


@pytest.fixture(params=["int32_sums", "int64_sums"])
def sums(request, monkeypatch):
    """The groups' prefix sums in int32 (the default) or int64 (launches with (E + 1)·T ≥ 2³¹)."""
    if request.param == "int64_sums":
        monkeypatch.setattr(grouped_module, "INT32_SUM_LIMIT", 0)
    return request.param


def _bounded_groups(values, t, offsets):
    """The groups the kernels read from any index values: sizes clamped into [0, T] (negative: empty),
    offsets clamped into [0, T] with a decreasing step an empty group; laid end to end from ``offsets[0]``
    (0 for sizes) and cut at T. Returns ``[(start, end)]`` per expert."""
    def clamp(v):
        return min(max(v, 0), t)

    if offsets:
        start, sizes = clamp(values[0]), [max(clamp(h) - clamp(lo), 0) for lo, h in itertools.pairwise(values)]
    else:
        start, sizes = 0, [clamp(v) for v in values]
    rows = []
    for s in sizes:
        rows.append((min(start, t), min(start + s, t)))
        start += s
    return rows


@_paths()
@pytest.mark.parametrize("layout", ["strided", "expanded", "int64", "offsets_strided", "offsets_list"])
def test_grouped_index_layouts_equal_contiguous(layout, tma):
    """Group sizes / offsets as strided or expanded (stride 0) views, int64, or lists give the contiguous
    int32 result: the kernels take the index tensor's stride (a strided view used to be read as contiguous:
    wrong groups, or a crash)."""
    torch.manual_seed(16)
    sizes = [3, 3, 3, 3] if layout == "expanded" else [4, 0, 7, 2]
    a, b = _grouped_inputs([13], 32, 24)
    b = _rand(4, 24, 32, scale=32 ** -0.5).transpose(1, 2)
    contiguous = torch.tensor(sizes, dtype=torch.int32, device=DEVICE)
    offsets = [0]
    for s in sizes:
        offsets.append(offsets[-1] + s)
    if layout == "strided":  # every other element of [E, 2]; the gaps hold values that would break a kernel
        kw = {"group_sizes": torch.tensor([[s, 99] for s in sizes], dtype=torch.int32, device=DEVICE)[:, 0]}
    elif layout == "expanded":
        kw = {"group_sizes": torch.tensor([3], dtype=torch.int32, device=DEVICE).expand(4)}
    elif layout == "int64":
        kw = {"group_sizes": contiguous.long()}
    elif layout == "offsets_strided":
        kw = {"offsets": torch.tensor([[o, -7] for o in offsets], device=DEVICE)[:, 0]}
    else:
        kw = {"offsets": offsets}
    with poison_outputs():
        out = _run_grouped(tma, a, b, **kw)
        want = _run_grouped(tma, a, b, contiguous)
    assert torch.equal(out, want)
    torch.testing.assert_close(out, reference.grouped_matmul(a, b, contiguous), rtol=1e-5, atol=1e-5)


# (argument, values, index dtype, valid: allowed by the contract, bad value the validation error names)
_GROUP_VALUES = [
    pytest.param("group_sizes", [5, 20, 9], torch.int32, False, "20", id="sizes_past_T"),
    pytest.param("group_sizes", [-4, 6, 3], torch.int32, False, "-4", id="negative_size"),
    pytest.param("group_sizes", [2**31 - 1, 2**31 - 1, 5], torch.int64, False, "2147483647", id="sum_overflows"),
    pytest.param("group_sizes", [-2**31, 7, 2**31 - 1], torch.int32, False, "-2147483648", id="int32_extremes"),
    pytest.param("group_sizes", [2, 3, 1], torch.int32, True, None, id="uncovered_tail"),
    pytest.param("offsets", [4, 6, 6, 9], torch.int32, True, None, id="offsets_head_and_tail"),
    pytest.param("offsets", [0, 8, 3, 13], torch.int32, False, "8 then 3", id="offsets_decreasing"),
    pytest.param("offsets", [0, 5, 9, 40], torch.int32, False, "40", id="offsets_past_T"),
    pytest.param("offsets", [-5, 100, -3, 2**40], torch.int64, False, "-5", id="offsets_out_of_range"),
]


@_paths()
@pytest.mark.parametrize("name,values,dtype,valid,_bad", _GROUP_VALUES)
def test_grouped_bad_groups_stay_inside_the_tensors(name, values, dtype, valid, _bad, tma, sums, monkeypatch):
    """Validation off, any index values: the operands sit inside larger buffers whose guard rows and guard
    expert hold NaN (a read outside ``a``/``b`` would put NaN in the output), the output inside a buffer
    whose guard rows hold a sentinel (a write outside ``c`` would change it). The result is the bounded
    groups' product and rows no group covers are zero (not unwritten). Before: out-of-range reads and
    writes (heap corruption on the CPU), unwritten rows."""
    torch.manual_seed(17)
    t, k, n, e, pad = 13, 32, 24, 3, 16
    a_buf = torch.full((t + 2 * pad, k), float("nan"), device=DEVICE)
    a = a_buf[pad:pad + t]
    a.copy_(torch.randn(t, k))
    b_buf = torch.full((e + 2, n, k), float("nan"), device=DEVICE)
    b_buf[1:e + 1] = torch.randn(e, n, k) * k ** -0.5
    b = b_buf[1:e + 1].transpose(1, 2)
    sentinel, outs = 1234.5, []

    def guarded_empty(shape, *, dtype, device):
        buf = torch.full((shape[0] + 2 * pad, *shape[1:]), sentinel, dtype=dtype, device=device)
        outs.append(buf)
        return buf[pad:pad + shape[0]]

    monkeypatch.setattr(grouped_module, "empty", guarded_empty)
    monkeypatch.setattr(replay, "_enabled", False)  # a replay recorded earlier would not call guarded_empty
    idx = torch.tensor(values, dtype=dtype, device=DEVICE)
    with kernelworks.validation(False):
        out = _run_grouped(tma, a, b, **{name: idx})
    (buf,) = outs
    assert bool((buf[:pad] == sentinel).all()) and bool((buf[pad + t:] == sentinel).all()), "write outside c"
    want = torch.zeros(t, n, dtype=torch.float64, device=DEVICE)
    for i_e, (lo, hi) in enumerate(_bounded_groups(values, t, name == "offsets")):
        want[lo:hi] = a[lo:hi].double() @ b[i_e].double()
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
    if valid:  # the contract allows these (Σ sizes < T, offsets[0] > 0): no error with validation on
        assert torch.equal(_run_grouped(tma, a, b, **{name: idx}), out)


@pytest.mark.parametrize("name,values,dtype,valid,bad", [p for p in _GROUP_VALUES if not p.values[3]])
def test_grouped_validation_names_the_bad_value(name, values, dtype, valid, bad):
    """Validation mode (on in the test suite): bad group sizes / offsets raise a ValueError naming the
    argument and the bad value, before any launch."""
    a, b = _grouped_inputs([13], 32, 24)
    b = _rand(3, 24, 32).transpose(1, 2)
    with pytest.raises(ValueError, match=rf"^{name}:.*{bad}"):
        grouped_matmul(a, b, **{name: torch.tensor(values, dtype=dtype, device=DEVICE)})


def test_grouped_no_experts_gives_zeros():
    """E = 0: no group covers any row, so the output is all zeros (it used to come back unwritten)."""
    a = _rand(5, 8)
    with poison_outputs():
        out = grouped_matmul(a, _rand(0, 8, 6), torch.empty(0, dtype=torch.int32, device=DEVICE))
    assert torch.equal(out, torch.zeros(5, 6, device=DEVICE))


def test_fp8_refuses_inputs_that_require_grad():
    """``fp8_matmul`` has no backward: with grad mode on, an input that requires grad raises (the output used
    to come back detached, the gradient silently lost)."""
    scale = torch.ones((), device=DEVICE, requires_grad=True)
    with pytest.raises(NotImplementedError, match=r"^scale_a: fp8_matmul has no backward"):
        fp8_matmul(_fp8(4, 256), _fp8(64, 256).t(), scale, torch.ones((), device=DEVICE))


def _grouped_grads(a, b, sizes, dc, **kw):
    a, b = a.detach().requires_grad_(True), b.detach().requires_grad_(True)
    grouped_matmul(a, b, sizes, **kw).backward(dc)
    return a.grad, b.grad


@pytest.mark.parametrize("sizes,rows", [([5, 0, 17, 1, 33], 56), ([0, 0, 9], 12), ([40], 40)],
                         ids=["skewed-empty", "uncovered-tail", "one"])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
def test_grouped_gradients_match_float64(sizes, rows, dtype):
    """dA and dB against float64 autograd through the loop of matmuls: empty experts (zero dB), rows no
    group covers (zero dA), B a transposed view of ``[E, N, K]`` storage (dB comes back laid out as B, so
    the parameter's gradient needs no copy)."""
    torch.manual_seed(50)
    a = _rand(rows, 37, dtype=dtype)
    b = _rand(len(sizes), 24, 37, dtype=dtype, scale=37 ** -0.5).transpose(1, 2)
    dc = _rand(rows, 24, dtype=dtype)
    t = torch.tensor(sizes, dtype=torch.int32, device=DEVICE)
    da, db = _grouped_grads(a, b, t, dc)
    a64, b64 = a.double().requires_grad_(True), b.double().requires_grad_(True)
    reference.grouped_matmul(a64, b64, t).backward(dc.double())
    a_lo, b_lo = a.detach().requires_grad_(True), b.detach().requires_grad_(True)
    reference.grouped_matmul(a_lo, b_lo, t).backward(dc)
    for name, got, want, base in (("da", da, a64.grad, a_lo.grad), ("db", db, b64.grad, b_lo.grad)):
        c = compare(name, got, want, base, default_tolerance(dtype), expected_dtype=dtype)
        assert c.passed, c
    assert db.stride() == b.stride() and db.dtype == dtype
    for e in (e for e, size in enumerate(sizes) if size == 0):
        assert torch.equal(db[e], torch.zeros_like(db[e]))
    assert torch.equal(da[sum(sizes):], torch.zeros_like(da[sum(sizes):]))


def test_grouped_gradient_of_offsets_and_one_side():
    """Offsets starting past row 0 give the same gradients as the sizes they encode (uncovered head rows:
    zero dA); only the input that requires grad gets one."""
    torch.manual_seed(51)
    a, b = _grouped_inputs([4, 6, 3], 16, 8)
    a = torch.cat([_rand(2, 16), a])
    dc = _rand(15, 8)
    offsets = torch.tensor([2, 6, 12, 15], dtype=torch.int64, device=DEVICE)
    da, db = _grouped_grads(a, b, None, dc, offsets=offsets)
    da2, db2 = _grouped_grads(a[2:], b, [4, 6, 3], dc[2:])
    torch.testing.assert_close(da[2:], da2)
    torch.testing.assert_close(db, db2)
    assert torch.equal(da[:2], torch.zeros_like(da[:2]))
    a_only = a.detach().requires_grad_(True)
    grouped_matmul(a_only, b, offsets=offsets).sum().backward()
    assert a_only.grad is not None and b.grad is None


def test_grouped_backward_torch_compile_fullgraph():
    """Forward and backward under ``torch.compile(fullgraph=True)`` (the custom ops and their autograd)."""
    torch.manual_seed(52)
    a, b = _grouped_inputs([3, 0, 6], 16, 8)
    t = torch.tensor([3, 0, 6], device=DEVICE)
    dc = _rand(9, 8)

    want = _grouped_grads(a, b, t, dc)
    a2, b2 = a.detach().requires_grad_(True), b.detach().requires_grad_(True)
    torch.compile(lambda a, b: grouped_matmul(a, b, t), backend="aot_eager", fullgraph=True)(a2, b2).backward(dc)
    for g, w in zip((a2.grad, b2.grad), want):
        torch.testing.assert_close(g, w)


# ----------------------------------------------------------------- bf16 (under the interpreter: fp32 dots)


@pytest.mark.parametrize("kind", ["bias-gelu-res_t", "swiglu-bias_strided", "split_k", "shared_b-res_bcast"])
def test_bf16_within_tolerance(kind):
    """bf16 within 2× PyTorch's own bf16 error — under the interpreter too, whose ``tl.dot`` on bf16 returns
    garbage (~1e9 for 0.5): the launcher feeds it fp32 operands and stores bf16. Epilogue operands with odd
    strides ride along (a transposed / broadcast residual, a strided bias)."""
    torch.manual_seed(18)
    m, n, k = (2, 32, 160) if kind == "split_k" else (13, 24, 40)
    a = _rand(2, m, k, dtype=BF16) if kind.startswith("shared_b") else _rand(m, k, dtype=BF16)
    kw = {"a": a, "b": _rand(k, n, dtype=BF16, scale=k ** -0.5)}
    if kind == "bias-gelu-res_t":
        kw.update(bias=_rand(n, dtype=BF16), activation="gelu", residual=_rand(n, m, dtype=BF16).t())
    elif kind == "swiglu-bias_strided":
        kw.update(bias=_rand(3 * n, dtype=BF16)[::3], activation="swiglu")
    elif kind == "shared_b-res_bcast":
        kw.update(residual=_rand(n, dtype=BF16).expand(2, m, n))
    with poison_outputs():
        out = matmul(**kw)
    assert out.dtype == BF16
    _check(out, kw, BF16)


def test_bf16_backward_within_tolerance():
    """The bf16 backward's GEMMs (transposed views) go through the same fp32-operand path."""
    torch.manual_seed(19)
    a, b, bias = _rand(11, 24, dtype=BF16), _rand(24, 16, dtype=BF16, scale=0.2), _rand(16, dtype=BF16)
    go = _rand(11, 16, dtype=BF16)

    def grads(fn, dtype):
        leaves = [t.detach().to(dtype).requires_grad_(True) for t in (a, b, bias)]
        out = fn(leaves[0], leaves[1], bias=leaves[2], activation="gelu")
        return torch.autograd.grad(out, leaves, go.to(dtype))

    ours, base = grads(matmul, BF16), grads(reference.matmul, BF16)
    for name, g, r, bl in zip(["a", "b", "bias"], ours, grads(reference.matmul, torch.float64), base):
        c = compare(name, g, r, bl, default_tolerance(BF16), expected_dtype=BF16)
        assert c.passed, c


@_paths()
def test_grouped_bf16_within_tolerance(tma):
    """bf16 grouped products (pointer and TMA kernels) within 2× the torch loop's bf16 error."""
    torch.manual_seed(20)
    sizes = [5, 0, 21, 6]
    a = _rand(sum(sizes), 64, dtype=BF16)
    b = _rand(4, 40, 64, dtype=BF16, scale=0.125).transpose(1, 2)
    t = torch.tensor(sizes, dtype=torch.int32, device=DEVICE)
    with poison_outputs():
        out = _run_grouped(tma, a, b, t)
    assert out.dtype == BF16
    c = compare("out", out, reference.grouped_matmul(a.double(), b.double(), t), reference.grouped_matmul(a, b, t),
                default_tolerance(BF16), expected_dtype=BF16)
    assert c.passed, c
