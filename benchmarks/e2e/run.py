"""End-to-end model benchmarks: every variant of every job in its own process, same weights, same data, one run.

    python benchmarks/e2e/run.py [--jobs llama3-8b-train,small-train,decode] [--variants kw-eager,hf-eager]
        [--out-dir DIR]                                                                       # on a GPU
    python benchmarks/e2e/run.py --plot benchmarks/results/<gpu>/e2e/e2e.json                 # table + plot only

Writes ``<out-dir>/e2e.json`` (GPU, torch/triton/transformers versions, commit, every variant's result) and
prints the table; ``--plot`` renders ``benchmarks/plots/<gpu>/e2e.png`` and the Markdown table from a results
file. Jobs:

- ``llama3-8b-train``: a training step (forward, backward, AdamW) of the Llama-3-8B-shaped model (2 layers,
  vocab 128256, 2 × 4096 tokens): HF eager, torch.compile, Liger, kernelworks eager and compiled.
- ``small-train``: the small Llama (hidden 1024, 4 layers, 8 × 1024 tokens), 50 steps: the loss curves of HF
  eager and kernelworks eager, plus torch.compile and CUDA graphs (``reduce-overhead``) of both.
- ``qwen3-train``: the Qwen3-8B-shaped model, HF eager, torch.compile, kernelworks eager and compiled.
- ``qwen3-moe-train``: the Qwen3-30B-A3B-shaped MoE model (2 layers, 128 experts, top 8, 2 × 4096 tokens), HF
  eager (its ``grouped_mm`` experts), torch.compile, Liger, kernelworks eager and compiled.
- ``qwen3-next-train``: the Qwen3-Next-shaped hybrid (3 Gated DeltaNet layers and 1 gated-attention layer, MoE,
  2 × 4096 tokens): HF eager, torch.compile, kernelworks eager and compiled.
- ``decode``: greedy ``generate`` of 128 tokens at batch 1 and 32 on the Llama-3-8B-shaped model, HF eager and
  kernelworks eager.
- ``qwen3-moe-loss-fp32``, ``qwen3-next-loss-fp32``: the loss curves of HF eager and kernelworks eager over 50
  steps with the weights in float32 (2 × 1024 tokens): in bf16 a rounding flips a token's experts and the
  curves drift apart whatever computes them (HF's own compiled model included); here what is left is the
  kernels' own error.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

LOSS_STEPS = 47
"""Timed steps of the 8B and MoE jobs: with the 3 warm-up steps, 50 losses a variant (the loss-curve target)."""
JOBS: dict[str, list[dict]] = {
    "llama3-8b-train": [dict(model="llama3-8b-2l", variant=v, steps=LOSS_STEPS) for v in
                        ("hf-eager", "hf-compile", "liger", "kw-eager", "kw-compile")],
    "small-train": [dict(model="llama-small", variant=v, steps=50 if v.endswith("eager") else 20) for v in
                    ("hf-eager", "kw-eager", "hf-compile", "hf-graphs", "kw-graphs")],
    "qwen3-train": [dict(model="qwen3-8b-2l", variant=v) for v in
                    ("hf-eager", "hf-compile", "kw-eager", "kw-compile")],
    "qwen3-moe-train": [dict(model="qwen3-moe-2l", variant=v, steps=LOSS_STEPS) for v in
                        ("hf-eager", "hf-compile", "liger", "kw-eager", "kw-compile")],
    "qwen3-next-train": [dict(model="qwen3-next-4l", variant=v) for v in
                         ("hf-eager", "hf-compile", "kw-eager", "kw-compile")],
    "decode": [dict(model="llama3-8b-2l", variant=v, task="decode", batch=b) for b in (1, 32)
               for v in ("hf-eager", "kw-eager")],
    # the loss-curve target without bf16 rounding: the same weights upcast to float32 (exact fp32 products on
    # both sides, TF32 off as torch defaults), 2 × 1024 tokens a step
    "qwen3-moe-loss-fp32": [dict(model="qwen3-moe-2l", variant=v, steps=LOSS_STEPS, dtype="float32", seq=1024)
                            for v in ("hf-eager", "kw-eager")],
    "qwen3-next-loss-fp32": [dict(model="qwen3-next-4l", variant=v, steps=LOSS_STEPS, dtype="float32", seq=1024)
                             for v in ("hf-eager", "kw-eager")],
}


LOSS_JOBS = {"qwen3-moe-loss-fp32", "qwen3-next-loss-fp32"}
"""Jobs for the loss curves alone: their step times compare HF's per-expert loop with our kernels in float32, not
what a user trains with, so tables and plots show only the curves' gap."""


def _environment() -> dict:
    import torch
    import transformers
    import triton

    from kernelworks.bench.results import git_commit

    return {"gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "torch": torch.__version__, "triton": triton.__version__, "transformers": transformers.__version__,
            "commit": git_commit(ROOT), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _weights(model: str, folder: Path) -> Path:
    import torch
    from models import MODELS, build

    path = folder / f"{model}.pt"
    if not path.exists():
        torch.manual_seed(0)
        torch.save(build(MODELS[model]).state_dict(), path)
    return path


def run(jobs: list[str], out_dir: Path, deadline_s: float, variants: set[str] | None = None,
        rounds: int = 1) -> Path:
    """Run each job's variants (only ``variants`` when given), each in its own process, merging the rows into
    ``out_dir/e2e.json`` (a variant's new row replaces its old one). ``rounds > 1``: the variants run that many
    times, interleaved (every variant once, then again), and a training row's ``step_ms`` is the median of its
    rounds' medians (all kept in ``rounds_step_ms``): a host-bound step moves by tens of percent from one process
    to the next on a lent machine, and interleaving spreads the host's drift over every variant."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results_path = out_dir / "e2e.json"
    doc = json.loads(results_path.read_text()) if results_path.exists() else {"runs": []}
    doc["environment"] = _environment()
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    start = time.time()
    seen: dict[tuple, list[float]] = {}
    schedule = [(name, item) for _ in range(rounds) for name in jobs for item in JOBS[name]]
    for job, item in schedule:
        if variants and item["variant"] not in variants:
            continue
        left = deadline_s - (time.time() - start)
        if left < 30:
            print(f"skipped {job} {item}: out of time", flush=True)
            continue
        weights = _weights(item["model"], tmp)
        out = tmp / f"e2e-{job}-{item['variant']}-{item.get('batch', 0)}.json"
        cmd = [sys.executable, str(HERE / "step.py"), "--model", item["model"], "--variant", item["variant"],
               "--weights", str(weights), "--out", str(out), "--task", item.get("task", "train")]
        for key in ("steps", "batch", "dtype", "seq"):
            if key in item:
                cmd += [f"--{key}", str(item[key])]
        t0 = time.time()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=left)
            ok = proc.returncode == 0 and out.exists()
            err = "" if ok else (proc.stderr or proc.stdout)[-1500:]
        except subprocess.TimeoutExpired:
            ok, err = False, "timed out"
        row = json.loads(out.read_text()) if ok else {**item, "task": item.get("task", "train"), "error": err}
        row["job"], row["wall_s"], row["commit"] = job, round(time.time() - t0, 1), doc["environment"]["commit"]
        if rounds > 1 and "step_ms" in row:
            times = seen.setdefault((job, item["variant"], item.get("batch")), [])
            times.append(row["step_ms"])
            row["rounds_step_ms"], row["step_ms"] = list(times), statistics.median(times)
        doc["runs"] = [r for r in doc["runs"] if (r["job"], r["variant"], r.get("batch")) !=
                       (job, item["variant"], row.get("batch"))] + [row]
        results_path.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"{job:16s} {item['variant']:11s} {'ok' if ok else 'FAILED'} {row['wall_s']:6.1f}s "
              f"{_headline(row)}", flush=True)
        if not ok:
            print(err, flush=True)
    return results_path


def _headline(row: dict) -> str:
    if "error" in row:
        return ""
    if row["task"] == "decode":
        return f"{row['tokens_per_s']:.0f} tok/s (batch {row['batch']})"
    return f"{row['step_ms']:.1f} ms/step, peak {row['peak_gb']:.1f} GB, last loss {row['losses'][-1]:.4f}"


def _loss_gaps(ref: dict, row: dict) -> list[float]:
    """|Δloss| of ``row`` against ``ref`` at each step both ran (same weights, same data, step by step)."""
    return [abs(a - b) for a, b in zip(ref["losses"], row["losses"])]


def table(doc: dict) -> str:
    """Markdown: each job's variants with time, ratio to each baseline, memory; the loss-curve gap."""
    lines = []
    runs = [r for r in doc["runs"] if "error" not in r]
    for job in dict.fromkeys(r["job"] for r in doc["runs"]):
        rows = [r for r in runs if r["job"] == job]
        failed = [r["variant"] for r in doc["runs"] if r["job"] == job and "error" in r]
        if not rows:
            continue
        if rows[0]["task"] == "decode":
            lines += [f"\n**{job}** ({rows[0]['model']})\n", "| batch | variant | tokens/s | × HF eager |",
                      "|---|---|---|---|"]
            for r in rows:
                base = next((b for b in rows if b["variant"] == "hf-eager" and b["batch"] == r["batch"]), None)
                ratio = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}" if base else "—"
                lines.append(f"| {r['batch']} | {r['variant']} | {r['tokens_per_s']:.0f} | {ratio} |")
        elif job in LOSS_JOBS:
            ref = next((r for r in rows if r["variant"] == "hf-eager"), None)
            lines.append(f"\n**{job}** ({rows[0]['model']}, {rows[0].get('dtype', 'bfloat16')}, "
                         f"{rows[0]['tokens_per_step']} tokens a step): loss curves only")
            if ref is not None:
                lines += [f"- {r['variant']}: max |Δloss| against hf-eager {max(_loss_gaps(ref, r)):.2e} over "
                          f"{len(_loss_gaps(ref, r))} steps" for r in rows if r is not ref]
        else:
            base = {r["variant"]: r["step_ms"] for r in rows}
            cols = [b for b in ("hf-eager", "hf-compile", "liger") if b in base]
            optimizers = ", ".join(sorted({r.get("optimizer", "AdamW foreach") for r in rows}))
            lines += [f"\n**{job}** ({rows[0]['model']}, {rows[0]['tokens_per_step']} tokens a step, {optimizers})\n",
                      "| variant | ms / step | " + " | ".join(f"× {c}" for c in cols) + " | peak GB |",
                      "|---|---|" + "---|" * len(cols) + "---|"]
            for r in rows:
                ratios = " | ".join(f"{base[c] / r['step_ms']:.2f}" for c in cols)
                lines.append(f"| {r['variant']} | {r['step_ms']:.1f} | {ratios} | {r['peak_gb']:.1f} |")
            ref = next((r for r in rows if r["variant"] == "hf-eager"), None)
            gaps = [f"{r['variant']} {max(_loss_gaps(ref, r)):.2e} ({len(_loss_gaps(ref, r))} steps)"
                    for r in rows if ref is not None and r is not ref]
            if gaps:
                lines.append("\nLoss curves against hf-eager, max |Δloss| at any step: " + ", ".join(gaps))
        if failed:
            lines.append(f"\nFailed: {', '.join(failed)}")
    return "\n".join(lines)


def plot(doc: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in doc["runs"] if "error" not in r]
    train_jobs = [j for j in dict.fromkeys(r["job"] for r in runs) if runs and
                  next(r for r in runs if r["job"] == j)["task"] == "train"]
    timed_jobs = [j for j in train_jobs if j not in LOSS_JOBS]
    fig, axes = plt.subplots(1, len(timed_jobs) + 1, figsize=(5 * (len(timed_jobs) + 1), 4))
    axes = list(axes) if len(timed_jobs) else [axes]
    for ax, job in zip(axes, timed_jobs):
        rows = [r for r in runs if r["job"] == job]
        ax.barh([r["variant"] for r in rows], [r["step_ms"] for r in rows],
                color=["tab:orange" if r["variant"].startswith("kw") else "tab:gray" for r in rows])
        ax.set_xlabel("ms per training step (lower is better)")
        ax.set_title(f"{job} ({rows[0]['model']})")
    ax = axes[-1]  # each job's patched eager loss against its HF eager loss, step by step
    for job in train_jobs:
        rows = {r["variant"]: r for r in runs if r["job"] == job}
        if "hf-eager" in rows and "kw-eager" in rows:
            ax.plot(_loss_gaps(rows["hf-eager"], rows["kw-eager"]), label=f"{job}: kw-eager")
        if "hf-eager" in rows and "hf-compile" in rows:
            ax.plot(_loss_gaps(rows["hf-eager"], rows["hf-compile"]), ":", label=f"{job}: hf-compile")
    ax.axhline(1e-3, color="black", linewidth=0.8, linestyle="--", label="target 1e-3")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("|loss − HF eager loss|")
    ax.set_title("loss curves against HF eager")
    ax.legend(fontsize=7)
    fig.suptitle(f"{doc['environment'].get('gpu')} · torch {doc['environment'].get('torch')} · "
                 f"triton {doc['environment'].get('triton')}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", default=",".join(JOBS))
    ap.add_argument("--out-dir", type=Path, default=None, help="default benchmarks/results/<gpu>/e2e")
    ap.add_argument("--deadline", type=float, default=540.0, help="seconds for the whole run")
    ap.add_argument("--plot", type=Path, default=None, help="only render a results file")
    ap.add_argument("--variants", default=None, help="comma-separated: only these variants of each job")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the variants this many times, interleaved; step_ms is the median (default 1)")
    args = ap.parse_args()
    if args.plot:
        doc = json.loads(args.plot.read_text())
    else:
        import torch

        from kernelworks.bench.results import gpu_slug

        out_dir = args.out_dir or ROOT / "benchmarks" / "results" / gpu_slug(torch.cuda.get_device_name()) / "e2e"
        variants = set(args.variants.split(",")) if args.variants else None
        doc = json.loads(run(args.jobs.split(","), out_dir, args.deadline, variants, args.rounds).read_text())
    from kernelworks.bench.results import gpu_slug

    print(table(doc))
    png = plot(doc, ROOT / "benchmarks" / "plots" / gpu_slug(doc["environment"].get("gpu")) / "e2e.png")
    print(f"\nplot: {png.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
