"""README's library example runs as written (on the CPU it takes the interpreter branch it describes)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_library_example_runs():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## The library"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "import kernelworks" in code.splitlines()[0], "the example must import kernelworks first"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
