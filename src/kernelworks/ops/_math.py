"""Shared device math: numerically stable elementwise functions for ``@triton.jit`` kernels.

Each helper takes and returns float32 blocks (callers upcast first) and is safe for every finite input: no
intermediate overflows, no ``NaN``. Exponentials go through ``exp2`` with ``log2(e)`` folded into the
argument (one MUFU.EX2 instruction, no separate multiply by ln 2).
"""

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)
"""log2(e): ``exp(z) == exp2(z * LOG2E)``."""


@triton.jit
def sigmoid(x):
    """σ(x) = 1 / (1 + e^(−x)), to a few ulp relative for every x (see :func:`sigmoid_pair`)."""
    s, _ = sigmoid_pair(x)
    return s


@triton.jit
def sigmoid_pair(x):
    """``(σ(x), 1 − σ(x))``, each to a few ulp relative, for every x.

    Computing ``1 − σ(x)`` by subtraction loses everything once σ(x) nears 1 (and, through the identity
    ``½(1 + tanh(z)) = σ(2z)``, this is also the cure for ``1 ± tanh`` cancelling). Instead, with
    e = e^(−|x|) ∈ (0, 1] (never overflows): σ(|x|) = 1/(1 + e) and σ(−|x|) = e/(1 + e), and the sign of x
    picks which is which.
    """
    e = tl.exp2(-LOG2E * tl.abs(x))
    big = 1.0 / (1.0 + e)
    small = e * big
    pos = x >= 0
    return tl.where(pos, big, small), tl.where(pos, small, big)


@triton.jit
def erfc(x):
    """erfc(x) = 1 − erf(x), to ~5e-7 relative for |x| < 3 and ~1e-5 further out (fp32), for every x.

    The Chebyshev fit of Numerical Recipes (Press et al., §6.2; < 1.2e-7 relative in exact arithmetic):
    with t = 1/(1 + |x|/2), erfc(|x|) = t·exp(−x² − 1.26551223 + t·(1.00002368 + … + t·0.17087277)) and
    erfc(−|x|) = 2 − erfc(|x|). Two MUFU operations (a reciprocal, an exp2) and nine FMAs: about half the
    instructions of libdevice's ``erff``, which chooses between two polynomials coefficient by coefficient.
    Being relative, it keeps the small side accurate: ½·erfc(−x/√2) is the normal CDF Φ(x) with no
    1 + erf cancellation for x ≪ 0. Never overflows (t ∈ (0, 1], the exponent is ≤ 0.)
    """
    a = tl.abs(x)
    t = 1.0 / (1.0 + 0.5 * a)
    p = 0.17087277
    p = p * t - 0.82215223
    p = p * t + 1.48851587
    p = p * t - 1.13520398
    p = p * t + 0.27886807
    p = p * t - 0.18628806
    p = p * t + 0.09678418
    p = p * t + 0.37409196
    p = p * t + 1.00002368
    p = p * t - 1.26551223
    r = t * tl.exp2(LOG2E * (p - a * a))
    return tl.where(x >= 0, r, 2.0 - r)


@triton.jit
def tanh(x):
    """tanh(x), to ~3e-7 relative for every x (fp32); never overflows, never NaN for finite x.

    With e = e^(−2|x|) ∈ (0, 1]: tanh(|x|) = (1 − e)/(1 + e), and the sign of x restores the sign. Near 0
    the subtraction 1 − e cancels (at |x| = 1e-3 it would keep only ~4 digits), so below |x| = 1/4 the odd
    Taylor series to x⁹ is used instead (truncation error < 1e-8 relative there). One MUFU.EX2, one
    division, seven FMAs.
    """
    a = tl.abs(x)
    e = tl.exp2(-2.0 * LOG2E * a)
    t = (1.0 - e) / (1.0 + e)
    a2 = a * a
    p = 62.0 / 2835.0
    p = p * a2 - 17.0 / 315.0
    p = p * a2 + 2.0 / 15.0
    p = p * a2 - 1.0 / 3.0
    p = a + a * (p * a2)
    t = tl.where(a < 0.25, p, t)
    return tl.where(x < 0, -t, t)


LN2 = tl.constexpr(0.6931471805599453)
"""ln 2: ``log(z) == log2(z) * LN2`` (one MUFU.LG2 instead of libdevice's ``logf``)."""


@triton.jit
def softplus(x):
    """softplus(x) = log(1 + e^x) = max(x, 0) + log(1 + e^(−|x|)), for every x (fp32); never overflows.

    ``e^(−|x|) ∈ (0, 1]``, so nothing overflows for large x (softplus(x) → x) and nothing underflows to a
    wrong answer for very negative x (→ e^x, kept to ~1e-7 relative down to where e^x underflows: the
    ``log(1 + e)`` term is evaluated with the ``log1p`` series ``e − e²/2 + e³/3`` when ``e < 1e-3``, where
    ``log(1 + e)`` in fp32 would round ``1 + e`` and lose every digit of ``e`` below 6e-8).
    """
    e = tl.exp2(-LOG2E * tl.abs(x))
    small = e * (1.0 - e * (0.5 - e * (1.0 / 3.0)))
    tail = tl.where(e < 1e-3, small, tl.log2(1.0 + e) * LN2)
    return tl.maximum(x, 0.0) + tail
