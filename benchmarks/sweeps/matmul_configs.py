"""Sweep the GEMM family's launch plans (tiles, warps, stages, split-K, TMA vs pointer) on the GPU.

    python benchmarks/sweeps/matmul_configs.py [--out results.json] [--budget-s 125] [--only llama,swiglu,fp8,grouped]

Each candidate :class:`~kernelworks.ops.gemm.forward.Plan` is forced with ``forward.forced_plan`` (the
launcher's override; ``grouped_matmul`` takes its tiles, warps, stages and ``tma``) and timed with the
bench's ``time_fn`` (L2 flushed; warmup 10 ms, 40 ms of repetitions) on the same inputs as the baseline,
after its output has been checked against the baseline's (relative L2 error; fp8 also against an fp32
product of the dequantised operands). Groups:

* ``llama``  — the weak Llama-3 projections ``x @ W.t()`` (bf16, ``W [N, K]`` row-major) at M ∈ {1, 16, 64,
  256, 1024}, against ``torch.matmul`` (cuBLAS);
* ``swiglu`` — ``matmul(x, W_gate_up.t(), activation="swiglu")`` at 8192 × 8192 → 2·8192, against eager
  ``matmul`` + ``silu(g)·u`` and our own plain GEMM of the same size (the ceiling);
* ``fp8``    — ``fp8_matmul`` at 8192³ per tensor / per row / 1×128·128×128 blocks, against
  ``torch._scaled_mm`` (block: against our per-tensor default);
* ``grouped``— ``grouped_matmul`` on Mixtral's 8 experts × 16k tokens (K 4096, N 14336), against the loop of
  ``torch.matmul``.

Candidates are listed most promising first and the sweep stops starting new ones once ``--budget-s`` has
passed (compiles dominate a cold run), so the whole script stays within ~150 s; what was skipped is counted.
The last block printed is a ready-to-paste summary: the best plan per shape with its TFLOP/s, the default
plan's and the baseline's from the same run. Needs a CUDA GPU (sm_90 for the TMA candidates).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import math
import time

import torch

from kernelworks.bench.timing import time_fn
from kernelworks.ops.gemm import forward, grouped
from kernelworks.ops.gemm.api import matmul
from kernelworks.ops.gemm.forward import Plan
from kernelworks.ops.gemm.fp8 import fp8_matmul
from kernelworks.ops.gemm.grouped import grouped_matmul
from kernelworks.ops.gemm.spec import expert_sizes

TIMING = {"warmup_ms": 10.0, "rep_ms": 40.0}
AGREE_REL_L2 = 1e-2  # two bf16 roundings of the same fp32 product differ by ~3e-3

# --------------------------------------------------------------------------------------------- candidates

LLAMA = {  # name: (K, N) of W [N, K]; the weak (M, shape) pairs of the first H200 run
    "8b-qkv": (4096, 6144), "8b-o": (4096, 4096), "8b-gate_up": (4096, 28672), "8b-down": (14336, 4096),
    "70b-qkv": (8192, 10240), "70b-o": (8192, 8192),
}
LLAMA_SHAPES = [  # (shape, M): the weakest of each M bucket first, so every bucket compiles its candidates
    ("8b-down", 256), ("8b-gate_up", 1), ("70b-qkv", 64), ("8b-qkv", 1024), ("8b-gate_up", 16),
    ("8b-qkv", 256), ("8b-o", 256), ("8b-down", 1024), ("70b-qkv", 1024), ("8b-o", 1024), ("8b-gate_up", 64),
    ("8b-o", 64), ("8b-qkv", 64), ("8b-qkv", 16), ("8b-down", 16), ("70b-qkv", 1),
]


def _p(tma: bool, bm: int, bn: int, bk: int, w: int, s: int, split: int = 1, **kw) -> Plan:
    return Plan(tma, bm, bn, bk, w, s, SPLIT_K=split, **kw)


def llama_candidates(m: int) -> list[Plan]:
    """Decode (M ≤ 64): the pointer kernel over tiles × split-K, then the TMA kernel with 64-row tiles (no
    split-K there). Mid M (256, 1024): the TMA tile classes (wave quantisation decides between them)."""
    if m <= 64:
        bm = max(16, 1 << (m - 1).bit_length())
        out = [_p(False, bm, 64, 128, 4, 4, s) for s in (1, 2, 4, 8)]
        out += [_p(True, 64, 128, 128, 4, 4), _p(True, 64, 64, 128, 4, 4)]
        out += [_p(False, bm, 128, 128, 4, 4, s) for s in (1, 2, 4)]
        out += [_p(False, bm, 64, 256, 4, 3, s) for s in (1, 2, 4)]
        out += [_p(False, bm, 128, 64, 4, 5, 2), _p(False, bm, 256, 64, 8, 4, 1), _p(False, bm, 128, 128, 8, 3, 2)]
        if m == 64:
            out += [_p(False, 32, 64, 128, 4, 4, 2), _p(False, 32, 128, 128, 4, 4, 1)]
        out += [_p(True, 64, 256, 64, 4, 4, EPI_SPLIT=2)]
        return out
    return [
        _p(True, 128, 128, 64, 8, 4, EPI_SPLIT=2), _p(True, 128, 256, 64, 8, 3, EPI_SPLIT=2),
        _p(True, 64, 128, 64, 4, 4), _p(True, 128, 64, 64, 4, 4), _p(True, 64, 256, 64, 4, 4, EPI_SPLIT=2),
        _p(True, 128, 128, 64, 8, 5, EPI_SPLIT=2), _p(True, 64, 128, 128, 4, 4), _p(True, 128, 128, 64, 4, 4),
        _p(True, 128, 256, 64, 8, 3, EPI_SPLIT=2, FLATTEN=False, WARP_SPECIALIZE=True),
        _p(True, 128, 128, 64, 8, 4, EPI_SPLIT=2, FLATTEN=False, WARP_SPECIALIZE=True),
        _p(True, 128, 128, 64, 8, 4, EPI_SPLIT=2, GROUP_M=16),
    ]


SWIGLU_CANDIDATES = [  # two 128×128 fp32 accumulators = the registers of one 128×256 (see docs/notes/gemm.md)
    _p(True, 128, 128, 64, 8, 3, EPI_SPLIT=2), _p(True, 128, 128, 64, 8, 4, EPI_SPLIT=2),
    _p(True, 128, 128, 64, 8, 4, EPI_SPLIT=1),
    _p(True, 128, 128, 64, 8, 3, EPI_SPLIT=2, FLATTEN=False, WARP_SPECIALIZE=True),
    _p(True, 128, 64, 64, 4, 4), _p(True, 128, 64, 64, 8, 4), _p(True, 64, 128, 64, 4, 4),
    _p(True, 128, 128, 64, 8, 3, EPI_SPLIT=2, GROUP_M=16),
]

FP8_CANDIDATES = {  # FAST_ACCUM: no promotion to fp32 every 128 K (torch._scaled_mm use_fast_accum=True)
    "tensor": [
        _p(True, 128, 128, 128, 8, 4, EPI_SPLIT=2), _p(True, 128, 256, 128, 8, 3, EPI_SPLIT=2, FAST_ACCUM=True),
        _p(True, 128, 256, 128, 8, 3, EPI_SPLIT=2, FLATTEN=False, WARP_SPECIALIZE=True),
        _p(True, 128, 256, 128, 8, 3, EPI_SPLIT=2, FLATTEN=False, WARP_SPECIALIZE=True, FAST_ACCUM=True),
        _p(True, 128, 128, 128, 8, 4, EPI_SPLIT=2, FAST_ACCUM=True),
        _p(True, 128, 128, 128, 8, 4, EPI_SPLIT=2, FLATTEN=False, WARP_SPECIALIZE=True),
        _p(True, 128, 256, 128, 8, 4, EPI_SPLIT=2, FAST_ACCUM=True),
        _p(True, 128, 128, 128, 8, 3, EPI_SPLIT=2), _p(True, 128, 256, 128, 8, 3, EPI_SPLIT=2),
    ],
    "row": [
        _p(True, 128, 128, 128, 8, 4, EPI_SPLIT=2), _p(True, 128, 256, 128, 8, 3, EPI_SPLIT=2, FAST_ACCUM=True),
        _p(True, 128, 256, 128, 8, 3, EPI_SPLIT=2, FLATTEN=False, WARP_SPECIALIZE=True),
    ],
    "block": [
        _p(True, 128, 128, 128, 8, 4, EPI_SPLIT=2), _p(True, 128, 128, 128, 8, 3, EPI_SPLIT=2),
        _p(True, 128, 128, 128, 8, 4, EPI_SPLIT=2, FLATTEN=False, WARP_SPECIALIZE=True),
        _p(True, 128, 64, 128, 4, 4), _p(True, 64, 128, 128, 4, 4), _p(True, 128, 256, 128, 8, 3, EPI_SPLIT=2),
    ],
}

GROUPED_CANDIDATES = [  # tma: the persistent TMA grouped kernel; else the pointer kernel
    _p(True, 128, 256, 64, 8, 3, EPI_SPLIT=2), _p(True, 128, 256, 64, 8, 4, EPI_SPLIT=2),
    _p(True, 128, 128, 64, 8, 4, EPI_SPLIT=2),
    _p(True, 128, 256, 64, 8, 3, EPI_SPLIT=2, FLATTEN=False, WARP_SPECIALIZE=True),
    _p(False, 128, 128, 64, 8, 3), _p(False, 128, 256, 64, 8, 3), _p(False, 128, 128, 64, 4, 4),
    _p(False, 128, 256, 32, 8, 4), _p(False, 64, 256, 64, 4, 3),
]

# ------------------------------------------------------------------------------------------------ driver


def plan_str(p: Plan | None) -> str:
    if p is None:
        return "default"
    s = f"{'tma' if p.tma else 'ptr'} {p.BLOCK_M}x{p.BLOCK_N}x{p.BLOCK_K} w{p.num_warps} s{p.num_stages}"
    if p.SPLIT_K > 1:
        s += f" splitk{p.SPLIT_K}"
    if p.EPI_SPLIT > 1:
        s += f" epi{p.EPI_SPLIT}"
    if p.GROUP_M != forward.GROUP_M:
        s += f" g{p.GROUP_M}"
    if p.WARP_SPECIALIZE:
        s += " ws"
    if p.FAST_ACCUM:
        s += " fastacc"
    return s


def rel_l2(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30)).item()


class Sweep:
    def __init__(self, budget_s: float):
        self.t0 = time.perf_counter()
        self.budget_s = budget_s
        self.hard_cap_s = budget_s + 10.0
        self.results: list[dict] = []
        self.skipped = 0
        self.seen: set = set()  # (plan, specialisation) already compiled: cheap to time past the budget

    def over_budget(self, key=None) -> bool:
        elapsed = time.perf_counter() - self.t0
        if key is not None and key in self.seen:
            return elapsed > self.hard_cap_s
        return elapsed > self.budget_s

    def time(self, fn) -> float:
        return time_fn(fn, **TIMING).median_ms

    def baseline(self, group: str, shape: str, provider: str, fn, flops: float) -> float:
        fn()
        ms = self.time(fn)
        tf = flops / (ms * 1e-3) / 1e12
        self.results.append({"group": group, "shape": shape, "provider": provider, "plan": None,
                             "median_us": ms * 1e3, "tflops": tf, "ok": True})
        print(f"{group:7s} {shape:22s} {provider:28s} {ms * 1e3:9.1f} µs {tf:7.1f} TF/s", flush=True)
        return tf

    def candidate(self, group: str, shape: str, plan: Plan | None, fn, flops: float, check,
                  spec_key: object = None) -> None:
        """Run ``fn`` under ``plan`` (None: the default plan), check it with ``check(out) -> (ok, info)``,
        time it and record the row; an error (compile, shared memory) is recorded, not raised.
        ``spec_key``: what else selects the compiled kernel (e.g. M == 1), for the budget's reuse rule."""
        key = (group, plan, spec_key)
        if plan is not None and self.over_budget(key):
            self.skipped += 1
            return
        self.seen.add(key)
        row = {"group": group, "shape": shape, "provider": "kernelworks", "plan": plan_str(plan),
               "config": dataclasses.asdict(plan) if plan is not None else None}
        chosen: list = []
        try:
            ctx = forward.forced_plan(plan) if plan is not None else _recording_default(chosen)
            with ctx:
                out = fn()
                torch.cuda.synchronize()
                ok, info = check(out)
                del out
                ms = self.time(fn) if ok else math.nan
        except Exception as e:  # a failing candidate (compile, shared memory) is a result: go on
            row.update(ok=False, error=f"{type(e).__name__}: {str(e).splitlines()[0][:120]}")
            self.results.append(row)
            print(f"{group:7s} {shape:22s} {row['plan']:28s}  FAILED {row['error']}", flush=True)
            with contextlib.suppress(Exception):  # a sticky CUDA fault ends the run at the next launch anyway
                torch.cuda.synchronize()
            return
        tf = flops / (ms * 1e-3) / 1e12 if ok else math.nan
        if chosen:
            info = {"default": plan_str(chosen[0]), **info}
        row.update(ok=ok, median_us=ms * 1e3, tflops=tf, **info)
        self.results.append(row)
        extra = " ".join(f"{k}={v:.2e}" if isinstance(v, float) else f"{k}={v}" for k, v in info.items())
        print(f"{group:7s} {shape:22s} {row['plan']:28s} {ms * 1e3:9.1f} µs {tf:7.1f} TF/s  {extra}", flush=True)


@contextlib.contextmanager
def _recording_default(chosen: list):
    """Record the plan(s) the default planners pick (``matmul_plan``, ``grouped_plan``) into ``chosen``."""
    saved = forward.matmul_plan, grouped.grouped_plan

    def recorder(fn):
        def plan(*args):
            p = fn(*args)
            chosen.append(p)
            return p
        return plan

    forward.matmul_plan, grouped.grouped_plan = recorder(saved[0]), recorder(saved[1])
    try:
        yield
    finally:
        forward.matmul_plan, grouped.grouped_plan = saved


def _agree(ref: torch.Tensor, limit: float = AGREE_REL_L2):
    def check(out):
        err = rel_l2(out, ref)
        return err <= limit, {"rel_l2": err}
    return check


def sweep_llama(sw: Sweep) -> None:
    for name, m in LLAMA_SHAPES:
        k, n = LLAMA[name]
        torch.manual_seed(0)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5
        flops = 2.0 * m * n * k
        shape = f"{name}-M{m}"
        ref = torch.matmul(x, w.t())
        sw.baseline("llama", shape, "torch (cuBLAS)", functools.partial(torch.matmul, x, w.t()), flops)
        call = functools.partial(matmul, x, w.t())
        sw.candidate("llama", shape, None, call, flops, _agree(ref))
        for plan in llama_candidates(m):
            sw.candidate("llama", shape, plan, call, flops, _agree(ref), spec_key=m == 1)


def sweep_swiglu(sw: Sweep) -> None:
    m = k = n = 8192
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2 * n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5  # [gate; up] rows
    flops = 2.0 * m * 2 * n * k

    def eager():
        z = torch.matmul(x, w.t())
        return torch.nn.functional.silu(z[:, :n]) * z[:, n:]

    ref = eager()
    sw.baseline("swiglu", "8192", "eager matmul+silu*mul", eager, flops)
    sw.baseline("swiglu", "8192", "torch.matmul only", functools.partial(torch.matmul, x, w.t()), flops)
    sw.candidate("swiglu", "8192-plain-gemm", None, functools.partial(matmul, x, w.t()), flops,
                 lambda out: (True, {}))
    call = functools.partial(matmul, x, w.t(), activation="swiglu")
    sw.candidate("swiglu", "8192", None, call, flops, _agree(ref, 2e-2))
    for plan in SWIGLU_CANDIDATES:
        sw.candidate("swiglu", "8192", plan, call, flops, _agree(ref, 2e-2))


def sweep_fp8(sw: Sweep) -> None:
    m = n = k = 8192
    torch.manual_seed(0)
    e4m3 = torch.float8_e4m3fn
    a = torch.randn(m, k, device="cuda").to(e4m3)
    w = torch.randn(n, k, device="cuda").to(e4m3)
    flops = 2.0 * m * n * k
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    exact = torch.matmul(a.float(), w.float().t())  # unscaled fp32 product (exact for e4m3 inputs)
    torch.backends.cuda.matmul.allow_tf32 = prev
    kb = k // 128
    s = k ** -0.25
    scales = {
        "tensor": (torch.full((), s, device="cuda"), torch.full((), s, device="cuda")),
        "row": ((0.5 + torch.rand(m, 1, device="cuda")) * s, (0.5 + torch.rand(1, n, device="cuda")) * s),
        "block": ((0.5 + torch.rand(m, kb, device="cuda")) * s, (0.5 + torch.rand(n // 128, kb, device="cuda")) * s),
    }
    for scaling, (sa, sb) in scales.items():
        if scaling == "block":  # fp32 reference of the block-scaled product: per K block, exact
            ref = torch.zeros(m, n, device="cuda")
            sb_full = sb.repeat_interleave(128, 0)  # [N, kb]
            prev = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = False
            for i in range(kb):
                blk = slice(i * 128, (i + 1) * 128)
                ref += (a[:, blk].float() @ w[:, blk].float().t()) * sa[:, i:i + 1] * sb_full[:, i][None, :]
            torch.backends.cuda.matmul.allow_tf32 = prev
        else:
            ref = exact * sa.reshape(-1, 1) * sb.reshape(1, -1) if scaling == "row" else exact * (sa * sb)
        if scaling != "block":
            def scaled_mm(fast, sa=sa, sb=sb):
                return torch._scaled_mm(a, w.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)
            sw.baseline("fp8", scaling, "torch._scaled_mm", functools.partial(scaled_mm, False), flops)
            sw.results[-1]["rel_l2_fp32"] = rel_l2(scaled_mm(False), ref)
            sw.baseline("fp8", scaling, "torch._scaled_mm fast_accum", functools.partial(scaled_mm, True), flops)
            sw.results[-1]["rel_l2_fp32"] = rel_l2(scaled_mm(True), ref)

        def check(out, ref=ref):
            err = rel_l2(out, ref)
            return err <= 2e-2, {"rel_l2_fp32": err}

        call = functools.partial(fp8_matmul, a, w.t(), sa, sb)
        sw.candidate("fp8", scaling, None, call, flops, check)
        for plan in FP8_CANDIDATES[scaling]:
            sw.candidate("fp8", scaling, plan, call, flops, check)
        del ref


def _grouped_case(sw: Sweep, skew: str) -> None:
    t, k, n, e = 16384, 4096, 14336, 8
    torch.manual_seed(0)
    sizes = expert_sizes(t, e, skew)
    a = torch.randn(t, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5
    b = w.transpose(1, 2)  # [E, K, N] view of nn.Linear weights, as the bench passes it
    g = torch.tensor(sizes, dtype=torch.int32, device="cuda")
    flops = 2.0 * t * n * k
    bounds = [0]
    for s in sizes:
        bounds.append(bounds[-1] + s)

    def loop():
        return torch.cat([a[bounds[i]:bounds[i + 1]] @ b[i] for i in range(e)])

    ref = loop()
    shape = f"mixtral-e8-16k-{skew}"
    sw.baseline("grouped", shape, "torch loop (cuBLAS)", loop, flops)
    call = functools.partial(grouped_matmul, a, b, g)
    sw.candidate("grouped", shape, None, call, flops, _agree(ref))
    for plan in GROUPED_CANDIDATES:
        sw.candidate("grouped", shape, plan, call, flops, _agree(ref))


def sweep_grouped(sw: Sweep) -> None:
    for skew in ("zipf", "uniform"):
        _grouped_case(sw, skew)
        torch.cuda.empty_cache()


def summary(sw: Sweep) -> list[str]:
    lines = ["# matmul_configs sweep — best plan per shape (same run)", f"# gpu: {torch.cuda.get_device_name()}",
             "| group | shape | best plan | TFLOP/s | default TFLOP/s (plan) | baseline | baseline TFLOP/s "
             "| best/base |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    keys = []
    for r in sw.results:
        if (r["group"], r["shape"]) not in keys:
            keys.append((r["group"], r["shape"]))
    for group, shape in keys:
        rows = [r for r in sw.results if r["group"] == group and r["shape"] == shape]
        ours = [r for r in rows if r["provider"] == "kernelworks" and r.get("ok")]
        base = [r for r in rows if r["provider"] != "kernelworks"]
        if not ours:
            continue
        best = max(ours, key=lambda r: r["tflops"])
        default = next((r for r in ours if r["plan"] == "default"), None)
        b0 = base[0] if base else None
        ratio = f"{best['tflops'] / b0['tflops']:.2f}x" if b0 else "-"
        dflt = f"{default['tflops']:.1f} ({default.get('default', '?')})" if default else "-"
        lines.append(f"| {group} | {shape} | {best['plan']} | {best['tflops']:.1f} | {dflt} | "
                     f"{b0['provider'] if b0 else '-'} | "
                     f"{b0['tflops'] if b0 else float('nan'):.1f} | {ratio} |")
    lines.append(f"# candidates skipped for the time budget: {sw.skipped}; failed: "
                 f"{sum(1 for r in sw.results if r.get('error'))}; elapsed {time.perf_counter() - sw.t0:.0f} s")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write every row (and the summary) as JSON here")
    ap.add_argument("--budget-s", type=float, default=125.0,
                    help="compile no new candidate after this many seconds (default 125)")
    ap.add_argument("--only", default="llama,swiglu,fp8,grouped", help="comma-separated groups to run")
    args = ap.parse_args()
    groups = {"llama": sweep_llama, "swiglu": sweep_swiglu, "fp8": sweep_fp8, "grouped": sweep_grouped}
    chosen = [g for g in args.only.split(",") if g]
    sw = Sweep(args.budget_s)
    # Each group gets its share of the budget in turn (a slow group cannot starve the later ones).
    shares = {"llama": 0.45, "swiglu": 0.12, "fp8": 0.23, "grouped": 0.20}
    total = sum(shares[g] for g in chosen)
    spent = 0.0
    for g in chosen:
        spent += shares[g] / total
        sw.budget_s = args.budget_s * spent
        groups[g](sw)
        torch.cuda.empty_cache()
    lines = summary(sw)
    print("\n".join(lines), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "timing": TIMING, "results": sw.results,
                       "summary": lines}, f, indent=1)


if __name__ == "__main__":
    main()
