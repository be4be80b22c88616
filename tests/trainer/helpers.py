"""Shared by the trainer's tests: load a task's data from trainer arguments, or get its one-line error; a SIGTERM at
a chosen evaluation."""

import os
import signal

import pytest

from ftcli_trainer.config import parse_args
from ftcli_trainer.data import load_task_data
from ftcli_trainer.errors import DataError


def load(*argv):
    return load_task_data(parse_args(list(argv)))


def error_of(*argv) -> str:
    """The DataError the arguments give, checked to be one line, and its hint on a line of its own ("\nhint: ...") as
    the trainer prints them."""
    with pytest.raises(DataError) as e:
        load(*argv)
    assert "\n" not in str(e.value) and "\n" not in (e.value.hint or "")
    return with_hint(e.value)


def with_hint(e: DataError) -> str:
    """A DataError as the trainer prints it, without its "error: ": the message, then "hint: ..." on a line of its
    own where it has one."""
    return str(e) + (f"\nhint: {e.hint}" if e.hint else "")


def sigterm_when_evaluating(monkeypatch, step: int) -> None:
    """The trainer's evaluation at `step` begins with a SIGTERM to this process (Vertex preempting the VM)."""
    from ftcli_trainer.loop import Trainer

    evaluate = Trainer.evaluate

    def evaluating(self):
        if self.global_step == step:
            os.kill(os.getpid(), signal.SIGTERM)
        return evaluate(self)

    monkeypatch.setattr(Trainer, "evaluate", evaluating)
