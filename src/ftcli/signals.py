"""SIGTERM and SIGHUP as Ctrl-C: a small module of its own, so that `ftcli.cli.app.main` can hold them for every
command without importing the follower (`ftcli.cli.watch`) or the storage gateway before the command is known."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import FrameType
from typing import NoReturn

# A signal handler that raises KeyboardInterrupt carries this attribute, set true (Python's own for Ctrl-C is known
# without it): storage._signals_deferred may run it later, at a line of its choosing.
INTERRUPTS = "ftcli_interrupts"


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[list[int]]:
    """While the block runs, SIGTERM and SIGHUP (a CI runner cancelling the step, `docker stop`, a closed terminal)
    raise KeyboardInterrupt as Ctrl-C does, so the block's Ctrl-C handling names the job and what to run next; by
    default they killed ftcli without a word, the job running on. The list it yields gets the signal's number (the
    caller exits with 128 + it, as a shell reports a signal). An ignored signal stays ignored (`nohup ftcli ...`)."""
    import signal

    got: list[int] = []

    def stop(signum: int, frame: FrameType | None) -> NoReturn:
        got.append(signum)
        raise KeyboardInterrupt

    setattr(stop, INTERRUPTS, True)  # a batch of transfers may run it once its transfers have stopped
    before = {}
    for sig in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)):
        if sig is None or signal.getsignal(sig) == signal.SIG_IGN:
            continue
        try:
            before[sig] = signal.signal(sig, stop)
        except ValueError:  # not the main thread: nothing to change
            pass
    try:
        yield got
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
