"""The loss family's specs: ``cross_entropy`` and ``fused_linear_cross_entropy`` (registered at import).

Cross-entropy case params: ``rows``, ``vocab``, ``batch`` (leading dims: logits ``[*batch, rows, vocab]``),
``pad`` (``row_padding``: a strided view), ``ignore`` (every 4th row, from the second, is ``ignore_index``;
default on), ``all_ignored``, ``extreme`` (±1e4 planted in every row, targets on them), ``scale`` (logit
magnitude), ``int32`` (target dtype), the options ``label_smoothing``, ``reduction``, ``z_loss``,
``softcap``, ``loss_dtype`` (the returned loss's dtype; float32 when absent), and ``train`` (bench cases:
logits require grad, so the timed forward is the training forward that also writes the gradient).

Bench modes and what they time: ``fwd`` with ``train`` is the forward of a training step — loss and
gradient, 2 reads + 1 write of the logits (Liger's forward does the same work); ``bwd`` is only the
scaling of the stored gradient by a random ``grad_output`` (a plain ``loss.backward()`` with
``grad_output = 1`` skips even that). ``fwd`` + ``bwd`` is what compares with eager PyTorch's and
torch.compile's forward + backward.
"""

from __future__ import annotations

import torch

from kernelworks.ops.cross_entropy import kernels, reference
from kernelworks.ops.cross_entropy.api import cross_entropy
from kernelworks.ops.cross_entropy.fused_linear import fused_linear_cross_entropy
from kernelworks.spec import Case, Cost, OpSpec, Provider, case, randn, register

_F32, _F16, _BF16 = torch.float32, torch.float16, torch.bfloat16
IGNORE_INDEX = -100
_OPTIONS = ("label_smoothing", "reduction", "z_loss", "softcap", "loss_dtype")


# ------------------------------------------------------------------------------------------ input makers


def _targets(case: Case, n_rows: int, n_vocab: int, device: torch.device) -> torch.Tensor:
    """Uniform class indices; every 4th row (from the second) ``ignore_index`` unless ``ignore=False``, all
    of them with ``all_ignored``."""
    t = torch.randint(0, n_vocab, (n_rows,), device=device)
    if case.get("all_ignored"):
        t[:] = IGNORE_INDEX
    elif case.get("ignore", True) and n_rows > 1:
        t[1::4] = IGNORE_INDEX
    return t.to(torch.int32) if case.get("int32") else t


def _options(case: Case) -> dict:
    return {k: case[k] for k in _OPTIONS if k in case.params}


def _ce_inputs(case: Case, device: torch.device) -> dict:
    """``logits [*batch, rows, vocab]`` ~ N(0, (2·scale)²), ``target [*batch, rows]``. ``extreme``: +1e4 at
    every 7th column and −1e4 at every 11th, rows' targets alternating between a +1e4, a −1e4 and an
    ordinary column (losses from 0 to ~2e4, exp of −2e4 underflowing)."""
    batch, n_rows, n_vocab = tuple(case.get("batch", ())), case["rows"], case["vocab"]
    logits = randn((*batch, n_rows, n_vocab), case, device, scale=2.0 * case.get("scale", 1.0),
                   row_padding=case.get("pad", 0))
    n = n_rows
    for b in batch:
        n *= b
    target = _targets(case, n, n_vocab, device)
    if case.get("extreme"):
        logits[..., 2::7] = 1e4
        logits[..., 3::11] = -1e4
        flat = target.view(-1)
        pick = torch.arange(n, device=device) % 3
        hot = min(2, n_vocab - 1)
        cold = 3 if n_vocab > 3 else hot
        valid = flat != IGNORE_INDEX
        flat[valid & (pick == 0)] = hot
        flat[valid & (pick == 1)] = cold
    if case.get("train"):
        logits.requires_grad_(True)
    return {"logits": logits, "target": target.view(*batch, n_rows), **_options(case)}


def _flce_inputs(case: Case, device: torch.device) -> dict:
    """``hidden [tokens, H]`` ~ N(0, 1), ``weight [V, H]`` ~ N(0, 1/H) (logits ~ N(0, 1), as a trained head
    gives), ``bias [V]`` with ``bias=True``, ``target [tokens]``; ``chunk_size``/``accum_dtype`` passed on."""
    n_rows, n_hidden, n_vocab = case["tokens"], case["hidden"], case["vocab"]
    hidden = randn((n_rows, n_hidden), case, device)
    weight = randn((n_vocab, n_hidden), case, device, scale=n_hidden ** -0.5)
    inputs = {"hidden": hidden, "weight": weight, "target": _targets(case, n_rows, n_vocab, device)}
    if case.get("bias"):
        inputs["bias"] = randn((n_vocab,), case, device)
    if case.get("train"):
        for name in ("hidden", "weight", "bias"):
            if name in inputs:
                inputs[name].requires_grad_(True)
    for k in ("chunk_size", "accum_dtype"):
        if k in case.params:
            inputs[k] = case[k]
    return {**inputs, **_options(case)}


# ---------------------------------------------------------------------------------------------- cost


def _ce_cost(case: Case, mode: str) -> Cost:
    """fwd: read the logits once, write the gradient once (the fewest bytes for loss + gradient; ~10 FLOPs
    an element over the two sweeps, +~20 with softcap). bwd: the scaling pass, read + write."""
    n = case["rows"] * case["vocab"]
    for b in case.get("batch", ()):
        n *= b
    if mode == "fwd":
        flops = (10 + (20 if "softcap" in case.params else 0)) * n
        return Cost(flops=flops, bytes=2 * n * case.itemsize)
    return Cost(flops=n, bytes=2 * n * case.itemsize)


def _flce_cost(case: Case, mode: str) -> Cost:
    """fwd: three GEMMs of 2·N·V·H (logits, grad_hidden, grad_weight); the fewest bytes read hidden and
    weight and write their gradients. bwd: scaling grad_hidden and grad_weight, read + write."""
    n, h, v = case["tokens"], case["hidden"], case["vocab"]
    grads = (n * h + v * h) * case.itemsize
    if mode == "fwd":
        return Cost(flops=3 * 2 * n * v * h + 10 * n * v, bytes=2 * grads)
    return Cost(flops=n * h + v * h, bytes=2 * grads)


# ------------------------------------------------------------------------------------------------ cases


def _ce_check_cases() -> list[Case]:
    """Tiny for the CPU interpreter (one-tile rows up to 8 columns there, 32-column tiles to 256, then 256),
    plus GPU-only vocabularies."""
    return [
        case("1x7", _F32, rows=1, vocab=7, tags=("quick",)),       # one row, whole row in one tile
        case("3x33", _F16, rows=3, vocab=33),                       # the loop with a 1-column masked tail
        case("13x1000", _BF16, rows=13, vocab=1000, tags=("quick",)),
        case("13x1000-strided", _F32, rows=13, vocab=1000, pad=24),
        case("2x3x33-batched", _F32, batch=(2,), rows=3, vocab=33, int32=True),
        case("13x33-all_ignored", _F32, rows=13, vocab=33, all_ignored=True),
        case("13x1000-smoothing", _BF16, rows=13, vocab=1000, label_smoothing=0.1),
        case("13x1000-sum", _F32, rows=13, vocab=1000, reduction="sum"),
        case("13x1000-none", _BF16, rows=13, vocab=1000, reduction="none"),
        case("13x1000-loss_bf16", _BF16, rows=13, vocab=1000, loss_dtype=_BF16),  # torch's dtype, on request
        case("13x1000-none-loss_bf16", _BF16, rows=13, vocab=1000, reduction="none", loss_dtype=_BF16),
        case("13x1000-zloss", _F32, rows=13, vocab=1000, z_loss=1e-4),
        case("13x1000-softcap", _BF16, rows=13, vocab=1000, softcap=30.0, scale=10.0),
        case("13x33-all_options", _F32, rows=13, vocab=33, label_smoothing=0.1, z_loss=1e-4, softcap=30.0,
             reduction="none", scale=10.0),
        case("6x300-extreme", _F32, rows=6, vocab=300, extreme=True, tags=("quick",)),
        case("6x300-extreme", _BF16, rows=6, vocab=300, extreme=True, z_loss=1e-4),
        case("6x300-extreme", _F16, rows=6, vocab=300, extreme=True, label_smoothing=0.1),
        case("6x300-extreme-softcap", _F32, rows=6, vocab=300, extreme=True, softcap=30.0),
        # GPU only: the kernels' real tiles (one tile to 32768 columns, looped past it)
        case("64x32000", _BF16, rows=64, vocab=32000, tags=("gpu",)),
        case("8x128256", _BF16, rows=8, vocab=128256, tags=("gpu",)),
        case("4x256000", _BF16, rows=4, vocab=256000, tags=("gpu",)),
        case("8x128256-all_options", _BF16, rows=8, vocab=128256, label_smoothing=0.1, z_loss=1e-4,
             softcap=30.0, reduction="none", scale=10.0, tags=("gpu",)),
        case("4x65537-extreme", _F32, rows=4, vocab=65537, extreme=True, tags=("gpu",)),
    ]


def _ce_bench_cases() -> list[Case]:
    """bf16, no ignored rows, training forward (``train``): Llama-2 (32000), Llama-3 (128256), Gemma
    (256000) vocabularies at 4k–16k tokens."""
    shapes = [(32000, 8192, True), (128256, 8192, True), (32000, 16384, False), (128256, 16384, False),
              (256000, 4096, False), (256000, 8192, False)]
    return [case(f"{vocab}x{tokens}", _BF16, rows=tokens, vocab=vocab, ignore=False, train=True,
                 tags=("gpu", "quick") if quick else ("gpu",)) for vocab, tokens, quick in shapes]


def _flce_check_cases() -> list[Case]:
    return [
        case("13x16x40", _F32, tokens=13, hidden=16, vocab=40, tags=("quick",)),
        case("13x16x40-chunked", _BF16, tokens=13, hidden=16, vocab=40, chunk_size=4, tags=("quick",)),
        case("13x16x40-bias", _F16, tokens=13, hidden=16, vocab=40, bias=True, chunk_size=8),
        case("1x16x7", _F32, tokens=1, hidden=16, vocab=7),
        case("13x16x300-all_options", _F32, tokens=13, hidden=16, vocab=300, chunk_size=5, label_smoothing=0.1,
             z_loss=1e-4, softcap=30.0, bias=True),
        case("13x16x40-none", _BF16, tokens=13, hidden=16, vocab=40, chunk_size=4, reduction="none", bias=True),
        case("13x16x40-sum", _F32, tokens=13, hidden=16, vocab=40, reduction="sum"),
        case("13x16x40-accum_bf16", _BF16, tokens=13, hidden=16, vocab=40, chunk_size=4, accum_dtype=_BF16),
        case("13x16x40-loss_bf16", _BF16, tokens=13, hidden=16, vocab=40, chunk_size=4, loss_dtype=_BF16),
        case("8x16x40-all_ignored", _F32, tokens=8, hidden=16, vocab=40, all_ignored=True),
        case("2048x4096x128256", _BF16, tokens=2048, hidden=4096, vocab=128256, chunk_size=768, tags=("gpu",)),
    ]


def _flce_bench_cases() -> list[Case]:
    """bf16 training forward: Llama-3 8B's head at 16k tokens (the default fp32 accumulation, and the
    weight-dtype accumulation that meets the memory target), and Llama-2 7B's at 8k."""
    common = {"ignore": False, "train": True}
    return [
        case("llama3_8b-16k", _BF16, tokens=16384, hidden=4096, vocab=128256, tags=("gpu",), **common),
        case("llama3_8b-16k-accum_bf16", _BF16, tokens=16384, hidden=4096, vocab=128256, accum_dtype=_BF16,
             tags=("gpu",), **common),
        case("llama2_7b-8k", _BF16, tokens=8192, hidden=4096, vocab=32000, tags=("gpu", "quick"), **common),
    ]


# ---------------------------------------------------------------------------------------------- providers


def _liger_cross_entropy(logits: torch.Tensor, target: torch.Tensor, *, ignore_index: int = IGNORE_INDEX,
                         label_smoothing: float = 0.0, reduction: str = "mean", z_loss: float = 0.0,
                         softcap: float | None = None, loss_dtype: torch.dtype | None = None) -> torch.Tensor:
    # Careful: with logits.requires_grad Liger writes the gradient over the logits (its memory trick), so
    # the caller's tensor holds gradients afterwards. Timing is unaffected; its values are then not inputs.
    # The loss is cast to ours (float32 unless loss_dtype): a scalar, or N values, costs nothing.
    from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction

    x = logits.reshape(-1, logits.shape[-1])
    loss = LigerCrossEntropyFunction.apply(x, target.reshape(-1), None, ignore_index, z_loss, label_smoothing,
                                           reduction, softcap, False, False, False)[0]
    loss = loss.reshape(target.shape) if reduction == "none" else loss
    return loss.to(loss_dtype or torch.float32)


def _liger_fused_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, *,
                                      bias: torch.Tensor | None = None, ignore_index: int = IGNORE_INDEX,
                                      label_smoothing: float = 0.0, reduction: str = "mean",
                                      z_loss: float = 0.0, softcap: float | None = None,
                                      chunk_size: int | None = None, accum_dtype: torch.dtype = torch.float32,
                                      loss_dtype: torch.dtype | None = None) -> torch.Tensor:
    # Liger picks its own chunks (~N·H logits elements each, chunk_size is not forwarded); its accumulator
    # follows ours: fp32, or (accum_dtype=None) the weight's dtype. Its loss is cast to ours (float32 unless
    # loss_dtype).
    from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction

    liger_accum = None if accum_dtype == weight.dtype else accum_dtype
    loss = LigerFusedLinearCrossEntropyFunction.apply(
        hidden.reshape(-1, hidden.shape[-1]), weight, target.reshape(-1), bias, None, ignore_index, z_loss,
        label_smoothing, reduction, softcap, False, liger_accum)[0]
    loss = loss.reshape(target.shape) if reduction == "none" else loss
    return loss.to(loss_dtype or torch.float32)


def _liger(fn) -> dict[str, Provider]:
    return {"liger": Provider("liger", fn, requires=("liger_kernel",), gpu_only=True)}


def _ce_reference(logits: torch.Tensor, target: torch.Tensor, **options) -> torch.Tensor:
    return reference.cross_entropy(logits, target, **options)


def _flce_reference(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, *,
                    chunk_size: int | None = None, accum_dtype: torch.dtype | None = None,
                    **options) -> torch.Tensor:
    """The unfused math; ``chunk_size`` and ``accum_dtype`` (memory knobs of ours) do not change it."""
    return reference.fused_linear_cross_entropy(hidden, weight, target, **options)


# ------------------------------------------------------------------------------------------------- specs

CROSS_ENTROPY_SPEC = register(OpSpec(
    name="cross_entropy",
    description="cross-entropy over class indices (ignore_index, label smoothing, z-loss, softcap), "
                "gradient written by the forward",
    reference=_ce_reference,
    inputs=_ce_inputs,
    check_cases=_ce_check_cases(),
    bench_cases=_ce_bench_cases(),
    cost=_ce_cost,
    step_cost=lambda case: _ce_cost(case, "fwd"),  # the forward writes the gradient; the step needs no more
    providers={"kernelworks": Provider("kernelworks", cross_entropy), **_liger(_liger_cross_entropy)},
    grad_inputs=("logits",),
    bench_step=True,
    configs=kernels.CONFIGS,  # the forward kernel's tile and warps (fused_linear_cross_entropy runs it too)
    configured=lambda config: kernels.FORCED_PLAN.forced(dict(config)),
))

FUSED_LINEAR_CROSS_ENTROPY_SPEC = register(OpSpec(
    name="fused_linear_cross_entropy",
    description="LM head + cross-entropy chunked over tokens, the logits never materialised; gradients "
                "written by the forward",
    reference=_flce_reference,
    inputs=_flce_inputs,
    check_cases=_flce_check_cases(),
    bench_cases=_flce_bench_cases(),
    cost=_flce_cost,
    step_cost=lambda case: _flce_cost(case, "fwd"),  # the forward computes both gradients
    providers={"kernelworks": Provider("kernelworks", fused_linear_cross_entropy),
               **_liger(_liger_fused_linear_cross_entropy)},
    grad_inputs=("hidden", "weight", "bias"),
    bench_step=True,
))

SPECS = (CROSS_ENTROPY_SPEC, FUSED_LINEAR_CROSS_ENTROPY_SPEC)
