"""Gated DeltaNet prefill on batches too small to fill the GPU (one long sequence): the scan's V rows per
program and the segment-parallel forward, with fla's ``chunk_gated_delta_rule`` in the same run.

Three studies, each a JSON under ``--out`` (saved after every shape) and a table last:

- ``variants``: forward only. The plain fused forward at 64 and 32 V rows, the unfused three-kernel form
  (state-only scan + parallel output) at 64/32/16 rows, the segmented forward in 2–16 segments at 64 and
  32 rows, the public op (what the dispatch picks) and fla. Since session 23 also the fla-like split of
  the chunk work: W = T(βγ ⊙ K) and Ũ = T(w ⊙ V) formed by a parallel kernel first, so each scan step has
  one product fewer on its serial chain (``fused-wu``: the output still in the scan; ``unfused-wu``: four
  kernels). Each result is checked against the plain forward (o and final state, relative L2) before it
  is timed; ``--only`` picks variants by name.
- ``rows``: the public op with the scan's width forced to 64, 32 or 16 rows or left to ``scan_block_v``,
  forward and forward + backward; gradients of each width against 64 rows' (the rows of the state evolve
  independently, so they agree to the bit); the backward's kernels by name on two shapes.
- ``keep``: training calls of the public op with the forward keeping its chunk-start states and U for the
  backward (the default since session 23) against the backward recomputing them (one more serial scan):
  the training forward, forward + backward, the backward over the forward, peak memory of a
  forward + backward, and the gradients of the two against each other; the inference forward and fla's
  beside.

Times are device times (``time_fn``: events, L2 flushed, the GPU kept busy for longer than the call's host
time, so a host-bound path is not charged its host time), with each call's host µs beside. fla's
backward refuses triton < 3.7.1 on Hopper (its issue #640), so only its forward is timed there.

    python benchmarks/sweeps/gated_delta_long.py variants --out $OUT      # on a GPU (fla optional)
    python benchmarks/sweeps/gated_delta_long.py rows --out $OUT [--shapes B1-T16k-qk16-v32,...]
    python benchmarks/sweeps/gated_delta_long.py keep --out $OUT
    python benchmarks/sweeps/gated_delta_long.py rows --smoke             # no GPU: the script on tiny shapes

Results: ``benchmarks/results/h100-80gb-hbm3/gaps/gated_delta-long-*`` (session 18; the ``variants`` file
came from this script's first form, which also kept per-kernel times and had no ``chosen_rows``).
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys

if "--smoke" in sys.argv:  # before triton is imported
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import triton
from torch.nn import functional

import kernelworks as kw
from kernelworks.ops.gated_delta import api, prefill_bwd_chunked, prefill_chunked
from kernelworks.runtime import replay

SHAPES = {  # (B, T, H_qk, H_v), K = V = 128
    "B1-T16k-qk16-v32": (1, 16384, 16, 32), "B1-T32k-qk16-v32": (1, 32768, 16, 32),
    "B1-T64k-qk16-v32": (1, 65536, 16, 32), "B1-T16k-qk16-v16": (1, 16384, 16, 16),
    "B1-T32k-qk16-v16": (1, 32768, 16, 16), "B2-T8k-qk16-v32": (2, 8192, 16, 32),
    "B8-T4k-qk16-v16": (8, 4096, 16, 16), "B2-T4k-qk16-v32": (2, 4096, 16, 32),
}
_auto_rows = prefill_chunked.scan_block_v


def _force_rows(rows: int | None) -> None:
    """The scan's V rows forced to ``rows`` in the forward and the backward (None: ``scan_block_v``)."""
    fn = _auto_rows if rows is None else (lambda programs, V, device: rows)
    prefill_chunked.scan_block_v = fn
    prefill_bwd_chunked.scan_block_v = fn


def _with_rows(rows: int | None, fn):
    def run():
        _force_rows(rows)
        try:
            return fn()
        finally:
            _force_rows(None)
    return run


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def _inputs(B: int, T: int, hq: int, hv: int, D: int, dev: str, dt: torch.dtype) -> tuple:
    torch.manual_seed(0)
    q = torch.randn(B, T, hq, D, device=dev).to(dt)
    k = functional.normalize(torch.randn(B, T, hq, D, device=dev), dim=-1).to(dt)
    v = torch.randn(B, T, hv, D, device=dev).to(dt)
    g = functional.logsigmoid(torch.randn(B, T, hv, device=dev) + 2.0)
    beta = torch.rand(B, T, hv, device=dev)
    return q, k, v, g, beta


def _fla():
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except ImportError:
        return None
    return chunk_gated_delta_rule


class _Timer:
    def __init__(self, smoke: bool) -> None:
        self.smoke = smoke

    def __call__(self, fn) -> tuple[float, float]:
        """(device ms, host µs) of ``fn``; (0, 0) in a smoke run after one call."""
        if self.smoke:
            fn()
            return 0.0, 0.0
        from kernelworks.bench.timing import time_fn
        t = time_fn(fn)
        return t.median_ms, t.host_us


def study_variants(shapes: dict, dev: str, dt: torch.dtype, D: int, time, fla, only: set | None = None) -> dict:
    return {tag: _variants_row(tag, *shape, dev, dt, D, time, fla, only) for tag, shape in shapes.items()}


def _wu_precomputed(fn):
    """``fn`` with the fused plan's U formed from W and Ũ of the parallel chunk kernel (K1b), not from T in
    the scan (``_Plan.fuse_wy`` off)."""
    planner = prefill_chunked._plan

    def run():
        prefill_chunked._plan = lambda *a, **k: planner(*a, **k)._replace(fuse_wy=False)
        try:
            return fn()
        finally:
            prefill_chunked._plan = planner
    return run


def _variants_row(tag: str, B: int, T: int, hq: int, hv: int, dev: str, dt: torch.dtype, D: int, time, fla,
                  only: set | None = None) -> dict:
    q, k, v, g, beta = _inputs(B, T, hq, hv, D, dev, dt)
    kwa = {"scale": D ** -0.5, "initial_state": None, "output_final_state": True, "chunk_size": 64}
    plain = functools.partial(prefill_chunked.chunked_prefill_fwd, q, k, v, g, beta, cu_seqlens=None, **kwa)
    unfused = functools.partial(plain, fuse_output=False, wy_in_scan=True)
    unfused_wu = functools.partial(plain, fuse_output=False, wy_in_scan=False)
    variants = {"plain": _with_rows(64, plain), "plain-bv32": _with_rows(32, plain),
                "unfused": _with_rows(64, unfused), "unfused-bv32": _with_rows(32, unfused),
                "unfused-bv16": _with_rows(16, unfused),
                "fused-wu": _with_rows(64, _wu_precomputed(plain)),
                "fused-wu-bv32": _with_rows(32, _wu_precomputed(plain)),
                "unfused-wu-bv32": _with_rows(32, unfused_wu), "unfused-wu-bv16": _with_rows(16, unfused_wu)}
    for n in (2, 4, 8, 16):
        seg = functools.partial(prefill_chunked.segmented_prefill_fwd, q, k, v, g, beta, n_segments=n, **kwa)
        variants[f"seg{n}"], variants[f"seg{n}-bv32"] = _with_rows(64, seg), _with_rows(32, seg)
    variants["public"] = lambda: kw.gated_delta_prefill(q, k, v, g, beta, output_final_state=True)
    if fla is not None:
        variants["fla"] = lambda: fla(q=q, k=k, v=v, g=g, beta=beta, scale=D ** -0.5, output_final_state=True)
    if only:
        variants = {n: f for n, f in variants.items() if n in only or n == "plain"}
    row = {"chosen_segments": prefill_chunked.prefill_segments(B, T, hv, D, q.device),
           "chosen_rows": _auto_rows(B * hv * -(-D // 64), D, q.device), "fwd": {}, "host_us": {}, "err": {}}
    with torch.no_grad():
        o0, f0, _ = variants["plain"]()
        for name, fn in variants.items():
            try:
                o, f = fn()[:2]
                f = f.transpose(-1, -2) if name == "fla" else f  # fla's states are [K, V]
                row["err"][name] = [_rel(o, o0), _rel(f, f0)]
                row["fwd"][name], row["host_us"][name] = time(fn)
            except Exception as e:  # a variant that fails is a row, not the end of the run
                row["fwd"][name], row["err"][name] = None, f"{type(e).__name__}: {str(e)[:200]}"
            print(tag, name, row["fwd"][name], row["err"][name], flush=True)
    return row


def study_rows(shapes: dict, dev: str, dt: torch.dtype, D: int, time, fla, smoke: bool) -> dict:
    return {tag: _rows_row(tag, *shape, dev, dt, D, time, fla, smoke) for tag, shape in shapes.items()}


def _rows_row(tag: str, B: int, T: int, hq: int, hv: int, dev: str, dt: torch.dtype, D: int, time, fla,
              smoke: bool) -> dict:
    q, k, v, g, beta = _inputs(B, T, hq, hv, D, dev, dt)
    do = torch.randn_like(v)
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v, g, beta)]
    row = {"auto_rows": _auto_rows(B * hv * -(-D // 64), D, q.device),
           "segments": prefill_chunked.prefill_segments(B, T, hv, D, q.device),
           "fwd": {}, "fwdbwd": {}, "grad_err": {}, "host_us": {}}

    def fwd():
        return kw.gated_delta_prefill(q, k, v, g, beta, output_final_state=True)

    def fwdbwd():
        o, _ = kw.gated_delta_prefill(*leaves, output_final_state=False)
        return torch.autograd.grad(o, leaves, do)

    ref = None
    for rows in (64, 32, 16, None):
        name = "auto" if rows is None else str(rows)
        _force_rows(rows)
        try:
            with replay.paused():  # a forced width must not replay another width's launches
                with torch.no_grad():
                    row["fwd"][name], row["host_us"][name] = time(fwd)
                grads = fwdbwd()
                ref = grads if rows == 64 else ref
                row["grad_err"][name] = max(_rel(a, b) for a, b in zip(grads, ref, strict=True))
                row["fwdbwd"][name] = time(fwdbwd)[0]
                if rows is None and not smoke and tag in ("B1-T16k-qk16-v32", "B1-T64k-qk16-v32"):
                    from kernelworks.bench.timing import kernel_times_us
                    row["kernels_fwdbwd"] = kernel_times_us(fwdbwd, iters=3)
        except Exception as e:  # a width that fails is a row, not the end of the run
            row["fwd"][name] = f"{type(e).__name__}: {str(e)[:200]}"
        finally:
            _force_rows(None)
        print(tag, name, row["fwd"].get(name), row["fwdbwd"].get(name), row["grad_err"].get(name), flush=True)
    if fla is not None:
        with torch.no_grad():
            row["fwd"]["fla"] = time(lambda: fla(q=q, k=k, v=v, g=g, beta=beta, scale=D ** -0.5,
                                                 output_final_state=True))[0]
    return row


def study_keep(shapes: dict, dev: str, dt: torch.dtype, D: int, time, fla, smoke: bool) -> dict:
    return {tag: _keep_row(*shape, dev, dt, D, time, fla, smoke) for tag, shape in shapes.items()}


def _keep_row(B: int, T: int, hq: int, hv: int, dev: str, dt: torch.dtype, D: int, time, fla, smoke: bool) -> dict:
    q, k, v, g, beta = _inputs(B, T, hq, hv, D, dev, dt)
    do = torch.randn_like(v)
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v, g, beta)]
    keeps = api._keeps_states
    row = {"segments": prefill_chunked.prefill_segments(B, T, hv, D, q.device),
           "kept": keeps(True, q, v, None), "infer_fwd": None, "fwd": {}, "fwdbwd": {}, "peak_gb": {}}

    def fwd():
        return kw.gated_delta_prefill(*leaves)

    def fwdbwd():
        o, _ = kw.gated_delta_prefill(*leaves)
        return torch.autograd.grad(o, leaves, do)

    with torch.no_grad():
        row["infer_fwd"] = time(lambda: kw.gated_delta_prefill(q, k, v, g, beta))[0]
    grads = {}
    for name in ("recompute", "keep"):
        api._keeps_states = keeps if name == "keep" else (lambda *a: False)
        try:
            with replay.paused():  # the two variants share a call signature: no replay across them
                grads[name] = fwdbwd()
                row["fwd"][name] = time(fwd)[0]
                row["fwdbwd"][name] = time(fwdbwd)[0]
                if not smoke:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                    fwdbwd()
                    row["peak_gb"][name] = (torch.cuda.max_memory_allocated() - base) / 1e9
        finally:
            api._keeps_states = keeps
    row["grad_err"] = max(_rel(a, b) for a, b in zip(grads["keep"], grads["recompute"], strict=True))
    if fla is not None:
        with torch.no_grad():
            row["fla_fwd"] = time(lambda: fla(q=q, k=k, v=v, g=g, beta=beta, scale=D ** -0.5))[0]
    print(row, flush=True)
    return row


def _print_keep(res: dict) -> None:
    print(f"\n{res['device']}: device ms; bwd/fwd over the training forward (and over the inference forward)")
    for tag, row in res["shapes"].items():
        print(f"-- {tag} (segments {row['segments']}, states kept: {row['kept']}) inference fwd {row['infer_fwd']}"
              f"  fla fwd {row.get('fla_fwd')}  grad rel diff {row['grad_err']:.1e}")
        for name in ("recompute", "keep"):
            f, fb, peak = row["fwd"][name], row["fwdbwd"][name], row["peak_gb"].get(name)
            if not f:
                print(f"   {name:9s} {f} {fb}")
                continue
            print(f"   {name:9s} fwd {f:7.3f}  fwd+bwd {fb:7.3f}  bwd/fwd {(fb - f) / f:4.2f} "
                  f"({(fb - f) / row['infer_fwd']:4.2f})  peak {peak} GB")


def _print_rows(res: dict) -> None:
    print(f"\n{res['device']}: ms (fwd | fwd+bwd, bwd/fwd), max grad rel err against 64 rows")
    for tag, row in res["shapes"].items():
        fla = row["fwd"].get("fla")
        print(f"-- {tag} auto rows {row['auto_rows']} segments {row['segments']}  fla fwd {fla}")
        for name in ("64", "32", "16", "auto"):
            f, fb = row["fwd"].get(name), row["fwdbwd"].get(name)
            if not isinstance(f, float) or not isinstance(fb, float) or not f:
                print(f"   {name:5s} {f} {fb}")
                continue
            print(f"   {name:5s} fwd {f:7.3f} (fla/x {fla / f if fla else float('nan'):4.2f})  fwd+bwd {fb:7.3f}"
                  f"  bwd/fwd {(fb - f) / f:4.2f}  grad err {row['grad_err'][name]:.1e}")
        if "kernels_fwdbwd" in row:
            print("   kernels:", {k[:24]: round(v) for k, v in row["kernels_fwdbwd"].items() if v > 20})


def _print_variants(res: dict) -> None:
    print(f"\nforward device ms ({res['device']}); fla/x = fla's time over the variant's")
    for tag, row in res["shapes"].items():
        fla = row["fwd"].get("fla")
        print(f"-- {tag} (chosen segments {row['chosen_segments']}, rows {row.get('chosen_rows')})")
        for name, ms in row["fwd"].items():
            if ms is None:
                print(f"   {name:14s} FAILED {row['err'][name]}")
                continue
            e = row["err"][name]
            ratio = fla / ms if fla and ms else float("nan")
            print(f"   {name:14s} {ms:7.3f} ms  host {row['host_us'][name]:8.0f} us  fla/x {ratio:5.2f}"
                  f"  err o {e[0]:.1e} f {e[1]:.1e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("study", nargs="*", help="variants, rows, keep (default: variants and rows)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."),
                    help="folder for gated_delta-long-<study>.json, or a file F.json (then F-<study>.json)")
    ap.add_argument("--shapes", help="comma-separated shape names (default: all)")
    ap.add_argument("--smoke", action="store_true", help="no GPU: the interpreter on tiny shapes, nothing timed")
    ap.add_argument("--only", help="variants study: comma-separated variant names (plain always runs: the check)")
    args = ap.parse_args()
    if set(args.study) - {"variants", "rows", "keep"}:
        ap.error(f"unknown study {sorted(set(args.study) - {'variants', 'rows', 'keep'})}: variants, rows, keep")
    if args.smoke:
        shapes, dev, dt, D = {"smoke-B1-T96-qk1-v2": (1, 96, 1, 2)}, "cpu", torch.float16, 16
    else:
        shapes, dev, dt, D = SHAPES, "cuda", torch.bfloat16, 128
        if args.shapes:
            shapes = {k: SHAPES[k] for k in args.shapes.split(",")}
    fla = None if args.smoke else _fla()
    time = _Timer(args.smoke)
    if args.out.endswith(".json"):  # benchmarks/gpu_session.sh's sweeps stage passes a file
        folder, prefix = os.path.dirname(args.out) or ".", os.path.basename(args.out)[:-5]
    else:
        folder, prefix = args.out, "gated_delta-long"
    os.makedirs(folder, exist_ok=True)
    for study in args.study or ("variants", "rows"):
        res = {"device": "cpu-smoke" if args.smoke else torch.cuda.get_device_name(),
               "torch": torch.__version__, "triton": triton.__version__,
               "commit": os.environ.get("KERNELWORKS_COMMIT"), "study": study}
        if study == "variants":
            res["shapes"] = study_variants(shapes, dev, dt, D, time, fla,
                                           set(args.only.split(",")) if args.only else None)
        elif study == "keep":
            res["shapes"] = study_keep(shapes, dev, dt, D, time, fla, args.smoke)
        else:
            res["shapes"] = study_rows(shapes, dev, dt, D, time, fla, args.smoke)
        with open(os.path.join(folder, f"{prefix}-{study}.json"), "w") as fh:
            json.dump(res, fh, indent=1)
        {"variants": _print_variants, "keep": _print_keep, "rows": _print_rows}[study](res)


if __name__ == "__main__":
    main()
