"""Errors the trainer reports as one line (no traceback unless FTCLI_DEBUG=1)."""


class TrainerError(Exception):
    """A problem with the run's input that the user can fix; the message says how."""

    exit_code = 2


class DataError(TrainerError):
    """Unreadable or inconsistent training data."""
