"""KW013: a matrix product written as ``tl.sum`` of a broadcast product (``a[:, :, None] * b[None, :, :]``).

The broadcast materialises an ``[M, K, N]`` block in registers and reduces it on the FMA units: K times the
registers of the result (spills at any useful tile size) and none of the tensor cores, which ``tl.dot`` uses
(roughly 15× the FMA rate on Hopper for 16-bit inputs). A product of two operands that each gain a new axis
(``None`` in a subscript, ``tl.expand_dims``) and are then summed over an axis both share is flagged, directly
or through one local name. Reductions of 2-D outer products (``tl.sum(x[:, None] * w[None, :], axis=1)`` is a
matrix–vector product) are not flagged: they have no tensor-core form.

Bad::

    acc = tl.sum(a[:, :, None] * b[None, :, :], axis=1)        # KW013: [BM, BK, BN] in registers

Good::

    acc = tl.dot(a, b, acc)                                   # BK ≥ 16 (pad a smaller K)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.evaluate import call_arg
from kernelworks.lint.findings import Severity
from kernelworks.lint.rules.base import Hit, Rule


def _rank(node: ast.expr, local: dict[str, ast.expr], depth: int = 0) -> int | None:
    """The rank a block expression visibly has: the longest subscript tuple in it (``offs_m[:, None]`` → 2),
    through one-time local names; None when nothing says."""
    if depth > 4:
        return None
    if isinstance(node, ast.Name):
        return _rank(local[node.id], local, depth + 1) if node.id in local else None
    best = None
    for sub in ast.walk(node):
        if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Tuple):
            best = max(best or 0, len(sub.slice.elts))
        elif isinstance(sub, ast.Name) and sub is not node and sub.id in local:
            inner = _rank(local[sub.id], local, depth + 1)
            if inner is not None:
                best = max(best or 0, inner)
    return best


def _new_axis_rank(node: ast.expr, analysis: Analysis, local: dict[str, ast.expr]) -> int | None:
    """The rank of a subscript that adds an axis (``x[:, None, :]`` → 3) or of ``tl.expand_dims(x, …)`` (x's
    visible rank + 1), else None."""
    if isinstance(node, ast.Name) and node.id in local:
        node = local[node.id]
    if isinstance(node, ast.Subscript):
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if any(isinstance(e, ast.Constant) and e.value is None for e in elts):
            return len(elts)
        return None
    if isinstance(node, ast.Call) and analysis.imports.tl_name(node.func) == "expand_dims":
        inner = call_arg(node, 0, "input")
        rank = None if inner is None else _rank(inner, local)
        return None if rank is None else rank + 1
    return None


def _assignments(fn: ast.FunctionDef) -> dict[str, ast.expr]:
    """Names assigned exactly once in ``fn`` → their value."""
    seen: dict[str, list[ast.expr]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            seen.setdefault(node.targets[0].id, []).append(node.value)
    return {name: values[0] for name, values in seen.items() if len(values) == 1}


class SumOfBroadcastMatmul(Rule):
    code = "KW013"
    severity = Severity.WARNING
    summary = "matrix product written as tl.sum of a broadcast product (no tensor cores, K× registers)"
    hint = "use tl.dot(a, b) (tensor cores; inner dimension ≥ 16, pad a smaller one)"

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        for fn in analysis.functions:
            local = _assignments(fn.node)
            for _name, call in analysis.tl_calls(fn, "sum"):
                arg = call_arg(call, 0, "input")
                if isinstance(arg, ast.Name) and arg.id in local:
                    arg = local[arg.id]
                if not (isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mult)):
                    continue
                ranks = [_new_axis_rank(side, analysis, local) for side in (arg.left, arg.right)]
                if all(r is not None and r >= 3 for r in ranks):
                    yield Hit(call, f"`{ast.unparse(call)}` reduces a rank-{max(ranks)} broadcast product: a "
                                    "matrix product on the FMA units, its whole block in registers")
