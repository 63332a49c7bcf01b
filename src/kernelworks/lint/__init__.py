"""Static checks of Triton kernels (``kw lint``): AST only — no GPU, no Triton compile, nothing imported.

Finds ``@triton.jit`` functions and their ``kernel[grid](...)`` launches in each module and runs the rules
of :mod:`kernelworks.lint.rules` (``KW001`` … ``KW017``, one module each, with examples in its docstring).

    >>> from kernelworks.lint import lint_paths, lint_source
    >>> for f in lint_paths(["src/"]):
    ...     print(f.path, f.line, f.code, f.message)
"""

from kernelworks.lint.engine import iter_python_files, lint_paths, lint_source
from kernelworks.lint.findings import Finding, Severity
from kernelworks.lint.output import FORMATS, render
from kernelworks.lint.rules import CODES, RULES

__all__ = ["CODES", "FORMATS", "RULES", "Finding", "Severity", "iter_python_files", "lint_paths", "lint_source",
           "render"]
