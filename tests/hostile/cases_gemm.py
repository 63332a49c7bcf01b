"""matmul (any strides, batched, fused epilogues), fp8_matmul (e4m3 with scales; needs fp8 tensor cores,
so under the interpreter valid calls refuse with NotImplementedError, as documented), grouped_matmul (the
MoE GEMM: group sizes / offsets are index values read on the device)."""

from __future__ import annotations

import torch

import kernelworks as kw
from kernelworks.ops.gemm import reference
from kernelworks.runtime.device import gpu_capability

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

FAMILY = "gemm"
E4M3 = torch.float8_e4m3fn


def _fp8_unsupported() -> str | None:
    cap = gpu_capability()
    return None if cap is not None and cap >= (8, 9) else "fp8 tensor cores (sm_89+) needed"


def _grouped_reference(a, b, group_sizes=None, offsets=None):
    """The spec's loop of matmuls, taking ``offsets`` or a list too (as the op does)."""
    sizes = torch.as_tensor(group_sizes) if offsets is None else torch.as_tensor(offsets).diff()
    return reference.grouped_matmul(a, b, sizes)


OPS = [
    spec_op("matmul", FAMILY, kw.matmul),
    spec_op("fp8_matmul", FAMILY, kw.fp8_matmul, unsupported=_fp8_unsupported),
    spec_op("grouped_matmul", FAMILY, kw.grouped_matmul, reference=_grouped_reference),
]

# ------------------------------------------------------------------------------------------------ matmul


def _mm_base(m=3, k=7, n=5, dtype=torch.float32, batch=(), bias=False, residual=False, **options):
    def build():
        inputs = {"a": torch.randn(*batch, m, k).to(dtype),
                  "b": (torch.randn(*batch, k, n) / max(k, 1) ** 0.5).to(dtype)}
        if bias:
            inputs["bias"] = torch.randn(n).to(dtype)
        if residual:
            n_out = n // 2 if options.get("activation") == "swiglu" else n
            inputs["residual"] = torch.randn(*batch, m, n_out).to(dtype)
        return {**inputs, **options}
    return build


def _matmul_cases() -> list[Case]:
    op = "matmul"
    base, full = _mm_base(), _mm_base(bias=True, residual=True)
    out = tensor_cases(op, "a", base, rank_expect=CORRECT, empty_expect=CORRECT)  # [1, M, K] @ shared b
    out += tensor_cases(op, "b", base, rank_expect=CORRECT, empty_expect=Err("b"))  # K = 0 rows: a's K differs
    out += tensor_cases(op, "bias", full)
    out += tensor_cases(op, "residual", full, rank_expect=Err("residual"))
    out += [
        Case(op, "b-no_columns", with_arg(base, "b", lambda t, _i: t[:, :0]), CORRECT),
        Case(op, "b-other_k", with_arg(base, "b", lambda t, _i: t[:-1]), ERROR, "b"),
        Case(op, "b-fp16", with_arg(base, "b", lambda t, _i: t.half()), ERROR, "b"),
        Case(op, "shape-batched", _mm_base(batch=(2,)), CORRECT),
        Case(op, "b-batch_mismatch", with_arg(_mm_base(batch=(2,)), "b", lambda t, _i: torch.randn(3, *t.shape[1:])),
             ERROR, "b"),
        Case(op, "bias-fp16", with_arg(full, "bias", lambda t, _i: t.half()), CORRECT),
        Case(op, "bias-short", with_arg(full, "bias", lambda t, _i: t[:-1]), ERROR, "bias"),
        Case(op, "residual-fp16", with_arg(full, "residual", lambda t, _i: t.half()), CORRECT),
        Case(op, "residual-broadcast", with_arg(full, "residual", lambda t, _i: t[:1]), ERROR, "residual"),
        Case(op, "shape-k0", _mm_base(k=0, bias=True, residual=True), CORRECT),
        Case(op, "shape-1x1x1", _mm_base(1, 1, 1), CORRECT),
        Case(op, "shape-13x13x13", _mm_base(13, 13, 13), CORRECT),
        Case(op, "shape-3x7x13-batch2", _mm_base(3, 7, 13, batch=(2,)), CORRECT),
        Case(op, "dtype-fp16", _mm_base(dtype=torch.float16, bias=True), CORRECT),
        Case(op, "dtype-bf16", _mm_base(dtype=torch.bfloat16, bias=True), CORRECT),
        Case(op, "residual-nan-beta0", with_kwargs(with_arg(full, "residual", lambda t, _i: t * float("nan")),
                                                   beta=0.0), CORRECT),
    ]
    for act in ("relu", "gelu", "gelu_tanh", "silu", "swiglu"):
        out.append(Case(op, f"activation-{act}", _mm_base(n=6, bias=True, activation=act), CORRECT))
    out += option_cases(op, base, [
        ("unknown", "activation", "tanh", ERROR), ("none_str", "activation", "none", ERROR),
        ("upper", "activation", "RELU", ERROR), ("int", "activation", 1, ERROR),
        ("swiglu_odd", "activation", "swiglu", Err("b")),
        ("fp16", "out_dtype", torch.float16, CORRECT), ("int32", "out_dtype", torch.int32, ERROR),
        ("fp64", "out_dtype", torch.float64, ERROR), ("str", "out_dtype", "float32", ERROR),
    ])
    for opt in ("alpha", "beta"):
        out += float_option_cases(op, full, opt, negative=CORRECT, zero=CORRECT,
                                  extra=[("int", 2, CORRECT), ("big", 1e4, CORRECT)])
    out += value_cases(op, "a", base) + value_cases(op, "b", base, values=("nan", "inf", "big"))
    out += value_cases(op, "bias", full, values=("nan", "inf")) + value_cases(op, "residual", full, values=("nan",))
    out += value_cases(op, "a", _mm_base(dtype=torch.float16), values=("inf", "big"), suffix="-fp16")
    return out

# ---------------------------------------------------------------------------------------------- fp8


def _fp8_base(m=3, k=32, n=16, scaling="tensor", **extra):
    def build():
        kb, nb = -(-k // 128), -(-n // 128)
        shapes = {"tensor": ((), ()), "row": ((m,), (n,)), "block": ((m, kb), (nb, kb))}[scaling]
        return {"a": torch.randn(m, k).to(E4M3), "b": torch.randn(n, k).to(E4M3).t(),
                "scale_a": 0.5 + torch.rand(shapes[0]), "scale_b": 0.5 + torch.rand(shapes[1]), **extra}
    return build


def _all_non_finite(r: Run) -> None:
    """An infinite scale makes every output non-finite; which of inf and NaN is order-dependent: the GPU
    kernel scales the fp32 accumulator (±inf, NaN where the sum is 0), the reference scales the operands
    first (inf − inf: NaN)."""
    assert not bool(r.outs[0].isfinite().any()), "an infinite scale left finite outputs"


def _fp8_cases() -> list[Case]:
    op, base = "fp8_matmul", _fp8_base()
    out = [Case(op, f"scaling-{s}", _fp8_base(scaling=s), CORRECT) for s in ("tensor", "row", "block")]
    for arg in ("a", "b"):
        out += [
            Case(op, f"{arg}-fp32", with_arg(base, arg, lambda t, _i: t.float()), ERROR, arg),
            Case(op, f"{arg}-e5m2", with_arg(base, arg, lambda t, _i: t.to(torch.float8_e5m2)), ERROR, arg),
            Case(op, f"{arg}-meta", with_arg(base, arg, lambda t, _i: torch.empty(t.shape, dtype=t.dtype,
                                                                                 device="meta")), ERROR, arg),
            Case(op, f"{arg}-rank3", with_arg(base, arg, lambda t, _i: t.unsqueeze(0)), ERROR, arg),
            Case(op, f"{arg}-list", with_arg(base, arg, lambda t, _i: [[0.0]]), ERROR, arg),
        ]
    out += [
        Case(op, "a-transposed", with_arg(base, "a", lambda t, _i: t.t().contiguous().t()), CORRECT),
        Case(op, "b-row_major", with_arg(base, "b", lambda t, _i: t.contiguous()), CORRECT),
        Case(op, "b-other_k", with_arg(base, "b", lambda t, _i: t[:-1]), ERROR, "b"),
        Case(op, "shape-1x16x1", _fp8_base(1, 16, 1), CORRECT),
        Case(op, "shape-odd_13x13x13", _fp8_base(13, 13, 13), CORRECT),
        Case(op, "bias-bf16", _fp8_base(bias=torch.randn(16).bfloat16()), CORRECT),
        Case(op, "bias-short", _fp8_base(bias=torch.randn(15)), ERROR, "bias"),
        Case(op, "bias-2d", _fp8_base(bias=torch.randn(1, 16)), ERROR, "bias"),
        Case(op, "activation-swiglu", _fp8_base(activation="swiglu"), CORRECT),
        Case(op, "activation-unknown", _fp8_base(activation="tanh"), ERROR, "activation"),
        Case(op, "out_dtype-fp32", _fp8_base(out_dtype=torch.float32), CORRECT),
        Case(op, "out_dtype-int8", _fp8_base(out_dtype=torch.int8), ERROR, "out_dtype"),
        Case(op, "out_dtype-e4m3", _fp8_base(out_dtype=E4M3), ERROR, "out_dtype"),
        Case(op, "fast_accum-int", _fp8_base(fast_accum=1), ERROR, "fast_accum"),
        Case(op, "fast_accum-true", _fp8_base(fast_accum=True), CORRECT),
        Case(op, "a-nan", with_arg(base, "a", lambda t, _i: t.float().index_fill(0, torch.tensor([1]),
                                                                                float("nan")).to(E4M3)), CORRECT),
    ]
    for arg in ("scale_a", "scale_b"):
        out += [
            Case(op, f"{arg}-fp16", with_arg(base, arg, lambda t, _i: t.half()), ERROR, arg),
            Case(op, f"{arg}-fp64", with_arg(base, arg, lambda t, _i: t.double()), ERROR, arg),
            Case(op, f"{arg}-int", with_arg(base, arg, lambda t, _i: t.int()), ERROR, arg),
            Case(op, f"{arg}-float", with_arg(base, arg, lambda t, _i: 1.0), ERROR, arg),
            Case(op, f"{arg}-meta", with_arg(base, arg, lambda t, _i: torch.empty((), device="meta")), ERROR, arg),
            Case(op, f"{arg}-wrong_shape", with_arg(base, arg, lambda t, _i: torch.ones(2, 3, 4)), ERROR, arg),
            Case(op, f"{arg}-empty", with_arg(base, arg, lambda t, _i: torch.ones(0)), ERROR, arg),
            Case(op, f"{arg}-nan", with_arg(base, arg, lambda t, _i: t * float("nan")), CORRECT),
            Case(op, f"{arg}-inf", with_arg(base, arg, lambda t, _i: t * float("inf")), DOCUMENTED,
                 check=_all_non_finite),
        ]
    out += [
        Case(op, "scale_a-per_row-strided", with_arg(_fp8_base(scaling="row"), "scale_a",
                                                    lambda t, _i: layout(t, "strided")), CORRECT),
        Case(op, "scale_b-per_col-expanded", with_arg(_fp8_base(scaling="row"), "scale_b",
                                                     lambda t, _i: layout(t, "expanded")), CORRECT),
        Case(op, "scale_a-block-transposed", with_arg(_fp8_base(scaling="block", k=256), "scale_a",
                                                     lambda t, _i: layout(t, "transposed")), CORRECT),
        Case(op, "scales-block_with_tensor", with_arg(_fp8_base(scaling="block", k=256), "scale_b",
                                                     lambda t, _i: t[0, 0]), ERROR, ("scale_a", "scale_b")),
    ]
    return out

# -------------------------------------------------------------------------------------------- grouped


def _gm_base(sizes=(2, 3), k=7, n=5, dtype=torch.float32, as_list=False, key="group_sizes"):
    def build():
        t = sum(sizes)
        inputs = {"a": torch.randn(t, k).to(dtype), "b": torch.randn(len(sizes), k, n).to(dtype)}
        values = list(sizes) if key == "group_sizes" else [0, *torch.tensor(sizes).cumsum(0).tolist()]
        inputs[key] = values if as_list else torch.tensor(values, dtype=torch.int32)
        return inputs
    return build


def _groups_in_bounds(r: Run) -> None:
    """With unchecked index values the kernel stays in bounds: no NaN (a guard read or an unwritten row),
    every group lying inside ``a`` correct, rows past the last group zero."""
    out, a, b = r.outs[0], r.inputs["a"], r.inputs["b"]
    assert finite(out), "non-finite output (an out-of-bounds read of a guard, or unwritten rows)"
    if "offsets" in r.inputs:
        offs = torch.as_tensor(r.inputs["offsets"]).tolist()
    else:
        offs = [0, *torch.as_tensor(r.inputs["group_sizes"]).cumsum(0).tolist()]
    rows = a.shape[0]
    for e in range(len(offs) - 1):
        lo, hi = offs[e], offs[e + 1]
        if 0 <= lo <= hi <= rows and all(offs[i] <= offs[i + 1] for i in range(e + 1)):
            r.assert_matches(out[lo:hi], a[lo:hi].double() @ b[e].double(), f"rows {lo}:{hi} (expert {e})")
    if all(offs[i] <= offs[i + 1] for i in range(len(offs) - 1)) and offs[0] >= 0 and offs[-1] <= rows:
        assert bool((out[:offs[0]] == 0).all()), f"rows :{offs[0]} before the first group are not zero"
        assert bool((out[offs[-1]:] == 0).all()), f"rows {offs[-1]}: past the last group are not zero"


_BAD_GROUPS = {  # name -> (key, values for a of 5 rows and 2 experts)
    "sizes_negative": ("group_sizes", [-1, 6]), "sizes_past_total": ("group_sizes", [3, 4]),
    "sizes_huge": ("group_sizes", [1 << 30, 0]), "sizes_int64_huge": ("group_sizes", [1 << 40, 0]),
    "offsets_decreasing": ("offsets", [0, 4, 2]), "offsets_past_total": ("offsets", [0, 2, 9]),
    "offsets_negative": ("offsets", [-3, 2, 5]),
}
_PARTIAL_GROUPS = {  # documented: groups covering only some rows (the others come back zero)
    "sizes_short_of_total": ("group_sizes", [1, 2]), "offsets_not_from_zero": ("offsets", [1, 3, 5]),
    "offsets_short_of_total": ("offsets", [0, 1, 3]),
}


def _grouped_index_cases(op: str) -> list[Case]:
    """Bad group values: validation on (and lists, always checked) -> error naming them; off -> in bounds.
    Partial cover is valid: documented zeros, whatever the mode."""
    out = []
    for name, (key, values) in {**_BAD_GROUPS, **_PARTIAL_GROUPS}.items():
        dtype = torch.int64 if "int64" in name else torch.int32
        valid = name in _PARTIAL_GROUPS

        def build(key=key, values=values, dtype=dtype):
            inputs = _gm_base()()
            inputs.pop("group_sizes")
            return {**inputs, key: torch.tensor(values, dtype=dtype)}
        checked = DOCUMENTED if valid else ERROR
        out.append(Case(op, f"{name}-validated", build, checked, key, check=_groups_in_bounds, isolate=True))
        out.append(Case(op, f"{name}-unchecked", build, DOCUMENTED if valid else (ERROR, DOCUMENTED), key,
                        check=_groups_in_bounds, validate=False, guard=True, isolate=True))
        out.append(Case(op, f"{name}-list", with_arg(build, key, lambda t, _i: t.tolist()), checked, key,
                        check=_groups_in_bounds, isolate=True))
    return out


def _grouped_cases() -> list[Case]:
    op, base = "grouped_matmul", _gm_base()
    out = tensor_cases(op, "a", base, empty_expect=Err(("a", "group_sizes")), isolate=True)
    out += tensor_cases(op, "b", base, empty_expect=Err("group_sizes"), layouts=("strided", "column", "rows",
                                                                                 "transposed"), isolate=True)
    out += tensor_cases(op, "group_sizes", base, layouts=("strided", "column"), list_expect=CORRECT, isolate=True)
    out += [
        Case(op, "group_sizes-expanded", with_arg(_gm_base((2, 2)), "group_sizes",
                                                  lambda t, _i: layout(t, "expanded")), CORRECT, isolate=True),
        Case(op, "group_sizes-int64", with_arg(base, "group_sizes", lambda t, _i: t.long()), CORRECT, isolate=True),
        Case(op, "group_sizes-list_of_ints", _gm_base(as_list=True), CORRECT, isolate=True),
        Case(op, "group_sizes-list_of_floats", with_arg(base, "group_sizes", lambda t, _i: [2.0, 3.0]), ERROR,
             "group_sizes", isolate=True),
        Case(op, "group_sizes-wrong_count", with_arg(base, "group_sizes", lambda t, _i: t[:1]), ERROR,
             "group_sizes", isolate=True),
        Case(op, "offsets", _gm_base(key="offsets"), CORRECT, isolate=True),
        Case(op, "offsets-strided", with_arg(_gm_base(key="offsets"), "offsets", lambda t, _i: layout(t, "strided")),
             CORRECT, isolate=True),
        Case(op, "offsets-and_sizes", with_kwargs(base, offsets=torch.tensor([0, 2, 5])), ERROR,
             ("group_sizes", "offsets"), isolate=True),
        Case(op, "offsets-neither", with_kwargs(base, group_sizes=None), ERROR, ("group_sizes", "offsets"),
             isolate=True),
        Case(op, "groups-empty_expert", _gm_base((0, 5)), CORRECT, isolate=True),
        Case(op, "groups-all_empty_but_last", _gm_base((0, 0, 0, 4)), CORRECT, isolate=True),
        Case(op, "groups-one_expert", _gm_base((7,)), CORRECT, isolate=True),
        Case(op, "shape-1x1x1", _gm_base((1,), 1, 1), CORRECT, isolate=True),
        Case(op, "shape-odd_13", _gm_base((3, 7, 3), 13, 13), CORRECT, isolate=True),
        Case(op, "dtype-fp16", _gm_base(dtype=torch.float16), CORRECT, isolate=True),
        Case(op, "dtype-bf16", _gm_base(dtype=torch.bfloat16), CORRECT, isolate=True),
        Case(op, "b-fp16", with_arg(base, "b", lambda t, _i: t.half()), ERROR, ("a", "b"), isolate=True),
        Case(op, "b-other_k", with_arg(base, "b", lambda t, _i: t[:, :-1]), ERROR, "b", isolate=True),
    ]
    out += value_cases(op, "a", base, values=("nan", "inf", "big"))
    return out + _grouped_index_cases(op)


CASES = _matmul_cases() + _fp8_cases() + _grouped_cases()
