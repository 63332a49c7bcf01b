r"""The Gated DeltaNet scan kernels for Nsight Compute: the fused forward (dense B8 T4096 H16, then the varlen
batch of the bench), then a forward + backward (its recompute scan and the dS scan).

    ncu --clock-control none -k regex:"_state_pass_kernel|_dh_scan_kernel" -c 5 --section SpeedOfLight \
        --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
        python benchmarks/checks/gated_delta_ncu.py

H100 (2026-11-22, results/h100-80gb-hbm3/sweeps/gdn_scan_ncu.txt): the fused forward scan at 2 CTAs x 4 warps
per SM (255 registers), 12% achieved occupancy, 0.37 issued warps per scheduler per cycle, no eligible warp
63% of cycles: latency-bound; DRAM 51% dense, 32% varlen (the 7000-token sequence alone at the end). That
run took -c 4: the three fused forwards and the backward's recompute scan (75% DRAM), not the dS scan.
"""
import torch
from torch.nn import functional

from kernelworks.ops.gated_delta.api import gated_delta_prefill

dev, bf = "cuda", torch.bfloat16


def inputs(B, T):
    torch.manual_seed(0)
    q = torch.randn(B, T, 16, 128, device=dev).to(bf)
    k = functional.normalize(torch.randn(B, T, 16, 128, device=dev), dim=-1).to(bf)
    v = torch.randn(B, T, 16, 128, device=dev).to(bf)
    g = functional.logsigmoid(torch.randn(B, T, 16, device=dev) + 2.0)
    beta = torch.rand(B, T, 16, device=dev)
    return q, k, v, g, beta


lens = (1000, 7000, 3000, 5000, 2000, 6000, 4000, 4768)
cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(len(lens))], dtype=torch.int32, device=dev)
with torch.no_grad():
    gated_delta_prefill(*inputs(8, 4096))
    gated_delta_prefill(*inputs(1, 32768), cu_seqlens=cu)
x = [t.requires_grad_(True) if t.is_floating_point() else t for t in inputs(8, 4096)]
o, _ = gated_delta_prefill(*x)
o.backward(torch.randn_like(o))
torch.cuda.synchronize()
print("done")
