"""What a launcher's argument says about a tensor's layout: made contiguous, or visibly a strided view.

Host code is read statically, as far as simple assignments go (``x = x.contiguous()``,
``a, b = a.contiguous(), b.contiguous()``, ``gate, up = x.chunk(2, dim=-1)``). Unknown tensors (a parameter
of the launcher) are neither: the rules stay with what the kernel itself shows.
"""

from __future__ import annotations

import ast

from kernelworks.lint.model import ModuleModel

_MAX_DEPTH = 6

_FRESH = frozenset({"empty", "zeros", "ones", "full", "rand", "randn", "randint", "arange", "tensor", "new_empty",
                    "new_zeros", "new_ones", "new_full", "new_tensor", "contiguous"})
"""Calls that return a freshly allocated row-major tensor (``torch.empty(...)``, ``x.new_zeros(...)``) or a
contiguous one (``x.contiguous()``)."""
_LIKE = frozenset({"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like"})
"""``torch.empty_like(x)`` keeps the strides of a dense ``x``: contiguous when ``x`` is."""
_SAME_LAYOUT = frozenset({"view", "reshape", "view_as", "reshape_as", "flatten", "to", "float", "half", "bfloat16",
                          "clone", "detach", "unsqueeze", "squeeze", "requires_grad_", "type_as"})
"""Methods that keep a contiguous tensor contiguous."""
_VIEWS = frozenset({"t", "transpose", "permute", "swapaxes", "swapdims", "movedim", "expand", "expand_as",
                    "diagonal", "unfold", "as_strided"})
"""Methods that return a strided view (not row-major contiguous in general)."""
_SPLITS = frozenset({"chunk", "split", "unbind", "tensor_split", "narrow"})


def _unpacked(model: ModuleModel, name: str, host: ast.AST, before: ast.AST) -> ast.expr | None:
    """The value ``name`` last got before ``before`` in ``host`` (the function first, then the module): the
    right-hand side of ``name = ...``, the element of ``a, name = x, y``, or the call of ``a, name = f(...)``."""
    line = getattr(before, "lineno", 1 << 30)
    for scope in (host, model.tree) if host is not model.tree else (model.tree,):
        best: tuple[int, ast.expr] | None = None
        for node in ast.walk(scope):
            if not (isinstance(node, ast.Assign) and node.lineno < line and len(node.targets) == 1):
                continue
            target, value = node.targets[0], node.value
            found: ast.expr | None = None
            if isinstance(target, ast.Name) and target.id == name:
                found = value
            elif isinstance(target, (ast.Tuple, ast.List)):
                names = [e.id if isinstance(e, ast.Name) else None for e in target.elts]
                if name in names:
                    i = names.index(name)
                    if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(names):
                        found = value.elts[i]
                    else:
                        found = value  # an element of a call's result: `gate, up = x.chunk(2, -1)`
            if found is not None and (best is None or node.lineno > best[0]):
                best = (node.lineno, found)
        if best is not None:
            return best[1]
    return None


def _method(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        return expr.func.attr
    return None


def contiguous(model: ModuleModel, expr: ast.expr, host: ast.AST, at: ast.AST, depth: int = 0) -> bool:
    """Whether a launcher's argument is visibly a contiguous tensor."""
    if depth > _MAX_DEPTH:
        return False
    if isinstance(expr, ast.Name):
        value = _unpacked(model, expr.id, host, at)
        return value is not None and contiguous(model, value, host, at, depth + 1)
    name = _method(expr)
    if name is None:
        return False
    assert isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)
    if name in _FRESH:
        return True
    if any(k.arg == "memory_format" and "contiguous_format" in ast.unparse(k.value) for k in expr.keywords):
        return True
    if name in _LIKE and expr.args:
        return contiguous(model, expr.args[0], host, at, depth + 1)
    if name in _SAME_LAYOUT:
        return contiguous(model, expr.func.value, host, at, depth + 1)
    return False


def strided_view(model: ModuleModel, expr: ast.expr, host: ast.AST, at: ast.AST, depth: int = 0) -> ast.expr | None:
    """The host expression that makes a launcher's argument a strided view (``q.transpose(1, 2)``,
    ``x[:, :d]``, ``gate_up.chunk(2, dim=-1)``, ``w.T``), or ``None`` when it is not visibly one."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(expr, ast.Name):
        value = _unpacked(model, expr.id, host, at)
        return None if value is None else strided_view(model, value, host, at, depth + 1)
    if isinstance(expr, ast.Attribute) and expr.attr in ("T", "mT", "mH", "H"):
        return expr
    if isinstance(expr, ast.Subscript):
        items = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
        for item in items[1:]:  # a slice or an index past the leading dimension
            if isinstance(item, ast.Slice) and item.lower is None and item.upper is None and item.step is None:
                continue
            if isinstance(item, ast.Constant) and item.value in (None, Ellipsis):
                continue
            return expr
        return None
    name = _method(expr)
    if name in _VIEWS:
        return expr
    if name in _SPLITS:
        assert isinstance(expr, ast.Call)
        dim = expr.args[1] if len(expr.args) > 1 and name != "narrow" else None
        dim = expr.args[0] if name == "narrow" and expr.args else dim
        dim = next((k.value for k in expr.keywords if k.arg == "dim"), dim)
        if dim is None or (isinstance(dim, ast.Constant) and dim.value == 0):
            return None  # along the leading dimension: the pieces stay contiguous
        return expr
    return None
