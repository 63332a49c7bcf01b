"""rms_norm, layer_norm: ``x [..., hidden]`` of any row stride, ``[hidden]`` parameters of their own float
dtypes and strides, the fused residual add, ``eps`` / ``offset`` options."""

from __future__ import annotations

import torch

import kernelworks as kw

from .common import (
    CORRECT,
    ERROR,
    Err,
    float_option_cases,
    option_cases,
    plant,
    spec_op,
    tensor_cases,
    value_cases,
    with_arg,
    with_kwargs,
)
from .harness import Case

FAMILY = "norm"
OPS = [spec_op(n, FAMILY, getattr(kw, n)) for n in ("rms_norm", "layer_norm")]
_PARAMS = {"rms_norm": ("weight",), "layer_norm": ("weight", "bias")}

_SIZES = {"size1": (1, 1), "odd_3x7": (3, 7), "odd_13x13": (13, 13), "vector_7": (7,), "rank3_2x3x13": (2, 3, 13),
          "hidden1": (5, 1), "looped_hidden": (2, 33000)}


def _base(op: str, shape=(3, 7), dtype=torch.float32, param_dtype=None, residual=False):
    def build():
        n = shape[-1]
        inputs = {"x": torch.randn(shape).mul(2).to(dtype)}
        for p in _PARAMS[op]:
            inputs[p] = torch.randn(n).to(param_dtype or dtype)
        if residual:
            inputs["residual"] = torch.randn(shape).to(dtype)
        return inputs
    return build


def _cases(op: str) -> list[Case]:
    base, res = _base(op), _base(op, residual=True)
    out = tensor_cases(op, "x", base, rank_expect=CORRECT)
    out.append(Case(op, "x-scalar", with_arg(base, "x", lambda t, _i: t[0, 0]), ERROR, "x"))
    for p in _PARAMS[op]:
        out += tensor_cases(op, p, base)
        out += [
            Case(op, f"{p}-None", with_kwargs(base, **{p: None}), CORRECT),
            Case(op, f"{p}-short", with_arg(base, p, lambda t, _i: t[:-1]), ERROR, p),
            Case(op, f"{p}-fp32_with_bf16_x", _base(op, dtype=torch.bfloat16, param_dtype=torch.float32), CORRECT),
            Case(op, f"{p}-fp16_with_fp32_x", _base(op, param_dtype=torch.float16), CORRECT),
        ]
        out += value_cases(op, p, base, values=("nan", "inf", "big"))
    out += tensor_cases(op, "residual", res, rank_expect=Err(("x", "residual")))
    out += [
        Case(op, "residual-fp16", with_arg(res, "residual", lambda t, _i: t.half()), ERROR, "residual"),
        Case(op, "residual-short", with_arg(res, "residual", lambda t, _i: t[:, :-1]), ERROR, "residual"),
        Case(op, "residual-broadcast", with_arg(res, "residual", lambda t, _i: t[:1]), ERROR, "residual"),
        Case(op, "residual-odd_13x13", _base(op, (13, 13), residual=True), CORRECT),
        Case(op, "residual-fp16_both", _base(op, dtype=torch.float16, residual=True), CORRECT),
    ]
    out += value_cases(op, "residual", res, values=("nan", "inf", "big"))
    out += [Case(op, f"shape-{n}", _base(op, s), CORRECT) for n, s in _SIZES.items()]
    out += [Case(op, f"dtype-{n}", _base(op, dtype=dt), CORRECT)
            for n, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16))]
    out += value_cases(op, "x", base)
    out += value_cases(op, "x", _base(op, dtype=torch.float16), values=("inf", "big", "neg_big"), suffix="-fp16")
    zero_row = with_arg(base, "x", lambda t, _i: plant(t, 0.0, 1))
    out += [Case(op, "x-zero_row", zero_row, CORRECT),
            Case(op, "x-zero_row-eps0", with_kwargs(zero_row, eps=0.0), CORRECT)]
    out += float_option_cases(op, base, "eps", zero=CORRECT, extra=[("huge", 1e30, CORRECT), ("int", 1, CORRECT)])
    return out


def _offset_cases() -> list[Case]:
    op, base = "rms_norm", _base("rms_norm")
    out = option_cases(op, base, [
        ("gemma", "offset", 1.0, CORRECT), ("int", "offset", 1, CORRECT), ("str", "offset", "1", ERROR),
        ("bool", "offset", True, ERROR), ("nan", "offset", float("nan"), ERROR),
        ("inf", "offset", float("inf"), ERROR), ("None", "offset", None, ERROR),
    ])
    out.append(Case(op, "offset-without_weight", with_kwargs(base, weight=None, offset=1.0), ERROR, "offset"))
    return out


CASES = _cases("rms_norm") + _cases("layer_norm") + _offset_cases()
