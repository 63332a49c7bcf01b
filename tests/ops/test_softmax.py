"""softmax / log_softmax: agreement with float64 PyTorch, both kernel paths, extreme values, autograd,
bad input, torch.compile. CPU tests run under Triton's interpreter, where rows past 1024 columns take the
looped kernels (see ``kernelworks.ops.softmax._plan``), so small rows cover both paths."""

from __future__ import annotations

import pytest
import torch

from kernelworks.ops import softmax as sm
from kernelworks.ops.softmax import log_softmax, softmax
from kernelworks.runtime.device import default_device

DEVICE = default_device()
LOOPED_COLS = 2500  # past the one-pass limit under the interpreter: looped, with a masked tail tile

OPS = {
    "softmax": (softmax, torch.softmax),
    "log_softmax": (log_softmax, torch.log_softmax),
}
# bf16/fp16 outputs: the error of PyTorch doing the same math in that dtype, doubled, plus a floor
# (the project's rule); fp32 gets a fixed small floor
ATOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def _close(out: torch.Tensor, ref: torch.Tensor, baseline: torch.Tensor, dtype: torch.dtype) -> None:
    """``out`` within 2× the baseline's max error (plus a floor, relative to |ref|) of the float64 ``ref``;
    non-finite values must match exactly."""
    out, ref, baseline = out.double(), ref.double(), baseline.double()
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(out), finite), "non-finite values differ from the reference"
    assert torch.equal(out[~finite], ref[~finite])
    err = (out - ref)[finite].abs()
    base_err = (baseline - ref)[finite].abs().max()
    allowed = 2 * base_err + ATOL[dtype] * (1 + ref[finite].abs())
    assert bool((err <= allowed).all()), f"max err {err.max():.3g}, baseline {base_err:.3g}"


def _x(shape, dtype, *, scale=2.0, row_padding=0):
    full = (*shape[:-1], shape[-1] + row_padding)
    x = (torch.randn(full, device=DEVICE) * scale).to(dtype)
    return x[..., : shape[-1]] if row_padding else x


def _masked(shape, dtype):
    """±1e4 and -inf (masked logits) in every row, with a leading run of -inf longer than a looped tile."""
    x = _x(shape, dtype)
    x[..., 1::5] = float("-inf")
    x[..., 2::7] = 1e4
    x[..., 3::11] = -1e4
    x[..., : shape[-1] // 4] = float("-inf")
    x[..., -1] = 0.5
    return x


SHAPES = [
    pytest.param((1, 7), torch.float32, 0, id="1x7-fp32"),
    pytest.param((5, 1), torch.float32, 0, id="single-col-fp32"),
    pytest.param((3, 13), torch.float16, 0, id="3x13-fp16"),
    pytest.param((13, 127), torch.bfloat16, 0, id="13x127-bf16"),
    pytest.param((2, 3, 50), torch.float32, 0, id="batch-2x3x50-fp32"),
    pytest.param((4, 1000), torch.float32, 24, id="strided-4x1000-fp32"),
    pytest.param((2, LOOPED_COLS), torch.float32, 0, id="looped-fp32"),
    pytest.param((2, LOOPED_COLS), torch.bfloat16, 40, id="looped-strided-bf16"),
]


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize(("shape", "dtype", "pad"), SHAPES)
def test_forward_matches_float64(op, shape, dtype, pad):
    ours, ref_fn = OPS[op]
    x = _x(shape, dtype, row_padding=pad)
    y = ours(x)
    assert y.dtype == dtype and y.shape == x.shape and y.is_contiguous()
    _close(y, ref_fn(x.double(), -1), ref_fn(x, -1), dtype)


@pytest.mark.parametrize("cols", [300, LOOPED_COLS], ids=["one-pass", "looped"])
def test_rows_sum_to_one(cols):
    x = _x((6, cols), torch.float32, scale=5.0)
    torch.testing.assert_close(softmax(x).sum(-1), torch.ones(6, device=DEVICE), atol=1e-5, rtol=0)
    torch.testing.assert_close(log_softmax(x).exp().sum(-1), torch.ones(6, device=DEVICE), atol=1e-5, rtol=0)


@pytest.mark.interpreter
def test_looped_path_is_taken_and_matches_one_pass():
    """The looped kernel runs for LOOPED_COLS here and agrees with the one-pass kernel on the same rows."""
    assert sm._plan(2, LOOPED_COLS)[0], "LOOPED_COLS no longer takes the looped kernel; raise it"
    assert not sm._plan(2, 1000)[0]
    x = _x((3, LOOPED_COLS), torch.float32)
    # the same row padded to a one-pass width with -inf (which adds nothing) must give the same values
    head = softmax(x[:, :1000].contiguous())
    padded = torch.cat([x[:, :1000], torch.full((3, LOOPED_COLS - 1000), float("-inf"), device=DEVICE)], 1)
    torch.testing.assert_close(softmax(padded)[:, :1000], head, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("cols", [300, LOOPED_COLS], ids=["one-pass", "looped"])
def test_extreme_values_and_masks(op, dtype, cols):
    ours, ref_fn = OPS[op]
    x = _masked((4, cols), dtype)
    y = ours(x)
    assert not y.isnan().any(), "NaN in a row with finite entries"
    _close(y, ref_fn(x.double(), -1), ref_fn(x, -1), dtype)
    masked = torch.isneginf(x)
    if op == "softmax":
        assert bool((y[masked] == 0).all())
    else:
        assert bool(torch.isneginf(y[masked]).all())


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy reports the 0/0 it is asked for
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("cols", [300, LOOPED_COLS], ids=["one-pass", "looped"])
def test_all_masked_row_is_nan_like_torch(op, cols):
    ours, ref_fn = OPS[op]
    x = _x((3, cols), torch.float32)
    x[1] = float("-inf")
    y, ref = ours(x), ref_fn(x, -1)
    assert bool(y[1].isnan().all()) and bool(ref[1].isnan().all())
    torch.testing.assert_close(y[[0, 2]], ref[[0, 2]], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize(("shape", "dtype", "pad"), [
    pytest.param((13, 127), torch.float32, 0, id="one-pass-fp32"),
    pytest.param((2, 3, 50), torch.bfloat16, 0, id="one-pass-batch-bf16"),
    pytest.param((4, 1000), torch.float16, 24, id="one-pass-strided-fp16"),
    pytest.param((2, LOOPED_COLS), torch.float32, 0, id="looped-fp32"),
    pytest.param((2, LOOPED_COLS), torch.bfloat16, 40, id="looped-strided-bf16"),
])
def test_backward_matches_float64(op, shape, dtype, pad):
    ours, ref_fn = OPS[op]
    x = _x(shape, dtype, row_padding=pad).requires_grad_(True)
    dy = torch.randn(shape, device=DEVICE).to(dtype)
    (dx,) = torch.autograd.grad(ours(x), x, dy)
    x64 = x.detach().double().requires_grad_(True)
    (ref,) = torch.autograd.grad(ref_fn(x64, -1), x64, dy.double())
    xb = x.detach().requires_grad_(True)
    (base,) = torch.autograd.grad(ref_fn(xb, -1), xb, dy)
    assert dx.dtype == dtype and dx.shape == x.shape
    _close(dx, ref, base, dtype)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("cols", [300, LOOPED_COLS], ids=["one-pass", "looped"])
def test_backward_with_masks_and_strided_grad(op, cols):
    """-inf entries in x, and an incoming gradient that is a non-contiguous view."""
    ours, ref_fn = OPS[op]
    x = _masked((3, cols), torch.float32).requires_grad_(True)
    dy = torch.randn(cols, 3, device=DEVICE).t()  # transposed: unit stride along rows, not columns
    (dx,) = torch.autograd.grad(ours(x), x, dy)
    x64 = x.detach().double().requires_grad_(True)
    (ref,) = torch.autograd.grad(ref_fn(x64, -1), x64, dy.double())
    assert not dx.isnan().any()
    torch.testing.assert_close(dx.double(), ref, atol=1e-5, rtol=1e-5)


def test_backward_saves_output_not_input():
    """Both backwards read y only: changing x after the forward must not change the gradient."""
    for ours, ref_fn in OPS.values():
        x = _x((4, 37), torch.float32).requires_grad_(True)
        y = ours(x)
        expected = torch.autograd.grad(ref_fn(x, -1), x, torch.ones_like(y) * 0.5)[0]
        with torch.no_grad():
            x.add_(100.0)  # bumps x's version: autograd would refuse if x had been saved
        (dx,) = torch.autograd.grad(y, x, torch.ones_like(y) * 0.5)
        torch.testing.assert_close(dx, expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("fn", [softmax, log_softmax], ids=["softmax", "log_softmax"])
def test_bad_input(fn):
    with pytest.raises(TypeError, match="x"):
        fn([1.0, 2.0])
    with pytest.raises(TypeError, match="x"):
        fn(torch.ones(3, 4, dtype=torch.int32, device=DEVICE))
    with pytest.raises(TypeError, match="x"):
        fn(torch.ones(3, 4, dtype=torch.float64, device=DEVICE))
    with pytest.raises(ValueError, match="x"):
        fn(torch.ones(0, 4, device=DEVICE))
    with pytest.raises(ValueError, match="x"):
        fn(torch.tensor(1.0, device=DEVICE))  # 0-d
    with pytest.raises(ValueError, match=r"dim.*last dimension"):
        fn(torch.ones(3, 4, device=DEVICE), dim=0)
    with pytest.raises(ValueError, match="dim"):
        fn(torch.ones(3, 4, device=DEVICE), dim=5)
    with pytest.raises(TypeError, match="dim"):
        fn(torch.ones(3, 4, device=DEVICE), dim=1.0)
    fn(torch.ones(3, 4, device=DEVICE), dim=1)  # dim = x.dim() - 1 is the last dimension too


def test_torch_compile_fullgraph():
    x = _x((3, 5, 40), torch.float32).requires_grad_(True)
    dy = torch.randn_like(x)

    def f(x):
        return softmax(x) * 2 + log_softmax(x)

    torch._dynamo.reset()
    y = torch.compile(f, backend="aot_eager", fullgraph=True)(x)
    (dx,) = torch.autograd.grad(y, x, dy)
    x64 = x.detach().double().requires_grad_(True)
    y64 = torch.softmax(x64, -1) * 2 + torch.log_softmax(x64, -1)
    (ref,) = torch.autograd.grad(y64, x64, dy.double())
    torch.testing.assert_close(y.double(), y64, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dx.double(), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("op", [sm._softmax_op.custom_op, sm._log_softmax_op.custom_op], ids=["softmax", "log_softmax"])
def test_opcheck(op):
    x = _x((3, 33), torch.float32).requires_grad_(True)
    torch.library.opcheck(op, (x,), test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))


def test_specs_registered_and_consistent():
    from kernelworks.spec import registry

    specs = registry()
    for name in ("softmax", "log_softmax"):
        spec = specs[name]
        assert spec.grad_inputs == ("x",)
        ids = [c.id for c in spec.check_cases]
        assert len(ids) == len(set(ids)), "duplicate check case ids"
        c = spec.find_cases(["1x7-fp32"], bench=False)[0]
        x = spec.inputs(c, DEVICE)["x"]
        torch.testing.assert_close(spec.providers["kernelworks"].fn(x=x), spec.reference(x))
        sweep = [c for c in spec.bench_cases if c["cols"] in (256, 262144)]
        assert all(c["rows"] * c["cols"] == 1 << 26 for c in sweep)
        assert spec.cost(c, "bwd").bytes == 1.5 * spec.cost(c, "fwd").bytes
    assert "liger" in specs["softmax"].providers


@pytest.mark.gpu
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("cols", [16384, 32768, 32769, 65536, 262144])
def test_gpu_long_rows(op, cols):
    """The real one-pass limit and the looped kernels, bf16."""
    ours, ref_fn = OPS[op]
    x = _masked((3, cols), torch.bfloat16).requires_grad_(True)
    y = ours(x)
    _close(y, ref_fn(x.detach().double(), -1), ref_fn(x.detach(), -1), torch.bfloat16)
    dy = torch.randn_like(y)
    (dx,) = torch.autograd.grad(y, x, dy)
    x64 = x.detach().double().requires_grad_(True)
    (ref,) = torch.autograd.grad(ref_fn(x64, -1), x64, dy.double())
    xb = x.detach().requires_grad_(True)
    (base,) = torch.autograd.grad(ref_fn(xb, -1), xb, dy)
    _close(dx, ref, base, torch.bfloat16)


@pytest.mark.gpu
def test_gpu_cached_launch_respects_specialisation():
    """``runtime.launch.launch`` reuses compiled kernels per Triton specialisation: pointers at odd offsets,
    widths and strides that are (not) multiples of 16, repeated, must all stay right."""
    base = torch.randn(64 * 4096 + 8, device=DEVICE, dtype=torch.bfloat16)
    for _ in range(2):
        for off in (0, 1, 3, 8):
            for cols, stride in ((4096, 4096), (4095, 4096), (4096, 4100), (33, 40), (1, 1), (40000, 40001)):
                rows = min(64, (base.numel() - off) // stride)
                x = base[off : off + rows * stride].view(rows, stride)[:, :cols]
                for ours, ref_fn in OPS.values():
                    torch.testing.assert_close(ours(x).float(), ref_fn(x.float(), -1), atol=2e-2, rtol=2e-2)
