"""The module as the rules see it: ``@triton.jit`` functions, their decorators, and their launch sites.

Found statically from the AST of one module (nothing is imported or run):

* a :class:`JitFunction` per ``@triton.jit`` function (also ``@jit`` imported from triton, ``@triton.jit(...)``
  with options, ``name = triton.jit(fn)``), with its ``tl.constexpr`` parameters and the keys and values its
  ``@triton.autotune`` configs and ``@triton.heuristics`` set;
* a :class:`Launch` per ``kernel[grid](...)`` call in the same module — also through a launch wrapper
  ``launch(kernel, grid, *args, **constexprs)`` (kernelworks' own, a module-level forwarder, or a name
  configured as ``launchers``) and through a host function that receives the kernel as a parameter: the
  grid, the arguments mapped to the kernel's parameters, and the host scope, so simple local assignments
  (``grid = (n,)``, ``BLOCK = triton.next_power_of_2(n)``) can be followed back.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from kernelworks.lint.names import Imports

_MAX_RESOLVE = 6

KNOWN_LAUNCHERS = frozenset({"kernelworks.runtime.launch.launch"})
"""Launch wrappers called as ``f(kernel, grid, *args, **constexprs)`` (kernelworks' own fast launcher)."""


@dataclass
class Launch:
    """``kernel[grid](args...)`` at one place of the module."""

    call: ast.Call
    grid: ast.expr
    host: ast.AST
    """The function (or module) the launch is written in: where names in it are resolved."""
    args: dict[str, ast.expr]
    """Kernel parameter → the expression passed for it (positional up to a ``*args``, and keywords)."""


@dataclass
class JitFunction:
    """One ``@triton.jit`` function and what its decorators and launches say about its parameters."""

    name: str
    node: ast.FunctionDef
    params: list[str]
    constexpr: set[str]
    defaults: dict[str, ast.expr]
    tuned: dict[str, list[ast.expr]] = field(default_factory=dict)
    """Parameter → values set by ``@triton.autotune`` configs (``num_warps``/``num_stages`` are not params)."""
    heuristic: dict[str, ast.expr] = field(default_factory=dict)
    """Parameter → the function ``@triton.heuristics`` computes it with."""
    launches: list[Launch] = field(default_factory=list)
    callers: set[str] = field(default_factory=set)
    callees: set[str] = field(default_factory=set)

    @property
    def is_helper(self) -> bool:
        """Called from other jit functions and never launched here: its arguments come from a caller."""
        return bool(self.callers) and not self.launches


def is_constexpr_annotation(imports: Imports, ann: ast.expr | None) -> bool:
    """``tl.constexpr``, ``triton.language.constexpr``, ``constexpr`` or the string ``"tl.constexpr"``."""
    if ann is None:
        return False
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        return ann.value.split(".")[-1] == "constexpr"
    q = imports.qualname(ann)
    return (q is not None and q.endswith(".constexpr")) or (isinstance(ann, ast.Name) and ann.id == "constexpr")


def _is_triton(imports: Imports, node: ast.AST, name: str) -> bool:
    """``triton.<name>`` (after canonicalisation), called or not."""
    target = node.func if isinstance(node, ast.Call) else node
    return imports.qualname(target) == f"triton.{name}"


class ModuleModel:
    """Jit functions, launches and module-level names of one parsed module."""

    def __init__(self, tree: ast.Module, imports: Imports | None = None, launchers: Sequence[str] = ()) -> None:
        self.tree = tree
        self.imports = imports or Imports(tree)
        self.launchers = frozenset(launchers)
        self.parents: dict[int, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node
        self.module_assigns: dict[str, list[ast.expr]] = {}
        self.module_defs: dict[str, ast.FunctionDef] = {}
        for st in tree.body:
            if isinstance(st, ast.Assign):
                for t in st.targets:
                    if isinstance(t, ast.Name):
                        self.module_assigns.setdefault(t.id, []).append(st.value)
            elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
                self.module_assigns.setdefault(st.target.id, []).append(st.value)
            elif isinstance(st, ast.FunctionDef):
                self.module_defs[st.name] = st
        self._resolved: dict[tuple[int, int, int, int], ast.expr] = {}
        self.functions: dict[str, JitFunction] = {}
        self.aliases: dict[str, str] = {}
        """Other module-level names bound to a jit function (``k = triton.jit(fn)``)."""
        self._find_functions()
        self._find_calls_between_functions()
        self._find_launches()

    # ------------------------------------------------------------------------------------------ functions

    def _find_functions(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.FunctionDef) and any(self._is_jit(d) for d in node.decorator_list):
                self._add_function(node)
        for name, values in self.module_assigns.items():
            for v in values:
                if (isinstance(v, ast.Call) and _is_triton(self.imports, v, "jit") and v.args
                        and isinstance(v.args[0], ast.Name) and v.args[0].id in self.module_defs):
                    fn = self.module_defs[v.args[0].id]
                    if fn.name not in self.functions:
                        self._add_function(fn)
                    self.aliases[name] = fn.name

    def _is_jit(self, deco: ast.expr) -> bool:
        return _is_triton(self.imports, deco, "jit")

    def _add_function(self, node: ast.FunctionDef) -> None:
        args = node.args
        params = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
        constexpr = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]
                     if is_constexpr_annotation(self.imports, a.annotation)}
        positional = [*args.posonlyargs, *args.args]
        defaults = {a.arg: d for a, d in zip(positional[len(positional) - len(args.defaults):], args.defaults)}
        defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
        fn = JitFunction(node.name, node, params, constexpr, defaults)
        for deco in node.decorator_list:
            if isinstance(deco, ast.Call) and _is_triton(self.imports, deco, "autotune"):
                self._read_autotune(fn, deco)
            elif isinstance(deco, ast.Call) and _is_triton(self.imports, deco, "heuristics"):
                self._read_heuristics(fn, deco)
        self.functions[node.name] = fn

    def _read_autotune(self, fn: JitFunction, deco: ast.Call) -> None:
        configs = deco.args[0] if deco.args else next((k.value for k in deco.keywords if k.arg == "configs"), None)
        if configs is None:
            return
        for call in self._config_calls(configs, depth=0):
            kwargs = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "kwargs"), None)
            for key, value in self._dict_items(kwargs):
                fn.tuned.setdefault(key, []).append(value)

    def _config_calls(self, expr: ast.AST, depth: int) -> Iterator[ast.Call]:
        """Every ``triton.Config(...)`` reachable from ``expr``, following module names and functions."""
        if depth > _MAX_RESOLVE:
            return
        for node in ast.walk(expr):
            if isinstance(node, ast.Call) and _is_triton(self.imports, node, "Config"):
                yield node
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                for value in self.module_assigns.get(node.id, []):
                    yield from self._config_calls(value, depth + 1)
                if node.id in self.module_defs and node.id not in self.functions:
                    yield from self._config_calls(self.module_defs[node.id], depth + 1)

    @staticmethod
    def _dict_items(node: ast.expr | None) -> Iterator[tuple[str, ast.expr]]:
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    yield k.value, v
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
            for kw in node.keywords:
                if kw.arg:
                    yield kw.arg, kw.value

    def _read_heuristics(self, fn: JitFunction, deco: ast.Call) -> None:
        values = deco.args[0] if deco.args else next((k.value for k in deco.keywords if k.arg == "values"), None)
        for key, value in self._dict_items(values):
            fn.heuristic[key] = value

    def _find_calls_between_functions(self) -> None:
        for fn in self.functions.values():
            for node in ast.walk(fn.node):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    callee = self.jit_function(node.func.id)
                    if callee is not None and callee is not fn:
                        fn.callees.add(callee.name)
                        callee.callers.add(fn.name)

    def jit_function(self, name: str) -> JitFunction | None:
        """The jit function a module-level name refers to (directly or through an alias)."""
        return self.functions.get(self.aliases.get(name, name))

    # ----------------------------------------------------------------------------------------- launches

    def _find_launches(self) -> None:
        for node in ast.walk(self.tree):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Subscript) and isinstance(node.func.value, ast.Name):
                target, grid, args = node.func.value, node.func.slice, node.args
            elif self._is_launcher(node.func) and len(node.args) >= 2 \
                    and not any(isinstance(a, ast.Starred) for a in node.args[:2]):
                target, grid, args = node.args[0], node.args[1], node.args[2:]  # launch(kernel, grid, *args)
            else:
                continue
            if not isinstance(target, ast.Name):
                continue
            fn = self.jit_function(target.id)
            for kernel in [fn] if fn is not None else self._kernels_passed_as(target.id, self.host_of(node)):
                self._add_launch(kernel, node, grid, args)

    def _is_launcher(self, func: ast.expr) -> bool:
        """A launch wrapper ``f(kernel, grid, *args, **constexprs)``: a configured or known qualified name,
        or a function of this module whose first two parameters are used as ``kernel[grid](...)``."""
        q = self.imports.qualname(func)
        if q is not None and (q in self.launchers or q in KNOWN_LAUNCHERS):
            return True
        if not (isinstance(func, ast.Name) and func.id in self.module_defs):
            return False
        fn = self.module_defs[func.id]
        params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
        if len(params) < 2 or fn.args.vararg is None:
            return False
        return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
                   and isinstance(n.func.value, ast.Name) and n.func.value.id == params[0]
                   and isinstance(n.func.slice, ast.Name) and n.func.slice.id == params[1]
                   for n in ast.walk(fn))

    def _kernels_passed_as(self, name: str, host: ast.AST) -> list[JitFunction]:
        """Jit functions handed to ``host`` as its parameter ``name`` (``def _launch(kernel, ...):
        kernel[grid](...)`` called as ``_launch(_fwd_kernel, ...)`` somewhere in the module)."""
        if not isinstance(host, ast.FunctionDef):
            return []
        params = [a.arg for a in [*host.args.posonlyargs, *host.args.args]]
        kw_only = [a.arg for a in host.args.kwonlyargs]
        if name not in params and name not in kw_only:
            return []
        out: list[JitFunction] = []
        for call in ast.walk(self.tree):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == host.name):
                continue
            arg = None
            if name in params and params.index(name) < len(call.args):
                arg = call.args[params.index(name)]
            arg = next((k.value for k in call.keywords if k.arg == name), arg)
            fn = self.jit_function(arg.id) if isinstance(arg, ast.Name) else None
            if fn is not None and fn not in out:
                out.append(fn)
        return out

    def _add_launch(self, fn: JitFunction, node: ast.Call, grid: ast.expr, positional: list[ast.expr]) -> None:
        """Record ``node`` (``kernel[grid](...)`` or ``launch(kernel, grid, ...)``) as a launch of ``fn``."""
        args: dict[str, ast.expr] = {}
        for param, arg in zip(fn.params, positional):
            if isinstance(arg, ast.Starred):
                break
            args[param] = arg
        for kw in node.keywords:
            if kw.arg is not None:
                args[kw.arg] = kw.value
            else:  # **opts: a dict literal (or a name bound to one) is read; anything else is unknown
                for key, value in self._dict_items(self.resolve(kw.value, self.host_of(node), node)):
                    args.setdefault(key, value)
        fn.launches.append(Launch(node, grid, self.host_of(node), args))

    def host_of(self, node: ast.AST) -> ast.AST:
        """The innermost function (or the module) containing ``node``."""
        cur = self.parents.get(id(node))
        while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            cur = self.parents.get(id(cur))
        return cur if cur is not None else self.tree

    def resolve(self, expr: ast.expr, host: ast.AST, before: ast.AST, depth: int = 0) -> ast.expr:
        """Follow a host-side name to the value of its last plain assignment before ``before`` (the host
        function first, then the module); anything else is returned as is."""
        if not isinstance(expr, ast.Name) or depth > _MAX_RESOLVE:
            return expr
        line = getattr(before, "lineno", 1 << 30)
        key = (id(expr), id(host), line, depth)
        if key not in self._resolved:
            self._resolved[key] = self._resolve(expr, host, line, depth)
        return self._resolved[key]

    def _resolve(self, expr: ast.Name, host: ast.AST, line: int, depth: int) -> ast.expr:
        for scope in (host, self.tree) if host is not self.tree else (self.tree,):
            best: ast.Assign | None = None
            for node in ast.walk(scope):
                if (isinstance(node, ast.Assign) and node.lineno < line and len(node.targets) == 1
                        and isinstance(node.targets[0], ast.Name) and node.targets[0].id == expr.id
                        and (best is None or node.lineno > best.lineno)):
                    best = node
            if best is not None:
                return self.resolve(best.value, host, best, depth + 1)
        return expr

    def host_function(self, name: str, host: ast.AST) -> ast.FunctionDef | None:
        """A plain function called ``name`` defined in ``host`` or at module level (a grid function)."""
        for scope in (host, self.tree):
            for node in ast.walk(scope):
                if isinstance(node, ast.FunctionDef) and node.name == name and node.name not in self.functions:
                    return node
        return None

    def grid_entries(self, grid: ast.expr, host: ast.AST, at: ast.AST, depth: int = 0) -> list[ast.expr] | None:
        """The per-axis expressions of a launch grid: a tuple's elements, what a lambda or a grid function
        returns; ``None`` when they cannot be told."""
        if depth > _MAX_RESOLVE:
            return None
        grid = self.resolve(grid, host, at)
        if isinstance(grid, (ast.Tuple, ast.List)):
            return None if any(isinstance(e, ast.Starred) for e in grid.elts) else list(grid.elts)
        if isinstance(grid, ast.Lambda):
            return self.grid_entries(grid.body, host, at, depth + 1)
        if isinstance(grid, ast.IfExp):
            a = self.grid_entries(grid.body, host, at, depth + 1)
            b = self.grid_entries(grid.orelse, host, at, depth + 1)
            return a if a is not None and b is not None and len(a) == len(b) else None
        if isinstance(grid, ast.Name):
            fn = self.host_function(grid.id, host)
            if fn is not None:
                returns = [self.grid_entries(r.value, fn, r, depth + 1)
                           for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value is not None]
                if returns and all(r is not None and len(r) == len(returns[0]) for r in returns):
                    return returns[0]
        return None

    def grid_rank(self, grid: ast.expr, host: ast.AST, at: ast.AST) -> int | None:
        """How many axes a launch grid has (``None`` when it cannot be told)."""
        entries = self.grid_entries(grid, host, at)
        return None if entries is None else len(entries)

    def rounds_up(self, expr: ast.expr, host: ast.AST, at: ast.AST, depth: int = 0) -> bool:
        """Whether a grid entry is a ceiling division (``triton.cdiv(n, B)``, ``(n + B - 1) // B``,
        ``math.ceil``), following host names: a grid that rounds up gives the last program a partial block."""
        if depth > 2:
            return False
        for node in ast.walk(expr):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name in ("cdiv", "ceil", "ceildiv"):
                    return True
            if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv)
                    and isinstance(node.left, ast.BinOp) and isinstance(node.left.op, (ast.Add, ast.Sub))):
                return True
            if isinstance(node, ast.Name):
                value = self.resolve(node, host, at)
                if value is not node and self.rounds_up(value, host, at, depth + 1):
                    return True
        return False
