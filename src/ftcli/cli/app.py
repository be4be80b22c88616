"""The `ftcli` command: wiring only. Each command group lives in its own module."""

from __future__ import annotations

import os
import sys

import typer

from ftcli import __version__
from ftcli.cli import config, jobs, local, logs, models, report, train, tune

app = typer.Typer(
    name="ftcli",
    help="Fine-tune transformer text classifiers on Google Vertex AI, or on this machine.\n\n"
    "Example: ftcli local --epochs 1",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help texts hold literal brackets (gs://BUCKET[/PREFIX], [env FTCLI_PROJECT]): no markup
    context_settings={"help_option_names": ["-h", "--help"]},
)
train.register(app)
tune.register(app)
logs.register(app)
models.register(app)
app.add_typer(jobs.app, name="jobs")
local.register(app)
report.register(app)
app.add_typer(config.app, name="config")


def _version(value: bool) -> None:
    if value:
        print(f"ftcli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """Fine-tune transformer text classifiers on Google Vertex AI, or on this machine."""


def main() -> None:
    from ftcli.errors import FtcliError

    try:
        app()
    except FtcliError as e:
        if os.environ.get("FTCLI_DEBUG") == "1":
            raise
        from ftcli.output import error

        error(e.message, e.hint, e.problems)
        sys.exit(e.exit_code)
    except OSError as e:
        # A file ftcli was told to use (a config path that is a folder, a full disk): one line, not a traceback.
        if os.environ.get("FTCLI_DEBUG") == "1":
            raise
        from ftcli.output import error

        reason = e.strerror or str(e) or type(e).__name__
        error(f"cannot use {e.filename}: {reason}" if e.filename else reason,
              hint="FTCLI_DEBUG=1 shows where it happened")
        sys.exit(1)
    except KeyboardInterrupt:
        if os.environ.get("FTCLI_DEBUG") == "1":
            raise
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
