"""Evaluate kernel expressions to :class:`~kernelworks.lint.values.Val` over the function's dataflow.

A :class:`Ctx` is one function seen from one place: a kernel on its own (runtime parameters are runtime,
``tl.constexpr`` ones constant), a helper on its own (its parameters are opaque), or a helper inlined at a
call site (its parameters are the caller's arguments, evaluated in the caller's context). Calls of other
``@triton.jit`` functions of the module are inlined this way, a few levels deep, so offsets and masks built
in helpers (``o_m, o_n, mask = _tile(...)``) keep their origin.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from kernelworks.lint.flow import Def, FunctionFlow
from kernelworks.lint.model import JitFunction, ModuleModel, is_constexpr_annotation
from kernelworks.lint.names import dtype_kind
from kernelworks.lint.values import (
    BOTTOM,
    CONST,
    OPAQUE,
    Extent,
    Root,
    Val,
    combine,
    join,
    subscript_shape,
)

_MAX_INLINE = 4
_MAX_DEPTH = 120
"""Nested evaluations before a value is taken as unknown (keeps deep chains inside the recursion limit)."""
_PASS_THROUGH = frozenset({"multiple_of", "max_contiguous", "max_constancy", "advance"})
_BLOCK_PTR = frozenset({"make_block_ptr", "make_tensor_descriptor"})
_REDUCTIONS = frozenset({"sum", "max", "min", "argmax", "argmin", "reduce", "xor_sum", "prod"})
_RESHAPES = frozenset({"reshape", "view", "broadcast_to", "expand_dims", "ravel", "join", "split",
                       "interleave", "permute", "flip", "cumsum", "cumprod", "associative_scan", "sort"})
_NO_VALUE = frozenset({"store", "debug_barrier", "device_print", "static_print", "static_assert",
                       "device_assert", "atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or",
                       "atomic_xor", "atomic_xchg", "atomic_cas"})


@dataclass(eq=False)
class Ctx:
    """A function evaluated standalone (``bindings is None``) or inlined at a call (``bindings`` set)."""

    fn: JitFunction
    flow: FunctionFlow
    bindings: dict[str, tuple[ast.expr, Ctx]] | None
    depth: int = 0

    @property
    def helper(self) -> bool:
        return self.fn.is_helper


def _tokens(node: ast.AST | None, exclude: str = "") -> set[object]:
    """Names and integer literals in an expression (what a block size can be spelled with)."""
    if node is None:
        return set()
    out: set[object] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id != exclude:
            out.add(n.id)
        elif isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool):
            out.add(n.value)
    return out


def call_arg(call: ast.Call, pos: int, name: str) -> ast.expr | None:
    """The argument of ``call`` at position ``pos`` or keyword ``name``."""
    if len(call.args) > pos and not any(isinstance(a, ast.Starred) for a in call.args[:pos + 1]):
        return call.args[pos]
    return next((k.value for k in call.keywords if k.arg == name), None)


def _reduced(shape: tuple | None, call: ast.Call, axis_pos: int) -> tuple | None:
    """The shape a reduction leaves: a scalar without ``axis``, the input less that axis with one."""
    axis = call_arg(call, axis_pos, "axis")
    if axis is None or (isinstance(axis, ast.Constant) and axis.value is None):
        return ()
    keep = any(k.arg == "keep_dims" and isinstance(k.value, ast.Constant) and k.value.value for k in call.keywords)
    if shape is None or not (isinstance(axis, ast.Constant) and isinstance(axis.value, int)):
        return None
    a = axis.value + len(shape) if axis.value < 0 else axis.value
    if not 0 <= a < len(shape):
        return None
    return (*shape[:a], *((1,) if keep else ()), *shape[a + 1:])


class Evaluator:
    """Values of expressions of the jit functions of one module (memoised per context)."""

    def __init__(self, model: ModuleModel) -> None:
        self.model = model
        self.imports = model.imports
        self._flows: dict[str, FunctionFlow] = {}
        self._roots: dict[str, Ctx] = {}
        self._children: dict[tuple[int, int, str], Ctx] = {}
        self._memo: dict[tuple[int, int], Val] = {}
        self._provisional: dict[tuple[int, int], Val] = {}
        self._active: set[tuple[int, int, str, int | None]] = set()
        self._cuts = 0
        self._depth = 0

    # ---------------------------------------------------------------------------------------- contexts

    def flow(self, fn: JitFunction) -> FunctionFlow:
        if fn.name not in self._flows:
            self._flows[fn.name] = FunctionFlow(fn.node, lambda a: is_constexpr_annotation(self.imports, a))
        return self._flows[fn.name]

    def ctx(self, fn: JitFunction) -> Ctx:
        """``fn`` evaluated on its own (its assignments evaluated once, top to bottom, so long chains of
        assignments resolve one link at a time from the memo instead of in one deep recursion)."""
        if fn.name not in self._roots:
            ctx = self._roots[fn.name] = Ctx(fn, self.flow(fn), None)
            for d in sorted((d for defs in ctx.flow.defs.values() for d in defs), key=lambda d: d.pos):
                if d.kind == "assign":
                    self.eval(d.value, ctx)
        return self._roots[fn.name]

    def child(self, callee: JitFunction, call: ast.Call, caller: Ctx) -> Ctx | None:
        if caller.depth >= _MAX_INLINE:
            return None
        key = (id(call), id(caller), callee.name)
        if key not in self._children:
            bindings: dict[str, tuple[ast.expr, Ctx]] = {}
            for param, arg in zip(callee.params, call.args):
                if isinstance(arg, ast.Starred):
                    break
                bindings[param] = (arg, caller)
            for kw in call.keywords:
                if kw.arg in callee.params:
                    bindings[kw.arg] = (kw.value, caller)
            self._children[key] = Ctx(callee, self.flow(callee), bindings, caller.depth + 1)
        return self._children[key]

    # ------------------------------------------------------------------------------------------- values

    def eval(self, node: ast.AST | None, ctx: Ctx) -> Val:
        """The value of expression ``node`` in ``ctx`` (``CONST`` for ``None``)."""
        if node is None:
            return CONST
        key = (id(node), id(ctx))
        if key in self._memo:
            return self._memo[key]
        if key in self._provisional:
            return self._provisional[key]
        if self._depth >= _MAX_DEPTH:  # a very long chain of assignments: give up on it, conservatively
            return OPAQUE
        cuts = self._cuts
        self._depth += 1
        try:
            val = self._eval(node, ctx)
        finally:
            self._depth -= 1
        if self._cuts == cuts:
            self._memo[key] = val
        else:
            # Exact only for this query's stack of active definitions, but re-deriving it on every path
            # re-walks the loop-carried cycles exponentially (a 300-line kernel took minutes); kept for the
            # rest of the current top-level query, dropped when it returns.
            self._provisional[key] = val
        if self._depth == 0:
            self._provisional.clear()
        return val

    def _eval(self, node: ast.AST, ctx: Ctx) -> Val:
        if isinstance(node, ast.Constant):
            kind = {bool: "bool", int: "lit_int", float: "lit_float"}.get(type(node.value))
            return Val(dtype=kind, shape=())
        if isinstance(node, ast.Name):
            return self._name(node, ctx)
        if isinstance(node, ast.Attribute):
            return self._attribute(node, ctx)
        if isinstance(node, ast.Subscript):
            base = self.eval(node.value, ctx)
            return base.replace(shape=subscript_shape(base.shape, node.slice))
        if isinstance(node, ast.BinOp):
            return self._binop(self.eval(node.left, ctx), node.op, self.eval(node.right, ctx))
        if isinstance(node, ast.Compare):
            v = combine([self.eval(node.left, ctx), *(self.eval(c, ctx) for c in node.comparators)])
            return v.replace(compare=True, dtype="bool", tile=False)
        if isinstance(node, ast.BoolOp):
            return combine(self.eval(v, ctx) for v in node.values)
        if isinstance(node, ast.UnaryOp):
            v = self.eval(node.operand, ctx)
            return v.replace(dtype="bool") if isinstance(node.op, ast.Not) else v
        if isinstance(node, ast.IfExp):
            return join([self.eval(node.body, ctx), self.eval(node.orelse, ctx)])
        if isinstance(node, ast.Call):
            return self._call(node, ctx)
        if isinstance(node, (ast.Tuple, ast.List)):
            return join(self.eval(e, ctx) for e in node.elts).replace(shape=None)
        if isinstance(node, ast.NamedExpr):
            return self.eval(node.value, ctx)
        return OPAQUE

    def _binop(self, left: Val, op: ast.operator, right: Val) -> Val:
        v = combine([left, right])
        if v.bottom:
            return v
        if isinstance(op, (ast.Add, ast.Sub)):
            for rooted, shift in ((left, right), (right, left)):
                if rooted.roots and not shift.roots and shift.tile:
                    v = v.with_roots(tiled=True, looped=True if shift.loop else None, axes=shift.axes)
            return v.replace(tile=left.tile or right.tile)
        if isinstance(op, ast.Mult):
            def scales(x: Val) -> bool:  # a runtime factor that is not itself a position: a stride
                return x.runtime and not x.index

            return v.replace(tile=(left.tile and not scales(right)) or (right.tile and not scales(left)))
        if isinstance(op, (ast.FloorDiv, ast.Div, ast.RShift)):
            return v.replace(tile=left.tile)
        if isinstance(op, ast.Mod):
            wrapped = left.with_roots(wrapped=True).roots
            return v.replace(tile=left.tile, roots={**v.roots, **wrapped}, pid=v.pid and not right.const)
        return v.replace(tile=False)

    def _attribute(self, node: ast.Attribute, ctx: Ctx) -> Val:
        if self.imports.qualname(node) is not None:
            return Val(dtype=None, shape=())  # a module attribute: tl.float32, math.pi
        if node.attr in ("dtype", "shape", "element_ty", "type", "numel"):
            return Val(shape=())
        base = self.eval(node.value, ctx)
        if node.attr == "T":
            return base.replace(shape=base.shape[::-1] if base.shape is not None else None)
        return base

    # -------------------------------------------------------------------------------------------- names

    def _name(self, node: ast.Name, ctx: Ctx) -> Val:
        defs, complete = ctx.flow.reaching(node.id, node)
        vals = [self.def_value(d, ctx) for d in defs]
        if not complete:
            vals.append(self._entry(node.id, ctx))
        v = join(vals)
        if v.roots:
            walked = set().union(*(self._walked(d, node, ctx, v) for d in defs))
            if walked:
                v = v.replace(roots={k: r if k not in walked else Root(r.node, True, True, r.wrapped, r.axes)
                                     for k, r in v.roots.items()})
        return v

    def _walked(self, d: Def, use: ast.AST, ctx: Ctx, v: Val) -> set[int]:
        """The roots of ``v`` that ``d`` advances in a loop over a runtime range holding ``use``.

        ``ptrs += BLOCK_K * stride_k`` walks the ``tl.arange(0, BLOCK_K)`` dimension block by block;
        ``ptrs += stride_nnz`` moves to the next whole block of an outer dimension and walks none.
        """
        if not d.self_update:
            return set()
        around = {id(loop) for loop in ctx.flow.enclosing_loops(use)}
        if not any(id(loop) in around and self.runtime_loop(loop, ctx) for loop in d.loops):
            return set()
        tokens = _tokens(d.value, exclude=d.name)  # the step (aug) or the whole `x = x + step`
        return {k for k, r in v.roots.items() if _tokens(call_arg(r.node, 1, "end")) & tokens}

    def runtime_loop(self, loop: ast.stmt, ctx: Ctx) -> bool:
        """A ``while``, or a ``for`` whose range is not made of compile-time constants."""
        if isinstance(loop, ast.While):
            return True
        it = loop.iter
        if isinstance(it, ast.Call) and self._range_kind(it) == "static":
            return False
        return not (isinstance(it, ast.Call) and all(self.eval(a, ctx).const for a in it.args))

    def _range_kind(self, call: ast.Call) -> str | None:
        if self.imports.is_tl(call.func, "static_range"):
            return "static"
        if self.imports.is_tl(call.func, "range") or (isinstance(call.func, ast.Name) and call.func.id == "range"):
            return "range"
        return None

    def _entry(self, name: str, ctx: Ctx) -> Val:
        """The value a name has before any assignment in the function: a parameter, or a global."""
        fn = ctx.fn
        if name in fn.params:
            if ctx.bindings is not None:
                if name in ctx.bindings:
                    arg, caller = ctx.bindings[name]
                    return self.eval(arg, caller)
                return self.eval(fn.defaults.get(name), ctx) if name in fn.defaults else OPAQUE
            if name in fn.constexpr:
                return Val(shape=())
            if ctx.helper:
                return OPAQUE
            ann = next((a.annotation for a in fn.node.args.args if a.arg == name), None)
            return Val(const=False, runtime=True, params=frozenset({name}), shape=(),
                       int64=ann is not None and "int64" in ast.unparse(ann))
        if name in ctx.flow.defs:  # a local read before its first assignment
            return OPAQUE
        return Val(shape=())  # module constants, imports, builtins

    def def_value(self, d: Def, ctx: Ctx) -> Val:
        """The value assignment ``d`` gives its name in ``ctx`` (a cycle through loop-carried values is cut)."""
        key = (id(d.stmt), id(ctx), d.name, d.index)
        if key in self._active:
            self._cuts += 1
            return BOTTOM
        self._active.add(key)
        try:
            return self._assigned(d, ctx)
        finally:
            self._active.discard(key)

    def _assigned(self, d: Def, ctx: Ctx) -> Val:
        if d.kind == "assign":
            return self.eval(d.value, ctx)
        if d.kind == "const":
            return self.eval(d.value, ctx).replace(const=True, opaque=False, runtime=False)
        if d.kind == "unpack":
            return self.element(d.value, d.index or 0, ctx)
        if d.kind == "aug":
            st = d.stmt
            assert isinstance(st, ast.AugAssign)
            return self._binop(self.eval(st.target, ctx), st.op, self.eval(st.value, ctx))
        if d.kind == "for":
            it = d.value
            if isinstance(it, ast.Call) and self._range_kind(it) is not None:
                if self._range_kind(it) == "static":
                    return Val(dtype="int32", shape=())
                bounds = combine(self.eval(a, ctx) for a in it.args)
                if bounds.const:
                    return Val(dtype="int32", shape=())
                # a persistent loop (`range(pid, num_tiles, NUM_SMS)`) carries the program id into its counter
                return Val(const=False, runtime=True, index=True, loop=True, tile=True, dtype="int32", shape=(),
                           params=bounds.params, opaque=bounds.opaque, pid=bounds.pid, axes=bounds.axes,
                           int64=bounds.int64)
        return OPAQUE

    def element(self, value: ast.expr | None, index: int, ctx: Ctx) -> Val:
        """Element ``index`` of a tuple-valued expression (a tuple literal or a helper's returned tuple)."""
        if isinstance(value, (ast.Tuple, ast.List)) and index < len(value.elts):
            return self.eval(value.elts[index], ctx)
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            callee = self.model.jit_function(value.func.id)
            if callee is not None:
                return self._inline(callee, value, ctx, index)
        return self.eval(value, ctx).replace(shape=None)

    def _inline(self, callee: JitFunction, call: ast.Call, ctx: Ctx, index: int | None) -> Val:
        child = self.child(callee, call, ctx)
        if child is None:
            return combine(self.eval(a, ctx) for a in call.args).replace(opaque=True)
        rets = [r.value for r in ast.walk(callee.node) if isinstance(r, ast.Return) and r.value is not None]
        if not rets:
            return CONST
        if index is None:
            return join(self.eval(r, child) for r in rets)
        return join(self.element(r, index, child) for r in rets)

    # -------------------------------------------------------------------------------------------- calls

    def _call(self, node: ast.Call, ctx: Ctx) -> Val:
        f = node.func
        tl_name = self.imports.tl_name(f)
        if tl_name is not None:
            return self._tl_call(tl_name.split(".")[-1], node, ctx)
        if isinstance(f, ast.Name):
            callee = self.model.jit_function(f.id)
            if callee is not None:
                return self._inline(callee, node, ctx, None)
            if f.id not in self.imports.aliases and f.id not in ctx.flow.defs and f.id not in ctx.fn.params:
                return self._builtin(f.id, node, ctx)
        elif isinstance(f, ast.Attribute) and self.imports.qualname(f) is None:
            return self._method(f.attr, self.eval(f.value, ctx), node, ctx)
        args = [self.eval(a, ctx) for a in node.args] + [self.eval(k.value, ctx) for k in node.keywords]
        return combine(args) if args else CONST

    def _builtin(self, name: str, node: ast.Call, ctx: Ctx) -> Val:
        args = [self.eval(a, ctx) for a in node.args]
        if name == "min" and args:
            return self._clamp(args)
        if name in ("len", "range", "isinstance", "hasattr", "getattr"):
            return Val(shape=())
        return combine(args) if args else CONST

    @staticmethod
    def _clamp(args: list[Val]) -> Val:
        """``tl.minimum(offsets, bound)``: offsets stay below a bound that holds no offsets itself."""
        v = combine(args)
        with_roots = [a for a in args if a.roots]
        if len(with_roots) == 1 and len(args) > 1:
            v = v.replace(roots={**v.roots, **with_roots[0].with_roots(wrapped=True).roots})
        return v

    def _method(self, name: str, base: Val, node: ast.Call, ctx: Ctx) -> Val:
        if name == "to":
            kind = dtype_kind(self.imports, call_arg(node, 0, "dtype"))
            return base.replace(dtype=kind, int64=kind == "int64")
        if name == "trans":
            return base.replace(shape=base.shape[::-1] if base.shape is not None else None)
        if name in _REDUCTIONS:
            return base.replace(roots={}, shape=_reduced(base.shape, node, 0))
        if name in ("reshape", "view") and node.args:
            shape = self._shape_arg(node.args[0], ctx) if len(node.args) == 1 else None
            return base.replace(shape=shape)
        return base.replace(shape=None)

    def _tl_call(self, name: str, node: ast.Call, ctx: Ctx) -> Val:
        args = [self.eval(a, ctx) for a in node.args if not isinstance(a, ast.Starred)]
        if name in ("program_id", "num_programs"):
            axis = call_arg(node, 0, "axis")
            known = isinstance(axis, ast.Constant) and isinstance(axis.value, int)
            return Val(const=False, runtime=True, pid=name == "program_id", index=True, tile=True, shape=(),
                       dtype="int32", axes=frozenset({axis.value if known else -1}))
        if name == "arange":
            bounds = combine(args)
            start, end = call_arg(node, 0, "start"), call_arg(node, 1, "end")
            extent = self.extent(end, ctx) if isinstance(start, ast.Constant) and start.value == 0 else None
            return Val(roots={id(node): Root(node)}, const=False, shape=(extent,), dtype="int32",
                       params=bounds.params, opaque=bounds.opaque, runtime=bounds.runtime)
        if name == "load":
            ptr = self.eval(call_arg(node, 0, "pointer"), ctx)
            return Val(const=False, runtime=True, shape=ptr.shape, params=ptr.params, opaque=ptr.opaque)
        if name in _NO_VALUE:
            return OPAQUE
        if name in ("zeros", "full"):
            pos = 1 if name == "zeros" else 2
            return Val(const=False, shape=self._shape_arg(call_arg(node, 0, "shape"), ctx),
                       dtype=dtype_kind(self.imports, call_arg(node, pos, "dtype")))
        if name in ("zeros_like", "full_like"):
            return (args[0] if args else OPAQUE).replace(roots={}, const=False)
        if name == "dot":
            return self._dot(node, ctx)
        if name == "where":
            cond = args[0] if args else CONST
            v = combine(args)
            if cond.compare:
                inside = {k: r for a in args[1:] for k, r in a.with_roots(wrapped=True).roots.items()
                          if k in cond.roots}
                v = v.replace(roots={**v.roots, **inside})
            return v.replace(dtype=combine(args[1:]).dtype if len(args) > 1 else None)
        if name in ("minimum", "clamp"):
            return self._clamp(args)
        if name in _PASS_THROUGH:
            return args[0] if args else OPAQUE
        if name == "cast":
            kind = dtype_kind(self.imports, call_arg(node, 1, "dtype"))
            base = args[0] if args else OPAQUE
            return base.replace(dtype=kind, int64=kind == "int64")
        if name in _BLOCK_PTR:
            return Val(const=False, runtime=True, blockptr=True)
        if name in _REDUCTIONS:
            base = args[0] if args else OPAQUE
            return base.replace(roots={}, shape=_reduced(base.shape, node, 1))
        if name == "reshape" and args:
            return args[0].replace(shape=self._shape_arg(call_arg(node, 1, "shape"), ctx))
        if name == "trans":
            base = args[0] if args else OPAQUE
            return base.replace(shape=base.shape[::-1] if base.shape is not None else None)
        if name in _RESHAPES:
            return (args[0] if args else OPAQUE).replace(shape=None)
        if name == "constexpr":
            return Val(shape=())
        return combine(args) if args else CONST

    def _dot(self, node: ast.Call, ctx: Ctx) -> Val:
        a, b = self.eval(call_arg(node, 0, "input"), ctx), self.eval(call_arg(node, 1, "other"), ctx)
        acc_node = call_arg(node, 2, "acc")
        acc = self.eval(acc_node, ctx) if acc_node is not None else None
        out = dtype_kind(self.imports, next((k.value for k in node.keywords if k.arg == "out_dtype"), None))
        if out is None:
            if acc is not None and acc.dtype is not None:
                out = acc.dtype
            elif a.dtype in ("int8",) or b.dtype in ("int8",):
                out = "int32"
            else:
                out = "fp32"
        shape = None
        if a.shape is not None and b.shape is not None and len(a.shape) >= 2 and len(b.shape) >= 2:
            shape = (a.shape[-2], b.shape[-1])
        parts = [a, b] + ([acc] if acc is not None else [])
        return Val(const=False, runtime=any(p.runtime for p in parts), opaque=any(p.opaque for p in parts),
                   dtype=out, shape=shape, params=frozenset().union(*(p.params for p in parts)))

    def _shape_arg(self, node: ast.expr | None, ctx: Ctx) -> tuple[Extent, ...] | None:
        if isinstance(node, (ast.List, ast.Tuple)):
            return tuple(self.extent(e, ctx) for e in node.elts)
        return None

    def extent(self, node: ast.expr | None, ctx: Ctx) -> Extent:
        """A block size as a literal, or as the name of a ``tl.constexpr`` parameter of the kernel."""
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            defs, complete = ctx.flow.reaching(node.id, node)
            if defs:
                values = {self.extent(d.value, ctx) if d.kind in ("assign", "const") else None for d in defs}
                return values.pop() if len(values) == 1 and complete else None
            if ctx.bindings is not None and node.id in ctx.bindings:
                arg, caller = ctx.bindings[node.id]
                return self.extent(arg, caller)
            if node.id in ctx.fn.constexpr:
                return node.id
        return None
