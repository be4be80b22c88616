"""Errors the trainer reports as one line (no traceback unless FTCLI_DEBUG=1)."""

from __future__ import annotations

from collections.abc import Iterator


class TrainerError(Exception):
    """A problem with the run's input that the user can fix: the message says what is wrong, `hint` (when the fix is
    known) what to change. `str(e)` is the message alone. The trainer cannot import ftcli, whose errors carry a hint
    the same way (ftcli.errors.FtcliError): the launcher's pre-flight, which reads local data with the trainer's code,
    passes it on to its own `hint:` line, and the trainer prints it under its `error:` line (`lines`)."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint

    def lines(self) -> str:
        """How the trainer says it on stderr: `error: MESSAGE`, then `hint: HINT` on a line of its own, as ftcli says
        its own errors. Both lines are printed at once: in a Vertex job each is an entry of the job's log, and
        `ftcli logs` shows both (its failure summary keeps the replica's last lines)."""
        return f"error: {self}" + (f"\nhint: {self.hint}" if self.hint else "")


class DataError(TrainerError):
    """Unreadable or inconsistent training data."""


def causes(e: BaseException) -> Iterator[BaseException]:
    """`e` and the exceptions it was raised from or during, each once (transformers re-raises huggingface_hub's; torch's
    DistBackendError may come wrapped)."""
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        yield cause
        cause = cause.__cause__ or cause.__context__


def first_line(e: BaseException, limit: int = 200) -> str:
    """An error's message as a one-line log line quotes it: its first line, cut at `limit` ("" for none)."""
    return (str(e).strip().splitlines() or [""])[0][:limit]


def one_line(e: BaseException, limit: int = 300) -> str:
    """`first_line`, or the error's type when its message says nothing (TimeoutError(), a bare KeyError())."""
    return first_line(e, limit) or type(e).__name__
