"""KW012: a host sync in the function that launches a kernel: ``.item()``, ``.tolist()``, ``.cpu()``,
``.numpy()``, ``torch.cuda.synchronize()``, or ``.nonzero()`` (its output size is read back).

The launch path of a GPU op should only enqueue work. A read-back makes the CPU wait for every kernel queued
before it, so the host loses its lead and the GPU then idles between launches; it also breaks CUDA-graph
capture and ``torch.compile``'s graphs. Checks that need a value belong in a validation mode the caller opts
into (or on the device: clamp or mask bad indices in the kernel). Only the launching function itself is read:
a sync inside a helper it calls, or a conditional branch the rule cannot see taken, is not flagged.

Bad::

    def softmax(x):
        n = int(lengths.max().item())                    # KW012: waits for the GPU before launching
        _softmax_kernel[(x.shape[0],)](x, y, n, BLOCK=1024)

Good::

    def softmax(x):
        _softmax_kernel[(x.shape[0],)](x, y, lengths, BLOCK=1024)   # the kernel reads the lengths itself
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.findings import Severity
from kernelworks.lint.rules.base import Hit, Rule

_SYNC_METHODS = {"item": "reads one value back", "tolist": "reads the tensor back", "cpu": "copies to the host",
                 "numpy": "copies to the host", "nonzero": "reads the number of nonzeros back to size its output"}


def _sync(call: ast.Call) -> str | None:
    """What the call syncs on, or None."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return None
    if func.attr in _SYNC_METHODS and not (func.attr == "cpu" and call.args):
        return f"`.{func.attr}()` {_SYNC_METHODS[func.attr]}"
    if func.attr == "synchronize" and "cuda" in ast.unparse(func.value):
        return f"`{ast.unparse(func)}()` waits for the device"
    return None


class HostSyncInLaunchPath(Rule):
    code = "KW012"
    severity = Severity.WARNING
    summary = "host sync (.item(), .tolist(), .cpu(), synchronize) in the function that launches a kernel"
    hint = ("pass the tensor to the kernel and read it there (clamp/mask bad values), or keep the check in an "
            "opt-in validation mode")

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        hosts: dict[int, tuple[ast.AST, str]] = {}
        for fn in analysis.functions:
            for launch in fn.launches:
                if isinstance(launch.host, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    hosts.setdefault(id(launch.host), (launch.host, fn.name))
        for host, kernel in hosts.values():
            for node in ast.walk(host):
                if isinstance(node, ast.Call) and (what := _sync(node)) is not None:
                    yield Hit(node, f"{what} in `{host.name}`, which launches `{kernel}`: the CPU waits for "
                                    "the GPU on every call (and CUDA-graph capture breaks)")
