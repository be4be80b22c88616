"""CPU-side tuning that changes no math."""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path

log = logging.getLogger("ftcli_trainer")

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Make glibc serve every allocation from the heap and keep freed memory for the next step.

    By default glibc maps each block over 32 MB straight from the kernel and unmaps it on free. A
    fine-tuning step allocates one such block every time: the word-embedding gradient (30,522 x 384 floats
    = 47 MB for MiniLM, 94 MB for BERT-base), so every step page-faults it in afresh (~20 ms here, against
    ~2 ms to zero memory already mapped, ~5 % of a MiniLM step). The process keeps its peak memory instead
    of returning it between steps. Returns whether the setting took (glibc on Linux only)."""
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, 2**31 - 1) == 1
    log.debug("glibc malloc: no mmap for large blocks, no trimming: %s", ok)
    return ok


# How long the trainer looks at what else the machine runs before torch starts its threads: long enough for tens of
# clock ticks per CPU (100 a second), short next to a run's start
LOOK_S = 0.15
# Spare capacity below which other work is taken to contend with torch's threads: more than half a CPU of it beyond
# the CPUs torch leaves free
CONTENDED_CPUS = 0.5


# Scoring too small to lose more to spinning threads than LOOK_S costs it (characters to score x bytes of the model's
# weights: the forward passes' work). `ftcli evaluate` and `ftcli predict --file` of the 872 SST-2 dev rows (92,300
# characters) on MiniLM-L6 (91 MB of weights) beside other work took 14-39 s longer spinning than waiting passively
# (bench/README.md, 2026-11-29): 0.15-0.42 ms a character, so the look pays for itself from 360-1,000 characters of
# MiniLM's work. A one-text `ftcli predict` (a sentence: ~100) spent more on the look than its scoring could lose, and
# said a line about threads besides. Below the least of those: 300 characters of MiniLM, ~60 of BERT-base (440 MB),
# ~14 of a 1B-parameter model in bfloat16 (2 GB).
WORTH_A_LOOK = 300 * 91_000_000


def worth_a_look(chars: int, weight_bytes: int) -> bool:
    """Whether scoring `chars` characters of text with a model of `weight_bytes` bytes of weights is work enough for
    wait_passively_if_busy's look at the machine (LOOK_S) to pay for itself (WORTH_A_LOOK)."""
    return chars * weight_bytes >= WORTH_A_LOOK


def contended(other_busy: float, cpus: int, threads: int) -> bool:
    """Whether `threads` OpenMP threads on `cpus` CPUs meet other work that keeps `other_busy` CPUs busy: more of it
    than the CPUs they leave free, by more than CONTENDED_CPUS. One thread has no team to wait for."""
    return threads > 1 and other_busy > cpus - threads + CONTENDED_CPUS


def wait_passively_if_busy(environ: MutableMapping[str, str]) -> str | None:
    """Before torch is imported (OpenMP reads its settings once, when it loads): when other work keeps the CPUs that
    torch's threads will use busy, make the threads sleep while they wait for each other (OMP_WAIT_POLICY=PASSIVE)
    and return the line that says so; None where nothing was changed.

    By default GNU OpenMP (torch's) spins a waiting thread for a while before it sleeps. On a quiet machine that
    saves the wake-ups; beside other work, a spinning thread holds a CPU the thread it waits for needs, at every one
    of the many parallel regions of a step. On the 2-core development VM a MiniLM run (`ftcli local
    --max-train-samples 1920`) trained at 167-170 samples/s quiet, and beside one busy process at 47-48 spinning
    against 87-89 passive; passive waits on the quiet machine gave 135 (bench/README.md, 2026-11-29). So they are
    chosen only when the machine is busy as the trainer starts, measured then (the load average still counts a run
    that has just ended). A value the user set (OMP_WAIT_POLICY, GOMP_SPINCOUNT) is kept. Linux only (/proc/stat)."""
    if "OMP_WAIT_POLICY" in environ or "GOMP_SPINCOUNT" in environ or "torch" in sys.modules:
        return None
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    threads = _torch_threads(environ, cpus)
    if threads < 2 or (other := _other_busy(cpus)) is None or not contended(other, len(cpus), threads):
        return None
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return (f"note: other work keeps {other:.1f} of this machine's {len(cpus)} CPUs busy: torch's {threads} threads "
            "wait for each other passively (OMP_WAIT_POLICY=PASSIVE), not spinning, which beside other work makes "
            "them several times slower (set OMP_WAIT_POLICY or GOMP_SPINCOUNT to choose)")


def _torch_threads(environ: Mapping[str, str], cpus: list[int]) -> int:
    """The threads torch will compute with: OMP_NUM_THREADS, or by default one per physical core (torch's own
    default; a core's second hardware thread is left to other work)."""
    try:
        return max(1, int(environ["OMP_NUM_THREADS"]))
    except (KeyError, ValueError):
        pass
    cores = set()
    for cpu in cpus:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add(((topology / "physical_package_id").read_text(), (topology / "core_id").read_text()))
        except OSError:
            return len(cpus)
    return len(cores)


def _other_busy(cpus: list[int]) -> float | None:
    """How many of `cpus` other processes keep busy, measured over LOOK_S while this one sleeps (its own CPU time in
    that while is taken off); None without /proc/stat."""
    import resource
    import time

    def own() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    before, own_before, began = _busy_ticks(cpus), own(), time.monotonic()
    time.sleep(LOOK_S)
    after, own_after, took = _busy_ticks(cpus), own(), time.monotonic() - began
    if before is None or after is None:
        return None
    busy = max(0.0, (after - before) / os.sysconf("SC_CLK_TCK") - (own_after - own_before))
    return min(float(len(cpus)), busy / took)


def _busy_ticks(cpus: list[int]) -> int | None:
    """The clock ticks these CPUs have been busy since boot, from /proc/stat (idle and iowait are not busy; steal is:
    a CPU the hypervisor gave to another machine is not there for torch's threads either); None without it."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    wanted = {f"cpu{c}" for c in cpus}
    rows = [[int(x) for x in fields[:8]] for name, *fields in map(str.split, lines) if name in wanted]
    # user nice system idle iowait irq softirq steal
    return sum(sum(t) - t[3] - t[4] for t in rows) if rows else None
