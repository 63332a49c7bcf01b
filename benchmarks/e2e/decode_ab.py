"""Greedy decode, Hugging Face eager against the patched model with and without the split-KV routing, all three
alternating in one process (a decode step is mostly host time, and a lent machine's host drifts between
processes; alternating puts the drift on every variant alike).

    python benchmarks/e2e/decode_ab.py [--out FILE.json] [--new-tokens 128] [--repeats 5]   # on a GPU

Prints tokens/s per variant and batch (median of ``--repeats`` generates, with the slowest and fastest), the
ratios to HF eager, and from one profiled patched ``generate`` at batch 1: GPU time per token and the decode
kernel's time per call. ``kw-noroute`` sets ``DECODE_MAX_Q = 0``: every call on the flash forward, as before
the routing.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import MODELS, build


def main() -> None:
    import kernelworks
    from kernelworks.ops.attention import api

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.manual_seed(0)
    hf = build(MODELS["llama3-8b-2l"]).eval()
    kw = kernelworks.patch(copy.deepcopy(hf))
    variants = {"hf-eager": (hf, 16), "kw-eager": (kw, 16), "kw-noroute": (kw, 0)}
    gen_kwargs = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False,
                      pad_token_id=0, eos_token_id=None)
    g = torch.Generator().manual_seed(99)
    rows = []

    def generate(model, max_q, prompt):
        api.DECODE_MAX_Q = max_q
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(prompt, **gen_kwargs)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    for batch in (1, 32):
        prompt = torch.randint(0, 128256, (batch, args.prompt), generator=g).cuda()
        for model, max_q in variants.values():  # warm-up: every kernel compiled
            generate(model, max_q, prompt)
        times = {name: [] for name in variants}
        for _ in range(args.repeats):
            for name, (model, max_q) in variants.items():
                times[name].append(generate(model, max_q, prompt))
        base = statistics.median(times["hf-eager"])
        for name, ts in times.items():
            tokens = batch * args.new_tokens
            rows.append({"batch": batch, "variant": name, "tokens_per_s": tokens / statistics.median(ts),
                         "tokens_per_s_range": [tokens / max(ts), tokens / min(ts)],
                         "x_hf_eager": base / statistics.median(ts)})
    api.DECODE_MAX_Q = 16
    prompt = torch.randint(0, 128256, (1, args.prompt), generator=g).cuda()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof, torch.no_grad():
        kw.generate(prompt, **gen_kwargs)
    events = prof.key_averages()
    gpu_us = sum(e.self_device_time_total for e in events)
    decode = next((e for e in events if e.key == "_decode_paged_kernel"), None)
    profiled = {"gpu_ms_per_token": gpu_us / 1e3 / args.new_tokens,
                "decode_kernel_us_per_call": decode.self_device_time_total / decode.count if decode else None}
    from run import _environment

    doc = {"environment": _environment(), "new_tokens": args.new_tokens, "prompt": args.prompt,
           "repeats": args.repeats, "runs": rows, "profile_kw_eager_batch1": profiled}
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print("| batch | variant | tokens/s (median) | slowest – fastest | × HF eager |\n|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["tokens_per_s_range"]
        print(f"| {r['batch']} | {r['variant']} | {r['tokens_per_s']:.0f} | {lo:.0f} – {hi:.0f} | "
              f"{r['x_hf_eager']:.2f} |")
    print(f"patched, batch 1: {profiled['gpu_ms_per_token']:.2f} ms of GPU time per token; decode kernel "
          f"{profiled['decode_kernel_us_per_call'] or float('nan'):.1f} µs a call")


if __name__ == "__main__":
    main()
