"""The one place that writes to the terminal: results to stdout, status and errors to stderr.

`show_list` and `show_one` render a result as a table (or key/value block), or with `--json` as JSON: one object
per line for a list (JSON Lines), one object for one thing. Progress reaches the screen through the callbacks
made here (`transfer`: a bar; `Waiting`: a spinner with the state and elapsed time), and only on a terminal;
elsewhere a wait is a plain line a minute. Rich is imported inside the functions (`ftcli --help` stays light).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console, JustifyMethod
    from rich.status import Status


@cache
def out() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


@cache
def err() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def error(message: str, hint: str | None = None, problems: list[str] | None = None) -> None:
    console = err()
    console.print(f"[bold red]error:[/] {escape(message)}")
    for p in problems or []:
        console.print(f"  - {escape(p)}")
    if hint:
        console.print(f"[dim]hint:[/] {escape(hint)}")


def warn(message: str, hint: str | None = None) -> None:
    extra = f" [dim]hint: {escape(hint)}[/]" if hint else ""
    err().print(f"[yellow]warning:[/] {escape(message)}{extra}")


class _LoggedWarnings(logging.Handler):
    """Warnings logged by code that does not draw on the terminal, shown as ftcli's own (`warning: ... hint: ...`,
    the hint from the record's `hint` extra): the trainer's when its code runs inside ftcli (the pre-flight reads the
    data with it), which came out as bare lines through logging's last-resort handler; and the core's (settings:
    what the config file holds that ftcli ignores), each said once a command though the file is read several
    times."""

    def __init__(self, once: bool) -> None:
        super().__init__(logging.WARNING)
        self.said: set[str] | None = set() if once else None

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if self.said is not None:
            if message in self.said:
                return
            self.said.add(message)
        warn(message, hint=getattr(record, "hint", None))


def route_warnings() -> None:
    """At the start of each command: the trainer's and the core's logged warnings read `warning: ...` on stderr
    (a fresh handler each time, so that a command run again in the same process says its warnings again)."""
    for name, once in (("ftcli_trainer", False), ("ftcli.settings", True)):
        log = logging.getLogger(name)
        for old in [h for h in log.handlers if isinstance(h, _LoggedWarnings)]:
            log.removeHandler(old)
        log.addHandler(_LoggedWarnings(once))


def note(message: str) -> None:
    """A status line on stderr (a retry, a choice ftcli made): never mixed into results."""
    err().print(f"[dim]{escape(message)}[/]")


def reader_gone(stream: IO[str]) -> bool:
    """True when `stream` is a pipe or socket whose reader has closed it (`ftcli logs JOB | head -1` once head has
    exited). A write would fail then, but a quiet job may write nothing for hours, and a follower would go on
    reading Google's APIs (holding one of the project's 10 live tails) for nobody. False where it cannot tell (a
    file, a terminal, a stream with no file descriptor, no poll())."""
    import os
    import select
    import stat

    try:
        fd = stream.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, OSError, ValueError):
        return False
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)) or not hasattr(select, "poll"):
        return False
    poller = select.poll()
    poller.register(fd, 0)  # no events asked: poll still reports POLLERR once the read end is closed
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


# How long the last words after an interruption wait for a reader that is not reading (`ftcli logs 3 | slow_reader`,
# a stopped pager): a reader that is alive makes room within it; past it, ftcli exits without them, inside
# `docker stop`'s 10 s between its SIGTERM and its SIGKILL.
LAST_WRITE_PATIENCE = 5.0


class _Stuck(Exception):
    """The last words waited past their patience."""


@contextmanager
def last_words(patience: float = LAST_WRITE_PATIENCE) -> Iterator[None]:
    """What the block writes after an interruption (Ctrl-C, SIGTERM, SIGHUP), and what stdout and stderr still hold,
    written if a reader takes it within `patience` seconds; otherwise dropped, and the command goes on to exit. The
    write a signal cut short left its line in stdout's buffer, and Python's flush at exit waited for the pipe's reader
    however long it took: a reader that no longer read (`ftcli logs 3 | reader`, `2>&1` too) kept ftcli from
    exiting, after it had said it would. Past the patience, when a reader has gone (EPIPE), or at a second Ctrl-C,
    stdout and stderr are pointed at os.devnull, so that the flush at exit neither waits nor says "Exception ignored".
    The wait is bounded with SIGALRM, in the main thread (the signal's; not on Windows: there it is unbounded); an
    alarm set before (pytest-timeout's, in the tests) is put back after, with the time it had left."""
    import os
    import signal
    import sys
    import threading
    import time

    timed = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    writing = [True]

    def give_up(signum: int, frame: object) -> None:
        if writing[0]:  # (an alarm that comes as the writes end is ignored)
            raise _Stuck

    before: Any = None
    outer, since = 0.0, time.monotonic()
    if timed:
        before = signal.signal(signal.SIGALRM, give_up)
        outer = signal.setitimer(signal.ITIMER_REAL, patience)[0]
    try:
        yield
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        writing[0] = False
    except (_Stuck, OSError, ValueError, KeyboardInterrupt):  # ValueError: a closed stream
        writing[0] = False
        for stream in (sys.stdout, sys.stderr):
            try:
                fd = stream.fileno()
            except (OSError, ValueError, AttributeError):  # no file descriptor (a test's capture): nothing waits
                continue
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)
    finally:
        if timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL if before is None else before)
            if outer > 0:  # (an alarm already due goes off at once, with its own handler)
                signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - since), 1e-3))


def say_last(line: str, obj: Any = None, *, to: Console | None = None) -> None:
    """The last words of an interrupted command: `line` on stderr (`to`, when not ftcli's stderr console; as it is: no
    markup), then `obj` (with --json, where the interruption leaves something for a script to act on) as one JSON line
    on stdout, within last_words' patience. The line comes first: a stdout whose reader no longer reads would
    otherwise take it with it."""
    with last_words():
        (to or err()).print(line, markup=False, highlight=False)
        if obj is not None:
            emit_json(obj)


def emit_json(obj: Any) -> None:
    """One JSON value on one line of stdout, flushed (a reader may be waiting for it)."""
    print(json_line(obj), flush=True)


def json_line(obj: Any) -> str:
    """One JSON value as one line (without its line break). A number that is not finite (a NaN loss, an undefined
    Pearson in a job's metrics.json) is null: Python wrote a bare NaN, which is not JSON, and jq and other strict
    readers refused the whole line."""
    return json.dumps(_finite(obj), default=str, allow_nan=False)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


# --- results -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Column:
    """A table column: its header and the cell text drawn from a result row (the row is what --json prints)."""

    header: str
    cell: Callable[[dict], str]
    justify: JustifyMethod = "left"
    min_width: int | None = None  # the narrowest a shrinking column is made (never wider than its widest cell)
    max_width: int | None = None
    shrink: bool = True  # may be cut with an ellipsis when the table is wider than the terminal
    wrap: bool = False  # with shrink: wrapped onto more lines (a long word folded) instead of cut
    # Left out of the table (0: never) when it cannot fit the terminal even with every column that may shrink at its
    # narrowest: 1 first, then 2, ... (a long text column, so that an id, a number or a GPU is never cut instead).
    drop: int = 0


def show_list(rows: Sequence[dict], columns: Sequence[Column], *, json_out: bool, empty: str = "nothing to show"
              ) -> None:
    """Rows as a table that fits the terminal (80 columns when not one), or as JSON Lines."""
    if json_out:
        for row in rows:
            emit_json(row)
        return
    if not rows:
        err().print(escape(empty))
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False, show_edge=False, padding=(0, 1), header_style="bold")
    kept = _fitting(columns, rows, out().width)
    if gone := [c.header for c in columns if c not in kept]:
        err().print(f"({' and '.join(gone)} left out to fit {out().width} columns; a wider terminal or --json shows "
                    f"{'them' if len(gone) > 1 else 'it'})", style="dim", markup=False, highlight=False)
    columns = kept
    cells = [[c.cell(row) for c in columns] for row in rows]
    natural = [min(max(len(c.header), *(len(r[i]) for r in cells)), c.max_width or 10**6)
               for i, c in enumerate(columns)]
    leasts = [min(max(c.min_width or 0, len(c.header)), natural[i]) for i, c in enumerate(columns)]
    room = out().width - 2 * (len(columns) - 1)
    if sum(least if c.shrink else natural[i] for i, (c, least) in enumerate(zip(columns, leasts, strict=True))) > room:
        # Nothing is left to drop (_fitting) and the table is still too wide at the min_widths: they give way too,
        # down to the header. Kept, they made `config list` 58 columns wide in a terminal of 40 or 30.
        leasts = [min(len(c.header), natural[i]) for i, c in enumerate(columns)]
    caps = _shrink_to(natural, [c.shrink for c in columns], leasts, room)
    for i, c in enumerate(columns):
        # A column that must not shrink (an id the user types) is given its full width; the others share the rest,
        # each keeping at least its header. Rich alone spreads the excess over every column and then crops the lines
        # at the terminal's edge, cutting the last column without an ellipsis: so the shrinkable ones get a cap.
        least = leasts[i] if c.shrink else natural[i]
        table.add_column(c.header, justify=c.justify, no_wrap=not c.wrap, overflow="fold" if c.wrap else "ellipsis",
                         min_width=least, max_width=caps[i])
    for cell_row in cells:
        table.add_row(*map(escape, cell_row))
    # Narrower than the columns that cannot shrink (COLUMNS=40): the lines are printed whole, for the terminal to
    # wrap; cropped at its edge, the last columns (TIME, METRIC) were dropped without a mark.
    needed = sum(caps) + 2 * (len(columns) - 1)
    if needed > out().width:
        # (print's width= is capped at the console's: Rich then squeezed the table into the terminal anyway, and a
        # column that cannot shrink was given no room at all: AGE vanished from `jobs list` at COLUMNS=30, GPU, AGE
        # and TIME at 20, while the note named only the columns left out on purpose. The table's own width is not.)
        table.width = needed
    out().print(table, soft_wrap=False, crop=needed <= out().width, width=max(needed, out().width))


def _fitting(columns: Sequence[Column], rows: Sequence[dict], width: int) -> list[Column]:
    """`columns` without those that must give way (`drop`, in its order) for the rest to fit `width`, each column
    that may shrink counted at its narrowest (its header)."""
    kept = list(columns)

    def narrowest(c: Column) -> int:
        widest = min(max(len(c.header), *(len(c.cell(r)) for r in rows)), c.max_width or 10**6)
        # as show_list lays it out: a min_width wider than the column's widest cell is not kept
        return min(max(c.min_width or 0, len(c.header)), widest) if c.shrink else widest

    for gone in sorted((c for c in columns if c.drop), key=lambda c: c.drop):
        if sum(map(narrowest, kept)) + 2 * (len(kept) - 1) <= width:
            break
        kept.remove(gone)
    return kept


def _shrink_to(natural: list[int], shrink: list[bool], least: list[int], room: int) -> list[int]:
    """Widths that fit `room`: the columns that may not shrink keep theirs; the others share what is left, the
    narrow ones whole and the widest cut to an equal share (never below their `least`, and leaving the wider ones
    theirs)."""
    left = room - sum(w for w, s in zip(natural, shrink, strict=True) if not s)
    flexible = sorted((w, i) for i, (w, s) in enumerate(zip(natural, shrink, strict=True)) if s)
    caps = list(natural)
    for k, (w, i) in enumerate(flexible):
        share = left // (len(flexible) - k)
        caps[i] = max(least[i], min(w, share, left - sum(least[j] for _, j in flexible[k + 1:])))
        left -= caps[i]
    return caps


def show_one(obj: dict, fields: Sequence[tuple[str, Callable[[dict], str | None]]], *, json_out: bool,
             title: str | None = None) -> None:
    """One result as a title and `label  value` lines (empty values left out), or as one JSON object."""
    if json_out:
        emit_json(obj)
        return
    o = out()
    if title:
        o.print(title)
    width = max((len(label) for label, _ in fields), default=0)
    for label, value in fields:
        text = value(obj)
        if text:
            o.print(f"  {label:<{width}}  {escape(text)}")


# --- times -------------------------------------------------------------------------------------------------------

def span(seconds: float | None) -> str:
    """A duration the way people say it: 45s, 12m, 1h05m, 3d04h ('-' for None)."""
    if seconds is None:
        return "-"
    s = round(seconds)  # as jobs' duration_s is: `run time 57s` and `ran 57s` for one job, never 57s and 56s
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def age(seconds: float | None) -> str:
    """How long ago, coarse: 45s, 12m, 5h, 3d."""
    if seconds is None:
        return "-"
    s = round(seconds)  # as jobs' duration_s is: `run time 57s` and `ran 57s` for one job, never 57s and 56s
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


# --- progress ----------------------------------------------------------------------------------------------------

def animated(console: Console) -> bool:
    """Whether `console` may draw spinners and bars: its stream is a terminal, and not a dumb one.

    Rich counts FORCE_COLOR (and TTY_COMPATIBLE=1) as a terminal whatever the stream is (rich 15,
    `Console.is_terminal`), and CI workflows set FORCE_COLOR to get colours in their logs: a followed job's spinner was
    then redrawn about 12 times a second into the log, cursor codes and all, and each upload drew a bar. Colours stay
    as Rich decides; animation also needs the stream itself to be a terminal, or TTY_INTERACTIVE=1 (Rich's own switch
    for animations; TTY_INTERACTIVE=0 and TERM=dumb turn them off through `Console.is_interactive`)."""
    import os

    if not console.is_interactive:
        return False
    if os.environ.get("TTY_INTERACTIVE") == "1":
        return True
    isatty = getattr(console.file, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # a closed stream
        return False


@contextmanager
def transfer(description: str) -> Iterator[Callable[[int, int | None], None] | None]:
    """A `progress(done, total)` callback that draws a byte bar on stderr from its first call (a transfer that
    moves nothing, a local model folder, an upload already there, draws none), or None when stderr is no terminal."""
    console = err()
    if not animated(console):
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    columns = ("[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn())
    bar = Progress(*columns, console=console, transient=True)
    task = bar.add_task(escape(description), total=None)

    def progress(done: int, total: int | None) -> None:
        # `ftcli predict MODEL_DIR` flashed "downloading the model 0/? bytes" where nothing was downloaded
        bar.update(task, completed=done, total=total)
        if not bar.live.is_started:
            bar.start()

    try:
        yield progress
    finally:
        if bar.live.is_started:
            bar.stop()


class Waiting:
    """Shows a wait: on a terminal a spinner with what is awaited and the time so far; elsewhere a plain line each
    full minute (a log file or CI keeps a trace, without a line per second)."""

    def __init__(self, console: Console | None = None, every_s: float = 60.0) -> None:
        self.console = console or err()
        self.every_s = every_s
        self._status: Status | None = None
        self._minutes_said = 0

    def update(self, what: str, elapsed_s: float) -> None:
        text = f"{what} · {span(elapsed_s)}"
        if animated(self.console):
            if self._status is None:
                self._status = self.console.status(escape(text))
                self._status.start()
            else:
                self._status.update(escape(text))
            return
        minutes = int(elapsed_s // self.every_s)
        if minutes > self._minutes_said:
            self._minutes_said = minutes
            self.console.print(escape(text))

    def stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
