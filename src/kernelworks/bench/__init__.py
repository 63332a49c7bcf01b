"""``kw bench``: GPU timing side by side with baselines, roofline figures, results files, tables, plots."""

from kernelworks.bench.engine import BenchRecord, run_bench
from kernelworks.bench.render import bench_table, render
from kernelworks.bench.roofline import Roofline, roofline
from kernelworks.bench.timing import Timing, time_fn

__all__ = ["BenchRecord", "Roofline", "Timing", "bench_table", "render", "roofline", "run_bench", "time_fn"]
