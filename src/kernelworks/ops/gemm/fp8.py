"""``fp8_matmul``: e4m3 inputs with dequantisation scales, through the same two GEMM kernels as ``matmul``.

The kernels take the scales as constexpr modes (``tiled.scaled_dot`` / ``tiled.apply_scales``):

* per tensor / per row of A / per column of B — constant over K, so the fp32 accumulator is scaled once,
  after the K loop (before split-K partials are summed: scaling is linear);
* blocks (1×128 for A, 128×128 for B, the DeepSeek-V3 scheme) — each 128-wide K block's product is formed
  on its own and folded in with one FMA per element, ``acc = p·(sa[m, kb]·sb[n/128, kb]) + acc`` (``sb`` one
  scalar per tile when BLOCK_N ≤ 128). ``scale_a`` is read by strides: a column-major ``[M, K/128]``
  (``sa.t().contiguous().t()``) makes the per-block column load coalesced. This is also the two-level
  accumulation that keeps Hopper's fp8 wgmma (reduced-precision accumulation inside one instruction
  chain) accurate over long K; the per-tensor/row modes get the same by promoting every K block
  (``max_num_imprecise_acc = BLOCK_K``), like ``torch._scaled_mm``'s default (``use_fast_accum=False``),
  unless ``fast_accum=True`` (the plan's ``FAST_ACCUM``): then the whole K chain stays in wgmma's
  accumulator, like ``_scaled_mm(use_fast_accum=True)``.

Forward-only (a ``torch.library`` custom op with a fake implementation).
"""

from __future__ import annotations

import torch

from kernelworks.ops.gemm.api import ACTIVATIONS, check_operand
from kernelworks.ops.gemm.forward import matmul_fwd
from kernelworks.runtime.device import gpu_capability
from kernelworks.runtime.replay import replayed_op
from kernelworks.runtime.torch_op import ForwardOp
from kernelworks.runtime.validate import FLOAT_DTYPES, check_dtype, check_same_device, refuse_autograd

FP8_DTYPES = (torch.float8_e4m3fn,)
SCALE_BLOCK = 128
"""K (and B's N) extent of one scale block."""


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def scale_mode(name: str, s: object, rows: int, k: int, *, block_rows: int) -> int:
    """1: one value (per tensor), 2: one per row (``[rows]`` or ``[rows, 1]``), 3: blocks
    (``[block_rows, ⌈K/128⌉]``). Raises naming ``name`` when the shape is none of these."""
    if not isinstance(s, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(s).__name__}")
    check_dtype(name, s, (torch.float32,))
    kb = _cdiv(k, SCALE_BLOCK)
    shape = tuple(s.shape)
    if s.numel() == 1 and s.dim() <= 2:
        return 1
    if shape in ((rows,), (rows, 1), (1, rows)):
        return 2
    if shape == (block_rows, kb):
        return 3
    raise ValueError(f"{name}: expected one value (per tensor), shape ({rows},) (per row/column) or "
                     f"({block_rows}, {kb}) (blocks of {SCALE_BLOCK}), got {shape}")


def _fp8_forward(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                 bias: torch.Tensor | None, activation: str, out_dtype: torch.dtype, mode_a: int,
                 mode_b: int, fast_accum: bool = False) -> torch.Tensor:
    sa = scale_a.reshape(-1) if mode_a in (1, 2) else scale_a
    sb = scale_b.reshape(-1) if mode_b in (1, 2) else scale_b
    return matmul_fwd(a, b, bias, None, activation, 1.0, 0.0, out_dtype, sa, sb, (mode_a, mode_b),
                      fast_accum=fast_accum)


def _fp8_fake(a, b, scale_a, scale_b, bias, activation, out_dtype, mode_a, mode_b, fast_accum=False):
    n = b.shape[1] // 2 if activation == "swiglu" else b.shape[1]
    return a.new_empty((a.shape[0], n), dtype=out_dtype)


_fp8 = ForwardOp("fp8_matmul", _fp8_forward, fake=_fp8_fake)
"""``kernelworks::fp8_matmul`` (forward only)."""


@replayed_op
def fp8_matmul(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
               bias: torch.Tensor | None = None, activation: str | None = None,
               out_dtype: torch.dtype = torch.bfloat16, fast_accum: bool = False) -> torch.Tensor:
    """``C = act((sa ⊙ A) @ (sb ⊙ B) + bias)`` for float8 e4m3 ``A``, ``B``; fp32 accumulation. Forward only.

    Args:
        a: ``[M, K]`` float8_e4m3fn, any strides (row-major is best).
        b: ``[K, N]`` float8_e4m3fn, any strides. Fastest as ``w.t()`` of a row-major weight ``w [N, K]``
            (K-contiguous: fp8 wgmma reads B K-major) — the same memory ``torch._scaled_mm`` requires (it
            wants B "column-major", i.e. exactly ``w.t()``). A row-major ``[K, N]`` B also works.
        scale_a: float32: one value (per tensor), ``[M]`` (per row; ``[M, 1]`` accepted) or
            ``[M, ⌈K/128⌉]`` (one scale per 1×128 block of A: ``sa[m, k // 128]``). An infinite scale makes
            the outputs it touches non-finite: ±inf, or NaN where the unscaled sum is 0 (the accumulator is
            scaled, not the operands, so which one can differ from a reference that scales first).
        scale_b: float32: one value, ``[N]`` (per column; ``[1, N]`` accepted) or ``[⌈N/128⌉, ⌈K/128⌉]``
            (one per 128×128 block of the weight, indexed by (output block, K block): ``sb[n // 128, k // 128]``
            — DeepSeek-V3's weight-scale layout for ``w [N, K]``). Block scales go together: both or neither.
        bias: ``[N]``, any float dtype; activation: as :func:`~kernelworks.ops.gemm.api.matmul` (swiglu:
            ``[gate | up]`` column halves, the scales indexed by B's columns).
        out_dtype: bfloat16 (default), float16 or float32.
        fast_accum: trade accuracy over long K for speed, as ``torch._scaled_mm(use_fast_accum=True)``
            does. Hopper's fp8 wgmma accumulates inside the tensor core in reduced precision (not a full
            fp32 add); by default (False) the partial sum is promoted into an fp32 accumulator every 128 K
            (``_scaled_mm``'s default), which costs a second fp32 tile of registers (128×128 tiles) and
            serialises the wgmma chain at each promotion. True keeps the whole K chain in the wgmma
            accumulator: 128×256 tiles fit, measured 1.46× faster at 8192³ per tensor on an H200, with
            the error ``_scaled_mm``'s fast mode has (relative L2 2.6e-3 vs 1.7e-3 at K = 8192). Only per
            tensor / per row scales: block scales already fold each 128-K block into fp32 (ignored there).

    Needs a GPU with fp8 tensor cores (compute capability 8.9+); the Hopper TMA path on 9.0+. Forward only:
    with grad mode on, an input that requires grad raises ``NotImplementedError``.

    Example::

        y = kw.fp8_matmul(x_fp8, w_fp8.t(), sx, sw)                       # per tensor: sx, sw scalars
        y = kw.fp8_matmul(x_fp8, w_fp8.t(), sx_blocks, sw_blocks)         # [T, K/128], [N/128, K/128]
        y = kw.fp8_matmul(x_fp8, w_fp8.t(), sx, sw, fast_accum=True)      # = _scaled_mm(use_fast_accum=True)
    """
    check_operand("a", a, (2,), FP8_DTYPES)
    check_operand("b", b, (2,), FP8_DTYPES)
    check_same_device(("a", "b"), (a, b))
    m, k = a.shape
    if b.shape[0] != k:
        raise ValueError(f"b: expected {k} rows (a's K, a: {tuple(a.shape)}), got shape {tuple(b.shape)}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation: expected one of {ACTIVATIONS}, got {activation!r}")
    n = b.shape[1]
    if activation == "swiglu" and n % 2:
        raise ValueError(f"b: swiglu needs an even number of columns, got shape {tuple(b.shape)}")
    if out_dtype not in FLOAT_DTYPES:
        raise TypeError(f"out_dtype: expected one of float32, float16, bfloat16, got {out_dtype}")
    mode_a = scale_mode("scale_a", scale_a, m, k, block_rows=m)
    mode_b = scale_mode("scale_b", scale_b, n, k, block_rows=_cdiv(n, SCALE_BLOCK))
    # A block shape can also read as a per-row one ([M, 1] when K ≤ 128, [1, 2] for b with N = 2 and K ≤ 256):
    # block scales go together, so beside a block scale that is unambiguously one, the other is read as blocks
    blocks_a, blocks_b = (m, _cdiv(k, SCALE_BLOCK)), (_cdiv(n, SCALE_BLOCK), _cdiv(k, SCALE_BLOCK))
    if mode_b == 3 and mode_a != 3 and tuple(scale_a.shape) == blocks_a:
        mode_a = 3
    if mode_a == 3 and mode_b != 3 and tuple(scale_b.shape) == blocks_b:
        mode_b = 3
    if (mode_a == 3) != (mode_b == 3):
        raise ValueError(f"scale_a, scale_b: block scales go together (1×128 for a, 128×128 for b); got "
                         f"shapes {tuple(scale_a.shape)} and {tuple(scale_b.shape)}")
    for name, t in (("scale_a", scale_a), ("scale_b", scale_b)):
        check_same_device(("a", name), (a, t))
    if bias is not None:
        check_operand("bias", bias, (1,))
        check_same_device(("a", "bias"), (a, bias))
        if bias.shape[0] != n:
            raise ValueError(f"bias: expected shape ({n},) (b's columns), got {tuple(bias.shape)}")
    if not isinstance(fast_accum, bool):
        raise TypeError(f"fast_accum: expected a bool, got {type(fast_accum).__name__}")
    refuse_autograd("fp8_matmul", a=a, b=b, scale_a=scale_a, scale_b=scale_b, bias=bias)
    cap = gpu_capability()
    if cap is None or cap < (8, 9):
        raise NotImplementedError("fp8_matmul needs a GPU with fp8 tensor cores (compute capability 8.9+); "
                                  f"running on {'the Triton interpreter' if cap is None else f'sm_{cap[0]}{cap[1]}'}")
    return _fp8(a, b, scale_a, scale_b, bias, activation or "none", out_dtype, mode_a, mode_b, fast_accum)
