"""Small-M GEMM plans against cuBLAS, timed two ways: the decode projections of issue 19 (Qwen2.5-7B qkv / o at
M = 32, Llama-3-8B qkv / o at M = 64 and o at M = 16), bf16, ``x @ W.T``.

    python benchmarks/sweeps/matmul_small_m.py dobench [--out DIR]   # do_bench, L2 flushed: the issue's method
    python benchmarks/sweeps/matmul_small_m.py graph [--out DIR]     # back to back in one CUDA graph
    python benchmarks/sweeps/matmul_small_m.py qkv [--out DIR]       # Qwen2.5-7B qkv: 48 plans per M, graphed

``dobench``: cuBLAS, our default (``kw.matmul``, replay on) and forced plans (Hopper TMA kernel with split-K 1, 2, 3,
4 or 6; pointer kernel, BLOCK_M = M rounded up, split 1/2/4), each with ``triton.testing.do_bench`` (L2 flushed between
calls). Forced plans run with replay paused (``forced_plan`` needs the ordinary path), so their host path is
slower than the default's: where it outlasts the flush the figure includes host time, which favours the default.
``graph``: eight distinct weights (more bytes than L2 holds) multiplied back to back inside one CUDA graph
(``do_bench_cudagraph``), per-GEMM µs: no host time, no flush between kernels, as in a captured decode step.
``qkv``: Qwen2.5-7B qkv (N 4608, K 3584) at M = 1 / 32 / 64, cuBLAS, our default and 48 forced plans each
(pointer tiles 32/64 columns × 128/256-deep K steps × 3/4/6 stages × split 1/2, 32-column ones on 2 or 4 warps;
the Hopper kernel at 64 × 32/64 × 128, 3/4/6 stages, split 1/2), every call captured in its own CUDA graph and
replayed under do_bench (L2 flushed, no host time).
Results: ``DIR/matmul-small-m-plans-{dobench,cudagraph,session21}.json`` (session 19 at 88b7d31 and session 21
at bb4e993 in ``benchmarks/results/h100-80gb-hbm3/gaps/``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import triton
from triton.testing import do_bench, do_bench_cudagraph

import kernelworks as kw
from kernelworks.bench.results import git_commit
from kernelworks.ops.gemm.forward import Plan, forced_plan
from kernelworks.runtime import replay

SHAPES = {"q7b-qkv-M32": (32, 3584, 4608), "q7b-o-M32": (32, 3584, 3584), "l8b-qkv-M64": (64, 4096, 6144),
          "l8b-o-M64": (64, 4096, 4096), "l8b-o-M16": (16, 4096, 4096)}


def dobench_plans() -> list[tuple[str, Plan]]:
    plans = []
    for split in (1, 2, 3, 4, 6):
        plans += [("tma64x128x128s4", Plan(True, 64, 128, 128, 4, 4, SPLIT_K=split)),
                  ("tma64x64x128s5", Plan(True, 64, 64, 128, 4, 5, SPLIT_K=split)),
                  ("tma64x128x64s6", Plan(True, 64, 128, 64, 4, 6, SPLIT_K=split))]
    for bn, bk, stages in ((64, 128, 4), (128, 128, 4), (64, 256, 3), (128, 64, 6), (32, 256, 4)):
        for split in (1, 2, 4):  # BLOCK_M 0: M rounded up to a power of two (≥ 16) per shape
            plans.append((f"ptr{bn}x{bk}s{stages}", Plan(False, 0, bn, bk, 4, stages, SPLIT_K=split)))
    return plans


GRAPH_PLANS = [("n32k256s4", 32, 256, 4, 1), ("n32k256s5", 32, 256, 5, 1), ("n32k128s6", 32, 128, 6, 1),
               ("n64k256s3", 64, 256, 3, 1), ("n32k256s4-k2", 32, 256, 4, 2), ("n64k128s4-k2", 64, 128, 4, 2)]
"""Pointer-kernel plans for the graph study: (name, BLOCK_N, BLOCK_K, stages, SPLIT_K), BLOCK_M = M rounded up."""


def _checked(plan: Plan, a: torch.Tensor, w: torch.Tensor) -> None:
    with forced_plan(plan):
        c = kw.matmul(a, w.t())
    ref = a @ w.t()
    err = float((c.float() - ref.float()).norm() / ref.float().norm())
    if not err < 1e-2:
        raise ValueError(f"wrong: relative L2 {err:.3g}")


def _dobench_shape(name: str, m: int, k: int, n: int) -> dict:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    res = {"shape": name, "cublas_us": do_bench(lambda: torch.matmul(a, w.t()), warmup=50, rep=300) * 1e3,
           "kw_default_us": do_bench(lambda: kw.matmul(a, w.t()), warmup=50, rep=300) * 1e3, "plans": {}}
    best = (res["kw_default_us"], "default")
    with replay.paused():
        for label, plan in dobench_plans():
            if not plan.tma:
                plan = Plan(False, max(16, triton.next_power_of_2(m)), plan.BLOCK_N, plan.BLOCK_K, 4,
                            plan.num_stages, SPLIT_K=plan.SPLIT_K)
            key = f"{label}-k{plan.SPLIT_K}"
            try:
                _checked(plan, a, w)
                with forced_plan(plan):
                    us = do_bench(lambda: kw.matmul(a, w.t()), warmup=30, rep=150) * 1e3
            except Exception as e:  # out of resources, or wrong
                res["plans"][key] = type(e).__name__
                continue
            res["plans"][key] = us
            best = min(best, (us, key))
    res["best_us"], res["best"] = best
    print(f"{name}: cuBLAS {res['cublas_us']:.1f} µs, kw {res['kw_default_us']:.1f} "
          f"({res['cublas_us'] / res['kw_default_us']:.3f}×), best {best[1]} {best[0]:.1f}", flush=True)
    return res


def _graph_shape(name: str, m: int, k: int, n: int) -> dict:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5 for _ in range(8)]

    def per_gemm_us(f) -> float:
        def all_weights():
            for w in weights:
                f(w)
        return do_bench_cudagraph(all_weights, rep=200) * 1e3 / len(weights)

    res = {"shape": name, "cublas_us": per_gemm_us(lambda w: torch.matmul(a, w.t())),
           "kw_us": per_gemm_us(lambda w: kw.matmul(a, w.t()))}
    with replay.paused():
        for label, bn, bk, stages, split in GRAPH_PLANS:
            plan = Plan(False, max(16, triton.next_power_of_2(m)), bn, bk, 4, stages, SPLIT_K=split)
            try:
                _checked(plan, a, weights[0])
                with forced_plan(plan):
                    res[label] = per_gemm_us(lambda w: kw.matmul(a, w.t()))
            except Exception as e:
                res[label] = type(e).__name__
    print(name, {k: round(v, 1) if isinstance(v, float) else v for k, v in res.items() if k != "shape"},
          f"kw/cuBLAS {res['cublas_us'] / res['kw_us']:.3f}", flush=True)
    return res


def _graphed_us(fn, rep: int = 200) -> float:
    """µs of one call of ``fn`` replayed from a CUDA graph under do_bench (L2 flushed between replays)."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return do_bench(g.replay, warmup=25, rep=rep) * 1e3


def qkv_plans(m: int) -> list[tuple[str, Plan]]:
    bm = max(16, triton.next_power_of_2(m))
    plans = []
    for bn in (32, 64):
        for bk in (128, 256):
            for stages in (3, 4, 6):
                for split in (1, 2):
                    for warps in ((2, 4) if bn == 32 else (4,)):
                        plans.append((f"ptr{bm}x{bn}x{bk}s{stages}w{warps}k{split}",
                                      Plan(False, bm, bn, bk, warps, stages, SPLIT_K=split)))
    for bn in (32, 64):
        for stages in (3, 4, 6):
            for split in (1, 2):
                plans.append((f"tma64x{bn}x128s{stages}k{split}", Plan(True, 64, bn, 128, 4, stages, SPLIT_K=split)))
    return plans


def _qkv_shape(m: int, n: int = 4608, k: int = 3584) -> dict:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    row = {"cublas": _graphed_us(lambda: a @ w.t()), "kw": _graphed_us(lambda: kw.matmul(a, w.t()))}
    with replay.paused():
        for label, plan in qkv_plans(m):
            try:
                _checked(plan, a, w)
                with forced_plan(plan):
                    row[label] = _graphed_us(lambda: kw.matmul(a, w.t()), rep=100)
            except Exception as e:  # out of resources, or wrong
                row[label] = type(e).__name__
    best = sorted((v, k_) for k_, v in row.items() if isinstance(v, float) and k_ not in ("cublas", "kw"))[:3]
    print(f"qkv M{m}: cuBLAS {row['cublas']:.1f}, kw {row['kw']:.1f} µs; best " +
          ", ".join(f"{k_} {v:.1f} ({row['cublas'] / v:.3f}×)" for v, k_ in best), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("study", choices=("dobench", "graph", "qkv"))
    ap.add_argument("--out", type=Path, default=Path("."))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.study == "qkv":
        doc = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "commit": git_commit(), "method": "each call in its own CUDA graph, do_bench (L2 flushed), µs",
               "small_m": {f"M{m}": _qkv_shape(m) for m in (1, 32, 64)}}
        (args.out / "matmul-small-m-plans-session21.json").write_text(json.dumps(doc, indent=1) + "\n")
        return
    if args.study == "dobench":  # M = 16 is the graph study's alone
        rows = [_dobench_shape(name, *shape) for name, shape in SHAPES.items() if name != "l8b-o-M16"]
    else:
        rows = [_graph_shape(name, *shape) for name, shape in SHAPES.items()]
    method = ("do_bench, L2 flushed, per call; forced plans with replay paused" if args.study == "dobench" else
              "do_bench_cudagraph over 8 distinct weights per replay (more than L2), per-GEMM µs")
    doc = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "commit": git_commit(), "method": method, "rows": rows}
    name = "matmul-small-m-plans-" + ("dobench" if args.study == "dobench" else "cudagraph") + ".json"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / name).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
