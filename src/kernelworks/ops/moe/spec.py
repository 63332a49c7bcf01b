"""The MoE routing family's specs: ``moe_permute`` and ``moe_unpermute`` (registered at import).

Case params: ``T`` tokens, ``top_k``, ``H`` (row width), ``E`` experts; ``index_dtype`` (``"int64"`` default,
``"int32"``); ``strided_index`` (``order`` and ``inverse`` as stride-2 views whose gaps hold -1, so a kernel
that ignores the stride reads out-of-range values); ``pad`` (the float inputs' rows carved out of longer rows:
a row stride that is not the width); ``weights_dtype`` (``"fp32"`` default, as Qwen3-MoE's and Mixtral's
routers return them, or ``"same"``). The routing is a real one: each token's ``top_k`` distinct experts drawn
at random and sorted by :func:`kernelworks.moe_sort`.
"""

from __future__ import annotations

import torch

from kernelworks.ops.moe import api, reference
from kernelworks.spec import Case, Cost, OpSpec, Provider, case, randn, register

_F32, _F16, _BF16 = torch.float32, torch.float16, torch.bfloat16

# ------------------------------------------------------------------------------------------ input makers


def _routing(case: Case, device: torch.device) -> dict:
    """``order`` and ``inverse`` of a random routing (distinct experts per token), as the case lays them out."""
    t, k, e = case["T"], case["top_k"], case["E"]
    top_k_index = torch.rand(t, e, device=device).argsort(dim=-1)[:, :k]
    order, inverse, _ = api.moe_sort(top_k_index, e)
    dtype = torch.int32 if case.get("index_dtype", "int64") == "int32" else torch.int64
    out = {}
    for name, t_idx in (("order", order), ("inverse", inverse)):
        t_idx = t_idx.to(dtype)
        if case.get("strided_index"):
            t_idx = torch.stack([t_idx, torch.full_like(t_idx, -1)], 1)[:, 0]
        out[name] = t_idx
    return out


def _weights(case: Case, device: torch.device) -> torch.Tensor:
    dtype = _F32 if case.get("weights_dtype", "fp32") == "fp32" else case.dtype
    return torch.randn(case["T"], case["top_k"], device=device).softmax(dim=-1).to(dtype)


def _permute_inputs(case: Case, device: torch.device) -> dict:
    return {"hidden": randn((case["T"], case["H"]), case, device, row_padding=case.get("pad", 0)),
            **_routing(case, device)}


def _unpermute_inputs(case: Case, device: torch.device) -> dict:
    pairs = case["T"] * case["top_k"]
    return {"y": randn((pairs, case["H"]), case, device, row_padding=case.get("pad", 0)),
            "weights": _weights(case, device), **_routing(case, device)}


# ------------------------------------------------------------------------------------------------ cases


def _cases(tiny: dict) -> list[Case]:
    return [
        case("t5-k2-h24", _F32, tags=("quick",), **tiny),
        case("t5-k2-h24", _F16, **tiny),
        case("t5-k2-h24", _BF16, tags=("quick",), **tiny),
        case("t7-k3-h40-int32-strided", _F32, index_dtype="int32", strided_index=True, T=7, top_k=3, H=40, E=5),
        case("t6-k1-h33-padded", _F16, pad=7, T=6, top_k=1, H=33, E=3),                   # top-1, odd width
        case("t4-k8-h16-same-weights", _BF16, weights_dtype="same", T=4, top_k=8, H=16, E=8),  # every expert
        case("t3-k6-h70-e64", _F32, T=3, top_k=6, H=70, E=64),                             # non-pow2 top_k
        case("qwen3-moe-1k", _BF16, tags=("gpu",), T=1024, top_k=8, H=2048, E=128),
        case("mixtral-1k-padded", _BF16, tags=("gpu",), T=1024, top_k=2, H=4096, E=8, pad=64),
    ]


_TINY = {"T": 5, "top_k": 2, "H": 24, "E": 4}

_BENCH_CASES = [
    # Qwen3-30B-A3B (2048 wide, 128 experts, top 8) and Mixtral-8x7B (4096 wide, 8 experts, top 2), 2 × 4096 tokens
    case("qwen3-moe-8k", _BF16, tags=("gpu", "quick"), T=8192, top_k=8, H=2048, E=128),
    case("mixtral-8k", _BF16, tags=("gpu",), T=8192, top_k=2, H=4096, E=8),
]

# ---------------------------------------------------------------------------------------------- cost


def _index_bytes(case: Case) -> int:
    return 2 * case["T"] * case["top_k"] * (4 if case.get("index_dtype", "int64") == "int32" else 8)


def _permute_cost(case: Case, mode: str) -> Cost:
    """Memory-bound. Forward: each token row read once from memory (its ``top_k`` copies come from L2), the
    ``P = T·top_k`` sorted rows written. Backward: the ``P`` row gradients read, ``T`` rows written."""
    t, p, h = case["T"], case["T"] * case["top_k"], case["H"]
    return Cost(flops=0.0 if mode == "fwd" else float(p * h),
                bytes=(t + p) * h * case.itemsize + _index_bytes(case) // 2)


def _unpermute_cost(case: Case, mode: str) -> Cost:
    """Memory-bound. Forward: the ``P`` sorted rows read, ``T`` token rows written (2 flops a pair element).
    Backward: ``dout``'s ``T`` rows read once (each pair's read hits L2), ``y`` read and ``dy`` written (``P``
    rows each), plus ``dw``."""
    t, p, h = case["T"], case["T"] * case["top_k"], case["H"]
    w_bytes = t * case["top_k"] * 4
    if mode == "fwd":
        return Cost(flops=2.0 * p * h, bytes=(p + t) * h * case.itemsize + w_bytes + _index_bytes(case) // 2)
    return Cost(flops=3.0 * p * h, bytes=(2 * p + t) * h * case.itemsize + 2 * w_bytes + _index_bytes(case) // 2)


# ------------------------------------------------------------------------------------------------ specs

def _spec(name: str, description: str, inputs, cost, grad_inputs: tuple[str, ...]) -> OpSpec:
    """Both ops' spec: the same cases (forward and backward) and bench shapes, our provider, the reference."""
    return register(OpSpec(name=name, description=description, reference=getattr(reference, name), inputs=inputs,
                           check_cases=_cases(_TINY), bench_cases=_BENCH_CASES, cost=cost,
                           providers={"kernelworks": Provider("kernelworks", getattr(api, name))},
                           grad_inputs=grad_inputs))


MOE_PERMUTE_SPEC = _spec("moe_permute", "MoE dispatch: tokens copied into expert order, x[i] = hidden[order[i] // "
                         "top_k]", _permute_inputs, _permute_cost, ("hidden",))
MOE_UNPERMUTE_SPEC = _spec("moe_unpermute", "MoE combine: out[t] = Σ_k w[t, k] · y[inverse[t·top_k + k]], expert "
                           "outputs back to tokens", _unpermute_inputs, _unpermute_cost, ("y", "weights"))

SPECS = (MOE_PERMUTE_SPEC, MOE_UNPERMUTE_SPEC)
