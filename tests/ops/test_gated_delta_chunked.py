"""The chunk-parallel prefill forward (``prefill_chunked.py``: K1a chunk inverse, K1b W/Ũ, K2 state scan
with the output fused or K3 output kernel) against the float64 recurrence: chunk tails, grouped heads, initial and final
state, varlen with 3 sequences, write strength, strided inputs, what ``saved`` holds (chunk-local gates,
chunk-start states); causality (a NaN or inf in token t reaches no earlier output), reset gates, and
out-of-range ``cu_seqlens`` that stay inside guarded buffers; and sm_90 compilation of every kernel
without spills. CPU tests run under Triton's
interpreter on tiny heads (fp32/fp16: the interpreter's bf16 ``tl.dot`` is wrong); ``gpu`` tests take the
real shapes in bf16."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional

from kernelworks.ops.gated_delta import reference
from kernelworks.ops.gated_delta.prefill_chunked import chunked_prefill_fwd, kernel_chunk, segmented_prefill_fwd
from kernelworks.runtime.device import default_device

DEVICE = default_device()
F32, F16, F64, BF16 = torch.float32, torch.float16, torch.float64, torch.bfloat16
MODES = [True, False]
MODE_IDS = ["fused", "3-kernel"]
FUSED_SCAN_SPILL_B = 64
"""The fused scan's sm_90 spill bound (bytes/thread): its GPU plan sits at 255 registers and spills a little
in the varlen + initial state + write strength specialisation (the dense bench shape: none)."""
EXACT_SCAN_SPILL_B = 160
"""The same scan's EXACT build (every product causal: the launch that redoes only the programs whose last
output chunk is not finite, none on clean inputs) may spill this much (104–128 B at 255 registers)."""


def _inputs(B, T, hq, hv, K, V, *, dtype=F32, seed=0, write=False, h0=None):
    torch.manual_seed(seed)
    x = {
        "q": torch.randn(B, T, hq, K, device=DEVICE).to(dtype),
        "k": functional.normalize(torch.randn(B, T, hq, K, device=DEVICE), dim=-1).to(dtype),
        "v": torch.randn(B, T, hv, V, device=DEVICE).to(dtype),
        "g": functional.logsigmoid(torch.randn(B, T, hv, device=DEVICE) + 2.0),
        "beta": torch.rand(B, T, hv, device=DEVICE),
    }
    if write:
        x["write_strength"] = torch.rand(B, T, hv, device=DEVICE)
    if h0 is not None:
        x["initial_state"] = torch.randn(h0, hv, V, K, device=DEVICE)
    return x


def _f64(d):
    return {n: (t.to(F64) if isinstance(t, torch.Tensor) and t.is_floating_point() else t) for n, t in d.items()}


def _run(x, *, fuse, chunk, cu=None, final=True, store_states=False, scale=None):
    K = x["q"].shape[-1]
    return chunked_prefill_fwd(x["q"], x["k"], x["v"], x["g"], x["beta"], scale=scale or K ** -0.5,
                               initial_state=x.get("initial_state"), output_final_state=final, cu_seqlens=cu,
                               chunk_size=chunk, write_strength=x.get("write_strength"), fuse_output=fuse,
                               store_states=store_states)


def _ref(x, *, cu=None, scale=None):
    K = x["q"].shape[-1]
    return reference.gated_delta_rule(**_f64(x), output_final_state=True, cu_seqlens=cu, scale=scale or K ** -0.5)


@pytest.mark.parametrize("fuse", MODES, ids=MODE_IDS)
@pytest.mark.parametrize(("T", "chunk"), [(1, 16), (17, 16), (70, 32), (70, 64)])
def test_matches_reference_fp32(T, chunk, fuse):
    """Tails (T not a multiple of the chunk, T = 1), H_v/H_qk = 2, initial and final state."""
    x = _inputs(2, T, 1, 2, 16, 32, h0=2)
    o, final, saved = _run(x, fuse=fuse, chunk=chunk)
    o_ref, f_ref = _ref(x)
    assert saved["chunk"] == kernel_chunk(chunk)  # the request in the interpreter; the GPU runs 64
    torch.testing.assert_close(o.double(), o_ref, atol=3e-5, rtol=1e-5)
    torch.testing.assert_close(final.double(), f_ref, atol=3e-5, rtol=1e-5)


@pytest.mark.parametrize("chunk", [16, 64])
@pytest.mark.parametrize("inv_product", [True, False], ids=["product", "substitution"])
def test_diagonal_inverse_matches_reference(chunk, inv_product, monkeypatch):
    """Both inverses of the diagonal blocks — the product form (the default) and forward substitution —
    with A far from small: chunk 64 has the GPU's 16-row blocks (A⁸ ≠ 0; dropping that factor fails this
    test), chunk 16 4-row ones."""
    from kernelworks.ops.gated_delta import prefill_chunked

    plan = prefill_chunked._plan
    monkeypatch.setattr(prefill_chunked, "_plan", lambda *a: plan(*a)._replace(inv_product=inv_product))
    x = _inputs(1, 70, 1, 2, 16, 16, h0=1)
    # correlated keys, weak decay, strong erase: |A_ij| near 1, so A⁸ is far from negligible
    x["k"] = functional.normalize(1.0 + 0.5 * torch.randn_like(x["k"]), dim=-1)
    x["g"] = torch.full_like(x["g"], -0.01)
    x["beta"] = 0.5 + 0.5 * x["beta"]
    o, final, _ = _run(x, fuse=False, chunk=chunk)
    o_ref, f_ref = _ref(x)
    torch.testing.assert_close(o.double(), o_ref, atol=3e-5, rtol=1e-5)
    torch.testing.assert_close(final.double(), f_ref, atol=3e-5, rtol=1e-5)


@pytest.mark.parametrize("fuse", MODES, ids=MODE_IDS)
def test_matches_reference_fp16(fuse):
    """16-bit operands (T, W, Ũ, U rounded to fp16 as on the GPU): within the fp16 rounding."""
    x = _inputs(2, 40, 1, 2, 16, 32, dtype=F16, h0=2)
    o, final, _ = _run(x, fuse=fuse, chunk=16)
    o_ref, f_ref = _ref(x)
    assert o.dtype == F16 and final.dtype == F32
    assert (o.double() - o_ref).abs().max() <= 4e-3
    assert (final.double() - f_ref).abs().max() <= 4e-3


@pytest.mark.parametrize("fuse", MODES, ids=MODE_IDS)
def test_write_strength_and_ratio4(fuse):
    x = _inputs(1, 24, 1, 4, 16, 16, write=True)
    o, final, _ = _run(x, fuse=fuse, chunk=16)
    o_ref, f_ref = _ref(x)
    torch.testing.assert_close(o.double(), o_ref, atol=3e-5, rtol=1e-5)
    torch.testing.assert_close(final.double(), f_ref, atol=3e-5, rtol=1e-5)


@pytest.mark.interpreter  # the saved layout at chunk 16 (the GPU always runs chunk 64)
@pytest.mark.parametrize("fuse", MODES, ids=MODE_IDS)
def test_varlen_three_sequences(fuse):
    """Packed sequences of 5, 33 and 22 tokens (chunk 16: tails everywhere, 7 chunks in 8 slots), each
    restarting from its own initial state, with a separate write strength; ``saved["h"]`` holds each
    chunk's start state at row ``coff[n] + j``."""
    lens = (5, 33, 22)
    x = _inputs(1, sum(lens), 2, 4, 16, 16, write=True, h0=3)
    cu = torch.tensor([0, 5, 38, 60], dtype=torch.int32, device=DEVICE)
    o, final, saved = _run(x, fuse=fuse, chunk=16, cu=cu, store_states=True)
    o_ref, f_ref = _ref(x, cu=cu)
    torch.testing.assert_close(o.double(), o_ref, atol=3e-5, rtol=1e-5)
    torch.testing.assert_close(final.double(), f_ref, atol=3e-5, rtol=1e-5)
    assert saved["chunk_offsets"].tolist() == [0, 1, 4]
    assert saved["h"].shape == (math.ceil(60 / 16) + 3, 4, 16, 16)
    # chunk j of sequence n starts from the reference state after its first 16·j tokens
    for n, (a, b) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        for j in range(math.ceil((b - a) / 16)):
            want = x["initial_state"][n].double()
            if j:
                part = {m: (t[:, a: a + 16 * j] if m != "initial_state" else t[n: n + 1]) for m, t in x.items()}
                want = reference.gated_delta_rule(**_f64(part), output_final_state=True)[1][0]
            got = saved["h"][saved["chunk_offsets"][n] + j].double()
            torch.testing.assert_close(got, want, atol=3e-5, rtol=1e-5)


@pytest.mark.interpreter  # the saved layout at chunk 16 (the GPU always runs chunk 64)
@pytest.mark.parametrize("fuse", MODES, ids=MODE_IDS)
def test_saved_gates_and_states_dense(fuse):
    """``saved["G"]`` = log2(e)·(cumsum of g from each chunk's start); ``saved["h"]`` row ``b·NT + j`` =
    the state before chunk j, and ``saved["v_new"]`` U (unfused: always kept; fused: with store_states, U
    as the unfused scan forms it)."""
    x = _inputs(2, 40, 1, 2, 16, 16, h0=2)
    _, final, saved = _run(x, fuse=fuse, chunk=16, final=False, store_states=True)
    assert final is None
    g = x["g"].double()
    want_G = torch.cat([g[:, c: c + 16].cumsum(1) for c in range(0, 40, 16)], 1) * math.log2(math.e)
    torch.testing.assert_close(saved["G"].double(), want_G, atol=1e-5, rtol=1e-5)
    if fuse:  # the fused scan forms U from T: no W / Ũ tensors
        assert saved["W"] is None and saved["U_tilde"] is None
    else:
        assert saved["W"].shape == (2, 40, 2, 16) and saved["U_tilde"].shape == (2, 40, 2, 16)
    assert saved["v_new"].shape == (2, 40, 2, 16)
    if fuse:
        unfused = _run(x, fuse=False, chunk=16, final=False)[2]["v_new"]
        torch.testing.assert_close(saved["v_new"], unfused, atol=1e-5, rtol=1e-5)
        assert _run(x, fuse=True, chunk=16, final=False)[2]["v_new"] is None  # not kept unless asked
    for b in range(2):
        for j in range(3):
            want = x["initial_state"][b].double()
            if j:
                part = {m: (t[b: b + 1, : 16 * j] if m != "initial_state" else t[b: b + 1]) for m, t in x.items()}
                want = reference.gated_delta_rule(**_f64(part), output_final_state=True)[1][0]
            torch.testing.assert_close(saved["h"][b * 3 + j].double(), want, atol=3e-5, rtol=1e-5)


@pytest.mark.parametrize("fuse", MODES, ids=MODE_IDS)
def test_strided_inputs_no_initial_state(fuse):
    """q, k, v carved out of one fused projection (head stride 3K) and strided gates; no h0, custom scale."""
    B, T, H, K = 2, 19, 2, 16
    torch.manual_seed(2)
    qkv = torch.randn(B, T, H, 3 * K, device=DEVICE)
    gb = torch.randn(B, T, 2 * H, device=DEVICE)
    x = {"q": qkv[..., :K], "k": functional.normalize(qkv[..., K: 2 * K], dim=-1), "v": qkv[..., 2 * K:],
         "g": functional.logsigmoid(gb[..., :H] + 2), "beta": torch.sigmoid(gb[..., H:])}
    o, final, _ = _run(x, fuse=fuse, chunk=16, scale=0.3)
    o_ref, f_ref = _ref(x, scale=0.3)
    torch.testing.assert_close(o.double(), o_ref, atol=3e-5, rtol=1e-5)
    torch.testing.assert_close(final.double(), f_ref, atol=3e-5, rtol=1e-5)


def test_saturated_gates_and_large_state():
    """α → 1 and β → 1 (no decay, full erase) from a state of magnitude 1000; α → 0 (state wiped)."""
    x = _inputs(1, 40, 1, 1, 16, 16, h0=1)
    x["initial_state"] = x["initial_state"] * 1000.0
    x["g"] = -1e-4 * torch.rand_like(x["g"])
    x["beta"] = 1.0 - 1e-4 * torch.rand_like(x["beta"])
    o, final, _ = _run(x, fuse=True, chunk=16)
    o_ref, f_ref = _ref(x)
    torch.testing.assert_close(o.double(), o_ref, atol=1e-6 * 1000 * 30, rtol=1e-5)
    torch.testing.assert_close(final.double(), f_ref, atol=1e-6 * 1000 * 30, rtol=1e-5)
    x["g"] = torch.full_like(x["g"], -30.0)
    o, final, _ = _run(x, fuse=False, chunk=16)
    o_ref, f_ref = _ref(x)
    assert o.isfinite().all() and final.isfinite().all()
    torch.testing.assert_close(o.double(), o_ref, atol=3e-5, rtol=1e-5)
    torch.testing.assert_close(final.double(), f_ref, atol=3e-5, rtol=1e-5)


# ------------------------------------------------------------------------------ bounds and causality

GUARD = 64
"""Sentinel elements before and after every tensor the launchers allocate (:func:`guard_outputs`)."""
SENTINEL = 1234.0


def guard_outputs(monkeypatch):
    """Every tensor the gated-delta launchers allocate becomes the middle of a larger buffer: NaN inside (an
    element no kernel writes stays NaN), :data:`SENTINEL` for :data:`GUARD` elements either side. Returns
    the check that every sentinel is intact (no store left its tensor)."""
    from kernelworks.ops.gated_delta import api, decode, prefill_bwd, prefill_bwd_chunked, prefill_chunked, prefill_fwd

    bufs = []

    def empty(shape, *, dtype, device):
        n = math.prod(shape)
        buf = torch.full((n + 2 * GUARD,), SENTINEL, dtype=dtype, device=device)
        buf[GUARD: GUARD + n] = float("nan") if dtype.is_floating_point else -1
        bufs.append((buf, n))
        return buf[GUARD: GUARD + n].view(tuple(shape))

    for module in (api, decode, prefill_bwd, prefill_bwd_chunked, prefill_chunked, prefill_fwd):
        monkeypatch.setattr(module, "empty", empty)

    def check():
        assert bufs, "nothing allocated through the guard"
        for buf, n in bufs:
            want = torch.full((GUARD,), SENTINEL, dtype=buf.dtype, device=buf.device)
            assert torch.equal(buf[:GUARD], want) and torch.equal(buf[GUARD + n:], want), "a store left its tensor"
    return check


def _poisoned(x, name, t, value):
    """``x`` with ``x[name]`` at token t (head 0; column 3 of q/k/v) set to ``value``."""
    bad = dict(x)
    bad[name] = x[name].clone()
    if bad[name].dim() == 4:
        bad[name][:, t, 0, 3] = value
    else:
        bad[name][:, t, 0] = value
    return bad


CAUSAL_CASES = [("k", 40, math.nan), ("v", 63, math.inf), ("g", 40, math.nan), ("beta", 63, -math.inf),
                ("q", 40, math.nan), ("write_strength", 63, math.nan), ("v", 80, math.nan)]
CAUSAL_IDS = ["k-nan-mid", "v-inf-last", "g-nan-mid", "beta-inf-last", "q-nan-mid", "w-nan-last", "v-nan-tail-chunk"]


@pytest.mark.parametrize(("name", "t", "value"), CAUSAL_CASES, ids=CAUSAL_IDS)
@pytest.mark.parametrize("mode", ["fused", "3-kernel", "segments"])
def test_causal_nan_and_inf(name, t, value, mode):
    """A NaN or inf in token t (the middle of a 64-token chunk, or its last token) leaves every output
    before t bit-equal to the clean run's; from t on, o is non-finite exactly where the float64 recurrence
    is (fp16: the chunk products on 16-bit operands; segments: 3 segments of 32 tokens scanned apart)."""
    x = _inputs(1, 96, 1, 2, 16, 16, dtype=F16, write=True, h0=1)
    bad = _poisoned(x, name, t, value)
    if mode == "segments":
        kw = {"scale": 0.25, "initial_state": x["initial_state"], "output_final_state": True, "chunk_size": 16,
              "n_segments": 3}
        clean, _, _ = segmented_prefill_fwd(**{n: x[n] for n in ("q", "k", "v", "g", "beta", "write_strength")}, **kw)
        o, final, _ = segmented_prefill_fwd(**{n: bad[n] for n in ("q", "k", "v", "g", "beta", "write_strength")},
                                            **kw)
    else:
        clean, _, _ = _run(x, fuse=mode == "fused", chunk=64)
        o, final, _ = _run(bad, fuse=mode == "fused", chunk=64)
    assert torch.equal(o[:, :t], clean[:, :t])
    o_ref, f_ref = _ref(bad)
    assert torch.equal(o[:, t:].isfinite(), o_ref[:, t:].isfinite())
    assert torch.equal(final.isfinite(), f_ref.isfinite())


@pytest.mark.parametrize("fuse", MODES, ids=MODE_IDS)
def test_padding_and_later_sequences_never_reach_a_sequence(fuse, monkeypatch):
    """Packed sequences of 30 and 50 tokens then 16 tokens of padding (cu[-1] < T): NaN everywhere in the
    padding and in the second sequence leaves the first sequence's outputs and final state bit-equal,
    and the padding's rows of o come back zero (not left unwritten: outputs start NaN here), every store
    inside its tensor."""
    check = guard_outputs(monkeypatch)
    x = _inputs(1, 96, 1, 2, 16, 16, dtype=F16, write=True, h0=2)
    cu = torch.tensor([0, 30, 80], dtype=torch.int32, device=DEVICE)
    clean, f_clean, _ = _run(x, fuse=fuse, chunk=16, cu=cu)
    bad = {n: t.clone() for n, t in x.items()}
    for n in ("q", "k", "v", "g", "beta", "write_strength"):
        bad[n][:, 30:] = math.nan
    o, final, _ = _run(bad, fuse=fuse, chunk=16, cu=cu)
    check()
    assert torch.equal(o[:, :30], clean[:, :30]) and torch.equal(final[0], f_clean[0])
    assert (o[:, 80:] == 0).all() and (clean[:, 80:] == 0).all()
    o_ref, f_ref = _ref(x, cu=cu)
    torch.testing.assert_close(clean.double(), o_ref, atol=4e-3, rtol=0)
    torch.testing.assert_close(f_clean.double(), f_ref, atol=4e-3, rtol=0)


@pytest.mark.parametrize("dtype", [F32, F16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("g_reset", [-math.inf, -1e30], ids=["g-neg-inf", "g-minus-1e30"])
def test_reset_gates_match_reference(g_reset, dtype):
    """``g = −inf`` (a full reset: α = 0) at tokens 5 and 40 of a 64-token chunk, and a very negative
    finite g: finite, and the float64 recurrence's answer (fp32 to its tolerance, fp16 to fp16 rounding)
    — neither NaN from ``−inf − (−inf)`` nor decay 1 from a swamped cumulative sum."""
    x = _inputs(1, 96, 1, 2, 16, 16, dtype=dtype, h0=1)
    x["g"][:, 5, 0] = g_reset
    x["g"][:, 40, :] = g_reset
    for fuse in MODES:
        o, final, _ = _run(x, fuse=fuse, chunk=64)
        o_ref, f_ref = _ref(x)
        assert o.isfinite().all() and final.isfinite().all()
        tol = {"atol": 3e-5, "rtol": 1e-5} if dtype == F32 else {"atol": 4e-3, "rtol": 0}
        torch.testing.assert_close(o.double(), o_ref, **tol)
        torch.testing.assert_close(final.double(), f_ref, **tol)


@pytest.mark.parametrize("fuse", MODES, ids=MODE_IDS)
def test_out_of_range_cu_seqlens_stay_in_bounds(fuse, monkeypatch):
    """``cu_seqlens`` past T, negative, decreasing (the launcher trusts its caller: nothing checks on the
    host here): every store stays inside its tensor, and the answer is the recurrence on the table
    clamped into [0, T] and made non-decreasing (an entry below the one before it: an empty sequence),
    rows no sequence covers zero."""
    check = guard_outputs(monkeypatch)
    x = _inputs(1, 70, 1, 2, 16, 16, dtype=F16, h0=5)
    cu = torch.tensor([3, -7, 40, 20, 1 << 30, 90], dtype=torch.int64, device=DEVICE)
    o, final, _ = _run(x, fuse=fuse, chunk=16, cu=cu)
    check()
    sane = torch.tensor([3, 3, 40, 40, 70, 70], device=DEVICE)
    o_ref, f_ref = _ref(x, cu=sane)
    torch.testing.assert_close(o.double(), o_ref, atol=4e-3, rtol=0)
    torch.testing.assert_close(final.double(), f_ref, atol=4e-3, rtol=0)
    assert (o[:, :3] == 0).all()


# ------------------------------------------------------------------------------------ sm_90 compilation


def _capture(B, T, hq, hv, K, V, dtype, *, fuse, varlen=False, h0=False, final=False, write=False, store=False):
    """The launches one call makes when planned for an H100 (nothing runs: uninitialised CPU stand-ins);
    ``store``: as a training call's forward, keeping the chunk-start states and U for the backward."""
    from kernelworks.inspect import capture_launches, plan_for_gpu

    with plan_for_gpu(["kernelworks.ops.gated_delta"]):
        q = torch.empty(B, T, hq, K, dtype=dtype)
        v = torch.empty(B, T, hv, V, dtype=dtype)
        gates = [torch.empty(B, T, hv) for _ in range(3)]
        cu = torch.tensor([0, 5, T], dtype=torch.int32) if varlen else None
        n = 2 if varlen else B
        with capture_launches() as launches, torch.no_grad():
            chunked_prefill_fwd(q, torch.empty_like(q), v, gates[0], gates[1], scale=K ** -0.5,
                                initial_state=torch.empty(n, hv, V, K) if h0 else None,
                                output_final_state=final, cu_seqlens=cu, write_strength=gates[2] if write else None,
                                fuse_output=fuse, store_states=store, states_dtype=dtype if store else None)
    return launches


@pytest.mark.parametrize("fuse", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("shape", ["b8-t4096-h16-bf16", "b1-t4096-h32-narrow-bf16", "varlen-t300-h0-final-write-fp16"])
def test_compiles_for_sm90_without_spills(shape, fuse):
    """Every forward kernel on sm_90 uses tensor cores and stays within its spill bound: the benchmark batch,
    one sequence of 32 value heads (the narrow, 32-row scan: ``scan_block_v``) and every option."""
    from kernelworks.inspect import inspect_launch

    if shape.startswith("b8"):
        launches = _capture(8, 4096, 16, 16, 128, 128, BF16, fuse=fuse)
    elif shape.startswith("b1"):
        launches = _capture(1, 4096, 16, 32, 128, 128, BF16, fuse=fuse)
        scans = [launch for launch in launches if launch.name == "_state_pass_kernel"]
        assert {launch.args["BLOCK_V"] for launch in scans} == {32}, "one sequence: the narrow scan"
    else:
        launches = _capture(1, 300, 4, 8, 128, 128, F16, fuse=fuse, varlen=True, h0=True, final=True, write=True)
    names = [launch.name for launch in launches]
    # fused: W and Ũ formed in the scan (no K1b), the output too (no K3); then the scan's EXACT launch
    want = ["_chunk_inverse_kernel", "_state_pass_kernel", "_state_pass_kernel"] if fuse else \
        ["_chunk_inverse_kernel", "_chunk_wy_kernel", "_state_pass_kernel", "_chunk_output_kernel"]
    assert names == want
    assert [bool(launch.args.get("EXACT")) for launch in launches] == [False] * (len(names) - fuse) + [True] * fuse
    for launch in launches:
        r = inspect_launch(launch, "sm_90")
        bound = FUSED_SCAN_SPILL_B if fuse and r.name == "_state_pass_kernel" else 0
        if launch.args.get("EXACT"):
            bound = EXACT_SCAN_SPILL_B
        assert r.spill_bytes <= bound, f"{r.name}: {r.spill_bytes} B/thread spilled ({r.registers} registers)"
        assert r.uses_dot, f"{r.name}: the chunk products must use tensor cores"
        assert r.mix.summary()["tensor"] > 0, f"{r.name}: no tensor-core instructions in the SASS"


TRAINING_SCAN_SPILL_B = {"b8-t4096-h16-bf16": 32, "b1-t4096-h32-narrow-bf16": 0, "b8-t1024-k128-v64-bf16": 64,
                         "varlen-t300-h0-final-write-fp16": 96}
"""B/thread the fused scan of a training call (storing its chunk-start states and U) may spill on sm_90, per
case (triton 3.6, session 23: 24, 0, 48 and 80 B; the inference scan 0, 0, 0 and 8). The stores' bytes, not
the spill, are most of the 16% the B 8 forward gained on the H200 (docs/notes/gated_delta.md)."""


@pytest.mark.parametrize("shape", list(TRAINING_SCAN_SPILL_B))
def test_training_forward_compiles_within_its_spill_bound(shape):
    """The fused scan as a training call runs it (``store_states``) stays within its per-case spill bound."""
    from kernelworks.inspect import inspect_launch

    if shape.startswith("b8-t4096"):
        launches = _capture(8, 4096, 16, 16, 128, 128, BF16, fuse=True, store=True)
    elif shape.startswith("b1"):
        launches = _capture(1, 4096, 16, 32, 128, 128, BF16, fuse=True, store=True)
    elif shape.startswith("b8-t1024"):
        launches = _capture(8, 1024, 16, 16, 128, 64, BF16, fuse=True, store=True)
    else:
        launches = _capture(1, 300, 4, 8, 128, 128, F16, fuse=True, varlen=True, h0=True, final=True, write=True,
                            store=True)
    scan = [launch for launch in launches if launch.name == "_state_pass_kernel" and not launch.args.get("EXACT")]
    assert len(scan) == 1 and scan[0].args["STORE_HS"] and scan[0].args["STORE_VN"]
    r = inspect_launch(scan[0], "sm_90")
    assert r.spill_bytes <= TRAINING_SCAN_SPILL_B[shape], f"{r.spill_bytes} B/thread spilled ({r.registers} registers)"
    assert r.mix.summary()["tensor"] > 0


# ---------------------------------------------------------------------------------------------------- GPU


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.gpu
@pytest.mark.parametrize("fuse", MODES, ids=MODE_IDS)
@pytest.mark.parametrize(("T", "varlen", "gates"), [(1000, False, "normal"), (3000, True, "normal"),
                                                    (256, False, "sat1")])
def test_gpu_bf16(T, varlen, gates, fuse):
    """The issue's bar (‖out − ref‖/‖ref‖ ≤ 5e-3 in bf16) against the fp32 recurrence, at K = V = 128;
    "sat1" is the spec's saturated case (α, β within 1e-4 of 1) that the first forward failed narrowly."""
    B = 1 if varlen else 2
    x = _inputs(B, T, 4, 8, 128, 128, dtype=BF16, h0=5 if varlen else B)
    if gates == "sat1":
        x["g"] = -1e-4 * torch.rand_like(x["g"])
        x["beta"] = 1.0 - 1e-4 * torch.rand_like(x["beta"])
    cu = torch.tensor([0, 1, 700, 1500, 1563, T], dtype=torch.int32, device=DEVICE) if varlen else None
    o, final, _ = _run(x, fuse=fuse, chunk=64, cu=cu)
    o_ref, f_ref = reference.gated_delta_rule(**x, output_final_state=True, cu_seqlens=cu)
    assert not o.isnan().any() and not final.isnan().any()
    assert _rel(o, o_ref) <= 5e-3, _rel(o, o_ref)
    assert _rel(final, f_ref) <= 5e-3, _rel(final, f_ref)
