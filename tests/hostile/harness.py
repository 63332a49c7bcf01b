"""The hostile-input harness: one declarative case -> exactly one class.

Classes (the issue's "Measure" criterion is 0 ``wrong``, 0 ``crash``, 0 ``unclear_error``):

- ``error``: TypeError/ValueError (or a NotImplementedError the op documents) whose message names the
  offending argument;
- ``unclear_error``: anything else raised, or such an error that does not name the argument;
- ``correct``: returned, every output passes the project's rule (:func:`kernelworks.check.compare.compare`)
  against the op's reference on float64-upcast inputs, NaN/inf exactly where the reference has them;
- ``documented``: returned, and the case's own assertion of the documented behaviour holds (e.g. an
  out-of-range slot skipped and its row zeroed); also an op that documents it cannot run here (fp8 GEMM
  under the interpreter) refusing with NotImplementedError;
- ``wrong``: returned something else (a silent wrong answer, an input modified, a guard element read into
  an output);
- ``crash``: the process died or hung (index cases run in a subprocess), or an out-of-bounds write landed
  in a guard buffer (memory corruption that would crash or corrupt a real program).

Memory safety on the CPU: a case with ``guard=True`` gets every tensor argument copied into the middle of
a larger buffer filled with a sentinel (NaN for floats, :data:`INT_SENTINEL` for integers); after the call
every element of the buffer outside the argument's own elements must still hold the sentinel.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

import kernelworks
from kernelworks.check.compare import bitwise_equal, compare
from kernelworks.check.engine import as_outputs, upcast
from kernelworks.runtime.alloc import poison_outputs
from kernelworks.spec import Tolerance, default_tolerance

CLASSES = ("error", "correct", "documented", "unclear_error", "wrong", "crash")
GOOD = ("error", "correct", "documented")

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
GUARD = 64
"""Sentinel elements on each side of a guarded tensor (an out-of-range index usually lands within a few
rows of its tensor; farther writes may still be caught by the subprocess dying)."""
INT_SENTINEL = -0x5A5A5A5


# ------------------------------------------------------------------------------------------------ model


@dataclass(frozen=True)
class Op:
    """A public op as the harness sees it.

    ``fn(**inputs)`` calls it; ``reference(**inputs)`` is the spec's ground truth (same outputs, same
    order); ``mutates`` names inputs the op updates in place by contract (their values are outputs, not
    checked for being unchanged); ``unsupported`` returns a reason when the op documents that it cannot run
    on this machine (it must then raise NotImplementedError for valid inputs).
    """

    name: str
    family: str
    fn: Callable[..., Any]
    reference: Callable[..., Any] | None
    tolerance: Callable[[torch.dtype], Tolerance] = default_tolerance
    mutates: tuple[str, ...] = ()
    unsupported: Callable[[], str | None] = lambda: None


@dataclass(frozen=True)
class Case:
    """One hostile input for one op.

    ``build()`` returns the keyword arguments (fresh tensors, created on the default device: the harness
    sets it); ``expect`` the acceptable class(es); ``arg`` the argument(s) an error must name; ``check``
    asserts a documented behaviour (``check(r)`` with ``r`` a :class:`Run`; raise AssertionError when it
    does not hold); ``validate`` the validation mode of the call; ``guard`` places every tensor in a
    sentinel-filled guard buffer; ``isolate`` runs the case in its family's subprocess (every index-value
    case: a real out-of-bounds access may kill the process).
    """

    op: str
    name: str
    build: Callable[[], dict[str, Any]]
    expect: str | tuple[str, ...]
    arg: str | tuple[str, ...] = ()
    check: Callable[[Run], None] | None = None
    validate: bool = True
    guard: bool = False
    isolate: bool = False

    @property
    def id(self) -> str:
        return f"{self.op}-{self.name}"

    @property
    def expected(self) -> tuple[str, ...]:
        return (self.expect,) if isinstance(self.expect, str) else tuple(self.expect)

    @property
    def args(self) -> tuple[str, ...]:
        return (self.arg,) if isinstance(self.arg, str) else tuple(self.arg)


@dataclass
class Run:
    """What a documented-behaviour check sees: the op, the inputs as given (values before the call), the
    outputs, and the inputs after the call (in-place updates)."""

    op: Op
    inputs: dict[str, Any]
    outs: tuple[Any, ...]
    after: dict[str, Any]

    def reference(self, **overrides: Any) -> tuple[torch.Tensor, ...]:
        """The reference on float64-upcast inputs (``overrides`` replace some, e.g. cleaned indices)."""
        return as_outputs(self.op.reference(**upcast({**self.inputs, **overrides})))

    def assert_matches(self, out: torch.Tensor, ref: torch.Tensor, what: str = "out") -> None:
        """``out`` passes the project's rule against ``ref`` (the float64 truth), no baseline."""
        tol = self.op.tolerance(case_dtype(self.inputs))
        c = compare(what, out, ref.to(out.dtype if out.dtype == torch.float64 else torch.float64), None, tol)
        assert c.passed, f"{what}: {c.problem}"


@dataclass
class Outcome:
    cls: str
    detail: str = ""
    extra: dict = field(default_factory=dict)


# ------------------------------------------------------------------------------------------- helpers


def case_dtype(inputs: Mapping[str, Any]) -> torch.dtype:
    """The dtype whose tolerance applies: the first floating tensor argument's."""
    for v in inputs.values():
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v.dtype
    return torch.float32


def seed_of(case_id: str) -> int:
    return zlib.crc32(case_id.encode())


def build_inputs(case: Case) -> dict[str, Any]:
    """``case.build()`` seeded by the case id, with tensors on :data:`DEVICE`: built under it, and the
    constants a table made at import (on the CPU) moved there; meta tensors stay meta."""
    torch.manual_seed(seed_of(case.id))
    with torch.device(DEVICE):
        inputs = case.build()
    return {k: v.to(DEVICE) if isinstance(v, torch.Tensor) and v.device.type == "cpu" else v
            for k, v in inputs.items()}


def names_arg(message: str, names: Sequence[str]) -> bool:
    """The message names one of ``names``: as a whole word in its head (the ``name:`` / ``a, b:`` prefix
    the project's errors start with), or anywhere as a whole word — except ``a``, an English word, which
    counts only in the head or quoted."""
    head = message.split(":", 1)[0] if ":" in message else ""
    for n in names:
        word = re.compile(rf"(?<![\w.-]){re.escape(n)}(?![\w-])")
        if word.search(head) or (n != "a" and word.search(message)) or f"'{n}'" in message:
            return True
    return False


_CALL_MISMATCH = re.compile(r"unexpected keyword argument|got multiple values for|missing \d+ required|"
                            r"takes \d+ positional|positional argument")


def classify_exception(e: BaseException, case: Case, op: Op) -> Outcome:
    msg = f"{type(e).__name__}: {e}"
    if isinstance(e, NotImplementedError) and op.unsupported() is not None:
        return Outcome("documented", f"unsupported here ({op.unsupported()}): {msg}")
    if isinstance(e, TypeError) and _CALL_MISMATCH.search(str(e)):  # Python's, not the op's: never "clear"
        return Outcome("unclear_error", f"{msg}  [a call-signature error, not a validation message]")
    if isinstance(e, (TypeError, ValueError, NotImplementedError)):
        if case.args and names_arg(str(e), case.args):
            return Outcome("error", msg)
        want = " or ".join(case.args) if case.args else "(no argument expected to be named)"
        return Outcome("unclear_error", f"{msg}  [does not name {want}]")
    return Outcome("unclear_error", msg)


# --------------------------------------------------------------------------------------------- guards


def _positions(t: torch.Tensor, offset: int) -> torch.Tensor:
    """Flat buffer positions of ``t``'s elements when laid out with its strides from ``offset``."""
    pos = torch.full(t.shape, offset, dtype=torch.int64, device=t.device)
    for d, (size, stride) in enumerate(zip(t.shape, t.stride())):
        shape = [1] * t.dim()
        shape[d] = size
        pos = pos + torch.arange(size, device=t.device).reshape(shape) * stride
    return pos


def _sentinel(dtype: torch.dtype) -> float | int:
    return float("nan") if dtype.is_floating_point else INT_SENTINEL


@dataclass
class Guarded:
    """A guard buffer: ``pristine`` is its content before the call, ``inside`` marks the tensor's own
    elements (which the op may legitimately update in place)."""

    name: str
    buf: torch.Tensor
    pristine: torch.Tensor
    inside: torch.Tensor

    def damage(self) -> str:
        """'' when every element outside the tensor is bit-for-bit as before the call."""
        size = self.buf.element_size()
        now = self.buf.view(torch.uint8).view(-1, size)
        was = self.pristine.view(torch.uint8).view(-1, size)
        bad = (now != was).any(dim=1) & ~self.inside
        if not bool(bad.any()):
            return ""
        where = bad.nonzero()[:4, 0].tolist()
        return f"out-of-bounds write into the guard of {self.name!r} at buffer positions {where}"


def guard_tensor(name: str, t: torch.Tensor) -> tuple[torch.Tensor, Guarded]:
    """A copy of ``t`` with the same shape and strides (stride 0 included) inside a sentinel-filled buffer."""
    span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride())) if t.numel() else 0
    fill_dtype = torch.float32 if t.dtype.is_floating_point else t.dtype  # fp8 has no full()
    buf = torch.full((span + 2 * GUARD,), _sentinel(t.dtype), dtype=fill_dtype, device=t.device).to(t.dtype)
    inside = torch.zeros(buf.shape, dtype=torch.bool, device=t.device)
    if t.numel():
        pos = _positions(t, GUARD).reshape(-1)
        buf[pos] = t.detach().reshape(-1)
        inside[pos] = True
    view = buf.as_strided(t.shape, t.stride(), GUARD)
    return view, Guarded(name, buf, buf.clone(), inside)


def guard_inputs(inputs: dict[str, Any]) -> tuple[dict[str, Any], list[Guarded]]:
    """Every (non-meta) tensor argument replaced by a guarded copy."""
    out, guards = dict(inputs), []
    for k, v in inputs.items():
        if isinstance(v, torch.Tensor) and v.device.type != "meta":
            out[k], g = guard_tensor(k, v)
            guards.append(g)
    return out, guards


# ----------------------------------------------------------------------------------------------- run


def _clone(v: Any) -> Any:
    return v.detach().clone() if isinstance(v, torch.Tensor) and v.device.type != "meta" else v


def _baseline(op: Op, inputs: dict[str, Any]) -> tuple[Any, ...] | None:
    try:
        return as_outputs(op.reference(**inputs))
    except Exception:  # a low-precision CPU kernel torch lacks: judge against the truth alone
        return None


def compare_outputs(op: Op, inputs: dict[str, Any], outs: tuple[Any, ...]) -> Outcome:
    """``correct`` when every output passes the project's rule against the float64 reference."""
    if op.reference is None:
        return Outcome("wrong", "returned, and the op has no reference for this input")
    try:
        ref = as_outputs(op.reference(**upcast(inputs)))
    except Exception as e:
        return Outcome("wrong", f"returned, but the reference refuses this input ({type(e).__name__}: {e})")
    base = _baseline(op, inputs)
    if len(outs) != len(ref):
        return Outcome("wrong", f"returned {len(outs)} output(s), the reference {len(ref)}")
    tol = op.tolerance(case_dtype(inputs))
    for i, (o, r) in enumerate(zip(outs, ref)):
        b = base[i] if base is not None and i < len(base) else None
        want = b.dtype if isinstance(b, torch.Tensor) else (r.dtype if r.dtype != torch.float64 else None)
        c = compare("out" if len(ref) == 1 else f"out[{i}]", o, r, b if isinstance(b, torch.Tensor) else None,
                    tol, expected_dtype=want)
        if not c.passed:
            return Outcome("wrong", f"{c.output}: {c.problem}")
    return Outcome("correct")


def run_case(case: Case, op: Op) -> Outcome:
    """Build, call and classify one case (in this process)."""
    try:
        inputs = build_inputs(case)
    except Exception as e:  # the case itself is broken: say so loudly (counts as unclear, never passes)
        return Outcome("unclear_error", f"the case's build raised {type(e).__name__}: {e}")
    snapshot = {k: _clone(v) for k, v in inputs.items()}
    guards: list[Guarded] = []
    call_inputs = inputs
    if case.guard:
        call_inputs, guards = guard_inputs(inputs)
    try:
        with kernelworks.validation(case.validate), poison_outputs():
            result = op.fn(**call_inputs)
            if DEVICE.type == "cuda":
                torch.cuda.synchronize()
    except Exception as e:
        damage = "; ".join(filter(None, (g.damage() for g in guards)))
        if damage:
            return Outcome("crash", damage)
        return classify_exception(e, case, op)
    damage = "; ".join(filter(None, (g.damage() for g in guards)))
    if damage:
        return Outcome("crash", damage)
    outs = as_outputs(result)
    after = {k: call_inputs[k] for k in op.mutates if k in call_inputs}
    for k, v in snapshot.items():
        if isinstance(v, torch.Tensor) and k not in op.mutates and not bitwise_equal(call_inputs[k].detach(), v):
            return Outcome("wrong", f"input {k!r} was modified")
    if op.unsupported() is not None:
        return Outcome("wrong", f"documented as unsupported here ({op.unsupported()}) but returned")
    if case.check is not None:
        try:
            case.check(Run(op, snapshot, outs, after))
        except AssertionError as e:
            return Outcome("wrong", f"documented behaviour does not hold: {e}")
        return Outcome("documented")
    return compare_outputs(op, snapshot, outs)


def expected_here(case: Case, op: Op) -> tuple[str, ...]:
    """The acceptable classes on this machine: an op documented as unsupported here refuses valid inputs
    with NotImplementedError (``documented``) where it would otherwise be ``correct``."""
    if op.unsupported() is None:
        return case.expected
    return tuple(dict.fromkeys("documented" if c == "correct" else c for c in case.expected))


def finite(t: torch.Tensor) -> bool:
    return bool(torch.isfinite(t).all())


def is_close_number(a: float, b: float, rel: float = 1e-4) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=rel)
