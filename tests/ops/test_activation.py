"""Activations (gelu, silu, swiglu, geglu): agreement with the float64 reference, forward and backward, both
input forms of the gated ops, layouts, bad inputs, torch.compile and opcheck. CPU: Triton's interpreter."""

from __future__ import annotations

import pytest
import torch

import kernelworks as kw
from kernelworks.ops.activation import api, reference
from kernelworks.ops.activation.spec import GEGLU_SPEC, GELU_SPEC, SWIGLU_SPEC, _liger_geglu
from kernelworks.runtime.alloc import poison_outputs
from kernelworks.runtime.device import default_device
from kernelworks.spec import default_tolerance

DEVICE = default_device()

# op name -> (ours, reference, gated, options to try)
OPS = {
    "gelu": (kw.gelu, reference.gelu, False, [{"approximate": "none"}, {"approximate": "tanh"}]),
    "silu": (kw.silu, reference.silu, False, [{}]),
    "swiglu": (kw.swiglu, reference.swiglu, True, [{}]),
    "geglu": (kw.geglu, reference.geglu, True, [{"approximate": "tanh"}, {"approximate": "none"}]),
}

# (id, shape, dtype, scale): batch 1, odd sizes, a size that divides no tile, 3-D, a row longer than one
# column block, saturated values.
SHAPES = [
    ("row1-fp32", (1, 127), torch.float32, 1.0),
    ("odd-fp16", (3, 7), torch.float16, 1.0),
    ("13x513-bf16", (13, 513), torch.bfloat16, 1.0),
    ("3d-fp32", (2, 3, 13), torch.float32, 1.0),
    ("wide-fp32", (2, 4100), torch.float32, 1.0),
    ("extreme-fp32", (4, 64), torch.float32, 30.0),
]


def _cases():
    for op, (_, _, gated, options) in OPS.items():
        forms = ("split", "packed") if gated else ("plain",)
        for opts in options:
            for form in forms:
                for sid, shape, dtype, scale in SHAPES:
                    name = "-".join([op, *opts.values(), form, sid])
                    yield pytest.param(op, opts, form, shape, dtype, scale, id=name)


def _inputs(form: str, shape, dtype, scale: float, pad: int = 0) -> dict[str, torch.Tensor]:
    """Random inputs: ``x`` (plain), ``gate`` + ``up`` (split) or a packed ``gate`` of width 2H."""
    def rand(shape, s=1.0):
        full = (*shape[:-1], shape[-1] + pad)
        t = (torch.randn(full, device=DEVICE) * s).to(dtype)
        return t[..., : shape[-1]]

    if form == "plain":
        return {"x": rand(shape, scale)}
    if form == "packed":
        return {"gate": rand((*shape[:-1], 2 * shape[-1]), scale)}
    return {"gate": rand(shape, scale), "up": rand(shape)}


def _assert_close(name: str, out: torch.Tensor, ref64: torch.Tensor, baseline: torch.Tensor) -> None:
    """The project's rule: ``max(|out − ref| − rtol·|ref|) <= factor · |baseline − ref|_max + atol``."""
    tol = default_tolerance(out.dtype)
    assert out.dtype == baseline.dtype and out.shape == ref64.shape, name
    assert torch.isfinite(out).all(), f"{name}: non-finite values (unwritten or overflowed)"
    err = ((out.double() - ref64).abs() - tol.rtol * ref64.abs()).max().item()
    base = (baseline.double() - ref64).abs().max().item()
    bound = tol.factor * base + tol.atol
    assert err <= bound, f"{name}: error {err:.3g} > {tol.factor}·{base:.3g} + {tol.atol}"


def _grads(fn, inputs: dict, opts: dict, grad_out: torch.Tensor | None = None):
    """Output and gradients of ``fn(**inputs, **opts)`` w.r.t. the tensor inputs, given ``grad_out``."""
    leaves = {k: v.detach().clone().requires_grad_() for k, v in inputs.items()}
    out = fn(**leaves, **opts)
    if grad_out is None:
        grad_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, list(leaves.values()), grad_out.to(out.dtype))
    return out, dict(zip(leaves, grads, strict=True)), grad_out


@pytest.mark.parametrize(("op", "opts", "form", "shape", "dtype", "scale"), list(_cases()))
def test_matches_reference_forward_and_backward(op, opts, form, shape, dtype, scale):
    ours_fn, ref_fn, _, _ = OPS[op]
    inputs = _inputs(form, shape, dtype, scale)
    with poison_outputs():  # every output/gradient element NaN-filled first: unwritten ones fail below
        out, grads, grad_out = _grads(ours_fn, inputs, opts)
    ref, ref_grads, _ = _grads(ref_fn, {k: v.double() for k, v in inputs.items()}, opts, grad_out.double())
    base, base_grads, _ = _grads(ref_fn, inputs, opts, grad_out)
    _assert_close("out", out, ref, base)
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        _assert_close(f"grad_{name}", grads[name], ref_grads[name], base_grads[name])


@pytest.mark.parametrize("op", ["swiglu", "geglu"])
def test_packed_equals_split(op):
    """The packed form computes exactly what the split form does on the two halves, gradients included."""
    fn = OPS[op][0]
    packed = torch.randn(5, 2 * 96, device=DEVICE, dtype=torch.bfloat16)
    out_p, grads_p, grad_out = _grads(fn, {"gate": packed}, {})
    g_p = grads_p["gate"]
    halves = {"gate": packed[:, :96], "up": packed[:, 96:]}
    out_s, g_s, _ = _grads(fn, halves, {}, grad_out)
    assert g_p.shape == packed.shape
    torch.testing.assert_close(out_p, out_s, rtol=0, atol=0)
    torch.testing.assert_close(g_p, torch.cat([g_s["gate"], g_s["up"]], dim=-1), rtol=0, atol=0)


@pytest.mark.parametrize("form", ["plain", "split", "packed"])
def test_strided_views(form):
    """Rows carved out of longer rows (row stride != row length) give the same values as contiguous ones."""
    fn = {"plain": kw.silu, "split": kw.swiglu, "packed": kw.swiglu}[form]
    strided = _inputs(form, (6, 40), torch.float32, 1.0, pad=24)
    assert not next(iter(strided.values())).is_contiguous()
    contiguous = {k: v.contiguous() for k, v in strided.items()}
    out, grads, grad_out = _grads(fn, strided, {})
    out_c, grads_c, _ = _grads(fn, contiguous, {}, grad_out)
    torch.testing.assert_close(out, out_c, rtol=0, atol=0)
    for name in grads:
        torch.testing.assert_close(grads[name], grads_c[name], rtol=0, atol=0)


def test_transposed_input_and_grad_out():
    """A last dimension with a non-unit stride (copied on purpose) and a broadcast grad_out (stride 0)."""
    x = torch.randn(9, 5, device=DEVICE).t()  # [5, 9], strides (1, 5)
    leaf = x.detach().clone().requires_grad_()
    kw.gelu(leaf).sum().backward()  # sum's backward hands an expanded, stride-0 gradient
    ref = x.double().requires_grad_()
    torch.nn.functional.gelu(ref).sum().backward()
    torch.testing.assert_close(kw.gelu(x), torch.nn.functional.gelu(x))
    torch.testing.assert_close(leaf.grad, ref.grad.float())


# ---------------------------------------------------------------------------------------------- bad input

def _x(shape=(4, 8), dtype=torch.float32):
    return torch.randn(shape, device=DEVICE).to(dtype)


@pytest.mark.parametrize(
    ("call", "exc", "names"),
    [
        pytest.param(lambda: kw.gelu(_x(), approximate="fast"), ValueError, ("approximate", "fast"),
                     id="gelu-approx"),
        pytest.param(lambda: kw.gelu(_x(), approximate=None), ValueError, ("approximate",),
                     id="gelu-approx-none"),
        pytest.param(lambda: kw.geglu(_x(), _x(), approximate="erf"), ValueError, ("approximate", "erf"),
                     id="geglu-approx"),
        pytest.param(lambda: kw.silu([1.0, 2.0]), TypeError, ("x", "list"), id="silu-not-tensor"),
        pytest.param(lambda: kw.gelu(torch.ones(4, dtype=torch.int32)), TypeError, ("x", "int32"),
                     id="gelu-int"),
        pytest.param(lambda: kw.silu(_x(dtype=torch.float64)), TypeError, ("x", "float64"), id="silu-fp64"),
        pytest.param(lambda: kw.silu(_x((0, 8))), ValueError, ("x", "non-empty"), id="silu-empty"),
        pytest.param(lambda: kw.gelu(torch.tensor(1.0, device=DEVICE)), ValueError, ("x", "dimension"), id="gelu-0d"),
        pytest.param(lambda: kw.swiglu(_x(), _x((4, 9))), ValueError, ("gate", "up", "shape"),
                     id="swiglu-shapes"),
        pytest.param(lambda: kw.swiglu(_x(), _x(dtype=torch.float16)), TypeError, ("gate", "up", "float16"),
                     id="swiglu-dtypes"),
        pytest.param(lambda: kw.geglu(_x(), "up"), TypeError, ("up", "str"), id="geglu-up-not-tensor"),
        pytest.param(lambda: kw.swiglu(_x((4, 9))), ValueError, ("gate", "2H"), id="swiglu-packed-odd"),
        pytest.param(lambda: kw.geglu(_x((0, 8))), ValueError, ("gate", "non-empty"), id="geglu-empty"),
        pytest.param(lambda: kw.swiglu(_x(), torch.randn(4, 8, device="meta")), ValueError, ("up", "meta"),
                     id="swiglu-up-device"),
    ],
)
def test_bad_input(call, exc, names):
    with pytest.raises(exc) as info:
        call()
    for name in names:
        assert name in str(info.value), f"{name!r} not in {info.value}"


# ------------------------------------------------------------------------------------- torch integration

@pytest.mark.parametrize(
    ("fn", "form"),
    [
        pytest.param(lambda x: kw.gelu(x, approximate="tanh"), "plain", id="gelu_tanh"),
        pytest.param(kw.swiglu, "split", id="swiglu-split"),
        pytest.param(lambda gate: kw.geglu(gate, approximate="none"), "packed", id="geglu-packed"),
    ],
)
def test_torch_compile_fullgraph(fn, form, compile_graphs):
    """Compiled (through the custom ops) and eager (through the autograd Function) agree bit for bit."""
    backend, graphs = compile_graphs
    compiled = torch.compile(fn, backend=backend, fullgraph=True)
    inputs = _inputs(form, (3, 33), torch.float32, 1.0)
    out, grads, grad_out = _grads(compiled, inputs, {})
    assert any("kernelworks.activation" in g for g in graphs), "the custom op is not in the traced graph"
    out_e, grads_e, _ = _grads(fn, inputs, {}, grad_out)
    assert "ActivationFunction" in type(out_e.grad_fn).__name__  # eager skips the dispatcher
    torch.testing.assert_close(out, out_e, rtol=0, atol=0)
    for name in grads:
        torch.testing.assert_close(grads[name], grads_e[name], rtol=0, atol=0)


@pytest.mark.parametrize(
    ("args", "act", "gated"),
    [
        pytest.param(("plain",), "gelu", False, id="gelu"),
        pytest.param(("split",), "silu", True, id="swiglu-split"),
        pytest.param(("packed",), "gelu_tanh", True, id="geglu-packed"),
    ],
)
def test_opcheck(args, act, gated):
    inputs = _inputs(args[0], (3, 10), torch.float32, 1.0)
    x = inputs.get("x", inputs.get("gate")).requires_grad_()
    up = inputs.get("up")
    if up is not None:
        up.requires_grad_()
    torch.library.opcheck(api._apply.custom_op, (x, up, act, gated))
    grad_out = torch.randn(3, 10, device=DEVICE)
    torch.library.opcheck(api._apply.backward_op, (grad_out, x.detach(), up if up is None else up.detach(),
                                                     act, gated))


# ------------------------------------------------------------------------------------------------- specs

def test_specs_cost_and_inputs():
    packed = SWIGLU_SPEC.find_cases(["llama3_8b_mlp_packed"], bench=True)[0]
    n = 16384 * 14336
    assert SWIGLU_SPEC.cost(packed, "fwd").bytes == 3 * n * 2  # gate + up read, y written, bf16
    assert SWIGLU_SPEC.cost(packed, "bwd").bytes == 5 * n * 2  # dy, gate, up read; dgate, dup written
    gelu = GELU_SPEC.find_cases(["8k"], bench=True)[0]
    assert GELU_SPEC.cost(gelu, "fwd").bytes == 2 * 8192 * 8192 * 2
    strided = SWIGLU_SPEC.find_cases(["strided_packed"], bench=False)[0]
    inputs = SWIGLU_SPEC.inputs(strided, DEVICE)
    assert set(inputs) == {"gate"} and inputs["gate"].shape == (7, 200) and not inputs["gate"].is_contiguous()
    extreme = GEGLU_SPEC.find_cases(["extreme_erf-fp32"], bench=False)[0]
    inputs = GEGLU_SPEC.inputs(extreme, DEVICE)
    assert inputs["approximate"] == "none" and inputs["gate"].abs().max() > 20


def test_liger_geglu_refuses_exact_gelu():
    """Liger's GEGLU is tanh-only: the provider must refuse approximate='none', not compute tanh instead."""
    x = _x()
    with pytest.raises(NotImplementedError, match="tanh"):
        _liger_geglu(x, x, approximate="none")


# --------------------------------------------------------------------------------------------------- GPU

@pytest.mark.gpu
def test_gpu_large_packed_swiglu_bf16():
    gate_up = torch.randn(4096, 2 * 14336, device="cuda", dtype=torch.bfloat16)
    out = kw.swiglu(gate_up)
    ref = reference.swiglu(gate_up.double())
    _assert_close("out", out, ref, reference.swiglu(gate_up))
    # The second call takes the cached launch path (runtime.launch.launch): same bits.
    torch.testing.assert_close(kw.swiglu(gate_up), out, rtol=0, atol=0)


@pytest.mark.gpu
def test_gpu_int64_offsets():
    """More than 2^31 elements: row · stride overflows int32, the kernels index in int64."""
    rows, n = 2**31 // 4096 + 64, 4096
    x = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16)
    y = kw.silu(x)
    tail = slice(rows - 128, rows)
    torch.testing.assert_close(y[tail], torch.nn.functional.silu(x[tail].float()).to(torch.bfloat16))
