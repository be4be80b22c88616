"""The one place that writes to the terminal: results to stdout, status and errors to stderr."""

from __future__ import annotations

from functools import cache


@cache
def out():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


@cache
def err():
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def error(message: str, hint: str | None = None, problems: list[str] | None = None) -> None:
    from rich.markup import escape

    console = err()
    if problems:
        console.print(f"[bold red]error:[/] {escape(message)}")
        for p in problems:
            console.print(f"  - {escape(p)}")
    else:
        console.print(f"[bold red]error:[/] {escape(message)}")
    if hint:
        console.print(f"[dim]hint:[/] {escape(hint)}")
