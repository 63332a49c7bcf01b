"""decode_attention's plan knobs and the two loops of ``_decode_paged_kernel``: every forced plan
(split counts, BLOCK_N below/at/above the page size, non-power-of-two pages and head dims, q_len > 1 with a
tail of several blocks, more splits than the combine reads per step) agrees with the
float64 reference under the interpreter; the split model's choices; the sm_90 compile of the sweep's
variants."""

from __future__ import annotations

import pytest
import torch
from test_attention import Guarded, _paged  # shared with the flash tests (same folder)

import kernelworks
from kernelworks.ops.attention import decode, reference
from kernelworks.ops.attention.api import decode_attention
from kernelworks.runtime.compat import TRITON
from kernelworks.runtime.device import default_device

DEVICE = default_device()
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


def _check(args, dtype, **opts):
    o = decode_attention(*args, **opts)
    ref = reference.decode_attention(*(a.double() if a.is_floating_point() else a for a in args), **opts)
    base = reference.decode_attention(*args, **opts)
    err, base_err = (o.double() - ref).abs().max().item(), (base.double() - ref).abs().max().item()
    assert o.shape == args[0].shape and o.dtype == dtype
    assert err <= 2 * base_err + (2e-5 if dtype == F32 else 2e-3), (err, base_err)
    return o


KNOBS = [
    dict(BLOCK_N=32, splits=1),                 # page 16 < BLOCK_N: gathered per-key rows, one split (direct)
    dict(BLOCK_N=16, splits=3),                 # page 16 == BLOCK_N: one table read per block
    dict(BLOCK_N=64, splits=2),                 # a block larger than most contexts: all in the masked tail
    dict(BLOCK_N=16, splits=64),                # more splits than the combine reads per step (32)
]


@pytest.mark.parametrize("knobs", KNOBS, ids=lambda k: "-".join(f"{a}{b}" for a, b in k.items()))
@pytest.mark.parametrize("page", [16, 12], ids=["p16", "p12"])
def test_forced_plans_match_float64(knobs, page):
    torch.manual_seed(30)
    args = _paged([150, 1, 37, 0], 8, 2, 32, page, F16)
    with decode.forced_plan(**knobs):
        _check(args, F16)


@pytest.mark.parametrize("knobs", [dict(BLOCK_N=16, splits=2), dict(BLOCK_N=32, splits=1)], ids=["n16", "n32"])
def test_forced_plans_qlen_softcap_odd_head_dim(knobs):
    """q_len 20 > BLOCK_N 16: the causal corner spans two tail blocks; page 64 ≥ BLOCK_N (scalar table
    reads); head_dim 24 (masked head dim)."""
    torch.manual_seed(31)
    args = _paged([90, 20, 33], 4, 1, 24, 64, F32, q_len=20)
    with decode.forced_plan(**knobs):
        _check(args, F32, softcap=4.0)


def test_plans_agree_with_each_other():
    """The same inputs through every knob set give the same output to rounding (fp32)."""
    torch.manual_seed(32)
    args = _paged([200, 64, 5], 4, 2, 16, 16, F32)
    outs = []
    for knobs in KNOBS:
        with decode.forced_plan(**knobs):
            outs.append(decode_attention(*args))
    for o in outs[1:]:
        torch.testing.assert_close(o, outs[0], atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------ index tensors: strides, bounds, validation


INDEX_PLANS = [dict(BLOCK_N=16, splits=3), dict(BLOCK_N=32, splits=1)]
"""Page 16: a block of 16 keys is one page (one table read per block, several splits and the combine);
of 32 keys, two pages (a table read per key, one split)."""


def _views(args):
    """``(name, block_table, context_lens)`` strided and expanded views holding the same values as
    ``args``' contiguous tensors (an expanded table: every sequence reads the first one's pages)."""
    table, lens = args[3], args[4]
    wide = torch.full((table.shape[0], 2 * table.shape[1]), -5, dtype=torch.int32, device=DEVICE)
    wide[:, ::2] = table
    spread = torch.full((2 * lens.shape[0],), -5, dtype=torch.int32, device=DEVICE)
    spread[::2] = lens
    shared = table[:1].expand(table.shape[0], -1)
    lens1 = lens[:1].clone()
    return [("table-every-other-column", wide[:, ::2], lens), ("table-column-major", table.t().contiguous().t(), lens),
            ("table-expanded", shared, lens), ("lens-every-other", table, spread[::2]),
            ("lens-expanded", table, lens1.expand(lens.shape[0]))]


@pytest.mark.parametrize("knobs", INDEX_PLANS, ids=["page-rows", "gathered"])
def test_strided_and_expanded_index_tensors(knobs):
    """Strided and stride-0 ``block_table`` / ``context_lens`` views give the same bits as contiguous copies
    (and the float64 answer): the kernels take their strides."""
    torch.manual_seed(33)
    args = _paged([40, 23, 37], 4, 2, 16, 16, F32)
    with decode.forced_plan(**knobs):
        for name, table, lens in _views(args):
            got = decode_attention(*args[:3], table, lens)
            want = decode_attention(*args[:3], table.contiguous(), lens.contiguous())
            assert torch.equal(got, want), name
            _check((*args[:3], table.contiguous(), lens.contiguous()), F32)


def _bad_indices(name):
    """A pool of 9 pages of 16 tokens (3 sequences of 40/23/37 tokens + 3 spare) and a bad value planted in
    a used table entry or a context length. Returns the args and the argument validation mode names."""
    torch.manual_seed(34)
    q, kc, vc, table, lens = _paged([40, 23, 37], 4, 2, 16, 16, F32)
    table, lens = table.clone(), lens.clone()
    n_pages = kc.shape[0]
    if name == "page-past-pool":
        table[0, 1] = n_pages + 3
    elif name == "negative-page":
        table[2, 2] = -3
    elif name == "first-page-bad":  # the first block every query sees is skipped: the -inf guard
        table[1, 0] = n_pages
    elif name == "ctx-past-table":
        lens[1] = 1000
    elif name == "negative-ctx":
        lens[0] = -7
    return (q, kc, vc, table, lens), "block_table" if "page" in name else "context_lens"


BAD_INDICES = ["page-past-pool", "negative-page", "first-page-bad", "ctx-past-table", "negative-ctx"]


def _decode_expected(q, kc, vc, table, lens):
    """float64 answer of bounded indices: each context clamped into ``[0, max_pages × page]``, keys on a
    page outside the pool skipped (q ``[B, Hq, D]``: the one new token sees every key kept)."""
    page, n_pages = kc.shape[1], kc.shape[0]
    out = torch.zeros(q.shape, dtype=torch.float64, device=DEVICE)
    for b, n in enumerate(lens.tolist()):
        keys = [j for j in range(min(max(n, 0), table.shape[1] * page)) if 0 <= int(table[b, j // page]) < n_pages]
        if not keys:
            continue
        pages = torch.tensor([int(table[b, j // page]) for j in keys], device=DEVICE)
        slots = torch.tensor([j % page for j in keys], device=DEVICE)
        kb, vb = kc[pages, slots].double(), vc[pages, slots].double()
        o_b, _ = reference._dense(q[b:b + 1, None].double(), kb[None], vb[None], q.shape[-1] ** -0.5, -1, 0, None)
        out[b] = o_b[0, 0]
    return out


@pytest.mark.parametrize("knobs", INDEX_PLANS, ids=["page-rows", "gathered"])
@pytest.mark.parametrize("name", BAD_INDICES)
def test_bad_indices_stay_in_bounds(monkeypatch, name, knobs):
    """Validation off: no table or context value reaches memory outside the caches, partials or output
    (caches between NaN margins, outputs between sentinel margins); the answer is that of the bounded
    indices (context clamped to the table, keys on out-of-pool pages skipped), never NaN."""
    args, _ = _bad_indices(name)
    guard = Guarded().patch(monkeypatch)
    q, kc, vc = (guard.input(t) for t in args[:3])
    with kernelworks.validation(False), decode.forced_plan(**knobs):
        o = decode_attention(q, kc, vc, *args[3:], check_indices=False)
    guard.check()
    torch.testing.assert_close(o.double(), _decode_expected(q, kc, vc, *args[3:]), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("name", BAD_INDICES)
def test_bad_indices_raise_in_validation_mode(name):
    """Validation mode names the argument; ``check_indices=True`` forces the check without it and
    ``check_indices=False`` skips it within it (the kernels stay in bounds either way)."""
    args, word = _bad_indices(name)
    with kernelworks.validation(), pytest.raises(ValueError, match=word):
        decode_attention(*args)
    with kernelworks.validation(False), pytest.raises(ValueError, match=word):
        decode_attention(*args, check_indices=True)
    with kernelworks.validation(False):
        decode_attention(*args)
    with kernelworks.validation():
        o = decode_attention(*args, check_indices=False)
    assert torch.isfinite(o).all()


def test_check_indices_bad_type():
    args = _paged([20], 4, 2, 16, 16, F32)
    with pytest.raises(TypeError, match="check_indices"):
        decode_attention(*args, check_indices=1)


def test_inputs_requiring_grad_are_refused_not_cut_off():
    """No backward: with grad mode on it raises rather than return an output outside the graph; under no_grad
    (decoding) the same call runs."""
    q, k_cache, v_cache, *rest = _paged([20], 4, 2, 16, 16, F32)
    q = q.clone().requires_grad_()
    with pytest.raises(NotImplementedError, match="decode_attention has no backward"):
        decode_attention(q, k_cache, v_cache, *rest)
    with torch.no_grad():
        assert decode_attention(q, k_cache, v_cache, *rest).shape == q.shape


def test_bf16_matches_float64():
    """bf16 under the interpreter (whose ``tl.dot`` on bf16 is wrong: the kernel reads fp32 operands there)
    and on a GPU, several splits and the combine."""
    torch.manual_seed(35)
    args = _paged([150, 1, 37, 0], 8, 2, 32, 16, BF16)
    with decode.forced_plan(BLOCK_N=16, splits=3):
        _check(args, BF16)


def test_forced_plan_bad_knobs():
    with pytest.raises(ValueError, match="unknown knobs"), decode.forced_plan(block_n=64):
        pass
    with pytest.raises(ValueError, match="BLOCK_N"), decode.forced_plan(BLOCK_N=48):
        pass


def test_split_model():
    """The wave model: batch 1 × 8 KV heads over 32k keys fills about one wave of 132 SMs × 3 CTAs (the
    old rule's 512 programs made 1.3 waves); 128 sequences × 8 heads of 1k keys need no split; a split is
    whole BLOCK_N blocks and the splits cover the table."""
    best = decode._best_splits(8, 32768 // 64, 132 * 3, 128)
    assert 40 <= best <= 49 and 8 * best <= 132 * 3
    assert decode._best_splits(128 * 8, 1024 // 64, 132 * 3, 128) == 1
    for cap, want, bn in ((32768, 49, 64), (1000, 3, 64), (16, 4, 32), (0, 1, 64)):
        n, chunk = decode._split(cap, want, bn)
        assert chunk % bn == 0 and n * chunk >= cap and (n - 1) * chunk < max(cap, 1)


SWEEP_SPILL_BOUND = {(128, 8, 3): 0 if TRITON < (3, 8) else 16}
"""B/thread a sweep variant may spill on sm_90: none with triton 3.6 (the GPU image); triton 3.8 gives the
8-warp 128-key plan 128 registers (3.6: 167) and spills 16 B (kw inspect; its speed on a GPU not measured)."""


def test_sm90_sweep_variants_compile_without_spills():
    """Each plan the GPU sweep tries compiles for sm_90 without spills and with the occupancy the plan
    model assumes (``CTAS_PER_SM``)."""
    from kernelworks.inspect import inspect_op
    from kernelworks.ops.attention.spec import DECODE_ATTENTION_SPEC

    for (bn, warps, stages), ctas in decode.CTAS_PER_SM.items():
        if (bn, warps, stages) not in ((64, 4, 3), (32, 4, 4), (128, 8, 3)):
            continue  # the sweep's main variants (the others compile alike; kept fast)
        reports = inspect_op(DECODE_ATTENTION_SPEC, "b8-ctx32k-gqa4", "sm_90",
                             config={"BLOCK_N": bn, "num_warps": warps, "num_stages": stages})
        split = next(r for r in reports if r.name == "_decode_paged_kernel")
        assert split.spill_bytes <= SWEEP_SPILL_BOUND.get((bn, warps, stages), 0), (bn, warps, stages, TRITON)
        assert split.occupancy.blocks_per_sm == ctas, (bn, warps, stages, split.occupancy.blocks_per_sm)


# ------------------------------------------------------------------------ forward plan options (Hopper)


@pytest.mark.interpreter  # a Hopper GPU has TMA: nothing to refuse there
def test_forced_fwd_plan_tma_needs_hopper():
    from kernelworks.ops.attention import forward
    from kernelworks.ops.attention.api import flash_attention

    q = torch.randn(1, 20, 2, 16, device=DEVICE)
    with pytest.raises(ValueError, match="TMA"), forward.forced_fwd_plan(TMA=True):
        flash_attention(q, q, q)
    with pytest.raises(ValueError, match="unknown knobs"), forward.forced_fwd_plan(tma=True):
        pass


@pytest.mark.parametrize("knobs", [dict(TMA=True), dict(TMA=True, num_stages=4)], ids=["s3", "s4"])
def test_sm90_forward_tma_compiles(knobs):
    """The descriptor path compiles for sm_90 with TMA loads (UTMALDG), wgmma and no spills."""
    from kernelworks.inspect import inspect_op
    from kernelworks.ops.attention import forward
    from kernelworks.ops.attention.spec import FLASH_ATTENTION_SPEC

    with forward.forced_fwd_plan(**knobs):
        reports = inspect_op(FLASH_ATTENTION_SPEC, "b4-h32-s4k-d128-causal", "sm_90")
    r = next(r for r in reports if r.name == "_attn_fwd_kernel")
    assert r.spill_bytes == 0 and r.mix.count("UTMALDG") > 0 and r.mix.count("HGMMA") > 0
    assert r.constexprs.get("TMA") is True


# ------------------------------------------------------------------ flash_attention's decode shapes (dense cache)


def _dense_check(q, k, v, dtype, **opts):
    """flash_attention on decode shapes (inference) against the float64 reference of flash_attention."""
    with torch.no_grad():
        o = kernelworks.flash_attention(q, k, v, **opts)
    ref = reference.flash_attention(q.double(), k.double(), v.double(), **opts)
    base = reference.flash_attention(q, k, v, **opts)
    err, base_err = (o.double() - ref).abs().max().item(), (base.double() - ref).abs().max().item()
    assert o.shape == q.shape and o.dtype == dtype
    assert err <= 2 * base_err + (2e-5 if dtype == F32 else 2e-3), (err, base_err)


@pytest.fixture
def dense_calls(monkeypatch):
    """Counts the calls flash_attention hands to the split-KV decode kernel."""
    from kernelworks.ops.attention import api

    calls = []
    real = api._dense_decode._forward
    monkeypatch.setattr(api._dense_decode, "_forward", lambda *a: calls.append(a) or real(*a))
    return calls


@pytest.mark.parametrize("seq_q,seq_k", [(1, 77), (3, 130), (16, 64), (1, 300)])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
def test_decode_shaped_flash_calls_take_split_kv(dense_calls, seq_q, seq_k, dtype):
    """A Hugging Face cache ``[B, Hkv, S, D]`` (bhsd) with a few new queries, GQA 4:1, causal bottom-right:
    the split-KV kernel (several splits past 256 keys on the interpreter's plan) gives flash's answer."""
    torch.manual_seed(40)
    q = torch.randn(3, 8, seq_q, 32, device=DEVICE).to(dtype)
    k, v = (torch.randn(3, 2, seq_k, 32, device=DEVICE).to(dtype) for _ in range(2))
    _dense_check(q, k, v, dtype, causal=True, layout="bhsd")
    assert len(dense_calls) == 1


def test_decode_shaped_softcap_noncontiguous_cache(dense_calls):
    """Soft-capping, a cache sliced from a longer buffer (HF's static cache: its own strides), bshd."""
    torch.manual_seed(41)
    q = torch.randn(2, 1, 4, 24, device=DEVICE)
    k_buf, v_buf = (torch.randn(2, 200, 2, 24, device=DEVICE) for _ in range(2))
    k, v = k_buf[:, :150], v_buf[:, :150]
    _dense_check(q, k, v, F32, causal=False, softcap=5.0, softmax_scale=0.3)
    assert len(dense_calls) == 1


def test_decode_cache_growing_token_by_token(dense_calls):
    """Decoding step after step (the cache one key longer each time, across a page-size doubling at 128):
    every step matches the reference."""
    torch.manual_seed(42)
    k_all, v_all = (torch.randn(1, 2, 140, 16, device=DEVICE) for _ in range(2))
    for seq_k in (120, 127, 128, 129, 140):
        q = torch.randn(1, 4, 1, 16, device=DEVICE)
        _dense_check(q, k_all[:, :, :seq_k], v_all[:, :, :seq_k], F32, causal=True, layout="bhsd")
    assert len(dense_calls) == 5


@pytest.mark.parametrize("case", ["grad", "lse", "window", "noncausal-q2", "q17", "short-kv", "varlen", "wide-group"])
def test_flash_calls_that_stay_on_the_flash_kernel(dense_calls, case):
    """Calls the decode kernel does not compute (a gradient or the lse wanted, a window that drops keys,
    several non-causal queries, more than 16 queries, a cache shorter than 64, more than 64 packed query rows
    for one KV head) stay on the flash kernel, with the right answer."""
    torch.manual_seed(43)
    seq_q = {"q17": 17, "noncausal-q2": 2, "wide-group": 5}.get(case, 1)
    seq_k = 40 if case == "short-kv" else 100
    heads_q = 32 if case == "wide-group" else 4  # 5 tokens × 16 heads per KV head: 80 rows
    q = torch.randn(2, seq_q, heads_q, 16, device=DEVICE, requires_grad=case == "grad")
    k, v = (torch.randn(2, seq_k, 2, 16, device=DEVICE) for _ in range(2))
    opts = dict(causal=case != "noncausal-q2", window=(10, 0) if case == "window" else None)
    if case == "varlen":
        cu = torch.tensor([0, 1, 2], dtype=torch.int32, device=DEVICE)
        cu_k = torch.tensor([0, 100, 200], dtype=torch.int32, device=DEVICE)
        o = kernelworks.flash_attention(q.reshape(2, heads_q, 16), k.reshape(200, 2, 16), v.reshape(200, 2, 16),
                                        cu_seqlens_q=cu, cu_seqlens_k=cu_k, max_seqlen_q=1, max_seqlen_k=100,
                                        **opts)
        ref = reference.flash_attention(q, k, v, **opts).reshape(2, heads_q, 16)
    else:
        o = kernelworks.flash_attention(q, k, v, return_lse=case == "lse", **opts)
        o = o[0] if case == "lse" else o
        ref = reference.flash_attention(q.detach(), k, v, **opts)
    torch.testing.assert_close(o.detach(), ref, atol=2e-5, rtol=2e-5)
    assert dense_calls == []


def test_decode_shaped_window_that_does_not_bite(dense_calls):
    """A sliding window at least as long as the cache drops nothing: the decode kernel takes it."""
    torch.manual_seed(44)
    q = torch.randn(2, 1, 4, 16, device=DEVICE)
    k, v = (torch.randn(2, 100, 2, 16, device=DEVICE) for _ in range(2))
    _dense_check(q, k, v, F32, causal=True, window=(99, 0))
    assert len(dense_calls) == 1


def test_decode_shaped_stays_in_bounds(monkeypatch, dense_calls):
    """Inputs between NaN margins, outputs between sentinels: the dense decode reads and writes nothing
    outside its tensors (a page size past the cache length must not reach past it)."""
    from test_attention import Guarded

    torch.manual_seed(45)
    guard = Guarded()
    guard.patch(monkeypatch)
    q = guard.input(torch.randn(2, 4, 3, 16, device=DEVICE))
    k = guard.input(torch.randn(2, 2, 70, 16, device=DEVICE))
    v = guard.input(torch.randn(2, 2, 70, 16, device=DEVICE))
    _dense_check(q, k, v, F32, causal=True, layout="bhsd")
    guard.check()
    assert len(dense_calls) == 1


def test_head_dim_256_plans_come_from_the_h100_tune():
    """Hopper d 256: descriptor tiles 64×64 at one warpgroup, 3 stages; without descriptors the pointer
    fallback is the tune's best pointer plan, not the descriptor tiles (which spill on pointers)."""
    from kernelworks.ops.attention.forward import FwdPlan, fwd_plan, pointer_fallback

    hopper = fwd_plan(256, False, (9, 0))
    assert hopper == FwdPlan(64, 64, 256, 4, 3, TMA=True)
    assert pointer_fallback(hopper) == FwdPlan(128, 32, 256, 8, 3)
    assert fwd_plan(256, False, (8, 0)) == FwdPlan(64, 64, 256, 8, 2)
    assert pointer_fallback(fwd_plan(128, False, (9, 0))) == FwdPlan(128, 64, 128, 8, 3)


@pytest.mark.parametrize("knobs", [dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3, TMA=True),
                                   dict(BLOCK_M=128, BLOCK_N=32, num_warps=8, num_stages=3, TMA=False)],
                         ids=["tma", "pointer"])
def test_sm90_head_dim_256_plans_compile_without_spills(knobs):
    from kernelworks.inspect import inspect_op
    from kernelworks.ops.attention import forward
    from kernelworks.ops.attention.spec import FLASH_ATTENTION_SPEC

    with forward.forced_fwd_plan(**knobs):
        reports = inspect_op(FLASH_ATTENTION_SPEC, "b2-hq8-hkv4-s4k-d256-causal", "sm_90")
    r = next(r for r in reports if r.name == "_attn_fwd_kernel")
    assert r.spill_bytes == 0 and r.mix.count("HGMMA") > 0
    assert r.constexprs.get("TMA") is knobs["TMA"] and r.constexprs.get("BLOCK_N") == knobs["BLOCK_N"]
