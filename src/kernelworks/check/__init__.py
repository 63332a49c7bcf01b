"""``kw check``: the correctness checklist over a spec's cases (see :mod:`kernelworks.check.engine`)."""

from kernelworks.check.compare import Comparison, bitwise_equal, compare
from kernelworks.check.engine import CaseResult, check_case, run_check
from kernelworks.check.render import check_table, failure_details, summarize

__all__ = ["CaseResult", "Comparison", "bitwise_equal", "check_case", "check_table", "compare", "failure_details",
           "run_check", "summarize"]
