"""``kernelworks.nn`` modules: hostile constructor arguments (validated at construction or, at the latest,
at the first call, naming the argument) and hostile calls. A case's inputs are ``init`` (the constructor's
keyword arguments) plus the forward's; the reference is the functional reference with the module's own
parameters."""

from __future__ import annotations

import torch

from kernelworks import nn
from kernelworks.spec import registry

from .common import CORRECT, DOCUMENTED, ERROR, Err, with_arg, with_kwargs
from .harness import DEVICE, Case, Op, Run

FAMILY = "nn"


def _module_op(cls, functional: str, params: tuple[str, ...]) -> Op:
    """``cls(**init)(**forward)``; the reference runs the functional reference with the module's
    parameters (and options) on the same inputs."""
    spec = registry()[functional]

    def fn(init, **forward):
        with torch.device(DEVICE):  # parameters where the inputs are (an explicit device= still wins)
            module = cls(**init)
        return module(**forward)

    def ref(init, **forward):
        with torch.device(DEVICE):
            module = cls(**{k: v for k, v in init.items() if k not in ("device", "dtype")})
        options = {p: getattr(module, p) for p in params}
        return spec.reference(**forward, **options)
    return Op(f"nn.{cls.__name__}", FAMILY, fn, ref, spec.tolerance)


OPS = [
    _module_op(nn.RMSNorm, "rms_norm", ("weight", "eps", "offset")),
    _module_op(nn.LayerNorm, "layer_norm", ("weight", "bias", "eps")),
    _module_op(nn.CrossEntropyLoss, "cross_entropy", ("ignore_index", "label_smoothing", "reduction", "z_loss",
                                                      "softcap")),
    _module_op(nn.FusedLinearCrossEntropyLoss, "fused_linear_cross_entropy",
               ("ignore_index", "label_smoothing", "reduction", "z_loss", "softcap")),
]


def _norm_base(hidden=7, rows=3, residual=False, **init):
    def build():
        inputs = {"init": {"hidden": hidden, **init}, "x": torch.randn(rows, hidden)}
        if residual:
            inputs["residual"] = torch.randn(rows, hidden)
        return inputs
    return build


def _init(base, **init):
    """``base`` with constructor arguments replaced."""
    return with_arg(base, "init", lambda d, _i: {**d, **init})


def _norm_cases(op: str) -> list[Case]:
    base = _norm_base()
    out = [
        Case(op, "plain", base, CORRECT),
        Case(op, "residual", _norm_base(residual=True), CORRECT),
        Case(op, "odd_13", _norm_base(13, 13), CORRECT),
        Case(op, "hidden1", _norm_base(1), CORRECT),
        Case(op, "no_affine", _init(base, elementwise_affine=False), CORRECT),
        Case(op, "weight_fp16", _init(base, dtype=torch.float16), CORRECT),
        Case(op, "x-strided", with_arg(base, "x", lambda t, _i: torch.cat([t, t], -1)[:, ::2]), CORRECT),
        Case(op, "x-other_hidden", with_arg(base, "x", lambda t, _i: t[:, :-1]), ERROR, ("x", "weight", "hidden")),
        Case(op, "x-fp64", with_arg(base, "x", lambda t, _i: t.double()), ERROR, "x"),
        Case(op, "x-meta", with_arg(base, "x", lambda t, _i: t.to("meta")), ERROR, "x"),
        Case(op, "hidden-str", _init(base, hidden="7"), ERROR, "hidden"),
        Case(op, "hidden-float", _init(base, hidden=7.0), ERROR, "hidden"),
        Case(op, "hidden-zero", _norm_base(0), ERROR, ("hidden", "x")),
        Case(op, "hidden-negative", _init(base, hidden=-1), ERROR, "hidden"),
        Case(op, "hidden-bool", _init(base, hidden=True), ERROR, "hidden"),
        Case(op, "eps-negative", _init(base, eps=-1.0), ERROR, "eps"),
        Case(op, "eps-str", _init(base, eps="1e-6"), ERROR, "eps"),
        Case(op, "eps-nan", _init(base, eps=float("nan")), ERROR, "eps"),
        Case(op, "dtype-int32", _init(base, dtype=torch.int32), ERROR, "dtype"),
        Case(op, "dtype-str", _init(base, dtype="float32"), ERROR, "dtype"),
        Case(op, "device-meta", _init(base, device="meta"), ERROR, ("device", "weight")),
        Case(op, "elementwise_affine-str", _init(base, elementwise_affine="no"), (ERROR, CORRECT),
             "elementwise_affine"),
    ]
    if op == "nn.RMSNorm":
        out += [
            Case(op, "offset-gemma", _init(base, offset=1.0), CORRECT),
            Case(op, "offset-str", _init(base, offset="1"), ERROR, "offset"),
            Case(op, "offset-nan", _init(base, offset=float("nan")), ERROR, "offset"),
            Case(op, "offset-no_affine", _init(base, offset=1.0, elementwise_affine=False), ERROR, "offset"),
        ]
    else:
        out += [Case(op, "no_bias", _init(base, bias=False), CORRECT),
                Case(op, "bias-str", _init(base, bias="no"), (ERROR, CORRECT), "bias")]
    return out


def _ce_base(rows=3, vocab=7, **init):
    return lambda: {"init": dict(init), "logits": torch.randn(rows, vocab), "target": torch.randint(0, vocab, (rows,))}


def _flce_base(rows=3, hidden=16, vocab=13, **init):
    return lambda: {"init": dict(init), "hidden": torch.randn(rows, hidden), "weight": torch.randn(vocab, hidden),
                    "target": torch.randint(0, vocab, (rows,))}


def _bad_row_nan(r: Run) -> None:
    loss = r.outs[0]
    assert bool(loss[1].isnan()), f"the row with an out-of-range target: loss {float(loss[1])}, want NaN"


_LOSS_OPTIONS = [  # (name, constructor arguments, expected)
    ("ignore_index-float", {"ignore_index": -100.0}, Err("ignore_index")),
    ("reduction-unknown", {"reduction": "avg"}, Err("reduction")),
    ("label_smoothing-above_1", {"label_smoothing": 1.5}, Err("label_smoothing")),
    ("label_smoothing-str", {"label_smoothing": "0.1"}, Err("label_smoothing")),
    ("z_loss-negative", {"z_loss": -1.0}, Err("z_loss")), ("softcap-zero", {"softcap": 0.0}, Err("softcap")),
    ("softcap-bool", {"softcap": True}, Err("softcap")), ("options", {"label_smoothing": 0.1, "z_loss": 1e-4,
                                                                   "softcap": 30.0, "reduction": "sum"}, CORRECT),
]


def _loss_cases(op: str, base, extra_init: list) -> list[Case]:
    out = [Case(op, "plain", base, CORRECT)]
    for name, init, want in _LOSS_OPTIONS + extra_init:
        out.append(Case(op, name, _init(base, **init), ERROR if isinstance(want, Err) else want,
                        want.arg if isinstance(want, Err) else ()))
    none = _init(base, reduction="none")

    def bad_target(t, _i):
        t = t.clone()
        t[1] = 1 << 20
        return t
    out += [
        Case(op, "target-out_of_range-validated", with_arg(none, "target", bad_target), ERROR, "target",
             isolate=True),
        Case(op, "target-out_of_range-unchecked", with_arg(none, "target", bad_target), (ERROR, DOCUMENTED),
             "target", check=_bad_row_nan, validate=False, guard=True, isolate=True),
        Case(op, "target-float", with_arg(base, "target", lambda t, _i: t.float()), ERROR, "target"),
    ]
    return out


CASES = (_norm_cases("nn.RMSNorm") + _norm_cases("nn.LayerNorm")
         + _loss_cases("nn.CrossEntropyLoss", _ce_base(),
                       [("inplace_backward-int", {"inplace_backward": 1}, Err("inplace_backward"))])
         + _loss_cases("nn.FusedLinearCrossEntropyLoss", _flce_base(),
                       [("chunk_size-zero", {"chunk_size": 0}, Err("chunk_size")),
                        ("chunk_size-float", {"chunk_size": 2.0}, Err("chunk_size")),
                        ("accum_dtype-name", {"accum_dtype": "float32"}, CORRECT),
                        ("accum_dtype-bad_name", {"accum_dtype": "float33"}, Err("accum_dtype")),
                        ("accum_dtype-fp16", {"accum_dtype": torch.float16}, Err("accum_dtype"))]))
CASES.append(Case("nn.FusedLinearCrossEntropyLoss", "bias", with_kwargs(_flce_base(), bias=torch.randn(13)), CORRECT))
