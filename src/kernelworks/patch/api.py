"""``kernelworks.patch(model)`` / ``kernelworks.unpatch(model)``: Hugging Face transformers models onto the
public ops, in place.

A patched module keeps its object, parameters and buffers (state_dict keys and tensors unchanged); only its
class is swapped for a subclass of the same name whose ``forward`` is ours (:mod:`kernelworks.patch.layers`).
A subclass, not an instance ``forward``: transformers wraps decoder-layer forwards for gradient checkpointing
per class (5.23) or in ``__call__`` (5.17), and accelerate's hooks live on the instance — both keep working
(a hooked norm, LM head or projection is called, not bypassed, so its hooks still run).
``unpatch`` swaps the original classes back and restores ``config._attn_implementation``.
"""

from __future__ import annotations

import copyreg
import functools
import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

import kernelworks
from kernelworks.runtime.device import runs_kernels
from kernelworks.runtime.validate import FLOAT_DTYPES

# ------------------------------------------------------------------------------------------- families


def _no_attn_kwargs(module: nn.Module) -> dict:
    return {}


def _config_window(module: nn.Module) -> dict:  # Mistral: one window for every layer, from the config
    return {"sliding_window": getattr(module.config, "sliding_window", None)}


def _layer_window(module: nn.Module) -> dict:  # Qwen2/3, Gemma 3: per layer (layer_types)
    return {"sliding_window": module.sliding_window}


def _window_softcap(module: nn.Module) -> dict:  # Gemma 2: per-layer window and attention logit soft-capping
    return {"sliding_window": module.sliding_window, "softcap": module.attn_logit_softcapping}


@dataclass(frozen=True)
class Family:
    """What differs between the supported families: the decoder layer's shape (``"llama"``: pre-norms;
    ``"gemma"``: sandwich norms), the RMSNorm weight offset, the extra arguments HF's attention module
    hands its attention function, and whether its attention output is gated (Qwen3-Next: ``q_proj`` makes
    the queries and a sigmoid gate on the output)."""

    layer: str
    norm_offset: float
    attn_kwargs: Callable[[nn.Module], dict]
    gated_attention: bool = False


FAMILIES: dict[str, Family] = {
    "llama": Family("llama", 0.0, _no_attn_kwargs),
    "mistral": Family("llama", 0.0, _config_window),
    "qwen2": Family("llama", 0.0, _layer_window),
    "qwen3": Family("llama", 0.0, _layer_window),
    "gemma2": Family("gemma", 1.0, _window_softcap),
    "gemma3_text": Family("gemma", 1.0, _layer_window),
    "qwen3_moe": Family("llama", 0.0, _layer_window),
    "mixtral": Family("llama", 0.0, _config_window),
    "qwen3_next": Family("llama", 1.0, _no_attn_kwargs, gated_attention=True),
}
"""Supported ``config.model_type`` values (Llama 3.x, Mistral, Qwen2/2.5, Qwen3, Gemma 2, Gemma 3 text, the
mixture-of-experts Qwen3-MoE and Mixtral, and the hybrid Qwen3-Next: Gated DeltaNet and gated attention layers,
sparse MoE with a shared expert)."""

_GLU = {"silu": ("swiglu", None), "swish": ("swiglu", None), "gelu_pytorch_tanh": ("geglu", "tanh"),
        "gelu_new": ("geglu", "tanh"), "gelu": ("geglu", "none")}
"""HF activation names → the gated op and its GELU approximation."""

_EXPERTS_LAYOUT = {"has_gate": True, "is_concatenated": True, "has_bias": False, "is_transposed": False,
                   "has_post_expert_norm": False, "_is_expert_parallel": False}
"""The stacked-experts layout :func:`kernelworks.patch.layers.experts_forward` computes (HF's
``use_experts_implementation`` flags): ``gate_up_proj [E, 2I, H]`` as ``[gate; up]``, ``down_proj [E, H, I]``,
no biases, no expert parallelism. Other layouts keep HF's experts forward."""


def _experts(mlp: nn.Module) -> nn.Module | None:
    """The stacked experts of a sparse MoE block in the layout we compute, else None."""
    experts = getattr(mlp, "experts", None)
    if experts is None or not isinstance(getattr(experts, "gate_up_proj", None), torch.Tensor):
        return None
    if any(getattr(experts, flag, value) != value for flag, value in _EXPERTS_LAYOUT.items()):
        return None
    return experts


# ------------------------------------------------------------------------------------------- class swap

_SUBCLASSES: dict[tuple[type, str], type] = {}


def _on_kernels_or_torch(ours: Callable, theirs: Callable) -> Callable:
    """``ours`` when the call's first tensor is one the kernels take (CUDA, or CPU under the interpreter;
    float32, float16 or bfloat16 if it is a floating tensor), else the original ``theirs`` (warned once): a
    patched model left on, or moved to, the CPU of a GPU machine, or cast to float64, keeps working on torch
    instead of raising inside a kernel call."""
    @functools.wraps(ours)
    def forward(self, *args, **kwargs):
        x = args[0] if args and isinstance(args[0], torch.Tensor) else \
            next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        if x is None or (runs_kernels(x) and (x.dtype in FLOAT_DTYPES or not x.is_floating_point())):
            return ours(self, *args, **kwargs)
        from kernelworks.patch.attention import warn_once

        if runs_kernels(x):
            warn_once(f"{x.dtype} tensors: the kernels take float32, float16 and bfloat16, so the patched modules "
                      "run their torch forwards")
        else:
            warn_once(f"tensors on {x.device}: the kernels take CUDA tensors, so the patched modules run their "
                      "torch forwards there")
        return theirs(self, *args, **kwargs)
    return forward


def _subclass(base: type, tag: str, attrs: dict) -> type:
    """One subclass per (class, variant), named like ``base`` and living in its module (so repr, config
    ``architectures`` and transformers' look-ups of the modeling file see the original class). Pickling
    (``torch.save(model)``, ``pickle``) cannot find such a class by its name, which is the base's: each instance
    pickles as a call of :func:`_patched_instance` with the base class, the tag and ``attrs`` (module-level
    functions and plain values), which rebuilds the same subclass on loading."""
    cls = _SUBCLASSES.get((base, tag))
    if cls is None:
        # what a pickle carries: module-level functions and values (a staticmethod object does not pickle)
        plain = {k: ("static", v.__func__) if isinstance(v, staticmethod) else ("value", v) for k, v in attrs.items()}
        full = {**attrs, "__module__": base.__module__, "__qualname__": base.__qualname__, "_kernelworks": tag,
                "forward": _on_kernels_or_torch(attrs["forward"], base.forward),
                "__reduce_ex__": _reduce_patched(base, tag, plain)}
        cls = _SUBCLASSES[(base, tag)] = type(base.__name__, (base,), full)
    return cls


def _reduce_patched(base: type, tag: str, attrs: dict) -> Callable:
    def __reduce_ex__(self, protocol: int):  # noqa: N807 (the method pickle calls, defined for the subclass)
        reduced = super(type(self), self).__reduce_ex__(protocol)
        if isinstance(reduced, tuple) and reduced[0] is copyreg.__newobj__ and reduced[1][0] is type(self):
            return (_patched_instance, (base, tag, attrs, *reduced[1][1:]), *reduced[2:])
        return reduced
    return __reduce_ex__


def _patched_instance(base: type, tag: str, attrs: dict, *args: Any) -> nn.Module:
    """An empty instance of ``base``'s patched subclass for ``tag`` (what unpickling a patched module calls;
    its state is then set as for any module)."""
    from kernelworks.patch import attention  # imports transformers: only where a patched model is loaded

    attention.register()  # a new process: the config names the "kernelworks" attention backend (idempotent)
    cls = _subclass(base, tag, {k: staticmethod(v) if kind == "static" else v for k, (kind, v) in attrs.items()})
    return cls.__new__(cls, *args)


@dataclass
class _State:
    """What ``unpatch`` undoes: (module, original class) pairs, the attention implementation before."""

    swapped: list[tuple[nn.Module, type]] = field(default_factory=list)
    attn_implementation: str | None = None
    attention: bool = False
    patched: list[str] = field(default_factory=list)

    def swap(self, module: nn.Module, tag: str, attrs: dict) -> bool:
        """Give ``module`` our forward, unless its class is not Hugging Face's own (a user's subclass or
        replacement, whose forward may compute something else: it keeps it, warned once). True if swapped."""
        if not hf_class(type(module)):
            from kernelworks.patch.attention import warn_once

            warn_once(f"{type(module).__qualname__} ({type(module).__module__}) is not Hugging Face's own class: "
                      "it keeps its forward")
            return False
        self.swapped.append((module, type(module)))
        module.__class__ = _subclass(type(module), tag, attrs)
        return True


def hf_class(cls: type) -> bool:
    """``cls`` is defined by transformers itself (not a subclass or replacement in the user's code)."""
    return cls.__module__.startswith("transformers.")


# ------------------------------------------------------------------------------------------- public API


def _family(model: nn.Module, strict: bool) -> Family | None:
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    family = FAMILIES.get(model_type)
    base = getattr(model, "model", model)
    if family is not None and isinstance(getattr(base, "layers", None), nn.ModuleList):
        return family
    message = (f"model: expected a Hugging Face model of a supported family ({', '.join(FAMILIES)}), got "
               f"{type(model).__name__} (model_type {model_type!r})")
    if strict:
        raise ValueError(message)
    warnings.warn(f"kernelworks.patch: {message}; nothing was patched", stacklevel=3)
    return None


def _attention_modules(base: nn.Module) -> list[nn.Module]:
    """The softmax-attention modules of the decoder layers (Qwen3-Next's linear-attention layers have none)."""
    return [layer.self_attn for layer in base.layers if hasattr(layer, "self_attn")]


def _check_option(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        kind = type(value)
        where = "" if kind.__module__ == "builtins" else f"{kind.__module__}."  # numpy.bool is no bool
        raise TypeError(f"{name}: expected a Python bool, got {where}{kind.__name__} {value!r}")
    return value


def _mixer_cache_kwarg(layer: nn.Module) -> str:
    """The keyword HF's decoder layer hands a Gated DeltaNet module its cache under (``cache_params`` up to
    transformers 5.23, ``cache`` from 5.24): read from the module's own (unpatched) forward."""
    mixer = getattr(layer, "linear_attn", None)
    if mixer is None:
        return "cache"
    return "cache" if "cache" in inspect.signature(type(mixer).forward).parameters else "cache_params"


MIN_TRANSFORMERS = (5, 16)
"""The oldest transformers the patch is tested with (its tests pass on 5.16, 5.17 and 5.24). Earlier 5.x releases
differ where the patch reaches in: 5.0 has no ``get_interface`` on the attention registry; 5.1 passes the mask
functions ``cache_position`` (its static-cache and packing tests fail); 5.4–5.12 build Qwen3-Next's layers
otherwise (its nine tests fail); 5.14's test environment did not install (a tokenizers pin)."""


def _check_transformers() -> None:
    import transformers

    found = tuple(int(part) for part in transformers.__version__.split(".")[:2] if part.isdigit())
    if found < MIN_TRANSFORMERS:
        floor = ".".join(map(str, MIN_TRANSFORMERS))
        raise ImportError(f"kernelworks.patch needs transformers >= {floor}, found {transformers.__version__}: "
                          f"pip install -U 'transformers>={floor}'")


def patch(model: nn.Module, *, rms_norm: bool = True, rope: bool = True, mlp: bool = True, attention: bool = True,
          linear_attention: bool = True, loss: bool = True, loss_accum_dtype: torch.dtype | None = None,
          strict: bool = True) -> nn.Module:
    """Run a Hugging Face transformers model on kernelworks ops, in place (patching twice re-patches).

    Weights stay where the model keeps them: state_dict keys and tensors, ``generate``, gradient
    checkpointing and ``torch.compile(model)`` keep working; a forward compiles to one graph
    (``fullgraph=True`` works) unless ``position_ids`` are passed explicitly, which costs one packing check at
    the model's entry (a host sync; one graph break before the layers, none in them). Each piece can be
    turned off (it then stays on torch exactly as the model had it):

    Args:
        model: a ``*ForCausalLM`` or base ``*Model`` of Llama 3.x, Mistral, Qwen2/2.5, Qwen3, Gemma 2,
            Gemma 3 (text), Qwen3-MoE, Mixtral or Qwen3-Next from transformers ≥ 5.16 (an older one raises
            ImportError: the 5.x releases before it differ in the mask functions' and Qwen3-Next's layers).
        rms_norm: every RMSNorm (Qwen3/Gemma3's per-head q/k norms too) → :func:`kernelworks.rms_norm`
            (Gemma's ``1 + weight`` as ``offset=1``), and the decoder layer's mid-layer residual add fused
            into the next norm (``(y, h) = rms_norm(x, w, residual=h)``).
        rope: rotary embedding of q and k → :func:`kernelworks.rotary_embedding`.
        mlp: the gated MLP → :func:`kernelworks.gated_mlp` (the three projections and the SwiGLU/GeGLU
            activation, which it recomputes in the backward instead of saving it: one ``tokens ×
            intermediate`` tensor less per layer) where the projections are plain bias-free ``nn.Linear``
            in the activations' dtype; else (LoRA, quantised or hooked projections, autocast) the model's
            own projections around :func:`kernelworks.swiglu` / :func:`kernelworks.geglu`. In a
            mixture-of-experts block (Qwen3-MoE, Mixtral,
            Qwen3-Next) the experts → two :func:`kernelworks.grouped_matmul` around the gated activation,
            tokens sorted by expert on the device (the router stays the model's; ``patched`` then lists
            ``"experts"``), and a shared expert (Qwen3-Next) like a dense MLP.
        attention: ``config._attn_implementation = "kernelworks"`` → :func:`kernelworks.flash_attention`
            (GQA, causal, sliding window, soft-capping, packed sequences by ``position_ids``, decode with a
            cache). Padding masks, dropout in training and head_dim > 256 stay on torch (warned once).
            Qwen3-Next's output gate stays a torch ``sigmoid`` product.
        linear_attention: Qwen3-Next's Gated DeltaNet layers → :func:`kernelworks.gated_delta_prefill`
            (training, prefill; packed sequences by ``position_ids`` or ``cu_seq_lens_q``, the short causal
            convolution kept within each sequence) and :func:`kernelworks.gated_delta_decode` (one token
            with the cache: the recurrent state updated in place, the gates fused), the gated output norm
            through :func:`kernelworks.rms_norm` and :func:`kernelworks.swiglu`. The convolution and the
            projections stay the model's.
        loss: ``ForCausalLM`` training with labels → :func:`kernelworks.fused_linear_cross_entropy` (HF's
            shift, ``ignore_index``, ``num_items_in_batch``, final soft-capping; ``logits=None``). Evaluation
            returns the logits and takes the loss from them with :func:`kernelworks.cross_entropy`.
        loss_accum_dtype: the LM head's weight-gradient accumulator across the loss's token chunks: None
            (default) accumulates in the weight's dtype (fp32 for fp32 master weights under autocast), as
            Liger does by default — 1.4 GB of extra peak at
            the Llama-3-8B head and 8192 tokens instead of 3.2 GB, for a ``grad_weight`` relative L2 error
            of 1.62e-3 instead of 1.28e-3 against fp32 (H100, ``benchmarks/checks/flce_memory.py``);
            ``torch.float32`` rounds the gradient once, at the end.
        strict: an unsupported model raises ValueError; with False it warns and is left as it is.

    Returns:
        ``model`` (patched in place).

    Example::

        model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B", dtype=torch.bfloat16)
        kernelworks.patch(model)                  # or patch(model, attention=False) to keep SDPA
    """
    _check_transformers()
    options = {"rms_norm": rms_norm, "rope": rope, "mlp": mlp, "attention": attention,
               "linear_attention": linear_attention, "loss": loss, "strict": strict}
    for name, value in options.items():
        _check_option(name, value)
    if loss_accum_dtype is not None and loss_accum_dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"loss_accum_dtype: expected None or torch.float32/float16/bfloat16, got "
                        f"{loss_accum_dtype!r}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    family = _family(model, strict)
    if family is None:
        return model
    from kernelworks.patch import attention as attention_fn
    from kernelworks.patch import gated_delta, layers

    if getattr(model, "_kernelworks_patch", None) is not None:
        unpatch(model)
    if any(getattr(type(m), "_kernelworks", None) is not None for m in model.modules()):
        raise ValueError("model: part of it is already patched through another module (patch(model) and "
                         "patch(model.model)); unpatch that one first")
    state = _State()
    base = getattr(model, "model", model)
    config = model.config
    if rms_norm:
        family_module = next((type(layer).__module__ for layer in base.layers if hf_class(type(layer))), None)
        swapped = 0
        for module in base.modules():
            if type(module).__name__.endswith("RMSNorm") and type(module).__module__ == family_module:
                swapped += state.swap(module, f"rms_norm:{family.norm_offset}",
                                      {"forward": layers.rms_norm_forward, "_kw_offset": family.norm_offset})
        forward = layers.llama_layer_forward if family.layer == "llama" else layers.gemma_layer_forward
        for layer in base.layers:
            mixer_cache = _mixer_cache_kwarg(layer)
            swapped += state.swap(layer, f"layer:{family.layer}:{family.norm_offset}:{mixer_cache}",
                                  {"forward": forward, "_kw_offset": family.norm_offset,
                                   "_kw_mixer_cache": mixer_cache})
        if swapped:
            state.patched.append("rms_norm")
    if mlp:
        act = getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", None)
        if act in _GLU:
            dense = 0  # dense gated MLPs swapped (shared experts included): "mlp" is listed only if any
            for layer in base.layers:
                experts = _experts(layer.mlp)
                if experts is not None:  # a sparse MoE block: its router stays, the experts go grouped
                    swapped = state.swap(experts, f"experts:{act}",
                                         {"forward": layers.experts_forward, "_kw_glu": _GLU[act]})
                    if swapped and "experts" not in state.patched:
                        state.patched.append("experts")
                    shared = getattr(layer.mlp, "shared_expert", None)
                    if shared is not None and hasattr(shared, "gate_proj"):
                        dense += state.swap(shared, f"mlp:{act}",
                                            {"forward": layers.gated_mlp_forward, "_kw_glu": _GLU[act]})
                elif hasattr(layer.mlp, "gate_proj"):
                    dense += state.swap(layer.mlp, f"mlp:{act}",
                                        {"forward": layers.gated_mlp_forward, "_kw_glu": _GLU[act]})
                else:
                    attention_fn.warn_once(f"{type(layer.mlp).__name__} is not a gated MLP or stacked experts "
                                           "in the layout the kernels take; it stays on torch")
            if dense:
                state.patched.append("mlp")
        else:
            attention_fn.warn_once(f"MLP activation {act!r} has no gated kernel; the MLP stays on torch")
    if rope:
        if hasattr(kernelworks, "rotary_embedding"):
            swapped = [state.swap(attn, f"attention:{family.gated_attention}",
                                  {"forward": layers.attention_forward,
                                   "_kw_attn_kwargs": staticmethod(family.attn_kwargs),
                                   "_kw_gated": family.gated_attention})
                       for attn in _attention_modules(base)]
            if any(swapped):
                state.patched.append("rope")
        else:
            attention_fn.warn_once("kernelworks.rotary_embedding is not available in this version; rotary "
                                   "embedding stays on torch")
    if attention:
        attention_fn.register()
        state.attn_implementation, state.attention = config._attn_implementation, True
        fallback = "eager" if state.attn_implementation == "eager" else "sdpa"
        for attn in _attention_modules(base):
            attn._kernelworks_fallback = fallback
        config._attn_implementation = attention_fn.NAME
        state.patched.append("attention")
    mixers = [layer.linear_attn for layer in base.layers if hasattr(layer, "linear_attn")]
    if linear_attention and mixers:
        for mixer in mixers:
            state.swap(mixer, "gated_delta", {"forward": gated_delta.gated_delta_net_forward})
        state.patched.append("linear_attention")
    if loss and base is not model and hasattr(model, "lm_head"):
        moe = hasattr(model.config, "output_router_logits")
        forward = layers.moe_causal_lm_forward if moe else layers.causal_lm_forward
        if state.swap(model, f"causal_lm:{moe}:{loss_accum_dtype}", {"forward": forward,
                                                                     "_kw_loss_accum": loss_accum_dtype}):
            state.patched.append("loss")
    model._kernelworks_patch = state
    return model


def unpatch(model: nn.Module) -> nn.Module:
    """Undo :func:`patch`: original classes and attention implementation back; returns ``model``.
    A model that is not patched is returned unchanged."""
    state = getattr(model, "_kernelworks_patch", None)
    if state is None:
        return model
    for module, cls in reversed(state.swapped):
        module.__class__ = cls
    if state.attention:
        model.config._attn_implementation = state.attn_implementation
        for attn in _attention_modules(getattr(model, "model", model)):
            del attn._kernelworks_fallback
    del model._kernelworks_patch
    return model


def patched(model: nn.Module) -> tuple[str, ...]:
    """The pieces :func:`patch` put on kernelworks in ``model`` (empty when not patched)."""
    state = getattr(model, "_kernelworks_patch", None)
    return () if state is None else tuple(state.patched)


__all__ = ["FAMILIES", "patch", "patched", "unpatch"]
