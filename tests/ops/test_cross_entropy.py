"""cross_entropy / fused_linear_cross_entropy: agreement with float64 PyTorch (and the reference with
torch.nn.functional.cross_entropy), every option, extreme logits, all-ignored batches, the stored-gradient
backward (grad_output 1 skipped, retain_graph), inplace_backward, bad input, torch.compile and opcheck.

CPU tests run under Triton's interpreter, where rows past 8 columns take the looped kernel with 32-column
tiles (256 past 256 columns; see ``kernels.plan``), so vocabularies of 7, 33 and 300 cover the one-tile
path, the loop, and its masked tails."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from torch.nn import functional

import kernelworks
from kernelworks.check.compare import compare
from kernelworks.ops import _math
from kernelworks.ops.cross_entropy import cross_entropy, fused_linear_cross_entropy, kernels, reference
from kernelworks.ops.cross_entropy import fused_linear as flce_mod
from kernelworks.runtime.device import default_device, planning_for_gpu
from kernelworks.spec import default_tolerance

DEVICE = default_device()
IGNORE = -100


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)  # every test reproducible


def _close(out: torch.Tensor, ref: torch.Tensor, baseline: torch.Tensor | None, dtype: torch.dtype) -> None:
    """The project's one rule (kernelworks.check.compare): error ≤ 2 × PyTorch's own error in ``dtype``
    (``baseline``) + the dtype's floor from ``default_tolerance``."""
    c = compare("out", out, ref, baseline, default_tolerance(dtype))
    assert c.passed, c.problem


def _logits(n, v, dtype, *, scale=2.0, pad=0, batch=()):
    full = (*batch, n, v + pad)
    x = (torch.randn(full, device=DEVICE) * scale).to(dtype)
    return x[..., :v] if pad else x


def _target(n, v, *, ignore_every=4, batch=()):
    t = torch.randint(0, v, (*batch, n), device=DEVICE)
    if ignore_every:
        t[..., 1::ignore_every] = IGNORE
    return t


def _ce_grad(fn, x, t, g=None, **options):
    """(loss, dlogits) of ``fn`` for upstream gradient ``g`` (random when None)."""
    leaf = x.detach().clone().requires_grad_(True)
    loss = fn(leaf, t, **options)
    if g is None:
        g = torch.randn(loss.shape, device=DEVICE, dtype=torch.float64)
    (grad,) = torch.autograd.grad(loss, leaf, g.to(loss.dtype))
    return loss, grad, g


# ------------------------------------------------------------------------------------------ the reference


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_reference_is_torch_cross_entropy(reduction, smoothing):
    """The spec's reference is torch's definition wherever torch has one (z-loss and softcap aside)."""
    x, t = _logits(9, 50, torch.float64), _target(9, 50)
    ours = reference.cross_entropy(x, t, reduction=reduction, label_smoothing=smoothing)
    theirs = functional.cross_entropy(x, t, reduction=reduction, label_smoothing=smoothing, ignore_index=IGNORE)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------- forward and backward

CASES = [
    pytest.param(1, 7, torch.float32, {}, id="1x7-one_tile-fp32"),
    pytest.param(3, 33, torch.float16, {}, id="3x33-looped_tail-fp16"),
    pytest.param(13, 300, torch.bfloat16, {}, id="13x300-bf16"),
    pytest.param(13, 300, torch.float32, {"pad": 24}, id="13x300-strided-fp32"),
    pytest.param(6, 33, torch.float32, {"batch": (2,)}, id="2x6x33-batched-fp32"),
    pytest.param(13, 300, torch.float32, {"label_smoothing": 0.1}, id="smoothing-fp32"),
    pytest.param(13, 300, torch.bfloat16, {"label_smoothing": 0.1, "reduction": "sum"}, id="smoothing-sum-bf16"),
    pytest.param(13, 33, torch.float32, {"z_loss": 1e-2, "reduction": "none"}, id="zloss-none-fp32"),
    pytest.param(13, 300, torch.float32, {"softcap": 3.0, "scale": 5.0}, id="softcap-fp32"),
    pytest.param(13, 33, torch.float16, {"softcap": 30.0, "scale": 20.0, "z_loss": 1e-4, "label_smoothing": 0.2,
                                         "reduction": "none"}, id="all_options-fp16"),
]
_SHAPE_KEYS = ("pad", "batch", "scale")


@pytest.mark.parametrize(("n", "v", "dtype", "params"), CASES)
def test_matches_float64_reference(n, v, dtype, params):
    shape = {k: params[k] for k in _SHAPE_KEYS if k in params}
    options = {k: val for k, val in params.items() if k not in _SHAPE_KEYS}
    x, t = _logits(n, v, dtype, **shape), _target(n, v, batch=shape.get("batch", ()))
    loss, grad, g = _ce_grad(cross_entropy, x, t, **options)
    ref_loss, ref_grad, _ = _ce_grad(reference.cross_entropy, x.double(), t, g, **options)
    base_loss, base_grad, _ = _ce_grad(reference.cross_entropy, x, t, g, **options)
    assert loss.dtype == torch.float32 and loss.shape == ref_loss.shape  # the loss is fp32 by default
    assert grad.dtype == dtype and grad.shape == x.shape
    _close(loss, ref_loss, base_loss, dtype)
    _close(grad, ref_grad, base_grad, dtype)
    # without autograd the kernel computes the loss alone (one read): the same value
    no_grad = cross_entropy(x, t, **options)
    torch.testing.assert_close(no_grad, loss.detach(), rtol=0, atol=0)


def test_int32_targets_and_0d():
    x, t = _logits(5, 33, torch.float32), _target(5, 33)
    torch.testing.assert_close(cross_entropy(x, t.to(torch.int32)), cross_entropy(x, t), rtol=0, atol=0)
    one = cross_entropy(x[0], t[0], reduction="none")  # logits [V], target 0-d
    assert one.shape == ()
    torch.testing.assert_close(one.double(), reference.cross_entropy(x[0].double(), t[0], reduction="none"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_extreme_logits(dtype):
    """±1e4 logits: targets on the maximum (loss ~log of the ties), on −1e4 (loss ~2e4), elsewhere."""
    x = _logits(6, 300, dtype)
    x[:, 2::7] = 1e4
    x[:, 3::11] = -1e4
    t = torch.tensor([2, 3, 5, 9, IGNORE, 14], device=DEVICE)
    for options in ({}, {"z_loss": 1e-4}, {"label_smoothing": 0.1, "reduction": "none"}, {"softcap": 30.0}):
        loss, grad, g = _ce_grad(cross_entropy, x, t, **options)
        ref_loss, ref_grad, _ = _ce_grad(reference.cross_entropy, x.double(), t, g, **options)
        base_loss, base_grad, _ = _ce_grad(reference.cross_entropy, x, t, g, **options)
        _close(loss, ref_loss, base_loss, dtype)
        _close(grad, ref_grad, base_grad, dtype)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_all_ignored_is_zero_not_nan(reduction):
    x = _logits(4, 33, torch.float32).requires_grad_(True)
    t = torch.full((4,), IGNORE, device=DEVICE)
    loss = cross_entropy(x, t, reduction=reduction, z_loss=1e-3, label_smoothing=0.1)
    assert torch.equal(loss.detach(), torch.zeros_like(loss))  # torch's mean gives nan here
    loss.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("grad", [False, True], ids=["infer", "train"])
@pytest.mark.parametrize("batch", ["small", "large"])
def test_the_launch_reduces_its_own_rows_without_validation(reduction, grad, batch):
    """Outside validation mode a call is one launch: its last program sums the rows (the mean counting its
    own targets), and a mean's gradient rows take their ``1/count`` from every program counting the targets
    itself — up to ``SELF_COUNT_MAX_ROWS`` rows; past that (here: the threshold lowered to 8) a statistics
    launch counts them first. The loss equals float64 torch within the rule and, bit for bit, what the
    validation-mode path (statistics first, scaled rows) gives; every arrival counter is back at 0."""
    from kernelworks.ops.cross_entropy import api
    from kernelworks.runtime import alloc, replay

    x, t = _logits(37, 45, torch.float32), _target(37, 45)
    x.requires_grad_(grad)
    names = []

    def counting_launch(kernel, *args, **kwargs):
        names.append(kernel.fn.__name__ if hasattr(kernel, "fn") else kernel.__name__)
        return launch(kernel, *args, **kwargs)

    launch = kernels.launch
    with kernelworks.validation(False), replay.paused(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernels, "launch", counting_launch)
        if batch == "large":
            mp.setattr(api, "SELF_COUNT_MAX_ROWS", 8)
        fast = cross_entropy(x, t, reduction=reduction)
        fast_grad = torch.autograd.grad(fast.sum(), x)[0] if grad else None
    stats = ["_target_stats_kernel"] if grad and reduction == "mean" and batch == "large" else []
    assert names[:len(stats) + 1] == [*stats, "_cross_entropy_fwd_kernel"]
    assert "_target_stats_kernel" not in names[len(stats):]  # (the rest: the backward's scaling pass, if any)
    ref = functional.cross_entropy(x.detach().double(), t, reduction=reduction)
    _close(fast, ref, functional.cross_entropy(x.detach(), t, reduction=reduction), torch.float32)
    with kernelworks.validation(True):
        slow = cross_entropy(x, t, reduction=reduction)
        assert torch.equal(slow, fast)
        if grad:
            assert torch.equal(torch.autograd.grad(slow.sum(), x)[0], fast_grad)
    assert all(int(c.abs().sum()) == 0 for c in alloc._COUNTERS.values())


@pytest.mark.parametrize("grad", [False, True], ids=["infer", "train"])
def test_the_launch_reduces_more_rows_than_one_block(grad):
    """1030 rows: the last program's count and sum, and (a gradient, every program counting its targets with
    the threshold raised past 1030) each program's count, walk two blocks of ``REDUCE_BLOCK`` rows; bit for bit
    the validation-mode path's (statistics first)."""
    from kernelworks.ops.cross_entropy import api

    x, t = _logits(1030, 5, torch.float32), _target(1030, 5, ignore_every=3)
    x.requires_grad_(grad)
    with kernelworks.validation(False), pytest.MonkeyPatch.context() as mp:
        mp.setattr(api, "SELF_COUNT_MAX_ROWS", 2048)
        fast = cross_entropy(x, t)
    with kernelworks.validation(True):
        assert torch.equal(cross_entropy(x, t), fast)
    _close(fast, functional.cross_entropy(x.detach().double(), t), functional.cross_entropy(x.detach(), t),
           torch.float32)


def test_the_launch_counts_int32_targets_against_an_ignore_index_past_int32():
    """The mean's count in the reducing launch masks its padding lanes rather than filling them with an
    ignore_index that an int32 load would wrap: an ignore_index past int32 ignores nothing."""
    x, t = _logits(5, 33, torch.float32), _target(5, 33, ignore_every=0)
    with kernelworks.validation(False):
        got = [cross_entropy(x, t.to(torch.int32), ignore_index=i) for i in (2**31, -(2**31) - 1, 2**40)]
    for loss in got:
        _close(loss, functional.cross_entropy(x.double(), t), functional.cross_entropy(x, t), torch.float32)


def test_custom_ignore_index():
    x, t = _logits(6, 33, torch.float32), _target(6, 33, ignore_every=0)
    t[::2] = 7  # a valid class used as the ignore index
    ours = cross_entropy(x, t, ignore_index=7)
    torch.testing.assert_close(ours, functional.cross_entropy(x, t, ignore_index=7), rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------------ the stored gradient


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_backward_with_unit_grad_output_leaves_the_stored_gradient(reduction):
    """loss.backward() (grad_output exactly 1) skips the scaling pass; the gradient is still exact."""
    x, t = _logits(5, 33, torch.float32), _target(5, 33)
    leaf = x.clone().requires_grad_(True)
    loss = cross_entropy(leaf, t, reduction=reduction)
    (loss if reduction == "mean" else loss.sum()).backward()
    ref = x.double().requires_grad_(True)
    ref_loss = reference.cross_entropy(ref, t, reduction=reduction)
    (ref_loss if reduction == "mean" else ref_loss.sum()).backward()
    torch.testing.assert_close(leaf.grad.double(), ref.grad, rtol=1e-5, atol=1e-7)


def test_retain_graph_second_backward_is_correct():
    x, t = _logits(5, 33, torch.float32), _target(5, 33)
    leaf = x.clone().requires_grad_(True)
    loss = cross_entropy(leaf, t, reduction="none")
    ref = x.double().requires_grad_(True)
    ref_loss = reference.cross_entropy(ref, t, reduction="none")
    for g in (torch.full((5,), 3.0), torch.tensor([1.0, -2.0, 0.5, 4.0, 1.0]), torch.ones(5)):
        (ours,) = torch.autograd.grad(loss, leaf, g.to(DEVICE), retain_graph=True)
        (want,) = torch.autograd.grad(ref_loss, ref, g.to(DEVICE).double(), retain_graph=True)
        torch.testing.assert_close(ours.double(), want, rtol=1e-5, atol=1e-7)


def test_retained_backwards_accumulate_into_a_leaf_grad_that_may_be_edited():
    """``loss.backward(retain_graph=True)`` three times gives 3× the gradient, and ``.grad`` edited in place
    between backwards (``zero_()``, ``mul_``, through ``.data``) leaves the next backward right: the leaf's
    ``.grad`` never shares memory with the gradient the loss keeps for a later backward. Without a retained
    graph the kept gradient becomes ``.grad`` itself (no copy)."""
    x, t = _logits(4, 11, torch.float32), _target(4, 11)
    ref = x.double().requires_grad_(True)
    (want,) = torch.autograd.grad(reference.cross_entropy(ref, t), ref)
    leaf = x.clone().requires_grad_(True)
    loss = cross_entropy(leaf, t)
    for _ in range(3):
        loss.backward(retain_graph=True)
    torch.testing.assert_close(leaf.grad.double(), 3 * want, rtol=1e-5, atol=1e-7)
    leaf.grad.mul_(0.5)
    leaf.grad.data.zero_()
    loss.backward()
    torch.testing.assert_close(leaf.grad.double(), want, rtol=1e-5, atol=1e-7)

    import kernelworks.ops.cross_entropy.api as api

    kept = []
    scale = api.scale_stored

    def spy(ctx, grad_output, stored):
        out = scale(ctx, grad_output, stored)
        kept.append(out[0].data_ptr())
        return out

    leaf = x.clone().requires_grad_(True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(api, "scale_stored", spy)
        cross_entropy(leaf, t).backward()
    assert leaf.grad.data_ptr() == kept[0]


def test_retain_graph_after_a_zero_grad_output_is_exact():
    """A backward that keeps the graph leaves the stored gradient unscaled, so a row its ``grad_output`` zeroed
    comes back whole in the next backward."""
    x, t = _logits(2, 7, torch.float32), torch.tensor([1, 2], device=DEVICE)
    ref = x.double().requires_grad_(True)
    want = torch.autograd.grad(reference.cross_entropy(ref, t, reduction="none"), ref,
                               torch.tensor([2.0, 0.0], device=DEVICE, dtype=torch.float64))[0]
    leaf = x.clone().requires_grad_(True)
    loss = cross_entropy(leaf, t, reduction="none")
    torch.autograd.grad(loss, leaf, torch.tensor([0.0, 1.0], device=DEVICE), retain_graph=True)
    (second,) = torch.autograd.grad(loss, leaf, torch.tensor([2.0, 0.0], device=DEVICE))
    torch.testing.assert_close(second.double(), want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("fused", [False, True], ids=["cross_entropy", "fused_linear"])
def test_a_returned_gradient_edited_in_place_leaves_the_next_backward_right(fused):
    """The caller owns the gradient a retained backward returns: scaling it in place (as a clipping step or an
    in-place hook does) changes neither the graph's stored gradient nor the next backward's result."""
    h, w, t = torch.randn(6, 16, device=DEVICE), torch.randn(40, 16, device=DEVICE), _target(6, 40)
    if fused:
        leaves = (h.clone().requires_grad_(True), w.clone().requires_grad_(True))
        loss = fused_linear_cross_entropy(*leaves, t)
    else:
        leaves = ((h @ w.t()).requires_grad_(True),)
        loss = cross_entropy(leaves[0], t)
    first = torch.autograd.grad(loss, leaves, retain_graph=True)
    want = [g.clone() for g in first]
    for g in first:
        g.mul_(0.5)
    second = torch.autograd.grad(loss, leaves)
    for got, expected in zip(second, want, strict=True):
        torch.testing.assert_close(got, expected)


def test_inplace_backward_writes_the_gradient_over_the_logits():
    x, t = _logits(5, 33, torch.float32), _target(5, 33)
    expected = _ce_grad(cross_entropy, x, t, torch.tensor(1.0))[1]
    leaf = x.clone().requires_grad_(True)
    version = leaf._version
    loss = cross_entropy(leaf, t, inplace_backward=True)
    assert leaf._version > version  # anyone else who saved logits now fails loudly
    torch.testing.assert_close(leaf.detach(), expected, rtol=0, atol=0)  # the memory holds the gradient
    loss.backward()
    torch.testing.assert_close(leaf.grad, expected, rtol=0, atol=0)


def test_inplace_backward_refuses_to_corrupt_a_saved_tensor():
    x, t = _logits(5, 33, torch.float32).requires_grad_(True), _target(5, 33)
    logits = x * 2.0
    logits_sq = logits.square()  # saves `logits` for its backward
    loss = cross_entropy(logits, t, inplace_backward=True) + logits_sq.sum()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()



def test_inplace_backward_on_overlapping_rows_takes_a_buffer():
    """An expanded row (row stride 0: every row the same memory) has unit column stride but rows that overlap:
    writing each row's gradient over it would let later rows read earlier rows' gradients as logits (a wrong
    loss and gradient; on a GPU a race). Such logits get a buffer; the loss, the gradient and the caller's
    tensor are those of the ordinary call."""
    row, t = _logits(1, 11, torch.float32)[0], torch.tensor([0, 3, 5, 7], device=DEVICE)
    want_leaf = row.clone().requires_grad_(True)
    want = cross_entropy(want_leaf.expand(4, 11), t)
    want.backward()
    leaf = row.clone().requires_grad_(True)
    before = leaf.detach().clone()
    loss = cross_entropy(leaf.expand(4, 11), t, inplace_backward=True)
    loss.backward()
    torch.testing.assert_close(loss, want, rtol=0, atol=0)
    torch.testing.assert_close(leaf.grad, want_leaf.grad, rtol=0, atol=0)
    assert torch.equal(leaf.detach(), before)

def test_inplace_backward_on_a_strided_last_dim_falls_back():
    x = _logits(33, 5, torch.float32).t()  # column stride 5: as_rows copies, logits stay untouched
    t = _target(5, 33)
    leaf = x.detach().requires_grad_(True)
    before = leaf.detach().clone()
    cross_entropy(leaf, t, inplace_backward=True).backward()
    assert torch.equal(leaf.detach(), before)
    torch.testing.assert_close(leaf.grad, _ce_grad(cross_entropy, x, t, torch.tensor(1.0))[1], rtol=0, atol=0)


# ------------------------------------------------------------------------------------------ bad input


def _raises(exc, name, fn, *args, **kwargs):
    with pytest.raises(exc, match=name):
        fn(*args, **kwargs)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_loss_is_float32_by_default_and_loss_dtype_on_request(reduction):
    """bf16 logits: the loss comes back in fp32, as computed (a bf16 loss near 10.56 moves in 0.0625
    steps, so a training curve printed from it stood still), within fp32's error of float64; the gradient
    stays bf16. ``loss_dtype`` (a dtype or its name) gives the input's dtype back; the nn module agrees."""
    from kernelworks.nn import CrossEntropyLoss

    x = _logits(16, 300, torch.bfloat16, scale=0.5) + 10.0  # losses near log(300) ≈ 5.7
    t = _target(16, 300)
    g = torch.randn(16 if reduction == "none" else (), device=DEVICE).to(torch.bfloat16).double()  # exact in bf16
    loss, grad, _ = _ce_grad(cross_entropy, x, t, g, reduction=reduction)
    ref, ref_grad, _ = _ce_grad(reference.cross_entropy, x.double(), t, g, reduction=reduction)
    assert loss.dtype == torch.float32 and grad.dtype == torch.bfloat16
    torch.testing.assert_close(loss.double(), ref, rtol=2e-6, atol=2e-6)  # bf16 would be ~1e-2 off
    _close(grad, ref_grad, _ce_grad(reference.cross_entropy, x, t, g, reduction=reduction)[1], torch.bfloat16)
    for loss_dtype in (torch.bfloat16, "bfloat16", "torch.bfloat16"):
        low, low_grad, _ = _ce_grad(cross_entropy, x, t, g, reduction=reduction, loss_dtype=loss_dtype)
        assert low.dtype == torch.bfloat16 and torch.equal(low, loss.to(torch.bfloat16))
        assert torch.equal(low_grad, grad)  # the cast's backward hands the same grad_output on
    module = CrossEntropyLoss(reduction=reduction)
    assert torch.equal(module(x, t), loss.detach())
    assert CrossEntropyLoss(reduction=reduction, loss_dtype=torch.float16)(x, t).dtype == torch.float16


def test_int32_target_with_an_ignore_index_past_int32():
    """An ignore_index no int32 target can equal ignores nothing (it used to fail with "got 0 out of range
    (e.g. [])": the padding lanes of the count read ignore_index wrapped to int32)."""
    x, t = _logits(5, 33, torch.float32), _target(5, 33, ignore_every=0)
    want = cross_entropy(x, t)
    for ignore_index in (2**31, -(2**31) - 1, 2**40):
        torch.testing.assert_close(cross_entropy(x, t.to(torch.int32), ignore_index=ignore_index), want)
    bad = t.to(torch.int32)
    bad[3] = 40
    with pytest.raises(ValueError, match=r"target:.*got 1 out of range \(e.g. \[40\]\)"):
        cross_entropy(x, bad, ignore_index=2**31)


def test_out_of_range_target_without_validation_is_a_nan_row_not_a_sync():
    """Outside validation mode the target values are not read on the host (no sync): a bad target gives its
    row a NaN loss, the other rows are exact, and nothing is read out of bounds."""
    x, t = _logits(4, 33, torch.float32), _target(4, 33, ignore_every=0)
    bad = t.clone()
    bad[1], bad[2] = 33, -5
    x = x.requires_grad_()
    with kernelworks.validation(False):
        loss = cross_entropy(x, bad, reduction="none")
        loss.sum().backward()
    want = torch.nn.functional.cross_entropy(x.detach().double(), t, reduction="none")
    assert loss[1:3].isnan().all()
    torch.testing.assert_close(loss[[0, 3]].double(), want[[0, 3]])
    assert x.grad[[0, 3]].isfinite().all()
    with kernelworks.validation(), pytest.raises(ValueError, match="target"):
        cross_entropy(x, bad)


def test_bad_input_cross_entropy():
    x, t = _logits(4, 33, torch.float32), _target(4, 33)
    _raises(TypeError, "logits", cross_entropy, x.to(torch.int64), t)
    _raises(TypeError, "logits", cross_entropy, x.double(), t)
    _raises(TypeError, "logits", cross_entropy, x.tolist(), t)
    _raises(ValueError, "logits", cross_entropy, x[:0], t[:0])
    _raises(TypeError, "target", cross_entropy, x, t.float())
    _raises(TypeError, "target", cross_entropy, x, t.tolist())
    _raises(ValueError, "target", cross_entropy, x, t[:3])
    _raises(ValueError, "target", cross_entropy, x, t.to("meta"))
    bad = t.clone()
    bad[0] = 33
    _raises(ValueError, "target", cross_entropy, x, bad)
    bad[0] = -1
    _raises(ValueError, "target", cross_entropy, x, bad)
    _raises(ValueError, "target", cross_entropy, x.requires_grad_(True), bad)
    _raises(ValueError, "reduction", cross_entropy, x, t, reduction="avg")
    _raises(ValueError, "label_smoothing", cross_entropy, x, t, label_smoothing=1.5)
    _raises(TypeError, "label_smoothing", cross_entropy, x, t, label_smoothing="0.1")
    _raises(ValueError, "z_loss", cross_entropy, x, t, z_loss=-1e-4)
    _raises(ValueError, "softcap", cross_entropy, x, t, softcap=0.0)
    _raises(TypeError, "ignore_index", cross_entropy, x, t, ignore_index=1.5)
    _raises(TypeError, "inplace_backward", cross_entropy, x, t, inplace_backward=1)
    _raises(ValueError, "ignore_index", cross_entropy, x, t, ignore_index=2**63)
    _raises(TypeError, "ignore_index", cross_entropy, x, t, ignore_index=True)
    _raises(TypeError, "loss_dtype", cross_entropy, x, t, loss_dtype=torch.int32)
    _raises(TypeError, "loss_dtype", cross_entropy, x, t, loss_dtype="fp32x")
    _raises(TypeError, "loss_dtype", cross_entropy, x, t, loss_dtype=32)


def test_bad_input_fused_linear():
    h, w, t = torch.randn(4, 8, device=DEVICE), torch.randn(33, 8, device=DEVICE), _target(4, 33)
    _raises(ValueError, "weight", fused_linear_cross_entropy, h, w[:, :7], t)
    _raises(ValueError, "weight", fused_linear_cross_entropy, h, w[0], t)
    _raises(TypeError, "weight", fused_linear_cross_entropy, h, w.half(), t)
    _raises(TypeError, "hidden", fused_linear_cross_entropy, h.long(), w, t)
    _raises(ValueError, "target", fused_linear_cross_entropy, h, w, t[:3])
    _raises(ValueError, "weight", fused_linear_cross_entropy, h, w.to("meta"), t)
    _raises(ValueError, "bias", fused_linear_cross_entropy, h, w, t, bias=torch.randn(32, device=DEVICE))
    _raises(TypeError, "bias", fused_linear_cross_entropy, h, w, t, bias=torch.randn(33, device=DEVICE).half())
    _raises(ValueError, "chunk_size", fused_linear_cross_entropy, h, w, t, chunk_size=0)
    _raises(TypeError, "chunk_size", fused_linear_cross_entropy, h, w, t, chunk_size=2.0)
    _raises(TypeError, "accum_dtype", fused_linear_cross_entropy, h, w, t, accum_dtype=torch.float16)
    _raises(TypeError, "accum_dtype", fused_linear_cross_entropy, h, w, t, accum_dtype="float16")
    _raises(TypeError, "accum_dtype", fused_linear_cross_entropy, h, w, t, accum_dtype=None)
    _raises(TypeError, "loss_dtype", fused_linear_cross_entropy, h, w, t, loss_dtype=torch.int64)
    bad = t.clone()
    bad[2] = 40
    _raises(ValueError, "target", fused_linear_cross_entropy, h, w, bad)
    _raises(ValueError, "reduction", fused_linear_cross_entropy, h, w, t, reduction="mean ")


# ----------------------------------------------------------------------------------- fused linear + loss


def _flce_grads(fn, h, w, t, b, g, **options):
    leaves = [v.detach().clone().requires_grad_(True) for v in (h, w, b) if v is not None]
    hh, ww = leaves[0], leaves[1]
    bb = leaves[2] if b is not None else None
    loss = fn(hh, ww, t, bias=bb, **options)
    grads = torch.autograd.grad(loss, leaves, g.to(loss.dtype).expand(loss.shape) if g.dim() == 0 else
                                g.to(loss.dtype))
    return loss, grads


FLCE_CASES = [
    pytest.param(torch.float32, {}, id="mean-fp32"),
    pytest.param(torch.float32, {"chunk_size": 3, "bias": True}, id="chunked-bias-fp32"),
    pytest.param(torch.bfloat16, {"chunk_size": 4, "reduction": "sum"}, id="chunked-sum-bf16"),
    pytest.param(torch.float32, {"chunk_size": 5, "reduction": "none", "bias": True}, id="none-deferred-fp32"),
    pytest.param(torch.float32, {"chunk_size": 4, "label_smoothing": 0.1, "z_loss": 1e-3, "softcap": 4.0},
                 id="all_options-fp32"),
    pytest.param(torch.bfloat16, {"chunk_size": 4, "accum_dtype": torch.bfloat16}, id="accum_bf16"),
]


@pytest.mark.parametrize(("dtype", "params"), FLCE_CASES)
def test_fused_linear_matches_float64_reference(dtype, params):
    n, hdim, v = 13, 16, 40
    h = torch.randn(n, hdim, device=DEVICE).to(dtype)
    w = (torch.randn(v, hdim, device=DEVICE) * hdim ** -0.5).to(dtype)
    b = torch.randn(v, device=DEVICE).to(dtype) if params.get("bias") else None
    t = _target(n, v)
    options = {k: val for k, val in params.items() if k != "bias"}
    ref_options = {k: val for k, val in options.items() if k not in ("chunk_size", "accum_dtype")}
    g = torch.randn(n if options.get("reduction") == "none" else (), device=DEVICE, dtype=torch.float64)
    loss, grads = _flce_grads(fused_linear_cross_entropy, h, w, t, b, g, **options)
    ref_loss, ref_grads = _flce_grads(reference.fused_linear_cross_entropy, h.double(), w.double(), t,
                                      None if b is None else b.double(), g, **ref_options)
    base_loss, base_grads = _flce_grads(reference.fused_linear_cross_entropy, h, w, t, b, g, **ref_options)
    assert loss.dtype == torch.float32
    _close(loss, ref_loss, base_loss, dtype)
    for ours, ref, base in zip(grads, ref_grads, base_grads):
        assert ours.dtype == dtype
        _close(ours, ref, base, dtype)


def test_fused_linear_loss_dtype_and_accum_dtype_by_name():
    """fp32 loss by default (bf16 inputs), ``loss_dtype`` for the input's; ``accum_dtype`` may be named
    ("float32": it used to say "expected torch.float32 ... got float32"); the nn module takes both."""
    from kernelworks.nn import FusedLinearCrossEntropyLoss

    h = torch.randn(13, 16, device=DEVICE).to(torch.bfloat16)
    w = (torch.randn(40, 16, device=DEVICE) * 0.25).to(torch.bfloat16)
    t = _target(13, 40)
    loss = fused_linear_cross_entropy(h, w, t, chunk_size=4)
    ref = reference.cross_entropy((h @ w.T).double(), t)  # from the same bf16 logits
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss.double(), ref, rtol=2e-6, atol=2e-6)
    assert torch.equal(fused_linear_cross_entropy(h, w, t, chunk_size=4, accum_dtype="float32"), loss)
    low = fused_linear_cross_entropy(h, w, t, chunk_size=4, loss_dtype=torch.bfloat16)
    assert low.dtype == torch.bfloat16 and torch.equal(low, loss.to(torch.bfloat16))
    module = FusedLinearCrossEntropyLoss(chunk_size=4, accum_dtype="bfloat16", loss_dtype="bfloat16")
    assert module.accum_dtype == torch.bfloat16 and module(h, w, t).dtype == torch.bfloat16


def test_fused_linear_is_deterministic_and_chunking_invariant():
    h, w, t = torch.randn(13, 16, device=DEVICE), torch.randn(40, 16, device=DEVICE) * 0.25, _target(13, 40)
    g = torch.tensor(1.5, device=DEVICE)
    first = _flce_grads(fused_linear_cross_entropy, h, w, t, None, g, chunk_size=4)
    second = _flce_grads(fused_linear_cross_entropy, h, w, t, None, g, chunk_size=4)
    whole = _flce_grads(fused_linear_cross_entropy, h, w, t, None, g)
    for a, b, c in zip((first[0], *first[1]), (second[0], *second[1]), (whole[0], *whole[1])):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-6)


def test_fused_linear_frozen_weight_and_no_grad():
    h, w, t = torch.randn(6, 16, device=DEVICE), torch.randn(40, 16, device=DEVICE) * 0.25, _target(6, 40)
    leaf = h.clone().requires_grad_(True)
    loss = fused_linear_cross_entropy(leaf, w, t)
    loss.backward()
    ref = h.double().requires_grad_(True)
    reference.fused_linear_cross_entropy(ref, w.double(), t).backward()
    torch.testing.assert_close(leaf.grad.double(), ref.grad, rtol=1e-5, atol=1e-7)
    with torch.no_grad():
        torch.testing.assert_close(fused_linear_cross_entropy(h, w, t), loss.detach(), rtol=0, atol=0)


def test_fused_linear_retain_graph():
    h, w, t = torch.randn(6, 16, device=DEVICE), torch.randn(40, 16, device=DEVICE) * 0.25, _target(6, 40)
    hh, ww = h.clone().requires_grad_(True), w.clone().requires_grad_(True)
    loss = fused_linear_cross_entropy(hh, ww, t, reduction="sum")
    rh, rw = h.double().requires_grad_(True), w.double().requires_grad_(True)
    ref = reference.fused_linear_cross_entropy(rh, rw, t, reduction="sum")
    for g in (2.0, -0.5, 1.0):
        ours = torch.autograd.grad(loss, (hh, ww), torch.tensor(g, device=DEVICE), retain_graph=True)
        want = torch.autograd.grad(ref, (rh, rw), torch.tensor(g, device=DEVICE).double(), retain_graph=True)
        for a, b in zip(ours, want):
            torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-6)


def test_fused_linear_batched_hidden_and_int32_targets():
    h, w = torch.randn(2, 5, 16, device=DEVICE), torch.randn(40, 16, device=DEVICE) * 0.25
    t = _target(5, 40, batch=(2,))
    leaf = h.clone().requires_grad_(True)
    loss = fused_linear_cross_entropy(leaf, w, t.to(torch.int32), reduction="none", chunk_size=3)
    assert loss.shape == (2, 5)
    ref = h.double().requires_grad_(True)
    want = reference.fused_linear_cross_entropy(ref, w.double(), t, reduction="none")
    torch.testing.assert_close(loss.double(), want, rtol=1e-5, atol=1e-6)
    loss.sum().backward()
    want.sum().backward()
    assert leaf.grad.shape == h.shape
    torch.testing.assert_close(leaf.grad.double(), ref.grad, rtol=1e-5, atol=1e-6)


def test_chunk_rule():
    assert flce_mod.chunk_rows(16384, 128256, 2) == 1024  # 263 MB of bf16 logits
    assert flce_mod.chunk_rows(16384, 32000, 2) == 4096
    assert flce_mod.chunk_rows(16384, 256000, 4) == 256
    assert flce_mod.chunk_rows(100, 128256, 2) == 100
    assert flce_mod.chunk_rows(10**6, 10**9, 4) == 1
    # an fp32 accumulator's final cast (1.05 GB here) sets the peak: the chunk may grow to 1 GiB
    assert flce_mod.chunk_rows(16384, 128256, 2, cast_bytes=128256 * 4096 * 2) == 4096
    assert flce_mod.chunk_rows(16384, 32000, 2, cast_bytes=32000 * 4096 * 2) == 4096


# ----------------------------------------------------------------------------------- plans and helpers


def test_gpu_plans():
    with planning_for_gpu():
        assert kernels.plan(32000) == {"TILE": 32768, "ONE_TILE": True, "num_warps": 32}
        assert kernels.plan(32000, softcap=True)["ONE_TILE"] is False
        assert kernels.plan(65536) == {"TILE": 8192, "ONE_TILE": False, "num_warps": 16}
        assert kernels.plan(128256) == {"TILE": 16384, "ONE_TILE": False, "num_warps": 32}
        assert kernels.plan(100)["num_warps"] == 1


@triton.jit
def _tanh_kernel(p_x, p_y, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    m = o < n
    tl.store(p_y + o, _math.tanh(tl.load(p_x + o, mask=m, other=0.0)), mask=m)


def test_tanh_helper_is_accurate_everywhere():
    x = torch.cat([torch.logspace(-8, 3, 400), torch.tensor([0.0, 0.2499, 0.25, 0.2501, 20.0, 1e4])])
    x = torch.cat([x, -x]).to(DEVICE)
    y = torch.empty_like(x)
    _tanh_kernel[(1,)](x, y, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    want = torch.tanh(x.double())
    rel = ((y.double() - want).abs() / want.abs().clamp(min=1e-30))
    assert float(rel.max()) < 1e-6


# ----------------------------------------------------------------------------- torch.compile and opcheck


def test_torch_compile_fullgraph():
    x, t = _logits(5, 33, torch.float32), _target(5, 33)

    def step(x, t):
        return cross_entropy(x, t, label_smoothing=0.1, softcap=20.0)

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    (compiled(a, t) * 2).backward()
    (step(b, t) * 2).backward()
    torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=0)


def test_torch_compile_fullgraph_fused_linear():
    h, w, t = torch.randn(6, 16, device=DEVICE), torch.randn(40, 16, device=DEVICE) * 0.25, _target(6, 40)

    def step(h, w, t):
        return fused_linear_cross_entropy(h, w, t, reduction="none", chunk_size=4).sum()

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    leaves = [v.clone().requires_grad_(True) for v in (h, w, h, w)]
    compiled(leaves[0], leaves[1], t).backward()
    step(leaves[2], leaves[3], t).backward()
    torch.testing.assert_close(leaves[0].grad, leaves[2].grad, rtol=0, atol=0)
    torch.testing.assert_close(leaves[1].grad, leaves[3].grad, rtol=0, atol=0)


def test_opcheck():
    from kernelworks.ops.cross_entropy.api import _CROSS_ENTROPY
    from kernelworks.ops.cross_entropy.fused_linear import _FUSED_LINEAR_CROSS_ENTROPY

    x, t = _logits(4, 33, torch.float32).requires_grad_(True), _target(4, 33)
    torch.library.opcheck(_CROSS_ENTROPY.custom_op, (x, t, IGNORE, 0.1, "mean", 1e-4, 30.0, True, False))
    torch.library.opcheck(_CROSS_ENTROPY.custom_op, (x, t, IGNORE, 0.0, "none", 0.0, None, True, False))
    h = torch.randn(5, 8, device=DEVICE, requires_grad=True)
    w = torch.randn(33, 8, device=DEVICE, requires_grad=True)
    b = torch.randn(33, device=DEVICE, requires_grad=True)
    for reduction in ("mean", "none"):
        torch.library.opcheck(_FUSED_LINEAR_CROSS_ENTROPY.custom_op,
                              (h, w, _target(5, 33), b, IGNORE, 0.0, reduction, 0.0, None, 2, torch.float32,
                               True, True, True))


# ------------------------------------------------------------------------------------------------ GPU


@pytest.mark.gpu
@pytest.mark.parametrize("vocab", [32000, 128256, 256000])
def test_gpu_large_vocab(vocab):
    x = (torch.randn(8, vocab, device="cuda") * 3).to(torch.bfloat16)
    t = _target(8, vocab)
    for options in ({}, {"label_smoothing": 0.1, "z_loss": 1e-4, "softcap": 30.0, "reduction": "none"}):
        loss, grad, g = _ce_grad(cross_entropy, x, t, **options)
        ref_loss, ref_grad, _ = _ce_grad(reference.cross_entropy, x.double(), t, g, **options)
        base_loss, base_grad, _ = _ce_grad(reference.cross_entropy, x, t, g, **options)
        _close(loss, ref_loss, base_loss, torch.bfloat16)
        _close(grad, ref_grad, base_grad, torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize(("accum", "limit_gb"), [(torch.bfloat16, 1.5), (torch.float32, 3.6)])
def test_gpu_fused_linear_extra_peak_memory(accum, limit_gb):
    """The memory target (hidden 4096, vocab 128256, 16k tokens): ≤ 1.5 GB beyond the inputs with
    weight-dtype accumulation; the fp32 accumulator adds its documented V·H·4 + V·H·2 bytes."""
    h = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(128256, 4096, device="cuda") * 4096 ** -0.5).to(torch.bfloat16).requires_grad_(True)
    t = torch.randint(0, 128256, (16384,), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fused_linear_cross_entropy(h, w, t, accum_dtype=accum).backward()
    torch.cuda.synchronize()
    extra = (torch.cuda.max_memory_allocated() - base) / 1e9
    assert extra <= limit_gb, f"extra peak {extra:.2f} GB"


@pytest.mark.gpu
def test_gpu_offsets_past_2_31_elements():
    """16384 tokens × 256000 vocab = 4.2e9 logits: row offsets must be int64 (the last rows prove it)."""
    n, v = 16384, 256000
    x = torch.randn(n, v, device="cuda", dtype=torch.bfloat16)
    t = torch.randint(0, v, (n,), device="cuda")
    loss = cross_entropy(x, t, reduction="none")
    rows = torch.arange(n - 64, n, device="cuda")  # rows whose offsets pass 2^31
    ref = torch.nn.functional.cross_entropy(x[rows].float(), t[rows], reduction="none")
    _close(loss[rows], ref.double(), torch.nn.functional.cross_entropy(x[rows], t[rows], reduction="none"),
           torch.bfloat16)


@pytest.mark.gpu
def test_gpu_fused_linear_fp32_accumulation_values():
    """The default (fp32 grad_weight accumulation, addmm with out_dtype) checked against float64."""
    n, h, v = 1024, 256, 4096
    hidden = torch.randn(n, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    weight = (torch.randn(v, h, device="cuda") * 0.05).to(torch.bfloat16).requires_grad_()
    target = torch.randint(0, v, (n,), device="cuda")
    loss = fused_linear_cross_entropy(hidden, weight, target, chunk_size=256)
    gh, gw = torch.autograd.grad(loss, [hidden, weight])
    h64, w64 = hidden.detach().double().requires_grad_(), weight.detach().double().requires_grad_()
    ref = torch.nn.functional.cross_entropy(h64 @ w64.T, target)
    rh, rw = torch.autograd.grad(ref, [h64, w64])
    hb, wb = hidden.detach().requires_grad_(), weight.detach().requires_grad_()
    base = torch.nn.functional.cross_entropy(hb @ wb.T, target)
    bh, bw = torch.autograd.grad(base, [hb, wb])
    _close(loss, ref, base, torch.bfloat16)
    _close(gh, rh, bh, torch.bfloat16)
    _close(gw, rw, bw, torch.bfloat16)


@pytest.mark.gpu
def test_gpu_mean_without_statistics_equals_the_scaled_rows_bitwise():
    """The launch that counts its own targets scales the stored rows before it sums them, as a launch given
    the statistics' scale stores them: the two means agree bit for bit where a lane sums several rows (1025
    rows; three counted, so the scale 1/3 rounds). A ``sum += row · s`` compiles to an FMA and disagreed on
    ~14% of such inputs."""
    x = torch.randn(1025, 50, device="cuda")
    t = torch.full((1025,), IGNORE, device="cuda")
    for seed in range(40):
        torch.manual_seed(seed)
        x.normal_()
        t[[0, 1, 1024]] = torch.randint(0, 50, (3,), device="cuda")
        with kernelworks.validation(False):
            fast = cross_entropy(x, t)
        with kernelworks.validation(True):
            assert torch.equal(cross_entropy(x, t), fast), seed


@pytest.mark.gpu
def test_gpu_replayed_reductions_count_on_their_own_stream():
    """A signature recorded on the default stream and then replayed on another stream, while a call on the
    default stream may run at the same time: each counts on its own stream's arrival counters (a replay once
    kept the recording stream's buffer, and two launches sharing a counter left it wrong for good)."""
    from kernelworks.runtime import alloc

    x = torch.randn(4096, 1000, device="cuda")
    t = torch.randint(0, 1000, (4096,), device="cuda")
    want = functional.cross_entropy(x, t, reduction="sum")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    outs = []
    with kernelworks.validation(False):
        for _ in range(4):  # recorded on the default stream, then replayed
            cross_entropy(x, t, reduction="sum")
        for _ in range(20):
            with torch.cuda.stream(side):
                outs.append(cross_entropy(x, t, reduction="sum"))
            outs.append(cross_entropy(x, t, reduction="sum"))
    torch.cuda.synchronize()
    for out in outs:
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-3)
    assert ("cuda", torch.cuda.current_device(), side.cuda_stream) in alloc._COUNTERS
    assert all(int(c.abs().sum()) == 0 for c in alloc._COUNTERS.values())
