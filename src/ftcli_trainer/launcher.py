"""`python -m ftcli_trainer.launcher TORCHRUN-ARGS`: torchrun (torch.distributed.run), its ending said in one line.

torchrun ended every stopped or failed run with a traceback of its own: a SignalException when it was sent SIGTERM
itself (a preempted or maintained Vertex VM: it is the container's main process), a ChildFailedError and a box of
"Failures" when a worker left non-zero (each worker's own SIGTERM stop leaves with 143), and a warning per worker it
signalled. In the job's log (`ftcli logs`, where stderr lines are errors) that was some 40 error lines after the
workers' own one-line reasons, saying nothing more. Here it says which worker left with what, in one line; torchrun's
other messages (a worker it had to kill, for one) are kept.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import tempfile

# torchrun's messages that the line below says once (torch 2.13's wording; others pass unchanged)
_SAID_BELOW = ("Received %s death signal, shutting down workers", "Sending process %s closing signal %s",
               "failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s")


def _quiet(record: logging.LogRecord) -> bool:
    return record.msg not in _SAID_BELOW


def _status(exitcode: int) -> int:
    """A worker's exit code as a shell gives it: a signal's as 128 + its number."""
    return 128 - exitcode if exitcode < 0 else exitcode


def main(argv: list[str]) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    from ftcli_trainer.task import SAID_DIR_VAR

    for name in ("torch.distributed.elastic.agent.server.api", "torch.distributed.elastic.multiprocessing.api"):
        logging.getLogger(name).addFilter(_quiet)
    # the workers' one-line endings, each said once however many workers end on it (task.say_once)
    os.environ[SAID_DIR_VAR] = said_dir = tempfile.mkdtemp(prefix="ftcli-said-")
    try:
        torchrun(argv)
    except SignalException as e:
        name = signal.Signals(e.sigval).name
        print(f"stopped: {name}, passed on to the workers (their lines above say where each stopped)", file=sys.stderr)
        return 128 + int(e.sigval)
    except ChildFailedError as e:
        failures = sorted(e.failures.items())
        said = ", ".join(f"rank {rank} with {_status(f.exitcode)}" + (f" ({f.signal_name()})" if f.exitcode < 0 else "")
                         for rank, f in failures)
        print(f"stopped: worker(s) left with a non-zero status: {said} (their lines above say why)", file=sys.stderr)
        return _status(e.get_first_failure()[1].exitcode)
    finally:
        shutil.rmtree(said_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
