"""KW008 (heuristic): a row offset computed with a size argument as the row stride, in a kernel that takes
no stride argument at all.

``x_ptr + row * n_cols + cols`` is right only for a contiguous ``[rows, n_cols]`` tensor; a slice
(``x[:, :n]``), a transposed view or a padded row gives wrong rows with no error. The rule fires when the
kernel's signature has no parameter named like a stride (``stride*``, ``*_stride``, ``s_*``, ``ld*``) and a
load/store pointer multiplies a program id / row index (or a block of row offsets) by the runtime parameter
that bounds the pointer's own unit-stride (column) offsets (``row * n_cols + cols`` with ``cols < n_cols``).
Batch offsets of contiguous blocks (``i_bh * T * K``) are not flagged. It cannot see whether the
launcher made the tensor contiguous on purpose: if it did, say so with ``# noqa: KW008``.

Bad::

    def _kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols)   # KW008

Good::

    def _kernel(x_ptr, y_ptr, stride_x, stride_y, n_cols, BLOCK: tl.constexpr):
        x = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.evaluate import Ctx, call_arg
from kernelworks.lint.findings import Severity
from kernelworks.lint.model import JitFunction
from kernelworks.lint.names import is_stride
from kernelworks.lint.rules.base import Hit, Rule


class AssumedContiguous(Rule):
    code = "KW008"
    severity = Severity.WARNING
    summary = "row offset uses a size argument as the row stride, and the kernel takes no stride (assumes contiguity)"
    hint = "pass the row stride (x.stride(0)) as an argument and use it in the offset"

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        seen: set[int] = set()
        for fn in analysis.functions:
            if fn.is_helper or any(is_stride(p) for p in fn.params):
                continue
            ctx = analysis.ctx(fn)
            bounds = self._bounds(analysis, fn, ctx)
            for _name, call in analysis.tl_calls(fn, "load", "store"):
                ptr = call_arg(call, 0, "pointer")
                columns = self._unit_roots(analysis, ptr, ctx)
                # sizes that bound the unit-stride (column) offsets of this very pointer
                row_lengths = {p for p, roots in bounds.items() if roots & columns}
                if not row_lengths:
                    continue
                for node, c in analysis.reach(ptr, ctx):
                    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)) or id(node) in seen:
                        continue
                    for a, b in ((node.left, node.right), (node.right, node.left)):
                        index, size = analysis.ev.eval(a, c), analysis.ev.eval(b, c)
                        if not (index.index or index.roots) or set(index.roots) & columns or size.roots \
                                or size.index or len(size.params) != 1 or not size.params <= row_lengths:
                            continue
                        (param,) = size.params
                        seen.add(id(node))
                        yield Hit(node, f"`{ast.unparse(node)}` uses the row length `{param}` as the row stride "
                                        f"and `{fn.name}` takes no stride argument: correct only for contiguous "
                                        "rows (heuristic)",
                                  f"add a stride parameter (x.stride(0)) and use it instead of `{param}`, "
                                  "or noqa it if the launcher makes the tensor contiguous")
                        break

    @staticmethod
    def _bounds(analysis: Analysis, fn: JitFunction, ctx: Ctx) -> dict[str, set[int]]:
        """Runtime parameter → the offset roots it is compared with (``cols < n_cols``)."""
        out: dict[str, set[int]] = {}
        for node in ast.walk(fn.node):
            if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
                continue
            left, right = analysis.ev.eval(node.left, ctx), analysis.ev.eval(node.comparators[0], ctx)
            for a, b in ((left, right), (right, left)):
                if a.roots and not b.roots:
                    for p in b.params - fn.constexpr:
                        out.setdefault(p, set()).update(a.roots)
        return out

    @staticmethod
    def _unit_roots(analysis: Analysis, ptr: ast.expr | None, ctx: Ctx) -> set[int]:
        """The aranges added to the pointer with unit stride (reached without passing a multiplication)."""
        out: set[int] = set()
        stack: list[tuple[ast.AST, Ctx]] = [(ptr, ctx)] if ptr is not None else []
        seen: set[tuple[int, int]] = set()
        while stack:
            node, c = stack.pop()
            if (id(node), id(c)) in seen:
                continue
            seen.add((id(node), id(c)))
            if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
                stack += [(node.left, c), (node.right, c)]
            elif isinstance(node, ast.Subscript):
                stack.append((node.value, c))
            elif isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Add, ast.Sub)):
                stack += [(node.target, c), (node.value, c)]
            elif isinstance(node, ast.Name):
                defs, complete = c.flow.reaching(node.id, node)
                stack += [(d.stmt if d.kind == "aug" else d.value, c) for d in defs
                          if d.kind in ("aug", "assign", "unpack") and d.value is not None]
                if not complete and c.bindings is not None and node.id in c.bindings:
                    stack.append(c.bindings[node.id])
            elif isinstance(node, ast.Call):
                if analysis.imports.is_tl(node.func, "arange"):
                    out.add(id(node))
                elif analysis.imports.is_tl(node.func, "multiple_of", "max_contiguous") and node.args:
                    stack.append((node.args[0], c))
                elif isinstance(node.func, ast.Attribute) and analysis.imports.qualname(node.func) is None:
                    stack.append((node.func.value, c))  # x.to(...)
                elif isinstance(node.func, ast.Name) and analysis.model.jit_function(node.func.id) is not None:
                    callee = analysis.model.jit_function(node.func.id)
                    child = analysis.ev.child(callee, node, c)
                    if child is not None:
                        stack += [(r.value, child) for r in ast.walk(callee.node)
                                  if isinstance(r, ast.Return) and r.value is not None]
        return out
