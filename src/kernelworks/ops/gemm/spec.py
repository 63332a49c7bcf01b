"""The GEMM family's specs (registered at import): ``matmul`` (and, below it, ``fp8_matmul``,
``grouped_matmul``).

``matmul`` case params: ``M``, ``N``, ``K`` (``a [M, K] @ b [K, N]``; N counts b's columns, so swiglu
outputs N/2), ``batch`` (leading dim of both, or of ``a`` alone with ``shared_b``), ``a_t`` / ``b_t``
(operand stored transposed: ``a = randn(K, M).t()``, ``b = randn(N, K).t()`` — the ``nn.Linear`` weight
layout), ``pad`` (rows carved out of longer rows: strided, non-contiguous operands), ``bias``, ``act``,
``residual``, ``alpha``, ``beta``, ``out_dtype``.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

import torch

from kernelworks.ops.gemm import api, forward, fp8, grouped, reference
from kernelworks.spec import Case, Cost, OpSpec, Provider, case, default_tolerance, randn, register

_F32, _F16, _BF16 = torch.float32, torch.float16, torch.bfloat16
_E4M3 = torch.float8_e4m3fn

# ------------------------------------------------------------------------------------------ input makers


def _operand(rows: int, cols: int, lead: tuple[int, ...], transposed: bool, case: Case, device, *,
             scale: float = 1.0, pad: int = 0) -> torch.Tensor:
    """``[*lead, rows, cols]``; ``transposed``: stored as ``[*lead, cols, rows]`` and viewed back."""
    if transposed:
        return randn((*lead, cols, rows), case, device, scale=scale, row_padding=pad).transpose(-1, -2)
    return randn((*lead, rows, cols), case, device, scale=scale, row_padding=pad)


def _matmul_inputs(case: Case, device: torch.device) -> dict:
    """``a ~ N(0, 1)``, ``b ~ N(0, 1/K)`` (outputs O(1), where the activations bend), bias ~ N(0, 0.5²),
    residual ~ N(0, 1)."""
    m, n, k = case["M"], case["N"], case["K"]
    batch = case.get("batch")
    lead = (batch,) if batch else ()
    pad = case.get("pad", 0)
    a = _operand(m, k, lead, case.get("a_t", False), case, device, pad=pad)
    b = _operand(k, n, () if case.get("shared_b") else lead, case.get("b_t", False), case, device,
                 scale=max(k, 1) ** -0.5, pad=pad)
    inputs: dict = {"a": a, "b": b}
    act = case.get("act")
    if case.get("bias"):
        inputs["bias"] = randn((n,), case, device, scale=0.5)
    if act:
        inputs["activation"] = act
    if case.get("residual"):
        n_out = n // 2 if act == "swiglu" else n
        inputs["residual"] = randn((*lead, m, n_out), case, device)
    for key in ("alpha", "beta", "out_dtype"):
        if case.get(key) is not None:
            inputs[key] = case[key]
    return inputs


# ------------------------------------------------------------------------------------------------ cases


def _matmul_check_cases() -> list[Case]:
    """CPU cases stay at ≤ 64 in at least two of M, N, K (the interpreter runs dots in numpy per program);
    real sizes are GPU-only (bf16 runs under the interpreter too, on fp32 dot operands)."""
    return [
        case("1x1x1", _F32, M=1, N=1, K=1, tags=("quick",)),
        case("3x3x3", _F16, M=3, N=3, K=3),
        case("17x17x17", _F32, M=17, N=17, K=17),
        case("127x17x3", _F32, M=127, N=17, K=3),
        case("3x127x17", _F16, M=3, N=127, K=17),
        case("17x3x127", _F32, M=17, N=3, K=127),                   # K not a multiple of 16, 4 K steps
        case("20x24x33", _F16, M=20, N=24, K=33, tags=("quick",)),  # sizes dividing no tile
        case("1x64x127-splitk", _F16, M=1, N=64, K=127),            # decode: split-K + reduce kernel
        case("2x16x4096", _F16, M=2, N=16, K=4096),                 # long K: accumulation drift
        case("24x40x36-a_t", _F32, M=24, N=40, K=36, a_t=True),
        case("24x40x36-b_t", _F16, M=24, N=40, K=36, b_t=True),
        case("24x40x36-both_t", _F16, M=24, N=40, K=36, a_t=True, b_t=True),
        case("24x40x36-strided", _F16, M=24, N=40, K=36, pad=8),
        case("5x7x0-bias-res", _F32, M=5, N=7, K=0, bias=True, residual=True),  # empty K: epilogue of zeros
        case("5x7x0-gelu", _F16, M=5, N=7, K=0, bias=True, act="gelu"),
        case("20x24x33-bias", _F16, M=20, N=24, K=33, bias=True),
        case("20x24x33-bias-gelu", _F32, M=20, N=24, K=33, bias=True, act="gelu", tags=("quick",)),
        case("20x24x33-bias-gelu_tanh", _F16, M=20, N=24, K=33, bias=True, act="gelu_tanh"),
        case("20x24x33-silu", _F32, M=20, N=24, K=33, act="silu"),
        case("20x24x33-relu", _F16, M=20, N=24, K=33, act="relu"),
        case("20x48x33-swiglu", _F16, M=20, N=48, K=33, act="swiglu"),
        case("20x48x33-swiglu-bias-b_t", _F32, M=20, N=48, K=33, act="swiglu", bias=True, b_t=True),
        case("4x64x100-splitk-swiglu-res", _F32, M=4, N=64, K=100, act="swiglu", bias=True, residual=True),
        case("20x24x33-res-alpha-beta", _F16, M=20, N=24, K=33, residual=True, alpha=0.5, beta=2.0),
        case("20x24x33-out_fp32", _F16, M=20, N=24, K=33, bias=True, out_dtype=_F32),
        case("2x9x20x24-batched", _F32, batch=2, M=9, N=20, K=24),
        case("3x9x20x24-shared_b", _F16, batch=3, M=9, N=20, K=24, shared_b=True, bias=True),
        case("3x9x20x24-shared_b-a_t", _F32, batch=3, M=9, N=20, K=24, shared_b=True, a_t=True),
        case("2x9x20x24-batched-res", _F16, batch=2, M=9, N=20, K=24, b_t=True, residual=True),
        case("20x24x33-bias-gelu-res", _BF16, M=20, N=24, K=33, bias=True, act="gelu", residual=True),
        case("20x48x33-swiglu-b_t", _BF16, M=20, N=48, K=33, act="swiglu", b_t=True),
        # GPU: bf16, the Hopper path (M > 64, aligned), decode split-K at real sizes
        case("127x17x127", _BF16, M=127, N=17, K=127, tags=("gpu",)),
        case("512x512x512", _BF16, M=512, N=512, K=512, tags=("gpu",)),
        case("300x520x264-b_t-bias-gelu", _BF16, M=300, N=520, K=264, b_t=True, bias=True, act="gelu",
             tags=("gpu",)),
        case("256x1024x512-swiglu-b_t", _BF16, M=256, N=1024, K=512, b_t=True, act="swiglu", tags=("gpu",)),
        case("300x256x200-a_t-res", _BF16, M=300, N=256, K=200, a_t=True, residual=True, tags=("gpu",)),
        case("1x4096x4096-b_t", _BF16, M=1, N=4096, K=4096, b_t=True, tags=("gpu",)),
        case("16x4096x14336-b_t-bias", _BF16, M=16, N=4096, K=14336, b_t=True, bias=True, tags=("gpu",)),
        case("8x24x4096", _BF16, M=8, N=24, K=4096, tags=("gpu",)),
        case("256x256x256-f32", _F32, M=256, N=256, K=256, tags=("gpu",)),
        case("4x200x136x72-batched", _BF16, batch=4, M=200, N=136, K=72, tags=("gpu",)),
        case("2048x1024x4096-b_t-strided", _BF16, M=2048, N=1024, K=4096, b_t=True, pad=8, tags=("gpu",)),
    ]


_LLAMA_8B = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096)}
_LLAMA_70B = {"qkv": (8192, 10240), "o": (8192, 8192), "gate_up": (8192, 57344), "down": (28672, 8192)}
_M_8B = (1, 16, 64, 256, 1024, 4096, 16384)
_M_70B = (1, 64, 1024, 16384)
_QWEN25_7B = {"qkv": (3584, 4608), "o": (3584, 3584), "gate_up": (3584, 37888), "down": (18944, 3584)}
_M_7B = (1, 32, 64, 8192)  # decode batches (the M ≤ 64 split-K, pointer path) and a training step's tokens


def _matmul_bench_cases() -> list[Case]:
    """Square products (row-major B, as cuBLAS is usually quoted), then the Llama-3 projections ``x @ W.t()``
    (the ``nn.Linear`` layout) over the token count M, and the fused epilogues at 8192³."""
    out = [case("square-4096", _BF16, M=4096, N=4096, K=4096, tags=("gpu", "quick")),
           case("square-8192", _BF16, M=8192, N=8192, K=8192, tags=("gpu",))]
    for model, shapes, ms in (("llama3_8b", _LLAMA_8B, _M_8B), ("llama3_70b", _LLAMA_70B, _M_70B),
                              ("qwen2.5_7b", _QWEN25_7B, _M_7B)):
        for proj, (k, n) in shapes.items():
            for m in ms:
                out.append(case(f"{model}-{proj}-M{m}", _BF16, M=m, N=n, K=k, b_t=True, tags=("gpu", "sweep:M")))
    # Not a multiple of 8 anywhere (no 16-byte row strides: the Hopper kernel reads aligned copies), as issue
    # 19's held-out check, both layouts of B, and at 512 and 128 rows (where the copy of B weighs most); an LM
    # head over an odd vocabulary (GPT-2's 50257: only the output rows are off 16 bytes)
    for m in (8191, 512, 128):
        out += [case(f"unaligned-{m}x4095x3583", _BF16, M=m, N=4095, K=3583, tags=("gpu",)),
                case(f"unaligned-{m}x4095x3583-b_t", _BF16, M=m, N=4095, K=3583, b_t=True, tags=("gpu",))]
    out.append(case("lm_head-vocab50257-M8192", _BF16, M=8192, N=50257, K=4096, b_t=True, tags=("gpu",)))
    out += [
        case("8192-bias-gelu", _BF16, M=8192, N=8192, K=8192, b_t=True, bias=True, act="gelu", tags=("gpu",)),
        case("8192-swiglu", _BF16, M=8192, N=16384, K=8192, b_t=True, act="swiglu", tags=("gpu",)),
        case("8192-residual", _BF16, M=8192, N=8192, K=8192, b_t=True, residual=True, tags=("gpu",)),
    ]
    return out


# ------------------------------------------------------------------------------------------------- cost


def _matmul_cost(case: Case, mode: str) -> Cost:
    """flops ``2·M·N·K`` per batch entry (+ ~10 per output element for the epilogue); bytes: A, B and C
    once (+ bias, residual). Backward: two products of the same size (dA, dB), reading dC, A, B and
    writing dA, dB."""
    m, n, k = case["M"], case["N"], case["K"]
    batch = case.get("batch") or 1
    b_batch = 1 if case.get("shared_b") else batch
    act = case.get("act")
    n_out = n // 2 if act == "swiglu" else n
    item = case.itemsize
    out_item = torch.empty((), dtype=case.get("out_dtype") or case.dtype).element_size()
    a_bytes, b_bytes = batch * m * k * item, b_batch * k * n * item
    c_bytes = batch * m * n_out * out_item
    if mode == "fwd":
        flops = 2.0 * batch * m * n * k + (10.0 * batch * m * n if (act or case.get("bias")) else 0.0)
        extra = (n * item if case.get("bias") else 0) + (c_bytes if case.get("residual") else 0)
        return Cost(flops=flops, bytes=a_bytes + b_bytes + c_bytes + extra)
    return Cost(flops=4.0 * batch * m * n * k, bytes=2 * (a_bytes + b_bytes) + c_bytes)


# ----------------------------------------------------------------------------------------------- configs

MATMUL_CONFIGS = [
    # Hopper TMA path (M > 64): the tile classes of the persistent recipes
    {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3, "EPI_SPLIT": 2},
    {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 4, "EPI_SPLIT": 2},
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 4, "EPI_SPLIT": 2},
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4, "EPI_SPLIT": 1},
    {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4, "EPI_SPLIT": 1},
    {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3, "EPI_SPLIT": 2,
     "FLATTEN": False, "WARP_SPECIALIZE": True},
    # pointer path (Ampere, batched, unaligned operands) and decode (M ≤ 64; SPLIT_K is re-derived from the K
    # range); the first row is the default's neighbour at 4 warps, the next four the large tiles
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 32, "num_warps": 8, "num_stages": 4},
    {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 32, "num_warps": 8, "num_stages": 4},
    {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 256, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4},
    # decode tiles beside the heuristic's (M ≤ 16: 64×128 or 64×256; 32–64 rows: 128×128): narrower N for
    # more tiles when a wave's tail idles SMs, deeper or longer K steps for more bytes in flight
    {"BLOCK_M": 32, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 6},
    {"BLOCK_M": 32, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 6},
    {"BLOCK_M": 32, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 4},
    {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 256, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 6},
    {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 256, "num_warps": 4, "num_stages": 4},
    # 32-column tiles, six 128-deep stages, no split: one wave of CTAs at N ≈ 4096 with many bytes in flight
    # each (H100, one CUDA graph: 8B o M = 64 14.9 µs against 20.1 for the default and 14.7 for cuBLAS;
    # gaps/matmul-small-m-plans-cudagraph.json); not yet timed by kw tune's do_bench
    {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 128, "num_warps": 4, "num_stages": 6},
    {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 128, "num_warps": 4, "num_stages": 6},
    # Qwen2.5-7B qkv (N 4608 on 132 SMs) in one CUDA graph, L2 flushed, against cuBLAS (session 21,
    # gaps/matmul-small-m-plans-session21.json): M = 1 0.967×, M = 32 0.952× (2 warps), M = 64 0.948×, where the
    # tuned plans gave 0.933×, 0.914× and 0.875×
    {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 128, "num_warps": 2, "num_stages": 6},
    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 6},
    # split K (summed in the launch, in split order): more CTAs for short-N decode products (Qwen2.5-7B qkv
    # and o at M = 32 leave ~half the SMs idle at one split; the configs above never split)
    {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4, "SPLIT_K": 2},
    {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4, "SPLIT_K": 4},
    {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4, "SPLIT_K": 2},
    {"BLOCK_M": 32, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4, "SPLIT_K": 3},
    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4, "SPLIT_K": 2},
    {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4, "SPLIT_K": 2},
]
"""The tuner's space for ``matmul`` (constexpr and launch-option names of the two kernels); each entry
applies to the kernel that has its keys."""


def _matmul_configured(config: Mapping[str, Any]) -> AbstractContextManager[None]:
    """``kw tune``'s hook: the forced plan of one config (an ``EPI_SPLIT`` key means the Hopper TMA kernel; it
    reads misaligned operands from aligned copies, and a TMA plan it cannot run — a batched product — raises,
    which the tuner records)."""
    from kernelworks.ops.gemm.forward import forced_plan, plan_from_config

    return forced_plan(plan_from_config(config))


# ------------------------------------------------------------------------------------------------ specs

MATMUL_SPEC = register(OpSpec(
    name="matmul",
    description="C = act(alpha·A@B + bias) + beta·residual; fp32 accumulation, any strides, batched",
    reference=reference.matmul,
    inputs=_matmul_inputs,
    check_cases=_matmul_check_cases(),
    bench_cases=_matmul_bench_cases(),
    cost=_matmul_cost,
    providers={"kernelworks": Provider("kernelworks", api.matmul)},
    grad_inputs=("a", "b", "bias", "residual"),
    configs=MATMUL_CONFIGS,
    configured=_matmul_configured,
    tuned=forward.TUNED,
))


# ------------------------------------------------------------------------------------------- fp8_matmul
# Case params: M, N, K, ``scaling`` ("tensor", "row", "block"), ``bias``, ``act``, ``b_layout`` ("t": b is
# ``w.t()`` of a row-major ``w [N, K]``, the default and ``torch._scaled_mm``'s layout; "row": row-major b),
# ``fast_accum`` (passed to both ``fp8_matmul`` and ``torch._scaled_mm``'s ``use_fast_accum``: every case
# compares the two in the SAME accumulation mode — "-fast_accum" cases fast vs fast, the others promoted
# every 128 K vs ``_scaled_mm``'s default).

FAST_ACCUM_REL_L2 = 5e-3
"""The bar for fast-accumulation cases: relative L2 to the float64 product. The elementwise rule (2× eager
PyTorch's error) fails cuBLAS's own fast mode at K = 8192 (H100: ``_scaled_mm(use_fast_accum=True)`` and ours
both 2.64e-3, against 1.67e-3 promoted, ``benchmarks/results/h100-80gb-hbm3/``); 5e-3 is ~2× that."""


def _fp8_inputs(case: Case, device: torch.device) -> dict:
    """e4m3 operands from N(0, 1) (well inside e4m3's ±448) and positive fp32 scales around 1/√K, so the
    output is O(1); per-row/column scales as ``[M, 1]`` / ``[1, N]`` (the shapes ``torch._scaled_mm`` takes,
    which ``fp8_matmul`` accepts too)."""
    m, n, k = case["M"], case["N"], case["K"]
    a = randn((m, k), case, device)
    b = randn((k, n), case, device) if case.get("b_layout") == "row" else randn((n, k), case, device).t()
    kb, nb = -(-k // 128), -(-n // 128)
    scale = max(k, 1) ** -0.25
    shapes = {"tensor": ((), ()), "row": ((m, 1), (1, n)), "block": ((m, kb), (nb, kb))}[case["scaling"]]

    def positive(shape):
        return (0.5 + torch.rand(shape, device=device)) * scale

    inputs: dict = {"a": a, "b": b, "scale_a": positive(shapes[0]), "scale_b": positive(shapes[1])}
    if case.get("bias"):
        inputs["bias"] = (0.5 * torch.randn(n, device=device)).to(_BF16)
    if case.get("act"):
        inputs["activation"] = case["act"]
    if case.get("fast_accum"):
        inputs["fast_accum"] = True
    return inputs


def _scaled_mm(a, b, scale_a, scale_b, bias=None, activation=None, out_dtype=_BF16, fast_accum=False):
    """cuBLAS fp8 through ``torch._scaled_mm`` (per tensor or rowwise; b column-major) with
    ``use_fast_accum=fast_accum`` (the case's mode, so the comparison is like for like), then the eager
    epilogue for an activation."""
    if scale_a.dim() == 2 and scale_a.shape[1] != 1:
        raise NotImplementedError("torch._scaled_mm has no 1×128 / 128×128 block scales on sm_90")
    z = torch._scaled_mm(a, b, scale_a, scale_b, bias=bias if activation is None else None, out_dtype=out_dtype,
                         use_fast_accum=fast_accum)
    if activation is None:
        return z
    return reference.epilogue(z, bias, activation, None, 1.0, 0.0)


def _fp8_check_cases() -> list[Case]:
    """All GPU-only (fp8 tensor cores: sm_89+; the interpreter has no fp8 dot)."""
    out = []
    for scaling in ("tensor", "row", "block"):
        out += [
            case(f"17x256x384-{scaling}", _E4M3, M=17, N=256, K=384, scaling=scaling,
                 tags=("gpu", "quick") if scaling == "tensor" else ("gpu",)),
            case(f"300x512x1024-{scaling}", _E4M3, M=300, N=512, K=1024, scaling=scaling, tags=("gpu",)),
            case(f"130x384x320-{scaling}-bias-gelu", _E4M3, M=130, N=384, K=320, scaling=scaling, bias=True,
                 act="gelu", tags=("gpu",)),
            case(f"1x4096x4096-{scaling}", _E4M3, M=1, N=4096, K=4096, scaling=scaling, tags=("gpu",)),
        ]
    out += [
        case("256x512x512-tensor-swiglu", _E4M3, M=256, N=512, K=512, scaling="tensor", act="swiglu",
             tags=("gpu",)),
        case("256x512x512-block-swiglu", _E4M3, M=256, N=512, K=512, scaling="block", act="swiglu",
             tags=("gpu",)),
        case("200x256x256-row-b_row", _E4M3, M=200, N=256, K=256, scaling="row", b_layout="row", tags=("gpu",)),
        case("64x8192x8192-tensor", _E4M3, M=64, N=8192, K=8192, scaling="tensor", tags=("gpu",)),
        # fast accumulation (no fp32 promotion over the K chain): the same tolerance must hold at long K
        case("64x8192x8192-tensor-fast_accum", _E4M3, M=64, N=8192, K=8192, scaling="tensor", fast_accum=True,
             max_rel_l2=FAST_ACCUM_REL_L2,
             tags=("gpu",)),
        case("1024x2048x8192-tensor-fast_accum", _E4M3, M=1024, N=2048, K=8192, scaling="tensor",
             fast_accum=True, max_rel_l2=FAST_ACCUM_REL_L2, tags=("gpu",)),
        case("300x512x1024-row-fast_accum-bias-gelu", _E4M3, M=300, N=512, K=1024, scaling="row", bias=True,
             act="gelu", fast_accum=True, max_rel_l2=FAST_ACCUM_REL_L2, tags=("gpu",)),
        case("256x512x512-tensor-swiglu-fast_accum", _E4M3, M=256, N=512, K=512, scaling="tensor",
             act="swiglu", fast_accum=True, max_rel_l2=FAST_ACCUM_REL_L2, tags=("gpu",)),
        case("130x384x320-block-fast_accum", _E4M3, M=130, N=384, K=320, scaling="block", fast_accum=True,
             max_rel_l2=FAST_ACCUM_REL_L2,
             tags=("gpu",)),  # ignored with block scales
    ]
    return out


def _fp8_cost(case: Case, mode: str) -> Cost:
    m, n, k = case["M"], case["N"], case["K"]
    n_out = n // 2 if case.get("act") == "swiglu" else n
    return Cost(flops=2.0 * m * n * k, bytes=m * k + k * n + 2 * m * n_out)


FP8_MATMUL_SPEC = register(OpSpec(
    name="fp8_matmul",
    description="C = act((sa⊙A)@(sb⊙B) + bias), e4m3 inputs, per-tensor/row/block scales, bf16 out",
    reference=reference.fp8_matmul,
    inputs=_fp8_inputs,
    check_cases=_fp8_check_cases(),
    bench_cases=[
        # like for like: "8192-tensor" ours promoted vs _scaled_mm default; "-fast_accum" both fast
        case("8192-tensor", _E4M3, M=8192, N=8192, K=8192, scaling="tensor", tags=("gpu", "quick")),
        case("8192-tensor-fast_accum", _E4M3, M=8192, N=8192, K=8192, scaling="tensor", fast_accum=True,
             max_rel_l2=FAST_ACCUM_REL_L2,
             tags=("gpu",)),
        case("8192-row", _E4M3, M=8192, N=8192, K=8192, scaling="row", tags=("gpu",)),
        case("8192-row-fast_accum", _E4M3, M=8192, N=8192, K=8192, scaling="row", fast_accum=True,
             max_rel_l2=FAST_ACCUM_REL_L2,
             tags=("gpu",)),
        case("8192-block", _E4M3, M=8192, N=8192, K=8192, scaling="block", tags=("gpu",)),
        case("llama3_70b-gate_up-M4096-block", _E4M3, M=4096, N=57344, K=8192, scaling="block", tags=("gpu",)),
        case("llama3_8b-down-M16-tensor", _E4M3, M=16, N=4096, K=14336, scaling="tensor", tags=("gpu",)),
        case("llama3_8b-down-M16-tensor-fast_accum", _E4M3, M=16, N=4096, K=14336, scaling="tensor",
             fast_accum=True, max_rel_l2=FAST_ACCUM_REL_L2, tags=("gpu",)),
    ],
    cost=_fp8_cost,
    providers={"kernelworks": Provider("kernelworks", fp8.fp8_matmul),
               "torch._scaled_mm": Provider("torch._scaled_mm", _scaled_mm, gpu_only=True)},
    tolerance=lambda dtype: default_tolerance(_BF16),  # the output is bf16: its rounding sets the scale
    configs=[
        {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "num_warps": 8, "num_stages": 3, "EPI_SPLIT": 2},
        {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 8, "num_stages": 4, "EPI_SPLIT": 2},
        {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "num_warps": 8, "num_stages": 3, "EPI_SPLIT": 2,
         "FLATTEN": False, "WARP_SPECIALIZE": True},
        {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4},
    ],
))


# ---------------------------------------------------------------------------------------- grouped_matmul
# Case params: T tokens, K, N, E experts, ``skew`` ("uniform", "zipf": a few experts take most tokens, some
# none), ``pad_rows`` (rows past the groups, as in a padded token buffer: zero in the output),
# ``strided_sizes`` (group sizes as a stride-2 view). b is stored [E, N, K] (each expert an nn.Linear
# weight) and passed as its [E, K, N] transpose.


def expert_sizes(tokens: int, experts: int, skew: str) -> list[int]:
    """Deterministic tokens per expert summing to ``tokens``: equal shares, or Zipf-like shares
    ∝ 1/(e+1)^1.3 in which every fourth expert gets none (a router's empty experts)."""
    if skew == "uniform":
        weights = [1.0] * experts
    else:
        weights = [0.0 if e % 4 == 3 else (e + 1) ** -1.3 for e in range(experts)]
    total = sum(weights)
    sizes = [int(tokens * w / total) for w in weights]
    sizes[0] += tokens - sum(sizes)
    return sizes


def _grouped_inputs(case: Case, device: torch.device) -> dict:
    t, k, n, e = case["T"], case["K"], case["N"], case["E"]
    sizes = torch.tensor(expert_sizes(t - case.get("pad_rows", 0), e, case.get("skew", "zipf")), dtype=torch.int32,
                         device=device)
    if case.get("strided_sizes"):  # every other element of [E, 2]; the gaps hold -1
        sizes = torch.stack([sizes, torch.full_like(sizes, -1)], 1)[:, 0]
    return {"a": randn((t, k), case, device),
            "b": randn((e, n, k), case, device, scale=k ** -0.5).transpose(1, 2),
            "group_sizes": sizes}


def _grouped_cost(case: Case, mode: str) -> Cost:
    """Forward: ``2·T·N·K`` flops, A, every expert's B and C once. Backward: dA and dB, two products of the
    same size, reading dC, A, B and writing dA, dB."""
    t, k, n, e = case["T"], case["K"], case["N"], case["E"]
    a_bytes, b_bytes, c_bytes = t * k * case.itemsize, e * k * n * case.itemsize, t * n * case.itemsize
    if mode == "fwd":
        return Cost(flops=2.0 * t * n * k, bytes=a_bytes + b_bytes + c_bytes)
    return Cost(flops=4.0 * t * n * k, bytes=2 * (a_bytes + b_bytes) + c_bytes)


GROUPED_MATMUL_SPEC = register(OpSpec(
    name="grouped_matmul",
    description="MoE GEMM: C[rows of e] = A[rows of e] @ B[e] for every expert, one launch",
    reference=reference.grouped_matmul,
    inputs=_grouped_inputs,
    check_cases=[
        case("22x40x24-e3", _F16, T=22, K=40, N=24, E=3, tags=("quick",)),
        case("45x33x20-e5-zipf", _F32, T=45, K=33, N=20, E=5),       # empty experts, K not a multiple of 16
        case("19x16x16-e1", _F32, T=19, K=16, N=16, E=1, skew="uniform"),
        case("21x40x24-e3", _BF16, T=21, K=40, N=24, E=3),
        case("30x32x24-e4-padded-strided_sizes", _F16, T=30, K=32, N=24, E=4, pad_rows=5, strided_sizes=True),
        case("4096x512x1024-e8", _BF16, T=4096, K=512, N=1024, E=8, tags=("gpu",)),
        case("1000x256x384-e64", _BF16, T=1000, K=256, N=384, E=64, tags=("gpu",)),
    ],
    bench_cases=[
        # Mixtral-8x7B's w1 (4096 → 14336) over 8192 tokens × top-2, skewed
        case("mixtral-e8-16k", _BF16, T=16384, K=4096, N=14336, E=8, tags=("gpu", "quick")),
        case("mixtral-e8-16k-uniform", _BF16, T=16384, K=4096, N=14336, E=8, skew="uniform", tags=("gpu",)),
        # a fine-grained MoE (64 experts, 2048 → 1408, as DeepSeek-MoE/Qwen-MoE) over 4096 tokens × top-6
        case("finegrained-e64-24k", _BF16, T=24576, K=2048, N=1408, E=64, tags=("gpu",)),
        case("finegrained-e64-2k", _BF16, T=2048, K=2048, N=1408, E=64, tags=("gpu",)),
        # Qwen3-30B-A3B's gate_up (2048 → 2·768) over 8192 tokens × top-8, 128 experts, a router at init
        case("qwen3-moe-e128-64k", _BF16, T=65536, K=2048, N=1536, E=128, skew="uniform", tags=("gpu",)),
    ],
    cost=_grouped_cost,
    providers={"kernelworks": Provider("kernelworks", grouped.grouped_matmul)},
    # the tiles of grouped_plan and its neighbours (EPI_SPLIT marks the Hopper TMA kernel, as for matmul;
    # the grouped kernel stores C in two halves whatever its value); the backward's dA runs the same kernel
    configs=[
        {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 4, "EPI_SPLIT": 1},
        {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3, "EPI_SPLIT": 1},
        {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 4, "EPI_SPLIT": 1},
        {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 5, "EPI_SPLIT": 1},
        {"BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4, "EPI_SPLIT": 1},
        {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4, "EPI_SPLIT": 1},
        {"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3, "EPI_SPLIT": 1},
        {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3, "EPI_SPLIT": 1,
         "FLATTEN": False, "WARP_SPECIALIZE": True},
        {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3},  # pointer kernel
        {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3},
    ],
    configured=_matmul_configured,
    grad_inputs=("a", "b"),
    baselines=("torch",),  # the loop of torch.matmul; torch.compile cannot trace its data-dependent slices
))

SPECS = (MATMUL_SPEC, FP8_MATMUL_SPEC, GROUPED_MATMUL_SPEC)
