"""The `ftcli` command: wiring only. Each command group lives in its own module."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

import typer
import typer.core
from typer._click import exceptions as click_errors  # typer 0.29 carries its own click (pinned <0.30: pyproject)

from ftcli import __version__
from ftcli.cli import config, jobs, local, logs, models, report, train, tune
from ftcli.cli.options import use_command_class

if TYPE_CHECKING:
    from typer._click import Context as ClickContext


class _UsageLine(click_errors.UsageError):
    """A usage error shown as ftcli's own errors are: `error: ...` and a hint, not click's three lines (the usage, a
    "Try 'ftcli train -h' for help." line, a blank one, then the error)."""

    hint: str | None = None

    def show(self, file: IO[Any] | None = None) -> None:
        from ftcli.output import error

        message = self.format_message()
        if message[:2].istitle():  # click's "No such option: ..." reads as ftcli's lower-case lines do
            message = message[0].lower() + message[1:]
        if message.endswith(".") and not message.endswith(".."):
            message = message[:-1]
        if self.ctx is None:
            error(message)
            return
        error(message, hint=self.hint or config.usage_hint(self.ctx) or f"see {self.ctx.command_path} -h")


def _option_before_its_command(e: click_errors.NoSuchOption, argv: list[str]) -> str | None:
    """Where an option put before its command goes: `ftcli --project P jobs list` (gcloud takes its flags anywhere)
    said "no such option: --project" and "see ftcli -h", whose options have no --project."""
    if e.ctx is None:
        return None
    root = e.ctx.find_root()
    command, path = root.command, [root.command_path]
    for word in argv:
        sub = getattr(command, "commands", {}).get(word)  # (typer vendors click: duck-type the groups)
        if sub is not None:
            command, path = sub, [*path, word]
    if command is e.ctx.command or not any(e.option_name in (*p.opts, *p.secondary_opts) for p in command.params):
        return None
    return f"options go after the command: {' '.join(path)} {e.option_name} ..."


def _a_path_read_as_an_option(e: click_errors.NoSuchOption, argv: list[str]) -> str | None:
    """How to pass a file or folder whose name starts with a dash: `ftcli evaluate M -dash.csv` said "no such option:
    -d" and "see ftcli evaluate -h", where the word was the name of a file there."""
    import shlex

    for word in argv:  # (click names -d for -dash.csv: short options are read as a cluster of letters)
        if word.startswith(e.option_name) and os.path.lexists(word):
            return (f"{word} is read as an option; the file of that name is {shlex.quote('./' + word)} (or put -- "
                    "before it)")
    return None


@contextmanager
def _usage_lines(argv: list[str]) -> Iterator[None]:
    try:
        yield
    except click_errors.NoArgsIsHelpError:
        raise  # `ftcli` alone, `ftcli jobs` alone: the help, as click shows it
    except click_errors.UsageError as e:
        if isinstance(e, _UsageLine):
            raise
        message, hint = e.format_message(), None
        if isinstance(e, click_errors.NoSuchOption) and (hint := _option_before_its_command(e, argv)):
            # (with that hint, click's "Possible options: --version" for `ftcli --json config list` only misleads)
            message = f"No such option: {e.option_name}"
        elif isinstance(e, click_errors.NoSuchOption) and (hint := _a_path_read_as_an_option(e, argv)):
            message = f"No such option: {e.option_name}"
        line = _UsageLine(message, e.ctx)
        line.hint = hint
        raise line from e


class _Group(typer.core.TyperGroup):
    """The root command: click's usage errors, from parsing its own options or any subcommand's (a mistyped option,
    a value of the wrong type, an unknown command), are raised as _UsageLine."""

    argv: list[str] = []  # the command line's words, for a hint that rearranges them

    def make_context(self, info_name: str | None, args: list[str], parent: ClickContext | None = None,
                     **extra: Any) -> ClickContext:
        self.argv = list(args)
        with _usage_lines(self.argv):
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: ClickContext) -> Any:
        with _usage_lines(self.argv):
            return super().invoke(ctx)


app = typer.Typer(
    name="ftcli",
    cls=_Group,
    help="Fine-tune transformer text classifiers on Google Vertex AI, or on this machine.\n\n"
    "Example: ftcli local --epochs 1",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help texts hold literal brackets (gs://BUCKET[/PREFIX], [env FTCLI_PROJECT]): no markup
    context_settings={"help_option_names": ["-h", "--help"]},
)
train.register(app)
tune.register(app)
logs.register(app)
models.register(app)
app.add_typer(jobs.app, name="jobs")
local.register(app)
report.register(app)
app.add_typer(config.app, name="config")
use_command_class(app)


def _version(value: bool) -> None:
    if value:
        print(f"ftcli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """Fine-tune transformer text classifiers on Google Vertex AI, or on this machine."""


# What to do about a file error that is the environment's, not ftcli's.
FILE_ERROR_FIXES: dict[int | None, str] = {
    errno.ENOSPC: "free some space on that disk, then run again",
    errno.EDQUOT: "free some space (the disk quota is used up), then run again",
    errno.EROFS: "that file system is read-only: use a writable place, then run again",
    # a write past the largest file the file system holds (FAT32's 4 GB: a USB stick) or `ulimit -f` allows
    errno.EFBIG: "the file is larger than that file system or `ulimit -f` allows: use another disk, then run again",
    errno.EACCES: "check the permissions of that file and of its folder",
    errno.EPERM: "check the permissions of that file and of its folder",
}


def os_error_line(e: OSError) -> str:
    """One line for a file error: the file(s) it names (filename, filename2), the reason, and what to do."""
    files = " -> ".join(str(f) for f in (e.filename, e.filename2) if f not in (None, ""))
    reason = e.strerror or str(e) or type(e).__name__
    line = f"cannot use {files}: {reason}" if files else reason
    fix = FILE_ERROR_FIXES.get(e.errno)
    return f"{line}; {fix}" if fix else line


COMPLETION_FLAGS = ("--install-completion", "--show-completion")


def check_completion_args(argv: list[str]) -> None:
    """Typer's --install-completion and --show-completion detect the shell they run from and take no shell name
    (a name is read only under a Typer test switch): `ftcli --install-completion zsh` typed in bash wrote bash
    completion and a line in ~/.bashrc, said "bash completion installed" and exited 0. A word after either flag is
    refused before anything is written."""
    from ftcli.errors import UsageError

    for i, word in enumerate(argv[:-1]):
        if word in COMPLETION_FLAGS and not argv[i + 1].startswith("-"):
            given = argv[i + 1]
            shell = given if given.lower() in ("bash", "zsh", "fish", "powershell", "pwsh") else "the shell you want"
            raise UsageError(f"{word} takes no shell name ({given!r}): it sets up the shell it is run from; run "
                             f"`ftcli {word}` in {shell}")


def check_args_decodable(argv: list[str]) -> None:
    """Under a locale whose encoding is ASCII (LC_ALL=C with PYTHONUTF8=0: LC_ALL turns off Python's coercion of the C
    locale, PEP 538, and PYTHONUTF8=0 its UTF-8 mode, PEP 540) Python keeps the bytes of a non-ASCII argument as lone
    surrogates ('caf\\udcc3\\udca9'). Each command then failed where it first used such a word, with a traceback:
    `predict M café` a TypeError in the tokenizer, `train --train-file 日本.csv` a UnicodeEncodeError naming the
    object. Such an argument is refused before the command starts, showing it as UTF-8 reads its bytes."""
    from ftcli.errors import UsageError

    if sys.getfilesystemencoding().lower().replace("-", "") == "utf8":
        return  # (a UTF-8 locale: such a word is a file's name that is not UTF-8, which opens as it is)
    for word in argv:
        try:
            word.encode("utf-8")
        except UnicodeEncodeError:
            shown = os.fsencode(word).decode("utf-8", "replace")
            raise UsageError(f"the argument {shown!r} is not text in this locale's encoding "
                             f"({sys.getfilesystemencoding()}), so ftcli cannot tell which characters it holds",
                             hint="run ftcli in a UTF-8 locale (LC_ALL=C.UTF-8) or with PYTHONUTF8=1") from None


def main(in_process: bool = False) -> None:
    """The `ftcli` console script. A command that loaded torch (predict, evaluate) leaves as soon as it has ended,
    without Python's shutdown (leave_now). `in_process`: the caller goes on after it (the tests' run_cli), so it
    returns or raises SystemExit as any function does."""
    # (only what the command itself loaded: a program that had torch before calling this goes on after it)
    leave = not in_process and "torch" not in sys.modules
    try:
        _main()
    except SystemExit as e:
        if leave:
            leave_now(e.code)
        raise
    if leave:
        leave_now(None)


def leave_now(code: object) -> None:
    """Exit with `code` (sys.exit's) at once, without Python's teardown of its modules, after a command that loaded
    torch, when the shutdown has no thread to wait for: the teardown of the ~2,900 modules torch and transformers
    bring took 1.0-1.6 s after `ftcli predict MODEL TEXT` had printed its line, of a 7-9 s command (MiniLM-L6 on the
    2-core VM, 2026-11-29; the trainer leaves so too: ftcli_trainer.task._exit). What that shutdown does that matters
    still happens: the atexit hooks (logging's, temporary folders' clean-up) and the streams flushed. Otherwise (no
    torch, a thread to join, a message as the code, a stream that cannot be flushed: a reader that has gone) it
    returns, and Python's own shutdown does what it did."""
    import threading

    if "torch" not in sys.modules or not (code is None or isinstance(code, int)) or any(
            not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return  # (Python's flush at exit then says what it says of it, with its own status)
    import atexit

    atexit._run_exitfuncs()
    status = int(code or 0)
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            status = 120  # (Python's status when its flush at exit fails)
    os._exit(status)


def _main() -> None:
    from ftcli.output import route_warnings
    from ftcli.signals import stop_signals_interrupt

    route_warnings()
    if sys.stdout is not None and hasattr(sys.stdout, "reconfigure"):
        # Under a locale that is not UTF-8 (ISO-8859-1, PYTHONUTF8=0 with LC_ALL=C, a Windows code page) stdout's
        # encoder was strict: a job name, label or text it cannot encode (or ftcli's own '·') ended the command
        # with a UnicodeEncodeError traceback. Shown escaped instead, as Python already does on stderr; --json
        # is ASCII either way.
        sys.stdout.reconfigure(errors="backslashreplace")
    # SIGTERM and SIGHUP (a CI step's timeout, `docker stop`, a closed terminal) as Ctrl-C for the whole command:
    # outside a command's own handling of them (`jobs list`, `jobs describe`, download's and report's printing once
    # their work was done) they killed ftcli without a word, exit -15 or -1, a CI log showing nothing. Now
    # "interrupted" at least, and 128 + the signal. A command's own handling (train's, download's, ...) replaces this
    # for its block and puts it back after; `ftcli local` passes them on to its trainer while it runs. Output still
    # buffered when the command ends (`report --json`'s line, behind a reader that stopped reading) is flushed while
    # they are held too: Python's flush at exit, after they were put back, was where such a SIGTERM landed.
    stopped: list[int] = []
    try:
        with stop_signals_interrupt() as stopped:
            try:
                _run(stopped)
            finally:
                _flush_output()
    except KeyboardInterrupt:  # one that came once the command had ended: in that flush, or as an error was said
        if os.environ.get("FTCLI_DEBUG") == "1":
            raise
        _say_interrupted()
        sys.exit(128 + stopped[0] if stopped else 130)


def _run(stopped: list[int]) -> None:
    """The command, its errors said as one line and a hint, its interruption as "interrupted" (unless it said its own
    words): 130 for Ctrl-C, 128 + the signal's number for the SIGTERM or SIGHUP `stopped` holds."""
    from ftcli.errors import FtcliError

    try:
        check_args_decodable(sys.argv[1:])
        check_completion_args(sys.argv[1:])
        app()
    except FtcliError as e:
        if os.environ.get("FTCLI_DEBUG") == "1":
            raise
        from ftcli.output import error

        error(e.message, e.hint, e.problems)
        sys.exit(e.exit_code)
    except OSError as e:
        # A file ftcli was told to use (a config path that is a folder, a full disk): one line, not a traceback.
        if os.environ.get("FTCLI_DEBUG") == "1":
            raise
        from ftcli.output import error

        error(os_error_line(e), hint=None if e.errno in FILE_ERROR_FIXES else "FTCLI_DEBUG=1 shows where it happened")
        sys.exit(1)
    except KeyboardInterrupt:
        if os.environ.get("FTCLI_DEBUG") == "1":
            raise
        _say_interrupted()
        sys.exit(128 + stopped[0] if stopped else 130)
    except SystemExit as e:
        # Typer turns a Ctrl-C into a silent exit 130 (`raise Exit(130) from` the KeyboardInterrupt), so the clause
        # above never ran and a command cut short said nothing: said here, from the exit's chain (a SIGTERM or
        # SIGHUP's exit is 128 + its number: typer reads every KeyboardInterrupt as a Ctrl-C).
        interrupt = getattr(e.__context__, "__cause__", None)
        if e.code != 130 or not isinstance(interrupt, KeyboardInterrupt):
            raise
        if os.environ.get("FTCLI_DEBUG") == "1":
            raise interrupt from None
        _say_interrupted()
        if stopped:
            sys.exit(128 + stopped[0])
        raise


def _flush_output() -> None:
    """Flush stdout and stderr (a reader that has gone, or a closed stream, is left to Python's flush at exit, as
    before)."""
    for stream in (sys.stdout, sys.stderr):
        if stream is None:
            continue
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _say_interrupted() -> None:
    """A command that has no words of its own for an interruption (`jobs list`, `jobs describe`) says "interrupted",
    within output.last_words' patience: a Ctrl-C that cut short a write to a pipe whose reader no longer reads (`ftcli
    jobs list | reader`, a stopped pager) left its lines in stdout's buffer, and Python's flush at exit waited on that
    reader for as long as it took, after ftcli had said "interrupted"."""
    from ftcli.output import say_last

    say_last("\ninterrupted")
