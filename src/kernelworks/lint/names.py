"""Import aliases: turn ``tl.load``, ``jit``, ``np.exp`` into canonical dotted names.

``import triton.language as tl`` makes ``tl.load`` read ``triton.language.load``; ``from triton import jit``
makes ``jit`` read ``triton.jit``. Names that no import binds (locals, builtins) resolve to ``None`` through
:meth:`Imports.qualname`, so a local variable ``x`` is never mistaken for a module.
"""

from __future__ import annotations

import ast
import re

# Where Triton defines things vs where users import them from: both spellings mean the same object.
_CANONICAL_PREFIXES = (
    ("triton.language.core.", "triton.language."),
    ("triton.language.standard.", "triton.language."),
    ("triton.language.semantic.", "triton.language."),
    ("triton.runtime.jit.", "triton."),
    ("triton.runtime.autotuner.", "triton."),
    ("triton.runtime.", "triton."),
)

TL = "triton.language."
"""Prefix of every ``triton.language`` name after canonicalisation."""


def canonical(name: str) -> str:
    """``triton.language.core.load`` → ``triton.language.load``; other names unchanged."""
    for prefix, repl in _CANONICAL_PREFIXES:
        if name.startswith(prefix):
            return repl + name[len(prefix):]
    return name


class Imports:
    """The import aliases of one module (imports anywhere in it, including inside functions)."""

    def __init__(self, tree: ast.AST) -> None:
        self.aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        self.aliases[top] = top
            elif isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                for a in node.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = f"{module}.{a.name}"

    def qualname(self, node: ast.AST) -> str | None:
        """Canonical dotted name of ``node`` when its leftmost name is an import, else ``None``."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        parts.append(self.aliases[node.id])
        return canonical(".".join(reversed(parts)))

    def is_tl(self, node: ast.AST, *names: str) -> bool:
        """Whether ``node`` names ``triton.language.<one of names>`` (``tl.math.exp`` is ``math.exp``)."""
        q = self.qualname(node)
        return q is not None and q.startswith(TL) and q[len(TL):] in names

    def tl_name(self, node: ast.AST) -> str | None:
        """``"load"`` for ``tl.load``, ``"math.exp"`` for ``tl.math.exp``; ``None`` if not triton.language."""
        q = self.qualname(node)
        if q is not None and q.startswith(TL):
            return q[len(TL):]
        return None


_DTYPES = {
    "float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64",
    "int8": "int8", "uint8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint16": "int16", "uint32": "int32", "uint64": "int64", "int1": "bool",
    "float8e4nv": "fp8", "float8e5": "fp8", "float8e4b15": "fp8", "float8e4b8": "fp8", "float8e5b16": "fp8",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
}
"""Triton dtype names → the short kinds the rules reason with."""

LOW_FLOATS = frozenset({"fp16", "bf16", "fp8"})
INTS = frozenset({"int8", "int16", "int32", "int64", "bool", "lit_int"})
EIGHT_BIT = frozenset({"int8", "fp8"})


def dtype_kind(imports: Imports, node: ast.AST | None) -> str | None:
    """``"fp16"`` for ``tl.float16`` (or the string ``"fp16"``/``"float16"``), ``None`` when unknown."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        name = node.value.replace("fp", "float").replace("bf16", "bfloat16")
        return _DTYPES.get(name)
    name = imports.tl_name(node)
    if name is None and isinstance(node, ast.Attribute):
        name = node.attr if imports.qualname(node) is None else None
    return _DTYPES.get(name) if name else None


SIZE_NAME = re.compile(r"^(n|N|M|K|D|L|T|H|E|V|S)$|^n_|^num_|cols|rows|size|dim|len|hidden|numel|elem|width|count",
                       re.IGNORECASE)
"""Parameter names that read as a runtime size (``n_cols``, ``N``, ``seq_len``, ``n_elements``)."""
STRIDE_NAME = re.compile(r"stride|^s_|_s$|^s[0-9]$|^ld[a-z]?$|^ld_|pitch", re.IGNORECASE)
"""Parameter names that read as a stride (``stride_xm``, ``s_x``, ``lda``)."""
POINTER_NAME = re.compile(r"ptr|^p_|_p$", re.IGNORECASE)


def is_stride(param: str) -> bool:
    """A parameter named like a stride (and not like a pointer: ``s_ptr`` is a pointer)."""
    return bool(STRIDE_NAME.search(param)) and not POINTER_NAME.search(param)
