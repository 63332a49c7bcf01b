"""The floor under an op's host time: what each layer of a Triton launch costs from Python, on one tiny kernel.

    python benchmarks/host_floor.py [--out F.json]        # on a GPU

Layers, each timed alone (calls back to back, no sync, wall time per call; median of 5 batches): allocating the
output (``torch.empty_like``), the backend's C launch called directly (as kernelworks' ``launch`` does),
the launcher object, Triton's ``CompiledKernel[grid](...)``, the JIT
``kernel[grid](...)``, :func:`kernelworks.runtime.launch.launch`, and torch's own ``F.silu`` on the same
1×4096 row for scale. What an eager op can save lies between its measured host time and this floor.

The autograd rows (``x`` requiring grad) price what a training call adds: an ``autograd.Function`` whose
forward only allocates its output, through ``Function.apply`` and through the C apply that ``TorchOp`` calls,
then with ``save_for_backward``; beside them torch's ``F.silu`` and ``kw.silu`` on the same input, where torch
builds its autograd node in C++.
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


class _Allocates(torch.autograd.Function):
    """The least an autograd Function can do: allocate its output, save nothing."""

    @staticmethod
    def forward(ctx, x):
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, g):
        return g


class _AllocatesAndSaves(torch.autograd.Function):
    """Allocates its output and saves three tensors, as a norm's forward does."""

    @staticmethod
    def forward(ctx, x, w):
        y = torch.empty_like(x)
        ctx.save_for_backward(x, w, y)
        return y

    @staticmethod
    def backward(ctx, g):
        return g, None


def _autograd_rows() -> dict[str, Callable[[], object]]:
    import kernelworks as kw

    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    x_const = x.detach()
    c_apply = super(torch.autograd.Function, _Allocates).apply
    c_apply_saves = super(torch.autograd.Function, _AllocatesAndSaves).apply
    return {
        "train: torch F.silu": lambda: torch.nn.functional.silu(x),
        "train: torch F.rms_norm": lambda: torch.nn.functional.rms_norm(x, (4096,), w, 1e-6),
        "train: Function.apply, allocates": lambda: _Allocates.apply(x),
        "train: C apply, allocates": lambda: c_apply(x),
        "train: C apply, allocates + saves 3": lambda: c_apply_saves(x, w),
        "train: kw.silu": lambda: kw.silu(x),
        "train: kw.rms_norm": lambda: kw.rms_norm(x, w),
        "no grad: kw.silu": lambda: kw.silu(x_const),
        "no grad: torch F.silu": lambda: torch.nn.functional.silu(x_const),
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
