"""Replay of recorded launches (runtime/replay.py).

On the CPU the launches are stubbed as in ``benchmarks/host_python.py``: ops plan for a GPU, every kernel is
"compiled", and the direct launcher logs what it is given instead of running it. A replayed call must hand the
launcher exactly what the ordinary path hands it for the same inputs — the same integers, and pointers into
the same inputs at the same offsets — and return outputs laid out the same way. On a GPU the ops' results are
compared, replayed against not.
"""

from __future__ import annotations

import weakref

import pytest
import torch

import kernelworks as kw
import kernelworks.runtime.device as device
from kernelworks.runtime import alloc, indices, launch, replay
from kernelworks.runtime.replay import RECORD_TRIES, Replayable


class _LoggingKernels(dict):
    """Stands in for ``launch._COMPILED``: every key hits, with a direct launcher that logs its call."""

    def __init__(self, log: list) -> None:
        super().__init__()
        self.log = log

    def get(self, key, default=None):
        def go(g0, g1, g2, stream, args):
            self.log.append(((g0, g1, g2), tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args)))
        return None, (), go


@pytest.fixture
def launches(monkeypatch) -> list:
    """Launches stubbed (see the module docstring); yields the log of direct launches."""
    log: list = []
    monkeypatch.setattr(launch, "interpreter_active", lambda: False)
    monkeypatch.setattr(launch, "planning_active", lambda: False)
    monkeypatch.setattr(launch, "_FAST_LAUNCH", True)
    monkeypatch.setattr(launch, "_current_device", lambda: 0)
    monkeypatch.setattr(launch, "_current_stream", lambda index: 0)
    monkeypatch.setattr(launch, "_COMPILED", _LoggingKernels(log))
    monkeypatch.setattr(device, "_planning_for_gpu", True)
    monkeypatch.setattr(indices, "_validate", False)
    previous = replay.set_enabled(True)
    replay.clear()  # recordings hold the launchers of the stubs they were made with
    yield log
    replay.clear()
    replay.set_enabled(previous)


def _flat(out: object) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    return []


def _canonical(log: list, inputs: list[torch.Tensor], outputs: list[torch.Tensor], reuse: bool = True) -> list:
    """The launches with each pointer named: ``("in", i, offset)`` inside input ``i``, else ``("new", k)`` by
    first appearance (allocations of the call); the outputs' pointers and layouts last. ``reuse=False``: every
    fresh pointer is ``("new",)``, for calls whose torch ops free temporaries at other points replayed (a
    replay drops each one after its last use), so the allocator hands later buffers other addresses."""
    spans = [(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes(), t.data_ptr()) for t in inputs]
    fresh: dict[int, int] = {}

    def name(p: int) -> tuple:
        for i, (start, size, ptr) in enumerate(spans):
            if start <= p < start + max(size, 1):
                return ("in", i, p - ptr)
        return ("new", fresh.setdefault(p, len(fresh))) if reuse else ("new",)

    out = []
    for grid, args in log:
        # pointers are the ints at the positions where the ordinary path passed tensors: any int that is a
        # pointer into an input or an allocation names itself the same way in both logs
        out.append((grid, tuple(name(a) if type(a) is int and a > 1 << 20 else a for a in args)))
    out.append([(name(t.data_ptr()), tuple(t.shape), t.stride(), t.dtype) for t in outputs])
    return out


def _compare(call, inputs: list[torch.Tensor], log: list, times: int = 3, reuse: bool = True) -> str:
    """Call ``call()`` ``times`` times with replay on, then once off, on the same inputs: the last replayed
    call's canonical log (``_canonical``) must equal the ordinary one. Returns that canonical log."""
    for _ in range(times):
        log.clear()
        out_on = call()
    on = _canonical(log, inputs, _flat(out_on), reuse)
    replay.set_enabled(False)
    log.clear()
    out_off = call()
    off = _canonical(log, inputs, _flat(out_off), reuse)
    replay.set_enabled(True)
    assert on == off
    assert len(off) > 1  # something launched
    return on


def _t(*shape: int, dtype=torch.bfloat16, grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype).requires_grad_(grad)


def _replayed(fragment: str) -> int:
    return sum(v["replayed"] for k, v in replay.report().items() if fragment in k)


OPS = {
    "rms_norm": lambda x, r, w, qkv: kw.rms_norm(x, w),
    "rms_norm_residual": lambda x, r, w, qkv: kw.rms_norm(x, w, residual=r),
    "rms_norm_strided_rows": lambda x, r, w, qkv: kw.rms_norm(qkv[:, :256], w),
    "layer_norm": lambda x, r, w, qkv: kw.layer_norm(x, w, r[0]),  # one tensor twice is not recorded
    "softmax": lambda x, r, w, qkv: kw.softmax(x),
    "silu": lambda x, r, w, qkv: kw.silu(x),
    "swiglu_views": lambda x, r, w, qkv: kw.swiglu(qkv[:, :256], qkv[:, 256:512]),
    "matmul": lambda x, r, w, qkv: kw.matmul(x, qkv.view(256, 24)),
    "flash_attention_packed_qkv": lambda x, r, w, qkv: kw.flash_attention(
        *(qkv.view(1, 8, 3, 4, 64)[:, :, i] for i in range(3)), causal=True),
    # the public op transposes its arguments and its result: views an autograd replay makes again
    "flash_attention_bhsd": lambda x, r, w, qkv: kw.flash_attention(
        *(qkv.view(1, 8, 3, 4, 64)[:, :, i].transpose(1, 2) for i in range(3)), causal=True, layout="bhsd"),
    "gated_mlp": lambda x, r, w, qkv: kw.gated_mlp(x.view(2, 4, 256), qkv[:, :256], qkv[:, 256:512],
                                                   qkv[:, 512:].t()),
}
WHOLE_CALL_NAMES = {"flash_attention_bhsd": "api.flash_attention", "gated_mlp": "mlp.gated_mlp"}
"""Ops whose public op makes views of its own: the whole autograd call must replay, views and all."""


@pytest.mark.parametrize("name", list(OPS))
def test_replay_launches_what_the_body_launches(launches, name):
    """Each op, inference: the replay passes what the ordinary path passes (q, k, v sliced from one buffer
    keep their own pointers), and the op's body did replay."""
    x, r, qkv = _t(8, 256), _t(8, 256), _t(8, 768)
    w = _t(256, dtype=torch.float32)
    _compare(lambda: OPS[name](x, r, w, qkv), [x, r, w, qkv], launches)
    assert _replayed("") > 0  # the fixture cleared every recording: this call's own


@pytest.mark.parametrize("name", list(OPS))
def test_autograd_replay_launches_what_the_ordinary_path_launches(launches, name):
    """Each op, training: a replayed autograd call (the public op's TorchOp calls, then the bodies' launches)
    passes what the ordinary path passes, forward and backward."""
    x, r, qkv = _t(8, 256, grad=True), _t(8, 256, grad=True), _t(8, 768, grad=True)
    w = _t(256, dtype=torch.float32, grad=True)
    inputs = [x, r, w, qkv]

    def step():
        for t in inputs:
            t.grad = None
        out = _flat(OPS[name](x, r, w, qkv))
        torch.autograd.backward(out, [torch.ones_like(o) for o in out])
        return out, [t.grad for t in inputs]

    # a replay drops the public op's views after their last use: fresh buffers may land elsewhere
    _compare(step, inputs, launches, reuse=name not in WHOLE_CALL_NAMES)
    grad_replays = [v for rep in replay._REGISTRY if rep.whole_call for v in rep._memo.values()
                    if callable(v) and "autograd" in v.__code__.co_filename]
    assert grad_replays
    if name in WHOLE_CALL_NAMES:
        assert _replayed(WHOLE_CALL_NAMES[name]) > 0, replay.report()
    # each Function call runs the launch replay its body recorded, bound at recording: the body's signature is
    # not keyed again per call
    for entry in grad_replays:
        bound = [v for v in entry.__globals__.values() if getattr(v, "__code__", None) is not None
                 and v.__code__.co_filename == "<kernelworks replay>"]
        assert bound, entry.source


def test_replay_of_the_backward(launches):
    """The training path: the forward and backward bodies of rms_norm (with a residual) replay too."""
    x, r = _t(8, 256, grad=True), _t(8, 256, grad=True)
    w = _t(256, dtype=torch.float32, grad=True)
    dy, dh = _t(8, 256), _t(8, 256)
    grads = []

    def step():
        x.grad = r.grad = w.grad = None
        y, h = kw.rms_norm(x, w, residual=r)
        torch.autograd.backward((y, h), (dy, dh))
        grads[:] = [x.grad, r.grad, w.grad]
        return y, h

    _compare(step, [x, r, w, dy, dh], launches)
    assert _replayed("norm.api._backward") >= 1


def test_public_ops_replay_whole_inference_calls(launches):
    """A public op called without autograd replays as one unit (validation included: a bad call is still
    refused, its signature being new); with inputs that require grad the call has a signature of its own
    (below), and the autograd graph is built on every call."""
    x, w = _t(8, 256), _t(256, dtype=torch.float32)
    for _ in range(3):
        kw.rms_norm(x, w)
    whole = kw.rms_norm.replay
    assert sum(callable(v) for v in whole._memo.values()) == 1
    with pytest.raises(ValueError, match="weight"):
        kw.rms_norm(x, _t(128, dtype=torch.float32))
    xg = _t(8, 256, grad=True)
    for _ in range(3):
        y = kw.rms_norm(xg, w)
        assert y.grad_fn is not None
    assert sum(callable(v) for v in whole._memo.values()) == 2  # the autograd calls' own signature
    with torch.no_grad():  # the same signature as x's calls (no graph: requires_grad is not part of it)
        for _ in range(3):
            assert kw.rms_norm(xg, w).grad_fn is None
    assert len(whole._memo) == 3 and sum(callable(v) for v in whole._memo.values()) == 2


def test_public_ops_replay_whole_autograd_calls(launches):
    """An autograd call replays the public op's TorchOp calls for its signature (each tensor's requires_grad
    part of it): the same launches forward and backward, a graph of its own on every call, and a new signature
    (a bad weight, a frozen one) validated and recorded on its own."""
    x, w, dy = _t(8, 256, grad=True), _t(256, dtype=torch.float32, grad=True), _t(8, 256)
    graphs = []

    def step(weight):
        x.grad = weight.grad = None
        y = kw.rms_norm(x, weight)
        graphs.append(y.grad_fn)
        y.backward(dy)
        return y, x.grad, weight.grad

    _compare(lambda: step(w), [x, w, dy], launches)
    whole = kw.rms_norm.replay
    (entry,) = [v for v in whole._memo.values() if callable(v)]
    assert "return o0[0]" in entry.source
    assert len({id(g) for g in graphs}) == len(graphs)
    assert all(type(g).__name__ == "NormFunctionBackward" for g in graphs)
    with pytest.raises(ValueError, match="weight"):
        kw.rms_norm(x, _t(128, dtype=torch.float32, grad=True))
    frozen = w.detach()
    for _ in range(3):
        _, dx, dw = step(frozen)
        assert dx is not None and dw is None
    assert sum(callable(v) for v in whole._memo.values()) == 2


def test_autograd_whole_calls_see_everything_they_skip(launches, monkeypatch):
    """An autograd call is recorded only if all the public op did was TorchOp calls on its arguments (or on
    earlier TorchOps' outputs) with scalars, which the replay repeats: a torch op of its own (a view, a cast, a
    host read), no TorchOp, a tensor from elsewhere or one tensor passed twice keep the ordinary path, run once
    per call. Scalars are part of the signature, so a check on one still raises; and a replay recorded with
    validation off is not used with it on."""
    from kernelworks.ops.softmax import _softmax_op
    from kernelworks.runtime.replay import replayed_op

    runs = []
    held = _t(4, 64)

    def public(body):
        def fn(x, y=None, limit=64):
            runs.append(1)
            if x.shape[-1] > limit:
                raise ValueError("limit: too small")
            return body(x, y)
        return replayed_op(fn)

    def view_without_grad(x, y):
        with torch.no_grad():
            v = x.view(x.shape)
        return _softmax_op(v)

    refused = {
        "view without grad": public(view_without_grad),
        "view of a held tensor": public(lambda x, y: (_softmax_op(x), _softmax_op(held.view(64, 4)))),
        "cast after": public(lambda x, y: _softmax_op(x).float()),
        "host read": public(lambda x, y: _softmax_op(x if bool((x < 100).all()) else -x)),
        "no TorchOp": public(lambda x, y: x.softmax(-1)),
        "held tensor": public(lambda x, y: (_softmax_op(x), _softmax_op(held))),
    }
    x = _t(4, 64, grad=True)
    for name, op in refused.items():
        runs.clear()
        for _ in range(6):
            assert _flat(op(x))[0].grad_fn is not None, name
        assert len(runs) == 6, name
        assert not any(callable(v) for v in op.replay._memo.values()), name
        assert op.replay.refusals, name
    twice = public(lambda x, y: (_softmax_op(x), _softmax_op(y)))
    for _ in range(4):
        twice(x, x)
    assert twice.replay.refusals == {"one tensor passed as two arguments": RECORD_TRIES}

    def detached_then_graph(x, y):
        with torch.no_grad():
            first = _softmax_op(x)
        return first, _softmax_op(x)

    mixed = public(detached_then_graph)
    for _ in range(4):
        first, second = mixed(x)
        assert first.grad_fn is None and second.grad_fn is not None
    assert any(callable(v) for v in mixed.replay._memo.values())

    # views of arguments and of TorchOp outputs are made again by the replay, at the top of the dispatcher:
    # autograd records them as the ordinary call does, and the gradient flows back through them
    viewed = public(lambda x, y: _softmax_op(x.transpose(0, 1)).transpose(0, 1)[:, :32])
    runs.clear()
    for _ in range(4):
        out = viewed(x)
        assert type(out.grad_fn).__name__ == "SliceBackward0" and out.shape == (4, 32)
        x.grad = None
        out.sum().backward()
        assert x.grad is not None and x.grad.shape == x.shape
    assert len(runs) == 2
    (entry,) = [v for v in viewed.replay._memo.values() if callable(v)]
    assert entry.source.count("o") >= 4, entry.source  # two transposes, the TorchOp and the slice

    chained = public(lambda x, y: _softmax_op(_softmax_op(x)))
    runs.clear()
    for _ in range(4):
        assert chained(x).grad_fn is not None
    assert len(runs) == 2  # the ordinary call, the recording; then replays
    (entry,) = [v for v in chained.replay._memo.values() if callable(v)]
    assert "o1 = " in entry.source and "(o0, " in entry.source
    with pytest.raises(ValueError, match="limit"):
        chained(x, limit=32)
    monkeypatch.setattr(indices, "_validate", True)
    chained(x)
    assert len(runs) == 4


def test_autograd_replay_of_torch_ops_and_nested_public_ops(launches):
    """A public op may call torch ops of its own (a product, an add) and other public ops: its autograd call is
    recorded with the inner public ops' TorchOp calls (they take their ordinary path while it is recorded), and
    replays all of it, each op building its graph node as the ordinary call does."""
    from kernelworks.runtime.replay import replayed_op

    runs = []

    def outer(x, w):
        runs.append(1)
        return kw.softmax(x @ w) + x

    op = replayed_op(outer)
    x, w, dy = _t(8, 256, grad=True), _t(256, 256, grad=True), _t(8, 256)

    def step():
        x.grad = w.grad = None
        y = op(x, w)
        assert type(y.grad_fn).__name__ == "AddBackward0"
        assert {type(f).__name__ for f, _ in y.grad_fn.next_functions} == {"SoftmaxFunctionBackward",
                                                                           "AccumulateGrad"}
        y.backward(dy)
        assert x.grad is not None and w.grad is not None
        # the launches only: where the CPU allocator puts the outputs of torch's own ops (the product, the add,
        # the gradients) depends on when each temporary dies, which is the allocator's affair

    _compare(step, [x, w, dy], launches, reuse=False)
    assert len(runs) == 3  # the first call, the recording, the ordinary call of _compare: two replayed
    (entry,) = [v for v in op.replay._memo.values() if callable(v)]
    assert "functorch_active" in entry.source and entry.source.count(" = ") == 3, entry.source


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_a_patched_decoder_layer_replays_as_one_call(launches, family):
    """A patched model's training step: each decoder layer is one recorded call (``patch.decoder``'s node, or
    ``patch.layers._dense_layer``), and the replayed step launches what the ordinary one launches, forward and
    backward."""
    tf = pytest.importorskip("transformers")
    config_cls = tf.LlamaConfig if family == "llama" else tf.Qwen3Config
    config = config_cls(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, vocab_size=128, max_position_embeddings=64, head_dim=16)
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config).to(torch.bfloat16).train()
    kw.patch(model)
    ids = torch.randint(0, 128, (1, 16))
    params = list(model.parameters())

    def step():
        model.zero_grad(set_to_none=True)
        loss = model(ids, labels=ids).loss
        loss.backward()
        return [loss, *(p.grad for p in params)]

    _compare(step, [*params, ids], launches, reuse=False)
    if family == "qwen3":  # per-head q/k norms: one replayed call of the modules' ops
        assert _replayed("layers._dense_layer") == 1, replay.report()
    else:  # one autograd node, its forward and backward bodies replayed
        assert _replayed("patch.decoder._forward") == 1 and _replayed("patch.decoder._backward") == 1, replay.report()


def test_replays_call_each_torch_op_as_recorded():
    """The torch function or Tensor method a replay calls in place of an OpOverload dispatches exactly that
    overload (checked by a dispatch mode on each)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from kernelworks.runtime.replay import _SAME_AS_TORCH, callable_for

    a, b, c, out = torch.randn(4, 4), torch.randn(4, 4), torch.randn(4), torch.empty(4, 4)
    calls = {
        "aten.mm.default": lambda f: f(a, b), "aten.mm.out": lambda f: f(a, b, out=out),
        "aten.addmm.default": lambda f: f(c, a, b), "aten.addmm_.default": lambda f: f(out, a, b),
        "aten.add.Tensor": lambda f: f(a, b), "aten.add_.Tensor": lambda f: f(out, b),
        "aten.mul.Tensor": lambda f: f(a, b), "aten.t.default": lambda f: f(a),
        "aten.transpose.int": lambda f: f(a, 0, 1), "aten.view.default": lambda f: f(a, [16]),
        "aten.unsqueeze.default": lambda f: f(a, 0), "aten.permute.default": lambda f: f(a, [1, 0]),
        "aten.clone.default": lambda f: f(a), "aten.copy_.default": lambda f: f(out, a),
        "aten.zero_.default": lambda f: f(out), "aten.sum.dim_IntList": lambda f: f(a, [0]),
    }
    assert set(calls) == set(_SAME_AS_TORCH)
    seen = []

    class Seen(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    for name, call in calls.items():
        seen.clear()
        with Seen():
            call(_SAME_AS_TORCH[name])
        assert seen == [name]
    assert callable_for(torch.ops.aten.slice.Tensor) is torch.ops.aten.slice.Tensor._op


def test_autocast_is_part_of_a_public_op_signature(launches):
    """A public op's torch ops follow CUDA autocast: a call recorded without it is not replayed with it on."""
    from kernelworks.ops.softmax import _softmax_op
    from kernelworks.runtime.replay import replayed_op

    runs = []

    @replayed_op
    def op(x):
        runs.append(1)
        return _softmax_op(x)

    x = _t(4, 64)
    for _ in range(3):
        op(x)
    assert len(runs) == 2
    torch._C.set_autocast_enabled("cuda", True)  # torch.autocast("cuda") turns itself off without a GPU
    try:
        op(x)
    finally:
        torch._C.set_autocast_enabled("cuda", False)
    assert len(runs) == 3


def test_functorch_wrappers_keep_the_ordinary_path(launches):
    """A tensor leaked from a functorch transform (a dead wrapper, no storage to key) takes the ordinary path,
    whose Function.apply unwraps it; so does any call while a transform is active."""
    leaked = []

    def f(t):
        leaked.append(t)
        return (t * t).sum()

    torch.func.grad(f)(_t(4, 64, dtype=torch.float32, grad=True))
    for _ in range(3):
        assert type(kw.softmax(leaked[0]).grad_fn).__name__ == "SoftmaxFunctionBackward"
    # a recorded signature called while a transform is active takes the ordinary path too (which refuses it)
    x = _t(4, 64, grad=True)
    for _ in range(3):
        kw.softmax(x)
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda z: (kw.softmax(x).float() * z).sum())(torch.ones(4, 64))


def _toy(fn):
    """A replayable body around stubbed launches of a do-nothing kernel."""
    import triton
    import triton.language as tl

    @triton.jit
    def _noop(p, n, BLOCK: tl.constexpr):
        pass

    def body(*args):
        return fn(lambda *a: launch.launch(_noop, (1,), *a, num_warps=1, BLOCK=16), *args)

    return Replayable(body)


def test_signature_changes_record_again(launches):
    """A new shape, stride, dtype, alignment or scalar is a new signature, recorded on its own."""
    def body(go, x, k):
        y = alloc.empty_like(x)
        go(y, x.numel() * k)
        return y

    op = _toy(body)
    base = torch.zeros(64)
    variants = [(base[:16], 1), (base[:32], 1), (base[2:18], 1), (base[1:17], 1), (base[:16], 2),
                (base[:16].double(), 1), (base[:16], 1.0), (base[:16], True)]
    for x, k in variants:
        for _ in range(3):
            launches.clear()
            y = op(x, k)
            assert launches[-1][1] == (y.data_ptr(), x.numel() * k)
    assert len(op._memo) == len(variants)
    assert all(callable(v) for v in op._memo.values())


def test_unrecordable_bodies_keep_the_ordinary_path(launches):
    """A host read (``.item()``), an op whose output shape depends on values, a bumped version counter
    (``forbid``): never replayed, and each call still runs the body exactly once."""
    runs = []

    def reads(go, x):
        runs.append(1)
        go(x, int(x[0].item()))
        return x

    def value_shaped(go, x):
        runs.append(1)
        y = x.nonzero()
        go(y, 1)
        return y

    def forbids(go, x):
        runs.append(1)
        replay.forbid("test")
        go(x, 1)
        return x

    for body in (reads, value_shaped, forbids):
        op = _toy(body)
        runs.clear()
        for _ in range(6):
            op(torch.ones(4))
        assert len(runs) == 6
        assert not any(callable(v) for v in op._memo.values())
        assert op.refusals


def test_one_tensor_passed_twice_is_not_recorded(launches):
    """``swiglu(g, g)`` has the signature of ``swiglu(g, u)``, and its launches cannot tell which argument a
    pointer came from: such a call is not recorded, and a later call with two tensors still uses both."""
    g, u = _t(8, 256), _t(8, 256)
    for _ in range(4):
        kw.swiglu(g, g)
    assert not any(callable(v) for v in kw.swiglu.replay._memo.values())
    assert "one tensor passed as two arguments" in kw.swiglu.replay.refusals
    _compare(lambda: kw.swiglu(g, u), [g, u], launches)


def test_recording_frees_what_the_body_drops(launches):
    """A body's temporaries are freed when it drops them — while it is being recorded, as on the ordinary path,
    and by the replay, right after their last use (holding them raised the call's peak memory by every buffer
    freed early) — and a later allocation that reuses a dead temporary's id is a new root."""
    dead_inside = []

    def body(go, x):
        tmp = alloc.empty_like(x)
        go(tmp, 1)
        probe = weakref.ref(tmp)
        del tmp
        dead_inside.append(probe() is None)
        y = alloc.empty_like(x)
        go(y, 2)
        return y

    op = _toy(body)
    x = torch.ones(64)
    for _ in range(3):
        op(x)
    assert dead_inside and all(dead_inside), dead_inside  # the first two calls: ordinary, then recorded
    assert any(callable(v) for v in op._memo.values()), op.refusals
    launches.clear()
    out = op(x)
    assert len(launches) == 2 and launches[1][1][0] == out.data_ptr()
    # the replay drops the temporary after its last launch, before the next allocation, and keeps the output
    source = next(v for v in op._memo.values() if callable(v)).source.splitlines()
    freed = source.index("    del t0")
    assert freed < next(i for i, line in enumerate(source) if line.startswith("    t1 = "))
    assert not any(line.startswith("    del") and "t1" in line for line in source)


def test_outputs_views_fills_and_constants(launches):
    """Outputs that are views of an allocation, zero- and value-filled buffers, tensors made before the call
    (held as constants) and non-tensor results come back as the body returns them."""
    table = torch.arange(5, dtype=torch.int32)

    def body(go, x):
        acc = torch.zeros(3, 4)
        full = torch.full((2,), 7.0)
        go(acc[1], table, x[2:])
        return acc.t(), full, None, 3

    op = _toy(body)
    x = torch.ones(6)
    for _ in range(3):
        launches.clear()
        acc_t, full, none, three = op(x)
    assert callable(op._memo[next(iter(op._memo))])
    assert acc_t.shape == (4, 3) and acc_t.stride() == (1, 4) and torch.equal(acc_t, torch.zeros(4, 3))
    assert torch.equal(full, torch.full((2,), 7.0)) and none is None and three == 3
    (_grid, args), = launches
    assert args == (acc_t.data_ptr() + 16, table.data_ptr(), x.data_ptr() + 8)


def test_unused_allocations_are_not_repeated(launches):
    """An allocation that no launch, op or result uses (a placeholder the body drops) is left out of the
    replay; the ones that are used stay."""
    def body(go, x):
        placeholder = x.new_empty(0)  # noqa: F841 - what cross_entropy's body makes when it has no gradient
        out = torch.empty_like(x)
        go(x, out)
        return out

    op = _toy(body)
    x = torch.ones(4)
    for _ in range(3):
        launches.clear()
        out = op(x)
    source = next(v for v in op._memo.values() if callable(v)).source
    assert source.count("empty_strided(") == 1, source
    (_grid, args), = launches
    assert args == (x.data_ptr(), out.data_ptr())


def test_other_torch_ops_are_called_again(launches):
    """Torch ops in a body (a copy, a cast, a reduction, an in-place update of an input) are called again on
    replay, on the call's own tensors: their results follow the new inputs."""
    def body(go, x, state):
        y = x[:, 1:].contiguous()  # a copy of a view of an input
        total = y.float().sum()
        state.add_(1)
        go(y, total, 1)
        return y, total

    op = _toy(body)
    state = torch.zeros(3)
    for i in range(4):
        x = torch.randn(4, 5)
        launches.clear()
        y, total = op(x, state)
        assert torch.equal(y, x[:, 1:]) and y.is_contiguous()
        assert torch.allclose(total, x[:, 1:].float().sum())
        assert launches[-1][1] == (y.data_ptr(), total.data_ptr(), 1)
        assert torch.equal(state, torch.full((3,), i + 1.0))
    assert callable(next(iter(op._memo.values())))


def test_validation_mode_is_not_skipped(launches, monkeypatch):
    """A replay recorded with host validation off is not used while validation is on (the body's host checks
    must run); one recorded with it on serves both modes."""
    checks = []

    def body(go, x):
        if indices._validate:
            checks.append(1)
        go(x, 1)
        return x

    op = _toy(body)
    x = torch.ones(4)
    for _ in range(3):
        op(x)
    monkeypatch.setattr(indices, "_validate", True)
    op(x)
    op(x)
    assert len(checks) == 2


def test_nested_bodies_are_recorded_as_the_outer_ones(launches):
    """A replayable body calling another: while the outer one records, the inner one runs plainly, so its
    launches are part of the outer replay."""
    inner = _toy(lambda go, x: (go(x, 2), x)[1])

    def outer_body(go, x):
        go(x, 1)
        inner(x)
        return x

    outer = _toy(outer_body)
    x = torch.ones(4)
    for _ in range(4):
        launches.clear()
        outer(x)
    assert [args[1] for _, args in launches] == [1, 2]
    assert callable(next(iter(outer._memo.values())))


@pytest.mark.interpreter
def test_off_gpu_paths_never_replay():
    """Under the interpreter (here: no stubs) a body runs plainly on every call, recording nothing."""
    runs = []
    op = Replayable(lambda x: runs.append(1) or x)
    for _ in range(4):
        op(torch.ones(2))
    assert len(runs) == 4 and not op._memo


@pytest.mark.gpu
@pytest.mark.parametrize("train", [False, True], ids=["infer", "train"])
@pytest.mark.parametrize("name", list(OPS))
def test_replayed_results_equal_the_ordinary_ones(name, train):
    """On the GPU: the op called repeatedly with fresh inputs of one signature (replayed from the third call)
    gives bit-identical results to the ordinary path on the same inputs (and, training, gradients)."""
    torch.manual_seed(0)

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        for t in inputs:
            t.grad = None
        out = _flat(OPS[name](*inputs))
        if not train:
            return out
        torch.autograd.backward(out, [torch.ones_like(o) for o in out])
        return [*out, *(t.grad for t in inputs)]

    for _ in range(4):
        x, r, qkv = (torch.randn(*s, device="cuda", dtype=torch.bfloat16) for s in ((8, 256), (8, 256), (8, 768)))
        inputs = [t.requires_grad_(train) for t in (x, r, torch.randn(256, device="cuda"), qkv)]
        on = run(inputs)
        previous = replay.set_enabled(False)
        try:
            off = run(inputs)
        finally:
            replay.set_enabled(previous)
        for a, b in zip(on, off, strict=True):
            if a is None or b is None:
                assert a is b
                continue
            assert a.shape == b.shape and a.stride() == b.stride()
            assert torch.equal(a, b)
    assert any(v["replayed"] for v in replay.report().values())


@pytest.mark.gpu
def test_a_patched_models_replayed_steps_equal_the_ordinary_ones():
    """On the GPU: training steps of a patched Llama-shaped model (each decoder layer one replayed call) give
    bit-identical losses and gradients with replay on and off."""
    tf = pytest.importorskip("transformers")
    config = tf.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, vocab_size=512, max_position_embeddings=256)
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config).to("cuda", torch.bfloat16).train()
    kw.patch(model)
    ids = torch.randint(0, 512, (2, 128), device="cuda")

    names = ["loss", *(n for n, _ in model.named_parameters())]

    def step() -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        loss = model(ids, labels=ids).loss
        loss.backward()
        return [loss.detach().clone(), *(p.grad.clone() for p in model.parameters())]

    replayed = [step() for _ in range(4)][-1]
    assert _replayed("patch.decoder._backward") > 0, replay.report()
    previous = replay.set_enabled(False)
    try:
        ordinary = step()
    finally:
        replay.set_enabled(previous)
    differ = {n: (a.float() - b.float()).abs().max().item() for n, a, b in zip(names, replayed, ordinary, strict=True)
              if not torch.equal(a, b)}
    assert not differ


_FUZZ_OPS = {
    "rms_norm_residual": lambda a, b, w: kw.rms_norm(a, w, residual=b),
    "softmax": lambda a, b, w: kw.softmax(a),
    "swiglu": lambda a, b, w: kw.swiglu(a, b),
    "matmul": lambda a, b, w: kw.matmul(a, b.t()),
    # targets from b's values: a replay must not bake in what it read on the host at recording
    "cross_entropy": lambda a, b, w: kw.cross_entropy(a, (b.float().abs() * 1000).long()[:, 0] % a.shape[1]),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(_FUZZ_OPS))
def test_replay_of_views_at_moving_offsets_into_a_buffer_updated_in_place(name):
    """On the GPU: 40 calls whose inputs are row-strided views into one buffer at random offsets — most 16-byte
    aligned (one signature: replayed), some not (another signature: recorded apart) — with the buffer changed in
    place between calls. Replay on and off give bit-identical results every time. Validation mode off, as users
    run: its host checks of index values (cross_entropy's targets) sync, which no recording survives. (No
    ``monkeypatch`` here: the suite turns replay off for tests that use it.)"""
    with indices.validation(False):
        _fuzz_replay(_FUZZ_OPS[name])


def _fuzz_replay(op) -> None:
    gen = torch.Generator().manual_seed(0)
    buf = torch.randn(1 << 16, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(256, device="cuda")

    def view(offset: int, row_stride: int) -> torch.Tensor:
        return buf[offset:offset + 8 * row_stride].view(8, row_stride)[:, :256]

    def pick_offset(i: int) -> int:
        offset = 8 * int(torch.randint(0, 6000, (1,), generator=gen))
        return offset + (1 if i % 7 == 6 else 0)  # every seventh call misaligned by one element

    replay.clear()
    for i in range(40):
        row_stride = (256, 320)[i % 2]
        a, b = view(pick_offset(i), row_stride), view(pick_offset(i + 3), row_stride)
        on = [t.clone() for t in _flat(op(a, b, w))]
        previous = replay.set_enabled(False)
        try:
            off = _flat(op(a, b, w))
        finally:
            replay.set_enabled(previous)
        for x, y in zip(on, off, strict=True):
            assert torch.equal(x, y), f"call {i}: replayed and ordinary results differ"
        start = int(torch.randint(0, (1 << 16) - 4096, (1,), generator=gen))
        buf[start:start + 4096].mul_(-1.5)  # the next calls read changed values at the same addresses
    # both row strides' aligned signatures reached replay (the report counts this test's: cleared at the start)
    assert sum(v["replayed"] for v in replay.report().values()) >= 2
