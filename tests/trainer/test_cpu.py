import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")


# In a child process: the setting is process-wide and would outlive this test in pytest's.
CHILD = textwrap.dedent("""
    import resource, sys
    import torch
    from ftcli_trainer.cpu import keep_freed_memory

    def faults_per_step():
        for _ in range(15):  # the heap settles within a few steps
            torch.zeros(30522, 384)  # MiniLM's word-embedding gradient, allocated afresh every step
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(5):
            torch.zeros(30522, 384)
        return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5

    default = faults_per_step()
    took = keep_freed_memory()
    print(default, faults_per_step(), took)
""")


def _huge_pages_always() -> bool:
    try:
        return "[always]" in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="glibc only")
@pytest.mark.skipif(_huge_pages_always(), reason="with transparent huge pages always on, faults count 2 MB pages")
def test_large_blocks_are_reused_instead_of_faulted_in_every_step():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True).stdout.split()
    default, tuned, took = float(out[0]), float(out[1]), out[2] == "True"
    if not took:
        pytest.skip("not glibc")
    pages = 30522 * 384 * 4 / 4096
    assert default > 0.9 * pages  # glibc's default: each 47 MB block is mapped fresh and faulted page by page
    assert tuned < 0.01 * pages  # kept: the next step reuses memory already mapped
