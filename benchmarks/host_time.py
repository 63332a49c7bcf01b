"""Host time of one eager call, kernelworks against the equivalent torch call, at small shapes.

    python benchmarks/host_time.py [--out F.json] [--calls 300] [--ops cross_entropy,softmax]   # on a GPU

Host time is what the Python thread spends issuing a call: ``--calls`` calls back to back with no sync, the
wall time divided by the calls (the GPU runs each small kernel in a few µs, faster than the host issues them,
so the launch queue never fills and the wall time is the host's). Ours and torch's batches alternate, 9 rounds
after warm-up: each side's median batch, and the median of the rounds' ratios (the host's drift cancels).
Two modes: ``infer`` (no autograd graph) and ``train`` (inputs require grad: the autograd path). The issue's
target: every op at most 1.5× its torch equivalent.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812 - the name torch code uses

import kernelworks as kw


def _batch_us(fn: Callable[[], object], calls: int) -> float:
    """Wall µs per call of ``calls`` back-to-back calls of ``fn`` (no sync inside the batch), the GPU idle
    before and after."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    us = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    return us


def _warm(*fns: Callable[[], object], calls: int = 20) -> None:
    for fn in fns:
        for _ in range(calls):
            fn()
    torch.cuda.synchronize()


def host_us(fn: Callable[[], object], calls: int, warmup: int = 20) -> float:
    """Median over 5 batches of ``calls`` back-to-back calls (no sync inside a batch) of the wall µs per call,
    after ``warmup`` calls."""
    _warm(fn, calls=warmup)
    return statistics.median(_batch_us(fn, calls) for _ in range(5))


def paired_host_us(ours: Callable[[], object], theirs: Callable[[], object], calls: int,
                   rounds: int = 9) -> tuple[float, float, float]:
    """``(ours µs, theirs µs, ratio)``: ``rounds`` rounds, each one batch of ``calls`` calls of ``ours`` then one
    of ``theirs`` (as in :func:`host_us`); the µs are each side's median batch, the ratio the median of the
    rounds' ratios. A lent machine's host drifts by tens of percent within a minute; a ratio of two batches
    taken side by side cancels that, where two medians taken a minute apart did not."""
    _warm(ours, theirs)
    mine, other = [], []
    for _ in range(rounds):
        mine.append(_batch_us(ours, calls))
        other.append(_batch_us(theirs, calls))
    return (statistics.median(mine), statistics.median(other),
            statistics.median(m / o for m, o in zip(mine, other, strict=True)))


def cases(train: bool, dev: str = "cuda") -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    """Each op's eager call, ours and torch's equivalent, on small ``dev`` tensors (requiring grad when
    ``train``)."""
    dt = torch.bfloat16

    def t(*shape: int, grad: bool = train, dtype: torch.dtype = dt) -> torch.Tensor:
        return torch.randn(*shape, device=dev, dtype=dtype).requires_grad_(grad)

    x, r, w, b = t(1, 4096), t(1, 4096), t(4096), t(4096)
    gate, up = t(1, 4096), t(1, 4096)
    logits, target = t(4, 32000), torch.randint(0, 32000, (4,), device=dev)
    a, wt = t(16, 4096), t(4096, 4096)
    q, k, v = t(1, 128, 8, 128), t(1, 128, 8, 128), t(1, 128, 8, 128)
    qs, ks, vs = (z.transpose(1, 2) for z in (q, k, v))
    out = {
        "rms_norm": (lambda: kw.rms_norm(x, w), lambda: F.rms_norm(x, (4096,), w, 1e-6)),
        "rms_norm+residual": (lambda: kw.rms_norm(x, w, residual=r), lambda: F.rms_norm(x + r, (4096,), w, 1e-6)),
        "layer_norm": (lambda: kw.layer_norm(x, w, b), lambda: F.layer_norm(x, (4096,), w, b)),
        "softmax": (lambda: kw.softmax(x), lambda: torch.softmax(x, -1)),
        "silu": (lambda: kw.silu(x), lambda: F.silu(x)),
        "gelu": (lambda: kw.gelu(x), lambda: F.gelu(x)),
        "swiglu": (lambda: kw.swiglu(gate, up), lambda: F.silu(gate) * up),
        "cross_entropy": (lambda: kw.cross_entropy(logits, target), lambda: F.cross_entropy(logits, target)),
        "matmul 16x4096x4096": (lambda: kw.matmul(a, wt), lambda: a @ wt),
        "flash_attention 1x128x8x128": (lambda: kw.flash_attention(q, k, v, causal=True),
                                        lambda: F.scaled_dot_product_attention(qs, ks, vs, is_causal=True)),
    }
    if hasattr(kw, "rotary_embedding"):
        cos, sin = torch.randn(1, 128, 128, device=dev, dtype=dt), torch.randn(1, 128, 128, device=dev, dtype=dt)

        def hf_rope() -> object:
            c, s = cos.unsqueeze(1), sin.unsqueeze(1)

            def rot(z: torch.Tensor) -> torch.Tensor:
                return torch.cat((-z[..., 64:], z[..., :64]), -1)

            return qs * c + rot(qs) * s, ks * c + rot(ks) * s

        out["rotary_embedding"] = (lambda: kw.rotary_embedding(qs, ks, cos, sin), hf_rope)
    return out


def _profile(out_dir: Path, calls: int) -> None:
    """Where each op's host time goes: cProfile over ``calls`` eager calls (after warm-up), the top 25
    functions by own time, one file per op and mode."""
    import cProfile
    import io
    import pstats

    out_dir.mkdir(parents=True, exist_ok=True)
    for mode in ("infer", "train"):
        with torch.set_grad_enabled(mode == "train"):
            for name, (ours, _) in cases(mode == "train").items():
                for _ in range(20):
                    ours()
                torch.cuda.synchronize()
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(calls):
                    ours()
                prof.disable()
                torch.cuda.synchronize()
                text = io.StringIO()
                pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
                slug = re.sub(r"[^A-Za-z0-9_.+-]", "_", name)
                (out_dir / f"{slug}-{mode}.txt").write_text(text.getvalue())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--profile", type=Path, metavar="DIR",
                    help="also write DIR/<op>-<mode>.txt: cProfile of the kernelworks calls, top functions by own time")
    ap.add_argument("--ops", help="comma-separated op names (as in the table) to time; default: all")
    args = ap.parse_args()
    wanted = None if args.ops is None else set(args.ops.split(","))
    if wanted is not None and wanted - set(cases(False, "cpu")):
        ap.error(f"--ops: unknown {', '.join(sorted(wanted - set(cases(False, 'cpu'))))}; the ops are "
                 f"{', '.join(cases(False, 'cpu'))}")
    if args.profile:
        _profile(args.profile, args.calls)
    from kernelworks.runtime import replay

    rows = []
    for mode in ("infer", "train"):
        with torch.set_grad_enabled(mode == "train"):
            for name, (ours, theirs) in cases(mode == "train").items():
                if wanted is not None and name not in wanted:
                    continue
                try:
                    k_us, t_us, ratio = paired_host_us(ours, theirs, args.calls)
                    replay.set_enabled(False)  # what the call costs without runtime.replay, for the record
                    try:
                        plain_us = host_us(ours, args.calls)
                    finally:
                        replay.set_enabled(True)
                    rows.append({"op": name, "mode": mode, "kernelworks_us": k_us, "torch_us": t_us,
                                 "ratio": ratio, "kernelworks_without_replay_us": plain_us})
                except Exception as e:  # one op's failure must not hide the other numbers
                    rows.append({"op": name, "mode": mode, "error": f"{type(e).__name__}: {e}"[:200]})
    import triton

    doc = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "commit": os.environ.get("KERNELWORKS_COMMIT", ""), "rows": rows, "replay": replay.report()}
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{'op':30s} {'mode':6s} {'kw µs':>8s} {'torch µs':>9s} {'ratio':>6s} {'no-replay µs':>13s}")
    for r in rows:
        if "error" in r:
            print(f"{r['op']:30s} {r['mode']:6s} ERROR {r['error']}")
        else:
            print(f"{r['op']:30s} {r['mode']:6s} {r['kernelworks_us']:8.1f} {r['torch_us']:9.1f} {r['ratio']:6.2f} "
                  f"{r['kernelworks_without_replay_us']:13.1f}")


if __name__ == "__main__":
    main()
