"""`ftcli jobs list | describe | cancel`."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ftcli.cli.options import JobArg, JsonOpt, ProjectOpt, RegionOpt

app = typer.Typer(help="List, describe and cancel Vertex AI training jobs.", no_args_is_help=True)


def resolve_job(ref: str, project: str | None, region: str | None):
    """(gateway, full job name) for a job reference; the gateway talks to the job's own region."""
    from ftcli import history
    from ftcli.gcp.vertex import get_vertex
    from ftcli.settings import resolve

    name = None
    if not (ref.isdigit() and len(ref) >= 9):
        name = history.resolve(ref)
    if name is None:
        s = resolve(project=project, region=region, need_bucket=False)
        name = history.resolve(ref, s.project, s.region)
    parts = name.split("/")
    return get_vertex(parts[1], parts[3]), name


def _state(job) -> str:
    return job.state.name.removeprefix("JOB_STATE_")


def _gpu(job) -> str:
    pools = job.job_spec.worker_pool_specs
    if not pools:
        return "-"
    m = pools[0].machine_spec
    acc = m.accelerator_type.name if m.accelerator_count else ""
    return f"{acc.removeprefix('NVIDIA_').removeprefix('TESLA_')}x{m.accelerator_count}" if acc else m.machine_type


@app.command("list")
def list_jobs(
    project: ProjectOpt = None,
    region: RegionOpt = None,
    all_jobs: Annotated[bool, typer.Option("--all", help="Every CustomJob, not only ftcli's.")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many (newest first).")] = 20,
    json_out: JsonOpt = False,
) -> None:
    """List recent training jobs (newest first).

    Example: ftcli jobs list --limit 5
    """
    from ftcli import history
    from ftcli.gcp.vertex import get_vertex, job_to_dict
    from ftcli.output import out
    from ftcli.settings import resolve
    from ftcli.spec import CREATED_BY_LABEL

    s = resolve(project=project, region=region, need_bucket=False)
    mine = f'labels.{CREATED_BY_LABEL}="ftcli"'
    jobs = get_vertex(s.project, s.region).list(filter="" if all_jobs else mine, limit=limit)
    if json_out:
        for job in jobs:
            print(json.dumps({"short_id": history.short_id(job.name), **job_to_dict(job)}))
        return
    if not jobs:
        out().print(f"no {'' if all_jobs else 'ftcli '}jobs in {s.project}/{s.region}")
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("#", "ID", "NAME", "STATE", "HARDWARE", "CREATED"):
        table.add_column(col)
    for job in jobs:
        n = history.short_id(job.name)
        created = job.create_time.strftime("%Y-%m-%d %H:%M") if job.create_time else "-"
        table.add_row(str(n or ""), job.name.rsplit("/", 1)[-1], job.display_name, _state(job), _gpu(job), created)
    out().print(table)


@app.command("describe")
def describe(job: JobArg, project: ProjectOpt = None, region: RegionOpt = None, json_out: JsonOpt = False) -> None:
    """Show a job: state, hardware, times, output folder, error.

    Example: ftcli jobs describe last
    """
    from ftcli.gcp.vertex import console_url, job_to_dict
    from ftcli.output import out

    gateway, name = resolve_job(job, project, region)
    j = gateway.get(name)
    if json_out:
        print(json.dumps(job_to_dict(j), indent=2))
        return
    o = out()
    o.print(f"[bold]{j.display_name}[/]  {_state(j)}")
    o.print(f"  name      {j.name}")
    o.print(f"  hardware  {_gpu(j)} on {j.job_spec.worker_pool_specs[0].machine_spec.machine_type}"
            if j.job_spec.worker_pool_specs else "  hardware  -")
    for label, t in (("created", j.create_time), ("started", j.start_time), ("ended", j.end_time)):
        if t:
            o.print(f"  {label:9} {t.isoformat(timespec='seconds')}")
    if j.job_spec.base_output_directory.output_uri_prefix:
        o.print(f"  output    {j.job_spec.base_output_directory.output_uri_prefix}")
    if j.error.message:
        o.print(f"  [red]error[/]     {j.error.message}")
    o.print(f"  console   {console_url(j.name)}")


@app.command("cancel")
def cancel(
    job: JobArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    project: ProjectOpt = None,
    region: RegionOpt = None,
) -> None:
    """Cancel a job (asks first on a terminal).

    Example: ftcli jobs cancel 3 --yes
    """
    from ftcli.output import err, out

    gateway, name = resolve_job(job, project, region)
    if not yes and sys.stdin.isatty():
        j = gateway.get(name)
        if not typer.confirm(f"cancel {j.display_name} ({_state(j)})?", default=False, err=True):
            err().print("not cancelled")
            raise typer.Exit(1)
    gateway.cancel(name)
    out().print(f"cancel requested for {name}")
