"""The floor under an op's host time: what each layer of a Triton launch costs from Python, on one tiny kernel.

    python benchmarks/host_floor.py [--out F.json]        # on a GPU

Layers, each timed alone (calls back to back, no sync, wall time per call; median of 5 batches): allocating the
output (``torch.empty_like``), the backend's C launch called directly (as kernelworks' ``launch`` does),
the launcher object, Triton's ``CompiledKernel[grid](...)``, the JIT
``kernel[grid](...)``, :func:`kernelworks.runtime.launch.launch`, and torch's own ``F.silu`` on the same
1×4096 row for scale. What an eager op can save lies between its measured host time and this floor.

The autograd rows (``x`` requiring grad) price what a training call adds, rung by rung: an
``autograd.Function`` (its C apply, as ``TorchOp`` calls it) whose forward only allocates its output, then saves
and sets ctx attributes as ``kw.silu``'s does, then runs ``kw.silu``'s no-grad call as its body; beside them
torch's ``F.silu`` (its autograd node built in C++) and ``kw.silu`` itself.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import torch
import triton
import triton.language as tl
from host_time import host_us  # the same timing loop (benchmarks/ is on the path when run as a script)

from kernelworks.runtime import launch as kw_launch


@triton.jit
def _copy_kernel(p_x, p_y, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(p_y + o, tl.load(p_x + o, mask=o < n), mask=o < n)


def _host_us(fn: Callable[[], object], calls: int = 2000) -> float:
    return host_us(fn, calls, warmup=50)


def _function(forward: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The C apply (what ``TorchOp`` calls) of an autograd Function with this ``forward(ctx, x, up, act, gated,
    body)``: ``kw.silu``'s argument list."""
    cls = type("Probe", (torch.autograd.Function,),
               {"forward": staticmethod(forward), "backward": staticmethod(lambda ctx, g: (g, None, None, None, None))})
    return super(torch.autograd.Function, cls).apply


def _allocates(ctx, x, up, act, gated, body):
    return torch.empty_like(x)


def _allocates_and_saves(ctx, x, up, act, gated, body):
    y = torch.empty_like(x)
    ctx.save_for_backward(x, up)
    ctx.act, ctx.gated = act, gated
    return y


def _runs_body(ctx, x, up, act, gated, body):
    y = body(x)
    ctx.save_for_backward(x, up)
    ctx.act, ctx.gated = act, gated
    return y


def _autograd_rows() -> dict[str, Callable[[], object]]:
    """A training call, rung by rung: torch's own ops, then a trivial Function made step by step into
    ``kw.silu``'s (five arguments, saved tensors and ctx attributes, ``kw.silu``'s no-grad call as its body),
    then ``kw.silu`` itself."""
    import kernelworks as kw

    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    x_const = x.detach()
    allocates, saves, runs = _function(_allocates), _function(_allocates_and_saves), _function(_runs_body)
    return {
        "no grad: torch F.silu": lambda: torch.nn.functional.silu(x_const),
        "no grad: kw.silu": lambda: kw.silu(x_const),
        "train: torch F.silu": lambda: torch.nn.functional.silu(x),
        "train: torch F.rms_norm": lambda: torch.nn.functional.rms_norm(x, (4096,), w, 1e-6),
        "train: Function, allocates": lambda: allocates(x, None, "silu", False, None),
        "train: + saves, ctx attributes": lambda: saves(x, None, "silu", False, None),
        "train: + body = kw.silu (no grad)": lambda: runs(x, None, "silu", False, kw.silu),
        "train: kw.silu": lambda: kw.silu(x),
        "train: kw.rms_norm": lambda: kw.rms_norm(x, w),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    n, grid = x.numel(), (4,)
    compiled = _copy_kernel[grid](x, y, n, BLOCK=1024, num_warps=4)
    from triton.runtime.driver import driver

    dev = driver.active.get_current_device()
    stream = driver.active.get_current_stream(dev)
    run = compiled.run
    direct = kw_launch._direct_launcher(compiled)
    rows = {
        "torch F.silu (whole op)": lambda: torch.nn.functional.silu(x),
        "torch.empty_like": lambda: torch.empty_like(x),
        "torch.cuda.current_device": torch.cuda.current_device,
        "driver stream query": lambda: driver.active.get_current_stream(driver.active.get_current_device()),
        "C launch (launch._direct_launcher)": lambda: direct(4, 1, 1, stream, (x, y, n, 1024)),
        "launcher: compiled.run(...)": lambda: run(4, 1, 1, stream, compiled.function, compiled.packed_metadata,
                                                   None, None, None, x, y, n, 1024),
        "CompiledKernel[grid](...)": lambda: compiled[(4, 1, 1)](x, y, n, 1024),
        "JIT kernel[grid](...)": lambda: _copy_kernel[grid](x, y, n, BLOCK=1024, num_warps=4),
        "kernelworks launch()": lambda: kw_launch.launch(_copy_kernel, grid, x, y, n, num_warps=4, BLOCK=1024),
    }
    rows.update(_autograd_rows())
    out = {}
    for name, fn in rows.items():
        try:
            out[name] = _host_us(fn)
        except Exception as e:  # a layer this triton lays out otherwise: say so, keep the others
            out[name] = f"{type(e).__name__}: {e}"[:160]
    doc = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "host_us": out}
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for name, v in out.items():
        print(f"{name:32s} {v:8.2f} µs" if isinstance(v, float) else f"{name:32s} {v}")


if __name__ == "__main__":
    main()
