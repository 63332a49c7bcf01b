"""The corpus ``kw check --adversarial`` judges on any machine: 28 cheating providers of 8 kinds and 29 honest
ones, on small cases of the repository's own specs (softmax, rms_norm, layer_norm, silu, gelu,
cross_entropy, matmul), forward only.

Most providers are a few lines of torch (fast on the CPU); the honest set also holds our Triton kernels for
softmax, rms_norm and silu (the interpreter on the CPU). Each entry builds a fresh spec on every call,
because cheating providers keep state between calls. A cheat names the checks any one of which must catch
it (:data:`CATCHERS`): ``plain`` is the fixed-input checklist, the others the adversarial probes.

Cases: fp32 and bf16, sizes chosen where cheats hide — softmax rows of 1024 and 128 columns (multiples of a
128-column tile, so a kernel without a tail mask passes), ``|x| ~ 5e-4`` activations (outputs under the
fp32 rule's absolute floor ``atol = 1e-5``, where a bf16 computation's error passes the element rule; the
normwise half of the rule catches it since session 19).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.nn import functional

from kernelworks.spec import Case, OpSpec, Provider, case, registry

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16

CATCHERS = ("plain", "fresh values", "fresh tensors", "dependence", "other shapes",
            "outside stream", "lazy result")
"""What can catch a cheat: the fixed-input checklist, the four probes of ``kw check --adversarial``, and the
two of ``kw bench`` (GPU)."""


@dataclass(frozen=True)
class Entry:
    """One provider. ``spec()`` builds a fresh spec with it as the subject; ``by``: for a cheat, the checks
    (names in :data:`CATCHERS`) any one of which must catch it; empty for an honest provider."""

    name: str
    kind: str
    spec: Callable[[], OpSpec]
    by: tuple[str, ...] = ()

    @property
    def honest(self) -> bool:
        return not self.by


def on(op: str, fn: Callable[..., Any], cases: list[Case], *, reference: Callable[..., Any] | None = None,
       bench: bool = False) -> OpSpec:
    """The registered spec ``op`` with ``fn`` as its only provider (subject ``p``), forward only, on ``cases``
    (its check cases, or its bench cases with ``bench``)."""
    base = registry()[op]
    return replace(base, reference=reference or base.reference, providers={"p": Provider("p", fn)}, subject="p",
                   baselines=(), grad_inputs=(), check_cases=[] if bench else list(cases),
                   bench_cases=list(cases) if bench else [], configs=(), configured=None)


def subject(op: str) -> Callable[..., Any]:
    """Our own provider of ``op`` (a Triton kernel)."""
    return registry()[op].providers["kernelworks"].fn


SOFTMAX = [case("4x1024", F32, rows=4, cols=1024), case("16x128", BF16, rows=16, cols=128)]
RMS = [case("13x128", F32, rows=13, hidden=128), case("8x64", BF16, rows=8, hidden=64)]
LAYER_NORM = [case("6x64", F32, rows=6, hidden=64)]
SILU = [case("9x100", F32, shape=(9, 100)), case("9x100-small", F32, shape=(9, 100), scale=5e-4),
        case("7x64", BF16, shape=(7, 64))]
SMALL = [case("9x100-small", F32, shape=(9, 100), scale=5e-4)]
"""Activations of a small-init layer: |x| ~ 5e-4, outputs under 1e-3, under the fp32 rule's atol (1e-5) even
with a bf16 computation's 0.4% error: the element rule passes such a cheat, the rule's normwise half (``plain``)
catches it."""
CE = [case("8x300", F32, rows=8, vocab=300)]
MATMUL = [case("16x24x40", F32, M=16, N=24, K=40), case("8x16x32", F16, M=8, N=16, K=32)]


def memo_by(key: Callable[..., Any], compute: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A provider returning ``compute``'s result cached under ``key(**inputs)``: a stale-result cheat."""
    memo: dict[Any, torch.Tensor] = {}

    def fn(**kw: Any) -> torch.Tensor:
        k = key(**kw)
        if k not in memo:
            memo[k] = compute(**kw)
        return memo[k].clone()
    return fn


def reference_thief(op: str, cases: list[Case]) -> OpSpec:
    """A cheat that returns the reference's own last output in the wanted dtype (it wraps the spec's
    reference, as a provider hooking a harness could): right whenever the checker ran the reference on the
    same inputs just before calling it."""
    base = registry()[op]
    saved: list[torch.Tensor] = []

    def reference(**kw: Any) -> Any:
        out = base.reference(**kw)
        saved.append(out)
        return out

    def fn(**kw: Any) -> torch.Tensor:
        want = next(v for v in kw.values() if isinstance(v, torch.Tensor))
        for out in reversed(saved):
            if out.dtype == want.dtype:
                return out.clone()
        return base.reference(**kw)
    return on(op, fn, cases, reference=reference)


def first_call_state(compute: Callable[[dict[str, Any], dict[str, Any]], torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A provider ``compute(state, inputs)`` with a dict that persists across calls."""
    state: dict[str, Any] = {}

    def fn(**kw: Any) -> torch.Tensor:
        return compute(state, kw)
    return fn


def tf32(t: torch.Tensor) -> torch.Tensor:
    """fp32 ``t`` rounded to tf32's 10 significand bits (what a tensor-core fp32 matmul reads)."""
    bits = t.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32).view(t.shape)


# ---------------------------------------------------------------------------------------------- softmax


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, -1)


def softmax_no_tail(x: torch.Tensor) -> torch.Tensor:
    """Tiles of 128 columns and no mask for a last partial tile: right for the declared widths only."""
    n = x.shape[-1] // 128 * 128
    y = torch.zeros_like(x)
    y[..., :n] = torch.softmax(x[..., :n], -1)
    return y


def softmax_grid_from_first_call(state: dict[str, Any], kw: dict[str, Any]) -> torch.Tensor:
    """A persistent grid sized by the first call's rows (per dtype): later calls compute only those rows."""
    x = kw["x"].reshape(-1, kw["x"].shape[-1])
    rows = state.setdefault(x.dtype, x.shape[0])
    y = torch.zeros_like(x)
    y[:rows] = torch.softmax(x[:rows], -1)
    return y.reshape(kw["x"].shape)


def softmax_in_place(x: torch.Tensor) -> torch.Tensor:
    return x.copy_(torch.softmax(x, -1))  # the spec declares no in-place form


def softmax_bf16_inputs(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.to(BF16).float(), -1).to(x.dtype)


def softmax_manual(x: torch.Tensor) -> torch.Tensor:
    """In the input dtype throughout (bf16 intermediates for a bf16 case): honest at the dtype's precision."""
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def softmax_via_log(x: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(x.float(), -1).exp().to(x.dtype)


def softmax_fp64(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), -1).to(x.dtype)


def softmax_online(x: torch.Tensor) -> torch.Tensor:
    """One pass over blocks of 96 columns with a running max and rescaled sum (a reordered reduction)."""
    xf = x.float()
    m = torch.full(xf.shape[:-1], -math.inf, dtype=torch.float32, device=x.device)
    s = torch.zeros_like(m)
    for j in range(0, xf.shape[-1], 96):
        block = xf[..., j:j + 96]
        m_new = torch.maximum(m, block.amax(-1))
        s = s * (m - m_new).exp() + (block - m_new[..., None]).exp().sum(-1)
        m = m_new
    return ((xf - m[..., None]).exp() / s[..., None]).to(x.dtype)


def softmax_out_buffer(state: dict[str, Any], kw: dict[str, Any]) -> torch.Tensor:
    """Writes into one output buffer per shape, reused (recomputed) on every call, as a static-graph op does."""
    x = kw["x"]
    out = state.setdefault((x.shape, x.dtype), torch.empty_like(x))
    return out.copy_(torch.softmax(x, -1))


def softmax_row_blocks(x: torch.Tensor) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1])
    return torch.cat([torch.softmax(b, -1) for b in x2.split(3)]).reshape(x.shape)


# --------------------------------------------------------------------------------------------- norms


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rms_padded_block_mean(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The mean square over the padded power-of-two block (masked zeros counted): right for 64 and 128."""
    xf = x.float()
    block = 1 << (x.shape[-1] - 1).bit_length()
    return (xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) / block + eps) * weight.float()).to(x.dtype)


def rms_weight_cache_by_pointer(state: dict[str, Any], kw: dict[str, Any]) -> torch.Tensor:
    """The weight converted once per address (no version check): stale after an in-place update. (Shape and
    dtype in the key too: a CUDA caching allocator hands the next case's weight the same address.)"""
    w = kw["weight"]
    w = state.setdefault((w.data_ptr(), w.shape, w.dtype), w.float().clone())
    return rms(kw["x"], w, kw["eps"])


def rms_weight_cache_by_version(state: dict[str, Any], kw: dict[str, Any]) -> torch.Tensor:
    """The same cache keyed by address AND version counter: legal (an in-place update bumps the version;
    shape and dtype guard a new tensor given a freed one's address)."""
    w = kw["weight"]
    key = (w.data_ptr(), w._version, w.shape, w.dtype)
    if key not in state:
        state.clear()
        state[key] = w.float().clone()
    return rms(kw["x"], state[key], kw["eps"])


def rms_half_rows_cached(state: dict[str, Any], kw: dict[str, Any]) -> torch.Tensor:
    """The first half of the rows computed; the second half from the first call of that shape."""
    y = rms(kw["x"], kw["weight"], kw["eps"])
    key = (y.shape, y.dtype)
    if key in state:
        half = y.shape[-2] // 2
        y[..., half:, :] = state[key][..., half:, :]
    else:
        state[key] = y.clone()
    return y


def rms_in_place(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x.copy_(rms(x, weight, eps))


def rms_bf16_math(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xb = x.to(BF16)
    return (xb * torch.rsqrt(xb.pow(2).mean(-1, keepdim=True) + eps) * weight.to(BF16)).to(x.dtype)


def rms_fp64(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xd = x.double()
    return (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * weight.double()).to(x.dtype)


def rms_row_blocks(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1])
    return torch.cat([rms(b, weight, eps) for b in x2.split(4)]).reshape(x.shape)


def rms_split_sum(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The sum of squares as two half-row partial sums added (another reduction order)."""
    xf = x.float()
    h = xf.shape[-1] // 2
    ms = (xf[..., :h].pow(2).sum(-1, keepdim=True) + xf[..., h:].pow(2).sum(-1, keepdim=True)) / xf.shape[-1]
    return (xf * torch.rsqrt(ms + eps) * weight.float()).to(x.dtype)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    var = (xf - mean).pow(2).mean(-1, keepdim=True)
    return ((xf - mean) * torch.rsqrt(var + eps) * weight.float() + bias.float()).to(x.dtype)


# ---------------------------------------------------------------------------------------- activations


def silu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


def silu_exp(x: torch.Tensor) -> torch.Tensor:
    return x / (1 + torch.exp(-x))


def silu_fp64(x: torch.Tensor) -> torch.Tensor:
    return functional.silu(x.double()).to(x.dtype)


def silu_chunks(x: torch.Tensor) -> torch.Tensor:
    flat = x.reshape(-1)
    return torch.cat([functional.silu(c) for c in flat.split(97)]).reshape(x.shape)


def silu_no_tail(x: torch.Tensor) -> torch.Tensor:
    """Vectors of 4 elements and no tail loop: the last ``numel % 4`` elements pass through unchanged."""
    flat = x.reshape(-1)
    n = flat.numel() // 4 * 4
    y = flat.clone()
    y[:n] = functional.silu(flat[:n])
    return y.reshape(x.shape)


def through(dtype: torch.dtype, fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``fn`` computed on ``x`` cast to ``dtype``, the result cast back: a precision downgrade."""
    return lambda x: fn(x.to(dtype)).to(x.dtype)


def gelu_erf(x: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (0.5 * xf * (1 + torch.erf(xf / math.sqrt(2)))).to(x.dtype)


# -------------------------------------------------------------------------------------------- losses


def ce(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over the rows whose target is not ``ignore_index`` (-100) of logsumexp − the target's logit."""
    x = logits.float()
    valid = target != -100
    picked = x.gather(-1, torch.where(valid, target, 0).long()[..., None])[..., 0]
    loss = torch.where(valid, torch.logsumexp(x, -1) - picked, torch.zeros_like(picked))
    return loss.sum() / valid.sum().clamp(min=1)


def ce_nll(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return functional.nll_loss(torch.log_softmax(logits.float(), -1), target.long(), ignore_index=-100)


def ce_chunked(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """logsumexp over vocabulary blocks of 64, combined as an online reduction."""
    x = logits.float()
    lse = torch.full(x.shape[:-1], -math.inf, device=x.device)
    for j in range(0, x.shape[-1], 64):
        lse = torch.logaddexp(lse, torch.logsumexp(x[..., j:j + 64], -1))
    valid = target != -100
    picked = x.gather(-1, torch.where(valid, target, 0).long()[..., None])[..., 0]
    return torch.where(valid, lse - picked, torch.zeros_like(lse)).sum() / valid.sum().clamp(min=1)


def ce_target_from_first_call(state: dict[str, Any], kw: dict[str, Any]) -> torch.Tensor:
    """The targets of the first call of each shape reused (a precomputed gather index)."""
    target = state.setdefault(kw["target"].shape, kw["target"].clone())
    return ce(kw["logits"], target)


def ce_lse_by_shape(state: dict[str, Any], kw: dict[str, Any]) -> torch.Tensor:
    """The per-row logsumexp cached by shape; only the picked logits read afresh."""
    logits, target = kw["logits"].float(), kw["target"]
    lse = state.setdefault(logits.shape, torch.logsumexp(logits, -1))
    valid = target != -100
    picked = logits.gather(-1, torch.where(valid, target, 0).long()[..., None])[..., 0]
    return torch.where(valid, lse - picked, torch.zeros_like(lse)).sum() / valid.sum().clamp(min=1)


# -------------------------------------------------------------------------------------------- matmul


def mm_k_no_tail(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A K loop in steps of 8 with no remainder step: right while K is a multiple of 8."""
    k = a.shape[-1] // 8 * 8
    return a[..., :k] @ b[:k]


def mm_b_by_shape(state: dict[str, Any], kw: dict[str, Any]) -> torch.Tensor:
    """The weight ``b`` of the first call of each shape kept (a pre-packed weight never refreshed)."""
    b = state.setdefault((kw["b"].shape, kw["b"].dtype), kw["b"].clone())
    return kw["a"] @ b


def mm_split_k(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    h = a.shape[-1] // 2
    return a[..., :h] @ b[:h] + a[..., h:] @ b[h:]


def mm_row_blocks(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.cat([blk @ b for blk in a.split(5)])


def _cheats() -> list[Entry]:
    def e(name: str, kind: str, spec: Callable[[], OpSpec], *by: str) -> Entry:
        return Entry(name, kind, spec, by)

    shape_key = lambda **kw: tuple((k, tuple(v.shape), v.dtype) for k, v in kw.items()  # noqa: E731
                                   if isinstance(v, torch.Tensor))
    pointer_key = lambda **kw: tuple((k, v.data_ptr(), tuple(v.shape), v.dtype) for k, v in kw.items()  # noqa: E731
                                     if isinstance(v, torch.Tensor))
    return [
        # stale results cached by shape
        e("softmax-cache-by-shape", "stale by shape",
          lambda: on("softmax", memo_by(shape_key, lambda x: torch.softmax(x, -1)), SOFTMAX),
          "fresh values", "fresh tensors"),
        e("rms_norm-cache-by-shape", "stale by shape",
          lambda: on("rms_norm", memo_by(shape_key, rms), RMS), "fresh values", "fresh tensors"),
        e("cross_entropy-lse-by-shape", "stale by shape",
          lambda: on("cross_entropy", first_call_state(ce_lse_by_shape), CE), "fresh values", "fresh tensors"),
        # stale results cached by address
        e("softmax-cache-by-pointer", "stale by pointer",
          lambda: on("softmax", memo_by(pointer_key, lambda x: torch.softmax(x, -1)), SOFTMAX), "fresh values"),
        e("silu-cache-by-pointer", "stale by pointer",
          lambda: on("silu", memo_by(pointer_key, lambda x: functional.silu(x)), SILU), "fresh values"),
        e("matmul-cache-by-pointer", "stale by pointer",
          lambda: on("matmul", memo_by(pointer_key, lambda a, b: a @ b), MATMUL), "fresh values"),
        e("rms_norm-weight-cache-by-pointer", "stale by pointer",
          lambda: on("rms_norm", first_call_state(rms_weight_cache_by_pointer), RMS), "fresh values"),
        # an output that does not follow an input
        e("matmul-b-kept-by-shape", "ignores an input",
          lambda: on("matmul", first_call_state(mm_b_by_shape), MATMUL), "fresh values", "dependence"),
        e("cross_entropy-target-from-first-call", "ignores an input",
          lambda: on("cross_entropy", first_call_state(ce_target_from_first_call), CE), "fresh tensors"),
        e("layer_norm-bias-kept-by-shape", "ignores an input",
          lambda: on("layer_norm", first_call_state(
              lambda s, kw: layer_norm(kw["x"], kw["weight"], s.setdefault(kw["bias"].shape, kw["bias"].clone()),
                                       kw["eps"])), LAYER_NORM), "fresh values", "dependence"),
        # a lower precision than the dtype promises
        e("softmax-bf16-inputs", "precision", lambda: on("softmax", softmax_bf16_inputs, SOFTMAX),
          "plain"),
        e("rms_norm-bf16-math", "precision", lambda: on("rms_norm", rms_bf16_math, RMS), "plain"),
        e("silu-bf16", "precision", lambda: on("silu", through(BF16, functional.silu), SILU), "plain"),
        e("silu-fp16-math", "precision", lambda: on("silu", through(F16, silu), SMALL), "plain"),
        e("silu-output-via-bf16", "precision",
          lambda: on("silu", lambda x: functional.silu(x).to(BF16).to(x.dtype), SMALL), "plain"),
        e("silu-tf32-inputs", "precision", lambda: on("silu", lambda x: functional.silu(tf32(x)), SMALL),
          "plain"),
        e("gelu-bf16", "precision", lambda: on("gelu", through(BF16, functional.gelu), SMALL), "plain"),
        e("matmul-tf32", "precision", lambda: on("matmul", lambda a, b: tf32(a.float()) @ tf32(b.float())
                                                 if a.dtype == F32 else a @ b, MATMUL), "plain"),
        # sizes hard-coded
        e("softmax-no-tail-mask", "hard-coded shape", lambda: on("softmax", softmax_no_tail, SOFTMAX),
          "other shapes"),
        e("rms_norm-padded-block-mean", "hard-coded shape", lambda: on("rms_norm", rms_padded_block_mean, RMS),
          "other shapes"),
        e("silu-no-tail", "hard-coded shape", lambda: on("silu", silu_no_tail, SILU), "other shapes"),
        e("matmul-k-no-tail", "hard-coded shape", lambda: on("matmul", mm_k_no_tail, MATMUL), "other shapes"),
        # only part of the output computed
        e("softmax-grid-from-first-call", "partial computation",
          lambda: on("softmax", first_call_state(softmax_grid_from_first_call), SOFTMAX), "other shapes"),
        e("rms_norm-half-rows-cached", "partial computation",
          lambda: on("rms_norm", first_call_state(rms_half_rows_cached), RMS), "fresh values", "fresh tensors"),
        # the reference's own output returned
        e("softmax-reference-thief", "reference's output", lambda: reference_thief("softmax", SOFTMAX),
          "fresh values"),
        e("matmul-reference-thief", "reference's output", lambda: reference_thief("matmul", MATMUL),
          "fresh values"),
        # an input overwritten (in place where the spec declares none)
        e("softmax-in-place", "writes an input", lambda: on("softmax", softmax_in_place, SOFTMAX), "plain"),
        e("rms_norm-in-place", "writes an input", lambda: on("rms_norm", rms_in_place, RMS), "plain"),
    ]


def _honest() -> list[Entry]:
    def h(name: str, kind: str, spec: Callable[[], OpSpec]) -> Entry:
        return Entry(name, kind, spec)

    return [
        h("softmax-kernelworks", "our Triton kernel", lambda: on("softmax", subject("softmax"), SOFTMAX)),
        h("softmax-in-input-dtype", "lower-precision intermediates the dtype allows",
          lambda: on("softmax", softmax_manual, SOFTMAX)),
        h("softmax-via-log-softmax", "other formula", lambda: on("softmax", softmax_via_log, SOFTMAX)),
        h("softmax-fp64", "stricter precision", lambda: on("softmax", softmax_fp64, SOFTMAX)),
        h("softmax-online-blocks", "reordered reduction", lambda: on("softmax", softmax_online, SOFTMAX)),
        h("softmax-reused-out-buffer", "output buffer reused",
          lambda: on("softmax", first_call_state(softmax_out_buffer), SOFTMAX)),
        h("softmax-row-blocks", "different blocking", lambda: on("softmax", softmax_row_blocks, SOFTMAX)),
        h("rms_norm-kernelworks", "our Triton kernel", lambda: on("rms_norm", subject("rms_norm"), RMS)),
        h("rms_norm-fp32", "other formula", lambda: on("rms_norm", rms, RMS)),
        h("rms_norm-fp64", "stricter precision", lambda: on("rms_norm", rms_fp64, RMS)),
        h("rms_norm-weight-cache-by-version", "legal cache",
          lambda: on("rms_norm", first_call_state(rms_weight_cache_by_version), RMS)),
        h("rms_norm-row-blocks", "different blocking", lambda: on("rms_norm", rms_row_blocks, RMS)),
        h("rms_norm-split-sum", "reordered reduction", lambda: on("rms_norm", rms_split_sum, RMS)),
        h("layer_norm-two-pass", "other formula", lambda: on("layer_norm", layer_norm, LAYER_NORM)),
        h("silu-kernelworks", "our Triton kernel", lambda: on("silu", subject("silu"), SILU)),
        h("silu-sigmoid", "other formula", lambda: on("silu", silu, SILU)),
        h("silu-exp", "other formula", lambda: on("silu", silu_exp, SILU)),
        h("silu-fp64", "stricter precision", lambda: on("silu", silu_fp64, SILU)),
        h("silu-chunks", "different blocking", lambda: on("silu", silu_chunks, SILU)),
        h("gelu-erf-fp32", "other formula", lambda: on("gelu", gelu_erf, SMALL)),
        h("cross_entropy-lse-minus-logit", "other formula", lambda: on("cross_entropy", ce, CE)),
        h("cross_entropy-log-softmax-nll", "other formula", lambda: on("cross_entropy", ce_nll, CE)),
        h("cross_entropy-chunked-lse", "reordered reduction", lambda: on("cross_entropy", ce_chunked, CE)),
        h("matmul-einsum", "other formula", lambda: on("matmul", lambda a, b: torch.einsum("mk,kn->mn", a, b),
                                                        MATMUL)),
        h("matmul-split-k", "reordered reduction", lambda: on("matmul", mm_split_k, MATMUL)),
        h("matmul-fp64", "stricter precision", lambda: on("matmul", lambda a, b: (a.double() @ b.double())
                                                          .to(a.dtype), MATMUL)),
        h("matmul-row-blocks", "different blocking", lambda: on("matmul", mm_row_blocks, MATMUL)),
        h("matmul-transposed", "other formula", lambda: on("matmul", lambda a, b: (b.t() @ a.t()).t(), MATMUL)),
        h("matmul-weight-cache-by-version", "legal cache", lambda: on("matmul", first_call_state(
            lambda s, kw: kw["a"] @ s.setdefault((kw["b"].data_ptr(), kw["b"]._version, kw["b"].shape,
                                                  kw["b"].dtype), kw["b"].clone())),
            MATMUL)),
    ]


CHEATS = _cheats()
HONEST = _honest()
ENTRIES = CHEATS + HONEST
