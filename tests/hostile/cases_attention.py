"""flash_attention (dense and varlen packed; ``cu_seqlens`` are index values) and decode_attention (a paged
KV cache: ``block_table`` and ``context_lens`` are index values).

Documented unchecked behaviour (validation off), from the docstrings: varlen tables are clamped into the
packed length (a decreasing entry makes an empty sequence) and rows no sequence covers are zero; decode
context lengths are clamped to ``[0, max_pages × page_size]`` and keys on pages outside the pool skipped.
"""

from __future__ import annotations

import math

import torch

import kernelworks as kw
from kernelworks.ops.attention import reference

from .common import (
    CORRECT,
    DOCUMENTED,
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
from .harness import Case, Run, finite

FAMILY = "attention"
OPS = [
    spec_op("flash_attention", FAMILY, kw.flash_attention),
    # the decode reference takes no check_indices (a host-check switch, not math)
    spec_op("decode_attention", FAMILY, kw.decode_attention,
            reference=lambda check_indices=None, **kw_: reference.decode_attention(**kw_)),
]

D = 16

# ------------------------------------------------------------------------------------------------- flash


def _fa_base(b=2, sq=5, sk=5, hq=2, hkv=1, d=D, dtype=torch.float32, **options):
    def build():
        return {"q": torch.randn(b, sq, hq, d).to(dtype), "k": torch.randn(b, sk, hkv, d).to(dtype),
                "v": torch.randn(b, sk, hkv, d).to(dtype), **options}
    return build


def _varlen_base(cu=(0, 3, 7), cu_k=None, hq=2, hkv=1, dtype=torch.float32, **options):
    cu_k = cu if cu_k is None else cu_k

    def build():
        tq, tk = cu[-1], cu_k[-1]
        return {"q": torch.randn(tq, hq, D).to(dtype), "k": torch.randn(tk, hkv, D).to(dtype),
                "v": torch.randn(tk, hkv, D).to(dtype), "cu_seqlens_q": torch.tensor(cu, dtype=torch.int32),
                "cu_seqlens_k": torch.tensor(cu_k, dtype=torch.int32), **options}
    return build


def _spans(cu: torch.Tensor, total: int) -> list[tuple[int, int]]:
    """The documented clamping: each entry into ``[0, total]``, a sequence's end at least its start."""
    out = []
    for lo, hi in zip(cu[:-1].tolist(), cu[1:].tolist()):
        s = min(max(lo, 0), total)
        out.append((s, min(max(hi, s), total)))
    return out


def _varlen_clamped(r: Run) -> None:
    """Unchecked varlen tables: outputs finite (no guard read, no unwritten row), rows no sequence covers
    zero, and — where the clamped sequences do not overlap — each sequence exact."""
    q, k = r.inputs["q"], r.inputs["k"]
    o = r.outs[0]
    assert finite(o), "non-finite output (an out-of-bounds read of a guard, or rows never written)"
    sq, sk = _spans(r.inputs["cu_seqlens_q"], q.shape[0]), _spans(r.inputs["cu_seqlens_k"], k.shape[0])
    count = torch.zeros(q.shape[0], dtype=torch.int64)
    for s, e in sq:
        count[s:e] += 1
    assert bool((o[count == 0] == 0).all()), f"rows covered by no sequence are not zero: {(count == 0).nonzero()}"
    if bool((count > 1).any()):
        return
    for (qs, qe), (ks, ke) in zip(sq, sk):
        if qe > qs:
            ref = r.reference(q=q[qs:qe], k=k[ks:ke], v=r.inputs["v"][ks:ke],
                              cu_seqlens_q=torch.tensor([0, qe - qs]), cu_seqlens_k=torch.tensor([0, ke - ks]))[0]
            r.assert_matches(o[qs:qe], ref, f"rows {qs}:{qe}")


def _future_value_nan(r: Run) -> None:
    """Causality is exact: a NaN value at the last key reaches only the last query row (the reference's
    0·NaN would spread it; compare the earlier rows with the NaN cleaned away)."""
    o, v = r.outs[0], r.inputs["v"]
    assert bool(o[:, -1].isnan().all()), "the last query row sees the NaN key: its output must be NaN"
    ref = r.reference(v=torch.nan_to_num(v, nan=0.0))[0]
    r.assert_matches(o[:, :-1], ref[:, :-1], "rows before the NaN key")


def _flash_cases() -> list[Case]:
    op, base = "flash_attention", _fa_base()
    varlen = _varlen_base()
    out = []
    for arg in ("q", "k", "v"):
        out += tensor_cases(op, arg, base, rank_expect=ERROR)
    out += [
        Case(op, "k-head_dim_mismatch", with_arg(base, "k", lambda t, _i: t[..., :-1]), ERROR, ("k", "v")),
        Case(op, "v-shape_mismatch", with_arg(base, "v", lambda t, _i: t[:, :-1]), ERROR, "v"),
        Case(op, "k-heads_not_dividing", _fa_base(hq=3, hkv=2), ERROR, "k"),
        Case(op, "k-batch_mismatch", with_kwargs(base, k=torch.randn(1, 5, 1, D), v=torch.randn(1, 5, 1, D)),
             ERROR, "k"),
        Case(op, "k-fp16", with_arg(base, "k", lambda t, _i: t.half()), ERROR, ("q", "k", "v")),
        Case(op, "q-head_dim_257", _fa_base(d=257), ERROR, "q"),
        Case(op, "shape-size1", _fa_base(1, 1, 1, 1, 1), CORRECT),
        Case(op, "shape-odd_7_13", _fa_base(1, 7, 13, 3, 1, causal=True), CORRECT),
        Case(op, "shape-head_dim_3", _fa_base(d=3), CORRECT),
        Case(op, "shape-head_dim_1", _fa_base(d=1), CORRECT),
        Case(op, "shape-sq_gt_sk_causal", _fa_base(sq=7, sk=3, causal=True), CORRECT),
        Case(op, "shape-mqa_4_heads", _fa_base(hq=4, hkv=1), CORRECT),
        Case(op, "dtype-fp16", _fa_base(dtype=torch.float16, causal=True), CORRECT),
        Case(op, "dtype-bf16", _fa_base(dtype=torch.bfloat16), CORRECT),
        Case(op, "layout-bhsd", with_kwargs(_fa_base(), layout="bhsd"), CORRECT),
        Case(op, "v-nan_future_causal", with_kwargs(with_arg(base, "v", lambda t, _i: plant(t, float("nan"),
                                                                                       (slice(None), -1))),
                                                   causal=True), DOCUMENTED, check=_future_value_nan),
        Case(op, "k-nan_future_causal", with_kwargs(with_arg(base, "k", lambda t, _i: plant(t, float("nan"),
                                                                                       (slice(None), -1))),
                                                   causal=True), CORRECT),
        Case(op, "return_lse", with_kwargs(base, return_lse=True, causal=True, window=(1, 0)), CORRECT),
    ]
    for arg in ("q", "k", "v"):
        out += value_cases(op, arg, base)
    out += option_cases(op, base, [
        ("str", "causal", "yes", ERROR), ("int", "causal", 1, ERROR), ("None", "causal", None, ERROR),
        ("int", "window", 2, CORRECT), ("pair", "window", (2, 1), CORRECT), ("unbounded", "window", (-1, -1), CORRECT),
        ("zero", "window", 0, CORRECT), ("negative", "window", -2, ERROR), ("pair_negative", "window", (3, -2), ERROR),
        ("one_tuple", "window", (1,), ERROR), ("str", "window", "3", ERROR), ("bool", "window", True, ERROR),
        ("float", "window", 2.0, ERROR), ("float_pair", "window", (2.0, 0), ERROR),
        ("upper", "layout", "BSHD", ERROR), ("None", "layout", None, ERROR), ("unknown", "layout", "sbhd", ERROR),
        ("int", "return_lse", 1, (ERROR, CORRECT)),
    ])
    out += float_option_cases(op, base, "softmax_scale")
    out += float_option_cases(op, base, "softcap", extra=[("thirty", 30.0, CORRECT)])
    # varlen
    out += [
        Case(op, "varlen", varlen, CORRECT),
        Case(op, "varlen-causal", with_kwargs(varlen, causal=True), CORRECT),
        Case(op, "varlen-empty_sequence", _varlen_base((0, 3, 3, 7)), CORRECT),
        Case(op, "varlen-empty_keys", _varlen_base((0, 3, 7), (0, 0, 5)), CORRECT),
        Case(op, "varlen-max_seqlen_given", with_kwargs(varlen, max_seqlen_q=4, max_seqlen_k=4), CORRECT),
        Case(op, "varlen-max_seqlen_larger", with_kwargs(varlen, max_seqlen_q=100, max_seqlen_k=100), CORRECT),
        Case(op, "varlen-only_q", with_kwargs(varlen, cu_seqlens_k=None), ERROR, ("cu_seqlens_q", "cu_seqlens_k")),
        Case(op, "varlen-shape_mismatch", with_arg(varlen, "cu_seqlens_k", lambda t, _i: torch.tensor(
            [0, 2, 5, 7], dtype=torch.int32)), ERROR, "cu_seqlens_k"),
        Case(op, "varlen-layout_bhsd", with_kwargs(varlen, layout="bhsd"), ERROR, "layout"),
        Case(op, "varlen-q_rank4", with_arg(varlen, "q", lambda t, _i: t[None]), ERROR, "q"),
    ]
    for name in ("max_seqlen_q", "max_seqlen_k"):
        out += option_cases(op, varlen, [("float", name, 4.0, ERROR), ("negative", name, -1, ERROR),
                                          ("bool", name, True, ERROR), ("str", name, "4", ERROR)])
    for name in ("cu_seqlens_q", "cu_seqlens_k"):
        out += tensor_cases(op, name, varlen, layouts=("strided", "column"), dtypes=(torch.int64,),
                            empty_expect=ERROR, isolate=True)
        out += [Case(op, f"{name}-one_entry", with_arg(varlen, name, lambda t, _i: t[:1]), ERROR,
                     ("cu_seqlens_q", "cu_seqlens_k"), isolate=True)]
    return out + _varlen_index_cases(op)


_BAD_CU = {  # name -> (argument, table) for 7 packed tokens
    "decreasing": ((0, 5, 3), "cu_seqlens_q"), "past_total": ((0, 3, 9), "cu_seqlens_q"),
    "negative": ((-2, 3, 7), "cu_seqlens_q"), "not_from_zero": ((1, 3, 7), "cu_seqlens_q"),
    "huge": ((0, 1 << 30, 7), "cu_seqlens_q"), "k_decreasing": ((0, 6, 2), "cu_seqlens_k"),
    "k_past_total": ((0, 3, 100), "cu_seqlens_k"), "k_negative": ((0, -4, 7), "cu_seqlens_k"),
}


def _varlen_index_cases(op: str) -> list[Case]:
    out = []
    for name, (table, arg) in _BAD_CU.items():
        bad = with_arg(_varlen_base(), arg, lambda t, _i, table=table: torch.tensor(table, dtype=torch.int32))
        for given in (False, True):  # with max_seqlen_* given, no host sync at all
            build = with_kwargs(bad, max_seqlen_q=7, max_seqlen_k=7) if given else bad
            sfx = "-max_given" if given else ""
            out.append(Case(op, f"cu-{name}{sfx}-validated", build, ERROR, arg, isolate=True))
            out.append(Case(op, f"cu-{name}{sfx}-unchecked", with_kwargs(build, causal=True), (ERROR, DOCUMENTED),
                            arg, check=_varlen_clamped, validate=False, guard=True, isolate=True))
    short = _varlen_base((0, 3, 5))
    short_q = with_arg(_varlen_base(), "cu_seqlens_q", lambda t, _i: torch.tensor([0, 3, 5], dtype=torch.int32))
    small_max = with_kwargs(_varlen_base(), max_seqlen_q=2, max_seqlen_k=2)
    out += [
        # a table ending before the packed length is valid: the rows past it are zero
        Case(op, "cu-short_of_total", with_kwargs(short, q=torch.randn(7, 2, D)), DOCUMENTED,
             check=_varlen_clamped, isolate=True),
        Case(op, "cu-short_of_total-unchecked", short_q, DOCUMENTED, check=_varlen_clamped, validate=False,
             guard=True, isolate=True),
        Case(op, "max_seqlen_q-too_small-validated", small_max, ERROR, ("max_seqlen_q", "max_seqlen_k"),
             isolate=True),
        Case(op, "max_seqlen_q-too_small-unchecked", small_max, (ERROR, DOCUMENTED), "max_seqlen_q",
             check=_varlen_clamped, validate=False, guard=True, isolate=True),
    ]
    return out

# ------------------------------------------------------------------------------------------------ decode

PAGES, PAGE = 6, 4


def _dec_base(b=2, hq=2, hkv=1, d=D, lens=(5, 7), max_pages=2, dtype=torch.float32, q_len=None, **options):
    def build():
        q_shape = (b, hq, d) if q_len is None else (b, q_len, hq, d)
        table = torch.randperm(PAGES)[: b * max_pages].reshape(b, max_pages).to(torch.int32)
        return {"q": torch.randn(q_shape).to(dtype), "k_cache": torch.randn(PAGES, PAGE, hkv, d).to(dtype),
                "v_cache": torch.randn(PAGES, PAGE, hkv, d).to(dtype), "block_table": table,
                "context_lens": torch.tensor(lens, dtype=torch.int32), **options}
    return build


def _paged_skipping(r: Run) -> None:
    """Unchecked decode indices: each context length clamped to ``[0, max_pages × page_size]``, keys on
    pages outside ``[0, num_pages)`` skipped; the output is attention over the keys that remain (zero when
    none)."""
    q, kc, vc = r.inputs["q"], r.inputs["k_cache"], r.inputs["v_cache"]
    table, lens = r.inputs["block_table"], r.inputs["context_lens"]
    o = r.outs[0]
    assert finite(o), "non-finite output (an out-of-bounds read of a guard)"
    scale = r.inputs.get("softmax_scale") or 1.0 / math.sqrt(q.shape[-1])
    for b in range(q.shape[0]):
        n = min(max(int(lens[b]), 0), table.shape[1] * PAGE)
        keys = [(int(table[b, j // PAGE]), j % PAGE) for j in range(n)]
        keys = [(p, s) for p, s in keys if 0 <= p < kc.shape[0]]
        kb = torch.stack([kc[p, s] for p, s in keys]) if keys else kc[:0, 0]
        vb = torch.stack([vc[p, s] for p, s in keys]) if keys else vc[:0, 0]
        ref = reference.flash_attention(q[b][None, None].double(), kb[None].double(), vb[None].double(),
                                        softmax_scale=scale)[0, 0]
        r.assert_matches(o[b], ref, f"sequence {b}")


_BAD_PAGES = {  # name -> (argument, new value of the used entry [1, 1] or of context_lens[1])
    "page_eq_pool": ("block_table", PAGES), "page_negative": ("block_table", -1), "page_huge": ("block_table", 1 << 30),
    "len_past_table": ("context_lens", 2 * PAGE + 3), "len_negative": ("context_lens", -5),
    "len_huge": ("context_lens", 1 << 30),
}


def _decode_index_cases(op: str) -> list[Case]:
    out = []
    for name, (arg, value) in _BAD_PAGES.items():
        def poke(t, _i, value=value):
            t = t.clone()
            t[(1, 1) if t.dim() == 2 else 1] = value
            return t
        bad = with_arg(_dec_base(), arg, poke)
        out += [
            Case(op, f"{name}-validated", bad, ERROR, arg, isolate=True),
            Case(op, f"{name}-unchecked", bad, (ERROR, DOCUMENTED), arg, check=_paged_skipping, validate=False,
                 guard=True, isolate=True),
            Case(op, f"{name}-check_indices_true", with_kwargs(bad, check_indices=True), ERROR, arg,
                 validate=False, isolate=True),
            Case(op, f"{name}-check_indices_false", with_kwargs(bad, check_indices=False), DOCUMENTED, arg,
                 check=_paged_skipping, guard=True, isolate=True),
        ]
    # an entry past a sequence's pages is never read: garbage there is fine in every mode
    def garbage_in_unused(t, _i):
        t = t.clone()
        t[0, 1] = -7  # sequence 0 has 3 tokens: one page
        return t
    unused = with_arg(_dec_base(lens=(3, 7)), "block_table", garbage_in_unused)
    out += [Case(op, "page_unused_garbage", unused, CORRECT, isolate=True),
            Case(op, "page_unused_garbage-unchecked", unused, CORRECT, validate=False, guard=True, isolate=True)]
    return out


def _decode_cases() -> list[Case]:
    op, base = "decode_attention", _dec_base()
    lens_of_batch = Err(("q", "block_table", "context_lens"))
    out = tensor_cases(op, "q", base, rank_expect=lens_of_batch)
    for arg in ("k_cache", "v_cache"):
        out += tensor_cases(op, arg, base)
    out += tensor_cases(op, "block_table", base, dtypes=(torch.int64,), isolate=True,
                        rank_expect=ERROR, empty_expect=Err(("block_table", "q")))
    out += tensor_cases(op, "context_lens", base, dtypes=(torch.int64,), isolate=True,
                        empty_expect=Err(("context_lens", "q")))
    out += [
        Case(op, "q-speculative_3_tokens", _dec_base(q_len=3), CORRECT),
        Case(op, "q-head_dim_mismatch", with_arg(base, "q", lambda t, _i: t[..., :-1]), ERROR, ("q", "k_cache")),
        Case(op, "k_cache-heads_not_dividing", _dec_base(hq=3, hkv=2), ERROR, "k_cache"),
        Case(op, "v_cache-shape_mismatch", with_arg(base, "v_cache", lambda t, _i: t[:-1]), ERROR, "v_cache"),
        Case(op, "v_cache-fp16", with_arg(base, "v_cache", lambda t, _i: t.half()), ERROR,
             ("q", "k_cache", "v_cache")),
        Case(op, "block_table-batch_mismatch", with_arg(base, "block_table", lambda t, _i: t[:1]), ERROR,
             "block_table"),
        Case(op, "context_lens-zero", with_arg(base, "context_lens", lambda t, _i: torch.zeros_like(t)), CORRECT),
        Case(op, "context_lens-full", _dec_base(lens=(8, 8)), CORRECT),
        Case(op, "shape-size1", _dec_base(1, 1, 1, lens=(1,), max_pages=1), CORRECT),
        Case(op, "shape-odd_heads_3", _dec_base(hq=3, hkv=3, lens=(3, 7)), CORRECT),
        Case(op, "shape-head_dim_3", _dec_base(d=3), CORRECT),
        Case(op, "dtype-fp16", _dec_base(dtype=torch.float16), CORRECT),
        Case(op, "dtype-bf16", _dec_base(dtype=torch.bfloat16), CORRECT),
        Case(op, "check_indices-str", with_kwargs(base, check_indices="yes"), ERROR, "check_indices"),
        Case(op, "check_indices-int", with_kwargs(base, check_indices=1), ERROR, "check_indices"),
    ]
    out += value_cases(op, "q", base)
    out += value_cases(op, "v_cache", base, values=("nan", "inf", "big"))
    out += float_option_cases(op, base, "softmax_scale")
    out += float_option_cases(op, base, "softcap", extra=[("thirty", 30.0, CORRECT)])
    return out + _decode_index_cases(op)


CASES = _flash_cases() + _decode_cases()
