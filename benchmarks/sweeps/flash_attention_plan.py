"""GPU sweep of flash_attention forward plan variants at D128 (B4 H32 S4096 and B2 H32 S8192, causal and
not) against SDPA's flash and cuDNN backends in the same run. Every variant's output is compared with SDPA
flash's (bf16: max abs err < 2e-2 → else a FAIL line, not timed). Times: kernelworks.bench.timing.time_fn
(L2 flushed). Table printed last.

    PYTHONPATH=src python benchmarks/sweeps/flash_attention_plan.py --out fwd_sweep.json

Variants (forward.forced_fwd_plan): the default (128×64 pointer tiles, 8 warps, 3 stages), TMA descriptor
loads of K/V (128×64 at 3 and 4 stages, 128×128 at 3), pointer tiles 128×128 and 128×64 at 2 stages.
Not included, from the sm_90 AOT compile: WARP_SPEC at 8 warps compiles to the same code as without
(Triton 3.6 leaves the loop
unpartitioned), at 4 warps the Hopper warp-specialisation pass aborts the process (an assertion in
TaskIdPropagation.cpp) — never try it in-process; TMA with 2 stages (BLOCK_N 64 or 128) crashes ptxas (-11).
"""
from __future__ import annotations

import argparse
import json
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import kernelworks  # noqa: F401
from kernelworks.bench.timing import time_fn
from kernelworks.ops.attention import forward
from kernelworks.ops.attention.api import flash_attention

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--rep-ms", type=float, default=40.0)
args = ap.parse_args()

VARIANTS = [
    ("default", {}),
    ("tma-128x64-s3", dict(TMA=True)),
    ("tma-128x64-s4", dict(TMA=True, num_stages=4)),
    ("tma-128x128-s3", dict(TMA=True, BLOCK_N=128, num_stages=3)),
    ("ptr-128x128-s2", dict(BLOCK_N=128, num_stages=2)),
    ("ptr-128x64-s2", dict(num_stages=2)),
]
CASES = [(4, 4096, False), (4, 4096, True), (2, 8192, False), (2, 8192, True)]
H, D = 32, 128
t0 = time.time()
records = []
for b, s, causal in CASES:
    name = f"b{b}-h{H}-s{s // 1024}k-d{D}" + ("-causal" if causal else "")
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, s, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    flops = 4.0 * b * H * D * (s * (s + 1) / 2 if causal else s * s)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        ref = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)
    for backend in ("FLASH_ATTENTION", "CUDNN_ATTENTION"):
        def sd(backend=backend):
            with sdpa_kernel(getattr(SDPBackend, backend)):
                return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)  # noqa: B023
        try:
            t = time_fn(sd, rep_ms=args.rep_ms)
            rec = dict(case=name, variant=f"sdpa-{backend.split('_')[0].lower()}", status="ok",
                       median_ms=t.median_ms, tflops=flops / t.median_ms / 1e9)
        except RuntimeError as e:
            rec = dict(case=name, variant=backend, status=f"error: {str(e)[:100]}")
        records.append(rec)
        print(rec, flush=True)
    for vname, knobs in VARIANTS:
        try:
            with forward.forced_fwd_plan(**knobs):
                o = flash_attention(q, k, v, causal=causal)
                torch.cuda.synchronize()
                err = (o.float() - ref.float()).abs().max().item()
                if not err < 2e-2 or not torch.isfinite(o).all():
                    print(f"FAIL {name} {vname}: max abs err vs SDPA flash {err:.3g}", flush=True)
                    records.append(dict(case=name, variant=vname, status="FAIL", err=err))
                    continue
                t = time_fn(lambda: flash_attention(q, k, v, causal=causal), rep_ms=args.rep_ms)  # noqa: B023
        except Exception as e:  # a variant that fails to compile or launch is reported, the rest go on
            print(f"FAIL {name} {vname}: {type(e).__name__}: {str(e)[:300]}", flush=True)
            records.append(dict(case=name, variant=vname, status=f"error: {type(e).__name__}"))
            continue
        rec = dict(case=name, variant=vname, status="ok", err=err, median_ms=t.median_ms,
                   tflops=flops / t.median_ms / 1e9, knobs=knobs)
        records.append(rec)
        print(f"{name:26s} {vname:16s} {t.median_ms:8.3f} ms {rec['tflops']:6.0f} TFLOP/s err {err:.2e}", flush=True)
    q = k = v = ref = qt = kt = vt = None
    torch.cuda.empty_cache()

env = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=__import__("triton").__version__,
           wall_s=time.time() - t0)
with open(args.out, "w") as f:
    json.dump(dict(env=env, records=records), f, indent=1)
print(f"\n== flash fwd sweep on {env['gpu']}, {env['wall_s']:.0f} s ==")
print(f"{'case':26s} {'variant':16s} {'ms':>8s} {'TFLOP/s':>8s} {'xFA2':>6s} {'xcuDNN':>7s}")
for name in dict.fromkeys(r["case"] for r in records):
    rs = [r for r in records if r["case"] == name]
    fa = next((r["median_ms"] for r in rs if r["variant"] == "sdpa-flash" and r["status"] == "ok"), None)
    cu = next((r["median_ms"] for r in rs if r["variant"] == "sdpa-cudnn" and r["status"] == "ok"), None)
    for r in rs:
        if r["status"] != "ok":
            print(f"{name:26s} {r['variant']:16s} {r['status']}")
            continue
        xf = f"{fa / r['median_ms']:6.2f}" if fa else "     -"
        xc = f"{cu / r['median_ms']:7.2f}" if cu else "      -"
        print(f"{name:26s} {r['variant']:16s} {r['median_ms']:8.3f} {r['tflops']:8.0f} {xf} {xc}")
