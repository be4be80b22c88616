"""`ftcli report RUN_DIR|JOB`: learning curves, a confusion matrix (or F1 bars, or a scatter) and a metrics table."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from ftcli.cli.options import JOB_FORMS, JsonOpt, ProjectOpt, RegionOpt, TrialOpt

if TYPE_CHECKING:
    from ftcli.report import Run

REPORTS_DIR = "ftcli-reports"


def _download_run(ref: str, project: str | None, region: str | None, into: Path,
                  trial: str | None = None) -> tuple[str, str]:
    """Copy what a report reads of a job's run (metrics, eval predictions, configs, metrics.jsonl) into `into`, in
    the run folder's layout; return the job's numeric id and how the report names it. Only ftcli's own file names
    are fetched. A tuning job's report is its best trial's, or `trial`'s (as download and predict take it)."""
    from ftcli import jobs
    from ftcli.errors import FtcliError
    from ftcli.gcp.storage import get_storage
    from ftcli.models import model_uri_of
    from ftcli.output import note
    from ftcli.report import RUN_FILES
    from ftcli_trainer.storage import LOGS_SYNC_S, names_on_failure, split_gcs

    name = jobs.resolve_job(ref, project, region, trial=trial, notify=note, folder_too=True)
    short = jobs.short_id(name)
    # By its short id (else its full name), not by `ref`: "last" names another job once one is submitted
    shown = str(short) if short else name.full
    job = jobs.vertex_for(name).get(name)
    base = model_uri_of(job).removesuffix("/").removesuffix("model")
    bucket, prefix = split_gcs(base.rstrip("/"))
    storage = get_storage(name.project)
    there = {o.name for folder in ("model", "logs") for o in storage.list_objects(base + folder)}
    wanted = [(f"{prefix}/{rel}", into / rel) for rel in RUN_FILES if f"{prefix}/{rel}" in there]
    if not any(rel.endswith("metrics.json") or rel.endswith("metrics.jsonl") for rel in
               (n.removeprefix(prefix + "/") for n, _ in wanted)):
        if job.final:  # no "yet": an ended job writes nothing more, and its logs say why it wrote nothing
            raise FtcliError(f"{base} holds no metrics, and the job has ended ({job.state}): nothing more will come",
                             hint=f"its logs say why: ftcli logs {shown}")
        raise FtcliError(f"{base} holds no metrics yet; the job is {job.state}",
                         hint="a job's learning curve reaches the bucket at its first evaluation, checkpoint or "
                              f"train line after {int(LOGS_SYNC_S // 60)} minutes: ftcli logs {shown}")
    # A full disk names no file: the temporary folder's disk ("No space left on device" alone said not which)
    with names_on_failure(into.parent):
        storage.download_objects(bucket, wanted)
    return name.id, f"job {short} ({name.id})" if short else f"job {name.id}"


def report(
    run: Annotated[str, typer.Argument(
        metavar="RUN_DIR_OR_JOB",
        help=f"A run folder (ftcli local's, with model/ and logs/), a model folder, or a job: {JOB_FORMS}.")],
    out_dir: Annotated[Optional[Path], typer.Option(  # noqa: UP045 - typer reads it at runtime
        "--out", metavar="DIR",
        help="Folder for the report, new or empty (or an earlier report's) [default: RUN_DIR/report; "
                      "beside a model folder, DIR-report; for a job ./ftcli-reports/JOB_ID].")] = None,
    show: Annotated[bool, typer.Option("--open", help="Show the pictures in this machine's image viewer.")] = False,
    json_out: JsonOpt = False,
    trial: TrialOpt = None,
    project: ProjectOpt = None,
    region: RegionOpt = None,
) -> None:
    """Draw a run's learning curves (loss, metric, learning rate) and its confusion matrix (per-label F1 bars for
    multi-label, predicted against true for regression) as PNG files, with the metrics as a Markdown table.

    A folder that holds other files is refused (an earlier report's is replaced). Needs matplotlib:
    pip install 'ftcli[report]'.

    Examples:

      ftcli report ftcli-runs/20261125-120000-ab12 --open

      ftcli report last --out ./reports/mnli --json
    """
    from ftcli.cli.watch import stop_signals_interrupt
    from ftcli.output import say_last
    from ftcli.report import ReportInterrupted, require_matplotlib

    require_matplotlib()
    # SIGTERM or SIGHUP (a CI step's timeout, `docker stop`, a closed terminal) as Ctrl-C: they killed ftcli without a
    # word, its staging folder and the job's downloaded files left behind; and while its files were named (behind a
    # reader that stopped reading), the report whole in its folder, the app's bare "interrupted" left that unsaid
    with stop_signals_interrupt() as stopped:
        try:
            target, loaded, files = _draw(run, out_dir, trial, project, region)
        except KeyboardInterrupt as e:
            said = e.said if isinstance(e, ReportInterrupted) else "nothing was written" + (
                "" if Path(run).is_dir() else "; what had been downloaded of the job's run was removed")
            say_last(f"\ninterrupted; {said}")
            raise typer.Exit(128 + stopped[0] if stopped else 130) from None
        try:
            _show_report(target, loaded, files, json_out, show)
        except KeyboardInterrupt:
            say_last(f"\ninterrupted; the report is written, whole, in {target}")
            raise typer.Exit(128 + stopped[0] if stopped else 130) from None


def _show_report(target: Path, loaded: Run, files: list[Path], json_out: bool, show: bool) -> None:
    """report's result: its files (or --json's object), then the pictures opened with --open."""
    from ftcli.output import err, out
    from ftcli.report import open_files

    if loaded.skipped_lines:
        err().print(f"[dim]skipped {loaded.skipped_lines} unreadable line(s) of metrics.jsonl[/]")
    if json_out:
        # with the threshold a multi-label run's F1s are at, as report.md has it beside them (null for a single-label
        # or regression run, and for a run whose files do not say it yet: a job's come with its model)
        # (flushed here: a signal while it waits on a reader that stopped reading is said as this command's)
        print(json.dumps({"report": str(target), "files": [str(f) for f in files], "threshold": loaded.threshold}),
              flush=True)
    else:
        for f in files:
            out().print(str(f), markup=False)
    if show:
        why_not = open_files([f for f in files if f.suffix == ".png"])
        if why_not:
            err().print(f"--open: {why_not}; the files are in {target}", markup=False)


def _draw(run: str, out_dir: Path | None, trial: str | None, project: str | None,
          region: str | None) -> tuple[Path, Run, list[Path]]:
    """Read the run (a folder, or a job's files downloaded into a temporary folder) and write its report; return
    (the report's folder, the run, its files)."""
    from ftcli.output import note
    from ftcli.report import default_out, load_run, write_report

    path = Path(run)
    with tempfile.TemporaryDirectory(prefix="ftcli-report-") as tmp:
        if path.is_dir():
            from ftcli.history import folder_over_job

            if shadowed := folder_over_job(run):
                note(shadowed)
            if trial is not None:
                from ftcli.errors import UsageError
                from ftcli.jobs import NO_TRIAL

                raise UsageError(f"--trial is for tuning jobs; {run} is a folder", hint=NO_TRIAL)
            loaded = load_run(path)
            if loaded.curve_left_out:
                note(loaded.curve_left_out)
            target = out_dir or _writable_default(default_out(path, in_its_run=loaded.curve_left_out is None))
        else:
            job_id, source = _download_run(run, project, region, Path(tmp), trial)
            target = out_dir or _writable_default(Path(REPORTS_DIR) / job_id)
            loaded = load_run(Path(tmp), source=source)
        files = write_report(loaded, target, say=note)
    return target, loaded, files


def _writable_default(target: Path) -> Path:
    """The default report folder, refused where it cannot be written (a run folder on a read-only share, a job's
    report from a read-only checkout): it was 'cannot use ./ftcli-reports: Permission denied; check the permissions
    ...', with no word of --out."""
    import os

    from ftcli.errors import UsageError
    from ftcli_trainer.config import cannot_write_in

    if (problem := cannot_write_in(Path(os.path.abspath(target)))) is not None:
        raise UsageError(f"the default report folder {target}: {problem}",
                         hint="give a folder you can write in: --out DIR")
    return target


def register(app: typer.Typer) -> None:
    app.command("report")(report)
