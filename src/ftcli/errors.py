"""One error family; `ftcli.cli.app.main` renders them as one line each (no traceback unless FTCLI_DEBUG=1)."""

from __future__ import annotations


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


class JobFailed(FtcliError):
    """The job (or the local run) ended without success."""

    exit_code = 3
