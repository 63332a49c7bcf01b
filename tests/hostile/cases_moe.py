"""moe_sort / moe_permute / moe_unpermute: token rows into expert order and back. ``order`` and ``inverse``
are index tensors of any stride: bad values are errors in validation mode and, unchecked, read as zero rows
with nothing touched outside the outputs."""

from __future__ import annotations

import torch

import kernelworks as kw

from .common import CORRECT, DOCUMENTED, ERROR, Err, layout, spec_op, tensor_cases, value_cases, with_arg
from .harness import Case, Op, Run, finite

FAMILY = "moe"


def _sort_reference(top_k_index, num_experts):
    """Stable sort by expert (out-of-range experts last), its inverse, and the in-range counts."""
    flat = top_k_index.reshape(-1)
    key = torch.where((flat >= 0) & (flat < num_experts), flat, num_experts)
    order = key.argsort(stable=True)
    return order, order.argsort(), torch.bincount(key, minlength=num_experts + 1)[:num_experts].int()


OPS = [
    spec_op("moe_permute", FAMILY, kw.moe_permute),
    spec_op("moe_unpermute", FAMILY, kw.moe_unpermute),
    Op("moe_sort", FAMILY, kw.moe_sort, reference=_sort_reference),
]


def _routing(t: int, k: int, e: int) -> tuple[torch.Tensor, torch.Tensor]:
    top_k_index = torch.rand(t, e).argsort(dim=-1)[:, :k]
    order, inverse, _ = kw.moe_sort(top_k_index, e)
    return order, inverse


def _permute_base(t=5, k=2, h=12, dtype=torch.float32):
    def build():
        order, inverse = _routing(t, k, max(4, k))
        return {"hidden": torch.randn(t, h).to(dtype), "order": order, "inverse": inverse}
    return build


def _unpermute_base(t=5, k=2, h=12, dtype=torch.float32):
    def build():
        order, inverse = _routing(t, k, max(4, k))
        return {"y": torch.randn(t * k, h).to(dtype), "weights": torch.rand(t, k).softmax(-1),
                "order": order, "inverse": inverse}
    return build


def _zero_rows_elsewhere_correct(r: Run) -> None:
    """Unchecked bad indices: the output is finite (no guard read, no unwritten row), and every row whose
    indices are all valid equals the reference."""
    out = r.outs[0]
    assert finite(out), "non-finite output (an out-of-bounds read of a guard, or an unwritten row)"
    n_pairs = r.inputs["order"].shape[0]
    ok = lambda t: (t >= 0) & (t < n_pairs)  # noqa: E731
    if r.op.name == "moe_permute":
        good = ok(r.inputs["order"])
        clean = {"order": torch.where(good, r.inputs["order"], 0)}
        assert not out[~good].any(), "a row whose pair is out of range is not zero"
    else:
        inv = r.inputs["inverse"]
        good = ok(inv).view(r.inputs["weights"].shape).all(-1)
        clean = {"inverse": torch.where(ok(inv), inv, 0)}
    ref = r.reference(**clean)[0]
    r.assert_matches(out[good], ref[good])


_BAD = {"neg": -1, "past_end": 10, "huge": 2**40}


def _index_cases(op: str, base, arg: str) -> list[Case]:
    out = []
    for name, value in _BAD.items():
        def build(value=value):
            inputs = base()
            t = inputs[arg].clone()
            t[3] = value
            return {**inputs, arg: t}
        out.append(Case(op, f"{arg}-{name}-validated", build, ERROR, arg, isolate=True))
        out.append(Case(op, f"{arg}-{name}-unchecked", build, DOCUMENTED, arg, check=_zero_rows_elsewhere_correct,
                        validate=False, guard=True, isolate=True))
    return out


def _cases() -> list[Case]:
    out: list[Case] = []
    op, base = "moe_permute", _permute_base()
    out += tensor_cases(op, "hidden", base, rank_expect=ERROR, empty_expect=Err(("hidden", "order")),
                        layouts=("strided", "column", "rows", "transposed"), isolate=True)
    for arg in ("order", "inverse"):
        # expanded (stride 0): every entry the same, no permutation; validation mode (the suite's) refuses it
        out += tensor_cases(op, arg, base, empty_expect=Err(("order", "inverse")), isolate=True,
                            layout_expect={"expanded": Err(("order", "inverse"))})
    out += _index_cases(op, base, "order")
    out += [
        Case(op, "dtype-fp16", _permute_base(dtype=torch.float16), CORRECT, isolate=True),
        Case(op, "dtype-bf16", _permute_base(dtype=torch.bfloat16), CORRECT, isolate=True),
        Case(op, "shape-top1", _permute_base(k=1), CORRECT, isolate=True),
        Case(op, "shape-1x1", _permute_base(t=1, k=1, h=1), CORRECT, isolate=True),
        Case(op, "order-int32", with_arg(base, "order", lambda t, _i: t.int()), CORRECT, isolate=True),
        Case(op, "order-short", with_arg(base, "order", lambda t, _i: t[:-1]), ERROR, ("order", "inverse"),
             isolate=True),
    ]
    out += value_cases(op, "hidden", base, values=("nan", "inf", "big"))

    op, base = "moe_unpermute", _unpermute_base()
    out += tensor_cases(op, "y", base, empty_expect=Err(("y", "weights")), layouts=("strided", "column", "rows",
                                                                                     "transposed"), isolate=True)
    out += tensor_cases(op, "weights", base, empty_expect=Err(("weights", "y")),
                        layouts=("strided", "column", "rows", "transposed"), isolate=True)
    out += tensor_cases(op, "inverse", base, empty_expect=Err(("order", "inverse")), isolate=True,
                        layout_expect={"expanded": Err(("order", "inverse"))})
    out += _index_cases(op, base, "inverse")
    out += [
        Case(op, "dtype-bf16", _unpermute_base(dtype=torch.bfloat16), CORRECT, isolate=True),
        Case(op, "weights-bf16", with_arg(base, "weights", lambda t, _i: t.bfloat16()), CORRECT, isolate=True),
        Case(op, "shape-top8", _unpermute_base(t=3, k=8), CORRECT, isolate=True),
        Case(op, "weights-other_k", with_arg(base, "weights", lambda t, _i: t[:, :1]), ERROR, ("y", "weights"),
             isolate=True),
    ]
    out += value_cases(op, "y", base, values=("nan", "inf", "big"))
    out += value_cases(op, "weights", base, values=("nan", "inf"))

    op = "moe_sort"

    def sort_base():
        return {"top_k_index": torch.rand(6, 5).argsort(dim=-1)[:, :2], "num_experts": 5}

    out += [
        Case(op, "ok", sort_base, CORRECT),
        Case(op, "top_k_index-strided", with_arg(sort_base, "top_k_index", lambda t, _i: layout(t, "strided")),
             CORRECT),
        Case(op, "top_k_index-int32", with_arg(sort_base, "top_k_index", lambda t, _i: t.int()), CORRECT),
        Case(op, "top_k_index-out_of_range", with_arg(sort_base, "top_k_index",
                                                      lambda t, _i: torch.where(t == 0, -1, t + (t == 4) * 3)),
             CORRECT),
        Case(op, "top_k_index-float", with_arg(sort_base, "top_k_index", lambda t, _i: t.float()), ERROR,
             "top_k_index"),
        Case(op, "top_k_index-1d", with_arg(sort_base, "top_k_index", lambda t, _i: t.reshape(-1)), ERROR,
             "top_k_index"),
        Case(op, "num_experts-zero", with_arg(sort_base, "num_experts", lambda v, _i: 0), ERROR, "num_experts"),
        Case(op, "num_experts-float", with_arg(sort_base, "num_experts", lambda v, _i: 5.0), ERROR, "num_experts"),
    ]
    return out


CASES = _cases()
