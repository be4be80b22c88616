"""The trainer's options as Typer options, built from the trainer's own declarative list.

`ftcli local` (and `ftcli train`) show and type-check exactly the options `python -m ftcli_trainer.task`
takes, with one source of truth: `ftcli_trainer.config.OPTIONS` (plain data, no torch import).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Optional

import typer

from ftcli_trainer.config import OPTIONS, ConfigError, Option, TrainConfig, hint_of, resolve, to_argv, with_fix

PANEL = "Trainer options"
TRAINER_NAMES = frozenset(o.name for o in OPTIONS)
# Set by `ftcli tune` on each trial (the study's metric), never by hand: a CustomJob of `ftcli train` or a run of
# `ftcli local` has no tuning service to report to, and the option only sat in their --help doing nothing.
SET_BY_TUNE = frozenset({"hypertune_metric"})


def _parameter(opt: Option) -> inspect.Parameter:
    if opt.type is bool:
        if opt.default:  # on unless --no-NAME; None when neither is given, so the job's arguments leave it out
            # Said in the help as `--detach / --follow` says its own: with show_default off (None is not the
            # default), `-h` gave no hint that --gpu-warmup, --weight-copies and --fused-projections are on.
            info = typer.Option(f"{opt.flag}/--no-{opt.flag[2:]}", help=f"{opt.help} [default: {opt.flag}]",
                                rich_help_panel=PANEL, show_default=False)
            return inspect.Parameter(opt.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                     annotation=Annotated[Optional[bool], info])  # noqa: UP045 - typer needs it
        info = typer.Option(opt.flag, help=opt.help, rich_help_panel=PANEL)
        return inspect.Parameter(opt.name, inspect.Parameter.KEYWORD_ONLY, default=False,
                                 annotation=Annotated[bool, info])
    help_text = opt.help
    if opt.default is not None and "[default" not in help_text:
        help_text += f" [default: {opt.default}]"
    kwargs: dict[str, Any] = dict(help=help_text, rich_help_panel=PANEL, show_default=False)
    value_type: Any = opt.type
    if opt.choices:
        # A str, not a Typer choice: Typer refused `--task reviews.csv`, `--task imbd` or `--precision fp61` as "Value
        # error, ... is not one of ..." with no way on; the trainer's own check (config.unknown_task,
        # config.did_you_mean) says what to give instead, in one line. --help lists the names and the shell completes
        # them, as for a choice.
        kwargs["metavar"] = f"<{'|'.join(opt.choices)}>"
        kwargs["autocompletion"] = _completer(opt.choices)
    elif opt.metavar:
        kwargs["metavar"] = opt.metavar
    info = typer.Option(opt.flag, **kwargs)
    return inspect.Parameter(opt.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=Annotated[Optional[value_type], info])  # noqa: UP045 - typer needs it


def _completer(choices: Sequence[str]) -> Callable[[str], list[str]]:
    def complete(incomplete: str) -> list[str]:
        # (Typer reads this function's parameter names and annotations: a partial or a lambda will not do)
        return [name for name in choices if name.startswith(incomplete)]

    return complete


def with_option_group(arg: str, group: list[inspect.Parameter]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator: `command` gets the options in `group` after its own, and receives their values as one dict
    argument named `arg`."""
    names = frozenset(p.name for p in group)

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        # eval_str: the command module may use `from __future__ import annotations` (string annotations)
        own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != arg]
        params = own + group

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            values = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
            return command(**{arg: values}, **kwargs)

        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]  # read by inspect/typer
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        del wrapper.__wrapped__  # typer must read the new signature, not the original one
        return wrapper

    return decorate


def with_trainer_options(command: Callable[..., Any] | None = None, *,
                         exclude: frozenset[str] = frozenset()) -> Callable[..., Any]:
    """Give `command` every trainer option (but `exclude`, and those ftcli tune sets); it receives them as one dict
    argument `trainer`."""
    if command is None:
        return functools.partial(with_trainer_options, exclude=exclude)
    return with_option_group("trainer", [_parameter(o) for o in OPTIONS if o.name not in exclude | SET_BY_TUNE])(
        command)


TRAINER_HELP = "see --help for the trainer options"  # (the hint of a problem that says its own fix, or of several)


def validate(values: dict[str, Any]) -> tuple[TrainConfig, list[str]]:
    """Check the trainer options as the trainer will (every problem at once); return the resolved
    config and the argv that reproduces the given values."""
    from ftcli.errors import UsageError

    given = {k: v for k, v in values.items() if v is not None}  # (to_argv leaves out a switch at its default)
    try:
        cfg = resolve(dict(given))
    except ConfigError as e:
        n = len(e.problems)
        raise UsageError(
            str(e.problems[0]) if n == 1 else f"{n} problems with the trainer options:",
            hint=(n == 1 and hint_of(e.problems[0])) or TRAINER_HELP,
            problems=[with_fix(p) for p in e.problems] if n > 1 else None,
        ) from None
    return cfg, to_argv(given)
