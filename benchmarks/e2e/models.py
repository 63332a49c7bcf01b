"""Model shapes of the end-to-end benchmarks: real layer widths and vocabularies, few layers (random weights;
nothing is loaded from a hub)."""

from __future__ import annotations

import torch

MODELS: dict[str, dict] = {
    # Llama-3-8B's layer sizes and vocabulary, 2 layers; 2 × 4096 tokens a step.
    "llama3-8b-2l": {"family": "llama", "batch": 2, "seq": 4096, "config": dict(
        hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
        num_hidden_layers=2, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
        rms_norm_eps=1e-5, tie_word_embeddings=False)},
    # The small model of the issue: hidden 1024, 4 layers, 8 × 1024 tokens a step.
    "llama-small": {"family": "llama", "batch": 8, "seq": 1024, "config": dict(
        hidden_size=1024, intermediate_size=2816, num_attention_heads=16, num_key_value_heads=8,
        num_hidden_layers=4, vocab_size=32000, max_position_embeddings=4096, rms_norm_eps=1e-5,
        tie_word_embeddings=False)},
    # Qwen3-8B's layer sizes (q/k norms, head_dim 128) and vocabulary, 2 layers.
    "qwen3-8b-2l": {"family": "qwen3", "batch": 2, "seq": 4096, "config": dict(
        hidden_size=4096, intermediate_size=12288, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        num_hidden_layers=2, vocab_size=151936, max_position_embeddings=8192, rope_theta=1000000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=False)},
    # Qwen3-30B-A3B's layer sizes (128 experts, top 8, expert width 768; q/k norms, head_dim 128) and
    # vocabulary, 2 layers; 2 × 4096 tokens a step.
    "qwen3-moe-2l": {"family": "qwen3_moe", "batch": 2, "seq": 4096, "config": dict(
        hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_experts=128,
        num_experts_per_tok=8, norm_topk_prob=True, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        num_hidden_layers=2, vocab_size=151936, max_position_embeddings=8192, rope_theta=1000000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=False)},
    # Qwen3-Next-80B-A3B's layer sizes (Gated DeltaNet: 16 q/k and 32 value heads of 128; gated attention: 16/2
    # heads of 256, rotary on a quarter; experts of width 512, top 10, a shared expert) and vocabulary, 4 layers
    # in its 3 : 1 linear/full pattern; 128 of its 512 experts, so that weights, gradients and AdamW state fit
    # beside the activations of 2 × 4096 tokens. HF's Gated DeltaNet is its torch path (fla not installed).
    "qwen3-next-4l": {"family": "qwen3_next", "batch": 2, "seq": 4096, "config": dict(
        hidden_size=2048, intermediate_size=5120, moe_intermediate_size=512, shared_expert_intermediate_size=512,
        num_experts=128, num_experts_per_tok=10, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        num_attention_heads=16, num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
        linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        num_hidden_layers=4, vocab_size=151936, max_position_embeddings=8192,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
        rms_norm_eps=1e-6, tie_word_embeddings=False)},
}


def build(spec: dict, device: str = "cuda", dtype: torch.dtype = torch.bfloat16) -> torch.nn.Module:
    """A randomly initialised causal LM of the spec's family, in ``dtype`` on ``device``, SDPA attention (and
    HF's default experts implementation for MoE models: ``grouped_mm``, torch's grouped GEMM, where it runs; its
    per-expert loop for a dtype other than bf16)."""
    import transformers

    config_cls = {"llama": transformers.LlamaConfig, "qwen3": transformers.Qwen3Config,
                  "qwen3_moe": transformers.Qwen3MoeConfig, "qwen3_next": transformers.Qwen3NextConfig}[spec["family"]]
    model_cls = {"llama": transformers.LlamaForCausalLM, "qwen3": transformers.Qwen3ForCausalLM,
                 "qwen3_moe": transformers.Qwen3MoeForCausalLM,
                 "qwen3_next": transformers.Qwen3NextForCausalLM}[spec["family"]]
    config = config_cls(**spec["config"])
    config._attn_implementation = "sdpa"
    if dtype != torch.bfloat16 and hasattr(config, "_experts_implementation"):
        config._experts_implementation = "eager"  # torch's grouped GEMM takes bf16 only: HF's loop of experts
    with torch.device(device):
        model = model_cls(config)
    return model.to(dtype)
