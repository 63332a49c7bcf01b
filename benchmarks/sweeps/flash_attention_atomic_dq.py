"""The flash attention backward in one pass (dQ summed by fp32 atomics) against the deterministic two-pass one,
with SDPA's flash and cuDNN backwards in the same run.

The deterministic backward recomputes QKᵀ and dO Vᵀ in a second pass for dQ: 7 products of ``Sq·Sk·D`` where
a pass that adds each key block's ``dS K`` into dQ with atomics needs 5. For each case this times the
backward alone (``time_fn``: events, L2 flushed) of

- ``deterministic``: the two passes with the shipped plan;
- ``atomic-<N>x<M>-w<warps>-s<stages>``: the one pass with the dK/dV pass's tiles forced (``N`` keys a program,
  ``M`` query rows a step);
- ``sdpa-flash`` / ``sdpa-cudnn``: ``torch.autograd.grad`` through SDPA's output under that backend;

and checks each of ours against the deterministic gradients (relative L2). A JSON under ``--out`` and a table
last.

    python benchmarks/sweeps/flash_attention_atomic_dq.py --out $OUT     # on a GPU
    python benchmarks/sweeps/flash_attention_atomic_dq.py --smoke        # no GPU: the script on tiny shapes
"""
from __future__ import annotations

import argparse
import json
import os
import sys

if "--smoke" in sys.argv:  # before triton is imported
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import triton
from torch.nn import functional

from kernelworks.ops.attention.backward import attention_bwd, forced_bwd_plan
from kernelworks.ops.attention.forward import attention_fwd

CASES = {  # (B, S, Hq, Hkv, D, causal)
    "b2-h32-s4k-d128-causal": (2, 4096, 32, 32, 128, True),
    "b2-h32-s4k-d128": (2, 4096, 32, 32, 128, False),
    "b1-hq28-hkv4-s8k-d128-causal": (1, 8192, 28, 4, 128, True),
    "b4-h32-s4k-d64-causal": (4, 4096, 32, 32, 64, True),
    "b2-hq8-hkv4-s4k-d256-causal": (2, 4096, 8, 4, 256, True),
}
PLANS = {128: [(128, 32, 8, 2), (128, 64, 8, 2), (64, 32, 4, 1), (64, 64, 4, 2)],
         64: [(128, 64, 8, 2), (128, 32, 8, 2), (64, 64, 4, 2)],
         256: [(32, 32, 4, 2), (32, 16, 4, 2)]}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def _flops(B: int, S: int, H: int, D: int, causal: bool) -> float:
    """The backward's FLOPs by flash-attn's convention: 2.5 × the forward's ``4·B·H·S²·D`` (halved causal)."""
    return 2.5 * 4 * B * H * S * S * D / (2 if causal else 1)


def run_case(B: int, S: int, hq: int, hkv: int, D: int, causal: bool, dev: str, time) -> dict:
    torch.manual_seed(0)
    dt = torch.bfloat16 if dev == "cuda" else torch.float16
    q, k, v = (torch.randn(B, S, h, D, device=dev, dtype=dt) for h in (hq, hkv, hkv))
    scale, right = D ** -0.5, (0 if causal else -1)
    o, lse = attention_fwd(q, k, v, None, None, S, S, scale, -1, right, 0.0)
    do = torch.randn_like(o)

    def ours(deterministic: bool):
        return lambda: attention_bwd(do, None, q, k, v, o, lse, None, None, S, S, scale, -1, right, 0.0,
                                     deterministic=deterministic)

    row: dict = {"us": {}, "err": {}, "tflops": {}}
    want = ours(True)()
    variants = {"deterministic": (ours(True), None)}
    for n, m, w, st in PLANS[D]:
        variants[f"atomic-{n}x{m}-w{w}-s{st}"] = (ours(False), {"KV_N": n, "KV_M": m, "kv_warps": w, "kv_stages": st})
    for name, (fn, knobs) in variants.items():
        try:
            with forced_bwd_plan(**(knobs or {})):
                got = fn()
                row["err"][name] = max(_rel(a, b) for a, b in zip(got, want, strict=True))
                row["us"][name] = time(fn)
        except Exception as e:  # a plan that fails to compile or run is a row, not the end of the sweep
            row["us"][name], row["err"][name] = None, f"{type(e).__name__}: {str(e)[:200]}"
        print(name, row["us"][name], row["err"][name], flush=True)
    if dev == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        ql, kl, vl = (t.transpose(1, 2).detach().requires_grad_() for t in (q, k, v))
        for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION), ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    out = functional.scaled_dot_product_attention(ql, kl, vl, is_causal=causal, enable_gqa=hq != hkv)
                gl = do.transpose(1, 2)
                row["us"][name] = time(lambda out=out, gl=gl: torch.autograd.grad(out, (ql, kl, vl), gl,
                                                                                   retain_graph=True))
            except Exception as e:
                row["us"][name] = None
                row["err"][name] = f"{type(e).__name__}: {str(e)[:200]}"
            print(name, row["us"][name], flush=True)
    flops = _flops(B, S, hq, D, causal)
    row["tflops"] = {n: flops / (us * 1e-6) / 1e12 for n, us in row["us"].items() if us}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for flash_attention-atomic-dq.json")
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    ap.add_argument("--smoke", action="store_true", help="no GPU: the interpreter on a tiny case, nothing timed")
    args = ap.parse_args()
    if args.smoke:
        cases, dev = {"smoke": (1, 40, 2, 1, 16, True)}, "cpu"
        PLANS[16] = [(16, 16, 1, 1)]

        def time(fn) -> float:
            fn()
            return 0.0
    else:
        from kernelworks.bench.timing import time_fn
        cases, dev = CASES, "cuda"
        if args.cases:
            cases = {c: CASES[c] for c in args.cases.split(",")}

        def time(fn) -> float:
            return time_fn(fn).median_ms * 1e3
    res = {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu-smoke", "torch": torch.__version__,
           "triton": triton.__version__, "commit": os.environ.get("KERNELWORKS_COMMIT"), "cases": {}}
    os.makedirs(args.out, exist_ok=True)
    for tag, case in cases.items():
        print("--", tag, flush=True)
        res["cases"][tag] = run_case(*case, dev, time)
        with open(os.path.join(args.out, "flash_attention-atomic-dq.json"), "w") as fh:
            json.dump(res, fh, indent=1)
    print(f"\n{res['device']}: backward µs (TFLOP/s), × = deterministic's time over the variant's")
    for tag, row in res["cases"].items():
        base = row["us"].get("deterministic")
        print(f"-- {tag}")
        for name, us in row["us"].items():
            if us is None:
                print(f"   {name:24s} FAILED {row['err'].get(name)}")
                continue
            if not us:  # a smoke run times nothing
                continue
            err = row["err"].get(name)
            err_s = f"  grad rel diff {err:.1e}" if isinstance(err, float) else ""
            print(f"   {name:24s} {us:8.1f} ({row['tflops'][name]:5.0f})  × {base / us if base else 0:4.2f}{err_s}")


if __name__ == "__main__":
    main()
