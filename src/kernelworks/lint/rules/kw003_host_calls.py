"""KW003: host-side Python inside a kernel: ``torch.*``, ``numpy``, ``math.*`` on tensors, host helpers
(``triton.cdiv``, ``triton.next_power_of_2``) on runtime values, and Python builtins on tensors.

A ``@triton.jit`` body is compiled, not run: ``math.exp(x)`` or ``torch.sigmoid(x)`` on a block fails to
compile (or, on constants, silently runs once on the host), ``x.to(torch.float16)`` passes a torch dtype
where a Triton one is needed, ``sum(x)``/``len(x)`` try to iterate a block. ``max``/``min``/``print`` are
rewritten by Triton 3.x to ``tl.maximum``/``tl.minimum``/``tl.device_print``. Builtins are flagged only on
visible blocks (loaded or ``tl.arange``-derived tensors): scalars and tuples are fine (the matmul
tutorial's ``min(num_pid_m - first_pid_m, GROUP_SIZE_M)``, ``len(coords)``); ``max``/``min``/``abs`` on a
block are a warning (Triton 3 rewrites them, older versions fail, NaN handling stays implicit); ``print``
is always flagged. A helper's builtins are judged at each call (``def _relu(x): return max(x, 0.0)`` on the
block the kernel passes), and blocks stay blocks through reductions along one axis and ``tl.reshape``
(``max(tl.max(x, axis=1), 0.0)`` is a block of row maxima; ``max(tl.sum(x), eps)`` a scalar).

Allowed: ``tl.*``, ``tl.math.*``, ``triton.language.*``, other ``@triton.jit`` functions, ``range``/
``tl.range``/``tl.static_range``, and builtins or ``math``/``triton`` helpers applied only to literals and
``tl.constexpr`` values (``max(BLOCK // 4, 1)``, ``triton.cdiv(N, BLOCK)`` with both constexpr).

Bad::

    y = 0.5 * x * (1.0 + math.erf(x / 1.4142135))  # KW003

Good::

    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelworks.lint.analysis import Analysis, calls_in
from kernelworks.lint.evaluate import Ctx
from kernelworks.lint.findings import Severity
from kernelworks.lint.rules.base import Hit, Rule
from kernelworks.lint.values import Val

_IN_TL = frozenset({"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "erf", "sigmoid", "abs", "maximum", "minimum",
                    "floor", "ceil", "sin", "cos", "fma", "cdiv", "softmax", "sum", "max", "min", "where",
                    "clamp", "cumsum", "argmax", "argmin", "zeros", "full", "arange", "dot", "trans", "reshape"})
_BUILTIN_HINTS = {
    "max": "tl.maximum(a, b) (elementwise) or tl.max(x, axis=...) (a reduction)",
    "min": "tl.minimum(a, b) (elementwise) or tl.min(x, axis=...) (a reduction)",
    "abs": "tl.abs(x)",
    "sum": "tl.sum(x, axis=...)",
    "len": "the tl.constexpr block size the block was made with",
    "round": "tl.extra.libdevice.round(x) (or tl.floor(x + 0.5))",
    "pow": "tl.extra.libdevice.pow(x, y) (or repeated multiplication)",
    "divmod": "// and % on blocks",
    "any": "tl.max(mask.to(tl.int32), axis=...) > 0",
    "all": "tl.min(mask.to(tl.int32), axis=...) > 0",
    "sorted": "tl.sort(x)",
}
_REWRITTEN = frozenset({"max", "min", "abs"})
"""Builtins Triton 3.x maps onto tl.maximum/tl.minimum/abs: fine on scalars (the matmul tutorial's
``min(num_pid_m - first_pid_m, GROUP_SIZE_M)``), flagged on blocks."""
_HOST_TRITON = frozenset({"cdiv", "next_power_of_2", "autotune", "heuristics", "Config", "jit", "testing"})


def _is_block(v: Val) -> bool:
    """Visibly a block of values (a tensor with at least one dimension), not a scalar or a tuple."""
    return v.known_runtime and v.shape is not None and len(v.shape) >= 1


def _tl_equivalent(name: str) -> str:
    fn = name.rsplit(".", 1)[-1]
    if fn in _IN_TL:
        return f"tl.{fn}"
    if fn == "tanh":
        return "2 * tl.sigmoid(2 * x) - 1 (or triton.language.extra.libdevice.tanh)"
    return f"triton.language.extra.libdevice.{fn} or a tl.* equivalent"


class HostCodeInKernel(Rule):
    code = "KW003"
    severity = Severity.ERROR
    summary = "torch/numpy/math, host triton helpers or Python builtins applied to tensors inside a kernel"
    hint = "use the triton.language equivalent (tl.exp, tl.maximum, tl.sum, tl.cdiv, ...)"

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        reported: set[int] = set()
        for fn in analysis.functions:
            ctx = analysis.ctx(fn)
            for call in calls_in(fn.node):
                hit = self._check_call(analysis, ctx, call)
                if hit is not None and id(call.func) not in reported:
                    reported.add(id(call.func))
                    yield hit
            yield from self._module_refs(analysis, fn.node, reported)
        for fn in analysis.functions:
            if not fn.is_helper:
                yield from self._inlined(analysis, analysis.ctx(fn), reported)

    def _inlined(self, analysis: Analysis, ctx: Ctx, reported: set[int]) -> Iterator[Hit]:
        """Builtins in helpers seen through their calls: ``def _relu(x): return max(x, 0.0)`` takes an opaque
        ``x`` on its own, a loaded block when the kernel calls it."""
        for call in calls_in(ctx.fn.node):
            callee = analysis.model.jit_function(call.func.id) if isinstance(call.func, ast.Name) else None
            child = analysis.ev.child(callee, call, ctx) if callee is not None else None
            if child is None:
                continue
            for inner in calls_in(callee.node):
                if isinstance(inner.func, ast.Name) and id(inner.func) not in reported:
                    hit = self._check_call(analysis, child, inner)
                    if hit is not None:
                        reported.add(id(inner.func))
                        yield hit
            yield from self._inlined(analysis, child, reported)

    def _check_call(self, analysis: Analysis, ctx: Ctx, call: ast.Call) -> Hit | None:
        imports = analysis.imports
        q = imports.qualname(call.func)
        args = [analysis.ev.eval(a, ctx) for a in call.args] + [analysis.ev.eval(k.value, ctx) for k in call.keywords]
        all_const = all(a.const for a in args)
        if q is not None:
            top, _, rest = q.partition(".")
            if top == "torch":
                return Hit(call, f"`{q}(...)` inside a @triton.jit function: torch runs on the host, not in a kernel",
                           f"use {_tl_equivalent(q)}")
            if top in ("numpy", "math") and not all_const:
                return Hit(call, f"`{ast.unparse(call.func)}(...)` on a tensor inside a @triton.jit function",
                           f"use {_tl_equivalent(q)}")
            if top == "triton" and not rest.startswith("language") and rest.split(".")[0] in _HOST_TRITON \
                    and not all_const:
                hint = ("tl.cdiv" if rest == "cdiv" else
                        "compute it on the host and pass it as a tl.constexpr argument")
                return Hit(call, f"host helper `{q}` applied to runtime values inside a @triton.jit function",
                           f"use {hint}")
            return None
        func = call.func
        if not isinstance(func, ast.Name) or func.id in ctx.flow.defs or func.id in ctx.fn.params \
                or analysis.model.jit_function(func.id) is not None or func.id in analysis.model.module_defs:
            return None
        if func.id == "print":
            return Hit(call, "print() inside a @triton.jit function",
                       "use tl.device_print(prefix, x) (runtime values) or tl.static_print (compile time)")
        if func.id not in _BUILTIN_HINTS or not any(_is_block(a) for a in args):
            return None  # scalars and tuples (len(coords), min(a, b) on ints) are fine
        if func.id in _REWRITTEN:
            return Hit(call, f"Python builtin {func.id}() on a block inside a @triton.jit function: Triton 3 "
                             f"rewrites it, older versions fail, and NaN handling stays implicit",
                       f"use {_BUILTIN_HINTS[func.id]}", Severity.WARNING)
        return Hit(call, f"Python builtin {func.id}() applied to a block inside a @triton.jit function",
                   f"use {_BUILTIN_HINTS[func.id]}")

    @staticmethod
    def _module_refs(analysis: Analysis, fn: ast.FunctionDef, reported: set[int]) -> Iterator[Hit]:
        """``torch.float16``/``np.float32`` used as values (e.g. ``x.to(torch.float16)``)."""
        parents = analysis.model.parents
        for node in (n for st in fn.body for n in ast.walk(st)):
            if not isinstance(node, ast.Attribute) or id(node) in reported:
                continue
            parent = parents.get(id(node))
            if isinstance(parent, ast.Attribute) or (isinstance(parent, ast.Call) and parent.func is node):
                continue
            q = analysis.imports.qualname(node)
            if q is not None and q.split(".")[0] in ("torch", "numpy"):
                fix = f"tl.{node.attr}" if "float" in node.attr or "int" in node.attr else "a triton.language value"
                yield Hit(node, f"`{q}` used inside a @triton.jit function: host objects do not exist in a kernel",
                          f"use {fix}")
