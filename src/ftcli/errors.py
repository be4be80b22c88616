"""One error family; `ftcli.cli.app.main` renders them as one line each (no traceback unless FTCLI_DEBUG=1)."""

from __future__ import annotations


def reason(e: BaseException) -> str:
    """Why `e` happened, for the end of one error line: a file error's reason and the file it names, else the
    error's own text."""
    if isinstance(e, OSError) and e.strerror:
        return f"{e.strerror} ({e.filename})" if e.filename else e.strerror
    return str(e) or type(e).__name__


class FtcliError(Exception):
    """Something the user can fix. `hint` says what to run or change next."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, problems: list[str] | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.problems = problems or []


class UsageError(FtcliError):
    """Bad options or settings: nothing was uploaded, no job was created."""

    exit_code = 2


def gather(e: FtcliError, problems: list[str], hints: list[str]) -> None:
    """Add what `e` says is wrong (its list, else its message) to `problems`, and its hint, once, to `hints`: for a
    pre-flight that says every problem at once (`settings.raise_problems`). It kept the problems alone, and a hint
    said by every other command was lost there: `ftcli train` on a config file that is not TOML said nothing of
    fixing or deleting it."""
    problems.extend(e.problems or [e.message])
    if e.hint and e.hint not in hints:
        hints.append(e.hint)


class JobFailed(FtcliError):
    """The job (or the local run) ended without success."""

    exit_code = 3


class Rejected(FtcliError):
    """A Google service refused the request as invalid (INVALID_ARGUMENT / 400); `detail` is its own words, for
    the core to turn into a hint (e.g. the machine type that fits a GPU)."""

    def __init__(self, message: str, detail: str, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.detail = detail


class NoCapacity(FtcliError):
    """The machines cannot be had now: a quota is used up (RESOURCE_EXHAUSTED at create time). `ftcli train` with
    several --gpu/--region candidates moves on to the next one."""


class NotFound(FtcliError):
    """The resource does not exist (NOT_FOUND). `of_project`: the project itself is what is missing (its hint says
    so, and no caller's hint about the resource replaces it)."""

    def __init__(self, message: str, hint: str | None = None, *, of_project: bool = False):
        super().__init__(message, hint=hint)
        self.of_project = of_project


class Conflict(FtcliError):
    """The resource is not in a state that allows the call (FAILED_PRECONDITION), e.g. cancelling a finished job."""


class FollowingLost(FtcliError):
    """A job ftcli followed could not be read for longer than it waits (`cause`: the last failure, whose message,
    hint and exit status this keeps). Following stops; the job does not: the command says so, and how to follow it
    again or cancel it (a job left running unsaid runs up its bill)."""

    def __init__(self, cause: FtcliError, what: str, waited: float):
        waited_for = f"{waited / 60:.0f} minutes" if waited >= 60 else f"{waited:.0f} s"
        super().__init__(f"{cause.message} ({waited_for} of failed reads: ftcli stopped following {what}, which "
                         "may still be running)", hint=cause.hint, problems=cause.problems)
        self.cause = cause
        self.exit_code = cause.exit_code

    def then(self, step: str) -> None:
        """Add `step` (the commands that follow the job again or cancel it) to the hint."""
        self.hint = f"{self.hint}; then {step}" if self.hint else step


class LogsUnavailable(FtcliError):
    """The job's logs cannot be read now. `reason`: "denied" (no permission or credentials), "unreachable"
    (network, endpoint), "quota" (RESOURCE_EXHAUSTED), "unsupported" (no live tail here), "error" (other)."""

    def __init__(self, reason: str, message: str, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.reason = reason
