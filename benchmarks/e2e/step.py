"""One variant of one end-to-end model benchmark, in its own process (patches such as Liger's replace classes
process-wide, so variants never share one).

    python benchmarks/e2e/step.py --model llama3-8b-2l --variant kw-eager --weights W.pt --out R.json [--task train]

Tasks:
- ``train``: forward (with labels), backward, AdamW step (``--optimizer fused``, torch's single-kernel AdamW and
  the Hugging Face Trainer's default optimizer with torch ≥ 2.8, or ``foreach``, the multi-tensor one these
  benchmarks used up to session 10); median step time over ``--steps`` after ``--warmup``
  steps, peak memory of the timed steps, and the loss of every step (the loss curve: ``--steps`` steps from the
  same weights and data).
- ``decode``: greedy ``generate`` of ``--new-tokens`` tokens after a ``--prompt`` long prompt, at ``--batch``
  sequences; tokens per second (batch × new tokens / time), median of ``--repeats``.

Variants: ``hf-eager`` (the plain Hugging Face model), ``hf-compile`` (``torch.compile(model)``), ``liger``
(``apply_liger_kernel_to_<family>(model=...)``), ``kw-eager`` (``kernelworks.patch(model)``), ``kw-compile``
(patched, then ``torch.compile``), ``kw-graphs`` and ``hf-graphs`` (``torch.compile(mode="reduce-overhead")``, i.e.
CUDA graphs). Every variant loads the same weights file and draws the same data from the same seed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import MODELS, build


def _apply_variant(model: torch.nn.Module, family: str, variant: str) -> torch.nn.Module:
    if variant.startswith("liger"):
        import liger_kernel.transformers as lt

        getattr(lt, f"apply_liger_kernel_to_{family}")(model=model)
    if variant.startswith("kw"):
        import kernelworks

        kernelworks.patch(model)
    if variant.endswith("-compile"):
        model = torch.compile(model)
    elif variant.endswith("-graphs"):
        model = torch.compile(model, mode="reduce-overhead")
    return model


def _batch(spec: dict, vocab: int, device: torch.device) -> torch.Tensor:
    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, vocab, (spec["batch"], spec["seq"]), generator=g)
    return ids.to(device)


def train(model: torch.nn.Module, spec: dict, vocab: int, args: argparse.Namespace) -> dict:
    device = torch.device("cuda")
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, **{args.optimizer: True})
    ids = _batch(spec, vocab, device)
    losses, times = [], []

    def step() -> float:
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return out.loss

    for _ in range(args.warmup):
        losses.append(float(step()))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    result = {"step_ms": statistics.median(times) * 1e3, "step_ms_all": [t * 1e3 for t in times],
              "peak_gb": torch.cuda.max_memory_allocated() / 1e9, "losses": losses,
              "tokens_per_step": spec["batch"] * spec["seq"], "optimizer": f"AdamW {args.optimizer}"}
    if args.memory:
        from memory import peak_table

        args.memory.write_text(f"{args.model} {args.variant} train (AdamW {args.optimizer})\n\n"
                               + peak_table(step, model, opt))
    return result


@torch.no_grad()
def decode(model: torch.nn.Module, spec: dict, vocab: int, args: argparse.Namespace) -> dict:
    device = torch.device("cuda")
    g = torch.Generator().manual_seed(99)
    prompt = torch.randint(0, vocab, (args.batch, args.prompt), generator=g).to(device)
    kwargs = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False,
                  pad_token_id=0, eos_token_id=None)
    out = model.generate(prompt, **kwargs)  # warm-up (and compile, where compiled)
    times = []
    for _ in range(args.repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(prompt, **kwargs)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    return {"tokens_per_s": args.batch * args.new_tokens / t, "seconds": t, "batch": args.batch,
            "new_tokens": args.new_tokens, "prompt": args.prompt,
            "tokens": out[:, args.prompt:].tolist()[:2]}


def _profile(model: torch.nn.Module, spec: dict, args: argparse.Namespace) -> None:
    """Where a step's time goes: two more steps (or one ``generate``) under torch.profiler, the top entries
    by GPU time and by host (self CPU) time written to ``args.profile``."""
    from torch.profiler import ProfilerActivity, profile

    vocab = spec["config"]["vocab_size"]
    quick = argparse.Namespace(**{**vars(args), "warmup": 0, "steps": 2, "repeats": 1, "memory": None})
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=args.profile_stacks,
                 with_stack=args.profile_stacks) as prof:
        train(model, spec, vocab, quick) if args.task == "train" else decode(model, spec, vocab, quick)
    averages = prof.key_averages()
    text = (f"{args.model} {args.variant} {args.task} (batch {args.batch})\n"
            + averages.table(sort_by="cuda_time_total", row_limit=args.profile_rows, max_name_column_width=70)
            + averages.table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=70))
    if args.profile_stacks:  # who called the costliest ops: each (op, Python stack) by its own GPU time
        text += "\nby call site (op and the innermost Python frames), self GPU time\n" + prof.key_averages(
            group_by_stack_n=6).table(sort_by="self_cuda_time_total", row_limit=args.profile_rows,
                                      max_name_column_width=40)
    args.profile.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), required=True)
    ap.add_argument("--variant", required=True)
    ap.add_argument("--task", choices=("train", "decode"), default="train")
    ap.add_argument("--weights", type=Path, required=True, help="state_dict file (made by run.py)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--optimizer", choices=("fused", "foreach"), default="fused",
                    help="AdamW implementation (fused: the HF Trainer's default with torch >= 2.8)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--profile", type=Path, help="also write a torch.profiler table of the task to this file")
    ap.add_argument("--profile-rows", type=int, default=35, help="entries of the table by GPU time (default 35)")
    ap.add_argument("--profile-stacks", action="store_true",
                    help="with --profile: also a table by call site (op and its Python stack), self GPU time")
    ap.add_argument("--memory", type=Path, help="train: also write what is live at one more step's memory peak, "
                    "by owner, to this Markdown file (memory.py)")
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16",
                    help="the model's dtype (float32: the weights file upcast, for loss curves free of bf16 rounding)")
    ap.add_argument("--seq", type=int, help="tokens per sequence (default: the model's)")
    args = ap.parse_args()

    spec = {**MODELS[args.model], **({"seq": args.seq} if args.seq else {})}
    torch.manual_seed(0)
    model = build(spec, device="cuda", dtype=getattr(torch, args.dtype))
    model.load_state_dict(torch.load(args.weights, map_location="cuda"))
    if args.task == "decode":
        model.eval()
    model = _apply_variant(model, spec["family"], args.variant)
    result = train(model, spec, spec["config"]["vocab_size"], args) if args.task == "train" else \
        decode(model, spec, spec["config"]["vocab_size"], args)
    result.update(model=args.model, variant=args.variant, task=args.task, dtype=args.dtype)
    if args.profile:
        _profile(model, spec, args)
    args.out.write_text(json.dumps(result))
    print(json.dumps({k: v for k, v in result.items() if k not in ("step_ms_all", "losses", "tokens")}))


if __name__ == "__main__":
    main()
