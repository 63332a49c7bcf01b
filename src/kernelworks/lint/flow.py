"""Where each local name of a function gets its value: a small reaching-definitions pass.

Each assignment is a :class:`Def` with its position and its *block path* (the chain of ``if``/``for``/
``while`` branches it sits in). The value a name has at a use is the latest def before it, plus earlier
ones while the latest sits in a branch the use is not in (``if``/``else`` both reach past the ``if``), plus
defs later in an enclosing loop (loop-carried values such as ``ptrs += BLOCK * stride``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

Path = tuple[tuple[int, str], ...]
"""``((id(stmt), "body" | "orelse"), ...)`` from the function body inwards."""
Pos = tuple[int, int]


@dataclass(frozen=True)
class Def:
    """One assignment of ``name``.

    ``kind``: ``"assign"`` (``value`` is the right-hand side), ``"unpack"`` (element ``index`` of
    ``value``), ``"aug"`` (``stmt`` is an ``AugAssign``), ``"for"`` (``value`` is the loop's iterable),
    ``"const"`` (annotated ``tl.constexpr``), ``"opaque"`` (anything else).
    """

    name: str
    pos: Pos
    path: Path
    kind: str
    stmt: ast.stmt
    value: ast.expr | None = None
    index: int | None = None
    self_update: bool = False
    loops: tuple[ast.stmt, ...] = ()
    """The loops (innermost last) that enclose the def."""


def _pos(node: ast.AST) -> Pos:
    return (node.lineno, node.col_offset)


def _end(node: ast.AST) -> Pos:
    return (node.end_lineno or node.lineno, node.end_col_offset or 0)


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


class FunctionFlow:
    """The defs and block paths of one function body (nested functions are not entered)."""

    def __init__(self, fn: ast.FunctionDef, is_constexpr_annotation) -> None:
        self.fn = fn
        self._is_constexpr = is_constexpr_annotation
        self.defs: dict[str, list[Def]] = {}
        self.paths: dict[int, Path] = {}
        self.stmts: dict[int, ast.stmt] = {}
        self.loop_nodes: dict[int, ast.stmt] = {}
        self.if_nodes: dict[int, ast.If] = {}
        self._visit_block(fn.body, (), ())
        for defs in self.defs.values():
            defs.sort(key=lambda d: d.pos)

    # -------------------------------------------------------------------------------------------- indexing

    def _visit_block(self, stmts: list[ast.stmt], path: Path, loops: tuple[ast.stmt, ...]) -> None:
        for st in stmts:
            self._visit_stmt(st, path, loops)

    def _index(self, node: ast.AST | None, path: Path, stmt: ast.stmt, loops: tuple[ast.stmt, ...]) -> None:
        if node is None:
            return
        for n in ast.walk(node):
            self.paths[id(n)] = path
            self.stmts[id(n)] = stmt
            if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name):
                self._add(Def(n.target.id, _end(n), path, "assign", stmt, n.value, loops=loops))

    def _visit_stmt(self, st: ast.stmt, path: Path, loops: tuple[ast.stmt, ...]) -> None:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return
        if isinstance(st, (ast.If, ast.While)):
            if isinstance(st, ast.If):
                self.if_nodes[id(st)] = st
            self._index(st.test, path, st, loops)
            inner = (*loops, st) if isinstance(st, ast.While) else loops
            if isinstance(st, ast.While):
                self.loop_nodes[id(st)] = st
            self._visit_block(st.body, (*path, (id(st), "body")), inner)
            self._visit_block(st.orelse, (*path, (id(st), "orelse")), loops)
            return
        if isinstance(st, ast.For):
            self.loop_nodes[id(st)] = st
            self._index(st.iter, path, st, loops)
            body = (*path, (id(st), "body"))
            self._index(st.target, body, st, (*loops, st))
            pos = _end(st.iter)
            if isinstance(st.target, ast.Name):
                self._add(Def(st.target.id, pos, body, "for", st, st.iter, loops=(*loops, st)))
            else:
                for n in ast.walk(st.target):
                    if isinstance(n, ast.Name):
                        self._add(Def(n.id, pos, body, "opaque", st, loops=(*loops, st)))
            self._visit_block(st.body, body, (*loops, st))
            self._visit_block(st.orelse, (*path, (id(st), "orelse")), loops)
            return
        if isinstance(st, (ast.With, ast.Try)):
            for item in getattr(st, "items", []):
                self._index(item, path, st, loops)
            self._visit_block(st.body, path, loops)
            for h in getattr(st, "handlers", []):
                self._visit_block(h.body, (*path, (id(h), "body")), loops)
            self._visit_block(getattr(st, "orelse", []), path, loops)
            self._visit_block(getattr(st, "finalbody", []), path, loops)
            return
        self._index(st, path, st, loops)
        self._record_defs(st, path, loops)

    def _record_defs(self, st: ast.stmt, path: Path, loops: tuple[ast.stmt, ...]) -> None:
        end = _end(st)
        if isinstance(st, ast.Assign):
            for target in st.targets:
                if isinstance(target, ast.Name):
                    self._add(Def(target.id, end, path, "assign", st, st.value,
                                  self_update=_mentions(st.value, target.id), loops=loops))
                elif isinstance(target, (ast.Tuple, ast.List)):
                    for i, elt in enumerate(target.elts):
                        if isinstance(elt, ast.Name):
                            self._add(Def(elt.id, end, path, "unpack", st, st.value, index=i, loops=loops))
        elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
            kind = "const" if self._is_constexpr(st.annotation) else "assign"
            self._add(Def(st.target.id, end, path, kind, st, st.value, loops=loops))
        elif isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name):
            self._add(Def(st.target.id, end, path, "aug", st, st.value, self_update=True, loops=loops))

    def _add(self, d: Def) -> None:
        self.defs.setdefault(d.name, []).append(d)

    # ------------------------------------------------------------------------------------------- queries

    def path_of(self, node: ast.AST) -> Path:
        """The block path of an expression node of this function (``()`` if unknown)."""
        return self.paths.get(id(node), ())

    def reaching(self, name: str, use: ast.AST) -> tuple[list[Def], bool]:
        """The defs of ``name`` that can reach ``use``, and whether one of them always runs before it
        (if not, the value on entry — the parameter, or a global — reaches too)."""
        defs = self.defs.get(name, [])
        if not defs:
            return [], False
        at = _pos(use)
        here = self.path_of(use)
        out: list[Def] = []
        complete = False
        for d in reversed(defs):
            if d.pos >= at:
                continue
            out.append(d)
            if here[:len(d.path)] == d.path:
                complete = True
                break
        for depth, (sid, field) in enumerate(here):
            if field == "body" and sid in self.loop_nodes:
                prefix = here[:depth + 1]
                out += [d for d in defs if d.pos >= at and d.path[:depth + 1] == prefix and d not in out]
        return out, complete

    def enclosing_loops(self, node: ast.AST) -> list[ast.stmt]:
        """The loops whose body holds ``node``, outermost first."""
        return [self.loop_nodes[sid] for sid, field in self.path_of(node)
                if field == "body" and sid in self.loop_nodes]

    def branch_tests(self, node: ast.AST) -> list[ast.expr]:
        """The tests of the ``if`` statements whose body or ``else`` holds ``node``."""
        return [self.if_nodes[sid].test for sid, _field in self.path_of(node) if sid in self.if_nodes]
