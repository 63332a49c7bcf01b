"""``kernelworks.patch(model)`` on tiny random Hugging Face models (fp32; the interpreter on CPU, or the GPU):
the patched model against an unpatched copy with the same weights — logits, loss, every gradient, greedy generation
with the cache — plus packing, fallbacks, options, unpatch and unsupported models.

fp32 tolerance (rtol 1e-4, atol 1e-5): both sides compute in fp32 and differ only in summation order
(fused norms, tiled attention, chunked loss): ~1e-7 relative per op, a few ulps through two layers.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

tf = pytest.importorskip("transformers")

import kernelworks  # noqa: E402
from kernelworks.patch import FAMILIES, patched  # noqa: E402
from kernelworks.runtime.device import default_device  # noqa: E402

DEVICE = default_device()

TOL = {"rtol": 1e-4, "atol": 1e-5}
VOCAB = 128
COMMON = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "vocab_size": VOCAB, "max_position_embeddings": 64, "eos_token_id": None}


def _config(family: str):
    """Tiny configs; each family's own features on (windows shorter than the test sequences, soft-capping,
    head_dim 16 with q/k norms)."""
    if family == "llama":
        return tf.LlamaConfig(**COMMON)
    if family == "mistral":
        return tf.MistralConfig(**COMMON, sliding_window=4)
    if family == "qwen2":
        return tf.Qwen2Config(**COMMON)
    if family == "qwen3":
        return tf.Qwen3Config(**COMMON, head_dim=16)
    if family == "gemma2":
        return tf.Gemma2Config(**COMMON, head_dim=16, sliding_window=4, attn_logit_softcapping=5.0,
                               final_logit_softcapping=3.0, query_pre_attn_scalar=16)
    if family == "gemma3_text":
        return tf.Gemma3TextConfig(**COMMON, head_dim=16, sliding_window=4, query_pre_attn_scalar=16,
                                   layer_types=["sliding_attention", "full_attention"])
    if family == "qwen3_moe":  # layer 0 sparse (4 experts, top 2), layer 1 a dense MLP
        return tf.Qwen3MoeConfig(**COMMON, head_dim=16, num_experts=4, num_experts_per_tok=2,
                                 moe_intermediate_size=48, mlp_only_layers=[1], norm_topk_prob=True)
    if family == "mixtral":
        return tf.MixtralConfig(**COMMON, num_local_experts=4, num_experts_per_tok=2, sliding_window=4)
    if family == "qwen3_next":  # a Gated DeltaNet layer (GQA-style 2 q/k heads for 4 value heads, sparse MoE
        # with a shared expert) then a gated-attention layer (dense MLP), rotary on half the head dim
        return tf.Qwen3NextConfig(**COMMON, head_dim=16, linear_num_value_heads=4, linear_num_key_heads=2,
                                  linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
                                  num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
                                  shared_expert_intermediate_size=48, decoder_sparse_step=1, mlp_only_layers=[1],
                                  norm_topk_prob=True, layer_types=["linear_attention", "full_attention"],
                                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                   "partial_rotary_factor": 0.5})
    raise AssertionError(family)


MOE = ("qwen3_moe", "mixtral", "qwen3_next")


def _pair(family: str = "llama", seed: int = 0):
    """``(model, reference)``: one random model twice (same weights), in eval mode; norm weights jittered
    so Gemma's zero-initialised ``1 + weight`` is exercised."""
    config = _config(family)
    config._attn_implementation = "eager" if family == "gemma2" else "sdpa"  # gemma2: sdpa has no soft-capping
    torch.manual_seed(seed)
    model = tf.AutoModelForCausalLM.from_config(config).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    # its own config: transformers shares the config object, and patching switches its attention implementation
    reference = tf.AutoModelForCausalLM.from_config(copy.deepcopy(config)).float()
    reference.load_state_dict(model.state_dict())
    return model.to(DEVICE).eval(), reference.to(DEVICE).eval()


def _ids(batch: int = 2, seq: int = 8, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed)).to(DEVICE)


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def _fake_rotary(q, k, cos, sin, *, layout="neox", heads_dim=1):
    """The documented call of ``kernelworks.rotary_embedding`` on HF's own math (for when the op is absent)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    assert layout == "neox" and heads_dim == 1
    return apply_rotary_pos_emb(q, k, cos, sin)


@pytest.fixture
def rotary(monkeypatch):
    """``kernelworks.rotary_embedding`` counted (the real op when present, else HF's math behind its call)."""
    calls = []
    real = getattr(kernelworks, "rotary_embedding", _fake_rotary)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(kernelworks, "rotary_embedding", counted, raising=False)
    return calls


# ------------------------------------------------------------------------------------------- per family


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_matches_unpatched(family, rotary):
    model, reference = _pair(family)
    assert model.config is not reference.config
    keys = list(model.state_dict())
    ptrs = [t.data_ptr() for t in model.state_dict().values()]
    kernelworks.patch(model)
    experts = ("experts",) if family in MOE else ()
    linear = ("linear_attention",) if family == "qwen3_next" else ()
    dense = () if family == "mixtral" else ("mlp",)  # Mixtral: every layer sparse, no shared expert
    assert patched(model) == ("rms_norm", *experts, *dense, "rope", "attention", *linear, "loss")
    assert list(model.state_dict()) == keys and [t.data_ptr() for t in model.state_dict().values()] == ptrs
    ids = _ids()
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference(ids).logits, **TOL)
    assert rotary, "the patched attention did not call kernelworks.rotary_embedding"

    # training with labels: the fused loss (no logits), ignore_index, every parameter's gradient
    labels = ids.clone()
    labels[0, 2] = labels[1, 5] = -100
    model.train(), reference.train()
    out, ref = model(ids, labels=labels), reference(ids, labels=labels)
    assert out.logits is None and out.loss.dtype == torch.float32
    torch.testing.assert_close(out.loss, ref.loss, **TOL)
    out.loss.backward(), ref.loss.backward()
    grads, ref_grads = _grads(model), _grads(reference)
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], **TOL, msg=lambda m, n=name: f"{n}: {m}")

    # greedy generation with the cache (prefill, then decode: q_len 1 against the cached keys)
    model.eval(), reference.eval()
    prompt = _ids(1, 6, seed=2)
    new = model.generate(prompt, max_new_tokens=5, do_sample=False)
    assert torch.equal(new, reference.generate(prompt, max_new_tokens=5, do_sample=False))


@pytest.mark.parametrize("family", MOE)
def test_moe_router_logits_and_aux_loss(family):
    """With router logits asked for, the load-balancing loss comes back as HF computes it and is added to
    the fused loss; the router's gradient flows through the routing weights the grouped experts use."""
    model, reference = _pair(family)
    kernelworks.patch(model)
    ids = _ids()
    model.train(), reference.train()
    out = model(ids, labels=ids, output_router_logits=True)
    ref = reference(ids, labels=ids, output_router_logits=True)
    torch.testing.assert_close(out.aux_loss, ref.aux_loss, **TOL)
    torch.testing.assert_close(out.loss, ref.loss, **TOL)
    assert len(out.router_logits) == len(ref.router_logits)
    out.loss.backward(), ref.loss.backward()
    router = next(n for n in _grads(model) if n.endswith("mlp.gate.weight"))
    torch.testing.assert_close(_grads(model)[router], _grads(reference)[router], **TOL)


def _graph_nodes(t: torch.Tensor) -> set[str]:
    """Names of the autograd nodes ``t`` was computed through."""
    seen, stack, names = set(), [t.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        stack.extend(next_fn for next_fn, _ in node.next_functions)
    return names


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral"])
def test_experts_take_the_packed_gate_up(family):
    """The patched experts hand the gated activation the whole gate-up product: no slice of it in the
    graph, whose backward would zero-fill and copy a [pairs, 2I] gradient per half."""
    model, _ = _pair(family)
    kernelworks.patch(model)
    experts = model.model.layers[0].mlp.experts
    tokens = torch.randn(6, model.config.hidden_size, device=DEVICE, requires_grad=True)
    top_k = torch.stack([torch.randperm(experts.num_experts)[:2] for _ in range(6)]).to(DEVICE)
    weights = torch.rand(6, 2, device=DEVICE, requires_grad=True)
    nodes = _graph_nodes(experts(tokens, top_k, weights))
    assert not any(n.startswith("Slice") for n in nodes), nodes
    assert any("Swiglu" in n or "Geglu" in n or "Activation" in n for n in nodes), nodes


def test_experts_in_another_layout_stay_on_torch():
    """Stacked experts in a layout the grouped kernels do not compute (here: expert parallel) keep HF's
    forward, with a warning; the dense MLPs are still patched."""
    model, reference = _pair("qwen3_moe")
    model.model.layers[0].mlp.experts._is_expert_parallel = True
    with pytest.warns(UserWarning, match="stays on torch"):
        kernelworks.patch(model)
    assert "experts" not in patched(model)
    assert type(model.model.layers[0].mlp.experts) is type(reference.model.layers[0].mlp.experts)


def test_loss_num_items_in_batch_and_eval_labels():
    model, reference = _pair()
    kernelworks.patch(model)
    ids, labels = _ids(), _ids(seed=3)
    labels[:, :3] = -100
    model.train(), reference.train()
    n = torch.tensor(7)
    torch.testing.assert_close(model(ids, labels=labels, num_items_in_batch=n).loss,
                               reference(ids, labels=labels, num_items_in_batch=n).loss, **TOL)
    model.eval(), reference.eval()  # evaluation keeps the logits and takes the loss from them
    with torch.no_grad():
        out, ref = model(ids, labels=labels), reference(ids, labels=labels)
    torch.testing.assert_close(out.logits, ref.logits, **TOL)
    torch.testing.assert_close(out.loss, ref.loss, **TOL)
    with torch.no_grad():  # logits_to_keep: only the last position's logits
        torch.testing.assert_close(model(ids, logits_to_keep=1).logits, reference(ids, logits_to_keep=1).logits,
                                   **TOL)


# ------------------------------------------------------------------------------------------- Qwen3-Next


def _linear_cache(model):
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def test_qwen3_next_decode_updates_the_cached_state_in_place(monkeypatch):
    """Generation decodes through ``gated_delta_decode`` on the cache's own buffer: the buffer the cache
    allocated from our final state is our layout, so no per-step copy back (``update_recurrent_state``)."""
    from transformers import cache_utils

    model, reference = _pair("qwen3_next")
    kernelworks.patch(model)
    decodes, updates = [], []
    decode = kernelworks.gated_delta_decode
    monkeypatch.setattr(kernelworks, "gated_delta_decode", lambda *a, **k: decodes.append(1) or decode(*a, **k))
    update = cache_utils.DynamicCache.update_recurrent_state
    monkeypatch.setattr(cache_utils.DynamicCache, "update_recurrent_state",
                        lambda self, *a, **k: updates.append(1) or update(self, *a, **k))
    prompt = _ids(2, 6, seed=2)
    new = model.generate(prompt, max_new_tokens=4, do_sample=False)
    assert len(decodes) == 3 and len(updates) == 1  # prefill stores once; three decode steps in place
    monkeypatch.undo()
    assert torch.equal(new, reference.generate(prompt, max_new_tokens=4, do_sample=False))


def test_qwen3_next_continues_a_cache_the_unpatched_model_filled():
    """A cache filled by HF's forward (its ``[.., K, V]`` layout) is continued correctly (one copy a step)."""
    model, reference = _pair("qwen3_next")
    prompt, step = _ids(2, 6, seed=2), _ids(2, 1, seed=3)
    from kernelworks.patch.layers import CACHE_NAME  # the installed transformers' keyword for the cache

    with torch.no_grad():
        cache, ref_cache = _linear_cache(model), _linear_cache(reference)
        reference(prompt, **{CACHE_NAME: cache}, use_cache=True)
        reference(prompt, **{CACHE_NAME: ref_cache}, use_cache=True)
        kernelworks.patch(model)
        out = model(step, **{CACHE_NAME: cache}, use_cache=True).logits
        ref = reference(step, **{CACHE_NAME: ref_cache}, use_cache=True).logits
    torch.testing.assert_close(out, ref, **TOL)
    state, ref_state = cache.layers[0].recurrent_states[0], ref_cache.layers[0].recurrent_states[0]
    torch.testing.assert_close(state, ref_state, **TOL)


def test_qwen3_next_packed_rows_leave_the_last_sequence_in_the_cache():
    """A Gated DeltaNet layer on a packed row with a cache: the recurrent and convolution states it leaves are
    those of the row's last sequence alone (nothing of the sequence before it)."""
    model, _ = _pair("qwen3_next")
    kernelworks.patch(model)
    mixer = model.model.layers[0].linear_attn
    torch.manual_seed(6)
    a, b = torch.randn(1, 5, 64, device=DEVICE), torch.randn(1, 2, 64, device=DEVICE)  # b shorter than the conv
    with torch.no_grad():
        packed_cache, alone_cache = _linear_cache(model), _linear_cache(model)
        out = mixer(torch.cat([a, b], 1), cache=packed_cache,
                    position_ids=torch.tensor([[0, 1, 2, 3, 4, 0, 1]], device=DEVICE))
        alone = mixer(b, cache=alone_cache)
    torch.testing.assert_close(out[:, 5:], alone, **TOL)
    packed_layer, alone_layer = packed_cache.layers[0], alone_cache.layers[0]
    torch.testing.assert_close(packed_layer.recurrent_states[0], alone_layer.recurrent_states[0], **TOL)
    torch.testing.assert_close(packed_layer.conv_states[0], alone_layer.conv_states[0], **TOL)


def test_qwen3_next_linear_attention_off_keeps_hf_gated_deltanet():
    model, reference = _pair("qwen3_next")
    kernelworks.patch(model, linear_attention=False)
    assert "linear_attention" not in patched(model)
    assert type(model.model.layers[0].linear_attn) is type(reference.model.layers[0].linear_attn)
    ids = _ids()
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference(ids).logits, **TOL)
    prompt = _ids(1, 6, seed=2)
    assert torch.equal(model.generate(prompt, max_new_tokens=3, do_sample=False),
                       reference.generate(prompt, max_new_tokens=3, do_sample=False))


@pytest.mark.parametrize("options", [{"rms_norm": False}, {"rms_norm": False, "attention": False}],
                         ids=["no-norms", "no-norms-no-attention"])
def test_qwen3_next_packed_rows_stay_apart_with_hf_decoder_layers(options):
    """Without our decoder layers (``rms_norm=False``) HF's own hands the linear-attention module no
    ``position_ids``: the patched model entry passes them down itself, so a packed row still equals its two
    sequences run alone (before: the second sequence's state ran into the first's, error 0.019)."""
    model, _ = _pair("qwen3_next")
    kernelworks.patch(model, **options)
    assert "linear_attention" in patched(model) and "rms_norm" not in patched(model)
    a, b = _ids(1, 5, seed=4), _ids(1, 4, seed=5)
    position_ids = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3]], device=DEVICE)
    with torch.no_grad():
        logits = model(torch.cat([a, b], 1), position_ids=position_ids, use_cache=False).logits
        torch.testing.assert_close(logits[:, :5], model(a, use_cache=False).logits, **TOL)
        torch.testing.assert_close(logits[:, 5:], model(b, use_cache=False).logits, **TOL)


def test_a_float64_model_runs_on_torch():
    """The kernels take float32, float16 and bfloat16: a patched model cast to float64 runs its torch forwards
    (warned once) — logits, and a training loss computed as HF does (in float32) — instead of raising."""
    model, reference = _pair()
    kernelworks.patch(model)
    model.double()
    reference.double()
    ids = _ids()
    with pytest.warns(UserWarning, match="float64"), torch.no_grad():
        logits = model(ids).logits
    with torch.no_grad():
        torch.testing.assert_close(logits, reference(ids).logits)
    model.train()
    reference.train()
    loss, ref_loss = model(ids, labels=ids).loss, reference(ids, labels=ids).loss
    torch.testing.assert_close(loss, ref_loss)
    loss.backward()
    ref_loss.backward()
    torch.testing.assert_close(_grads(model), _grads(reference))


# ------------------------------------------------------------------------------------------- attention paths


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen3_next"])
def test_packed_sequences_equal_separate(family):
    """[1, 9] rows packing sequences of 5 and 4 tokens (position_ids restart) equal the two run alone."""
    model, reference = _pair(family)
    kernelworks.patch(model)
    a, b = _ids(1, 5, seed=4), _ids(1, 4, seed=5)
    packed = torch.cat([a, b], 1)
    position_ids = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3]], device=DEVICE)
    with torch.no_grad():
        logits = model(packed, position_ids=position_ids).logits
        torch.testing.assert_close(logits[:, :5], model(a).logits, **TOL)
        torch.testing.assert_close(logits[:, 5:], model(b).logits, **TOL)
        if family == "qwen3_next":  # HF's torch path runs packed sequences of its linear layers into each other
            return
        # HF detects packing only without a cache (training), hence use_cache=False on its side
        ref = reference(packed, position_ids=position_ids, use_cache=False).logits
        torch.testing.assert_close(logits, ref, **TOL)


def test_padding_falls_back_to_torch_with_a_warning():
    model, reference = _pair()
    kernelworks.patch(model)
    ids = _ids()
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding
    with pytest.warns(UserWarning, match="padding"), torch.no_grad():
        out = model(ids, attention_mask=mask).logits
    with torch.no_grad():
        torch.testing.assert_close(out, reference(ids, attention_mask=mask).logits, **TOL)


def test_dropout_in_training_falls_back_without_a_mask():
    """No mask to hand (causal, no padding): the fallback builds it, so the answer is torch's."""
    model, reference = _pair("mistral")  # sliding window 4 < 8 tokens: the dense mask carries it
    for m in (model, reference):
        for layer in m.model.layers:
            layer.self_attn.attention_dropout = 0.5
    kernelworks.patch(model)
    model.train(), reference.train()
    ids = _ids()
    with pytest.warns(UserWarning, match="dropout"):
        torch.manual_seed(0)
        out = model(ids, labels=ids).loss
    torch.manual_seed(0)
    torch.testing.assert_close(out, reference(ids, labels=ids).loss, **TOL)



@pytest.mark.parametrize("family", ["llama", "mistral"])
def test_static_cache_generation_matches(family):
    """A static cache's buffer is longer than the tokens written: its keys past them must not be attended to
    (the kernel aligns causal bottom-right, so those calls take the fallback with HF's mask)."""
    model, reference = _pair(family)
    kernelworks.patch(model)
    prompt = _ids(2, 9, seed=3)
    kwargs = dict(max_new_tokens=5, do_sample=False, cache_implementation="static")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        new = model.generate(prompt, **kwargs)
    assert torch.equal(new, reference.generate(prompt, **kwargs))



@pytest.mark.parametrize("family", ["llama", "qwen3_next"])
def test_training_with_labels_builds_no_cache_unless_asked(family):
    """A training forward with labels fills no KV cache by default (HF builds one every step from
    ``config.use_cache``); ``use_cache=True`` still gets one. The loss is the same either way."""
    from kernelworks.patch.layers import CACHE_NAME

    model, _ = _pair(family)
    kernelworks.patch(model)
    model.train()
    ids = _ids()
    plain = model(ids, labels=ids)
    asked = model(ids, labels=ids, use_cache=True)
    assert getattr(plain, CACHE_NAME) is None and getattr(asked, CACHE_NAME) is not None
    torch.testing.assert_close(plain.loss, asked.loss, **TOL)


def test_mask_sees_a_static_buffer():
    """The mask function decides "the queries end the keys" from ``q_offset`` / ``q_length`` against the keys, by
    keyword or by position: a dynamic cache's 3 new tokens after 5 end its 8 keys, a static buffer of 16 does
    not; a tensor offset (a static cache's) counts as not ending, with no host read."""
    from kernelworks.patch import attention

    def sizes(kv_length, q_offset=5):
        return {"batch_size": 1, "q_length": 3, "kv_length": kv_length, "q_offset": q_offset, "kv_offset": 0}

    assert attention._queries_end_the_keys((), sizes(8))
    assert not attention._queries_end_the_keys((), sizes(16))
    assert not attention._queries_end_the_keys(tuple(sizes(16).values())[:attention._MASK_PARAMS.index(
        "kv_offset") + 1], {})
    assert not attention._queries_end_the_keys((), sizes(8, q_offset=torch.tensor(5)))


def test_gemma3_bidirectional_sliding_window():
    """Gemma 3's bidirectional local layers see keys with ``|q − kv| < W`` (W − 1 either way, not W)."""
    config = _config("gemma3_text")
    config.use_bidirectional_attention = True
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config).float()
    reference = tf.AutoModelForCausalLM.from_config(copy.deepcopy(config)).float()
    reference.load_state_dict(model.state_dict())
    model, reference = model.to(DEVICE).eval(), reference.to(DEVICE).eval()
    kernelworks.patch(model)
    ids = _ids(2, 12)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference(ids).logits, **TOL)


@pytest.mark.parametrize("family,options", [("llama", {}), ("qwen3", {}), ("gemma3_text", {}),
                                            ("llama", {"rms_norm": False, "rope": False, "attention": False,
                                                       "loss": False})])
def test_fp32_model_under_autocast_trains(family, options):
    """An fp32 model under ``torch.autocast(bfloat16)`` (the HF Trainer's ``bf16=True``): the residual stream
    stays fp32 while Linear outputs are bf16, q/k leave fp32 norms; the fused add promotes as HF's does, the
    attention takes autocast's dtype as SDPA does, the MLP stays on the model's modules. Loss and gradients
    agree with the unpatched model under the same autocast (bf16 tolerance)."""
    model, reference = _pair(family)
    kernelworks.patch(model, **options)
    model.train(), reference.train()
    ids = _ids()
    losses = []
    for m in (model, reference):
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
            loss = m(ids, labels=ids).loss
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-2, atol=1e-2)
    grads, ref_grads = _grads(model), _grads(reference)
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        assert grads[name].dtype == torch.float32
        err = (grads[name] - ref_grads[name]).norm() / ref_grads[name].norm().clamp_min(1e-12)
        assert err < 0.1, f"{name}: relative L2 {err:.3g}"


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_output_attentions_come_from_eager_attention(family):
    """Asked for attention weights, the patched model runs its eager attention for them (with a warning); a
    model on eager (Gemma 2 always is) returned them before patching and does after."""
    model, reference = _pair(family)
    for m in (model, reference):
        m.config._attn_implementation = "eager"
    kernelworks.patch(model)
    ids = _ids()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model(ids, output_attentions=True)
        ref = reference(ids, output_attentions=True)
    assert len(out.attentions) == len(ref.attentions) == 2
    for got, want in zip(out.attentions, ref.attentions):
        torch.testing.assert_close(got, want, **TOL)
    torch.testing.assert_close(out.logits, ref.logits, **TOL)

@pytest.mark.parametrize("family", ["llama", "gemma2"])
@pytest.mark.parametrize("head", ["AutoModel", "AutoModelForSequenceClassification"])
def test_output_attentions_of_a_base_model_and_a_classifier(family, head):
    """Models whose forward is HF's own (a base model, a sequence classifier) pass no keyword down: the
    attention function sees transformers' output capture instead, and runs eager attention for the weights."""
    config = _config(family)
    config._attn_implementation, config.num_labels, config.pad_token_id = "eager", 3, 0
    torch.manual_seed(5)
    model = getattr(tf, head).from_config(config).float()
    reference = getattr(tf, head).from_config(copy.deepcopy(config)).float()
    reference.load_state_dict(model.state_dict())
    model, reference = model.to(DEVICE).eval(), reference.to(DEVICE).eval()
    kernelworks.patch(model)
    ids = _ids() % (VOCAB - 1) + 1  # no padding token (0): the classifier pools the last token
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out, ref = model(ids, output_attentions=True), reference(ids, output_attentions=True)
    assert len(out.attentions) == len(ref.attentions) == 2
    for got, want in zip(out.attentions, ref.attentions):
        torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("kind", ["forward", "backward"])
@pytest.mark.parametrize("where", ["lm_head", "post_attention_layernorm"])
def test_hooks_on_fused_modules_still_run(where, kind):
    """A hook on the LM head (the fused loss reads its weight) or on the norm fused with the residual add: the
    patched model calls those modules when they are hooked, so the hook runs, and the loss (and, for a backward
    hook that scales the gradient, the gradients) are the unpatched ones."""
    model, reference = _pair("llama")
    kernelworks.patch(model)
    calls = []

    def forward_hook(module, args, out):
        calls.append(1)
        return out * 1.5

    def backward_hook(module, grad_in, grad_out):
        calls.append(1)
        return tuple(None if g is None else g * 1.5 for g in grad_in)

    for m in (model, reference):
        target = m.lm_head if where == "lm_head" else m.model.layers[0].post_attention_layernorm
        if kind == "forward":
            target.register_forward_hook(forward_hook)
        else:
            target.register_full_backward_hook(backward_hook)
        m.train()
    ids = _ids()
    loss, ref = model(ids, labels=ids).loss, reference(ids, labels=ids).loss
    torch.testing.assert_close(loss, ref, **TOL)
    loss.backward()
    ref.backward()
    assert len(calls) == 2  # once in each model
    grads, want = _grads(model), _grads(reference)
    for name in want:
        torch.testing.assert_close(grads[name], want[name], **TOL)


def test_a_patched_model_pickles_and_loads_patched():
    """``torch.save(model)``: the patched classes are rebuilt on loading (they cannot be found by name, which is
    the original class's), and the loaded model computes what the saved one did."""
    import io

    model, _ = _pair("qwen3_moe")
    kernelworks.patch(model)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert type(loaded) is type(model) and type(loaded.model.layers[0]) is type(model.model.layers[0])
    assert patched(loaded) == patched(model)
    ids = _ids()
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits, rtol=0, atol=0)


def test_a_pickled_patched_model_loads_in_a_new_process(tmp_path):
    """Where nothing was patched yet: loading registers the "kernelworks" attention its config names."""
    import subprocess
    import sys

    model, _ = _pair("llama")
    kernelworks.patch(model)
    torch.save(model.cpu(), tmp_path / "model.pt")
    path = str(tmp_path / "model.pt")
    code = (f"import torch, kernelworks; m = torch.load({path!r}, weights_only=False); "
            "ids = torch.randint(0, 128, (1, 5)); print(tuple(m(ids).logits.shape), kernelworks.patched(m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "(1, 5, 128)" in out.stdout and "attention" in out.stdout


def test_moe_forward_takes_hf_positional_order():
    """HF's MoE ``ForCausalLM.forward`` ends ``(…, use_cache, output_router_logits, logits_to_keep)``."""
    model, reference = _pair("qwen3_moe")
    kernelworks.patch(model)
    ids = _ids()
    with torch.no_grad():
        out = model(ids, None, None, None, None, None, False, True)
        ref = reference(ids, None, None, None, None, None, False, True)
    assert out.router_logits is not None and len(out.router_logits) == len(ref.router_logits)
    assert out.logits.shape == ref.logits.shape


# ------------------------------------------------------------------------------------------- options, unpatch


def _pieces(model, original) -> dict[str, bool]:
    """Which pieces run on kernelworks: by the class of the modules that carry them."""
    layer = model.model.layers[0]
    return {"rms_norm": type(model.model.norm) is not type(original.model.norm),
            "mlp": type(layer.mlp) is not type(original.model.layers[0].mlp),
            "rope": type(layer.self_attn) is not type(original.model.layers[0].self_attn),
            "attention": model.config._attn_implementation == "kernelworks",
            "loss": type(model) is not type(original)}


@pytest.mark.parametrize("off", ["rms_norm", "mlp", "rope", "attention", "loss"])
def test_each_option_off_leaves_that_piece_on_torch(off, rotary):
    model, reference = _pair("qwen3")
    kernelworks.patch(model, **{off: False})
    pieces = _pieces(model, reference)
    assert pieces == {name: name != off for name in pieces}
    if off == "loss":  # training with labels on torch: the logits come back
        model.train()
        assert model(_ids(1, 4), labels=_ids(1, 4)).logits is not None


def test_mlp_runs_as_one_gated_mlp_unless_the_projections_are_wrapped(monkeypatch):
    """Plain projections: one kernelworks.gated_mlp per layer (the activation recomputed in the backward);
    a hooked projection (as LoRA or a quantised wrapper would be): the model's own modules around
    kernelworks.swiglu, hook honoured. Both match the unpatched model, gradients included."""
    from kernelworks.patch import layers

    # the MLP module's own path: a plain layer would otherwise run as one node (test_a_plain_decoder_layer_...)
    monkeypatch.setattr(layers, "_dense_layer_args", lambda *a: None)
    calls = []
    real = kernelworks.gated_mlp
    monkeypatch.setattr(kernelworks, "gated_mlp", lambda *a, **k: calls.append(1) or real(*a, **k))
    model, reference = _pair()
    kernelworks.patch(model)
    model.train(), reference.train()
    ids = _ids(1, 6)
    model(ids, labels=ids).loss.backward()
    reference(ids, labels=ids).loss.backward()
    assert len(calls) == len(model.model.layers)
    for name, grad in _grads(reference).items():
        torch.testing.assert_close(_grads(model)[name], grad, **TOL)
    calls.clear()
    hooked = []
    model.model.layers[0].mlp.up_proj.register_forward_hook(lambda *_: hooked.append(1))
    model(ids, labels=ids)
    assert len(calls) == len(model.model.layers) - 1 and hooked == [1]


@pytest.mark.parametrize("accum", [None, torch.float32])
def test_loss_accum_dtype_reaches_the_fused_loss(monkeypatch, accum):
    seen = []
    real = kernelworks.fused_linear_cross_entropy
    monkeypatch.setattr(kernelworks, "fused_linear_cross_entropy",
                        lambda *a, **k: seen.append(k["accum_dtype"]) or real(*a, **k))
    model, reference = _pair()
    model.bfloat16(), reference.bfloat16()
    kernelworks.patch(model, loss_accum_dtype=accum)
    model.train()
    ids = _ids(1, 6)
    model(ids, labels=ids).loss.backward()
    assert seen == [accum or torch.bfloat16]
    with pytest.raises(TypeError, match="loss_accum_dtype"):
        kernelworks.patch(model, loss_accum_dtype=torch.int32)


def test_rope_stays_on_torch_while_the_op_is_missing(monkeypatch):
    monkeypatch.delattr(kernelworks, "rotary_embedding", raising=False)
    model, reference = _pair()
    with pytest.warns(UserWarning, match="rotary_embedding"):
        kernelworks.patch(model)
    assert not _pieces(model, reference)["rope"] and "rope" not in patched(model)


def test_unpatch_restores_the_original_model(rotary):
    model, reference = _pair("qwen3")
    classes = [type(m) for m in model.modules()]
    kernelworks.patch(model)
    kernelworks.patch(model, mlp=False)  # patching twice re-patches
    assert patched(model) == ("rms_norm", "rope", "attention", "loss")
    kernelworks.unpatch(model)
    assert [type(m) for m in model.modules()] == classes and patched(model) == ()
    assert model.config._attn_implementation == "sdpa"
    assert not any(hasattr(layer.self_attn, "_kernelworks_fallback") for layer in model.model.layers)
    ids = _ids()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reference(ids).logits)


def test_gradient_checkpointing_still_recomputes():
    model, reference = _pair()
    kernelworks.patch(model)
    model.gradient_checkpointing_enable(), reference.gradient_checkpointing_enable()
    model.train(), reference.train()
    calls = []
    model.model.layers[0].self_attn.register_forward_hook(lambda *_: calls.append(1))
    ids = _ids(1, 6)
    out, ref = model(ids, labels=ids), reference(ids, labels=ids)
    out.loss.backward(), ref.loss.backward()
    assert len(calls) == 2, "the decoder layer was not recomputed in the backward"
    for name, grad in _grads(reference).items():
        torch.testing.assert_close(_grads(model)[name], grad, **TOL)


def test_torch_compile():
    model, reference = _pair()
    kernelworks.patch(model)
    ids = _ids(1, 6)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, backend="aot_eager")(ids).logits, reference(ids).logits,
                                   **TOL)


@pytest.mark.parametrize("family", ["llama", "qwen3_next"])
def test_torch_compile_training_step_is_one_graph(family):
    """fullgraph=True over forward + loss (no graph break anywhere), then backward: loss and every gradient
    equal the unpatched model's."""
    model, reference = _pair(family)
    kernelworks.patch(model)
    model.train()
    reference.train()
    ids = _ids(2, 8)
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()  # another family's compile of the shared patched forward would make this a recompile
    counter = CompileCounterWithBackend("aot_eager")
    loss = torch.compile(model, backend=counter, fullgraph=True)(ids, labels=ids).loss
    loss.backward()
    ref = reference(ids, labels=ids).loss
    ref.backward()
    assert counter.frame_count == 1
    torch.testing.assert_close(loss, ref, **TOL)
    for name, grad in _grads(reference).items():
        torch.testing.assert_close(_grads(model)[name], grad, **TOL)


def test_packing_is_decided_once_per_forward(monkeypatch):
    """Explicit position_ids: one packing check at the model's entry (under torch.compile one break, before
    the layers), none in the attention calls; packed rows still equal HF's packed result."""
    from kernelworks.patch import attention

    model, reference = _pair()
    kernelworks.patch(model)
    calls = []
    monkeypatch.setattr(attention, "_segments", lambda *a: calls.append(a) or None)
    ids = _ids(1, 9)
    plain = torch.arange(9, device=DEVICE)[None]
    with torch.no_grad():
        torch.testing.assert_close(model(ids, position_ids=plain).logits, reference(ids).logits, **TOL)
        assert calls == []  # decided unpacked at the top: the layers never look
        model(ids)  # no position_ids: the model numbers the tokens, nothing to check
        assert calls == []
    monkeypatch.undo()
    packed = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3]], device=DEVICE)
    with torch.no_grad():  # packed rows under torch.compile: the varlen path (host-sized, so it breaks graphs)
        logits = torch.compile(model, backend="aot_eager")(ids, position_ids=packed).logits
        ref = reference(ids, position_ids=packed, use_cache=False).logits
    torch.testing.assert_close(logits, ref, **TOL)


def test_training_forward_skips_hfs_packing_sync(monkeypatch):
    """HF's base model checks ``position_ids`` for packing on every training forward, ending in a host sync
    (``.all()`` on the device). Where the patched entry has decided the batch is not packed, that check is
    skipped; a packed batch, an unpatched model and a padded batch still run it."""
    from kernelworks.patch import attention

    model, reference = _pair()
    model.train(), reference.train()  # training: no cache, so HF checks for packing
    kernelworks.patch(model)
    hf_check = attention._find_packed_sequence_indices.hf
    calls = []
    monkeypatch.setattr(attention._find_packed_sequence_indices, "hf", lambda p: calls.append(1) or hf_check(p))
    ids = _ids(2, 9)
    model(ids, labels=ids).loss.backward()
    model(ids, position_ids=torch.arange(9, device=DEVICE)[None].expand(2, -1), labels=ids)
    assert calls == []
    packed = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3]] * 2, device=DEVICE)
    loss = model(ids, position_ids=packed, labels=ids).loss
    assert len(calls) == 1
    torch.testing.assert_close(loss, reference(ids, position_ids=packed, labels=ids, use_cache=False).loss, **TOL)
    assert len(calls) == 2  # HF's own model, patched or not, goes through the same check


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "qwen3"])
def test_a_plain_decoder_layer_runs_as_one_call(family, monkeypatch):
    """A training forward of a Llama-shaped model runs each decoder layer as one call: one autograd node
    (``patch.decoder``), or for Qwen3's q/k norms one ``_dense_layer`` call (one host-time replay for the
    layer on a GPU). The same ops as the modules: the loss and every gradient equal the module-by-module
    path's (the node sums the q/k/v projections' gradients in cuBLAS: within rounding) and HF's within the
    tolerance. A hook, a wrapped projection, a padding mask or a KV cache send the layer back to its modules."""
    from kernelworks.patch import decoder, layers

    model, reference = _pair(family)
    if family == "qwen2":  # Qwen2's q/k/v projections have biases: give them values
        with torch.no_grad():
            for m in (model, reference):
                m.model.layers[0].self_attn.q_proj.bias.fill_(0.1)
    model.train(), reference.train()
    kernelworks.patch(model)
    calls, nodes = [], []
    one_call, one_node = layers._dense_layer, decoder.decoder_layer
    monkeypatch.setattr(layers, "_dense_layer", lambda *a: calls.append(1) or one_call(*a))
    monkeypatch.setattr(decoder, "decoder_layer", lambda *a: nodes.append(1) or one_node(*a))
    ids = _ids(2, 9)

    def step(m) -> tuple[torch.Tensor, dict]:
        m.zero_grad(set_to_none=True)
        loss = m(ids, labels=ids).loss
        loss.backward()
        return loss, _grads(m)

    loss, grads = step(model)
    assert len(calls if family == "qwen3" else nodes) == len(model.model.layers)
    assert not (nodes if family == "qwen3" else calls)
    monkeypatch.setattr(layers, "_dense_layer_args", lambda *a: None)
    by_modules = step(model)
    assert len(calls) + len(nodes) == len(model.model.layers)
    exact = {"rtol": 0, "atol": 0} if family == "qwen3" else {"rtol": 1e-6, "atol": 1e-7}
    torch.testing.assert_close(loss, by_modules[0], **exact)
    for name, g in grads.items():
        torch.testing.assert_close(g, by_modules[1][name], **exact, msg=name)
    ref_loss, ref_grads = step(reference)
    torch.testing.assert_close(loss, ref_loss, **TOL)
    for name, g in grads.items():
        torch.testing.assert_close(g, ref_grads[name], **TOL, msg=name)
    monkeypatch.undo()

    calls.clear(), nodes.clear()
    monkeypatch.setattr(layers, "_dense_layer", lambda *a: calls.append(1) or one_call(*a))
    monkeypatch.setattr(decoder, "decoder_layer", lambda *a: nodes.append(1) or one_node(*a))
    handle = model.model.layers[1].self_attn.k_proj.register_forward_hook(lambda mod, args, out: out * 2)
    hooked = model(ids, labels=ids).loss
    assert len(calls) + len(nodes) == len(model.model.layers) - 1
    calls.clear(), nodes.clear()
    handle.remove()
    reference.model.layers[1].self_attn.k_proj.register_forward_hook(lambda mod, args, out: out * 2)
    torch.testing.assert_close(hooked, reference(ids, labels=ids).loss, **TOL)
    calls.clear()
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    model(ids, attention_mask=mask, labels=ids)
    model.eval()
    with torch.no_grad():
        model.generate(ids[:1, :4], max_new_tokens=2, do_sample=False)
    assert calls == [] and nodes == []
    with torch.no_grad():  # inference without a cache: one call, no node
        model(ids, use_cache=False)
    assert len(calls) == len(model.model.layers) and nodes == []


def test_a_large_layer_keeps_one_node_per_op(monkeypatch):
    """A layer whose MLP activations exceed ``MAX_NODE_MLP_BYTES`` is not one node (which would hold them all
    through its backward): it runs as one replayed call of the per-op nodes."""
    from kernelworks.patch import decoder

    model, _ = _pair()
    model.train()
    kernelworks.patch(model)
    nodes = []
    one_node = decoder.decoder_layer
    monkeypatch.setattr(decoder, "decoder_layer", lambda *a: nodes.append(1) or one_node(*a))
    ids = _ids(2, 9)
    model(ids, labels=ids)
    assert len(nodes) == len(model.model.layers)
    nodes.clear()
    monkeypatch.setattr(decoder, "MAX_NODE_MLP_BYTES", 2 * 9 * 128 * 4 - 1)  # tokens × intermediate × fp32, less 1
    loss = model(ids, labels=ids).loss
    assert nodes == []
    monkeypatch.setattr(decoder, "MAX_NODE_MLP_BYTES", 1 << 30)
    rotary = model.model.rotary_emb
    monkeypatch.setattr(rotary, "forward", lambda *a, **k: tuple(t.requires_grad_() for t in type(rotary).forward(
        rotary, *a, **k)))
    with pytest.raises(Exception, match="cos"):  # a gradient asked of cos/sin: the rotary op refuses, as before
        model(ids, labels=ids)
    assert nodes == []
    graph = _graph_nodes(loss)
    assert "GatedMlpFunctionBackward" in graph and "LlamaDecoderLayerFunctionBackward" not in graph


def test_hidden_states_asked_once_keep_the_one_node_layers(monkeypatch):
    """HF installs its output-capture hooks on the layers and attention modules the first time
    ``output_hidden_states`` is asked, and never removes them: idle, they must not send the layers back to their
    modules. The hidden states themselves still come out right."""
    from kernelworks.patch import decoder

    model, reference = _pair()
    model.train(), reference.train()
    kernelworks.patch(model)
    nodes = []
    one_node = decoder.decoder_layer
    monkeypatch.setattr(decoder, "decoder_layer", lambda *a: nodes.append(1) or one_node(*a))
    ids = _ids(2, 9)
    states = model(ids, output_hidden_states=True).hidden_states
    for ours, theirs in zip(states, reference(ids, output_hidden_states=True).hidden_states, strict=True):
        torch.testing.assert_close(ours, theirs, **TOL)
    assert model.model.layers[0].self_attn._forward_hooks  # HF's hooks are there now
    nodes.clear()
    model(ids, labels=ids)
    assert len(nodes) == len(model.model.layers)


def test_a_second_register_keeps_a_later_wrapper_of_the_packing_check(monkeypatch):
    """Another library wrapping HF's packing check after us stays in the chain, and registering again (a second
    patch, an unpickled model) does not wrap that wrapper (a cycle)."""
    from transformers import masking_utils

    from kernelworks.patch import attention

    attention.register()
    ours = masking_utils.find_packed_sequence_indices
    seen = []
    monkeypatch.setattr(masking_utils, "find_packed_sequence_indices", lambda p: seen.append(1) or ours(p))
    attention.register()
    positions = torch.tensor([[0, 1, 2, 0, 1]])
    assert masking_utils.find_packed_sequence_indices(positions) is not None and seen == [1]


def test_one_node_layer_with_frozen_weights():
    """The one-node layer computes only the gradients asked for: frozen weights (fine-tuning a part) get none,
    the others equal the module-by-module path's; with the embedding frozen too, the first layer's input needs
    no gradient."""
    from kernelworks.patch import layers

    model, _ = _pair("qwen2")
    model.train()
    kernelworks.patch(model)
    frozen = ["model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
              "model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.v_proj.bias",
              "model.layers.1.mlp.up_proj.weight"]
    for name, p in model.named_parameters():
        p.requires_grad_(name not in frozen)
    ids = _ids(2, 9)

    def step():
        model.zero_grad(set_to_none=True)
        model(ids, labels=ids).loss.backward()
        return _grads(model)

    grads = step()
    assert set(frozen).isdisjoint(grads) and len(grads) == sum(p.requires_grad for p in model.parameters())
    original = layers._dense_layer_args
    layers._dense_layer_args = lambda *a: None
    try:
        by_modules = step()
    finally:
        layers._dense_layer_args = original
    assert grads.keys() == by_modules.keys()
    for name, g in grads.items():
        torch.testing.assert_close(g, by_modules[name], rtol=1e-6, atol=1e-7, msg=name)


# ------------------------------------------------------------------------------------------- errors


def _gpt2():
    return tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=VOCAB, n_positions=16))


@pytest.mark.gpu
def test_model_on_the_cpu_of_a_gpu_machine_stays_on_torch():
    """Patched, then moved to the CPU (no interpreter): torch's forwards and attention, warned, same answer."""
    model, reference = _pair()
    kernelworks.patch(model)
    model.cpu(), reference.cpu()
    ids = _ids().cpu()
    with pytest.warns(UserWarning, match="the kernels take CUDA tensors"), torch.no_grad():
        out = model(ids).logits
    with torch.no_grad():
        torch.testing.assert_close(out, reference(ids).logits, **TOL)


def test_an_older_transformers_is_refused(monkeypatch):
    """The patch reaches into transformers' internals; below the oldest tested release it says so (the floor
    raised past the installed version stands in for an old install)."""
    from kernelworks.patch import api

    model, _ = _pair()
    monkeypatch.setattr(api, "MIN_TRANSFORMERS", (99, 0))
    with pytest.raises(ImportError, match=r"transformers >= 99\.0"):
        kernelworks.patch(model)


def test_unsupported_family_raises():
    with pytest.raises(ValueError, match=r"supported family \(llama, mistral, qwen2, qwen3, gemma2.*gpt2"):
        kernelworks.patch(_gpt2())


def test_unsupported_family_warns_when_not_strict():
    model = _gpt2()
    with pytest.warns(UserWarning, match="nothing was patched"):
        assert kernelworks.patch(model, strict=False) is model
    assert patched(model) == ()


def test_bad_options_raise():
    model, _ = _pair()
    with pytest.raises(TypeError, match="rope: expected a Python bool, got str 'yes'"):
        kernelworks.patch(model, rope="yes")
    with pytest.raises(TypeError, match=r"model: expected a torch\.nn\.Module"):
        kernelworks.patch("llama")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernelworks.unpatch(model) is model  # not patched: unchanged, silently


# ------------------------------------------------------------------------ a user's own classes (session 21)


def _scaled(cls, factor: float):
    """A user's subclass of an HF module class whose forward scales the output (named in this test file)."""
    def forward(self, *args, **kwargs):
        out = cls.forward(self, *args, **kwargs)
        if isinstance(out, tuple):
            return (out[0] * factor, *out[1:])
        if hasattr(out, "logits"):
            out.logits = out.logits * factor
            return out
        return out * factor
    return type(f"My{cls.__name__}", (cls,), {"forward": forward, "__module__": __name__})


@pytest.mark.parametrize("where", ["causal_lm", "layer", "mlp", "attention", "norm"])
def test_a_users_own_classes_keep_their_forward(where):
    """A subclass the user wrote (or a module they swapped in) is not Hugging Face's class: patch leaves it
    to its own forward (warned once) instead of replacing it with ours, which computed something else: the
    subclass's override was dropped, or a LayerNorm in the RMSNorm's place ran as an RMSNorm."""
    model, reference = _pair()
    for m in (model, reference):
        layer = m.model.layers[0]
        if where == "causal_lm":
            m.__class__ = _scaled(type(m), 0.5)
        elif where == "layer":
            layer.__class__ = _scaled(type(layer), 0.5)
        elif where == "mlp":
            layer.mlp.__class__ = _scaled(type(layer.mlp), 0.5)
        elif where == "attention":
            layer.self_attn.__class__ = _scaled(type(layer.self_attn), 0.5)
        else:
            layer.post_attention_layernorm = torch.nn.LayerNorm(m.config.hidden_size, device=DEVICE)
    reference.load_state_dict(model.state_dict())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernelworks.patch(model)
    if where != "norm":
        assert any("is not Hugging Face's own class" in str(w.message) for w in caught)
    ids = _ids()
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference(ids).logits, **TOL)


def test_patching_a_model_and_its_base_is_refused():
    """patch(model) then patch(model.model) nested our classes, and an unpatch in either order left kernels
    running in a model that said it was unpatched."""
    model, _ = _pair()
    kernelworks.patch(model)
    with pytest.raises(ValueError, match="already patched through another module"):
        kernelworks.patch(model.model)
    kernelworks.unpatch(model)
    kernelworks.patch(model.model)
    with pytest.raises(ValueError, match="already patched through another module"):
        kernelworks.patch(model)
