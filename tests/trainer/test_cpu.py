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


# -- OpenMP's waits beside other work (cpu.wait_passively_if_busy) ---------------------------------------------------


@pytest.mark.parametrize(("other", "cpus", "threads", "expected"), [
    (0.1, 2, 2, False),  # a quiet machine: the threads spin as they always did
    (0.6, 2, 2, True),  # a browser tab's worth of work beside 2 threads on 2 CPUs
    (1.0, 2, 1, False),  # one thread has no team to wait for
    (7.9, 16, 8, False),  # 8 threads on 16 hardware threads leave 8 free
    (8.6, 16, 8, True),
    (3.0, 4, 2, True),
])
def test_other_work_contends_with_torchs_threads_beyond_the_cpus_they_leave_free(other, cpus, threads, expected):
    from ftcli_trainer.cpu import contended

    assert contended(other, cpus, threads) is expected


@pytest.mark.parametrize(("chars", "weights", "expected"), [
    (100, 91_000_000, False),  # a sentence on MiniLM-L6: the look (0.15 s) costs more than spinning could
    (92_300, 91_000_000, True),  # the 872 SST-2 dev rows on MiniLM: 14-39 s lost spinning beside other work
    (300, 91_000_000, True),
    (100, 440_000_000, True),  # a sentence on BERT-base
    (20, 2_000_000_000, True),  # four words on a 1B-parameter model in bfloat16
    (100, 0, False),  # no weights found: the loading fails next
])
def test_scoring_is_worth_a_look_at_the_machine_by_its_work(chars, weights, expected):
    from ftcli_trainer.cpu import worth_a_look

    assert worth_a_look(chars, weights) is expected


def test_the_threads_counted_are_torchs_own():
    # By default torch computes on one thread per physical core (a core's second hardware thread is not used):
    # counting every CPU of the affinity mask would call a hyperthreaded machine busy when it is not.
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    child = ("import os, torch; from ftcli_trainer.cpu import _torch_threads; "
             "print(torch.get_num_threads(), _torch_threads(os.environ, sorted(os.sched_getaffinity(0))))")
    torchs, counted = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True,
                                     check=True).stdout.split()
    assert counted == torchs
    from ftcli_trainer.cpu import _torch_threads

    assert _torch_threads({"OMP_NUM_THREADS": "3"}, [0, 1]) == 3


@pytest.mark.skipif(sys.platform != "linux", reason="/proc/stat")
@pytest.mark.parametrize("given", [None, ("OMP_WAIT_POLICY", "ACTIVE"), ("GOMP_SPINCOUNT", "300000")],
                         ids=["default", "policy-given", "spincount-given"])
def test_beside_a_busy_process_the_trainer_makes_torchs_threads_wait_passively(tmp_path, given):
    # On a 2-core VM, one busy process beside `ftcli local` made its steps 3.5x slower (47 against 167 samples/s):
    # torch's OpenMP threads spin while they wait for each other, and a spinning thread holds the CPU the thread it
    # waits for needs. The trainer now finds the machine busy before torch starts and has them wait passively (87
    # samples/s beside the same process); a value the user gave is kept, without a word.
    import os
    import time

    cpus = len(os.sched_getaffinity(0))
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # running, not starting
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
        # every CPU torch's: any other work beyond half a CPU contends (here the busy process, and whatever else runs)
        env |= {"OMP_NUM_THREADS": str(max(2, cpus)), "AIP_MODEL_DIR": str(tmp_path / "model"),
                **dict([given] if given else [])}
        child = ("import os, runpy, sys; sys.argv = ['task', '--task', 'csv', '--train-file', 'missing.csv'];"
                 "code = __import__('ftcli_trainer.task', fromlist=['main']).main();"
                 "print('policy', os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT')); sys.exit(code)")
        done = subprocess.run([sys.executable, "-c", child], env=env, cwd=tmp_path, capture_output=True, text=True)
    finally:
        hog.kill()
        hog.wait()
    out = done.stdout.splitlines()
    assert done.returncode == 2 and "missing.csv does not exist" in done.stderr, done.stderr
    said = [line for line in out if "passively" in line]
    if given:
        assert said == [] and out[-1] == f"policy {'ACTIVE' if given[0] == 'OMP_WAIT_POLICY' else None} " + (
            "300000" if given[0] == "GOMP_SPINCOUNT" else "None"), out
    else:
        assert len(said) == 1 and said[0].startswith("note: other work keeps ") and (
            f" of this machine's {cpus} CPUs busy: torch's {max(2, cpus)} threads wait for each other passively "
            "(OMP_WAIT_POLICY=PASSIVE)") in said[0], out
        assert out[-1] == "policy PASSIVE None"
