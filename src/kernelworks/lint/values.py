"""The abstract value of a kernel expression (:class:`Val`) and how values combine.

A :class:`Val` records what the rules need to know about where a value comes from, not what it is:
the ``tl.arange`` calls it is built on (:class:`Root`, each marked *tiled* when a program id or a loop over a
runtime range shifts it, *wrapped* when ``%``/``tl.minimum``/``tl.where`` keep it in bounds), whether it
depends on a program id, on a runtime argument, or only on compile-time constants, whether it holds a
comparison (a mask), whether it was cast to int64, and its visible dtype and shape.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

Extent = int | str | None
"""One dimension of a block: a literal size, the name of a ``tl.constexpr`` parameter, or unknown."""
Shape = tuple[Extent, ...] | None


@dataclass(frozen=True)
class Root:
    """A ``tl.arange`` call an offset is built on."""

    node: ast.Call
    tiled: bool = False
    """Shifted by a program id or a runtime loop: the block moves over a dimension."""
    looped: bool = False
    """Shifted by the counter of a loop over a runtime range (or a pointer advanced in one)."""
    wrapped: bool = False
    """Kept in range by ``%``, ``tl.minimum`` or a ``tl.where`` on a comparison of itself."""
    axes: frozenset[int] = frozenset()
    """The program-id axes that shift it (-1: an axis that is not a literal)."""

    @property
    def sig(self) -> str:
        """The arange's arguments as text: two separate ``tl.arange(0, BLOCK)`` calls share it."""
        return ",".join(ast.unparse(a) for a in self.node.args)


@dataclass(frozen=True)
class Val:
    """What is known about a value; see the module docstring."""

    roots: dict[int, Root] = field(default_factory=dict)
    const: bool = True
    """Only literals, ``tl.constexpr`` values and static loop counters went into it."""
    runtime: bool = False
    """Depends on a runtime argument, a load, or a program id."""
    opaque: bool = False
    """Depends on something the analysis cannot see (a helper's parameter, an unknown call)."""
    pid: bool = False
    """Grows with a program id (``pid % CONST`` does not: it stays below a constant)."""
    axes: frozenset[int] = frozenset()
    """The program-id axes it depends on (-1 for an axis that is not a literal)."""
    index: bool = False
    """Depends on a program id or on the counter of a loop over a runtime range."""
    loop: bool = False
    """Depends on the counter of a loop over a runtime range."""
    tile: bool = False
    """A scalar position of a block (``pid * BLOCK``, a loop counter) not scaled by a runtime stride."""
    compare: bool = False
    int64: bool = False
    blockptr: bool = False
    dtype: str | None = None
    shape: Shape = None
    params: frozenset[str] = frozenset()
    """The runtime (non-constexpr) parameters of the analysed kernel this value depends on."""
    bottom: bool = False
    """No information yet (a cycle was cut): neutral in every join."""

    def replace(self, **changes) -> Val:
        return dataclasses.replace(self, **changes)

    def with_roots(self, *, tiled: bool | None = None, looped: bool | None = None,
                   wrapped: bool | None = None, axes: frozenset[int] = frozenset()) -> Val:
        """The same value with every root marked tiled, looped and/or wrapped, and shifted along ``axes``."""
        roots = {k: dataclasses.replace(r, tiled=r.tiled if tiled is None else tiled,
                                        looped=r.looped if looped is None else looped,
                                        wrapped=r.wrapped if wrapped is None else wrapped,
                                        axes=r.axes | axes)
                 for k, r in self.roots.items()}
        return self.replace(roots=roots)

    @property
    def known_runtime(self) -> bool:
        """Visibly not a compile-time constant (and not of unknown origin)."""
        return not self.const and not self.opaque


BOTTOM = Val(bottom=True)
CONST = Val()
OPAQUE = Val(const=False, opaque=True)


def _merge_roots(vals: list[Val]) -> dict[int, Root]:
    roots: dict[int, Root] = {}
    for v in vals:
        for k, r in v.roots.items():
            if k in roots:
                old = roots[k]
                roots[k] = Root(r.node, old.tiled or r.tiled, old.looped or r.looped, old.wrapped and r.wrapped,
                                old.axes | r.axes)
            else:
                roots[k] = r
    return roots


def _flags(vals: list[Val]) -> dict[str, object]:
    return {
        "roots": _merge_roots(vals),
        "const": all(v.const for v in vals),
        "runtime": any(v.runtime for v in vals),
        "opaque": any(v.opaque for v in vals),
        "pid": any(v.pid for v in vals),
        "axes": frozenset().union(*(v.axes for v in vals)),
        "index": any(v.index for v in vals),
        "loop": any(v.loop for v in vals),
        "tile": any(v.tile for v in vals),
        "compare": any(v.compare for v in vals),
        "blockptr": any(v.blockptr for v in vals),
        "params": frozenset().union(*(v.params for v in vals)),
    }


def join(values: Iterable[Val]) -> Val:
    """The value of a name that one of several assignments set (``if``/``else``, loop-carried)."""
    vals = [v for v in values if not v.bottom]
    if not vals:
        return BOTTOM
    dtypes = {v.dtype for v in vals}
    shapes = {v.shape for v in vals}
    return Val(**_flags(vals), int64=all(v.int64 for v in vals),
               dtype=dtypes.pop() if len(dtypes) == 1 else None,
               shape=shapes.pop() if len(shapes) == 1 else None)


def combine(values: Iterable[Val]) -> Val:
    """The value of an operation on several operands: dtypes promote, shapes broadcast."""
    vals = [v for v in values if not v.bottom]
    if not vals:
        return BOTTOM
    dtype = vals[0].dtype
    shape = vals[0].shape
    for v in vals[1:]:
        dtype = promote(dtype, v.dtype)
        shape = broadcast(shape, v.shape)
    return Val(**_flags(vals), int64=any(v.int64 for v in vals), dtype=dtype, shape=shape)


_FLOAT_RANK = {"fp8": 0, "fp16": 1, "bf16": 1, "fp32": 2, "fp64": 3}
_INT_RANK = {"bool": 0, "int8": 1, "int16": 2, "int32": 3, "int64": 4}


def promote(a: str | None, b: str | None) -> str | None:
    """Triton's type promotion, as far as the rules need it (literals are weak, like Python scalars)."""
    if a is None or b is None:
        other = a or b
        return other if other in ("fp32", "fp64") else None
    if a == b:
        return a
    for x, y in ((a, b), (b, a)):
        if x == "lit_int":
            return y
        if x == "lit_float":
            return "fp32" if y in _INT_RANK or y == "lit_int" else y
    if a in _FLOAT_RANK and b in _FLOAT_RANK:
        if _FLOAT_RANK[a] == _FLOAT_RANK[b]:
            return "fp32"  # fp16 with bf16
        return a if _FLOAT_RANK[a] > _FLOAT_RANK[b] else b
    if a in _FLOAT_RANK or b in _FLOAT_RANK:
        return a if a in _FLOAT_RANK else b
    return a if _INT_RANK.get(a, 0) >= _INT_RANK.get(b, 0) else b


def broadcast(a: Shape, b: Shape) -> Shape:
    """NumPy-style broadcast of two block shapes; unknown dimensions stay unknown."""
    if a is None or b is None:
        return None
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + a
    b = (1,) * (n - len(b)) + b
    out: list[Extent] = []
    for x, y in zip(a, b):
        if x == 1:
            out.append(y)
        elif y == 1 or x == y:
            out.append(x)
        else:
            out.append(None)
    return tuple(out)


def subscript_shape(shape: Shape, index: ast.expr) -> Shape:
    """Shape after ``x[:, None]``-style indexing (``None`` adds a dimension of 1, ``:`` keeps one)."""
    if shape is None:
        return None
    items = index.elts if isinstance(index, ast.Tuple) else [index]
    out: list[Extent] = []
    i = 0
    for item in items:
        if isinstance(item, ast.Constant) and item.value is None:
            out.append(1)
        elif isinstance(item, ast.Slice) and item.lower is None and item.upper is None and i < len(shape):
            out.append(shape[i])
            i += 1
        else:
            return None
    return (*out, *shape[i:])
