"""Sweep the Gated DeltaNet chunked prefill forward's launch plan on the GPU, kernel by kernel.

    python benchmarks/sweeps/gated_delta_prefill_plan.py [--out results.json]

For each candidate plan (``prefill_chunked._Plan`` fields replaced: warps and the diagonal-block inverse of
K1a, V rows / warps / stages of the state scan K2, V rows / warps of the output kernel K3, the chunk-start
states' dtype between K2 and K3; or the fused form and its fields) it checks the output and final state of
a small case (B 2, T 700, H_qk 2, H_v 4, K = V = 128, bf16) and of the spec's saturated-gate case against
the float64 token-by-token reference (the issue's relative-L2 bar, 5e-3), then times the forward at B 8
T 4096 H 16 under ``torch.profiler`` and reports each kernel's GPU time, and the total for the bench's varlen case
(the same 32768 tokens in 8 mixed lengths). fla's ``chunk_gated_delta_rule`` (when
installed) is profiled the same way in the same run.
"""

from __future__ import annotations

import argparse
import json

import torch
from torch.nn import functional

from kernelworks.bench.timing import kernel_times_us
from kernelworks.ops.gated_delta import prefill_chunked, reference
from kernelworks.runtime import replay

# The plan is swapped under the op's feet: a replayed call would repeat the first variant's launches.
replay.set_enabled(False)

VARIANTS: list[dict] = [
    {},
    {"fused": True},
    {"fused": True, "inv_precision": "tf32"},
    {"fused": True, "BLOCK_V": 32},
    {"fused": True, "BLOCK_V": 32, "inv_precision": "tf32"},
]
"""Plan fields to replace; ``"fused": True`` runs the fused form (output inside the scan, no K3; with the
plan's ``fuse_wy`` no K1b either) instead of the 3-kernel one."""
REL_L2_BAR = 5e-3


def _inputs(B, T, hq, hv, d, seed=0):
    torch.manual_seed(seed)
    dev, bf = "cuda", torch.bfloat16
    return {
        "q": functional.normalize(torch.randn(B, T, hq, d, device=dev), dim=-1).to(bf),
        "k": functional.normalize(torch.randn(B, T, hq, d, device=dev), dim=-1).to(bf),
        "v": torch.randn(B, T, hv, d, device=dev).to(bf),
        "g": functional.logsigmoid(torch.randn(B, T, hv, device=dev)) * 0.1,
        "beta": torch.rand(B, T, hv, device=dev),
    }


VARLEN_LENGTHS = (1000, 7000, 3000, 5000, 2000, 6000, 4000, 4768)
"""The bench's varlen case: 32768 tokens in 8 mixed lengths (the dense case's token count)."""


def _forward(x, fused=False, cu=None):
    return prefill_chunked.chunked_prefill_fwd(
        x["q"], x["k"], x["v"], x["g"], x["beta"], scale=x["q"].shape[-1] ** -0.5, initial_state=None,
        output_final_state=True, cu_seqlens=cu, fuse_output=fused)


def _rel(a, b) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the table as JSON here")
    args = ap.parse_args()
    small = _inputs(2, 700, 2, 4, 128)
    o_ref, f_ref = reference.gated_delta_rule(
        **{n: t.double() for n, t in small.items()}, output_final_state=True, scale=128 ** -0.5)
    # the spec's saturated case: α, β within 1e-4 of 1 (256 undecayed full-strength writes)
    sat = _inputs(1, 256, 2, 4, 128, seed=1)
    sat["g"] = -1e-4 * torch.rand_like(sat["g"])
    sat["beta"] = 1.0 - 1e-4 * torch.rand_like(sat["beta"])
    o_sat_ref, f_sat_ref = reference.gated_delta_rule(
        **{n: t.double() for n, t in sat.items()}, output_final_state=True, scale=128 ** -0.5)
    big = _inputs(8, 4096, 16, 16, 128)
    packed = _inputs(1, sum(VARLEN_LENGTHS), 16, 16, 128)
    cu = torch.tensor([0, *torch.tensor(VARLEN_LENGTHS).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    original = prefill_chunked._plan
    results = []
    for over in VARIANTS:
        fields = {n: v for n, v in over.items() if n != "fused"}
        fused = over.get("fused", False)
        prefill_chunked._plan = lambda *a, _o=fields: original(*a)._replace(**_o)
        try:
            o, f, _ = _forward(small, fused)
            err_o, err_f = _rel(o, o_ref), _rel(f, f_ref)
            o, f, _ = _forward(sat, fused)
            err_o_sat, err_f_sat = _rel(o, o_sat_ref), _rel(f, f_sat_ref)
            per = kernel_times_us(lambda _f=fused: _forward(big, _f))
            varlen_us = sum(kernel_times_us(lambda _f=fused: _forward(packed, _f, cu)).values())
        except Exception as e:  # a variant that fails to compile is a result too
            print(f"FAIL {over}: {type(e).__name__}: {str(e)[:200]}", flush=True)
            results.append({"plan": over, "error": repr(e)[:300]})
            continue
        finally:
            prefill_chunked._plan = original
        ok = max(err_o, err_f, err_o_sat, err_f_sat) <= REL_L2_BAR
        total = sum(per.values())
        results.append({"plan": over, "total_us": total, "varlen_us": varlen_us, "kernels_us": per, "rel_l2_o": err_o,
                        "rel_l2_state": err_f, "rel_l2_o_sat": err_o_sat, "rel_l2_state_sat": err_f_sat,
                        "agrees": ok})
        kernels = "  ".join(f"{k.lstrip('_').split('_kernel')[0]} {t:.0f}" for k, t in per.items())
        print(f"{'' if ok else 'FAIL '}{over!s:45s} {total:7.0f} µs (varlen {varlen_us:5.0f})  "
              f"err o {err_o:.1e} state {err_f:.1e}  "
              f"sat {err_o_sat:.1e} {err_f_sat:.1e}  {kernels}", flush=True)
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        per = kernel_times_us(lambda: chunk_gated_delta_rule(**big, output_final_state=True))
        results.append({"plan": "fla", "total_us": sum(per.values()), "kernels_us": per})
        print(f"fla chunk_gated_delta_rule {sum(per.values()):7.0f} µs  "
              + "  ".join(f"{k[:30]} {t:.0f}" for k, t in per.items()), flush=True)
    except ImportError:
        print("fla not installed: no peer row")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}, f,
                      indent=1)


if __name__ == "__main__":
    main()
