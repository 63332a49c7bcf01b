"""gelu, silu, swiglu, geglu: ``[..., n]`` float inputs of any rank and strides, ``approximate`` options,
the packed ``[..., 2H]`` gate-up form."""

from __future__ import annotations

import torch

import kernelworks as kw

from .common import CORRECT, ERROR, Err, option_cases, spec_op, tensor_cases, value_cases, with_arg
from .harness import Case

FAMILY = "activation"
OPS = [spec_op(n, FAMILY, getattr(kw, n)) for n in ("gelu", "silu", "swiglu", "geglu")]

_SIZES = {"size1": (1, 1), "odd_3x7": (3, 7), "odd_13x13": (13, 13), "vector_7": (7,), "rank3_2x3x13": (2, 3, 13)}
_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _unary_base(shape=(3, 7), dtype=torch.float32):
    return lambda: {"x": torch.randn(shape).mul(3).to(dtype)}


def _gated_base(shape=(3, 7), dtype=torch.float32):
    return lambda: {"gate": torch.randn(shape).mul(3).to(dtype), "up": torch.randn(shape).to(dtype)}


def _packed_base(shape=(3, 14), dtype=torch.float32):
    return lambda: {"gate": torch.randn(shape).mul(3).to(dtype)}


def _approximate_cases(op: str, base) -> list[Case]:
    return option_cases(op, base, [
        ("tanh", "approximate", "tanh", CORRECT), ("none", "approximate", "none", CORRECT),
        ("unknown", "approximate", "Tanh", ERROR), ("None", "approximate", None, ERROR),
        ("bool", "approximate", True, ERROR), ("int", "approximate", 1, ERROR),
    ])


def _shape_cases(op: str, make) -> list[Case]:
    """Sizes (1, odd, 1-D, rank 3) and 16-bit dtypes, each on valid random data."""
    out = [Case(op, f"shape-{n}", make(s), CORRECT) for n, s in _SIZES.items()]
    out += [Case(op, f"dtype-{n}", make((3, 7), dt), CORRECT) for n, dt in _DTYPES.items()]
    return out


def _unary_cases(op: str) -> list[Case]:
    base = _unary_base()
    out = tensor_cases(op, "x", base, rank_expect=CORRECT)
    out.append(Case(op, "x-scalar", with_arg(base, "x", lambda t, _i: t[0, 0]), ERROR, "x"))
    out += _shape_cases(op, _unary_base)
    out += value_cases(op, "x", base)
    out += value_cases(op, "x", _unary_base(dtype=torch.float16), values=("inf", "neg_inf", "big"), suffix="-fp16")
    return out


def _gated_cases(op: str) -> list[Case]:
    base, packed = _gated_base(), _packed_base()
    out = tensor_cases(op, "gate", base, rank_expect=Err(("gate", "up")))
    out += tensor_cases(op, "up", base, rank_expect=Err(("gate", "up")))
    out += [
        Case(op, "up-other_shape", with_arg(base, "up", lambda t, _i: t[:, :-1]), ERROR, "up"),
        Case(op, "up-broadcastable", with_arg(base, "up", lambda t, _i: t[:1]), ERROR, "up"),
        Case(op, "up-fp16", with_arg(base, "up", lambda t, _i: t.half()), ERROR, "up"),
        Case(op, "packed", packed, CORRECT),
        Case(op, "packed-odd_width", with_arg(packed, "gate", lambda t, _i: t[:, :-1]), ERROR, "gate"),
        Case(op, "packed-column", with_arg(packed, "gate", lambda t, _i: torch.cat([t, t], -1)[:, :14]), CORRECT),
        Case(op, "packed-transposed", with_arg(packed, "gate", lambda t, _i: t.t().contiguous().t()), CORRECT),
        Case(op, "packed-width2", _packed_base((5, 2)), CORRECT),
    ]
    out += _shape_cases(op, _gated_base)
    out += value_cases(op, "gate", base) + value_cases(op, "up", base)
    return out


CASES: list[Case] = []
for _name in ("gelu", "silu"):
    CASES += _unary_cases(_name)
for _name in ("swiglu", "geglu"):
    CASES += _gated_cases(_name)
CASES += _approximate_cases("gelu", _unary_base()) + _approximate_cases("geglu", _gated_base())


# ------------------------------------------------------------------------------------------- gated_mlp

OPS.append(spec_op("gated_mlp", FAMILY, kw.gated_mlp))


def _mlp_base(tokens=(5,), dtype=torch.float32):
    def build():
        hidden, inner = 16, 24
        return {"x": torch.randn(*tokens, hidden).to(dtype),
                "gate_weight": (torch.randn(inner, hidden) / 4).to(dtype),
                "up_weight": (torch.randn(inner, hidden) / 4).to(dtype),
                "down_weight": (torch.randn(hidden, inner) / 5).to(dtype)}
    return build


def _mlp_cases() -> list[Case]:
    """Each tensor's structural hostiles (any layout is taken: the GEMMs read strides; a rank-3 x is a batch
    of rows), weights of the wrong shape, the activation options, NaN and large values in x."""
    op, base = "gated_mlp", _mlp_base()
    out = tensor_cases(op, "x", base, rank_expect=CORRECT)
    for name in ("gate_weight", "up_weight", "down_weight"):
        out += tensor_cases(op, name, base)
        out.append(Case(op, f"{name}-transposed_shape", with_arg(base, name, lambda t, _i: t.t()), ERROR, name))
    out += [Case(op, "x-3d", _mlp_base((2, 3)), CORRECT), Case(op, "dtype-bf16", _mlp_base(dtype=torch.bfloat16),
                                                              CORRECT),
            Case(op, "x-wrong_width", with_arg(base, "x", lambda t, _i: t[:, :-1]), ERROR, "gate_weight")]
    out += option_cases(op, base, [
        ("geglu", "activation", "geglu", CORRECT), ("relu", "activation", "relu", ERROR),
        ("none", "approximate", "none", CORRECT), ("unknown", "approximate", "Tanh", ERROR),
    ])
    out += value_cases(op, "x", base, values=("nan", "big"))
    return out


CASES += _mlp_cases()
