"""Case generators shared by every family: one definition of "wrong dtype", "a strided view", "NaN planted",
so each family's table says only what is particular to its op.

A *base* is a zero-argument function returning valid keyword arguments for the op; the generators derive
hostile variants from it (``with_arg``) and name them ``<arg>-<variant>`` (the pytest id is
``<op>-<arg>-<variant>``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from kernelworks.spec import registry

from .harness import Case, Op, Run

Base = Callable[[], dict[str, Any]]

ERROR = "error"
CORRECT = "correct"
DOCUMENTED = "documented"


def with_arg(base: Base, name: str, fn: Callable[[Any, dict[str, Any]], Any]) -> Base:
    """``base`` with ``inputs[name] = fn(inputs[name], inputs)`` (``fn`` may return None to drop it)."""
    def build() -> dict[str, Any]:
        inputs = base()
        value = fn(inputs.get(name), inputs)
        if value is None:
            inputs.pop(name, None)
        else:
            inputs[name] = value
        return inputs
    return build


def with_kwargs(base: Base, **kwargs: Any) -> Base:
    """``base`` with plain options replaced (or added)."""
    def build() -> dict[str, Any]:
        return {**base(), **kwargs}
    return build


# ------------------------------------------------------------------------------------------- layouts


def layout(t: torch.Tensor, kind: str) -> torch.Tensor:
    """A view with ``t``'s values (``expanded``: its first slice repeated) and another memory layout.

    ``strided``: every other element of the last dimension (``wide[..., ::2]``); ``column``: the leading
    columns of a wider tensor (row stride > row length; for 1-D, a column of a 2-D tensor, stride > 1);
    ``rows``: every other leading row (``big[::2]``); ``transposed``: column-major (``.t()`` of a copy);
    ``expanded``: stride 0 along the first dimension (``t[:1].expand(...)``).
    """
    if kind == "strided":
        wide = torch.zeros((*t.shape[:-1], 2 * t.shape[-1]), dtype=t.dtype, device=t.device)
        wide[..., ::2] = t
        return wide[..., ::2]
    if kind == "column":
        if t.dim() == 1:
            wide = torch.zeros((t.shape[0], 3), dtype=t.dtype, device=t.device)
            wide[:, 1] = t
            return wide[:, 1]
        wide = torch.zeros((*t.shape[:-1], t.shape[-1] + 5), dtype=t.dtype, device=t.device)
        wide[..., : t.shape[-1]] = t
        return wide[..., : t.shape[-1]]
    if kind == "rows":
        big = torch.zeros((2 * t.shape[0], *t.shape[1:]), dtype=t.dtype, device=t.device)
        big[::2] = t
        return big[::2]
    if kind == "transposed":
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if kind == "expanded":
        return t[:1].expand(t.shape)
    raise ValueError(kind)


LAYOUTS_1D = ("strided", "column", "expanded")
LAYOUTS_ND = ("strided", "column", "rows", "transposed", "expanded")


# --------------------------------------------------------------------------------------------- cases


def tensor_cases(op: str, arg: str, base: Base, *, layouts: Iterable[str] | None = None,
                 layout_expect: Mapping[str, Any] | None = None, rank_expect: Any = ERROR,
                 empty_expect: Any = ERROR, empty_dim: int = 0, list_expect: Any = ERROR,
                 dtypes: Iterable[torch.dtype] = (),
                 check: Callable[[Run], None] | None = None, isolate: bool = False) -> list[Case]:
    """The structural hostile inputs of one tensor argument.

    Wrong dtype (float64 and int32 for float arguments, float32 and int16 for index arguments, plus
    ``dtypes``), a meta tensor (no CUDA stand-in exists here), not a tensor (a list), one more dimension,
    empty (size 0 along ``empty_dim``), and each layout view. Expectations are ``error`` naming ``arg``
    (``correct`` for layouts) unless the ``*_expect`` arguments say otherwise: a class, a tuple of classes,
    or :class:`Err` for an error naming another argument. ``check`` judges the layout cases expected
    ``documented`` (outputs only a documented rule defines)."""
    def probe() -> torch.Tensor:
        with torch.device("cpu"):
            torch.manual_seed(0)
            return base()[arg]

    t0 = probe()
    index = not t0.is_floating_point()
    wrong = (torch.float32, torch.int16) if index else (torch.float64, torch.int32)
    out: list[Case] = []
    for dt in (*wrong, *dtypes):
        out.append(Case(op, f"{arg}-{_short(dt)}", with_arg(base, arg, lambda t, _i, dt=dt: t.to(dt)),
                        ERROR, arg, isolate=isolate))
    out += [
        Case(op, f"{arg}-meta", with_arg(base, arg, lambda t, _i: torch.empty(t.shape, dtype=t.dtype,
                                                                             device="meta")), ERROR, arg),
        Case(op, f"{arg}-list", with_arg(base, arg, lambda t, _i: t.tolist()), _exp(list_expect),
             _arg(list_expect, arg), isolate=isolate),
        Case(op, f"{arg}-rank_plus_1", with_arg(base, arg, lambda t, _i: t.unsqueeze(0)), _exp(rank_expect),
             _arg(rank_expect, arg), isolate=isolate),
        Case(op, f"{arg}-empty", with_arg(base, arg, lambda t, _i: t.narrow(empty_dim, 0, 0)), _exp(empty_expect),
             _arg(empty_expect, arg), isolate=isolate),
    ]
    kinds = layouts if layouts is not None else (LAYOUTS_1D if t0.dim() == 1 else LAYOUTS_ND)
    for kind in kinds:
        want = (layout_expect or {}).get(kind, CORRECT)
        out.append(Case(op, f"{arg}-{kind}", with_arg(base, arg, lambda t, _i, kind=kind: layout(t, kind)),
                        _exp(want), _arg(want, arg), check=_documented_check(want, check),
                        isolate=isolate))
    return out


@dataclass(frozen=True)
class Err:
    """An expected error that must name ``arg`` (one name or alternatives) rather than the case's own."""

    arg: str | tuple[str, ...]


def _exp(want: Any) -> Any:
    return ERROR if isinstance(want, Err) else want


def _arg(want: Any, default: Any) -> Any:
    return want.arg if isinstance(want, Err) else default


def _documented_check(want: Any, check: Callable[[Run], None] | None) -> Callable[[Run], None] | None:
    """``check`` only where ``documented`` is an expected class (elsewhere the reference judges)."""
    classes = (want,) if isinstance(want, str) else want if isinstance(want, tuple) else ()
    return check if DOCUMENTED in classes else None


def _short(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


VALUES = {"nan": float("nan"), "inf": float("inf"), "neg_inf": float("-inf"), "big": 1e4, "neg_big": -1e4}


def plant(t: torch.Tensor, value: float, where: Any = None) -> torch.Tensor:
    """``t`` with ``value`` at ``where`` (default: one interior element, the middle of the flat tensor)."""
    t = t.clone()
    if where is None:
        t.view(-1)[t.numel() // 2] = value
    else:
        t[where] = value
    return t


def value_cases(op: str, arg: str, base: Base, *, values: Iterable[str] = tuple(VALUES),
                where: Any = None, expect: Mapping[str, Any] | None = None,
                check: Callable[[Run], None] | None = None, suffix: str = "") -> list[Case]:
    """NaN, ±inf and ±1e4 planted in ``arg``; ``correct`` (NaN/inf exactly where the reference has them)
    unless ``expect`` says otherwise per value (``documented`` uses ``check``)."""
    out = []
    for v in values:
        want = (expect or {}).get(v, CORRECT)
        out.append(Case(op, f"{arg}-{v}{suffix}",
                        with_arg(base, arg, lambda t, _i, v=v: plant(t, VALUES[v], where)), want,
                        check=_documented_check(want, check)))
    return out


def option_cases(op: str, base: Base, table: Iterable[tuple[str, str, Any, Any]]) -> list[Case]:
    """``(case name, option, value, expected)`` rows; ``expected`` is a class (``error`` names ``option``)
    or :class:`Err` (an error naming another argument)."""
    out = []
    for name, option, value, want in table:
        out.append(Case(op, f"{option}-{name}", with_kwargs(base, **{option: value}), _exp(want),
                        _arg(want, option)))
    return out


BAD_FLOATS = [  # (name, value, expected) for a float option that must be finite and positive
    ("str", "1.0", ERROR), ("bool", True, ERROR), ("nan", float("nan"), ERROR), ("inf", float("inf"), ERROR),
    ("tensor", "tensor", ERROR),
]


def float_option_cases(op: str, base: Base, option: str, *, negative: str = ERROR, zero: str = ERROR,
                       extra: Iterable[tuple[str, Any, Any]] = ()) -> list[Case]:
    """A float option given a string, a bool, NaN, inf, a tensor, a negative number and zero."""
    rows = [(n, option, torch.tensor(1.0) if v == "tensor" else v, w) for n, v, w in BAD_FLOATS]
    rows += [("negative", option, -1.0, negative), ("zero", option, 0.0, zero)]
    rows += [(n, option, v, w) for n, v, w in extra]
    return option_cases(op, base, rows)


def spec_op(name: str, family: str, fn: Callable[..., Any], **kwargs: Any) -> Op:
    """An :class:`Op` whose reference and tolerance are its registered spec's (unless given)."""
    spec = registry()[name]
    kwargs.setdefault("reference", spec.reference)
    kwargs.setdefault("tolerance", spec.tolerance)
    return Op(name, family, fn, **kwargs)
