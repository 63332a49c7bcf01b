"""The activation family's specs: gelu, silu, swiglu, geglu and the gated MLP (registered at import).

Case params: ``shape`` (of ``x``, or of ``gate``/``up`` and the output for the gated ops), ``packed``
(gated ops: one ``[..., 2H]`` input instead of two ``[..., H]``), ``approximate`` (gelu, geglu), ``scale``
(input magnitude; 30 saturates σ, erf and tanh) and ``pad`` (``row_padding``: rows carved out of longer
rows, so the row stride differs from the row length).
"""

from __future__ import annotations

import math

import torch

from kernelworks.ops.activation import api, mlp, reference
from kernelworks.spec import Case, Cost, OpSpec, Provider, case, randn, register

_F32, _F16, _BF16 = torch.float32, torch.float16, torch.bfloat16

# (name, shape, dtype, extra params, tags): the checklist every op of the family runs. Elements per case
# stay under ~20k so the CPU interpreter gets through them; "gpu" cases are the large ones.
_CHECK_SHAPES = [
    ("row1", (1, 127), _F32, {}, ("quick",)),           # batch 1, a single odd row
    ("odd", (3, 7), _F16, {}, ()),
    ("13x513", (13, 513), _BF16, {}, ()),              # 513 divides no tile
    ("3d", (2, 3, 13), _F32, {}, ()),                  # leading dims merged into rows
    ("vector", (257,), _F16, {}, ()),                  # 1-D input: one row
    ("strided", (7, 100), _BF16, {"pad": 28}, ("quick",)),  # row stride 128 != 100: a non-contiguous view
    ("wide", (2, 5000), _F32, {}, ()),                 # longer than one column block (4096)
    ("extreme", (4, 64), _F32, {"scale": 30.0}, ()),  # |x| up to ~100: σ, erf, tanh saturated
    ("extreme", (4, 64), _BF16, {"scale": 30.0}, ()),
    ("long_rows", (4, 262144), _BF16, {}, ("gpu",)),
    ("tokens", (1024, 14336), _BF16, {}, ("gpu",)),
]


def _check_cases(variants: list[dict]) -> list[Case]:
    """The checklist crossed with ``variants`` (each adds params and a name suffix under key ``_sfx``)."""
    out = []
    for variant in variants:
        params = {k: v for k, v in variant.items() if k != "_sfx"}
        for name, shape, dtype, extra, tags in _CHECK_SHAPES:
            out.append(case(name + variant["_sfx"], dtype, tags=tags, shape=shape, **extra, **params))
    return out


def _bench_cases(shapes: list[tuple[str, tuple[int, ...]]], variants: list[dict],
                 quick: str) -> list[Case]:
    """bf16 model shapes crossed with ``variants``; the case named ``quick`` also runs in ``kw report``."""
    out = []
    for name, shape in shapes:
        for variant in variants:
            full = name + variant["_sfx"]
            params = {k: v for k, v in variant.items() if k != "_sfx"}
            tags = ("gpu", "quick") if full == quick else ("gpu",)
            out.append(case(full, _BF16, tags=tags, shape=shape, **params))
    return out


_BENCH_SHAPES = [("8k", (8192, 8192)), ("llama3_8b_mlp", (16384, 14336))]
"""8192×8192, and the Llama-3-8B MLP activation at 16384 tokens (intermediate size 14336)."""

_APPROX = [{"_sfx": "", "approximate": "none"}, {"_sfx": "_tanh", "approximate": "tanh"}]
_FORMS = [{"_sfx": "", "packed": False}, {"_sfx": "_packed", "packed": True}]

# ------------------------------------------------------------------------------------------ input makers


def _x(case: Case, device: torch.device, shape: tuple[int, ...]) -> torch.Tensor:
    return randn(shape, case, device, scale=case.get("scale", 1.0), row_padding=case.get("pad", 0))


def _unary_inputs(case: Case, device: torch.device) -> dict:
    inputs = {"x": _x(case, device, case["shape"])}
    if "approximate" in case.params:
        inputs["approximate"] = case["approximate"]
    return inputs


def _gated_inputs(case: Case, device: torch.device) -> dict:
    """``{"gate": [..., 2H]}`` (packed; no ``up`` key) or ``{"gate": [..., H], "up": [..., H]}``."""
    shape = case["shape"]
    if case.get("packed", False):
        inputs = {"gate": _x(case, device, (*shape[:-1], 2 * shape[-1]))}
    else:
        inputs = {"gate": _x(case, device, shape),
                  "up": randn(shape, case, device, row_padding=case.get("pad", 0))}
    if "approximate" in case.params:
        inputs["approximate"] = case["approximate"]
    return inputs


# ---------------------------------------------------------------------------------------------- cost

# FLOPs per output element, forward and backward (a transcendental — exp2, erf, a division — counts one;
# the stable tanh about five). silu: −x·log2e, exp2, +1, ÷, ·x = 5; backward adds 1−σ, f(1−σ)+σ, ·dy.
# gelu (erf): ·(1/√2), erf, +1, ·½, ·x = 5; backward adds x², the exp2 term (3), +, ·dy. gelu_tanh: the
# cubic inner (4), tanh (5), +1, ·½x (2) = 12; backward adds 1−t², the derivative of the inner, products.
_FLOPS = {"silu": (5, 9), "gelu": (5, 12), "gelu_tanh": (12, 20)}
_GATE_FLOPS = (1, 2)  # ·up forward; dy·f and ·up backward


def _cost(act_of: dict | str, gated: bool):
    def cost(case: Case, mode: str) -> Cost:
        act = act_of if isinstance(act_of, str) else act_of[case.get("approximate", "tanh")]
        n = math.prod(case["shape"])
        fwd = mode == "fwd"
        flops = _FLOPS[act][0 if fwd else 1] + (_GATE_FLOPS[0 if fwd else 1] if gated else 0)
        # Tensors of n elements crossing DRAM. Ungated: fwd reads x, writes y; bwd reads dy, x, writes dx.
        # Gated: fwd reads gate, up, writes y; bwd reads dy, gate, up, writes dgate, dup.
        tensors = (3 if fwd else 5) if gated else (2 if fwd else 3)
        return Cost(flops=flops * n, bytes=tensors * n * case.itemsize)
    return cost


_GELU_ACT = {"none": "gelu", "tanh": "gelu_tanh"}

# ------------------------------------------------------------------------------------------- providers


def _liger_swiglu(gate: torch.Tensor, up: torch.Tensor | None = None) -> torch.Tensor:
    # Careful: Liger's backward writes the gradients into its saved inputs in place. Strided views (the
    # halves of a packed input) are copied by its ensure_contiguous first, but a contiguous gate/up is
    # overwritten, so a second backward over the same graph sees gradients where the inputs were. Timing
    # is unaffected (same bytes, same FLOPs); values after the first backward are not to be checked.
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    gate, up = reference._split(gate, up)
    return LigerSiLUMulFunction.apply(gate, up)


def _liger_geglu(gate: torch.Tensor, up: torch.Tensor | None = None,
                 approximate: str = "tanh") -> torch.Tensor:
    # Liger's GEGLU is the tanh approximation only: refuse the exact form rather than compute another
    # function. Its backward overwrites its inputs in place, as in _liger_swiglu.
    if approximate != "tanh":
        raise NotImplementedError(f"Liger's GEGLU computes only approximate='tanh', not {approximate!r}")
    from liger_kernel.ops.geglu import LigerGELUMulFunction

    gate, up = reference._split(gate, up)
    return LigerGELUMulFunction.apply(gate, up)


def _ours(fn) -> dict[str, Provider]:
    return {"kernelworks": Provider("kernelworks", fn)}


def _liger(fn) -> dict[str, Provider]:
    return {"liger": Provider("liger", fn, requires=("liger_kernel",), gpu_only=True)}


# ----------------------------------------------------------------------------------------------- specs

GELU_SPEC = register(OpSpec(
    name="gelu",
    description="GELU, exact (erf) or tanh approximation: y = ½x(1 + erf(x/√2))",
    reference=reference.gelu,
    inputs=_unary_inputs,
    check_cases=_check_cases(_APPROX),
    bench_cases=_bench_cases(_BENCH_SHAPES, _APPROX, quick="8k_tanh"),
    cost=_cost(_GELU_ACT, gated=False),
    providers=_ours(api.gelu),
    grad_inputs=("x",),
))

SILU_SPEC = register(OpSpec(
    name="silu",
    description="SiLU: y = x·σ(x)",
    reference=reference.silu,
    inputs=_unary_inputs,
    check_cases=_check_cases([{"_sfx": ""}]),
    bench_cases=_bench_cases(_BENCH_SHAPES, [{"_sfx": ""}], quick="8k"),
    cost=_cost("silu", gated=False),
    providers=_ours(api.silu),
    grad_inputs=("x",),
))

SWIGLU_SPEC = register(OpSpec(
    name="swiglu",
    description="SwiGLU: y = silu(gate)·up, from two [..., H] tensors or one packed [..., 2H] (no up)",
    reference=reference.swiglu,
    inputs=_gated_inputs,
    check_cases=_check_cases(_FORMS),
    bench_cases=_bench_cases(_BENCH_SHAPES, _FORMS, quick="llama3_8b_mlp_packed"),
    cost=_cost("silu", gated=True),
    providers={**_ours(api.swiglu), **_liger(_liger_swiglu)},
    grad_inputs=("gate", "up"),
))

_GEGLU_VARIANTS = [
    {"_sfx": "", "packed": False, "approximate": "tanh"},
    {"_sfx": "_packed", "packed": True, "approximate": "tanh"},
    {"_sfx": "_erf", "packed": False, "approximate": "none"},
    {"_sfx": "_erf_packed", "packed": True, "approximate": "none"},
]

GEGLU_SPEC = register(OpSpec(
    name="geglu",
    description="GeGLU: y = gelu(gate)·up (tanh approximation by default, as Gemma), split or packed input",
    reference=reference.geglu,
    inputs=_gated_inputs,
    check_cases=_check_cases(_GEGLU_VARIANTS),
    # Gemma-2 9B's MLP has the same intermediate size as Llama-3 8B (14336).
    bench_cases=_bench_cases([("8k", (8192, 8192)), ("gemma2_9b_mlp", (16384, 14336))], _GEGLU_VARIANTS[:3],
                             quick="gemma2_9b_mlp_packed"),
    cost=_cost(_GELU_ACT, gated=True),
    providers={**_ours(api.geglu), **_liger(_liger_geglu)},
    grad_inputs=("gate", "up"),
))

# ------------------------------------------------------------------------------------------- gated MLP

# (name, tokens, hidden, intermediate, dtype, params, tags). Tiny for the interpreter; "gpu": model shapes.
_MLP_CASES = [
    ("tiny", 5, 16, 24, _F32, {}, ("quick",)),
    ("3d", (2, 3), 16, 40, _F32, {}, ()),                       # [batch, seq, H] input
    ("odd", 7, 24, 40, _F16, {}, ()),
    ("geglu", 6, 16, 32, _F32, {"activation": "geglu"}, ()),
    ("geglu_erf", 6, 16, 32, _F32, {"activation": "geglu", "approximate": "none"}, ()),
    ("bf16", 9, 32, 48, _BF16, {}, ()),
    ("llama3_8b", 8192, 4096, 14336, _BF16, {}, ("gpu", "quick")),
    ("qwen3_8b", 8192, 4096, 12288, _BF16, {}, ("gpu",)),
    ("gemma2_9b", 4096, 3584, 14336, _BF16, {"activation": "geglu"}, ("gpu",)),
]


def _mlp_cases(gpu_only: bool = False) -> list[Case]:
    return [case(name, dtype, tags=tags, tokens=tokens, hidden=hidden, inner=inner, **params)
            for name, tokens, hidden, inner, dtype, params, tags in _MLP_CASES if "gpu" in tags or not gpu_only]


def _mlp_inputs(case: Case, device: torch.device) -> dict:
    """``x [*tokens, H]`` ~ N(0, 1); weights ~ N(0, 1/fan_in), so gate, up and y stay O(1) as in a trained
    layer."""
    tokens = case["tokens"] if isinstance(case["tokens"], tuple) else (case["tokens"],)
    hidden, inner = case["hidden"], case["inner"]
    inputs = {"x": randn((*tokens, hidden), case, device),
              "gate_weight": randn((inner, hidden), case, device, scale=hidden ** -0.5),
              "up_weight": randn((inner, hidden), case, device, scale=hidden ** -0.5),
              "down_weight": randn((hidden, inner), case, device, scale=inner ** -0.5)}
    for option in ("activation", "approximate"):
        if option in case.params:
            inputs[option] = case[option]
    return inputs


def _mlp_cost(case: Case, mode: str) -> Cost:
    """Three GEMMs forward (2·N·H·I FLOPs each) and six backward (one more elementwise pass: the
    recomputed activation); bytes: the weights, x, gate, up and y once each way (GEMM-bound either way)."""
    tokens = case["tokens"] if isinstance(case["tokens"], tuple) else (case["tokens"],)
    n, hidden, inner = math.prod(tokens), case["hidden"], case["inner"]
    gemms = 3 if mode == "fwd" else 6
    weights = 3 * hidden * inner
    acts = (2 * n * hidden + 3 * n * inner) if mode == "fwd" else (3 * n * hidden + 6 * n * inner)
    return Cost(flops=gemms * 2 * n * hidden * inner, bytes=(weights * (1 if mode == "fwd" else 2) + acts)
                * case.itemsize)


GATED_MLP_SPEC = register(OpSpec(
    name="gated_mlp",
    description="gated MLP down(f(x·Wgᵀ)·(x·Wuᵀ)) (SwiGLU or GeGLU) saving x, gate, up; the activation is "
                "recomputed in the backward",
    reference=reference.gated_mlp,
    inputs=_mlp_inputs,
    check_cases=_mlp_cases(),
    bench_cases=_mlp_cases(gpu_only=True),
    cost=_mlp_cost,
    providers=_ours(mlp.gated_mlp),
    grad_inputs=("x", "gate_weight", "up_weight", "down_weight"),
))

SPECS = (GELU_SPEC, SILU_SPEC, SWIGLU_SPEC, GEGLU_SPEC, GATED_MLP_SPEC)
