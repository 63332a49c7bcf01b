"""rotary_embedding: the spec's checklist (both layouts, partial rotary, GQA, both head layouts, fused-qkv
views, broadcast tables, fp32/fp16/bf16, forward and backward against float64), agreement with Hugging
Face's own ``apply_rotary_pos_emb`` (Llama, Qwen3-Next partial, GPT-J), strides honoured bit for bit, one
launch per direction, bad input, torch.compile and opcheck. CPU: Triton's interpreter (whose fp32 → bf16
cast truncates instead of rounding, so bf16 results are compared by the tolerance rule, never bit for bit
against a rounding implementation)."""

from __future__ import annotations

import pytest
import torch

import kernelworks as kw
from kernelworks.check.compare import compare
from kernelworks.check.engine import check_case
from kernelworks.ops.rotary import api, kernels, reference
from kernelworks.ops.rotary.spec import ROTARY_EMBEDDING_SPEC as SPEC
from kernelworks.runtime.alloc import poison_outputs
from kernelworks.runtime.device import default_device
from kernelworks.spec import default_tolerance

DEVICE = default_device()
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


def _qk(b=2, s=5, h=4, hk=2, d=16, dtype=F32, heads_dim=1):
    def one(heads):
        shape = (b, heads, s, d) if heads_dim == 1 else (b, s, heads, d)
        return torch.randn(shape, device=DEVICE).to(dtype)
    return one(h), one(hk)


def _tables(b=2, s=5, r=16, dtype=F32, layout="neox", pos0=0):
    """HF-built tables ``[b, s, r]``: NeoX ``cat(freqs, freqs)``, GPT-J each frequency twice, interleaved."""
    pos = pos0 + torch.arange(s, device=DEVICE)[None, :] + 7 * torch.arange(b, device=DEVICE)[:, None]
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, r, 2, device=DEVICE).float() / r)
    freqs = pos[..., None].float() * inv_freq
    emb = torch.cat((freqs, freqs), -1) if layout == "neox" else freqs.repeat_interleave(2, -1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _run(fn, q, k, cos, sin, grads=None, **opts):
    """``(q_out, k_out)`` and ``(dq, dk)`` of ``fn`` for upstream gradients ``grads`` (random when None)."""
    lq, lk = (t.detach().requires_grad_() for t in (q, k))
    outs = fn(lq, lk, cos, sin, **opts)
    if grads is None:
        grads = tuple(torch.randn(o.shape, device=DEVICE, dtype=torch.float64) for o in outs)
    dq, dk = torch.autograd.grad(outs, (lq, lk), [g.to(o.dtype) for g, o in zip(grads, outs)])
    return outs, (dq, dk), grads


def _assert_rule(name, out, ref64, baseline):
    """The project's rule: error ≤ 2 × the baseline's error (same math in the input dtype) + the floor."""
    r = compare(name, out, ref64, baseline, default_tolerance(baseline.dtype), expected_dtype=baseline.dtype)
    assert r.passed, f"{name}: max abs {r.max_abs:.3g} > allowed {r.allowed:.3g} {r.problem}"


# ------------------------------------------------------------------------------------------- the checklist

CPU_CASES = [c for c in SPEC.check_cases if "gpu" not in c.tags]


@pytest.mark.parametrize("case", CPU_CASES, ids=[c.id for c in CPU_CASES])
def test_spec_checklist(case):
    """``kw check rotary_embedding``, case by case: float64 reference, NaN-poisoned outputs, two runs bit
    for bit, inputs untouched, forward and both gradients."""
    results = check_case(SPEC, case, device=DEVICE, probes=False)  # probed in tests/test_checklist.py
    assert [r.mode for r in results] == ["fwd", "bwd"]
    for r in results:
        bad = [f"{c.output}: max abs {c.max_abs:.3g} > {c.allowed:.3g} {c.problem}" for c in r.comparisons
               if not c.passed]
        assert r.passed, f"{r.mode}: {r.problems + bad}"


def test_spec_cases_cover_the_layouts():
    """The checklist exercises what the issue lists (so a trimmed spec cannot pass silently)."""
    p = [c.params for c in CPU_CASES]
    assert {c.get("layout", "neox") for c in p} == {"neox", "gptj"}
    assert {c.get("heads_dim", 1) for c in p} == {1, 2}
    assert {c.get("source", "contiguous") for c in p} == {"contiguous", "transposed", "fused"}
    assert {c.get("tables", "batch") for c in p} == {"batch", "one", "shared", "expanded"}
    assert any(c.get("rotary_dim", c["head_dim"]) < c["head_dim"] for c in p)
    assert any(c["kv_heads"] < c["heads"] for c in p) and any(c["kv_heads"] > c["heads"] for c in p)
    assert {c.dtype for c in CPU_CASES} == {F32, F16, BF16}


@pytest.mark.interpreter
def test_spec_cases_take_several_head_blocks():
    """Under the interpreter (BLOCK_H = 256 // head_dim features) some cases need several head blocks, and
    some have k's heads in blocks past q's."""
    p = [c.params for c in CPU_CASES]
    blocks = [kernels._plan(max(c["heads"], c["kv_heads"]), c["head_dim"], c["head_dim"])[0] for c in p]
    assert any(c["heads"] > bh for c, bh in zip(p, blocks))
    assert any(c["kv_heads"] > bh >= c["heads"] for c, bh in zip(p, blocks))


def test_spec_inputs_and_cost():
    fused = SPEC.find_cases(["fused_qkv-bf16"], bench=False)[0]
    inputs = SPEC.inputs(fused, DEVICE)
    q, k = inputs["q"], inputs["k"]
    assert q.shape == (2, 4, 5, 16) and k.shape == (2, 2, 5, 16) and not q.is_contiguous()
    assert q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr()  # views of one qkv buffer
    expanded = SPEC.inputs(SPEC.find_cases(["expanded_tables-bf16"], bench=False)[0], DEVICE)
    assert expanded["cos"].stride(0) == 0 and expanded["cos"].dtype == F32
    llama = SPEC.find_cases(["llama3_8b_4x4k"], bench=True)[0]
    tokens, heads = 4 * 4096, 32 + 8
    want = 2 * tokens * heads * 128 * 2 + 2 * tokens * 128 * 2  # q, k in and out; cos, sin [4, 4096, 128]
    assert SPEC.cost(llama, "fwd").bytes == want == SPEC.cost(llama, "bwd").bytes
    assert SPEC.cost(llama, "fwd").flops == 3 * tokens * heads * 128
    partial = SPEC.find_cases(["qwen3_next_partial_16k"], bench=True)[0]
    assert SPEC.cost(partial, "fwd").bytes == 2 * 16384 * 18 * 256 * 2 + 2 * 16384 * 64 * 2


# ------------------------------------------------------------------------------------ Hugging Face's math

@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
def test_matches_transformers_llama(dtype):
    """The call ``kernelworks.patch`` makes: HF's q/k (transposed projections, GQA), HF's own cos/sin from
    ``LlamaRotaryEmbedding`` ([batch, seq, head_dim] in q's dtype)."""
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig

    torch.manual_seed(0)
    b, s, h, hk, d = 2, 6, 4, 2, 16
    config = LlamaConfig(hidden_size=h * d, num_attention_heads=h, num_key_value_heads=hk, head_dim=d)
    rope = llama.LlamaRotaryEmbedding(config).to(DEVICE)
    x = torch.randn(b, s, h * d, device=DEVICE).to(dtype)
    cos, sin = rope(x, torch.arange(s, device=DEVICE)[None].expand(b, s) + 11)
    q = torch.randn(b, s, h, d, device=DEVICE).to(dtype).transpose(1, 2)
    k = torch.randn(b, s, hk, d, device=DEVICE).to(dtype).transpose(1, 2)
    (qo, ko), (dq, dk), g = _run(lambda *a: kw.rotary_embedding(*a, layout="neox", heads_dim=1), q, k, cos, sin)
    (hq, hk_), (hdq, hdk), _ = _run(llama.apply_rotary_pos_emb, q, k, cos, sin, g)
    if dtype == F32:
        for ours, theirs in ((qo, hq), (ko, hk_), (dq, hdq), (dk, hdk)):
            torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
        return
    (rq, rk), (rdq, rdk), _ = _run(reference.rotary_embedding, q.double(), k.double(), cos.double(),
                                   sin.double(), g)
    for name, ours, ref, theirs in (("q", qo, rq, hq), ("k", ko, rk, hk_), ("dq", dq, rdq, hdq),
                                    ("dk", dk, rdk, hdk)):
        _assert_rule(name, ours, ref, theirs)  # at most 2× HF's own bf16 error


def test_matches_transformers_qwen3_next_partial():
    """Partial rotary as HF's Qwen3-Next: cos/sin's last dimension (16) < head_dim (40), the rest passed."""
    qwen = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    torch.manual_seed(1)
    q, k = _qk(b=2, s=5, h=3, hk=1, d=40)
    cos, sin = _tables(2, 5, 16)
    (qo, ko), (dq, dk), g = _run(kw.rotary_embedding, q, k, cos, sin)
    (hq, hk), (hdq, hdk), _ = _run(qwen.apply_rotary_pos_emb, q, k, cos, sin, g)
    for ours, theirs in ((qo, hq), (ko, hk), (dq, hdq), (dk, hdk)):
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(qo[..., 16:], q[..., 16:], rtol=0, atol=0)  # pass-through is a copy


def test_matches_transformers_gptj():
    """GPT-J: [batch, seq, heads, head_dim] (heads_dim=2), interleaved pairs over the first 8 of 24
    features; HF's tables are [batch, seq, rotary_dim/2] repeated twice inside its function."""
    gptj = pytest.importorskip("transformers.models.gptj.modeling_gptj")
    torch.manual_seed(2)
    q, k = _qk(b=2, s=5, h=2, hk=2, d=24, heads_dim=2)
    cos, sin = _tables(2, 5, 8, layout="gptj")
    half_cos, half_sin = cos[..., ::2], sin[..., ::2]

    def rot(x):
        return torch.cat((gptj.apply_rotary_pos_emb(x[..., :8], half_sin, half_cos), x[..., 8:]), -1)

    def hf(q, k, cos, sin):
        return rot(q), rot(k)

    (qo, ko), (dq, dk), g = _run(kw.rotary_embedding, q, k, cos, sin, layout="gptj", heads_dim=2)
    (hq, hk), (hdq, hdk), _ = _run(hf, q, k, cos, sin, g)
    for ours, theirs in ((qo, hq), (ko, hk), (dq, hdq), (dk, hdk)):
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------------- strides and shapes

def test_fused_qkv_views_and_broadcast_tables_equal_contiguous():
    """Strided q/k (slices of one qkv buffer, HF's transpose), a stride-0 expanded table and a transposed
    table give the very bits contiguous copies give, forward and backward."""
    torch.manual_seed(3)
    b, s, h, hk, d = 2, 5, 4, 2, 16
    qkv = torch.randn(b, s, (h + 2 * hk) * d + 8, device=DEVICE)  # 8 extra columns: a padded row
    q = qkv[..., : h * d].view(b, s, h, d).transpose(1, 2)
    k = qkv[..., h * d: (h + hk) * d].view(b, s, hk, d).transpose(1, 2)
    cos1, sin1 = _tables(1, s, d)
    cos, sin = cos1.expand(b, s, d), sin1.mT.contiguous().mT.expand(b, s, d)  # sin: column-major rows
    assert cos.stride(0) == 0 and sin.stride(-1) != 1
    with poison_outputs():
        (qo, ko), (dq, dk), g = _run(kw.rotary_embedding, q, k, cos, sin)
        (cq, ck), (cdq, cdk), _ = _run(kw.rotary_embedding, q.contiguous(), k.contiguous(), cos.contiguous(),
                                       sin.contiguous(), g)
    for ours, want in ((qo, cq), (ko, ck), (dq, cdq), (dk, cdk)):
        torch.testing.assert_close(ours, want, rtol=0, atol=0)
    assert qo.shape == q.shape and ko.shape == k.shape


@pytest.mark.parametrize("source", ["contiguous", "transposed", "fused"])
def test_outputs_keep_the_memory_order(source):
    """Outputs are dense in the input's memory order (``torch.empty_like``'s rule), gradients in the
    upstream gradient's: HF's transposed q comes back as a transposed [B, S, H, D] buffer, and its
    gradient too, so the ``transpose``/``view`` backward into the projection needs no copy."""
    torch.manual_seed(10)
    case = SPEC.find_cases(["hf_llama-fp32"], bench=False)[0]
    inputs = SPEC.inputs(type(case)(case.name, {**case.params, "source": source}, case.dtype), DEVICE)
    q, k, cos, sin = (inputs[n] for n in ("q", "k", "cos", "sin"))
    lq, lk = (t.detach().requires_grad_() for t in (q, k))
    qo, ko = kw.rotary_embedding(lq, lk, cos, sin)
    for out in (qo, ko):
        dense = out if source == "contiguous" else out.transpose(1, 2)
        assert dense.is_contiguous(), (source, out.stride())
    # a gradient laid out like the outputs (what SDPA's backward hands back) gives input gradients alike
    gq, gk = (torch.randn_like(o) for o in (qo, ko))
    assert gq.stride() == qo.stride()
    dq, dk = torch.autograd.grad((qo, ko), (lq, lk), (gq, gk), retain_graph=True)
    assert dq.stride() == qo.stride() and dk.stride() == ko.stride()
    # an expanded (stride-0) gradient has no order: contiguous
    dq, _ = torch.autograd.grad((qo.sum() + ko.sum(),), (lq, lk))
    assert dq.is_contiguous()


def test_strided_last_dimension():
    """Every other feature of a wider buffer (last-dimension stride 2), partial rotary: strides, not copies."""
    torch.manual_seed(9)
    q = torch.randn(2, 3, 5, 48, device=DEVICE)[..., ::2]
    k = torch.randn(2, 5, 1, 48, device=DEVICE).transpose(1, 2)[..., 1::2]
    cos, sin = _tables(2, 5, 8)
    assert q.stride(-1) == 2 and k.stride(-1) == 2
    (qo, ko), (dq, dk), g = _run(kw.rotary_embedding, q, k, cos, sin)
    (cq, ck), (cdq, cdk), _ = _run(kw.rotary_embedding, q.contiguous(), k.contiguous(), cos, sin, g)
    for ours, want in ((qo, cq), (ko, ck), (dq, cdq), (dk, cdk)):
        torch.testing.assert_close(ours, want, rtol=0, atol=0)


@pytest.mark.parametrize("tables", ["2d", "batch1"])
def test_shared_tables_equal_per_batch_tables(tables):
    torch.manual_seed(4)
    q, k = _qk(b=3, s=4, h=2, hk=1, d=16, heads_dim=2)
    cos, sin = _tables(1, 4, 16)
    shared = (cos[0], sin[0]) if tables == "2d" else (cos, sin)
    out = kw.rotary_embedding(q, k, *shared, heads_dim=2)
    want = kw.rotary_embedding(q, k, cos.expand(3, 4, 16).contiguous(), sin.expand(3, 4, 16).contiguous(),
                               heads_dim=2)
    for o, w in zip(out, want):
        torch.testing.assert_close(o, w, rtol=0, atol=0)


def test_broadcast_grad_and_one_output_used():
    """``sum()``'s stride-0 upstream gradient, and a backward through q_out alone (k_out's gradient None)."""
    torch.manual_seed(5)
    q, k = _qk()
    cos, sin = _tables()
    lq, lk = (t.detach().requires_grad_() for t in (q, k))
    qo, ko = kw.rotary_embedding(lq, lk, cos, sin)
    (qo.sum() + 2 * ko.sum()).backward()
    rq, rk = (t.detach().double().requires_grad_() for t in (q, k))
    ro, rko = reference.rotary_embedding(rq, rk, cos.double(), sin.double())
    (ro.sum() + 2 * rko.sum()).backward()
    torch.testing.assert_close(lq.grad, rq.grad.float())
    torch.testing.assert_close(lk.grad, rk.grad.float())
    lq.grad = lk.grad = None
    qo, _ = kw.rotary_embedding(lq, lk, cos, sin)
    qo.sum().backward()
    torch.testing.assert_close(lq.grad, rq.grad.float())
    assert lk.grad is None or not lk.grad.any()


def test_one_launch_per_direction(monkeypatch):
    """q and k are rotated by one launch forward and one backward."""
    calls = []
    real = kernels.launch
    monkeypatch.setattr(kernels, "launch", lambda *a, **kw_: calls.append(kw_["TRANSPOSE"]) or real(*a, **kw_))
    q, k = _qk()
    cos, sin = _tables()
    _run(kw.rotary_embedding, q, k, cos, sin)
    assert calls == [False, True]


def test_without_grad_mode_tables_may_require_grad():
    """Under no_grad a table that requires grad is harmless (nothing is recorded); in grad mode it is refused."""
    q, k = _qk()
    cos, sin = (t.requires_grad_() for t in _tables())
    with torch.no_grad():
        kw.rotary_embedding(q, k, cos, sin)
    with pytest.raises(ValueError, match=r"cos: gradients .* not supported.*detach"):
        kw.rotary_embedding(q, k, cos, sin.detach())


# ---------------------------------------------------------------------------------------------- bad input

def _call(q=None, k=None, cos=None, sin=None, **opts):
    dq, dk = _qk()
    dc, ds = _tables()
    return kw.rotary_embedding(dq if q is None else q, dk if k is None else k, dc if cos is None else cos,
                               ds if sin is None else sin, **opts)


_T = torch.randn  # short: bad shapes below


@pytest.mark.parametrize(
    ("call", "exc", "names"),
    [
        pytest.param(lambda: _call(layout="llama"), ValueError, ("layout", "neox", "llama"), id="layout"),
        pytest.param(lambda: _call(layout=None), ValueError, ("layout", "None"), id="layout-none"),
        pytest.param(lambda: _call(heads_dim=3), ValueError, ("heads_dim", "3"), id="heads-dim"),
        pytest.param(lambda: _call(heads_dim=True), TypeError, ("heads_dim", "bool"), id="heads-dim-bool"),
        pytest.param(lambda: _call(q=_T(2, 4, 5, device=DEVICE)), ValueError, ("q", "4", "dimension"),
                     id="q-rank"),
        pytest.param(lambda: _call(q=[1.0]), TypeError, ("q", "list"), id="q-not-tensor"),
        pytest.param(lambda: _call(q=torch.ones(2, 4, 5, 16, dtype=torch.int32)), TypeError, ("q", "int32"),
                     id="q-int"),
        pytest.param(lambda: _call(k=_T(2, 2, 5, 16, device=DEVICE).half()), TypeError, ("q", "k", "float16"),
                     id="k-dtype"),
        pytest.param(lambda: _call(k=_T(2, 2, 5, 8, device=DEVICE)), ValueError, ("q", "k", "head_dim"),
                     id="k-head-dim"),
        pytest.param(lambda: _call(k=_T(2, 2, 6, 16, device=DEVICE)), ValueError, ("q", "k", "seq"), id="k-seq"),
        pytest.param(lambda: _call(k=_T(1, 2, 5, 16, device=DEVICE)), ValueError, ("q", "k", "batch"),
                     id="k-batch"),
        pytest.param(lambda: _call(q=_T(2, 4, 0, 16, device=DEVICE), k=_T(2, 2, 0, 16, device=DEVICE)),
                     ValueError, ("q", "non-empty"), id="empty"),
        pytest.param(lambda: _call(cos=_T(2, 1, 5, 16, device=DEVICE)), ValueError, ("cos", "dimension"),
                     id="cos-unsqueezed"),
        pytest.param(lambda: _call(cos=_T(2, 6, 16, device=DEVICE), sin=_T(2, 6, 16, device=DEVICE)),
                     ValueError, ("cos", "seq 5", "(2, 6, 16)"), id="cos-seq"),
        pytest.param(lambda: _call(cos=_T(3, 5, 16, device=DEVICE), sin=_T(3, 5, 16, device=DEVICE)),
                     ValueError, ("cos", "batch 2"), id="cos-batch"),
        pytest.param(lambda: _call(cos=_T(5, 16, device=DEVICE, dtype=torch.float64)), TypeError,
                     ("cos", "float64"), id="cos-fp64"),
        pytest.param(lambda: _call(q=_T(2, 4, 5, 16, device=DEVICE).bfloat16(),
                                   k=_T(2, 2, 5, 16, device=DEVICE).bfloat16(), cos=_T(5, 16, device=DEVICE).half()),
                     TypeError, ("cos", "float32, bfloat16", "float16"), id="cos-fp16-with-bf16-q"),
        pytest.param(lambda: _call(sin=_T(5, 16, device=DEVICE)), ValueError, ("cos, sin", "shape"),
                     id="sin-shape"),
        pytest.param(lambda: _call(cos=_T(5, 15, device=DEVICE), sin=_T(5, 15, device=DEVICE)), ValueError,
                     ("cos", "even", "15"), id="rotary-odd"),
        pytest.param(lambda: _call(cos=_T(5, 18, device=DEVICE), sin=_T(5, 18, device=DEVICE)), ValueError,
                     ("cos", "head_dim 16", "18"), id="rotary-too-wide"),
        pytest.param(lambda: _call(rotary_dim=8), ValueError, ("rotary_dim", "16", "8"), id="rotary-dim-mismatch"),
        pytest.param(lambda: _call(rotary_dim=16.0), TypeError, ("rotary_dim", "float"), id="rotary-dim-float"),
        pytest.param(lambda: _call(sin=_T(2, 5, 16, device=DEVICE, requires_grad=True)), ValueError,
                     ("sin", "detach"), id="sin-requires-grad"),
        pytest.param(lambda: _call(cos=_T(2, 5, 16, device="meta")), ValueError, ("cos", "meta"), id="cos-device"),
    ],
)
def test_bad_input(call, exc, names):
    with pytest.raises(exc) as info:
        call()
    for name in names:
        assert name in str(info.value), f"{name!r} not in {info.value}"


def test_rotary_dim_given_and_matching():
    q, k = _qk(d=24)
    cos, sin = _tables(r=8)
    a = kw.rotary_embedding(q, k, cos, sin, rotary_dim=8)
    b = kw.rotary_embedding(q, k, cos, sin)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


# ------------------------------------------------------------------------------------- torch integration

def test_torch_compile_fullgraph(compile_graphs):
    """Compiled (through the custom ops) and eager (through the autograd Function) agree bit for bit."""
    backend, graphs = compile_graphs
    def f(q, k, cos, sin):
        qo, ko = kw.rotary_embedding(q, k, cos, sin, layout="gptj", heads_dim=2)
        return qo * 2, ko

    torch.manual_seed(6)
    q, k = _qk(d=24, heads_dim=2)
    cos, sin = _tables(r=16, layout="gptj")
    (qo, ko), (dq, dk), g = _run(torch.compile(f, backend=backend, fullgraph=True), q, k, cos, sin)
    assert any("kernelworks.rotary_embedding" in gr for gr in graphs), "the custom op is not in the graph"
    (eq, ek), (edq, edk), _ = _run(f, q, k, cos, sin, g)
    assert "RotaryEmbeddingFunction" in type(ek.grad_fn).__name__  # eager skips the dispatcher
    for a, b in ((qo, eq), (ko, ek), (dq, edq), (dk, edk)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("transposed", [False, True], ids=["contiguous", "transposed"])
def test_opcheck(transposed):
    """Schema, fake implementations (their strides too: outputs follow the inputs' memory order), autograd."""
    torch.manual_seed(7)
    q, k = _qk(s=3, d=24, heads_dim=2 if transposed else 1)
    if transposed:
        q, k = q.transpose(1, 2), k.transpose(1, 2)
    q, k = q.requires_grad_(), k.requires_grad_()
    cos, sin = _tables(s=3, r=16)
    torch.library.opcheck(api._apply.custom_op, (q, k, cos, sin, "neox", 1))
    dq_out, dk_out = (torch.randn_like(t.detach()) for t in (q, k))
    torch.library.opcheck(api._apply.backward_op, (dq_out, dk_out, cos, sin, "neox", 1))


# --------------------------------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("name", ["llama3_8b-bf16", "qwen3_next_partial-bf16"])
def test_gpu_spec_cases(name):
    for r in check_case(SPEC, SPEC.find_cases([name], bench=False)[0], device=torch.device("cuda")):
        assert r.passed, (r.mode, r.problems, [c for c in r.comparisons if not c.passed])


@pytest.mark.gpu
def test_gpu_matches_transformers_bf16_and_compiles():
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    torch.manual_seed(8)
    b, s, h, hk, d = 2, 4096, 32, 8, 128
    q = torch.randn(b, s, h, d, device="cuda", dtype=BF16).transpose(1, 2)
    k = torch.randn(b, s, hk, d, device="cuda", dtype=BF16).transpose(1, 2)
    cos, sin = (t.to(BF16) for t in _tables(b, s, d, pos0=1000))
    cos, sin = cos.cuda(), sin.cuda()
    (qo, ko), (dq, dk), g = _run(kw.rotary_embedding, q, k, cos, sin)
    (hq, hk_), (hdq, hdk), _ = _run(llama.apply_rotary_pos_emb, q, k, cos, sin, g)
    (rq, rk), (rdq, rdk), _ = _run(reference.rotary_embedding, q.double(), k.double(), cos.double(),
                                   sin.double(), g)
    for name, ours, ref, theirs in (("q", qo, rq, hq), ("k", ko, rk, hk_), ("dq", dq, rdq, hdq),
                                    ("dk", dk, rdk, hdk)):
        _assert_rule(name, ours, ref, theirs)
    compiled = torch.compile(lambda *a: kw.rotary_embedding(*a), fullgraph=True)  # inductor
    for a, b_ in zip(compiled(q, k, cos, sin), (qo, ko)):
        torch.testing.assert_close(a, b_, rtol=0, atol=0)


@pytest.mark.gpu
def test_gpu_offsets_past_2_31():
    """q with 2^31 + 2^25 elements ([1, 66, 262144, 128] HF layout): the last head's offsets need int64."""
    b, h, s, d = 1, 66, 262144, 128
    q = torch.randn(b, h, s, d, device="cuda", dtype=BF16)
    k = torch.randn(b, 1, s, d, device="cuda", dtype=BF16)
    cos, sin = (torch.randn(s, d, device="cuda") for _ in range(2))
    qo, _ = kw.rotary_embedding(q, k, cos, sin)
    tail = slice(s - 64, s)
    want, _ = reference.rotary_embedding(q[:, -1:, tail].double(), k[:, :, tail].double(), cos[tail].double(),
                                         sin[tail].double())
    torch.testing.assert_close(qo[:, -1:, tail].double(), want, rtol=8e-3, atol=8e-3)
