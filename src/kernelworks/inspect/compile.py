"""Ahead-of-time compile of a Triton kernel for a chosen GPU target, on any machine (no GPU, no driver).

A kernel reaches us as a ``JITFunction`` (GPU machines) or, where ``import kernelworks`` turned Triton's
interpreter on, as an ``InterpretedFunction``; both keep the plain Python function in ``.fn``. The argument
types and ``tt.divisibility`` hints come from the same native routine Triton's launcher uses
(:func:`specialize`), and the kernel goes through
``triton.compile(ASTSource(...), target=GPUTarget("cuda", arch, 32))``.

Where Triton runs as the interpreter, the compile itself happens in a worker process that imports Triton
and the kernel's module afresh with ``TRITON_INTERPRET=0`` (:mod:`kernelworks.inspect.worker`): in the
interpreter process ``tl.max``, ``tl.sum`` and every other ``@jit`` function of ``triton.language`` are
interpreted too, and each interpreted kernel run leaves parts of ``triton.language`` patched with the
interpreter's builders (triton 3.6), so the code generator cannot run there. Compiled kernels land in
Triton's usual cache directory either way, so inspecting the same kernel again is a cache hit.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import triton
import triton.language as tl
from triton._C.libtriton import native_specialize_impl
from triton._utils import find_paths_if, get_iterable_path
from triton.compiler import ASTSource
from triton.compiler.compiler import make_backend
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

from kernelworks.inspect.targets import Target

DIVISIBILITY = [["tt.divisibility", 16]]
"""The one specialization attribute Triton's CUDA launcher passes: the value (or address) divides by 16."""

_AS_JIT: weakref.WeakKeyDictionary[InterpretedFunction, JITFunction] = weakref.WeakKeyDictionary()


def as_jit(kernel: Any) -> JITFunction:
    """A compilable ``JITFunction`` for ``kernel``: itself when it is one, else one built from its ``.fn``
    with the same decorator options (``do_not_specialize``, ``noinline``…); cached per interpreted kernel."""
    if isinstance(kernel, JITFunction):
        return kernel
    if isinstance(kernel, InterpretedFunction):
        jit = _AS_JIT.get(kernel)
        if jit is None:
            jit = _AS_JIT[kernel] = JITFunction(kernel.fn, **kernel.kwargs)
        return jit
    fn = getattr(kernel, "fn", None)  # Autotuner / Heuristics wrap the kernel in .fn
    if fn is not None and fn is not kernel:
        return as_jit(fn)
    if callable(kernel):
        return JITFunction(kernel)
    raise TypeError(f"kernel: expected a @triton.jit function, got {type(kernel).__name__}")


# ------------------------------------------------------------------------------------------ specialization


@dataclass(frozen=True)
class Specialization:
    """What ``ASTSource`` takes: every parameter's type (``"*bf16"``, ``"i32"``, ``"constexpr"``), the
    constexpr values by parameter path, and the ``tt.divisibility`` attributes by parameter path."""

    signature: dict[str, str]
    constexprs: dict[tuple[int, ...], Any]
    attrs: dict[tuple[int, ...], list]

    def constexpr_values(self) -> dict[str, Any]:
        """Constexpr values by parameter name (top-level parameters)."""
        names = list(self.signature)
        return {names[p[0]]: v for p, v in self.constexprs.items() if len(p) == 1}

    def divisible(self) -> tuple[str, ...]:
        """Names of the parameters carrying the divisibility-by-16 hint."""
        names = list(self.signature)
        return tuple(names[p[0]] for p, a in self.attrs.items() if a and len(p) == 1)


def specialize(kernel: Any, args: Mapping[str, Any], target: Target) -> Specialization:
    """Types and hints for a launch with these argument values, derived exactly as Triton's launcher does:
    tensors become ``*<dtype>`` pointers, 16-byte aligned ones with the divisibility hint; ints are ``i32``
    (``i64`` past 2^31), divisible by 16 → hinted, equal to 1 → constexpr; floats ``fp32``.
    ``args`` holds every parameter by name (defaults applied)."""
    jit = as_jit(kernel)
    backend = make_backend(target.triton_target())
    values, spec = [], []
    for kp in jit.params:
        if kp.name not in args:
            raise ValueError(f"{jit.fn.__name__}: no value for parameter {kp.name!r}")
        value = args[kp.name]
        values.append(value)
        if kp.is_constexpr:
            spec.append(("constexpr", value))
            continue
        ret = native_specialize_impl(backend, value, kp.is_const, not kp.do_not_specialize,
                                     not kp.do_not_specialize_on_alignment)
        annotated = kp.annotation_type
        if annotated:
            skip = kp.do_not_specialize or annotated == "u1" or annotated[:2] in ("fp", "bf")
            spec.append((annotated, None) if skip else (annotated, *ret[1:]))
        else:
            spec.append(ret)
    types = [s[0] for s in spec]
    hints = [s[1] for s in spec]
    signature = {kp.name: t for kp, t in zip(jit.params, types)}
    constexprs = {p: get_iterable_path(values, p) for p in find_paths_if(types, lambda _, t: t == "constexpr")}
    attrs = {p: backend.parse_attr(get_iterable_path(hints, p))
             for p in find_paths_if(hints, lambda _, h: isinstance(h, str))}
    return Specialization(signature, constexprs, attrs)


_TYPE_RE = re.compile(r"^\*?k?(fp8e4nv|fp8e5|fp8e4b15|fp16|bf16|fp32|fp64|i1|u1|i8|u8|i16|u16|i32|u32|i64|u64)$")


def parse_signature(kernel: Any, signature: str | Mapping[str, str], constexprs: Mapping[str, Any] | None = None,
                    ) -> Specialization:
    """A :class:`Specialization` from types written by hand: ``"x_ptr=*fp16,y_ptr=*fp16,n=i32:16"``.

    Pointers carry the divisibility hint unless written ``*fp16:1`` (the launcher gives it to every
    16-byte-aligned tensor, which a fresh torch allocation is); scalars carry it only when written ``:16``.
    Constexpr parameters take their value from ``constexprs``, else their default.
    """
    jit = as_jit(kernel)
    if isinstance(signature, str):
        pairs = [p.split("=", 1) for p in signature.replace(" ", "").split(",") if p]
        if any(len(p) != 2 for p in pairs):
            raise ValueError(f"signature: expected NAME=TYPE[,NAME=TYPE...], got {signature!r}")
        given = dict(pairs)
    else:
        given = dict(signature)
    constexprs = dict(constexprs or {})
    names = [kp.name for kp in jit.params]
    unknown = sorted((set(given) | set(constexprs)) - set(names))
    if unknown:
        raise ValueError(f"{jit.fn.__name__}: no parameter named {unknown}; its parameters are {names}")
    sig: dict[str, str] = {}
    consts: dict[tuple[int, ...], Any] = {}
    attrs: dict[tuple[int, ...], list] = {}
    for i, kp in enumerate(jit.params):
        if kp.is_constexpr or (kp.name in constexprs and kp.name not in given):
            if kp.name in constexprs:
                consts[(i,)] = constexprs[kp.name]
            elif kp.has_default:
                consts[(i,)] = kp.default
            else:
                raise ValueError(f"{jit.fn.__name__}: constexpr {kp.name!r} needs a value (--constexpr "
                                 f"{kp.name}=VALUE)")
            sig[kp.name] = "constexpr"
            continue
        if kp.name not in given:
            raise ValueError(f"{jit.fn.__name__}: parameter {kp.name!r} has no type in the signature")
        ty, _, hint = given[kp.name].partition(":")
        if not _TYPE_RE.match(ty):
            raise ValueError(f"signature: {kp.name}={given[kp.name]!r} is not a Triton type "
                             "(e.g. *fp16, *bf16, *fp32, i32, i64, fp32)")
        sig[kp.name] = ty
        if hint not in ("", "1", "16"):
            raise ValueError(f"signature: {kp.name}: divisibility must be 1 or 16, got {hint!r}")
        if hint == "16" or (ty.startswith("*") and hint == ""):
            attrs[(i,)] = DIVISIBILITY
    return Specialization(sig, consts, attrs)


# ------------------------------------------------------------------------------------------------- compile


@dataclass(frozen=True)
class Compiled:
    """What a compile yields that the report needs (plain data: it crosses from the worker process)."""

    name: str
    num_warps: int
    num_stages: int
    shared_bytes: int
    cubin: bytes
    ptx: str


def compile_here(kernel: Any, spec: Specialization, target: Target,
                 options: Mapping[str, Any] | None = None) -> Compiled:
    """``triton.compile`` in this process (only where Triton is not the interpreter: see the module doc)."""
    src = ASTSource(as_jit(kernel), spec.signature, spec.constexprs, spec.attrs)
    kernel = triton.compile(src, target=target.triton_target(), options=dict(options or {}))
    meta = kernel.metadata
    return Compiled(meta.name, meta.num_warps, meta.num_stages, int(meta.shared), kernel.asm["cubin"],
                    kernel.asm.get("ptx", ""))


def triton_is_interpreted() -> bool:
    """True when ``triton.language``'s own ``@jit`` functions were built for the interpreter."""
    return isinstance(tl.standard.sum, InterpretedFunction)


def compile_for(kernel: Any, spec: Specialization, target: Target,
                options: Mapping[str, Any] | None = None) -> Compiled:
    """Compile ``kernel`` for ``target`` with launch ``options`` (``num_warps``, ``num_stages``,
    ``maxnreg``…): here when Triton can compile in this process, else in the worker process."""
    if isinstance(kernel, JITFunction) and not triton_is_interpreted():
        return compile_here(kernel, spec, target, options)
    from kernelworks.inspect.worker import compile_in_worker

    return compile_in_worker(kernel, spec, target, options)


def launch_options() -> frozenset[str]:
    """Names Triton accepts as launch options for CUDA (the rest of a launch's keywords are parameters)."""
    from triton.backends.nvidia.compiler import CUDAOptions

    return frozenset(CUDAOptions.__dataclass_fields__)


_DOT_RE = re.compile(r"\btl\.dot(?:_scaled)?\s*\(|\.dot\s*\(")


def uses_dot(kernel: Any, _depth: int = 0) -> bool:
    """True when the kernel's source (or a ``@triton.jit`` helper it calls by name) has a ``tl.dot``."""
    jit = as_jit(kernel)
    src = jit.src
    if _DOT_RE.search(src):
        return True
    if _depth >= 3:
        return False
    for name, value in jit.fn.__globals__.items():
        if isinstance(value, JITFunction | InterpretedFunction) and value is not kernel \
                and re.search(rf"\b{re.escape(name)}\s*\(", src) and uses_dot(value, _depth + 1):
            return True
    return False
