"""What the GPU can do: a datasheet table, detection of the current device, and measured ceilings.

The roofline (``kw bench``'s "% of speed of light") divides by a *ceiling*: the measured copy bandwidth and
matrix throughput from ``kw calibrate`` when they are cached for this GPU, else the datasheet figure, and it
always says which (``Ceilings.source``). Datasheet peaks are dense (no sparsity) tensor-core rates.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch


@dataclass(frozen=True)
class GPUSpec:
    """Datasheet facts of one GPU model. Throughputs in TFLOP/s (dense), bandwidth in GB/s."""

    name: str
    arch: str
    sm_count: int
    capability: tuple[int, int]
    mem_bandwidth_gbs: float
    peak_tflops: dict[str, float]
    l2_bytes: int
    regs_per_sm: int = 65536
    max_regs_per_thread: int = 255
    smem_per_sm: int = 228 * 1024
    smem_per_block: int = 227 * 1024
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    match: tuple[str, ...] = field(default=(), repr=False)


# Sources: NVIDIA datasheets / architecture whitepapers (A100, H100, H200, B200, Ada RTX 4090). fp8 is
# absent where the chip has no fp8 tensor cores; "fp32" is the non-tensor-core SIMT rate.
GPUS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        GPUSpec("A100-SXM4-80GB", "ampere", 108, (8, 0), 2039,
                {"bf16": 312, "fp16": 312, "tf32": 156, "fp32": 19.5, "int8": 624}, 40 << 20,
                smem_per_sm=164 * 1024, smem_per_block=163 * 1024, match=("A100",)),
        GPUSpec("H100-SXM", "hopper", 132, (9, 0), 3350,
                {"bf16": 989, "fp16": 989, "tf32": 495, "fp32": 67, "fp8": 1979, "int8": 1979}, 50 << 20,
                match=("H100 80GB HBM3", "H100 SXM", "H100")),
        GPUSpec("H100-PCIe", "hopper", 114, (9, 0), 2000,
                {"bf16": 756, "fp16": 756, "tf32": 378, "fp32": 51, "fp8": 1513, "int8": 1513}, 50 << 20,
                match=("H100 PCIe",)),
        GPUSpec("H200", "hopper", 132, (9, 0), 4800,
                {"bf16": 989, "fp16": 989, "tf32": 495, "fp32": 67, "fp8": 1979, "int8": 1979}, 50 << 20,
                match=("H200",)),
        GPUSpec("B200", "blackwell", 148, (10, 0), 8000,
                {"bf16": 2250, "fp16": 2250, "tf32": 1100, "fp32": 80, "fp8": 4500, "int8": 4500}, 126 << 20,
                match=("B200",)),
        GPUSpec("RTX-4090", "ada", 128, (8, 9), 1008,
                {"bf16": 165, "fp16": 165, "tf32": 83, "fp32": 83, "fp8": 330, "int8": 661}, 72 << 20,
                smem_per_sm=100 * 1024, smem_per_block=99 * 1024, max_threads_per_sm=1536,
                max_blocks_per_sm=24, match=("4090",)),
    )
}

def smem_per_block(capability: tuple[int, int]) -> int:
    """The shared memory one block may use (opt-in, bytes) on a GPU of compute ``capability``, from the CUDA
    programming guide's table: 227 KiB on sm_90 and sm_100, 163 KiB on sm_80 and sm_87, 99 KiB on the rest
    (sm_86, sm_89, sm_120: the consumer parts). A launch plan that needs more cannot run there."""
    if capability[0] in (9, 10):
        return 227 * 1024
    if capability in ((8, 0), (8, 7)):
        return 163 * 1024
    return 99 * 1024


_DTYPE_PEAK_KEY = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "tf32", torch.int8: "int8",
                   **{getattr(torch, name): "fp8" for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                                                               "float8_e5m2fnuz") if hasattr(torch, name)}}
"""The tensor-core peak a product in each dtype runs at (fp8 and int8 at their own, twice bf16's on Hopper)."""


def lookup(device_name: str) -> GPUSpec | None:
    """The table entry whose match strings occur in ``device_name`` (most specific first), or None."""
    best: tuple[int, GPUSpec] | None = None
    for gpu in GPUS.values():
        for pattern in gpu.match:
            if pattern.lower() in device_name.lower() and (best is None or len(pattern) > best[0]):
                best = (len(pattern), gpu)
    return best[1] if best else None


def current_gpu() -> GPUSpec | None:
    """The datasheet entry of the current CUDA device (None without a GPU or for an unknown model).

    An unknown model still gets an entry built from the device's own properties, with no peak rates.
    """
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    known = lookup(name)
    if known is not None:
        return known
    props = torch.cuda.get_device_properties(0)
    return GPUSpec(name, "unknown", props.multi_processor_count, (props.major, props.minor), 0.0, {},
                   getattr(props, "L2_cache_size", 0))


# ------------------------------------------------------------------------------------------- calibration

def _cache_dir() -> Path:
    return Path(os.environ.get("KERNELWORKS_CACHE", Path.home() / ".cache" / "kernelworks"))


def _calibration_file() -> Path:
    return _cache_dir() / "calibration.json"


@dataclass(frozen=True)
class Ceilings:
    """The numbers the roofline divides by, and where they came from (``measured`` or ``datasheet``)."""

    gpu: str
    bandwidth_gbs: float
    tflops: dict[str, float]
    source: str

    def peak_tflops(self, dtype: torch.dtype) -> float:
        """Matrix throughput for products in ``dtype`` (fp32 means TF32 tensor cores); 0 when unknown."""
        return self.tflops.get(_DTYPE_PEAK_KEY.get(dtype, "fp32"), 0.0)


def load_calibration() -> dict[str, dict]:
    """Cached measurements by GPU name (empty when none were made)."""
    path = _calibration_file()
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def roofline_tflops(datasheet: dict[str, float], measured: dict[str, float]) -> dict[str, float]:
    """Compute ceilings by dtype: the larger of the datasheet peak and a measured rate. A ceiling is an upper
    bound, and a kernel can beat the cuBLAS rate calibration measures (our matmul did, 111% of it), never the
    datasheet peak."""
    tflops = dict(datasheet)
    for key, rate in measured.items():
        tflops[key] = max(rate, tflops.get(key, 0.0))
    return tflops


def ceilings() -> Ceilings | None:
    """Measured ceilings for the current GPU when cached, else the datasheet's; None without a GPU."""
    gpu = current_gpu()
    if gpu is None:
        return None
    name = torch.cuda.get_device_name()
    measured = load_calibration().get(name)
    if measured:
        tflops = roofline_tflops(gpu.peak_tflops, measured.get("tflops", {}))
        return Ceilings(name, measured["bandwidth_gbs"], tflops, "measured")
    return Ceilings(name, gpu.mem_bandwidth_gbs, dict(gpu.peak_tflops), "datasheet")


def calibrate(copy_bytes: int = 1 << 30, gemm_size: int = 8192) -> dict:
    """Measure copy bandwidth (bytes read + written) and bf16/fp16 matmul throughput; cache and return them.

    Random data (not zeros: a matmul on zeros ran 13% faster on an H200 of ours), warm-up, median of
    repeated device-event timings.
    """
    from kernelworks.bench.timing import time_fn

    if not torch.cuda.is_available():
        raise RuntimeError("kw calibrate needs a CUDA GPU; none is visible")
    src = torch.randn(copy_bytes // 4, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = time_fn(lambda s=src, d=dst: d.copy_(s), flush_l2=False).median_ms
    result: dict = {"bandwidth_gbs": 2 * copy_bytes / copy_ms / 1e6, "tflops": {},
                    "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__}
    del src, dst
    n = gemm_size
    for key, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        ms = time_fn(lambda a=a, b=b: a @ b, flush_l2=False).median_ms
        result["tflops"][key] = 2 * n**3 / ms / 1e9
    name = torch.cuda.get_device_name()
    data = load_calibration()
    data[name] = result
    path = _calibration_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    return result


def describe(gpu: GPUSpec) -> dict:
    """A JSON-friendly dict of a table entry."""
    out = asdict(gpu)
    out.pop("match", None)
    return out
