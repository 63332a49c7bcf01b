"""One module ready for the rules: its model, an evaluator, and the queries several rules share."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence

from kernelworks.lint.evaluate import Ctx, Evaluator, call_arg
from kernelworks.lint.model import JitFunction, Launch, ModuleModel
from kernelworks.lint.names import Imports


def calls_in(fn: ast.FunctionDef) -> Iterator[ast.Call]:
    """Every call in a function body, in source order (nested functions are not entered)."""
    stack: list[ast.AST] = list(reversed(fn.body))
    out: list[ast.Call] = []
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Call):
            out.append(node)
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
    yield from sorted(out, key=lambda c: (c.lineno, c.col_offset))


class Analysis:
    """A parsed module with its jit functions, launches and value evaluator."""

    def __init__(self, tree: ast.Module, path: str = "<string>", launchers: Sequence[str] = ()) -> None:
        self.tree = tree
        self.path = path
        self.imports = Imports(tree)
        self.model = ModuleModel(tree, self.imports, launchers)
        self.ev = Evaluator(self.model)

    @property
    def functions(self) -> list[JitFunction]:
        return list(self.model.functions.values())

    def ctx(self, fn: JitFunction) -> Ctx:
        return self.ev.ctx(fn)

    def tl_calls(self, fn: JitFunction, *names: str) -> Iterator[tuple[str, ast.Call]]:
        """``(name, call)`` for each ``tl.<name>(...)`` in ``fn`` (``tl.math.exp`` has name ``math.exp``)."""
        for call in calls_in(fn.node):
            name = self.imports.tl_name(call.func)
            if name is not None and (not names or name in names):
                yield name, call

    def reach(self, node: ast.AST, ctx: Ctx) -> Iterator[tuple[ast.AST, Ctx]]:
        """Every expression node ``node`` is computed from: its sub-expressions, the assignments of the
        names it reads, and the returns of the helpers it calls (each with the context it lives in)."""
        seen: set[tuple[int, int]] = set()
        stack: list[tuple[ast.AST, Ctx]] = [(node, ctx)]
        while stack:
            n, c = stack.pop()
            key = (id(n), id(c))
            if key in seen:
                continue
            seen.add(key)
            yield n, c
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                defs, complete = c.flow.reaching(n.id, n)
                for d in defs:
                    part = d.stmt if d.kind == "aug" else d.value
                    if part is not None:
                        stack.append((part, c))
                if not complete and c.bindings is not None and n.id in c.bindings:
                    stack.append(c.bindings[n.id])
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
                callee = self.model.jit_function(n.func.id)
                child = self.ev.child(callee, n, c) if callee is not None else None
                if child is not None:
                    stack.extend((r.value, child) for r in ast.walk(callee.node)
                                 if isinstance(r, ast.Return) and r.value is not None)
            if isinstance(n, ast.AugAssign):
                stack.extend([(n.target, c), (n.value, c)])
                continue
            stack.extend((ch, c) for ch in ast.iter_child_nodes(n) if isinstance(ch, ast.expr))

    def bases(self, ptr: ast.expr | None, ctx: Ctx) -> set[str]:
        """The kernel's pointer parameters a load/store pointer is built on (reached by additions only)."""
        out: set[str] = set()
        stack: list[tuple[ast.AST, Ctx]] = [(ptr, ctx)] if ptr is not None else []
        seen: set[tuple[int, int]] = set()
        while stack:
            node, c = stack.pop()
            if (id(node), id(c)) in seen:
                continue
            seen.add((id(node), id(c)))
            if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
                stack += [(node.left, c), (node.right, c)]
            elif isinstance(node, ast.AugAssign):
                stack.append((node.target, c))
            elif isinstance(node, ast.Name):
                defs, complete = c.flow.reaching(node.id, node)
                stack += [(d.stmt if d.kind == "aug" else d.value, c) for d in defs
                          if d.kind in ("aug", "assign") and d.value is not None]
                if not complete:
                    if c.bindings is not None and node.id in c.bindings:
                        stack.append(c.bindings[node.id])
                    elif c.bindings is None and node.id in c.fn.params and node.id not in c.fn.constexpr:
                        out.add(node.id)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                callee = self.model.jit_function(node.func.id)
                child = self.ev.child(callee, node, c) if callee is not None else None
                if child is not None:
                    stack += [(r.value, child) for r in ast.walk(callee.node)
                              if isinstance(r, ast.Return) and r.value is not None]
        return out

    def launch_values(self, fn: JitFunction, param: str) -> list[tuple[ast.expr, Launch | None]]:
        """What ``param`` is set to: at each launch (followed through simple host assignments), by each
        autotune config, and by its default."""
        out: list[tuple[ast.expr, Launch | None]] = []
        for launch in fn.launches:
            if param in launch.args:
                out.append((self.model.resolve(launch.args[param], launch.host, launch.call), launch))
        out += [(v, None) for v in fn.tuned.get(param, [])]
        if param in fn.heuristic:
            out.append((fn.heuristic[param], None))
        if param in fn.defaults:
            out.append((fn.defaults[param], None))
        return out

    def max_axis(self, fn: JitFunction, seen: frozenset[str] = frozenset()) -> tuple[int, ast.Call] | None:
        """The highest literal ``tl.program_id``/``tl.num_programs`` axis ``fn`` (or a helper it calls)
        reads, and the call that reads it."""
        best: tuple[int, ast.Call] | None = None
        for _name, call in self.tl_calls(fn, "program_id", "num_programs"):
            axis = call_arg(call, 0, "axis")
            known = isinstance(axis, ast.Constant) and isinstance(axis.value, int)
            if known and (best is None or axis.value > best[0]):
                best = (axis.value, call)
        for name in fn.callees - seen - {fn.name}:
            sub = self.max_axis(self.model.functions[name], seen | {fn.name})
            if sub is not None and (best is None or sub[0] > best[0]):
                best = sub
        return best
