"""GEMM — decode split-K plans and fp8 fast accumulation, timed against cuBLAS on the GPU.

    python benchmarks/sweeps/matmul_decode_fp8.py --out F.json [--budget-s 95] [--only decode,fp8]

decode: M ∈ (1, 16, 32, 64, 128) × Llama-3 8B/70B projections (qkv, o, gate_up, down; ``x @ W.t()``, W
[N, K] row-major bf16): cuBLAS (torch.matmul), our default plan, and candidate plans forced with
``forward.forced_plan`` — the pointer kernel with in-launch split-K (inline) vs the session-2 two-launch
reduction, other tiles, and the TMA kernel's new split-K. Every variant's output is checked against cuBLAS
(relative L2 ≤ 1e-2) and, where K is split, for bit-identical repeats (FAIL lines otherwise).
"%copy" = weight bytes / time over the bandwidth of a device copy measured here.

fp8: 8192³ per tensor and per row: ours default (promoted every 128 K) / fast_accum=True against
``torch._scaled_mm`` use_fast_accum False / True, each checked against an fp32 product (rel L2 ≤ 2e-2).

Timing: kernelworks.bench.timing.time_fn (L2 flushed, host ahead: device time), medians. A budget stops new
compiles (candidates already compiled still run). The table printed last is the summary.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import time

import torch

from kernelworks.bench.timing import time_fn
from kernelworks.ops.gemm import forward
from kernelworks.ops.gemm.api import matmul
from kernelworks.ops.gemm.forward import Plan, decode_split
from kernelworks.ops.gemm.fp8 import fp8_matmul
from kernelworks.runtime.launch import cdiv

TIMING = {"warmup_ms": 5.0, "rep_ms": 20.0}
SHAPES = {  # name: (K, N) of W [N, K]
    "8b-qkv": (4096, 6144), "8b-o": (4096, 4096), "8b-gate_up": (4096, 28672), "8b-down": (14336, 4096),
    "70b-qkv": (8192, 10240), "70b-o": (8192, 8192), "70b-gate_up": (8192, 57344), "70b-down": (28672, 8192),
}
MS = (64, 16, 1, 32, 128)  # the weak bucket first, so its candidates compile inside the budget
ROWS: list[dict] = []


def plan_str(p: Plan | None) -> str:
    if p is None:
        return "default"
    s = f"{'tma' if p.tma else 'ptr'} {p.BLOCK_M}x{p.BLOCK_N}x{p.BLOCK_K} w{p.num_warps} s{p.num_stages}"
    if p.SPLIT_K > 1:
        s += f" split{p.SPLIT_K}{'' if p.SPLIT_INLINE or p.tma else ' 2launch'}"
    if p.tma and not p.FLATTEN:
        s += " noflat"
    if p.EPI_SPLIT > 1:
        s += f" epi{p.EPI_SPLIT}"
    if p.FAST_ACCUM:
        s += " fastacc"
    return s


def candidates(m: int, n: int, k: int, n_sms: int) -> list[Plan]:
    """Plans to time for an [m, k] @ [k, n] decode product (split counts from the default's one-wave rule
    for each tiling, plus a deliberate two-wave one to test the rule)."""
    def sp(bn: int, bk: int = 128, bm: int = 64) -> int:
        return decode_split(cdiv(m, bm) * cdiv(n, bn), k, bk, n_sms)

    if m <= 16:
        return [
            Plan(False, 16, 64, 128, 4, 4, SPLIT_K=sp(64, bm=16), SPLIT_INLINE=False),
            Plan(False, 16, 64, 256, 4, 3),
            Plan(False, 16, 128, 128, 4, 4, SPLIT_K=sp(128, bm=16)),
            Plan(True, 64, 128, 128, 4, 4, SPLIT_K=sp(128), FLATTEN=False),
        ]
    if m <= 64:
        return [
            Plan(False, 64, 128, 128, 4, 4, SPLIT_K=sp(128), SPLIT_INLINE=False),
            Plan(False, 64, 128, 128, 4, 4),
            Plan(True, 64, 128, 128, 4, 4, SPLIT_K=sp(128), FLATTEN=False),
            Plan(False, 64, 128, 64, 4, 4, SPLIT_K=sp(128, 64)),  # 96 KB of smem: 2 CTAs per SM
            Plan(True, 64, 64, 128, 4, 6, SPLIT_K=sp(64), FLATTEN=False),
            Plan(False, 64, 128, 128, 4, 4, SPLIT_K=2 * sp(128)),  # two waves: tests the one-wave rule
        ]
    return [Plan(True, 64, 128, 128, 4, 4, SPLIT_K=max(2, sp(128)), FLATTEN=False),
            Plan(True, 128, 128, 64, 8, 4, EPI_SPLIT=2)]


def rel_l2(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30)).item()


class Budget:
    def __init__(self, seconds: float):
        self.t0 = time.perf_counter()
        self.seconds = seconds
        self.seen: set = set()
        self.skipped = 0

    def allows(self, key) -> bool:
        if key in self.seen:
            return time.perf_counter() - self.t0 < self.seconds + 15
        if time.perf_counter() - self.t0 > self.seconds:
            self.skipped += 1
            return False
        self.seen.add(key)
        return True


def timed(fn) -> float:
    return time_fn(fn, **TIMING).median_ms * 1e3


def copy_bandwidth() -> float:
    """GB/s of a 512 MB device copy (read + write counted)."""
    src = torch.empty(256 << 20, dtype=torch.int16, device="cuda")
    dst = torch.empty_like(src)
    us = timed(lambda: dst.copy_(src))
    return 2 * src.numel() * 2 / (us * 1e-6) / 1e9


def run_decode(budget: Budget, copy_gbs: float) -> None:
    n_sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m in MS:
        for name, (k, n) in SHAPES.items():
            torch.manual_seed(0)
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5
            shape = f"{name}-M{m}"
            ref = torch.matmul(x, w.t())
            us = timed(functools.partial(torch.matmul, x, w.t()))
            wbytes = n * k * 2
            ROWS.append({"group": "decode", "shape": shape, "variant": "cuBLAS", "us": us, "ok": True,
                         "pct_copy": 100 * wbytes / (us * 1e-6) / 1e9 / copy_gbs})
            print(f"{shape:18s} {'cuBLAS':34s} {us:8.1f} µs", flush=True)
            chosen = forward.matmul_plan(m, n, k, 1, 2, False, True, n_sms)
            labels = set()
            for plan in [None, *candidates(m, n, k, n_sms)]:
                if plan is not None and (plan_str(plan) in labels or plan == chosen):
                    continue  # a duplicate (split 1 makes some candidates coincide) or the default itself
                labels.add(plan_str(plan))
                key = (plan, m == 1, m)
                if plan is not None and not budget.allows(key):
                    continue
                label = f"default = {plan_str(chosen)}" if plan is None else plan_str(plan)
                row = {"group": "decode", "shape": shape, "variant": label, "plan": plan_str(plan or chosen)}
                try:
                    ctx = forward.forced_plan(plan) if plan is not None else contextlib.nullcontext()
                    with ctx:
                        call = functools.partial(matmul, x, w.t())
                        out1, out2 = call(), call()
                        torch.cuda.synchronize()
                        err = rel_l2(out1, ref)
                        same = bool(torch.equal(out1, out2))
                        ok = err <= 1e-2 and same
                        us_k = timed(call) if ok else math.nan
                except Exception as e:  # a failing candidate is a result
                    row.update(ok=False, error=f"{type(e).__name__}: {str(e).splitlines()[0][:150]}")
                    ROWS.append(row)
                    print(f"FAIL {shape:18s} {label:34s} {row['error']}", flush=True)
                    continue
                row.update(ok=ok, us=us_k, rel_l2=err, repeat_equal=same, vs_cublas=us / us_k if ok else None,
                           pct_copy=100 * wbytes / (us_k * 1e-6) / 1e9 / copy_gbs if ok else None)
                ROWS.append(row)
                if not ok:
                    print(f"FAIL {shape:18s} {label:34s} rel_l2={err:.2e} repeat_equal={same}", flush=True)
                else:
                    print(f"{shape:18s} {label:34s} {us_k:8.1f} µs  {us / us_k:5.2f}x cuBLAS  "
                          f"{row['pct_copy']:5.1f}% copy  rel_l2={err:.1e}", flush=True)
            del x, w, ref
        torch.cuda.empty_cache()


def run_fp8() -> None:
    m = n = k = 8192
    torch.manual_seed(0)
    e4m3 = torch.float8_e4m3fn
    a = torch.randn(m, k, device="cuda").to(e4m3)
    w = torch.randn(n, k, device="cuda").to(e4m3)
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    exact = torch.matmul(a.float(), w.float().t())
    torch.backends.cuda.matmul.allow_tf32 = prev
    s = k ** -0.25
    flops = 2.0 * m * n * k
    for scaling in ("tensor", "row"):
        if scaling == "tensor":
            sa, sb = torch.full((), s, device="cuda"), torch.full((), s, device="cuda")
            ref = exact * (sa * sb)
        else:
            sa, sb = (0.5 + torch.rand(m, 1, device="cuda")) * s, (0.5 + torch.rand(1, n, device="cuda")) * s
            ref = exact * sa * sb
        mm = functools.partial(torch._scaled_mm, a, w.t(), sa, sb, out_dtype=torch.bfloat16)
        ours = functools.partial(fp8_matmul, a, w.t(), sa, sb)
        variants = {
            "_scaled_mm default": functools.partial(mm, use_fast_accum=False),
            "_scaled_mm fast": functools.partial(mm, use_fast_accum=True),
            "ours default": ours,
            "ours fast_accum": functools.partial(ours, fast_accum=True),
        }
        for label, fn in variants.items():
            row = {"group": "fp8", "shape": f"8192-{scaling}", "variant": label}
            try:
                out = fn()
                torch.cuda.synchronize()
                err = rel_l2(out, ref)
                ok = err <= 2e-2
                us = timed(fn) if ok else math.nan
            except Exception as e:
                row.update(ok=False, error=f"{type(e).__name__}: {str(e).splitlines()[0][:150]}")
                ROWS.append(row)
                print(f"FAIL fp8 {scaling} {label} {row['error']}", flush=True)
                continue
            row.update(ok=ok, us=us, rel_l2_fp32=err, tflops=flops / (us * 1e-6) / 1e12 if ok else None)
            ROWS.append(row)
            tag = "" if ok else "FAIL "
            print(f"{tag}fp8 8192-{scaling:6s} {label:20s} {us:8.1f} µs {row.get('tflops') or 0:7.1f} TF/s "
                  f"rel_l2_fp32={err:.2e}", flush=True)
        del ref
    del exact


def summary() -> list[str]:
    lines = [f"# gemm_decode_fp8 — {torch.cuda.get_device_name()}",
             "| shape | cuBLAS µs | default µs (plan) | default/cuBLAS | default %copy | best candidate | best µs "
             "| best/cuBLAS |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    shapes = []
    for r in ROWS:
        if r["group"] == "decode" and r["shape"] not in shapes:
            shapes.append(r["shape"])
    for sh in shapes:
        rows = [r for r in ROWS if r["shape"] == sh]
        cub = next(r for r in rows if r["variant"] == "cuBLAS")
        ours = [r for r in rows if r["variant"] != "cuBLAS" and r.get("ok")]
        dflt = next((r for r in ours if r["variant"].startswith("default")), None)
        best = min(ours, key=lambda r: r["us"]) if ours else None
        d = (f"{dflt['us']:.1f} ({dflt['plan']}) | {cub['us'] / dflt['us']:.2f}x | {dflt['pct_copy']:.0f}%"
             if dflt else "FAIL | - | -")
        b = f"{best['plan']} | {best['us']:.1f} | {cub['us'] / best['us']:.2f}x" if best else "- | - | -"
        lines.append(f"| {sh} | {cub['us']:.1f} | {d} | {b} |")
    fp8 = [r for r in ROWS if r["group"] == "fp8"]
    if fp8:
        lines += ["| fp8 shape | variant | µs | TFLOP/s | rel L2 vs fp32 |", "| --- | --- | --- | --- | --- |"]
        for r in fp8:
            lines.append(f"| {r['shape']} | {r['variant']} | {r.get('us', float('nan')):.1f} | "
                         f"{r.get('tflops') or float('nan'):.0f} | {r.get('rel_l2_fp32', float('nan')):.2e} |")
    fails = [r for r in ROWS if not r.get("ok")]
    lines.append(f"# FAILED variants: {len(fails)}" + "".join(f"\n#   FAIL {r['shape']} {r['variant']}"
                                                             for r in fails))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="JSON file for every row and the summary")
    ap.add_argument("--budget-s", type=float, default=85.0, help="no new decode compiles after this (s)")
    ap.add_argument("--only", default="decode,fp8")
    args = ap.parse_args()
    groups = args.only.split(",")
    copy_gbs = copy_bandwidth()
    print(f"device copy bandwidth: {copy_gbs:.0f} GB/s", flush=True)
    budget = Budget(args.budget_s)
    if "fp8" in groups:
        run_fp8()
        torch.cuda.empty_cache()
    if "decode" in groups:
        run_decode(budget, copy_gbs)
    lines = summary()
    lines.append(f"# copy bandwidth {copy_gbs:.0f} GB/s; candidates skipped for the budget: {budget.skipped}; "
                 f"elapsed {time.perf_counter() - budget.t0:.0f} s")
    print("\n".join(lines), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "timing": TIMING, "copy_gbs": copy_gbs,
                       "rows": ROWS, "summary": lines}, f, indent=1)


if __name__ == "__main__":
    main()
