"""The typed core stays typed: `python -m mypy` (pyproject's [tool.mypy]: src/) reports no error.

About 45 s cold on a 2-core CPU (most of it reading torch's and transformers' own annotations), a few seconds
with mypy's cache (.mypy_cache) from an earlier run.
"""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_mypy_reports_no_errors():
    run = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "No module named mypy" not in run.stderr, "mypy is in the test extra: pip install -e '.[test]'"
    assert run.returncode == 0, f"mypy found errors (python -m mypy):\n{run.stdout}{run.stderr}"
    assert "Success: no issues found" in run.stdout, run.stdout
