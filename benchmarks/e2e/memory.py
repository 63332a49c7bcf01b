"""What is live on the GPU at a training step's peak, and who allocated it.

``python benchmarks/e2e/step.py ... --memory F.md`` runs one more step under the CUDA caching allocator's
history recorder and writes :func:`peak_table`'s Markdown table to ``F.md``: the bytes live at the step's
highest point, grouped by owner. Tensors that were live before the step are named by what they are
(parameters, optimizer state, other); those allocated during it by the step's phase (the line of ``step`` in
step.py that was running: forward, backward, optimizer) and the innermost library frame that asked (a
kernelworks, Liger, transformers or torch.compile function), so that two variants' peaks can be compared
owner by owner.
"""

from __future__ import annotations

import linecache
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

_LIBRARIES = ("kernelworks", "liger_kernel", "transformers", "torchinductor", "torch/_inductor", "torch/optim",
              "torch/nn", "torch/_functorch")


def _phase(frames: list[dict]) -> str:
    """The statement of step.py's ``step()`` on the stack, as written (``out.loss.backward()``, ...)."""
    for f in frames:
        if f["filename"].endswith("step.py") and f["name"] == "step":
            return linecache.getline(f["filename"], f["line"]).strip() or f"step.py:{f['line']}"
    return "outside step()"


def _owner(frames: list[dict]) -> str:
    """The innermost frame inside a library that matters here, as ``library/…/file.py:function`` (generated
    code such as kernelworks' replay bodies, ``<…>``, and kernelworks' runtime are looked through to the op
    that called them)."""
    for f in frames:
        name = f["filename"]
        if name.startswith("<") or "kernelworks/runtime/" in name:
            continue
        for lib in _LIBRARIES:
            at = name.find(lib)
            if at >= 0:
                return f"{name[at:]}:{f['name']}"
    return "(no library frame)"


def step_label(frames: list[dict]) -> str:
    """``phase · owner``: the statement of ``step()`` running and the library frame that allocated."""
    return f"{_phase(frames)} · {_owner(frames)}"


def peak_live(before: Mapping[str, Any], trace: Iterable[Mapping[str, Any]], known: Mapping[int, str],
              label: Callable[[list[dict]], str] = step_label) -> tuple[int, Counter]:
    """Replay an allocator trace from the snapshot ``before`` it; returns the highest allocated total and the
    bytes live at that moment by owner.

    ``before``: a ``torch.cuda.memory._snapshot()`` (its ``active_allocated`` blocks are the starting set,
    named through ``known``: block address → label). ``trace``: the allocator's events since (``alloc``
    adds a block, ``free_completed`` removes it), each with Python ``frames`` (innermost first), which
    ``label`` names."""
    live: dict[int, tuple[int, str]] = {}
    for seg in before["segments"]:
        for block in seg["blocks"]:
            if block["state"] == "active_allocated":
                live[block["address"]] = (block["size"], known.get(block["address"], "live before the step: other"))
    total = sum(size for size, _ in live.values())
    peak, at_peak = total, Counter()
    for size, owner in live.values():
        at_peak[owner] += size
    for event in trace:
        action = event["action"]
        if action == "alloc":
            live[event["addr"]] = (event["size"], label(event.get("frames") or []))
            total += event["size"]
            if total > peak:
                peak, at_peak = total, Counter()
                for size, owner in live.values():
                    at_peak[owner] += size
        elif action == "free_completed" and event["addr"] in live:
            total -= live.pop(event["addr"])[0]
    return peak, at_peak


def known_blocks(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[int, str]:
    """Block address → label for the parameters, their gradients and the optimizer's state."""
    known: dict[int, str] = {}

    def add(t: object, label: str) -> None:
        if isinstance(t, torch.Tensor) and t.is_cuda:
            known[t.untyped_storage().data_ptr()] = label

    for p in model.parameters():
        add(p, "live before the step: parameters")
        add(p.grad, "live before the step: gradients")
    for state in optimizer.state.values():
        for v in state.values():
            add(v, "live before the step: optimizer state")
    return known


def recorded(fn: Callable[[], object], max_entries: int = 2_000_000) -> tuple[dict, list[dict]]:
    """Run ``fn`` once under the allocator's history recorder (Python stacks): ``(the snapshot before it, the
    allocator events it caused)``, as :func:`peak_live` takes them."""
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks="python")
    try:
        before = torch.cuda.memory._snapshot()
        fn()
        torch.cuda.synchronize()
        after = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    device = torch.cuda.current_device()
    start = len(before["device_traces"][device])  # events already in the first snapshot precede fn
    return before, [e for e in after["device_traces"][device][start:] if e["action"] != "snapshot"]


def site(frames: list[dict]) -> str:
    """``file.py:line`` of the innermost frame outside generated code (a label for :func:`peak_live`)."""
    real = [f for f in frames if not f["filename"].startswith("<")]
    return f"{Path(real[0]['filename']).name}:{real[0]['line']}" if real else "?"


def peak_table(step: Callable[[], object], model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               top: int = 20) -> str:
    """Run ``step`` once under the allocator's recorder; the Markdown table of what is live at its peak."""
    torch.cuda.synchronize()
    known = known_blocks(model, optimizer)
    before, trace = recorded(step)
    peak, by_owner = peak_live(before, trace, known)
    rows = [f"peak {peak / 1e9:.2f} GB (allocator total during one step)", "",
            "| live at the peak | GB |", "|---|---:|"]
    ranked = by_owner.most_common()
    for label, size in ranked[:top]:
        rows.append(f"| {label.replace('|', '/')} | {size / 1e9:.3f} |")
    rest = sum(size for _, size in ranked[top:])
    if rest:
        rows.append(f"| {len(ranked) - top} more owners | {rest / 1e9:.3f} |")
    return "\n".join(rows) + "\n"
