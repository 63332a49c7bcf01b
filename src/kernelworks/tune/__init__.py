"""``kw tune`` / :func:`kernelworks.tune`: correctness-gated autotuning of any spec's declared configs."""

from kernelworks.tune.engine import Candidate, CaseTuning, tune, tune_case
from kernelworks.tune.render import plot, table
from kernelworks.tune.search import STRATEGIES

__all__ = ["STRATEGIES", "Candidate", "CaseTuning", "plot", "table", "tune", "tune_case"]
