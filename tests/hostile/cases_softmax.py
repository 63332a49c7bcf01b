"""softmax, log_softmax: ``[..., n]`` float rows of any stride, ``dim`` naming the last dimension only."""

from __future__ import annotations

import torch

import kernelworks as kw
from kernelworks.spec import registry

from .common import CORRECT, ERROR, option_cases, plant, spec_op, tensor_cases, value_cases, with_arg
from .harness import Case

FAMILY = "softmax"


def _last_dim(name: str):
    """The spec's reference (always the last dim), accepting ``dim`` for the dim-option cases."""
    ref = registry()[name].reference
    return lambda x, dim=-1: ref(x)


OPS = [spec_op(n, FAMILY, getattr(kw, n), reference=_last_dim(n)) for n in ("softmax", "log_softmax")]

_SIZES = {"size1": (1, 1), "odd_3x7": (3, 7), "odd_13x13": (13, 13), "vector_7": (7,), "rank3_2x3x13": (2, 3, 13),
          "long_row": (2, 5000)}


def _base(shape=(3, 7), dtype=torch.float32):
    return lambda: {"x": torch.randn(shape).mul(2).to(dtype)}


def _cases(op: str) -> list[Case]:
    base = _base()
    out = tensor_cases(op, "x", base, rank_expect=CORRECT)
    out.append(Case(op, "x-scalar", with_arg(base, "x", lambda t, _i: t[0, 0]), ERROR, "x"))
    out += [Case(op, f"shape-{n}", _base(s), CORRECT) for n, s in _SIZES.items()]
    out += [Case(op, f"dtype-{n}", _base((3, 7), dt), CORRECT)
            for n, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16))]
    out += value_cases(op, "x", base)
    out += value_cases(op, "x", _base(dtype=torch.float16), values=("inf", "neg_inf", "big"), suffix="-fp16")
    out += [
        Case(op, "x-row_all_neg_inf", with_arg(base, "x", lambda t, _i: plant(t, float("-inf"), 1)), CORRECT),
        Case(op, "x-row_all_big", with_arg(base, "x", lambda t, _i: plant(t, 1e4, 1)), CORRECT),
        Case(op, "x-mostly_neg_inf_long", with_arg(_base((2, 5000)), "x",
                                                  lambda t, _i: plant(t, float("-inf"), (slice(None), slice(1, None)))),
             CORRECT),
    ]
    out += option_cases(op, base, [
        ("last", "dim", 1, CORRECT), ("minus1", "dim", -1, CORRECT), ("first", "dim", 0, ERROR),
        ("minus2", "dim", -2, ERROR), ("out_of_range", "dim", 5, ERROR), ("float", "dim", 1.0, ERROR),
        ("bool", "dim", True, ERROR), ("str", "dim", "-1", ERROR), ("None", "dim", None, ERROR),
    ])
    return out


CASES = _cases("softmax") + _cases("log_softmax")
