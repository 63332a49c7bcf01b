"""The normalisation family's specs: ``layer_norm`` and ``rms_norm`` (registered at import).

Case params: ``rows``, ``hidden`` (``x`` is ``[*batch, rows, hidden]``), ``batch`` (optional leading dims),
``residual`` (pass a residual: the op returns ``(y, x + residual)``), ``offset`` (RMSNorm's
``offset + weight``; 1.0 is Gemma), ``weight`` / ``bias`` (``"same"``: the case dtype, ``"fp32"``, or
``"none"``), ``pad`` (``row_padding``: rows carved out of longer rows, a non-contiguous view), ``scale``
(input magnitude), ``shift`` (added to x: a large mean over a small spread tests LayerNorm's variance),
``special`` (``"zero"``: some rows all zero, RMSNorm's variance-0 case; ``"const"``: some rows constant,
LayerNorm's).
"""

from __future__ import annotations

import math

import torch

from kernelworks.ops.norm import api, forward, reference
from kernelworks.spec import Case, Cost, OpSpec, Provider, case, randn, register

_F32, _F16, _BF16 = torch.float32, torch.float16, torch.bfloat16
_LOOPED = 1000
"""Past the interpreter's one-pass limits (512): the looped forward and split backward on the CPU; one pass
on a GPU."""

# ------------------------------------------------------------------------------------------ input makers


def _param(case: Case, key: str, default: str, hidden: int, device: torch.device, *, mean: float,
           spread: float) -> torch.Tensor | None:
    kind = case.get(key, default)
    if kind == "none":
        return None
    dtype = torch.float32 if kind == "fp32" else case.dtype
    return (mean + spread * torch.randn(hidden, device=device)).to(dtype)


def _inputs(case: Case, device: torch.device, *, rms: bool) -> dict:
    """``x`` ~ N(shift, scale²), weight ~ N(1, 0.5²) (N(0, 0.5²) with an offset, Gemma's stored ``w − 1``),
    bias ~ N(0, 0.5²), residual ~ N(0, 1); never zeros except the planted ``special`` rows."""
    shape = (*case.get("batch", ()), case["rows"], case["hidden"])
    pad = case.get("pad", 0)
    x = randn(shape, case, device, scale=case.get("scale", 1.0), row_padding=pad)
    if case.get("shift"):
        x += case["shift"]
    offset = case.get("offset", 0.0)
    inputs: dict = {"x": x}
    inputs["weight"] = _param(case, "weight", "same", shape[-1], device, mean=0.0 if offset else 1.0, spread=0.5)
    if not rms:
        inputs["bias"] = _param(case, "bias", "same", shape[-1], device, mean=0.0, spread=0.5)
    inputs["eps"] = 1e-6 if rms else 1e-5
    residual = randn(shape, case, device, row_padding=pad) if case.get("residual") else None
    special = case.get("special")
    if special:
        # the first and every fifth row: zero (RMSNorm: mean square 0) or constant (LayerNorm: variance 0);
        # with a residual both parts are set so that h = x + residual is too. 0.75 + 0.5 is exact in bf16.
        x[..., ::5, :] = 0.0 if special == "zero" else 0.75
        if residual is not None:
            residual[..., ::5, :] = 0.0 if special == "zero" else 0.5
    if residual is not None:
        inputs["residual"] = residual
    if offset:
        inputs["offset"] = offset
    return inputs


def _rms_inputs(case: Case, device: torch.device) -> dict:
    return _inputs(case, device, rms=True)


def _ln_inputs(case: Case, device: torch.device) -> dict:
    return _inputs(case, device, rms=False)


# ------------------------------------------------------------------------------------------------ cases


def _check_cases(rms: bool) -> list[Case]:
    """Tiny CPU cases (≲ 20k elements) and a few GPU ones; both spec share the shapes, each adds its own."""
    special = "zero" if rms else "const"
    cases = [
        case("1x127", _F32, rows=1, hidden=127, tags=("quick",)),          # batch 1: a single odd row
        case("5x3", _F32, rows=5, hidden=3),
        case("3x7", _F16, rows=3, hidden=7),
        case("13x127", _BF16, rows=13, hidden=127, tags=("quick",)),
        case("2x3x64", _F32, batch=(2,), rows=3, hidden=64),             # leading dims merged into rows
        case("37x16", _BF16, rows=37, hidden=16),                        # many short rows per program
        case("9x100-strided", _BF16, rows=9, hidden=100, pad=28),        # row stride 128 != 100
        case(f"4x{_LOOPED}", _F32, rows=4, hidden=_LOOPED, tags=("quick",)),
        case(f"4x{_LOOPED}-strided", _F16, rows=4, hidden=_LOOPED, pad=24),
        case(f"3x{_LOOPED}", _BF16, rows=3, hidden=_LOOPED),
        case("13x127-res", _BF16, rows=13, hidden=127, residual=True),
        case("7x100-res-strided", _F16, rows=7, hidden=100, residual=True, pad=28),
        case(f"3x{_LOOPED}-res", _F32, rows=3, hidden=_LOOPED, residual=True),
        case(f"3x{_LOOPED}-res", _BF16, rows=3, hidden=_LOOPED, residual=True),
        case("8x256-w32", _BF16, rows=8, hidden=256, weight="fp32", bias="fp32"),  # fp32 params, bf16 x
        case("6x300-scale1e3", _F16, rows=6, hidden=300, scale=1e3),
        case("6x300-scale1e3", _BF16, rows=6, hidden=300, scale=1e3),
        case(f"6x300-{special}", _F32, rows=6, hidden=300, special=special),
        case(f"6x300-{special}-res", _BF16, rows=6, hidden=300, special=special, residual=True),
        case(f"6x{_LOOPED}-{special}", _F32, rows=6, hidden=_LOOPED, special=special),
        # GPU only: a Mistral/Llama-2-13B row, a Llama-3 MLP-width row, the largest supported
        case("4x5120", _BF16, rows=4, hidden=5120, tags=("gpu",)),
        case("4x14336-res", _BF16, rows=4, hidden=14336, residual=True, tags=("gpu",)),
        case("64x8192-w32", _BF16, rows=64, hidden=8192, weight="fp32", bias="fp32", tags=("gpu",)),
        case("3x65536", _BF16, rows=3, hidden=65536, tags=("gpu",)),
        case("3x65536-res", _F32, rows=3, hidden=65536, residual=True, tags=("gpu",)),
        case("300x4096-res", _BF16, rows=300, hidden=4096, residual=True, tags=("gpu",)),  # > one wave of programs
    ]
    if rms:
        cases += [
            case("6x64-gemma", _BF16, rows=6, hidden=64, offset=1.0),
            case(f"4x{_LOOPED}-gemma-res", _BF16, rows=4, hidden=_LOOPED, offset=1.0, residual=True),
            case("5x64-noweight", _F32, rows=5, hidden=64, weight="none"),
        ]
    else:
        cases += [
            case("5x64-noaffine", _F32, rows=5, hidden=64, weight="none", bias="none"),
            case("5x64-nobias", _BF16, rows=5, hidden=64, bias="none"),
            case("5x64-noweight", _F16, rows=5, hidden=64, weight="none"),
            # mean 100 over a spread of 1: E[h²] − E[h]² in fp32 would lose most of the variance
            case("6x300-shift100", _F32, rows=6, hidden=300, shift=100.0),
            case(f"3x{_LOOPED}-shift100", _F32, rows=3, hidden=_LOOPED, shift=100.0),
        ]
    return cases


def _bench_cases(rms: bool) -> list[Case]:
    """Llama-3 8B (hidden 4096) and 70B (8192) at 4096 and 16384 tokens, bf16, with and without residual."""
    out = []
    for model, hidden in (("llama3_8b", 4096), ("llama3_70b", 8192)):
        for tokens in (4096, 16384):
            for res in (False, True):
                name = f"{model}-{tokens // 1024}k" + ("-res" if res else "")
                tags = ("gpu", "quick") if name in ("llama3_8b-16k", "llama3_8b-16k-res") else ("gpu",)
                out.append(case(name, _BF16, rows=tokens, hidden=hidden, residual=res, tags=tags))
    return out


# ------------------------------------------------------------------------------------------------- cost


def _param_bytes(case: Case, key: str) -> int:
    kind = case.get(key, "same")
    return 0 if kind == "none" else case["hidden"] * (4 if kind == "fp32" else case.itemsize)


def _cost(rms: bool):
    def cost(case: Case, mode: str) -> Cost:
        n = case["rows"] * case["hidden"] * math.prod(case.get("batch", ()))
        rows = n // case["hidden"]
        res = bool(case.get("residual"))
        params = _param_bytes(case, "weight") + (0 if rms else _param_bytes(case, "bias"))
        if mode == "fwd":
            # read x (+ residual), write y (+ h); read the parameters. (The fp32 stats, 4-8 bytes a row,
            # are the backward's saving, not a necessity.) FLOPs: square, sum, scale, weight (+ center,
            # bias for LayerNorm), + the add.
            flops = (4 if rms else 7) + (1 if res else 0)
            return Cost(flops=flops * n, bytes=(4 if res else 2) * n * case.itemsize + params)
        # read dy, h (+ dh), write dx; read the stats and parameters, write their gradients
        flops = (9 if rms else 12) + (1 if res else 0)
        stats = rows * 4 * (1 if rms else 2)
        return Cost(flops=flops * n, bytes=(4 if res else 3) * n * case.itemsize + stats + 2 * params)
    return cost


# ------------------------------------------------------------------------------------------- providers


def _liger_rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6,
                    residual: torch.Tensor | None = None, offset: float = 0.0):
    # casting_mode "gemma": everything in fp32, one rounding at the end — the same math as ours and the
    # reference. in_place=False: Liger's default writes dx into dy, which the bench reuses.
    if weight is None:
        raise NotImplementedError("Liger's RMSNorm needs a weight")
    if residual is None:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        return LigerRMSNormFunction.apply(x, weight, eps, offset, "gemma", False)
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

    return LigerFusedAddRMSNormFunction.apply(x, residual, weight, eps, offset, "gemma", False)


def _liger_layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                      eps: float = 1e-5, residual: torch.Tensor | None = None):
    # Liger has no fused add + LayerNorm: with a residual it runs the add first (the unfused baseline the
    # fused op is meant to beat). Its kernels need both parameters.
    if weight is None or bias is None:
        raise NotImplementedError("Liger's LayerNorm needs a weight and a bias")
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction

    if residual is None:
        return LigerLayerNormFunction.apply(x, weight, bias, eps)
    h = x + residual
    return LigerLayerNormFunction.apply(h, weight, bias, eps), h


def _add_then_norm(norm):
    """Our norm without the fused residual: the add as its own eager pass, then the norm of its result —
    the baseline the fused residual must beat by the pass it saves."""
    def unfused(x: torch.Tensor, *args, residual: torch.Tensor | None = None, **kwargs):
        if residual is None:
            raise NotImplementedError("only residual cases: without one there is nothing to fuse")
        h = x + residual
        return norm(h, *args, **kwargs), h
    return unfused


def _providers(ours, liger) -> dict[str, Provider]:
    return {"kernelworks": Provider("kernelworks", ours),
            "kw add+norm": Provider("kw add+norm", _add_then_norm(ours)),
            "liger": Provider("liger", liger, requires=("liger_kernel",), gpu_only=True)}


# ----------------------------------------------------------------------------------------------- specs

RMS_NORM_SPEC = register(OpSpec(
    name="rms_norm",
    description="RMSNorm over the last dim: y = h/√(mean(h²) + eps)·(offset + w), h = x (+ residual, returned)",
    reference=reference.rms_norm,
    inputs=_rms_inputs,
    check_cases=_check_cases(rms=True),
    bench_cases=_bench_cases(rms=True),
    cost=_cost(rms=True),
    providers=_providers(api.rms_norm, _liger_rms_norm),
    grad_inputs=("x", "weight", "residual"),
    # the tuner's space: the forward's rows per program and warps, or the looped kernel's tile and warps
    configs=forward.CONFIGS,
    configured=lambda config: forward.FORCED_PLAN.forced(dict(config)),
))

LAYER_NORM_SPEC = register(OpSpec(
    name="layer_norm",
    description="LayerNorm over the last dim: y = (h − μ)/√(σ² + eps)·w + b, h = x (+ residual, returned)",
    reference=reference.layer_norm,
    inputs=_ln_inputs,
    check_cases=_check_cases(rms=False),
    bench_cases=_bench_cases(rms=False),
    cost=_cost(rms=False),
    providers=_providers(api.layer_norm, _liger_layer_norm),
    grad_inputs=("x", "weight", "bias", "residual"),
))

SPECS = (RMS_NORM_SPEC, LAYER_NORM_SPEC)
