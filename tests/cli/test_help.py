"""`--help` of every command renders, at any width, and keeps its bracketed hints (env variables, defaults)."""

from __future__ import annotations

import pytest
import typer.main
from typer.testing import CliRunner

from ftcli.cli.app import app


def _commands(cmd, path: tuple[str, ...] = ()):
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):  # typer vendors click: duck-type groups
        yield from _commands(sub, (*path, name))


ROOT = typer.main.get_command(app)
ALL = list(_commands(ROOT))


def test_the_tree_has_every_command():
    names = {" ".join(p) for p, _ in ALL}
    assert {"train", "logs", "local", "download", "predict", "jobs list", "jobs describe", "jobs cancel",
            "config set", "config get", "config list"} <= names


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=lambda p: " ".join(p) or "ftcli")
def test_help_renders(path, width, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    for flag in ("--help", "-h"):
        r = CliRunner().invoke(app, [*path, flag], prog_name="ftcli", terminal_width=width)
        assert r.exit_code == 0, r.output
        assert "Usage: ftcli" in r.output
        # Rich markup would have eaten "[/PREFIX]" (a crash) or "[env FTCLI_PROJECT, ...]" (silently)
        assert "\\[" not in r.output


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("width", [80, 120])
def test_bracketed_hints_are_visible(width):
    r = CliRunner().invoke(app, ["train", "--help"], prog_name="ftcli", terminal_width=width)
    text = _flat(r.output)
    for hint in ("[env FTCLI_PROJECT", "[env FTCLI_REGION", "gs://BUCKET[/PREFIX] [env FTCLI_BUCKET",
                 "[env FTCLI_SERVICE_ACCOUNT", "[default: the task's]"):
        assert hint in text, hint


READ_COMMANDS = ["jobs list", "jobs describe", "jobs cancel", "config list", "config get", "download", "local", "logs",
                 "predict"]


@pytest.mark.parametrize("path", READ_COMMANDS)
def test_every_read_command_takes_json(path):
    r = CliRunner().invoke(app, [*path.split(), "--help"], prog_name="ftcli", terminal_width=120)
    assert "--json" in r.output


def test_shell_completion_is_offered_and_completes():
    r = CliRunner().invoke(app, ["--help"], prog_name="ftcli")
    assert "--install-completion" in r.output and "--show-completion" in r.output
    # What the installed bash script runs on TAB (the shell itself is detected from the process tree, so the
    # test asks the completion entry point directly).
    env = {"_FTCLI_COMPLETE": "complete_bash", "COMP_WORDS": "ftcli jobs li", "COMP_CWORD": "2"}
    r = CliRunner().invoke(app, [], prog_name="ftcli", env=env)
    assert r.exit_code == 0 and r.output.split() == ["list"]
