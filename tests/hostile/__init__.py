"""The hostile-input suite (issue 15, "Measure"): every public op against wrong, odd and malicious inputs.

``python -m pytest -q tests/hostile`` asserts each case's expected class; ``python -m tests.hostile.summary``
prints the counts per class per op (done = 0 wrong, 0 crash, 0 unclear_error).
"""
