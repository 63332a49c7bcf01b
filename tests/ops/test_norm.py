"""layer_norm / rms_norm: agreement with float64 PyTorch forward and backward (x, weight, bias, residual),
both kernel shapes, the fused residual add, Gemma's offset, mixed-precision parameters, variance-0 rows,
bad input, torch.compile and opcheck. CPU tests run under Triton's interpreter, where rows past 512 columns
take the looped forward and the split backward (``forward._plan`` / ``backward._plan``), so hidden 1000
covers both paths."""

from __future__ import annotations

import pytest
import torch

from kernelworks.check.compare import compare
from kernelworks.ops.norm import api, backward, forward, reference
from kernelworks.ops.norm.api import layer_norm, rms_norm
from kernelworks.runtime.device import default_device
from kernelworks.spec import default_tolerance

DEVICE = default_device()
LOOPED = 1000  # past the interpreter's one-pass limits: looped forward, split backward (masked tails)
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
OPS = {"rms": (rms_norm, reference.rms_norm), "ln": (layer_norm, reference.layer_norm)}


def _rand(shape, dtype, *, scale=1.0, pad=0, mean=0.0):
    full = (*shape[:-1], shape[-1] + pad)
    t = (torch.randn(full, device=DEVICE) * scale + mean).to(dtype)
    return t[..., : shape[-1]] if pad else t


def _inputs(op, shape, dtype, *, residual=False, pad=0, wdtype=None, bias=True, offset=0.0, scale=1.0):
    """kwargs for ``op``: x, weight (+ bias for LayerNorm, + offset for RMSNorm), optional residual."""
    n = shape[-1]
    kw = {"x": _rand(shape, dtype, scale=scale, pad=pad),
          "weight": _rand((n,), wdtype or dtype, scale=0.5, mean=0.0 if offset else 1.0)}
    if op == "ln":
        kw["bias"] = _rand((n,), wdtype or dtype, scale=0.5) if bias else None
    elif offset:
        kw["offset"] = offset
    if residual:
        kw["residual"] = _rand(shape, dtype, pad=pad)
    return kw


def _grad_names(kw):
    return [k for k in ("x", "weight", "bias", "residual") if isinstance(kw.get(k), torch.Tensor)]


def _run(fn, kw, grad_outs=None, dtype=None):
    """Outputs (tuple) and the gradients of ``_grad_names(kw)`` for upstream ``grad_outs`` (random when
    None); ``dtype`` casts every float tensor first (the float64 reference)."""
    names = _grad_names(kw)
    leaves = dict(kw)
    for k in names:
        t = kw[k].detach()
        leaves[k] = (t.to(dtype) if dtype else t).requires_grad_(True)
    outs = fn(**leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    if grad_outs is None:
        grad_outs = [torch.randn(o.shape, device=DEVICE, dtype=torch.float64) for o in outs]
    grads = torch.autograd.grad(outs, [leaves[k] for k in names], [g.to(o.dtype) for g, o in zip(grad_outs, outs)])
    return outs, dict(zip(names, grads)), grad_outs


def _assert_matches(op, kw, dtype):
    """Ours against the float64 reference, within the project's rule (2× PyTorch's error in ``dtype`` +
    the dtype's floor), for every output and every gradient; dtypes as torch's."""
    ours, ref_fn = OPS[op]
    out, grads, gos = _run(ours, kw)
    ref, ref_grads, _ = _run(ref_fn, kw, gos, dtype=torch.float64)
    base, base_grads, _ = _run(ref_fn, kw, gos)
    tol = default_tolerance(dtype)
    results = [compare(f"out[{i}]", o, r, b, tol, expected_dtype=b.dtype)
               for i, (o, r, b) in enumerate(zip(out, ref, base))]
    results += [compare(f"grad {k}", grads[k], ref_grads[k], base_grads[k], tol, expected_dtype=base_grads[k].dtype)
                for k in grads]
    bad = [r for r in results if not r.passed]
    assert not bad, "; ".join(f"{r.output}: max abs {r.max_abs:.3g} > allowed {r.allowed:.3g} {r.problem}"
                              for r in bad)
    return out, grads


CASES = [
    # (id, shape, dtype, options)
    ("1x127-fp32", (1, 127), F32, {}),
    ("vector-fp32", (64,), F32, {"residual": True}),  # 1-D: one row
    ("3x7-fp16", (3, 7), F16, {}),
    ("13x127-bf16", (13, 127), BF16, {}),
    ("2x3x64-fp32", (2, 3, 64), F32, {}),
    ("37x16-bf16-short-rows", (37, 16), BF16, {}),
    ("9x100-strided-fp16", (9, 100), F16, {"pad": 28}),
    ("looped-fp32", (3, LOOPED), F32, {}),
    ("looped-strided-bf16", (3, LOOPED), BF16, {"pad": 40}),
    ("res-13x127-bf16", (13, 127), BF16, {"residual": True}),
    ("res-strided-fp32", (7, 100), F32, {"residual": True, "pad": 28}),
    ("res-looped-fp16", (3, LOOPED), F16, {"residual": True}),
    ("w32-bf16", (8, 256), BF16, {"wdtype": F32}),
    ("w32-res-looped-bf16", (2, LOOPED), BF16, {"wdtype": F32, "residual": True}),
    ("scale1e3-fp16", (6, 300), F16, {"scale": 1e3}),
]


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize(("shape", "dtype", "opts"), [pytest.param(s, d, o, id=i) for i, s, d, o in CASES])
def test_matches_float64_forward_and_backward(op, shape, dtype, opts):
    torch.manual_seed(0)
    out, grads = _assert_matches(op, _inputs(op, shape, dtype, **opts), dtype)
    assert all(o.dtype == dtype and o.shape == shape and o.is_contiguous() for o in out)
    assert len(out) == (2 if opts.get("residual") else 1)
    assert grads["weight"].dtype == opts.get("wdtype", dtype)  # the parameter's own dtype


@pytest.mark.parametrize(("shape", "dtype", "opts"), [
    pytest.param((6, 64), BF16, {}, id="gemma-bf16"),
    pytest.param((4, LOOPED), F32, {"residual": True}, id="gemma-res-looped-fp32"),
])
def test_rms_norm_gemma_offset(shape, dtype, opts):
    torch.manual_seed(1)
    _assert_matches("rms", _inputs("rms", shape, dtype, offset=1.0, **opts), dtype)


@pytest.mark.parametrize(("op", "drop"), [("rms", ("weight",)), ("ln", ("weight",)), ("ln", ("bias",)),
                                          ("ln", ("weight", "bias"))],
                         ids=["rms-noweight", "ln-noweight", "ln-nobias", "ln-noaffine"])
@pytest.mark.parametrize("cols", [64, LOOPED], ids=["one-pass", "looped"])
def test_optional_parameters(op, drop, cols):
    torch.manual_seed(2)
    kw = _inputs(op, (5, cols), F32)
    for k in drop:
        kw[k] = None
    _assert_matches(op, kw, F32)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("cols", [300, LOOPED], ids=["one-pass", "looped"])
def test_variance_zero_rows(op, cols):
    """RMSNorm of a zero row and LayerNorm of a constant row: rstd = 1/√eps, y exactly 0 (+ bias), and
    finite gradients that match float64 (the constant 0.75 sums exactly, so the mean is exact)."""
    torch.manual_seed(3)
    kw = _inputs(op, (4, cols), F32)
    value = 0.0 if op == "rms" else 0.75
    kw["x"][1] = value
    out, _ = _assert_matches(op, kw, F32)
    expected = torch.zeros(cols, device=DEVICE) if op == "rms" else kw["bias"]
    assert torch.equal(out[0][1], expected)
    _, _, stats = forward.norm_fwd(kw["x"], None, kw["weight"], kw.get("bias"), eps=1e-5, offset=0.0, rms=op == "rms")
    torch.testing.assert_close(stats[-1][1], torch.tensor(1e-5 ** -0.5, device=DEVICE), rtol=1e-6, atol=0)


@pytest.mark.parametrize("cols", [300, LOOPED], ids=["one-pass", "looped"])
def test_layer_norm_large_mean(cols):
    """Mean 1000 over a spread of 1 (fp32): E[h²] − E[h]² would cancel to noise; the exact two-step
    variance (one pass) and per-lane Welford (looped) must hold the float64 answer to ~1e-4."""
    torch.manual_seed(4)
    x = _rand((3, cols), F32, mean=1000.0)
    y = layer_norm(x)
    ref = reference.layer_norm(x.double())
    assert (y.double() - ref).abs().max() < 2e-4


def _assert_rows_close(got, want, rtol):
    """Row by row, relative to the row's largest reference value (rows 1e20 apart in scale share a tensor)."""
    got, want = got.double().reshape(-1, got.shape[-1]), want.double().reshape(-1, want.shape[-1])
    scale = want.abs().amax(dim=-1, keepdim=True).clamp(min=1e-30)
    err = ((got - want).abs() / scale).amax(dim=-1)
    assert torch.isfinite(got).all() and (err <= rtol).all(), f"row errors relative to the row's max: {err}"


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("cols", [300, LOOPED], ids=["one-pass", "looped"])
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "res"])
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # numpy, in the interpreter's first pass
def test_huge_inputs_do_not_overflow_the_statistics(op, cols, residual):
    """|h| near 1e20 in fp32: h² overflows, and torch's fp32 norms return the bias (LayerNorm) or 0
    (RMSNorm) there. Ours match float64, forward and backward; the rows of ordinary size sharing the
    program keep the bits they have without them."""
    torch.manual_seed(12)
    ours, ref_fn = OPS[op]
    kw = _inputs(op, (4, cols), F32, residual=residual)
    for k in ("x", "residual") if residual else ("x",):
        kw[k][1:3] *= 1e20  # rows 1 and 2 huge, 0 and 3 ordinary
    out, grads, gos = _run(ours, kw)
    ref, ref_grads, _ = _run(ref_fn, kw, gos, dtype=torch.float64)
    for o, r in zip(out, ref):
        _assert_rows_close(o, r, 1e-5)
    for k in grads:
        if k in ("x", "residual"):
            _assert_rows_close(grads[k], ref_grads[k], 1e-4)
        else:
            torch.testing.assert_close(grads[k].double(), ref_grads[k], rtol=1e-4, atol=1e-4)
    # the ordinary rows keep the bits of the same launch without the huge rows (same shape: same plan,
    # same reduction order; a 2-row call may plan other warps and sum in another order on a GPU)
    tame = {**kw, **{k: kw[k].clone() for k in ("x", "residual") if k in kw}}
    for k in ("x", "residual") if residual else ("x",):
        tame[k][1:3] /= 1e20
    y_tame = ours(**tame)
    y_tame = y_tame[0] if residual else y_tame
    assert torch.equal(out[0][[0, 3]], y_tame[[0, 3]])


# Triton's interpreter converts fp32 to bf16 by truncation (the GPU rounds to nearest even), so the bitwise
# comparison with torch's x + residual runs in fp16 on the CPU and also in bf16 on a GPU.
_FUSED_DTYPES = [pytest.param(F16, id="fp16"), pytest.param(BF16, id="bf16", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("cols", [127, LOOPED], ids=["one-pass", "looped"])
@pytest.mark.parametrize("dtype", _FUSED_DTYPES)
def test_fused_residual_equals_add_then_norm(op, cols, dtype):
    """The fused op returns h = x + residual bit for bit, and y equals the unfused op on that h bit for
    bit (the norm reads the rounded sum); gradients equal those of add-then-norm."""
    torch.manual_seed(5)
    ours, _ = OPS[op]
    kw = _inputs(op, (5, cols), dtype, residual=True)
    y, h = ours(**kw)
    x, r = kw.pop("x"), kw.pop("residual")
    assert torch.equal(h, x + r)
    assert torch.equal(y, ours(x + r, **kw))

    def fused(x, residual, **params):
        return ours(x, residual=residual, **params)

    def unfused(x, residual, **params):
        s = x + residual
        return ours(s, **params), s

    params = dict(kw)
    _, ga, gos = _run(fused, {"x": x, "residual": r, **params})
    _, gb, _ = _run(unfused, {"x": x, "residual": r, **params}, gos)
    # not bitwise: unfused, autograd rounds the norm's gradient to the dtype before adding the stream's;
    # fused, dx = (norm's gradient + stream's) is rounded once. One or two ulps apart.
    for k in ga:
        ulp = torch.finfo(dtype).eps * gb[k].abs().max()
        torch.testing.assert_close(ga[k], gb[k], rtol=0, atol=2 * float(ulp))


@pytest.mark.parametrize("use", ["y-only", "h-only"])
def test_residual_with_one_output_unused(use):
    """Only y feeds the loss (the returned stream's gradient is None), or only h does (dy is None)."""
    torch.manual_seed(6)
    kw = _inputs("rms", (4, 64), F32, residual=True)
    leaves = {k: (v.detach().requires_grad_(True) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    ref_leaves = {k: (v.detach().double().requires_grad_(True) if isinstance(v, torch.Tensor) else v)
                  for k, v in kw.items()}
    pick = 0 if use == "y-only" else 1
    g = torch.randn(4, 64, dtype=torch.float64, device=DEVICE)
    (rms_norm(**leaves)[pick] * g.float()).sum().backward()
    (reference.rms_norm(**ref_leaves)[pick] * g).sum().backward()
    for k in ("x", "residual", "weight"):
        got = leaves[k].grad
        want = ref_leaves[k].grad
        if want is None or (use == "h-only" and k == "weight"):
            assert got is None or not got.any()
            continue
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_shared_gradient_accumulates_correctly():
    """x and residual receive one dx tensor; accumulating into both .grad twice must not alias them."""
    torch.manual_seed(7)
    kw = _inputs("ln", (3, 40), F32, residual=True)
    x = kw.pop("x").requires_grad_(True)
    r = kw.pop("residual").requires_grad_(True)
    y, h = layer_norm(x, **kw, residual=r)
    loss = (y * torch.randn_like(y)).sum() + (h * torch.randn_like(h)).sum()
    loss.backward(retain_graph=True)
    first = x.grad.clone()
    torch.testing.assert_close(r.grad, first)
    loss.backward()
    torch.testing.assert_close(x.grad, 2 * first)
    torch.testing.assert_close(r.grad, 2 * first)
    assert x.grad.data_ptr() != r.grad.data_ptr()


def test_frozen_parameters_skip_their_gradients():
    """Parameters that do not require grad (frozen, LoRA-style) get no gradient and no partial sums;
    dx is unchanged."""
    torch.manual_seed(8)
    kw = _inputs("ln", (6, 64), F32)
    x = kw["x"].requires_grad_(True)
    dy = torch.randn(6, 64, device=DEVICE)
    (dx,) = torch.autograd.grad(layer_norm(x, kw["weight"], kw["bias"]), x, dy)
    x64 = x.detach().double().requires_grad_(True)
    (ref,) = torch.autograd.grad(reference.layer_norm(x64, kw["weight"].double(), kw["bias"].double()), x64,
                                 dy.double())
    torch.testing.assert_close(dx.double(), ref, rtol=1e-5, atol=1e-5)
    _, _, stats = forward.norm_fwd(x.detach(), None, kw["weight"], kw["bias"], eps=1e-5, offset=0.0, rms=False)
    dx2, dw, db = backward.norm_bwd(dy, None, x.detach(), kw["weight"], stats, offset=0.0, rms=False,
                                    dw_dtype=None, db_dtype=None)
    assert dw is None and db is None and torch.equal(dx2, dx)


@pytest.mark.interpreter
def test_plans_cover_both_paths_and_several_blocks_per_program():
    assert not forward._plan(5, 300)[0] and forward._plan(5, LOOPED)[0]
    split, grid, opts = backward._plan(5, LOOPED, 0)
    assert split and grid[1] > 1  # column chunks
    split, grid, opts = backward._plan(37, 16, 0)
    assert not split and grid[1] == 1 and grid[0] * opts["ROWS"] < 37  # programs walk several row blocks


# ------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("op", list(OPS))
def test_bad_input(op):
    fn, _ = OPS[op]
    x = torch.randn(3, 8, device=DEVICE)
    w = torch.randn(8, device=DEVICE)
    with pytest.raises(TypeError, match="x"):
        fn([1.0, 2.0], w)
    with pytest.raises(TypeError, match="x"):
        fn(x.to(torch.int32), w)
    with pytest.raises(TypeError, match="x"):
        fn(x.double(), w)
    with pytest.raises(ValueError, match="x"):
        fn(torch.ones(0, 8, device=DEVICE), w)
    with pytest.raises(ValueError, match="x"):
        fn(torch.tensor(1.0, device=DEVICE), w)
    with pytest.raises(ValueError, match=r"weight.*\(8,\)"):
        fn(x, torch.randn(7, device=DEVICE))
    with pytest.raises(ValueError, match="weight"):
        fn(x, torch.randn(1, 8, device=DEVICE))
    with pytest.raises(TypeError, match="weight"):
        fn(x, torch.ones(8, dtype=torch.int64, device=DEVICE))
    with pytest.raises(ValueError, match="weight"):
        fn(x, torch.randn(8, device="meta"))  # another device
    with pytest.raises(ValueError, match="residual"):
        fn(x, w, residual=torch.randn(3, 9, device=DEVICE))
    with pytest.raises(TypeError, match="residual"):
        fn(x, w, residual=x.half())
    with pytest.raises(TypeError, match="residual"):
        fn(x, w, residual=[1.0])
    with pytest.raises(ValueError, match="eps"):
        fn(x, w, eps=-1e-5)
    with pytest.raises(TypeError, match="eps"):
        fn(x, w, eps="1e-5")
    with pytest.raises(TypeError, match="eps"):
        fn(x, w, eps=True)
    fn(x, w.to(torch.bfloat16), eps=0)  # parameters may differ from x's dtype; eps 0 is allowed


def test_bad_input_specific():
    x = torch.randn(3, 8, device=DEVICE)
    w = torch.randn(8, device=DEVICE)
    with pytest.raises(ValueError, match="offset"):
        rms_norm(x, None, offset=1.0)
    with pytest.raises(ValueError, match="offset"):
        rms_norm(x, w, offset=float("nan"))
    with pytest.raises(ValueError, match=r"bias.*\(8,\)"):
        layer_norm(x, w, torch.randn(4, device=DEVICE))
    with pytest.raises(TypeError, match="bias"):
        layer_norm(x, w, torch.ones(8, dtype=torch.int32, device=DEVICE))


# --------------------------------------------------------------------------------- torch integration


def test_torch_compile_fullgraph():
    torch.manual_seed(9)
    x = torch.randn(3, 5, 40, device=DEVICE, requires_grad=True)
    r = torch.randn(3, 5, 40, device=DEVICE, requires_grad=True)
    w = torch.randn(40, device=DEVICE, requires_grad=True)
    b = torch.randn(40, device=DEVICE, requires_grad=True)

    def f(x, r, w, b, eps):
        y, h = rms_norm(x, w, eps, residual=r, offset=1.0)
        return (y * 2 + layer_norm(h, w, b)).sum() + h.sum()

    def f_ref(x, r, w, b, eps):
        y, h = reference.rms_norm(x, w, eps, residual=r, offset=1.0)
        return (y * 2 + reference.layer_norm(h, w, b)).sum() + h.sum()

    torch._dynamo.reset()
    out = torch.compile(f, backend="aot_eager", fullgraph=True)(x, r, w, b, 1e-6)
    grads = torch.autograd.grad(out, (x, r, w, b))
    leaves = [t.detach().double().requires_grad_(True) for t in (x, r, w, b)]
    ref = f_ref(*leaves, 1e-6)
    ref_grads = torch.autograd.grad(ref, leaves)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-4)
    for g, rg in zip(grads, ref_grads):
        torch.testing.assert_close(g.double(), rg, rtol=1e-5, atol=1e-4)


def test_opcheck():
    x = torch.randn(3, 33, device=DEVICE, requires_grad=True)
    r = torch.randn(3, 33, device=DEVICE, requires_grad=True)
    w = torch.randn(33, device=DEVICE, requires_grad=True)
    b = torch.randn(33, device=DEVICE, requires_grad=True)
    utils = ("test_schema", "test_faketensor", "test_autograd_registration")
    torch.library.opcheck(api._norm.custom_op, (x, w, b, 1e-5, 0.0, False), test_utils=utils)
    torch.library.opcheck(api._add_norm.custom_op, (x, r, w, None, 1e-6, 1.0, True), test_utils=utils)
    y, h, stats = api._add_norm.custom_op(x, r, w, b, 1e-5, 0.0, False)
    dy = torch.randn_like(y)
    for op in (api._norm.backward_op, api._add_norm.backward_op):
        torch.library.opcheck(op, (dy, dy, h.detach(), w.detach(), b.detach(), stats, 0.0, False, True, True),
                              test_utils=("test_schema", "test_faketensor"))


def test_specs_registered_and_consistent():
    from kernelworks.spec import registry

    specs = registry()
    for name, ours in (("rms_norm", rms_norm), ("layer_norm", layer_norm)):
        spec = specs[name]
        ids = [c.id for c in spec.check_cases]
        assert len(ids) == len(set(ids)), "duplicate check case ids"
        assert "liger" in spec.providers and spec.providers["liger"].gpu_only
        assert {"x", "weight", "residual"} <= set(spec.grad_inputs)
        c = spec.find_cases(["7x100-res-strided-fp16"], bench=False)[0]
        inputs = spec.inputs(c, DEVICE)
        y, h = spec.providers["kernelworks"].fn(**inputs)
        ry, rh = spec.reference(**inputs)
        assert torch.equal(h, rh)
        torch.testing.assert_close(y.float(), ry.float(), atol=4e-3, rtol=2e-3)
        for bc in spec.bench_cases:
            assert bc.dtype == torch.bfloat16 and "gpu" in bc.tags
            fwd, bwd = spec.cost(bc, "fwd"), spec.cost(bc, "bwd")
            n = bc["rows"] * bc["hidden"] * 2
            assert fwd.bytes >= (4 if bc["residual"] else 2) * n and bwd.bytes > fwd.bytes * 0.99
        assert ours is spec.providers["kernelworks"].fn


# ------------------------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("cols", [4096, 5120, 8192, 14336, 16384, 16385, 32768, 32769, 65536])
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "res"])
def test_gpu_hidden_sizes(op, cols, residual):
    """The real one-pass limits (forward 32768, backward 16384) and the looped/split paths, bf16."""
    torch.manual_seed(10)
    _assert_matches(op, _inputs(op, (5, cols), BF16, residual=residual, wdtype=F32), BF16)


@pytest.mark.gpu
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("cols", [4096, 65536])
def test_gpu_backward_is_bitwise_deterministic(op, cols):
    torch.manual_seed(11)
    kw = _inputs(op, (16384 if cols == 4096 else 512, cols), BF16, residual=True)
    _, first, gos = _run(OPS[op][0], kw)
    for _ in range(3):
        _, again, _ = _run(OPS[op][0], kw, gos)
        for k in first:
            assert torch.equal(first[k], again[k]), f"grad {k} differs between runs"


@pytest.mark.gpu
def test_gpu_many_rows_and_int64_offsets():
    """Row offsets past 2^31 elements (rows · stride): 40000 rows of 65536 bf16 (5.2 GB)."""
    x = torch.randn(40000, 65536, device=DEVICE, dtype=BF16)
    w = torch.randn(65536, device=DEVICE, dtype=BF16)
    y = rms_norm(x, w)
    torch.testing.assert_close(y[-3:].float(), reference.rms_norm(x[-3:], w).float(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("rms", [True, False], ids=["rms_norm", "layer_norm"])
def test_strided_weight_and_bias_are_honoured(rms):
    """A strided parameter view (w[::2]) must not be read as if contiguous (a silent wrong answer)."""
    torch.manual_seed(3)
    x = torch.randn(4, 64, device=DEVICE, requires_grad=True)
    w_base = torch.randn(128, device=DEVICE)
    b_base = torch.randn(128, device=DEVICE)
    w = w_base[::2].requires_grad_()
    b = b_base[::2].requires_grad_()
    if rms:
        y = rms_norm(x, w, eps=1e-6)
        ref = torch.nn.functional.rms_norm(x.double(), (64,), w.double(), eps=1e-6)
    else:
        y = layer_norm(x, w, b, eps=1e-5)
        ref = torch.nn.functional.layer_norm(x.double(), (64,), w.double(), b.double(), eps=1e-5)
    torch.testing.assert_close(y.double(), ref, atol=1e-5, rtol=1e-5)
    dy = torch.randn_like(y)
    grads = torch.autograd.grad(y, [w] if rms else [w, b], dy)
    refs = torch.autograd.grad(ref, [w] if rms else [w, b], dy.double())
    for g, r in zip(grads, refs):
        torch.testing.assert_close(g.double(), r.double(), atol=1e-4, rtol=1e-4)


def test_module_parameters_take_the_eager_autograd_function():
    """nn.Parameter inputs must not divert eager calls to the custom op (its dispatch costs ~100 µs)."""
    from kernelworks.nn import RMSNorm

    norm = RMSNorm(32).to(DEVICE)
    y = norm(torch.randn(3, 32, device=DEVICE, requires_grad=True))
    assert type(y.grad_fn).__name__ == "NormFunctionBackward"
