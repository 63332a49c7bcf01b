"""KW008 (heuristic): a kernel that assumes a row-major layout: a size argument used as the row stride, or a
strided view passed to a kernel that takes (or uses) no strides.

``x_ptr + row * n_cols + cols`` is right only for a contiguous ``[rows, n_cols]`` tensor; a slice
(``x[:, :n]``), a transposed view or a padded row gives wrong rows with no error. Two findings:

* in a kernel with no stride parameter it reads (``stride*``, ``*_stride``, ``s_*``, ``ld*``; a stride that is
  passed but never used counts as none), a load/store pointer multiplies a program id / row index (or a block
  of row offsets) by the runtime parameter that bounds the pointer's own unit-stride (column) offsets
  (``row * n_cols + cols`` with ``cols < n_cols``) — unless every launch in the module passes that tensor
  visibly contiguous (``x.contiguous()``, ``torch.empty(...)``, ``x = x.view(-1, d).contiguous()`` earlier);
* a launch passes such a kernel a visibly strided view for a tensor it loads or stores (``q.transpose(1, 2)``,
  ``x[:, :d]``, ``x.chunk(2, dim=-1)``, ``w.T``), whatever the kernel's offsets look like.

Batch offsets of contiguous blocks (``i_bh * T * K``) are not flagged on their own.

Bad::

    def _kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols)   # KW008

Good::

    def _kernel(x_ptr, y_ptr, stride_x, stride_y, n_cols, BLOCK: tl.constexpr):
        x = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols)

    (or keep the kernel and launch it with ``x.contiguous()``)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.evaluate import Ctx, call_arg
from kernelworks.lint.findings import Severity
from kernelworks.lint.layout import contiguous, strided_view
from kernelworks.lint.model import JitFunction
from kernelworks.lint.names import is_stride
from kernelworks.lint.rules.base import Hit, Rule


class AssumedContiguous(Rule):
    code = "KW008"
    severity = Severity.WARNING
    summary = "kernel assumes row-major contiguous tensors: a size used as the row stride, or a strided view passed"
    hint = "pass the row stride (x.stride(0)) as an argument and use it in the offset"

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        seen: set[int] = set()
        for fn in analysis.functions:
            if fn.is_helper or self._uses_strides(analysis, fn):
                continue
            ctx = analysis.ctx(fn)
            bounds = self._bounds(analysis, fn, ctx)
            accessed: set[str] = set()
            for _name, call in analysis.tl_calls(fn, "load", "store"):
                ptr = call_arg(call, 0, "pointer")
                bases = analysis.bases(ptr, ctx)
                accessed |= bases
                if bases and all(self._made_contiguous(analysis, fn, b) for b in bases):
                    continue
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
            yield from self._views_passed(analysis, fn, accessed)

    @staticmethod
    def _uses_strides(analysis: Analysis, fn: JitFunction) -> bool:
        """Whether the kernel (or a helper it calls) reads a parameter named like a stride."""
        names = {n.id for n in ast.walk(fn.node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if any(is_stride(p) and p in names for p in fn.params):
            return True
        return any(is_stride(p) for c in fn.callees for p in analysis.model.functions[c].params)

    @staticmethod
    def _made_contiguous(analysis: Analysis, fn: JitFunction, param: str) -> bool:
        """Every launch of ``fn`` in the module passes ``param`` visibly contiguous (and there is one)."""
        launches = [ln for ln in fn.launches if param in ln.args]
        return bool(launches) and len(launches) == len(fn.launches) and all(
            contiguous(analysis.model, ln.args[param], ln.host, ln.call) for ln in launches)

    @staticmethod
    def _views_passed(analysis: Analysis, fn: JitFunction, accessed: set[str]) -> Iterator[Hit]:
        """Launches that hand a strided view to a kernel that addresses its tensors without strides."""
        for launch in fn.launches:
            for param in sorted(accessed):
                arg = launch.args.get(param)
                view = strided_view(analysis.model, arg, launch.host, launch.call) if arg is not None else None
                if view is None:
                    continue
                yield Hit(arg, f"`{ast.unparse(arg)}` is passed to `{fn.name}` as `{param}` but "
                               f"`{ast.unparse(view)}` is a strided view, and the kernel takes no strides: it "
                               "reads the tensor as if it were row-major contiguous (heuristic)",
                          "call .contiguous() on it before the launch, or pass its strides and use them")

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
