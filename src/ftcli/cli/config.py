"""`ftcli config set | get | list | unset`: defaults for --project, --region, --bucket, --service-account."""

from __future__ import annotations

from typing import Annotated

import typer

from ftcli.errors import UsageError

app = typer.Typer(help="Set defaults for --project, --region, --bucket, --service-account.", no_args_is_help=True)

KeyArg = Annotated[str, typer.Argument(help="project, region, bucket or service-account.")]


def _key(key: str) -> str:
    from ftcli.settings import KEYS

    k = key.replace("-", "_")
    if k not in KEYS:
        raise UsageError(f"unknown setting {key!r}; choose one of {', '.join(x.replace('_', '-') for x in KEYS)}")
    return k


@app.command("set")
def set_(key: KeyArg, value: str) -> None:
    """Save a default. Example: ftcli config set bucket gs://my-bucket/ftcli"""
    from ftcli.output import out
    from ftcli.settings import check_bucket, check_region, load_config_file, save_config_file

    k = _key(key)
    problem = check_bucket(value) if k == "bucket" else check_region(value) if k == "region" else None
    if problem:
        raise UsageError(problem)
    values = load_config_file()
    values[k] = value.rstrip("/") if k == "bucket" else value
    path = save_config_file(values)
    out().print(f"{key} = {values[k]}  ({path})")


@app.command("get")
def get(key: KeyArg) -> None:
    """Print a saved default (exit 1 when unset). Example: ftcli config get project"""
    from ftcli.settings import load_config_file

    value = load_config_file().get(_key(key))
    if value is None:
        raise typer.Exit(1)
    print(value)


@app.command("list")
def list_() -> None:
    """Print every saved default and the file they live in."""
    from ftcli.output import err
    from ftcli.settings import config_path, load_config_file

    for k, v in load_config_file().items():
        print(f"{k.replace('_', '-')} = {v}")
    err().print(f"[dim]{config_path()}[/]")


@app.command("unset")
def unset(key: KeyArg) -> None:
    """Forget a saved default."""
    from ftcli.settings import load_config_file, save_config_file

    values = load_config_file()
    values.pop(_key(key), None)
    save_config_file(values)
