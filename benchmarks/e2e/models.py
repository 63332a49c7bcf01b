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
}


def build(spec: dict, device: str = "cuda", dtype: torch.dtype = torch.bfloat16) -> torch.nn.Module:
    """A randomly initialised causal LM of the spec's family, in ``dtype`` on ``device``, SDPA attention (and
    HF's default experts implementation for MoE models: ``grouped_mm``, torch's grouped GEMM, where it runs)."""
    import transformers

    config_cls = {"llama": transformers.LlamaConfig, "qwen3": transformers.Qwen3Config,
                  "qwen3_moe": transformers.Qwen3MoeConfig}[spec["family"]]
    model_cls = {"llama": transformers.LlamaForCausalLM, "qwen3": transformers.Qwen3ForCausalLM,
                 "qwen3_moe": transformers.Qwen3MoeForCausalLM}[spec["family"]]
    config = config_cls(**spec["config"])
    config._attn_implementation = "sdpa"
    with torch.device(device):
        model = model_cls(config)
    return model.to(dtype)
