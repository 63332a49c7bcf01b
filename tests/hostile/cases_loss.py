"""cross_entropy, fused_linear_cross_entropy: ``[..., V]`` logits (or hidden states and an LM head) against
int64/int32 class indices; the loss options; out-of-range targets (an index-value case: validation on must
raise naming ``target``; off, the kernels must stay in bounds and give those rows a NaN loss, as
documented)."""

from __future__ import annotations

import torch

import kernelworks as kw
from kernelworks.spec import registry

from .common import (
    CORRECT,
    DOCUMENTED,
    ERROR,
    Err,
    float_option_cases,
    option_cases,
    spec_op,
    tensor_cases,
    value_cases,
    with_arg,
    with_kwargs,
)
from .harness import Case, Run

FAMILY = "loss"
OPS = [
    # inplace_backward is a memory option: the same math, so the reference ignores it
    spec_op("cross_entropy", FAMILY, kw.cross_entropy,
            reference=lambda inplace_backward=False, **kw_: registry()["cross_entropy"].reference(**kw_)),
    spec_op("fused_linear_cross_entropy", FAMILY, kw.fused_linear_cross_entropy),
]
_ROWS_ARG = {"cross_entropy": "logits", "fused_linear_cross_entropy": "hidden"}


def _ce_base(rows=3, vocab=7, dtype=torch.float32, **options):
    def build():
        return {"logits": torch.randn(rows, vocab).mul(2).to(dtype), "target": torch.randint(0, vocab, (rows,)),
                **options}
    return build


def _flce_base(rows=3, hidden=16, vocab=13, dtype=torch.float32, bias=False, **options):
    def build():
        inputs = {"hidden": torch.randn(rows, hidden).to(dtype), "weight": torch.randn(vocab, hidden).to(dtype),
                  "target": torch.randint(0, vocab, (rows,)), **options}
        if bias:
            inputs["bias"] = torch.randn(vocab).to(dtype)
        return inputs
    return build


def _vocab(inputs: dict) -> int:
    return inputs["logits"].shape[-1] if "logits" in inputs else inputs["weight"].shape[0]


def _bad_rows_nan(r: Run) -> None:
    """Documented for out-of-range targets when the host check is off: those rows' loss is NaN, the others
    are exact (reduction ``none``)."""
    t, ignore = r.inputs["target"], r.inputs.get("ignore_index", -100)
    bad = (t != ignore) & ((t < 0) | (t >= _vocab(r.inputs)))
    loss = r.outs[0]
    assert bool(loss[bad].isnan().all()), f"rows with an out-of-range target: loss {loss[bad].tolist()}, want NaN"
    ref = r.reference(target=torch.where(bad, torch.full_like(t, ignore), t))[0]
    r.assert_matches(loss[~bad], ref[~bad], "loss of the in-range rows")


_BAD_TARGETS = {  # name -> the value given to row 1 of 3, from the vocabulary size
    "eq_vocab": lambda v: v, "negative": lambda v: -1, "huge": lambda v: 1 << 30, "int64_huge": lambda v: 1 << 40,
    "ignore_neighbour": lambda v: -99,
}


def _index_cases(op: str, base) -> list[Case]:
    """Out-of-range targets: validation on -> error naming target; off -> in bounds (guards intact) and
    either still an error or the documented NaN rows."""
    out = []
    for name, value in _BAD_TARGETS.items():
        def build(value=value):
            inputs = base()
            t = inputs["target"].clone()
            t[1] = value(_vocab(inputs))
            return {**inputs, "target": t}
        out.append(Case(op, f"target-{name}-validated", build, ERROR, "target", isolate=True))
        out.append(Case(op, f"target-{name}-unchecked", build, (ERROR, DOCUMENTED), "target", check=_bad_rows_nan,
                        validate=False, guard=True, isolate=True))
    return out


def _option_cases(op: str, base) -> list[Case]:
    out = option_cases(op, base, [
        ("float", "ignore_index", -100.0, ERROR), ("bool", "ignore_index", True, ERROR),
        ("str", "ignore_index", "-100", ERROR), ("zero", "ignore_index", 0, CORRECT),
        ("avg", "reduction", "avg", ERROR), ("None", "reduction", None, ERROR), ("upper", "reduction", "SUM", ERROR),
        ("sum", "reduction", "sum", CORRECT), ("none", "reduction", "none", CORRECT),
        ("above_1", "label_smoothing", 1.5, ERROR), ("one", "label_smoothing", 1.0, CORRECT),
        ("tenth", "label_smoothing", 0.1, CORRECT), ("positive", "z_loss", 1e-4, CORRECT),
        ("thirty", "softcap", 30.0, CORRECT), ("tiny", "softcap", 1e-3, CORRECT),
    ])
    out += float_option_cases(op, base, "label_smoothing", zero=CORRECT)
    out += float_option_cases(op, base, "z_loss", zero=CORRECT)
    out += float_option_cases(op, base, "softcap")
    return out


def _target_cases(op: str, base) -> list[Case]:
    rows = _ROWS_ARG[op]
    out = tensor_cases(op, "target", base, rank_expect=Err("target"))
    out += [
        Case(op, "target-int32", with_arg(base, "target", lambda t, _i: t.int()), CORRECT),
        Case(op, "target-uint8", with_arg(base, "target", lambda t, _i: t.to(torch.uint8)), ERROR, "target"),
        Case(op, "target-scalar", with_arg(base, "target", lambda t, _i: t[0]), ERROR, ("target", rows)),
        Case(op, "target-all_ignored", with_arg(base, "target", lambda t, _i: torch.full_like(t, -100)), CORRECT),
        Case(op, "target-all_ignored-none", with_arg(with_kwargs(base, reduction="none"), "target",
                                                    lambda t, _i: torch.full_like(t, -100)), CORRECT),
        Case(op, "target-ignore_index_in_range", with_kwargs(
            with_arg(base, "target", lambda t, _i: torch.tensor([0, 1, 0])), ignore_index=0), CORRECT),
    ]
    return out + _index_cases(op, with_kwargs(base, reduction="none"))


def _ce_cases() -> list[Case]:
    op, base = "cross_entropy", _ce_base()
    out = tensor_cases(op, "logits", base, rank_expect=Err(("target", "logits")), empty_expect=Err(("logits",)))
    out += [
        Case(op, "logits-vector", with_arg(base, "logits", lambda t, _i: t[0]), ERROR, ("target", "logits")),
        Case(op, "shape-size1", _ce_base(1, 1), CORRECT), Case(op, "shape-odd_13x13", _ce_base(13, 13), CORRECT),
        Case(op, "shape-vocab1", _ce_base(3, 1), CORRECT), Case(op, "shape-long_vocab", _ce_base(2, 33000), CORRECT),
        Case(op, "shape-rank3", lambda: {"logits": torch.randn(2, 3, 7), "target": torch.randint(0, 7, (2, 3))},
             CORRECT),
        Case(op, "dtype-fp16", _ce_base(dtype=torch.float16), CORRECT),
        Case(op, "dtype-bf16", _ce_base(dtype=torch.bfloat16), CORRECT),
    ]
    none = with_kwargs(base, reduction="none")
    out += value_cases(op, "logits", none)
    out += value_cases(op, "logits", with_kwargs(_ce_base(dtype=torch.float16), reduction="none"),
                       values=("inf", "neg_inf", "big"), suffix="-fp16")
    out += option_cases(op, base, [("int", "inplace_backward", 1, ERROR), ("str", "inplace_backward", "yes", ERROR),
                                   ("true", "inplace_backward", True, CORRECT)])
    return out + _target_cases(op, base) + _option_cases(op, base)


def _flce_cases() -> list[Case]:
    op, base = "fused_linear_cross_entropy", _flce_base()
    with_bias = _flce_base(bias=True)
    out = tensor_cases(op, "hidden", base, rank_expect=Err(("target", "hidden")))
    out += tensor_cases(op, "weight", base)
    out += tensor_cases(op, "bias", with_bias)
    out += [
        Case(op, "weight-fp32_with_bf16_hidden", with_arg(_flce_base(dtype=torch.bfloat16), "weight",
                                                         lambda t, _i: t.float()), ERROR, "weight"),
        Case(op, "weight-other_hidden", with_arg(base, "weight", lambda t, _i: t[:, :-1]), ERROR, "weight"),
        Case(op, "bias-short", with_arg(with_bias, "bias", lambda t, _i: t[:-1]), ERROR, "bias"),
        Case(op, "bias-fp16", with_arg(with_bias, "bias", lambda t, _i: t.half()), ERROR, "bias"),
        Case(op, "shape-size1", _flce_base(1, 16, 1), CORRECT), Case(op, "shape-odd", _flce_base(7, 13, 3), CORRECT),
        Case(op, "shape-hidden1", _flce_base(3, 1, 5), CORRECT),
        Case(op, "shape-rank3", lambda: {"hidden": torch.randn(2, 3, 16), "weight": torch.randn(13, 16),
                                         "target": torch.randint(0, 13, (2, 3))}, CORRECT),
        Case(op, "dtype-fp16", _flce_base(dtype=torch.float16), CORRECT),
        Case(op, "dtype-bf16", _flce_base(dtype=torch.bfloat16), CORRECT),
    ]
    none = with_kwargs(base, reduction="none")
    out += value_cases(op, "hidden", none) + value_cases(op, "weight", none, values=("nan", "inf", "big"))
    out += option_cases(op, base, [
        ("zero", "chunk_size", 0, ERROR), ("negative", "chunk_size", -1, ERROR), ("float", "chunk_size", 2.0, ERROR),
        ("bool", "chunk_size", True, ERROR), ("str", "chunk_size", "64", ERROR), ("one", "chunk_size", 1, CORRECT),
        ("two", "chunk_size", 2, CORRECT), ("fp16_with_fp32", "accum_dtype", torch.float16, ERROR),
        ("name", "accum_dtype", "float32", CORRECT), ("bad_name", "accum_dtype", "float33", ERROR),
        ("int", "accum_dtype", torch.int32, ERROR),
    ])
    out.append(Case(op, "accum_dtype-weight_dtype", with_kwargs(_flce_base(dtype=torch.bfloat16),
                                                                accum_dtype=torch.bfloat16), CORRECT))
    return out + _target_cases(op, base) + _option_cases(op, base)


CASES = _ce_cases() + _flce_cases()
