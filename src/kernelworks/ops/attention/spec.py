"""The attention family's specs: ``flash_attention`` and ``decode_attention`` (registered at import).

flash_attention case params: ``batch``, ``sq``, ``sk`` (default ``sq``), ``hq``, ``hkv`` (default ``hq``),
``d``, ``causal``, ``window`` (int or pair), ``softcap``, ``layout`` (``"bhsd"``: SDPA-ordered tensors,
strided views for the kernels), ``lens`` (varlen: a list of ``(len_q, len_k)`` per sequence, packed),
``lse`` (also return the log-sum-exp), ``scale`` (input magnitude).

decode_attention case params: ``ctx`` (context length per sequence: the batch), ``hq``, ``hkv``, ``d``,
``page`` (page size), ``q_len`` (new tokens per sequence; absent: ``q`` is ``[B, Hq, D]``), ``softcap``,
``dense`` (also make a dense ``[B, Hkv, ctx, D]`` copy of the cache, for the SDPA provider: built outside
the timed call).
"""

from __future__ import annotations

import numpy as np
import torch

from kernelworks.ops.attention import api, backward, forward, reference
from kernelworks.spec import Case, Cost, OpSpec, Provider, case, randn, register

_F32, _F16, _BF16 = torch.float32, torch.float16, torch.bfloat16

# ------------------------------------------------------------------------------------------ flash: inputs


def _flash_inputs(case: Case, device: torch.device) -> dict:
    """q, k, v ~ N(0, scale²) (scale 1 unless set) plus the case's options; varlen cases pack their
    sequences and pass int32 ``cu_seqlens`` and the max lengths."""
    hq, d = case["hq"], case["d"]
    hkv = case.get("hkv", hq)
    scale = case.get("scale", 1.0)
    out: dict = {}
    lens = case.get("lens")
    if lens is not None:
        lq, lk = [a for a, _ in lens], [b for _, b in lens]
        out["q"] = randn((sum(lq), hq, d), case, device, scale=scale)
        out["k"] = randn((sum(lk), hkv, d), case, device, scale=scale)
        out["v"] = randn((sum(lk), hkv, d), case, device)
        out["cu_seqlens_q"] = torch.tensor(np.cumsum([0, *lq]), dtype=torch.int32, device=device)
        out["cu_seqlens_k"] = torch.tensor(np.cumsum([0, *lk]), dtype=torch.int32, device=device)
        out["max_seqlen_q"], out["max_seqlen_k"] = max(lq), max(lk)
    else:
        b, sq = case["batch"], case["sq"]
        sk = case.get("sk", sq)
        bhsd = case.get("layout") == "bhsd"
        shape = (lambda s, h: (b, h, s, d)) if bhsd else (lambda s, h: (b, s, h, d))
        out["q"] = randn(shape(sq, hq), case, device, scale=scale)
        out["k"] = randn(shape(sk, hkv), case, device, scale=scale)
        out["v"] = randn(shape(sk, hkv), case, device)
        if bhsd:
            out["layout"] = "bhsd"
    for key, name in (("causal", "causal"), ("window", "window"), ("softcap", "softcap"), ("lse", "return_lse")):
        if case.get(key) is not None:
            out[name] = case[key]
    return out


def _flash_pairs(case: Case) -> float:
    """(query, key) pairs the mask leaves visible, summed over sequences (exact, for causal and windows)."""
    left, right = reference.window_bounds(case.get("window"), bool(case.get("causal")))
    lens = case.get("lens") or [(case["sq"], case.get("sk", case["sq"]))] * case["batch"]
    total = 0.0
    for sq, sk in lens:
        i = np.arange(sq, dtype=np.int64) + (sk - sq)
        lo = np.maximum(i - left, 0) if left >= 0 else np.zeros_like(i)
        hi = np.minimum(i + right, sk - 1) if right >= 0 else np.full_like(i, sk - 1)
        total += float(np.maximum(hi - lo + 1, 0).sum())
    return total


def _flash_cost(case: Case, mode: str) -> Cost:
    """FLOPs: 4·pairs·D per query head forward (QKᵀ and PV), 2.5× that backward (flash-attn's convention;
    the deterministic backward does 7/5 of that in practice, see backward.py). Bytes: q, k, v, o (+ the
    fp32 lse) forward; q, k, v, o, dO, lse read and dq, dk, dv written backward."""
    hq, d = case["hq"], case["d"]
    hkv = case.get("hkv", hq)
    lens = case.get("lens") or [(case["sq"], case.get("sk", case["sq"]))] * case["batch"]
    tq, tk = sum(a for a, _ in lens), sum(b for _, b in lens)
    flops = 4.0 * _flash_pairs(case) * hq * d
    q_bytes, kv_bytes = tq * hq * d * case.itemsize, tk * hkv * d * case.itemsize
    lse = 4 * tq * hq
    if mode == "fwd":
        return Cost(flops=flops, bytes=2 * q_bytes + 2 * kv_bytes + lse)
    return Cost(flops=2.5 * flops, bytes=4 * q_bytes + 4 * kv_bytes + lse)


# --------------------------------------------------------------------------------------- flash: providers


def _sdpa(backend_name: str):
    """SDPA through one backend, on ``[B, H, S, D]`` views (transposed from ``bshd`` when needed — views,
    no copies). Options SDPA lacks raise NotImplementedError (the bench records "skipped")."""

    def run(q, k, v, *, causal=False, softmax_scale=None, window=None, softcap=None, cu_seqlens_q=None,
            cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, return_lse=False, layout="bshd"):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        if softcap is not None or window is not None or cu_seqlens_q is not None or return_lse:
            raise NotImplementedError("SDPA has no softcap, window, varlen or lse output")
        bshd = layout == "bshd"
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v)) if bshd else (q, k, v)
        if causal and qt.shape[2] != kt.shape[2]:
            raise NotImplementedError("SDPA's causal mask is top-left aligned; ours bottom-right when Sq != Sk")
        gqa = qt.shape[1] != kt.shape[1]
        try:
            with sdpa_kernel(getattr(SDPBackend, backend_name)):
                o = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal,
                                                                     scale=softmax_scale, enable_gqa=gqa)
        except RuntimeError as e:  # "No available kernel": this backend refuses the shape or dtype
            raise NotImplementedError(f"SDPA {backend_name}: {e}") from e
        return o.transpose(1, 2) if bshd else o

    return run


# ------------------------------------------------------------------------------------------ flash: cases


def _flash_check_cases() -> list[Case]:
    """Tiny CPU cases (interpreter: 16×16 tiles, so 17/33 leave masked tails and several blocks) covering
    the issue's list; bf16 and real sizes on the GPU."""
    c = case
    return [
        c("b2-s17-h2-d16", _F32, batch=2, sq=17, hq=2, d=16, tags=("quick",)),
        c("s33-causal-gqa2-d32", _F32, batch=2, sq=33, hq=4, hkv=2, d=32, causal=True, tags=("quick",)),
        c("s1-d64", _F16, batch=1, sq=1, hq=2, d=64),
        c("s3-causal-d64", _F32, batch=1, sq=3, hq=2, d=64, causal=True),
        c("sq17-sk40-causal-mqa3", _F32, batch=1, sq=17, sk=40, hq=3, hkv=1, d=16, causal=True),
        c("sq40-sk17-causal-masked-rows", _F32, batch=1, sq=40, sk=17, hq=2, d=16, causal=True),
        c("s33-window5_3", _F32, batch=1, sq=33, hq=2, d=16, window=(5, 3)),
        c("s40-window4-softcap", _F16, batch=1, sq=40, hq=2, hkv=1, d=32, window=4, softcap=2.0, scale=2.0),
        c("s33-causal-softcap", _F32, batch=1, sq=33, hq=2, d=16, causal=True, softcap=5.0, scale=3.0),
        c("varlen-empty-causal", _F32, lens=[(17, 17), (0, 0), (9, 9), (1, 1)], hq=2, hkv=1, d=16, causal=True),
        c("varlen-sq-ne-sk", _F16, lens=[(5, 20), (3, 0), (18, 11)], hq=2, d=32, tags=("quick",)),
        c("bhsd-gqa2-causal", _F16, batch=2, sq=20, hq=4, hkv=2, d=32, causal=True, layout="bhsd"),
        c("d24-padded", _F32, batch=1, sq=20, hq=2, d=24, causal=True),
        c("gqa5-s17", _F32, batch=1, sq=17, hq=5, hkv=1, d=16),
        c("gqa3-hkv2-s17", _F16, batch=1, sq=17, hq=6, hkv=2, d=16, causal=True),
        c("lse-causal", _F32, batch=1, sq=20, hq=2, d=16, causal=True, lse=True),
        c("lse-varlen", _F32, lens=[(7, 7), (0, 0), (12, 12)], hq=2, d=16, lse=True),
        # GPU: bf16 (the interpreter mis-computes bf16 dots), real tiles, the lengths
        c("b2-s1000-gqa4-d128-causal", _BF16, batch=2, sq=1000, hq=8, hkv=2, d=128, causal=True, tags=("gpu",)),
        c("b2-s1000-d128", _BF16, batch=2, sq=1000, hq=4, d=128, tags=("gpu",)),
        c("b2-s1000-d64-causal", _BF16, batch=2, sq=1000, hq=4, d=64, causal=True, tags=("gpu",)),
        c("s127-gqa8-d128", _BF16, batch=1, sq=127, hq=16, hkv=2, d=128, tags=("gpu",)),
        c("s3-d128-causal", _BF16, batch=3, sq=3, hq=4, d=128, causal=True, tags=("gpu",)),
        c("s1-d128", _BF16, batch=2, sq=1, hq=4, d=128, tags=("gpu",)),
        c("gqa5-s1000-d128-causal", _BF16, batch=1, sq=1000, hq=10, hkv=2, d=128, causal=True, tags=("gpu",)),
        c("sq300-sk1000-causal-d128", _BF16, batch=1, sq=300, sk=1000, hq=4, d=128, causal=True, tags=("gpu",)),
        c("s1000-window100-d128", _BF16, batch=1, sq=1000, hq=4, d=128, window=100, tags=("gpu",)),
        c("s1000-window40_7-d64", _BF16, batch=1, sq=1000, hq=4, d=64, window=(40, 7), tags=("gpu",)),
        c("s1000-softcap-d128-causal", _BF16, batch=1, sq=1000, hq=4, d=128, causal=True, softcap=30.0,
          scale=4.0, tags=("gpu",)),
        c("varlen-mixed-d128", _BF16, lens=[(1000, 1000), (0, 0), (17, 17), (300, 300), (1, 1)], hq=8, hkv=2,
          d=128, causal=True, tags=("gpu",)),
        c("b2-s1000-d96-causal", _BF16, batch=2, sq=1000, hq=4, d=96, causal=True, tags=("gpu",)),
        c("b1-s1000-d256", _BF16, batch=1, sq=1000, hq=4, d=256, causal=True, tags=("gpu",)),
        c("b2-s1000-d128-bhsd", _F16, batch=2, sq=1000, hq=4, d=128, layout="bhsd", tags=("gpu",)),
        c("b1-s513-d128-causal", _F32, batch=1, sq=513, hq=2, d=128, causal=True, tags=("gpu",)),
    ]


def _flash_bench_cases() -> list[Case]:
    """The issue's targets: B4 H32 S4096 D128 (and D64), 8k and 16k with B scaled to keep 16k tokens,
    causal and not; a GQA (32/8 heads) case."""
    out = []
    for d in (128, 64):
        for b, s in ((4, 4096), (2, 8192), (1, 16384)):
            if d == 64 and s != 4096:
                continue
            for causal in (False, True):
                name = f"b{b}-h32-s{s // 1024}k-d{d}" + ("-causal" if causal else "")
                tags = ("gpu", "quick") if name == "b4-h32-s4k-d128-causal" else ("gpu",)
                out.append(case(name, _BF16, batch=b, sq=s, hq=32, d=d, causal=causal, tags=tags))
    out.append(case("b4-hq32-hkv8-s4k-d128-causal", _BF16, batch=4, sq=4096, hq=32, hkv=8, d=128, causal=True,
                    tags=("gpu",)))
    # varlen: 100 sequences of 16–8192 tokens (~410k in all, fixed seed), packed; its TFLOP/s (real pairs
    # only) compares with the dense causal cases' at the same head shape (the issue's ≥ 0.9× target)
    lens = [(n, n) for n in np.random.RandomState(0).randint(16, 8193, size=100).tolist()]
    out.append(case("varlen100-16to8k-hq32-hkv8-d128-causal", _BF16, lens=lens, hq=32, hkv=8, d=128, causal=True,
                    tags=("gpu",)))
    # other models' head shapes: Gemma's head dim 256 (8 query / 4 KV heads), Qwen2.5-7B's 28 / 4 heads at 8k
    out.append(case("b2-hq8-hkv4-s4k-d256-causal", _BF16, batch=2, sq=4096, hq=8, hkv=4, d=256, causal=True,
                    tags=("gpu",)))
    out.append(case("b1-hq28-hkv4-s8k-d128-causal", _BF16, batch=1, sq=8192, hq=28, hkv=4, d=128, causal=True,
                    tags=("gpu",)))
    return out


# ------------------------------------------------------------------------------------------ decode: inputs


def _decode_inputs(case: Case, device: torch.device) -> dict:
    """A shuffled page pool: each sequence's pages are drawn without replacement from a pool with spare
    pages, so pages sit anywhere; table entries past a sequence's last page point at page 0 (never read)."""
    ctx = list(case["ctx"])
    hq, hkv, d, page = case["hq"], case["hkv"], case["d"], case["page"]
    batch = len(ctx)
    n_pages = [-(-n // page) for n in ctx]
    max_pages = max(max(n_pages), 1)
    pool = sum(n_pages) + 3
    k_cache = randn((pool, page, hkv, d), case, device)
    v_cache = randn((pool, page, hkv, d), case, device)
    perm = torch.randperm(pool, device="cpu")
    table = torch.zeros(batch, max_pages, dtype=torch.int32)
    used = 0
    for b, n in enumerate(n_pages):
        table[b, :n] = perm[used:used + n].to(torch.int32)
        used += n
    q_len = case.get("q_len")
    q_shape = (batch, hq, d) if q_len is None else (batch, q_len, hq, d)
    out = {"q": randn(q_shape, case, device), "k_cache": k_cache, "v_cache": v_cache,
           "block_table": table.to(device), "context_lens": torch.tensor(ctx, dtype=torch.int32, device=device)}
    if case.get("softcap") is not None:
        out["softcap"] = case["softcap"]
    if case.get("dense"):
        # [B, Hkv, ctx, D] copies for the SDPA provider, built here so no provider pays for the gather
        out["k_dense"], out["v_dense"] = (_dense_cache(c, table.to(device), ctx) for c in (k_cache, v_cache))
    return out


def _dense_cache(cache: torch.Tensor, table: torch.Tensor, ctx: list[int]) -> torch.Tensor:
    n = max(ctx)
    rows = [cache[table[b].long()].flatten(0, 1)[:n] for b in range(len(ctx))]
    return torch.stack(rows).transpose(1, 2).contiguous()


def _decode_reference(q, k_cache, v_cache, block_table, context_lens, *, softmax_scale=None, softcap=None,
                      k_dense=None, v_dense=None):
    del k_dense, v_dense
    return reference.decode_attention(q, k_cache, v_cache, block_table, context_lens,
                                      softmax_scale=softmax_scale, softcap=softcap)


def _decode_ours(q, k_cache, v_cache, block_table, context_lens, *, softmax_scale=None, softcap=None,
                 k_dense=None, v_dense=None):
    del k_dense, v_dense
    # the checker's indices are valid by construction; the check costs a host sync the bench should not time
    return api.decode_attention(q, k_cache, v_cache, block_table, context_lens, softmax_scale=softmax_scale,
                                softcap=softcap, check_indices=False)


def _decode_sdpa(q, k_cache, v_cache, block_table, context_lens, *, softmax_scale=None, softcap=None,
                 k_dense=None, v_dense=None):
    """SDPA (its own backend choice) on the equivalent dense cache, one query token, GQA."""
    if k_dense is None or softcap is not None or q.dim() != 3:
        raise NotImplementedError("needs the case's dense cache copy, no softcap, one query token")
    if k_dense.shape[2] * q.shape[0] != int(context_lens.sum()):
        raise NotImplementedError("equal context lengths only (a dense cache has one length)")
    o = torch.nn.functional.scaled_dot_product_attention(q[:, :, None], k_dense, v_dense, scale=softmax_scale,
                                                         enable_gqa=q.shape[1] != k_dense.shape[1])
    return o[:, :, 0]


def _decode_cost(case: Case, mode: str) -> Cost:
    """Bytes: the KV actually attended (2 · Σ ctx · Hkv · D) + q + o. FLOPs: 4 · Σ ctx · Hq · D · q_len."""
    del mode
    tokens = sum(case["ctx"])
    q_len = case.get("q_len") or 1
    hq, hkv, d = case["hq"], case["hkv"], case["d"]
    kv = 2 * tokens * hkv * d * case.itemsize
    qo = 2 * len(case["ctx"]) * q_len * hq * d * case.itemsize
    return Cost(flops=4.0 * tokens * hq * d * q_len, bytes=kv + qo)


def _decode_check_cases() -> list[Case]:
    c = case
    return [
        c("p16-ctx37_5-gqa4", _F32, ctx=[37, 5], hq=8, hkv=2, d=32, page=16, tags=("quick",)),
        c("p64-ctx100_1-gqa8", _F16, ctx=[100, 1], hq=8, hkv=1, d=16, page=64),   # page > context, ctx 1
        c("p16-ctx1-mha", _F32, ctx=[1], hq=2, hkv=2, d=16, page=16),
        c("p16-ctx70_33_16-gqa4-d64", _F16, ctx=[70, 33, 16], hq=4, hkv=1, d=64, page=16),
        c("p16-softcap", _F32, ctx=[50, 20], hq=4, hkv=2, d=16, page=16, softcap=3.0),
        c("p16-qlen3-gqa2", _F32, ctx=[40, 3], hq=4, hkv=2, d=16, page=16, q_len=3),
        c("p32-ctx0", _F32, ctx=[0, 29], hq=2, hkv=1, d=16, page=32),
        # GPU: bf16, real sizes (splits and the combine at GPU granularity)
        c("p16-gqa4-d128", _BF16, ctx=[1000, 4097, 1, 300], hq=32, hkv=8, d=128, page=16, tags=("gpu",)),
        c("p256-gqa8-d128", _BF16, ctx=[5000, 255, 256, 1], hq=16, hkv=2, d=128, page=256, tags=("gpu",)),
        c("p64-b1-ctx32k-gqa4", _BF16, ctx=[32768], hq=32, hkv=8, d=128, page=64, tags=("gpu",)),
        c("p16-qlen4-gqa4-d128", _BF16, ctx=[3000, 20], hq=16, hkv=4, d=128, page=16, q_len=4, tags=("gpu",)),
        c("p16-softcap-d128", _BF16, ctx=[2000, 7], hq=16, hkv=4, d=128, page=16, softcap=30.0, tags=("gpu",)),
    ]


def _decode_bench_cases() -> list[Case]:
    """Batch 1–128, contexts 1k–128k, 32 query / 8 KV heads, D 128, 16-token pages; uniform contexts (so
    SDPA's dense cache is the equivalent); one 8-query-heads-per-KV-head case."""
    out = []
    for b, ctx in ((1, 131072), (1, 32768), (8, 32768), (32, 8192), (64, 4096), (128, 1024)):
        name = f"b{b}-ctx{ctx // 1024}k-gqa4"
        tags = ("gpu", "quick") if name == "b8-ctx32k-gqa4" else ("gpu",)
        out.append(case(name, _BF16, ctx=[ctx] * b, hq=32, hkv=8, d=128, page=16, dense=True, tags=tags))
    out.append(case("b16-ctx16k-gqa8", _BF16, ctx=[16384] * 16, hq=64, hkv=8, d=128, page=16, dense=True,
                    tags=("gpu",)))
    return out


# ----------------------------------------------------------------------------------------------- specs

FLASH_ATTENTION_SPEC = register(OpSpec(
    name="flash_attention",
    description="softmax(scale·QKᵀ + mask)V, [B, S, H, D], GQA, causal/window/softcap/varlen, fwd + bwd",
    reference=reference.flash_attention,
    inputs=_flash_inputs,
    check_cases=_flash_check_cases(),
    bench_cases=_flash_bench_cases(),
    cost=_flash_cost,
    providers={
        "kernelworks": Provider("kernelworks", api.flash_attention),
        "sdpa-flash": Provider("sdpa-flash", _sdpa("FLASH_ATTENTION"), gpu_only=True),
        "sdpa-cudnn": Provider("sdpa-cudnn", _sdpa("CUDNN_ATTENTION"), gpu_only=True),
    },
    grad_inputs=("q", "k", "v"),
    # the reference materialises [B, H, Sq, Sk] scores (8 GiB fp32 per 16k² batch of 32 heads): SDPA's
    # backends are the baselines
    baselines=(),
    configs=forward.FWD_CONFIGS,  # the forward's tiles, warps, stages and K/V path (kw tune times the forward)
    configured=lambda config: forward.forced_fwd_plan(**config),
    bwd_configs=backward.BWD_CONFIGS,  # the dK/dV and dQ passes' tiles, warps, stages (kw tune --mode bwd)
    bwd_configured=lambda config: backward.forced_bwd_plan(**config),
))

DECODE_ATTENTION_SPEC = register(OpSpec(
    name="decode_attention",
    description="paged-KV decode attention, split-KV with an LSE combine, GQA rows packed per KV head",
    reference=_decode_reference,
    inputs=_decode_inputs,
    check_cases=_decode_check_cases(),
    bench_cases=_decode_bench_cases(),
    cost=_decode_cost,
    providers={
        "kernelworks": Provider("kernelworks", _decode_ours),
        "sdpa": Provider("sdpa", _decode_sdpa, gpu_only=True),
    },
    baselines=(),  # the reference loops over sequences in Python: SDPA on the dense cache is the baseline
))

SPECS = (FLASH_ATTENTION_SPEC, DECODE_ATTENTION_SPEC)
