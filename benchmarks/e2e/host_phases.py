"""Where a training step's host time goes: the host time of the forward, the backward and the optimizer step
of one model variant, against the step's GPU time, and the host time of each kernelworks autograd node.

    python benchmarks/e2e/host_phases.py --model llama-small --variant kw-eager [--steps 20] [--out R.json]
        [--nodes] [--cprofile F.txt] [--optimizer fused|foreach]

Per step (median over ``--steps`` after ``--warmup``): ``forward_ms`` (host time until the forward returns),
``backward_ms`` (until ``loss.backward()`` returns), ``optimizer_ms``, and ``gpu_ms`` (CUDA events around the whole
step, after a synchronize: the device's time for the step's work). With ``--nodes``, every ``backward`` of a
kernelworks ``autograd.Function`` and every public op's forward call is also timed on the host (summed per name
per step), so a slow node shows by name. ``--cprofile F.txt`` runs ``--steps`` more steps under cProfile and
writes the functions that take the host's time, by own time and by cumulative time (what the model code, torch
and kernelworks each cost per step). Random weights (the e2e shapes), the same data every step.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import MODELS, build
from step import _apply_variant, _batch


def _time_nodes(totals: collections.Counter) -> None:
    """Wrap every kernelworks autograd Function's forward/backward and the public ops with host timers."""
    import kernelworks
    from kernelworks.runtime import torch_op

    def timed(name, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                totals[name] += time.perf_counter() - t0
        return wrapper

    import gc
    import warnings

    with warnings.catch_warnings():  # gc.get_objects() brushes deprecated torch attributes
        warnings.simplefilter("ignore")
        ops = [o for o in gc.get_objects() if isinstance(o, torch_op.TorchOp)]
    for op in ops:
        cls = op.function
        for meth in ("forward", "backward"):
            setattr(cls, meth, staticmethod(timed(f"{cls.__name__}.{meth}", cls.__dict__[meth].__func__)))
    for name in ("rms_norm", "swiglu", "flash_attention", "rotary_embedding", "fused_linear_cross_entropy"):
        setattr(kernelworks, name, timed(f"kw.{name}", getattr(kernelworks, name)))


def _profile_steps(model: torch.nn.Module, opt: torch.optim.Optimizer, ids: torch.Tensor, steps: int,
                   out: Path) -> None:
    """``steps`` training steps under cProfile: the top functions by own time and by cumulative time, per step."""
    import cProfile
    import io
    import pstats

    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    prof.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    text.write(f"cProfile of {steps} training steps (times are totals over the steps)\n")
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(60)
    stats.sort_stats("cumulative").print_stats(60)
    out.write_text(text.getvalue())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), default="llama-small")
    ap.add_argument("--variant", default="kw-eager")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--nodes", action="store_true")
    ap.add_argument("--no-replay", action="store_true", help="kernelworks.runtime.replay off (the comparison)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--cprofile", type=Path, metavar="F.txt", help="also profile --steps steps with cProfile")
    ap.add_argument("--optimizer", choices=("fused", "foreach"), default="foreach")
    args = ap.parse_args()
    if args.no_replay:
        from kernelworks.runtime import replay

        replay.set_enabled(False)
    spec = MODELS[args.model]
    torch.manual_seed(0)
    model = _apply_variant(build(spec, device="cuda"), spec["family"], args.variant)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5, **{args.optimizer: True})
    ids = _batch(spec, spec["config"]["vocab_size"], torch.device("cuda"))
    totals: collections.Counter = collections.Counter()
    if args.nodes:
        _time_nodes(totals)
    phases: dict[str, list[float]] = {"forward_ms": [], "backward_ms": [], "optimizer_ms": [], "host_ms": [],
                                      "gpu_ms": []}
    per_step_nodes: list[collections.Counter] = []
    for i in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        totals.clear()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        end.record()
        torch.cuda.synchronize()
        if i >= args.warmup:
            for key, value in (("forward_ms", t1 - t0), ("backward_ms", t2 - t1), ("optimizer_ms", t3 - t2),
                               ("host_ms", t3 - t0)):
                phases[key].append(value * 1e3)
            phases["gpu_ms"].append(start.elapsed_time(end))
            per_step_nodes.append(collections.Counter(totals))
    if args.cprofile:
        _profile_steps(model, opt, ids, args.steps, args.cprofile)
    from run import _environment

    result = {"environment": _environment(), "model": args.model, "variant": args.variant,
              "replay_on": not args.no_replay,
              **{k: statistics.median(v) for k, v in phases.items()}}
    if args.variant.startswith("kw"):
        from kernelworks.runtime import replay

        result["replay"] = replay.report()
    if args.nodes:
        names = sorted({n for c in per_step_nodes for n in c})
        result["nodes_ms"] = {n: statistics.median(c[n] for c in per_step_nodes) * 1e3 for n in names}
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
