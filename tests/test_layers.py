"""The layers hold: Google's packages are imported only by the gateways (ftcli/gcp/), the trainer never imports the
launcher, every module says what lives in it, and the core is free of the terminal."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
LAUNCHER = sorted((SRC / "ftcli").rglob("*.py"))
TRAINER = sorted((SRC / "ftcli_trainer").rglob("*.py"))
# Core modules: they report through callbacks and return values; the commands (ftcli/cli/) render.
CORE = ("values", "jobs", "follow", "models", "local", "submit", "settings", "catalog", "spec", "history")


def imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (the lazy imports inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def rel(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


@pytest.mark.parametrize("path", [p for p in LAUNCHER if "gcp" not in p.parts], ids=rel)
def test_only_the_gateways_import_google(path):
    bad = sorted(m for m in imports(path) if m.split(".")[0] in ("google", "grpc", "proto"))
    assert not bad, f"{rel(path)} imports {bad}: call a gateway in ftcli/gcp/ and use ftcli's own values"


@pytest.mark.parametrize("path", TRAINER, ids=rel)
def test_the_trainer_never_imports_the_launcher(path):
    assert not [m for m in imports(path) if m.split(".")[0] == "ftcli"]


@pytest.mark.parametrize("path", LAUNCHER, ids=rel)
def test_every_module_says_what_lives_there(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert ast.get_docstring(tree), f"{rel(path)} has no module docstring"


@pytest.mark.parametrize("name", CORE)
def test_the_core_does_not_draw_on_the_terminal(name):
    path = SRC / "ftcli" / f"{name}.py"
    bad = sorted(m for m in imports(path) if m.split(".")[0] in ("rich", "typer") or m in ("ftcli.output", "ftcli.cli"))
    assert not bad, f"ftcli/{name}.py imports {bad}: report through a callback and let the command render"


# Commands that still take a gateway themselves, and why; every other command reaches Google through the core.
GATEWAY_USERS = {"ftcli/cli/watch.py": "hands the gateways to follow.follow_job, which takes them as arguments",
                 "ftcli/cli/report.py": "copies a run's files for the report (no core module for that yet)"}


@pytest.mark.parametrize("path", sorted((SRC / "ftcli" / "cli").glob("*.py")), ids=rel)
def test_commands_reach_the_gateways_through_the_core(path):
    bad = sorted(m for m in imports(path) if m.startswith("ftcli.gcp"))
    if rel(path) in GATEWAY_USERS:
        assert bad, f"{rel(path)} no longer imports a gateway: drop it from GATEWAY_USERS"
        return
    assert not bad, f"{rel(path)} imports {bad}: parse, call the core (ftcli.jobs, ...), render"
