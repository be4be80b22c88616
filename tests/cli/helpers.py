"""Run the real `ftcli` entry point in-process (same code path as the console script) and capture it."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_cli(capsys: pytest.CaptureFixture, *args: str) -> Result:
    from ftcli.cli.app import main

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
