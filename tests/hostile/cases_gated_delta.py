"""gated_delta_decode (a state pool updated in place; ``state_indices`` are index values) and
gated_delta_prefill (packed sequences; ``cu_seqlens`` are index values). q, k, v need a unit stride in the
last dimension (documented: other layouts are refused naming the argument).

Documented unchecked behaviour (validation off): a decode index ``≥ slots`` is skipped like padding (zero
output, no slot touched); prefill ``cu_seqlens`` entries are clamped into ``[0, T]`` with a running maximum,
tokens no sequence covers get a zero output.
"""

from __future__ import annotations

import itertools

import torch
from torch.nn import functional

import kernelworks as kw
from kernelworks.ops.gated_delta import reference

from .common import (
    CORRECT,
    DOCUMENTED,
    ERROR,
    Err,
    float_option_cases,
    layout,
    option_cases,
    spec_op,
    tensor_cases,
    value_cases,
    with_arg,
    with_kwargs,
)
from .harness import Case, Run, finite

FAMILY = "gated_delta"


def _decode(**inputs):
    """The op (state updated in place), returned as the reference returns it: ``(o, pool after)``."""
    return kw.gated_delta_decode(**inputs), inputs["state"]


def _prefill(**inputs):
    """``o``, or ``(o, final_state)`` when asked for (the reference's outputs)."""
    o, final = kw.gated_delta_prefill(**inputs)
    return (o, final) if inputs.get("output_final_state") else o


def _prefill_reference(q, k, v, g, beta, *, output_final_state=False, chunk_size=None, **options):
    """The token-by-token recurrence (the specs' wrappers take no ``scale``: this one passes it on)."""
    o, final = reference.gated_delta_rule(q, k, v, g, beta, output_final_state=bool(output_final_state), **options)
    return (o, final) if output_final_state else o


OPS = [
    spec_op("gated_delta_decode", FAMILY, _decode, mutates=("state",), reference=reference.gated_delta_decode),
    spec_op("gated_delta_prefill", FAMILY, _prefill, reference=_prefill_reference),
]

K, V = 16, 8
# documented: q, k, v need a unit stride in the last dim (one q/k head here: their transposed view keeps it)
_UNIT_LAST = {"q": {"strided": ERROR}, "k": {"strided": ERROR}, "v": {"strided": ERROR, "transposed": ERROR}}


def _gates(shape):
    return {"g": functional.logsigmoid(torch.randn(shape) + 2.0), "beta": torch.sigmoid(torch.randn(shape))}


# ------------------------------------------------------------------------------------------------ decode


def _dec_base(b=3, hqk=1, hv=2, k=K, v=V, slots=4, dtype=torch.float32, indices=True, **options):
    def build():
        inputs = {"q": torch.randn(b, hqk, k).to(dtype),
                  "k": functional.normalize(torch.randn(b, hqk, k), dim=-1).to(dtype),
                  "v": torch.randn(b, hv, v).to(dtype), **_gates((b, hv)), "state": torch.randn(slots, hv, v, k)}
        if indices:
            inputs["state_indices"] = torch.randperm(slots)[:b].to(torch.int32)
        return {**inputs, **options}
    return build


def _out_of_pool_skipped(r: Run) -> None:
    """Indices ``≥ slots`` act as padding: the reference with them replaced by -1, output and pool."""
    idx, slots = r.inputs["state_indices"], r.inputs["state"].shape[0]
    o, pool = r.outs
    assert finite(o) and finite(pool), "non-finite output or pool (an out-of-bounds read of a guard)"
    ref_o, ref_pool = r.reference(state_indices=torch.where(idx >= slots, torch.full_like(idx, -1), idx))
    r.assert_matches(o, ref_o, "o")
    r.assert_matches(pool, ref_pool, "state")


_BAD_SLOTS = {"eq_slots": 4, "huge": 1 << 30, "int64_huge": 1 << 40}


def _decode_index_cases(op: str) -> list[Case]:
    out = []
    for name, value in _BAD_SLOTS.items():
        dtype = torch.int64 if value >= 1 << 31 else torch.int32

        def poke(t, _i, value=value, dtype=dtype):
            t = t.to(dtype).clone()
            t[1] = value
            return t
        bad = with_arg(_dec_base(), "state_indices", poke)
        out += [Case(op, f"state_indices-{name}-validated", bad, ERROR, "state_indices", isolate=True),
                Case(op, f"state_indices-{name}-unchecked", bad, (ERROR, DOCUMENTED), "state_indices",
                     check=_out_of_pool_skipped, validate=False, guard=True, isolate=True)]
    dup = with_arg(_dec_base(), "state_indices", lambda t, _i: torch.tensor([2, 0, 2], dtype=torch.int32))
    out.append(Case(op, "state_indices-duplicate-validated", dup, ERROR, "state_indices", isolate=True))
    return out


def _decode_cases() -> list[Case]:
    op, base = "gated_delta_decode", _dec_base()
    out = []
    for arg in ("q", "k", "v"):
        out += tensor_cases(op, arg, base, layout_expect=_UNIT_LAST[arg], rank_expect=ERROR)
    for arg in ("g", "beta"):
        out += tensor_cases(op, arg, base)
    out += tensor_cases(op, "write_strength", with_kwargs(base, write_strength=torch.rand(3, 2)))
    out += tensor_cases(op, "state", base, dtypes=(torch.float16,), layouts=("column", "rows"))
    out += [Case(op, f"state-{kind}", with_arg(base, "state", lambda t, _i, kind=kind: layout(t, kind)), ERROR,
                 "state") for kind in ("strided", "transposed")]
    out += tensor_cases(op, "state_indices", base, layouts=("strided", "column"), isolate=True,
                        empty_expect=Err(("state_indices", "q")))
    fused = _dec_base(A_log=torch.randn(2), dt_bias=torch.randn(2))
    out += tensor_cases(op, "A_log", fused)
    out += tensor_cases(op, "dt_bias", fused)
    out += [
        Case(op, "state_indices-int64", with_arg(base, "state_indices", lambda t, _i: t.long()), CORRECT),
        Case(op, "state_indices-None", _dec_base(indices=False), CORRECT),
        Case(op, "state_indices-padding", with_arg(base, "state_indices", lambda t, _i: torch.tensor(
            [-1, 1, -1], dtype=torch.int32)), CORRECT),
        Case(op, "state_indices-negative_other", with_arg(base, "state_indices", lambda t, _i: torch.tensor(
            [-5, 1, -1 << 30], dtype=torch.int32)), CORRECT),
        Case(op, "state-too_few_slots", _dec_base(slots=2, indices=False), ERROR, "state"),
        Case(op, "state-other_heads", with_arg(base, "state", lambda t, _i: t[:, :1]), ERROR, "state"),
        Case(op, "v-heads_not_multiple", _dec_base(hqk=2, hv=3), ERROR, "v"),
        Case(op, "k-shape_mismatch", with_arg(base, "k", lambda t, _i: t[:-1]), ERROR, "k"),
        Case(op, "v-fp16", with_arg(base, "v", lambda t, _i: t.half()), ERROR, ("q", "k", "v")),
        Case(op, "g-fp16", with_arg(base, "g", lambda t, _i: t.half()), CORRECT),
        Case(op, "dt_bias-without_A_log", with_kwargs(base, dt_bias=torch.randn(2)), ERROR, "dt_bias"),
        Case(op, "fused_gates", fused, CORRECT),
        Case(op, "A_log-short", with_kwargs(fused, A_log=torch.randn(1)), ERROR, "A_log"),
        Case(op, "use_qk_l2norm", with_kwargs(base, use_qk_l2norm=True), CORRECT),
        Case(op, "use_qk_l2norm-str", with_kwargs(base, use_qk_l2norm="no"), (ERROR, CORRECT), "use_qk_l2norm"),
        Case(op, "shape-size1", _dec_base(1, 1, 1, 1, 1, slots=1), CORRECT),
        Case(op, "shape-odd_k13_v7", _dec_base(k=13, v=7), CORRECT),
        Case(op, "shape-k257", _dec_base(k=257), ERROR, "q"),
        Case(op, "dtype-fp16", _dec_base(dtype=torch.float16), CORRECT),
        Case(op, "dtype-bf16", _dec_base(dtype=torch.bfloat16), CORRECT),
        Case(op, "requires_grad", with_arg(base, "q", lambda t, _i: t.requires_grad_()), ERROR, "q"),
    ]
    out += float_option_cases(op, base, "scale", negative=CORRECT, zero=CORRECT)
    for arg in ("q", "v", "g", "beta", "state"):
        out += value_cases(op, arg, base, values=("nan", "inf", "big"))
    return out + _decode_index_cases(op)


# ----------------------------------------------------------------------------------------------- prefill


def _pre_base(b=1, t=7, hqk=1, hv=2, k=K, v=V, dtype=torch.float32, cu=None, h0=False, **options):
    def build():
        inputs = {"q": torch.randn(b, t, hqk, k).to(dtype),
                  "k": functional.normalize(torch.randn(b, t, hqk, k), dim=-1).to(dtype),
                  "v": torch.randn(b, t, hv, v).to(dtype), **_gates((b, t, hv)), "chunk_size": 16}
        n = b
        if cu is not None:
            inputs["cu_seqlens"] = torch.tensor(cu, dtype=torch.int32)
            n = len(cu) - 1
        if h0:
            inputs["initial_state"] = torch.randn(n, hv, v, k)
        return {**inputs, **options}
    return build


def _seq_spans(cu: torch.Tensor, total: int) -> list[tuple[int, int]]:
    """The documented clamping: entries into ``[0, T]``, then a running maximum."""
    vals = [min(max(x, 0), total) for x in cu.tolist()]
    for i in range(1, len(vals)):
        vals[i] = max(vals[i - 1], vals[i])
    return list(itertools.pairwise(vals))


def _packed_clamped(r: Run) -> None:
    """Unchecked ``cu_seqlens``: finite, tokens no (clamped) sequence covers zero, each sequence exact
    (its own recurrence from its initial state)."""
    o, final = r.outs[0], (r.outs[1] if len(r.outs) > 1 else None)
    assert finite(o), "non-finite output (an out-of-bounds read of a guard, or tokens never written)"
    T = r.inputs["q"].shape[1]
    spans = _seq_spans(r.inputs["cu_seqlens"], T)
    covered = torch.zeros(T, dtype=torch.bool)
    h0 = r.inputs.get("initial_state")
    for n, (s, e) in enumerate(spans):
        covered[s:e] = True
        sub = {name: r.inputs[name][:, s:e] for name in ("q", "k", "v", "g", "beta")}
        init = None if h0 is None else h0[n:n + 1]
        if e > s:
            ref = r.reference(**sub, cu_seqlens=None, initial_state=init, output_final_state=True)
            r.assert_matches(o[:, s:e], ref[0], f"tokens {s}:{e}")
            if final is not None:
                r.assert_matches(final[n:n + 1], ref[1], f"final state {n}")
        elif final is not None:
            want = torch.zeros_like(final[n:n + 1]) if init is None else init
            r.assert_matches(final[n:n + 1], want.double(), f"final state {n} (empty sequence)")
    assert bool((o[:, ~covered] == 0).all()), f"tokens covered by no sequence are not zero: {(~covered).nonzero()}"


_BAD_CU = {"decreasing": (0, 5, 3, 7), "past_total": (0, 3, 5, 20), "negative": (-3, 2, 5, 7),
           "not_from_zero": (2, 3, 5, 7), "huge": (0, 3, 1 << 30, 7)}


def _prefill_index_cases(op: str) -> list[Case]:
    out = []
    for name, table in _BAD_CU.items():
        for dtype in (torch.int32, torch.int64):
            bad = _pre_base(cu=table, h0=True, output_final_state=True)
            bad = with_arg(bad, "cu_seqlens", lambda t, _i, dtype=dtype: t.to(dtype))
            sfx = "" if dtype == torch.int32 else "-int64"
            out += [Case(op, f"cu_seqlens-{name}{sfx}-validated", bad, ERROR, "cu_seqlens", isolate=True),
                    Case(op, f"cu_seqlens-{name}{sfx}-unchecked", bad, (ERROR, DOCUMENTED), "cu_seqlens",
                         check=_packed_clamped, validate=False, guard=True, isolate=True)]
    short = _pre_base(cu=(0, 3, 5), h0=True, output_final_state=True)
    out += [Case(op, "cu_seqlens-short_of_total", short, DOCUMENTED, check=_packed_clamped, isolate=True),
            Case(op, "cu_seqlens-short_of_total-unchecked", short, DOCUMENTED, check=_packed_clamped,
                 validate=False, guard=True, isolate=True)]
    return out


def _prefill_cases() -> list[Case]:
    op, base = "gated_delta_prefill", _pre_base(b=2)
    packed = _pre_base(cu=(0, 3, 7), h0=True, output_final_state=True)
    out = []
    for arg in ("q", "k", "v"):
        out += tensor_cases(op, arg, base, layout_expect=_UNIT_LAST[arg])
    for arg in ("g", "beta"):
        out += tensor_cases(op, arg, base)
    out += tensor_cases(op, "write_strength", with_kwargs(base, write_strength=torch.rand(2, 7, 2)))
    out += tensor_cases(op, "initial_state", _pre_base(b=2, h0=True, output_final_state=True),
                        dtypes=(torch.float16,))
    out += tensor_cases(op, "cu_seqlens", packed, layouts=("strided", "column"), isolate=True,
                        empty_expect=Err("cu_seqlens"))
    out += [
        Case(op, "packed", packed, CORRECT),
        Case(op, "packed-empty_sequence", _pre_base(cu=(0, 3, 3, 7), h0=True, output_final_state=True), CORRECT),
        Case(op, "cu_seqlens-int64", with_arg(packed, "cu_seqlens", lambda t, _i: t.long()), CORRECT),
        Case(op, "cu_seqlens-one_entry", with_arg(packed, "cu_seqlens", lambda t, _i: t[:1]), ERROR, "cu_seqlens"),
        Case(op, "cu_seqlens-batch2", _pre_base(b=2, cu=(0, 3, 7)), ERROR, ("q", "cu_seqlens")),
        Case(op, "initial_state-wrong_count", with_arg(packed, "initial_state", lambda t, _i: t[:1]), ERROR,
             "initial_state"),
        Case(op, "v-heads_not_multiple", _pre_base(hqk=2, hv=3), ERROR, "v"),
        Case(op, "g-fp16", with_arg(base, "g", lambda t, _i: t.half()), CORRECT),
        Case(op, "shape-t1", _pre_base(t=1), CORRECT), Case(op, "shape-t13", _pre_base(t=13), CORRECT),
        Case(op, "shape-k13_v7", _pre_base(k=13, v=7), CORRECT),
        Case(op, "shape-t40_chunks", _pre_base(t=40), CORRECT),
        Case(op, "dtype-fp16", _pre_base(dtype=torch.float16), CORRECT),
        Case(op, "dtype-bf16", _pre_base(dtype=torch.bfloat16), CORRECT),
        Case(op, "output_final_state-int", with_kwargs(base, output_final_state=1), (ERROR, CORRECT),
             "output_final_state"),
    ]
    out += option_cases(op, base, [
        ("32", "chunk_size", 32, CORRECT), ("64", "chunk_size", 64, CORRECT), ("8", "chunk_size", 8, ERROR),
        ("float", "chunk_size", 16.0, ERROR), ("bool", "chunk_size", True, ERROR), ("str", "chunk_size", "16", ERROR),
        ("None", "chunk_size", None, ERROR),
    ])
    out += float_option_cases(op, base, "scale", negative=CORRECT, zero=CORRECT)
    for arg in ("q", "v", "g", "beta"):
        out += value_cases(op, arg, base, values=("nan", "inf", "big"))
    out += value_cases(op, "g", base, values=("neg_inf", "neg_big"))
    return out + _prefill_index_cases(op)


CASES = _decode_cases() + _prefill_cases()
