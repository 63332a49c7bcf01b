"""Run one Gated DeltaNet prefill path on the GPU, for compute-sanitizer (memcheck) to watch.

    compute-sanitizer --tool memcheck python benchmarks/checks/gated_delta_sanitize.py MODE T [PLAN]

MODE: ``fused`` / ``unfused`` (the chunk-parallel forward with the output inside the state scan, or the
3-kernel form) or ``bwd`` (forward + backward through ``gated_delta_prefill``); T: tokens (batch 1, 1 q/k
head, 2 value heads, K = V = 128, bf16). On an H200 with triton 3.6 (2026-11-21): ``fused`` reported invalid
1 KB ``__shared__`` reads at T 100 and 1000; ``unfused`` and ``bwd`` (through the 3-kernel forward) clean.
PLAN: ``prefill_chunked._Plan`` fields replaced, ``name=value,...`` (e.g. ``BLOCK_V=32,stages_scan=1``), so
the plan sweep's candidates can be watched one by one.
"""
import sys

import torch

from kernelworks.ops.gated_delta import prefill_chunked
from kernelworks.ops.gated_delta.api import gated_delta_prefill

mode = sys.argv[1]
if len(sys.argv) > 3:
    over = {n: (v == "True" if v in ("True", "False") else int(v))
            for n, v in (item.split("=") for item in sys.argv[3].split(","))}
    original = prefill_chunked._plan
    prefill_chunked._plan = lambda *a: original(*a)._replace(**over)
torch.manual_seed(0)
B, T, hq, hv, K, V = 1, int(sys.argv[2]), 1, 2, 128, 128
dev, bf = "cuda", torch.bfloat16
q = torch.nn.functional.normalize(torch.randn(B, T, hq, K, device=dev), dim=-1).to(bf)
k = torch.nn.functional.normalize(torch.randn(B, T, hq, K, device=dev), dim=-1).to(bf)
v = torch.randn(B, T, hv, V, device=dev, dtype=bf)
g = -torch.rand(B, T, hv, device=dev) * 0.1
beta = torch.rand(B, T, hv, device=dev)
h0 = torch.randn(B, hv, V, K, device=dev)
if mode in ("fused", "unfused"):
    o, f, _ = prefill_chunked.chunked_prefill_fwd(q, k, v, g, beta, scale=K ** -0.5, initial_state=h0,
                                                  output_final_state=True, cu_seqlens=None, chunk_size=64,
                                                  fuse_output=mode == "fused")
elif mode == "bwd":
    xs = [t.requires_grad_() for t in (q, k, v, g, beta)]
    o, f = gated_delta_prefill(*xs, initial_state=h0, output_final_state=True)
    (o.float().sum() + f.sum()).backward()
torch.cuda.synchronize()
print(mode, T, sys.argv[3:], "ok")
