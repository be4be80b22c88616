"""Errors the trainer reports as one line (no traceback unless FTCLI_DEBUG=1)."""

from __future__ import annotations

from collections.abc import Iterator


class TrainerError(Exception):
    """A problem with the run's input that the user can fix; the message says how."""

    exit_code = 2


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
