"""`ftcli logs JOB`: stream a job's logs until it ends; exit with the job's status (the following is
`ftcli.follow`, its rendering `ftcli.cli.watch`)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Optional

import typer

from ftcli.cli.options import JobArg, JsonOpt, ProjectOpt, RegionOpt, TrialOpt
from ftcli.errors import UsageError

SINCE_RE = re.compile(r"^(\d+)([smhd])$")


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
    # A time without an offset is this machine's, as the log lines are shown (watch.py: HH:MM:SS in local time): read
    # as UTC, a time copied from the output missed every line by the machine's UTC offset.
    return t if t.tzinfo else t.astimezone()


def logs(
    job: JobArg,
    follow: Annotated[bool, typer.Option(
        "--follow/--no-follow", show_default=False,
        help="Keep streaming until the job ends [default: --follow].")] = True,
    replica: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--replica", metavar="NAME", help="Only this replica, e.g. workerpool0-0 or workerpool1-0.")] = None,
    since: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--since", metavar="WHEN",
        help="Only lines from the last 10m / 2h / 1d, or since an ISO time (in this machine's time zone, "
        "as the lines are shown, unless it has an offset).")] = None,
    severity: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--severity", metavar="LEVEL",
        help="Only lines at or above DEBUG, INFO, NOTICE, WARNING, ERROR, CRITICAL.")] = None,
    trial: TrialOpt = None,
    json_out: JsonOpt = False,
    project: ProjectOpt = None,
    region: RegionOpt = None,
) -> None:
    """Stream a job's logs (a tuning job's: one trial's) until it ends; exit 0 when it succeeded, 3 when it
    failed, 4 when cancelled.

    Ctrl-C detaches (the job keeps running).

    Examples:

      ftcli logs 3

      ftcli logs last --no-follow --severity WARNING

      ftcli logs 4 --trial 2   (a tuning job's trial)
    """
    from ftcli import jobs
    from ftcli.cli.watch import watch
    from ftcli.follow import check_severity
    from ftcli.output import note

    start = parse_since(since)
    check_severity(severity)  # before the job is looked up: a typo is the user's to fix, whatever the job
    name = jobs.resolve_job(job, project, region, trial=trial, notify=note)
    code = watch(name, shown=jobs.label(name, jobs.short_id(name)), follow=follow, replica=replica, since=start,
                 severity=severity, json_out=json_out)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("logs")(logs)
