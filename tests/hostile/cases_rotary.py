"""rotary_embedding: q and k ``[batch, heads, seq, head_dim]`` (or heads second-to-last) of any strides,
``cos``/``sin`` tables ``[seq, rotary_dim]`` or ``[batch or 1, seq, rotary_dim]`` (expanded views fine),
NeoX or GPT-J pairing, partial rotary."""

from __future__ import annotations

import torch

import kernelworks as kw

from .common import CORRECT, ERROR, Err, option_cases, spec_op, tensor_cases, value_cases, with_arg, with_kwargs
from .harness import Case

FAMILY = "rotary"
OPS = [spec_op("rotary_embedding", FAMILY, kw.rotary_embedding)] if hasattr(kw, "rotary_embedding") else []


def _base(b=2, hq=2, hk=1, s=5, d=16, rot=16, dtype=torch.float32, table_batch=(), **options):
    def build():
        theta = torch.randn(*table_batch, s, rot // 2)
        return {"q": torch.randn(b, hq, s, d).to(dtype), "k": torch.randn(b, hk, s, d).to(dtype),
                "cos": torch.cat([theta.cos(), theta.cos()], -1), "sin": torch.cat([theta.sin(), theta.sin()], -1),
                **options}
    return build


def _cases() -> list[Case]:
    if not OPS:
        return []
    op, base = "rotary_embedding", _base()
    out = []
    for arg in ("q", "k"):
        out += tensor_cases(op, arg, base)
    for arg in ("cos", "sin"):
        out += tensor_cases(op, arg, base, rank_expect=Err(("cos", "sin")), empty_expect=Err(("cos", "sin")),
                            layout_expect={"expanded": CORRECT})
        out += value_cases(op, arg, base, values=("nan", "inf"))
    out += [
        Case(op, "k-fp16", with_arg(base, "k", lambda t, _i: t.half()), ERROR, ("q", "k")),
        Case(op, "k-other_seq", with_arg(base, "k", lambda t, _i: t[:, :, :-1]), ERROR, ("q", "k")),
        Case(op, "k-other_head_dim", with_arg(base, "k", lambda t, _i: t[..., :-2]), ERROR, ("q", "k")),
        Case(op, "cos-batched", _base(table_batch=(2,)), CORRECT),
        Case(op, "cos-batch1", _base(table_batch=(1,)), CORRECT),
        Case(op, "cos-batch3", _base(table_batch=(3,)), ERROR, ("cos", "sin")),
        Case(op, "cos-other_seq", with_arg(base, "cos", lambda t, _i: t[:-1]), ERROR, ("cos", "sin")),
        Case(op, "cos-fp16_with_fp32_q", with_arg(base, "cos", lambda t, _i: t.half()), ERROR, "cos"),
        Case(op, "cos-fp32_with_bf16_q", _base(dtype=torch.bfloat16), CORRECT),
        Case(op, "cos-requires_grad", with_arg(base, "cos", lambda t, _i: t.requires_grad_()), ERROR, "cos"),
        Case(op, "cos-partial_6_of_16", _base(rot=6, d=16), CORRECT),
        Case(op, "partial_rotary", _base(rot=8), CORRECT),
        Case(op, "partial_rotary-gptj", _base(rot=8, layout="gptj"), CORRECT),
        Case(op, "heads_dim2", lambda: {**_base()(), "q": torch.randn(2, 5, 2, 16), "k": torch.randn(2, 5, 1, 16),
                                        "heads_dim": 2}, CORRECT),
        Case(op, "shape-size1", _base(1, 1, 1, 1, 2, 2), CORRECT),
        Case(op, "shape-odd_seq13_d6", _base(s=13, d=6, rot=6), CORRECT),
        Case(op, "dtype-fp16", _base(dtype=torch.float16), CORRECT),
        Case(op, "dtype-bf16", _base(dtype=torch.bfloat16), CORRECT),
        Case(op, "rotary_dim-too_wide", _base(rot=18, d=16), ERROR, ("cos", "rotary_dim")),
        Case(op, "rotary_dim-odd_table", with_kwargs(_base(rot=8), cos=torch.ones(5, 7), sin=torch.ones(5, 7)),
             ERROR, ("cos", "rotary_dim")),
    ]
    out += option_cases(op, base, [
        ("gptj", "layout", "gptj", CORRECT), ("upper", "layout", "NEOX", ERROR), ("None", "layout", None, ERROR),
        ("matching", "rotary_dim", 16, CORRECT), ("other", "rotary_dim", 8, ERROR), ("odd", "rotary_dim", 7, ERROR),
        ("float", "rotary_dim", 16.0, ERROR), ("bool", "rotary_dim", True, ERROR),
        ("zero", "heads_dim", 0, ERROR), ("three", "heads_dim", 3, ERROR), ("bool", "heads_dim", True, ERROR),
        ("float", "heads_dim", 1.0, ERROR),
    ])
    for arg in ("q", "k"):
        out += value_cases(op, arg, base)
    return out


CASES = _cases()
