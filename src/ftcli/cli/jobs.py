"""`ftcli jobs list | describe | cancel`: parse, call `ftcli.jobs`, render (a table, or --json)."""

from __future__ import annotations

import datetime as dt
import sys
from typing import Annotated

import typer

from ftcli.cli.options import JobArg, JsonOpt, ProjectOpt, RegionOpt

app = typer.Typer(help="List, describe and cancel Vertex AI training jobs.", no_args_is_help=True)


def _since(iso: str | None, now: dt.datetime) -> float | None:
    return (now - dt.datetime.fromisoformat(iso)).total_seconds() if iso else None


def _metric(row: dict) -> str:
    m = row.get("metric")
    return f"{m['name']} {m['value']:.3f}" if m else "-"


def _columns(now: dt.datetime):
    from ftcli.output import Column, age, span

    return (
        Column("JOB", lambda r: str(r["short_id"]) if r["short_id"] else r["id"], shrink=False),
        Column("STATE", lambda r: r["state"], shrink=False),
        Column("TASK", lambda r: r["task"] or "-", max_width=12),
        Column("MODEL", lambda r: r["model"] or "-", max_width=22),
        Column("GPU", lambda r: r["gpu"] or "cpu", max_width=10),
        Column("AGE", lambda r: age(_since(r["created"], now)), justify="right"),
        Column("TIME", lambda r: span(r["duration_s"]), justify="right"),
        Column("METRIC", _metric, max_width=16),
    )


@app.command("list")
def list_jobs(
    project: ProjectOpt = None,
    region: RegionOpt = None,
    all_jobs: Annotated[bool, typer.Option("--all", help="Every CustomJob, not only ftcli's.")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many (newest first).")] = 20,
    json_out: JsonOpt = False,
) -> None:
    """List recent training jobs (newest first): short id, state, task, model, GPU, age, run time, and the
    headline metric of finished jobs (from their metrics.json).

    JOB is the short id to use with the other commands (the numeric id for jobs not submitted from here).
    --json prints one JSON object per job.

    Example: ftcli jobs list --limit 5
    """
    from ftcli import jobs
    from ftcli.output import note, show_list, warn
    from ftcli.settings import resolve

    s = resolve(project=project, region=region, need_bucket=False)
    listing = jobs.list_jobs(s.project, s.region, all_jobs=all_jobs, limit=limit, notify=note)
    now = dt.datetime.now(dt.UTC)
    rows = [jobs.record(j, listing.short_ids.get(j.name), listing.metrics.get(j.name), now) for j in listing.jobs]
    for problem in listing.problems:
        warn(problem)
    show_list(rows, _columns(now), json_out=json_out,
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
    from ftcli import jobs
    from ftcli.output import escape, note, show_one, span

    name = jobs.resolve(job, project, region)
    j, metrics = jobs.describe(name, notify=note)
    row = {**jobs.record(j, jobs.short_id(name), metrics),
           "metrics": jobs.scalar_metrics(metrics), "resource": dict(j.resource)}

    def hardware(r: dict) -> str:
        more = f", {r['machines']} machines" if r["machines"] > 1 else ""
        return f"{r['hardware']}{more}" if r["hardware"] else ""

    def when(key: str):
        return lambda r: r[key].replace("T", " ") if r[key] else None

    fields = (
        ("job", lambda r: f"#{r['short_id']} · {r['name']}" if r["short_id"] else r["name"]),
        ("hardware", hardware),
        ("task", lambda r: " · ".join(x for x in (r["task"], r["model"] and f"model {r['model']}") if x)),
        ("created", when("created")),
        ("started", when("started")),
        ("ended", when("ended")),
        ("run time", lambda r: span(r["duration_s"]) if r["duration_s"] is not None else None),
        ("output", lambda r: r["output_dir"]),
        ("metrics", lambda r: _metrics_line(r["metrics"])),
        ("error", lambda r: r["error"]),
        ("console", lambda r: r["console_url"]),
    )
    show_one(row, fields, json_out=json_out, title=f"[bold]{escape(j.display_name)}[/]  {j.state}")


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

    name = jobs.resolve(job, project, region)
    n = jobs.short_id(name)
    shown = jobs.label(name, n)
    gateway = jobs.vertex_for(name, notify=note)
    j = gateway.get(name)
    jobs.check_cancellable(j, shown)
    if not yes and sys.stdin.isatty():
        if not typer.confirm(f"cancel job {shown}, {j.display_name} ({j.state})?", default=False, err=True):
            err().print("not cancelled")
            raise typer.Exit(1)
    j = jobs.cancel(gateway, j, shown)
    if json_out:
        show_one(jobs.record(j, n), (), json_out=True)
        return
    out().print(f"cancel requested for job {shown} ({name.id}); it is {j.state}")
