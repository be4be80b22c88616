"""`ftcli jobs list | describe | cancel`: parse, call `ftcli.jobs`, render (a table, or --json)."""

from __future__ import annotations

import contextlib
import datetime as dt
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from ftcli.cli.cost import spent_or_warning
from ftcli.cli.options import JobArg, JsonOpt, ProjectOpt, RegionOpt

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from ftcli.output import Column
    from ftcli.prices import Spent
    from ftcli.values import JobName, TuningName

# The group's examples are its commands' own (tests/cli/test_help.py holds them to that), so `ftcli jobs -h` shows
# what to type as every command's -h does (README: "Every command takes -h/--help (with examples)").
app = typer.Typer(help="List, describe and cancel Vertex AI training jobs.\n\n"
                       "Examples:\n\n"
                       "  ftcli jobs list --limit 5\n\n"
                       "  ftcli jobs describe last\n\n"
                       "  ftcli jobs cancel 3 --yes", no_args_is_help=True)


def _since(iso: str | None, now: dt.datetime) -> float | None:
    return (now - dt.datetime.fromisoformat(iso)).total_seconds() if iso else None


METRIC_WIDTH = 16


def _metric(row: dict) -> str:
    from ftcli.jobs import metric_label

    m = row.get("metric")  # its name as metrics.json spells it; the table's short spelling (acc, MCC) is drawn here
    if not m:
        return "-"
    name, value = metric_label(m["name"]), f"{m['value']:.3f}"
    # At most 16 wide, as the column was: a long name (a trainer's own primary_metric) is cut, never the number.
    room = max(METRIC_WIDTH - len(value) - 1, 2)
    return f"{name if len(name) <= room else name[:room - 1] + '…'} {value}"


def _columns(now: dt.datetime, cost: bool = False) -> tuple[Column, ...]:
    from ftcli.output import Column, age, span

    # The numbers, the GPU and the metric are never cut (`acc 0.4…` for 0.400, `L4…`): the model, then the task,
    # shrink, and drop out of a terminal too narrow for them (a 19-digit job id and a COST column at 80 columns).
    return (
        Column("JOB", lambda r: str(r["short_id"]) if r["short_id"] else r["id"], shrink=False),
        Column("STATE", lambda r: r["state"], shrink=False),
        Column("TASK", lambda r: ("tune:" if r.get("kind") == "tune" else "") + (r["task"] or "-"), max_width=14,
               drop=2),
        Column("MODEL", lambda r: r["model"] or "-", max_width=15 if cost else 22, drop=1),  # COST's 7 from its 22
        Column("GPU", lambda r: r["gpu"] or "cpu", shrink=False),
        Column("AGE", lambda r: age(_since(r["created"], now)), justify="right", shrink=False),
        Column("TIME", lambda r: span(r["duration_s"]), justify="right", shrink=False),
        *([Column("COST", _cost_cell, justify="right", shrink=False)] if cost else []),
        Column("METRIC", _metric, shrink=False),
    )


def _cost_cell(row: dict) -> str:
    """$1.25 (on-demand), ≤$1.25 (Spot, Flex-start: the on-demand amount is a ceiling), - (no rate; or a reservation's
    job, billed by Compute Engine for the reservation, not at these rates: `describe` says so)."""
    if row["cost_usd"] is not None:
        return f"${row['cost_usd']:,.2f}"
    if row["cost_usd_on_demand"] is None or row.get("provisioning") == "Reservation":
        return "-"
    return f"≤${row['cost_usd_on_demand']:,.2f}"


def _add_costs(rows: list[dict], costs: Iterable[tuple[Spent | None, str | None]]) -> None:
    """Each row's `cost_usd` and `cost_usd_on_demand` (None: no rate for it, or not started) from `costs`, the rows'
    prices.job_cost/tuning_cost results, in order. A broken price file is one warning: the list goes without costs."""
    from ftcli.errors import FtcliError
    from ftcli.output import warn

    try:
        spent = [s for s, _ in costs]
    except FtcliError as e:
        warn(e.message, e.hint)
        spent = [None] * len(rows)
    for row, s in zip(rows, spent, strict=True):
        row.update(_cost_usd(s))


def _cost_usd(spent: Spent | None) -> dict:
    """The --json cost keys: `cost_usd`, what the job has cost at the price file's rates, only for an on-demand job
    (the rates are on-demand ones); `cost_usd_on_demand`, the same hours at on-demand rates, for every job (for a
    Spot or Flex-start job, a ceiling: prices.billed_note). None where the file has no rate, or no price file."""
    if spent is None:
        return {"cost_usd": None, "cost_usd_on_demand": None}
    billed = spent.billed_usd
    return {"cost_usd": None if billed is None else round(billed, 4), "cost_usd_on_demand": round(spent.amount, 4)}


@app.command("list")
def list_jobs(
    project: ProjectOpt = None,
    region: RegionOpt = None,
    all_jobs: Annotated[bool, typer.Option("--all", help="Every CustomJob, not only ftcli's.")] = False,
    limit: Annotated[int, typer.Option("--limit", metavar="N", help="At most this many, newest first (1 or more).")
                     ] = 20,
    json_out: JsonOpt = False,
) -> None:
    """List recent training jobs (newest first): short id, state, task, model, GPU, age, run time, what each has
    cost at your rates (a COST column where prices.toml has a rate), and the headline metric of finished jobs
    (from their metrics.json).

    JOB is the short id to use with the other commands (the numeric id for jobs not submitted from here).
    --json prints one JSON object per job.

    Example: ftcli jobs list --limit 5
    """
    from ftcli import jobs
    from ftcli.errors import UsageError
    from ftcli.output import note, show_list, warn
    from ftcli.settings import resolve

    if limit < 1:  # (Click's own range check wrote "[default: 20; x>=1]" in the help and "the range x>=1" here)
        raise UsageError(f"--limit {limit}: give 1 or more", hint="ftcli jobs list --limit 5 lists the 5 newest")
    s = resolve(project=project, region=region, need_bucket=False)
    listing = jobs.list_jobs(s.project, s.region, all_jobs=all_jobs, limit=limit, notify=note)
    now = dt.datetime.now(dt.UTC)
    from itertools import chain

    from ftcli import prices, tuning

    rows = [jobs.record(j, listing.short_ids.get(j.name), listing.metrics.get(j.name), now) for j in listing.jobs]
    rows += [tuning.record(t, listing.tuning_ids.get(t.name), now) for t in listing.tuning]
    _add_costs(rows, chain((prices.job_cost(j, now) for j in listing.jobs),
                           (prices.tuning_cost(t, now) for t in listing.tuning)))
    rows = sorted(rows, key=lambda r: r["created"] or "", reverse=True)[:limit]
    for problem in listing.problems:
        warn(problem)
    cost = any(r["cost_usd_on_demand"] is not None for r in rows)  # else the table needs no COST column
    show_list(rows, _columns(now, cost=cost), json_out=json_out,
              empty=f"no {'' if all_jobs else 'ftcli '}jobs in {s.project}/{s.region}")


def _metrics_line(metrics: dict) -> str:
    from ftcli.jobs import scalar_metrics

    shown = {k: v for k, v in scalar_metrics(metrics).items() if k.startswith("eval_")}
    return " · ".join(f"{k.removeprefix('eval_')} {v:.4g}" for k, v in shown.items())


@app.command("describe")
def describe(job: JobArg, project: ProjectOpt = None, region: RegionOpt = None, json_out: JsonOpt = False) -> None:
    """Show a job: state, GPU and machine, times, output folder, metrics, error.

    --json prints one JSON object: the fields of `jobs list --json`, every number of its metrics.json, and the
    job's full resource as Vertex returns it ("resource").

    Example: ftcli jobs describe last
    """
    from ftcli import jobs, prices
    from ftcli.cli.watch import project_id, waiting_for
    from ftcli.follow import error_parts, said_error
    from ftcli.output import escape, note, show_one, span
    from ftcli.values import WAITING_STATES, TuningName

    name = jobs.resolve_any(job, project, region)
    if isinstance(name, TuningName):
        _describe_tuning(name, json_out)
        return
    j, metrics = jobs.describe(name, notify=note)
    n = jobs.short_id(name)
    shown = jobs.label(name, n)
    spent, why = spent_or_warning(lambda: prices.job_cost(j))
    row = {**jobs.record(j, n, metrics),
           "metrics": jobs.scalar_metrics(metrics), "resource": dict(j.resource), **_cost_usd(spent)}

    def hardware(r: dict) -> str:
        more = f", {r['machines']} machines" if r["machines"] > 1 else ""
        return f"{r['hardware']}{more}" if r["hardware"] else ""

    def when(key: str) -> Callable[[dict], str | None]:
        return lambda r: r[key].replace("T", " ") if r[key] else None

    fields = (
        ("job", lambda r: f"#{r['short_id']} · {r['name']}" if r["short_id"] else r["name"]),
        ("hardware", hardware),
        ("task", lambda r: " · ".join(x for x in (r["task"], r["model"] and f"model {r['model']}") if x)),
        # what a job that has not started waits for, as `ftcli logs` says it: the state alone left a QUEUED job's
        # quota, a Flex-start job's day, unsaid
        ("waiting", lambda r: waiting_for(r["state"], r["provisioning"], project_id(name.project))
         if r["state"] in WAITING_STATES else None),
        ("created", when("created")),
        ("started", when("started")),
        ("ended", when("ended")),
        ("run time", lambda r: span(r["duration_s"]) if r["duration_s"] is not None else None),
        ("cost", lambda r: _spent_line(spent, why, span)),
        ("output", lambda r: r["output_dir"]),
        ("weights", lambda r: jobs.kept_step(metrics)),
        ("metrics", lambda r: _metrics_line(r["metrics"])),
        # the first line: Vertex's error of a failed replica goes on with its traceback and a link (--json has it
        # all); the job's own last lines are in its logs, which a job that never started (a Flex-start job past its
        # maximum wait, one cancelled while queued) does not have
        ("error", lambda r: said_error(r["state"], r["error"]) and f"{error_parts(r['error'])[0]}" + (
            f" (its last lines: ftcli logs {shown} --no-follow)" if r["started"] else "")),
        ("console", lambda r: r["console_url"]),
    )
    show_one(row, fields, json_out=json_out, title=f"[bold]{escape(j.display_name)}[/]  {j.state}")


def _spent_line(spent: Spent | None, why: str | None, span: Callable[[float | None], str], of: str = ""
                ) -> str | None:
    """The cost row: the amount at the user's rates, why the price file gives none, or nothing (no price file, not
    started)."""
    if spent is None:
        return f"no amount: {why}" if why else None
    t = spent.table
    return (f"{spent.shown} ({span(spent.hours * 3600)}{f' {of}' if of else ''} at "
            f"${spent.per_hour:,.2f} an hour, on-demand{spent.ceiling_note}; {t.region} rates from {t.source}, read "
            f"{t.read})")


def _describe_tuning(name: TuningName, json_out: bool) -> None:
    """A tuning job: the study, and its trials best first."""
    from ftcli import jobs, prices, tuning
    from ftcli.cli.watch import project_id, tuning_waiting_for
    from ftcli.follow import error_parts, said_error
    from ftcli.output import Column, escape, note, out, show_list, show_one, span

    tj = tuning.get(name, note)
    spent, why = spent_or_warning(lambda: prices.tuning_cost(tj))
    row = {**tuning.record(tj, jobs.short_id(name)), "resource": dict(tj.resource), **_cost_usd(spent)}
    if json_out:
        show_one(row, (), json_out=True)
        return
    study = row["study"]
    fields = (
        ("tuning job", lambda r: f"#{r['short_id']} · {r['name']}" if r["short_id"] else r["name"]),
        ("study", lambda r: f"{study['goal'].lower()} {study['metric']} · {len(r['trials'])}/{study['max_trials']} "
                            f"trials, {study['parallel']} at a time"),
        ("hardware", lambda r: r["hardware"]),
        ("task", lambda r: " · ".join(x for x in (r["task"], r["model"] and f"model {r['model']}") if x)),
        ("waiting", lambda r: tuning_waiting_for(r["state"], tj.provisioning, project_id(name.project))),
        ("best", lambda r: f"trial {r['best_trial']}: {r['metric']['value']:.4f}" if r["best_trial"] else None),
        ("cost", lambda r: _spent_line(spent, why, span, "of trials")),
        ("output", lambda r: r["output_dir"] and f"{r['output_dir']}/TRIAL_ID/model/"),
        ("error", lambda r: said_error(r["state"], r["error"])),
        ("console", lambda r: r["console_url"]),
    )
    show_one(row, fields, json_out=False, title=f"[bold]{escape(tj.display_name)}[/]  {tj.state}")
    params = list(dict.fromkeys(k for t in row["trials"] for k in t["params"]))
    columns = [Column("TRIAL", lambda t: t["id"], shrink=False), Column("STATE", lambda t: t["state"], shrink=False),
               Column(jobs.metric_label(study["metric"]).upper(),
                      lambda t: "-" if t["value"] is None else f"{t['value']:.4f}", justify="right",
                      shrink=False)]  # a number: never cut (0.8… at a narrow terminal), as jobs list's METRIC
    columns += [_param_column(p) for p in params]
    if row["trials"]:
        out().print()
        show_list(row["trials"], columns, json_out=False)
    for t in row["trials"]:  # why a trial is INFEASIBLE (Vertex's infeasible_reason): the study's error never says
        if t["error"]:
            out().print(f"trial {t['id']}: {error_parts(t['error'])[0]}", markup=False, highlight=False)


def _param_column(name: str) -> Column:
    from ftcli.output import Column

    return Column(name.upper()[:16], lambda t: _param(t["params"].get(name)), justify="right")


def _param(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else f"{v:.3g}"
    return str(v)


def _on_a_terminal() -> bool:
    """Whether a person can answer a question: stdin is a terminal. A closed stdin (`<&-`, some daemons) leaves
    sys.stdin None, which `sys.stdin.isatty()` turned into an AttributeError traceback."""
    return sys.stdin is not None and sys.stdin.isatty()


@app.command("cancel")
def cancel(
    job: JobArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    project: ProjectOpt = None,
    region: RegionOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Cancel a job (asks first on a terminal). A job that has already ended is one line, exit 1.

    Example: ftcli jobs cancel 3 --yes
    """
    from ftcli import jobs
    from ftcli.output import err, note, out, show_one
    from ftcli.values import TuningName

    name = jobs.resolve_any(job, project, region)
    n = jobs.short_id(name)
    shown = jobs.label(name, n)
    if isinstance(name, TuningName):
        _cancel_tuning(name, shown, yes=yes, json_out=json_out)
        return
    gateway = jobs.vertex_for(name, notify=note)
    j = gateway.get(name)
    jobs.check_cancellable(j, shown)
    if not yes and _on_a_terminal():
        if not typer.confirm(f"cancel job {shown}, {j.display_name} ({j.state})?", default=False, err=True):
            err().print("not cancelled")
            raise typer.Exit(1)
    with _said_if_interrupted_once_sent(name, n) as sent:
        j = jobs.cancel(gateway, j, shown, sent)
        if json_out:  # the fields of jobs list --json, what it has cost so far included
            from ftcli import prices

            spent, _ = spent_or_warning(lambda: prices.job_cost(j))
            show_one({**jobs.record(j, n), **_cost_usd(spent)}, (), json_out=True)
            return
    out().print(f"cancel requested for job {shown} ({name.id}); it is {j.state}")


@contextlib.contextmanager
def _said_if_interrupted_once_sent(name: JobName | TuningName, n: int | None) -> Iterator[Callable[[], None]]:
    """Around a cancel: a Ctrl-C after Vertex took the request (while the job is read again, or its cost worked out)
    said only "interrupted", and nobody could tell whether the job was being cancelled. It is said, on stderr; stdout
    stays empty, --json too: the job ends without the script's help, so nothing is left for it to act on (README,
    --json: an interruption prints an object only where it leaves something to act on). Before Vertex answered, the
    request may or may not have been taken: said so, with where to look. SIGTERM and SIGHUP (a CI step's timeout, a
    closed terminal) are said as Ctrl-C is (they killed ftcli without a word), exit 128 + the signal."""
    from ftcli.cli.watch import stop_signals_interrupt
    from ftcli.output import say_last
    from ftcli.values import TuningName

    taken: list[bool] = []
    got: list[int] = []
    try:
        with stop_signals_interrupt() as got:
            yield lambda: taken.append(True)
    except KeyboardInterrupt:
        what = "tuning job" if isinstance(name, TuningName) else "job"
        ref = str(n) if n else name.full
        job = f"{what} {f'#{n} ' if n else ''}{name.id}"
        said = (f"the cancel of {job} was requested ({name.full}). Its state" if taken else
                f"before Vertex answered the cancel of {job} ({name.full}); whether it was taken")
        say_last(f"\ninterrupted; {said}: ftcli jobs describe {ref}")
        raise typer.Exit(128 + got[0] if got else 130) from None


def _cancel_tuning(name: TuningName, shown: str, *, yes: bool, json_out: bool) -> None:
    from ftcli import jobs, tuning
    from ftcli.output import err, note, out, show_one

    tj = tuning.get(name, note)
    jobs.check_cancellable(tj, shown)
    if not yes and _on_a_terminal():
        if not typer.confirm(f"cancel tuning job {shown}, {tj.display_name} ({tj.state})?", default=False, err=True):
            err().print("not cancelled")
            raise typer.Exit(1)
    with _said_if_interrupted_once_sent(name, jobs.short_id(name)) as sent:
        tj = jobs.cancel_tuning(tj, shown, notify=note, sent=sent)
        if json_out:
            from ftcli import prices

            spent, _ = spent_or_warning(lambda: prices.tuning_cost(tj))
            show_one({**tuning.record(tj, jobs.short_id(name)), **_cost_usd(spent)}, (), json_out=True)
            return
    out().print(f"cancel requested for tuning job {shown} ({name.id}); it is {tj.state}")
