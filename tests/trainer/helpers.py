"""Shared by the trainer's data tests: load a task's data from trainer arguments, or get its one-line error."""

import pytest

from ftcli_trainer.config import parse_args
from ftcli_trainer.data import load_task_data
from ftcli_trainer.errors import DataError


def load(*argv):
    return load_task_data(parse_args(list(argv)))


def error_of(*argv) -> str:
    """The DataError the arguments give, checked to be one line."""
    with pytest.raises(DataError) as e:
        load(*argv)
    msg = str(e.value)
    assert "\n" not in msg
    return msg
