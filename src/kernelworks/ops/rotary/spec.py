"""The rotary family's spec: ``rotary_embedding`` (registered at import).

Case params: ``batch``, ``seq``, ``heads``, ``kv_heads``, ``head_dim``, ``rotary_dim`` (default
``head_dim``), ``layout`` (``"neox"`` default, ``"gptj"``), ``heads_dim`` (1: ``[B, H, S, D]``, default; 2:
``[B, S, H, D]``), ``source`` (how q and k sit in memory: ``"contiguous"``; ``"transposed"``, the other
layout's buffer seen through ``transpose(1, 2)`` — what HF passes; ``"fused"``, slices of one
``[B, S, (H + 2·Hk)·D]`` qkv projection), ``tables`` (``"batch"``: ``[B, S, R]``, HF's; ``"one"``:
``[1, S, R]``; ``"shared"``: ``[S, R]``; ``"expanded"``: ``[1, S, R]`` expanded to ``[B, S, R]``, stride 0),
``table_dtype`` (``"same"`` as q, or ``"fp32"``), ``values`` (``"rope"``: real tables for positions
``pos0 + t``; ``"random"``: N(0, 1) entries, not a rotation, so a kernel that mixes up which half or which
member of a pair it reads cannot pass), ``pos0`` and ``scale`` (input magnitude).
"""

from __future__ import annotations

import torch

from kernelworks.ops.rotary import api, reference
from kernelworks.spec import Case, Cost, OpSpec, Provider, case, randn, register

_F32, _F16, _BF16 = torch.float32, torch.float16, torch.bfloat16

# ------------------------------------------------------------------------------------------ input makers


def _qk(case: Case, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    b, s, h, hk, d = (case[key] for key in ("batch", "seq", "heads", "kv_heads", "head_dim"))
    heads_dim, source, scale = case.get("heads_dim", 1), case.get("source", "contiguous"), case.get("scale", 1.0)
    if source == "fused":
        qkv = randn((b, s, (h + 2 * hk) * d), case, device, scale=scale)
        q, k = qkv[..., : h * d].view(b, s, h, d), qkv[..., h * d: (h + hk) * d].view(b, s, hk, d)
        return (q.transpose(1, 2), k.transpose(1, 2)) if heads_dim == 1 else (q, k)

    def one(heads: int) -> torch.Tensor:
        shape = [b, heads, s, d] if heads_dim == 1 else [b, s, heads, d]
        if source == "transposed":
            shape[1], shape[2] = shape[2], shape[1]
            return randn(shape, case, device, scale=scale).transpose(1, 2)
        return randn(shape, case, device, scale=scale)

    return one(h), one(hk)


def _tables(case: Case, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin as HF builds them (NeoX ``cat(freqs, freqs)``, GPT-J each frequency twice, interleaved;
    base 10000, fp32 angles), or random entries; shaped per ``tables``."""
    b, s = case["batch"], case["seq"]
    rot = case.get("rotary_dim", case["head_dim"])
    kind = case.get("tables", "batch")
    rows = b if kind == "batch" else 1
    dtype = torch.float32 if case.get("table_dtype", "same") == "fp32" else case.dtype
    if case.get("values", "rope") == "random":
        cos, sin = (torch.randn(rows, s, rot, device=device) for _ in range(2))
    else:
        # Each batch row starts 3 positions later, so the per-batch rows differ.
        pos = case.get("pos0", 0) + 3 * torch.arange(rows, device=device)[:, None] + torch.arange(s, device=device)
        inv_freq = 1.0 / 10000.0 ** (torch.arange(0, rot, 2, device=device, dtype=torch.float32) / rot)
        freqs = pos[..., None].float() * inv_freq
        emb = torch.cat((freqs, freqs), -1) if case.get("layout", "neox") == "neox" \
            else freqs.repeat_interleave(2, dim=-1)
        cos, sin = emb.cos(), emb.sin()
    cos, sin = cos.to(dtype), sin.to(dtype)
    if kind == "shared":
        return cos[0], sin[0]
    if kind == "expanded":
        return cos.expand(b, s, rot), sin.expand(b, s, rot)
    return cos, sin


def _inputs(case: Case, device: torch.device) -> dict:
    q, k = _qk(case, device)
    cos, sin = _tables(case, device)
    return {"q": q, "k": k, "cos": cos, "sin": sin, "layout": case.get("layout", "neox"),
            "heads_dim": case.get("heads_dim", 1)}


# ------------------------------------------------------------------------------------------------ cases

_TINY = {"batch": 2, "seq": 5, "heads": 4, "kv_heads": 2, "head_dim": 16}
"""Interpreter-sized Llama-like shape (GQA 2:1)."""


def _c(name: str, dtype: torch.dtype, tags: tuple[str, ...] = (), **params) -> Case:
    return case(name, dtype, tags=tags, **{**_TINY, **params})


_CHECK_CASES = [
    # HF's call: q, k the transposes of [B, S, H, D] projections, tables [B, S, D] in q's dtype.
    _c("hf_llama", _F32, ("quick",), source="transposed"),
    _c("hf_llama", _F16, source="transposed"),
    _c("hf_llama", _BF16, source="transposed"),
    _c("gqa_3to1_odd", _F16, batch=1, seq=7, heads=3, kv_heads=1, head_dim=32, tables="shared",
       table_dtype="fp32"),
    _c("many_heads", _F32, batch=1, seq=3, heads=12, kv_heads=4, head_dim=64),  # 3 head blocks (interp.)
    _c("more_kv_heads", _F32, batch=1, seq=2, heads=2, kv_heads=6, head_dim=64),  # k's blocks past q's
    _c("decode", _BF16, batch=3, seq=1, source="transposed"),
    _c("bshd", _F32, heads_dim=2),
    _c("fused_qkv", _BF16, ("quick",), source="fused"),                    # strided views of one qkv
    _c("fused_qkv_bshd", _F16, source="fused", heads_dim=2),
    _c("partial", _BF16, batch=2, seq=3, heads=2, kv_heads=1, head_dim=40, rotary_dim=16),  # pass-through 24
    _c("partial_qwen3_next", _F32, batch=1, seq=4, heads=4, kv_heads=2, head_dim=64, rotary_dim=16,
       source="fused"),
    _c("gptj", _F32, layout="gptj"),
    _c("gptj_partial_bshd", _F16, batch=1, seq=6, heads=2, kv_heads=2, head_dim=32, rotary_dim=16,
       layout="gptj", heads_dim=2),                                        # GPT-J: rotary 64 of 256
    _c("expanded_tables", _BF16, tables="expanded", table_dtype="fp32"),  # batch stride 0
    _c("one_table", _F16, tables="one"),
    _c("random_tables", _F32, values="random"),
    _c("random_tables_gptj_partial", _F32, values="random", layout="gptj", head_dim=24, rotary_dim=12),
    _c("long_positions", _F16, pos0=131000, scale=100.0, table_dtype="fp32"),
    _c("long_positions", _BF16, pos0=131000, scale=100.0),
    _c("llama3_8b", _BF16, ("gpu",), batch=2, seq=2048, heads=32, kv_heads=8, head_dim=128,
       source="transposed"),
    _c("qwen3_next_partial", _BF16, ("gpu",), batch=2, seq=1024, heads=16, kv_heads=2, head_dim=256,
       rotary_dim=64, source="fused"),
]


def _bench(name: str, quick: bool = False, **params) -> Case:
    # HF's call by default: transposed [B, S, H, D] projections, bf16 tables [B, S, R].
    params = {"source": "transposed", **params}
    return case(name, _BF16, tags=("gpu", "quick") if quick else ("gpu",), **params)


_BENCH_CASES = [
    _bench("llama3_8b_4x4k", quick=True, batch=4, seq=4096, heads=32, kv_heads=8, head_dim=128),
    _bench("llama3_70b_8k", batch=1, seq=8192, heads=64, kv_heads=8, head_dim=128),
    _bench("llama3_8b_decode_b64", batch=64, seq=1, heads=32, kv_heads=8, head_dim=128),
    _bench("qwen3_next_partial_16k", batch=1, seq=16384, heads=16, kv_heads=2, head_dim=256, rotary_dim=64),
    _bench("gptj_6b_4k", batch=2, seq=4096, heads=16, kv_heads=16, head_dim=256, rotary_dim=64, layout="gptj",
           heads_dim=2, source="contiguous"),
]

# ---------------------------------------------------------------------------------------------- cost


def _cost(case: Case, mode: str) -> Cost:
    """Memory-bound: q and k read and written whole (pass-through features are copied), plus the two
    tables' distinct entries (a shared or expanded table crosses memory once). The backward moves the
    same bytes (dq_out, dk_out in; dq, dk out; the tables). FLOPs: 3 per rotated feature (2 products,
    1 add), either direction."""
    b, s, d = case["batch"], case["seq"], case["head_dim"]
    rot = case.get("rotary_dim", d)
    tokens_heads = b * s * (case["heads"] + case["kv_heads"])
    table_rows = b * s if case.get("tables", "batch") == "batch" else s
    table_item = 4 if case.get("table_dtype", "same") == "fp32" else case.itemsize
    return Cost(flops=3 * tokens_heads * rot,
                bytes=2 * tokens_heads * d * case.itemsize + 2 * table_rows * rot * table_item)


# ------------------------------------------------------------------------------------------- providers


def _liger(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, layout: str = "neox",
           rotary_dim: int | None = None, heads_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    # Liger's RoPE (0.8.5) is NeoX with q, k as [B, H, S, D]: refuse the rest rather than compute another
    # function. It reads only the first half of cos/sin (HF's cat(freqs, freqs): the bench cases' tables)
    # and computes in the tables' dtype. Careful: it makes q.transpose(1, 2) contiguous and rotates that in
    # place, so HF's transposed q and k are overwritten (timing is unaffected; values after the first call
    # are not to be checked).
    if layout != "neox" or heads_dim != 1:
        raise NotImplementedError("Liger's RoPE computes NeoX pairs with heads_dim=1 only")
    from liger_kernel.transformers.rope import liger_rotary_pos_emb

    return liger_rotary_pos_emb(q, k, cos, sin)


ROTARY_EMBEDDING_SPEC = register(OpSpec(
    name="rotary_embedding",
    description="RoPE of q and k: x·cos + rotate(x)·sin (NeoX halves or GPT-J pairs, partial rotary)",
    reference=reference.rotary_embedding,
    inputs=_inputs,
    check_cases=_CHECK_CASES,
    bench_cases=_BENCH_CASES,
    cost=_cost,
    providers={"kernelworks": Provider("kernelworks", api.rotary_embedding),
               "liger": Provider("liger", _liger, requires=("liger_kernel",), gpu_only=True)},
    grad_inputs=("q", "k"),
))

SPECS = (ROTARY_EMBEDDING_SPEC,)
