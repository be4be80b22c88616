"""The `cost:` lines `train` and `tune` print before anything is uploaded: the bill's shape always, the dollar
amounts when the user's price file has the rates (ftcli.prices)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from ftcli.catalog import Estimate
    from ftcli.prices import Spent


def provisioning(job: dict) -> str | None:
    """"Spot", "Flex-start" or "Reservation" from the job options (--spot, --flex-start, --reservation); None:
    on-demand."""
    if job.get("spot"):
        return "Spot"
    if job.get("flex_start"):
        return "Flex-start"
    return "Reservation" if job.get("reservation") else None


def cost_lines(cost: Estimate, timeout: str, *, discounted: str | None, label: str = "", trials: int | None = None,
               parallel: int | None = None) -> list[str]:
    """`cost` is a catalog.Estimate for one job (one trial of a tuning job: then `trials` of them, `parallel` at
    a time). `discounted`: "Spot" or "Flex-start", billed below the on-demand rates, which are then only a ceiling
    (prices.billed_note)."""
    from ftcli.catalog import PRICE_PAGE

    head = f"cost{f' ({label})' if label else ''}: "
    pad = " " * 6
    if trials:
        at_once = min(parallel or 1, trials)
        of = f"{trials} trial{'' if trials == 1 else 's'}"  # ("1 trials of at most 24h" for --trials 1)
        lines = [f"{head}each trial {cost.shape}, {at_once} at a time, {of} of at most {timeout} "
                 f"(--timeout)" + (f": up to {_hours(cost.gpu_hours * trials)} GPU-hours" if cost.gpu_hours else "")]
    else:
        at_once = 1
        lines = [f"{head}{cost.shape} for at most {timeout} (--timeout)"
                 + (f": up to {_hours(cost.gpu_hours)} GPU-hours" if cost.gpu_hours else "")]
    if cost.per_hour is None:
        lines.append(f"{pad}no dollar amounts: {cost.missing}. Rates: {PRICE_PAGE} (put yours in a price file: "
                     "README 'What a job costs')")
        return lines
    from ftcli.prices import billed_note, on_demand_amount

    t = cost.table
    assert t is not None and cost.at_most is not None  # (an estimate with an hourly amount has its table)
    if discounted == "Reservation":  # another bill (prices.billed_note)
        rates = f"on-demand rates, not this job's bill: {billed_note(discounted)}; "
    elif discounted:
        rates = f"on-demand rates, a ceiling: {billed_note(discounted)}; "
    else:
        rates = "on-demand rates: "
    # The hourly rate reads as any amount at these rates does (on_demand_amount). The total is --timeout's bound: "at
    # most" on demand; where the rate already says "at most" (or is another bill), the amount "in all".
    most = "" if discounted else "at most "
    if trials:
        amount = (f"{on_demand_amount(cost.per_hour * at_once, discounted)} an hour with {at_once} running, "
                  f"{most}${cost.at_most * trials:,.2f} for {of}")
    else:
        amount = (f"{on_demand_amount(cost.per_hour, discounted)} an hour, {most}${cost.at_most:,.2f}"
                  + (" in all" if discounted else ""))
    lines.append(f"{pad}{amount} ({rates}{t.region} rates from {t.source}, read {t.read})")
    return lines


def _hours(hours: float) -> str:
    """GPU-hours as a person reads them: whole from 10 on, two significant digits below (a 30m T4 job is 0.5
    GPU-hours, not 0; 90m is 1.5, not 2)."""
    return f"{hours:,.0f}" if hours >= 10 else f"{hours:.2g}"


def say_cost(cost: Estimate, timeout: str, *, discounted: str | None, label: str = "", trials: int | None = None,
             parallel: int | None = None) -> None:
    from ftcli.output import err

    for line in cost_lines(cost, timeout, discounted=discounted, label=label, trials=trials, parallel=parallel):
        err().print(line, markup=False, highlight=False)


def spent_or_warning(spent_and_why: Callable[[], tuple[Spent | None, str | None]]) -> tuple[Spent | None, str | None]:
    """`spent_and_why()` (a prices.job_cost or tuning_cost call); a broken price file is a warning and no amount: it
    never stops a job being followed, shown or its cancel reported."""
    from ftcli.errors import FtcliError
    from ftcli.output import warn

    try:
        return spent_and_why()
    except FtcliError as e:
        warn(e.message, e.hint)
        return None, None


def say_spent(spent_and_why: Callable[[], tuple[Spent | None, str | None]], template: str,
              err: Console | None = None) -> None:
    """At the end of a followed job: what it cost at the user's rates (`spent_and_why`: a prices.job_cost or
    tuning_cost call), printed from `template` ({ran}, {amount}: 'about $X' or, for Spot and Flex-start, 'at most
    $X', {region}, {per_hour}, {billed}: Spent.ceiling_note); nothing without rates (spent_or_warning)."""
    from ftcli.output import err as stderr
    from ftcli.output import span

    spent, _ = spent_or_warning(spent_and_why)
    if spent is not None:
        (err or stderr()).print(template.format(ran=span(spent.hours * 3600), amount=spent.shown,
                                                region=spent.table.region, per_hour=f"${spent.per_hour:,.2f}",
                                                billed=spent.ceiling_note),
                                markup=False, highlight=False)
