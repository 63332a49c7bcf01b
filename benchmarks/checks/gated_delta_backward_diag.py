"""Which plan knob and which intermediate of the chunk-parallel Gated DeltaNet backward go wrong on the GPU?
Per head size, plan variants against the sequential backward (relative L2 per gradient, FAIL lines) and
each variant's intermediates (dS_C, dU, S₀, U, dk part, dW, dq, dG) against the previous plan's.

    python benchmarks/checks/gated_delta_backward_diag.py

H100 (2026-11-22, results/h100-80gb-hbm3/sweeps/gdn_bwd_diag.txt): every intermediate agrees, but dk (and
at K 64 dG) is wrong when the 4-warp dq/dk kernel runs 16 or 32 K columns per program (K 32 / 64 split in
two); right unsplit, at 8 warps, and at K 128 (64 columns). (Note: in the previous plan the WY kernel
writes the final dk over the dk part, so "dk1 vs prev" compares different things.) The K 16 V 32 rows end
in an illegal address (fp32-state variant).
"""
import torch
from torch.nn import functional

import kernelworks.ops.gated_delta.prefill_bwd_chunked as pbc
from kernelworks.ops.gated_delta.prefill_bwd import gated_delta_prefill_bwd

PREV = {"BLOCK_V_SCAN": 64, "BLOCK_V_CHUNK": 32, "warps_scan": 8, "stages_scan": 1, "warps_dqkwg": 8,
        "stages_dqkwg": 2, "warps_wy": 8, "stages_wy": 2, "K_SPLIT": 1, "BLOCK_V_DQ": 0, "states_16bit": False,
        "split_state": True, "w_from_t": False, "dk_16bit": False}
VARS = {"default": {}, "prev": PREV, "ks1": {"K_SPLIT": 1}, "dk32": {"dk_16bit": False},
        "wy8s2": {"warps_wy": 8, "stages_wy": 2}, "s32": {"states_16bit": False, "split_state": True},
        "withW": {"w_from_t": False}, "scan_s1": {"stages_scan": 1}, "scan_w8s1": {"warps_scan": 8, "stages_scan": 1},
        "dq_w8": {"warps_dqkwg": 8}}
orig_plan, orig_launch = pbc._plan, pbc.launch
rec = {}
def spy(kernel, grid, *args, **kw):
    name = kernel.fn.__name__ if hasattr(kernel, "fn") else str(kernel)
    rec[name] = args
    return orig_launch(kernel, grid, *args, **kw)
pbc.launch = spy

def run(K, V, T=200, dt=torch.float16):
    torch.manual_seed(0)
    dev, B, hq, hv = "cuda", 2, 1, 2
    q = torch.randn(B, T, hq, K, device=dev).to(dt)
    k = functional.normalize(torch.randn(B, T, hq, K, device=dev), dim=-1).to(dt)
    v = torch.randn(B, T, hv, V, device=dev).to(dt)
    g = functional.logsigmoid(torch.randn(B, T, hv, device=dev) + 2.0)
    beta = torch.rand(B, T, hv, device=dev)
    do = torch.randn(B, T, hv, V, device=dev).to(dt)
    a = dict(do=do, dht=None, q=q, k=k, v=v, g=g, beta=beta, write_strength=None, initial_state=None,
             cu_seqlens=None, scale=K ** -0.5, chunk_size=64, need_dh0=False)
    ref = gated_delta_prefill_bwd(**a)
    inter = {}
    for name, over in VARS.items():
        pbc._plan = lambda *x, over=over: orig_plan(*x)._replace(**over)
        rec.clear()
        try:
            got = pbc.gated_delta_prefill_bwd_chunked(**a)
            torch.cuda.synchronize()
        finally:
            pbc._plan = orig_plan
        errs = {n: float((x.double() - y.double()).norm() / y.double().norm()) for n, x, y in
                zip(["dq", "dk", "dv", "dg", "dbeta"], got, ref)}
        s, d = rec["_dh_scan_kernel"], rec["_dqkwg_kernel"]
        dG = d[13]
        inter[name] = {"dh": s[10].float().clone(), "du": s[11].float().clone(), "hs": d[6].float().clone(),
                       "vn": d[3].float().clone(), "dk1": d[11].float().clone(), "dW": d[12].float().clone(),
                       "dq": d[10].float().clone(), "dG": dG.sum(0).clone()}
        cmp = ""
        if name != "prev" and "prev" in inter:
            prev = inter["prev"]
            cmp = " | vs prev: " + " ".join(
                f"{n} {float((t - prev[n]).norm() / prev[n].norm().clamp_min(1e-30)):.1e}"
                for n, t in inter[name].items())
        bad = any(e > 2e-2 for e in errs.values())
        line = " ".join(f"{n} {e:.1e}" for n, e in errs.items())
        print(f"{'FAIL' if bad else 'ok  '} K{K} V{V} {name:9s} {line}{cmp}", flush=True)

# run order: prev first, then the rest
VARS = {"prev": PREV, **{k: v for k, v in VARS.items() if k != "prev"}}
for K, V in [(64, 64), (32, 32), (128, 128), (16, 32)]:
    run(K, V)
