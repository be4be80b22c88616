"""`ftcli logs JOB`: stream a job's logs until it ends; exit with the job's status."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from typing import Annotated, Optional

import typer

from ftcli.cli.options import JobArg, JsonOpt, ProjectOpt, RegionOpt
from ftcli.errors import UsageError

SINCE_RE = re.compile(r"^(\d+)([smhd])$")
SEVERITIES = ("DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL")
EXIT_FOR_STATE = {"SUCCEEDED": 0, "FAILED": 3, "CANCELLED": 4, "EXPIRED": 3, "PARTIALLY_SUCCEEDED": 3}


def parse_since(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    m = SINCE_RE.match(value.strip())
    if m:
        seconds = int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
        return dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--since takes a duration (10m, 2h, 1d) or an ISO time, got {value!r}") from None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def replica_names(job) -> list[str]:
    """workerpool{i}-{j} for every replica of every worker pool: the task_name Vertex logs them under."""
    return [f"workerpool{i}-{j}" for i, pool in enumerate(job.job_spec.worker_pool_specs)
            for j in range(int(pool.replica_count or 0))]


def follow_job(ref: str, *, project: str | None = None, region: str | None = None, follow: bool = True,
               replica: str | None = None, since: str | None = None, severity: str | None = None,
               json_out: bool = False) -> int:
    """Shared by `ftcli logs` and `ftcli train --follow`; returns the exit status."""
    from rich.markup import escape

    from ftcli import history
    from ftcli.cli.jobs import resolve_job
    from ftcli.follow import Follower, Line
    from ftcli.gcp.cloud_logging import get_logging
    from ftcli.output import err, out

    if severity and severity.upper() not in SEVERITIES:
        raise UsageError(f"--severity must be one of {', '.join(SEVERITIES)}, got {severity!r}")
    start = parse_since(since)
    gateway, name = resolve_job(ref, project, region)
    job_project, job_id = name.split("/")[1], history.job_id(name)
    n = history.short_id(name)
    ref_shown = str(n) if n else job_id
    job = gateway.get(name)
    replicas = replica_names(job)
    if replica and replica not in replicas:
        raise UsageError(f"--replica {replica} matches no replica of job {ref_shown}",
                         hint=f"its replicas: {', '.join(replicas) or 'none listed'}")
    multi = len(replicas) > 1
    o = out()
    colors = {"WARNING": "yellow", "ERROR": "red", "CRITICAL": "bold red"}

    def emit(line: Line) -> None:
        if json_out:
            print(json.dumps({"timestamp": line.timestamp.isoformat(), "replica": line.replica,
                              "severity": line.severity, "text": line.text, "insert_id": line.insert_id}),
                  flush=True)
            return
        t = line.timestamp.astimezone().strftime("%H:%M:%S")
        who = f" [cyan]{escape(line.replica)}[/]" if multi and line.replica else ""
        sev = f" [{colors[line.severity]}]{line.severity}[/]" if line.severity in colors else ""
        o.print(f"[dim]{t}[/]{who}{sev} {escape(line.text)}")

    def on_notice(notice) -> None:
        if json_out:
            print(json.dumps({"event": "logs_unavailable", "reason": notice.reason, "message": notice.message,
                              "hint": notice.hint}), flush=True)
        hint = f" [dim]hint: {escape(notice.hint)}[/]" if notice.hint else ""
        err().print(f"[yellow]warning:[/] {escape(notice.message)}{hint}")

    def on_state(state: str, error: str | None) -> None:
        if json_out:
            print(json.dumps({"event": "state", "state": state, "error": error}), flush=True)
        else:
            err().print(f"[bold]job {ref_shown}: {state}[/]")

    # FTCLI_LOGS_INTERVAL scales every wait (state re-read, re-ordering, draining): the tests run it fast.
    scale = float(os.environ.get("FTCLI_LOGS_INTERVAL", "1"))
    follower = Follower(logs=get_logging(job_project), get_job=lambda: gateway.get(name), job_id=job_id, emit=emit,
                        on_state=on_state, on_notice=on_notice, replica=replica, severity=severity, since=start,
                        state_interval=3.0 * scale, reorder_delay=1.0 * scale, drain_quiet=3.0 * scale,
                        poll_interval=2.0 * scale, quota_interval=5.0 * scale, max_interval=60.0 * scale)
    if not follow:
        follower.snapshot()
        return 0
    try:
        state = follower.run()
    except KeyboardInterrupt:
        err().print(f"\ndetached; the job keeps running. Re-attach: ftcli logs {ref_shown}   "
                    f"cancel: ftcli jobs cancel {ref_shown}")
        return 130
    if state != "SUCCEEDED":
        job = gateway.get(name)
        e = err()
        e.print(f"[red]job {ref_shown} {state}[/]" + (f": {escape(job.error.message)}" if job.error.message else ""))
        failing = [r for r in follower.last_lines if r] or list(follower.last_lines)
        if state == "FAILED" and failing:
            errors = [r for r in failing if any(x.severity == "ERROR" for x in follower.last_lines[r])]
            rep = (errors or failing)[0]
            e.print(f"last lines of {rep or 'the job'}:")
            for line in list(follower.last_lines[rep])[-10:]:
                e.print(f"  {escape(line.text)}")
    return EXIT_FOR_STATE.get(state, 3)


def logs(
    job: JobArg,
    follow: Annotated[bool, typer.Option("--follow/--no-follow", help="Keep streaming until the job ends.")] = True,
    replica: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--replica", help="Only this replica, e.g. workerpool0-0 or workerpool1-0.")] = None,
    since: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--since", help="Only lines from the last 10m / 2h / 1d, or since an ISO time.")] = None,
    severity: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--severity", help="Only lines at or above DEBUG, INFO, WARNING, ERROR, CRITICAL.")] = None,
    json_out: JsonOpt = False,
    project: ProjectOpt = None,
    region: RegionOpt = None,
) -> None:
    """Stream a job's logs until it ends; exit 0 when it succeeded, 3 when it failed, 4 when cancelled.

    Ctrl-C detaches (the job keeps running).

    Examples:

      ftcli logs 3

      ftcli logs last --no-follow --severity WARNING
    """
    code = follow_job(job, project=project, region=region, follow=follow, replica=replica, since=since,
                      severity=severity, json_out=json_out)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("logs")(logs)



