"""kernelworks: fast, verified Triton kernels for AI/ML, and the workbench that proves them.

The library::

    import kernelworks as kw
    y = kw.softmax(x)              # x: [..., n] bf16/fp16/fp32 on CUDA
    h = kw.swiglu(gate, up)        # silu(gate) * up, autograd and torch.compile ready
    y, h = kw.rms_norm(x, w, residual=h)   # residual add + RMSNorm in one pass
    loss = kw.cross_entropy(logits, target)
    c = kw.matmul(a, b, bias=bias, activation="gelu")    # GEMM with a fused epilogue
    o = kw.flash_attention(q, k, v, causal=True)         # q, k, v: [batch, seq, heads, head_dim]

The workbench (same on the command line as ``kw check`` / ``kw bench`` / ``kw report``)::

    kw.check("softmax")            # the correctness checklist, or any OpSpec of your own
    kw.bench("softmax")            # GPU timing side by side with torch, torch.compile and peers
"""

from kernelworks.runtime.device import enable_interpreter_without_gpu

# Must run before any @triton.jit decorator executes: on a machine with no GPU, kernels run in Triton's
# interpreter on CPU tensors. An explicit TRITON_INTERPRET setting always wins.
enable_interpreter_without_gpu()

# Only now may triton be imported (it reads TRITON_INTERPRET when it decorates its own library).
from kernelworks.runtime.compat import prepare_runtime  # noqa: E402

prepare_runtime()  # one warning for an untested stack; the interpreter patched where releases differ

from kernelworks import nn  # noqa: E402
from kernelworks.ops.activation import gated_mlp, geglu, gelu, silu, swiglu  # noqa: E402
from kernelworks.ops.attention import decode_attention, flash_attention  # noqa: E402
from kernelworks.ops.cross_entropy import cross_entropy, fused_linear_cross_entropy  # noqa: E402
from kernelworks.ops.gated_delta import gated_delta_decode, gated_delta_prefill, gated_delta_reference  # noqa: E402
from kernelworks.ops.gemm import fp8_matmul, grouped_matmul, matmul  # noqa: E402
from kernelworks.ops.moe import moe_permute, moe_sort, moe_unpermute  # noqa: E402
from kernelworks.ops.norm import layer_norm, rms_norm  # noqa: E402
from kernelworks.ops.rotary import rotary_embedding  # noqa: E402
from kernelworks.ops.softmax import log_softmax, softmax  # noqa: E402
from kernelworks.patch import patch, patched, unpatch  # noqa: E402
from kernelworks.runtime.indices import set_validation, validation  # noqa: E402
from kernelworks.spec import Case, Cost, OpSpec, Provider, Tolerance, case, load_spec, register, registry  # noqa: E402
from kernelworks.tune import tune  # noqa: E402
from kernelworks.workbench import bench, check  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "Case",
    "Cost",
    "OpSpec",
    "Provider",
    "Tolerance",
    "__version__",
    "bench",
    "case",
    "check",
    "cross_entropy",
    "decode_attention",
    "flash_attention",
    "fp8_matmul",
    "fused_linear_cross_entropy",
    "gated_delta_decode",
    "gated_delta_prefill",
    "gated_delta_reference",
    "gated_mlp",
    "geglu",
    "gelu",
    "grouped_matmul",
    "layer_norm",
    "load_spec",
    "log_softmax",
    "matmul",
    "moe_permute",
    "moe_sort",
    "moe_unpermute",
    "nn",
    "patch",
    "patched",
    "register",
    "registry",
    "rms_norm",
    "rotary_embedding",
    "set_validation",
    "silu",
    "softmax",
    "swiglu",
    "tune",
    "unpatch",
    "validation",
]
