"""Run the real `ftcli` entry point in-process (same code path as the console script) and capture it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

import pytest


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_cli(capsys: pytest.CaptureFixture, *args: str) -> Result:
    from ftcli import output
    from ftcli.cli.app import main

    # Each call a fresh invocation: the consoles (cached for the process) take COLUMNS when made, and a console that
    # an earlier call made at another width made a width test pass or fail by the tests run before it
    # (a test that put its own console in their place keeps it)
    for made in (output.out, output.err):
        if hasattr(made, "cache_clear"):
            made.cache_clear()
    capsys.readouterr()
    old = sys.argv
    sys.argv = ["ftcli", *args]
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def wait_for_child(proc: subprocess.Popen, ready: Callable[[], object],
                   state: Callable[[], str] = lambda: "") -> None:
    """Run `ready()` (it asserts, or fails the test) while `proc` runs; should it fail, stop the child and fail
    with what the child printed and `state()` (the emulators' state then): a wait that timed out once said only
    `assert False`, and the child's own error went with it."""
    try:
        ready()
    except BaseException as e:
        what = state()
        if proc.poll() is None:
            proc.kill()
        out, err = proc.communicate(timeout=10)
        raise AssertionError(f"{e}\n{what}\nthe child (exit status {proc.returncode}) printed:\n"
                             f"--- stdout\n{out}\n--- stderr\n{err}") from e
