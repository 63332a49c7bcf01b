"""``kw calibrate``: measure this GPU's copy bandwidth and matmul throughput for the roofline."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("calibrate", help="measure and cache this GPU's ceilings (copy GB/s, matmul TFLOP/s)")


def run(args: argparse.Namespace) -> int:
    from kernelworks.hardware import _calibration_file, calibrate, current_gpu

    gpu = current_gpu()
    if gpu is None:
        print("kw calibrate: no CUDA GPU is visible; the roofline needs one to measure.")
        return 2
    result = calibrate()
    print(f"{gpu.name}: copy {result['bandwidth_gbs']:.0f} GB/s (read + write; datasheet "
          f"{gpu.mem_bandwidth_gbs:.0f}), " + ", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in result["tflops"].items()))
    print(f"cached in {_calibration_file()}")
    return 0
