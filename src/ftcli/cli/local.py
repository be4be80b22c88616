"""`ftcli local`: parse the trainer's options, run it here (`ftcli.local`), say where the model is."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ftcli.cli.options import JsonOpt
from ftcli.errors import JobFailed
from ftcli.trainer_options import with_trainer_options

if TYPE_CHECKING:
    from ftcli.local import LocalRun


@with_trainer_options
def local(
    trainer: dict[str, Any],
    offline: Annotated[bool, typer.Option(
        "--offline",
        help="Never contact the Hugging Face Hub (HF_HUB_OFFLINE=1). Implied when the model and the data "
        "are both local, as for the bundled default.")] = False,
    restart: Annotated[bool, typer.Option(
        "--restart",
        help="Start over in an --output-dir that holds an earlier run: its model/, checkpoints/, logs/ and report/ are "
        "moved into previous-TIME/ first (nothing is deleted).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Run the trainer on this machine, with Vertex's output layout (model/, checkpoints/, logs/).

    With no options it fine-tunes MiniLM-L6 on the bundled SST-2 sample, offline, in a few minutes on a
    laptop CPU. Run again with the same --output-dir and the same data and options, it resumes from the last
    checkpoint; with other data or options it refuses (use a new --output-dir, or --restart). --json prints the
    run folder, the model folder and its metrics as one JSON object (the trainer's output goes to stderr); a run
    stopped after a checkpoint prints its run folder with "interrupted": true and the step it resumes from.

    Examples:

      ftcli local --epochs 1

      ftcli local --task csv --train-file reviews.csv --label-column sentiment --model distilbert-base-uncased
    """
    from ftcli.local import run_local
    from ftcli.output import escape, note, say_last, show_one

    run = run_local(trainer, offline, restart, say=note, quiet_stdout=json_out)
    if run.code == 0:
        result = {"run_folder": run.base, "model": run.model, "metrics": run.metrics()}
        show_one(result, (), json_out=json_out, title=f"run folder: {escape(run.base)}")
        if not json_out:
            from ftcli.models import pipeline_recipe

            note(f"load it: {pipeline_recipe(run.model)}")
        return
    if stopped_by := _stop_signal(run):
        how = "interrupted" if stopped_by == signal.SIGINT else f"stopped by {signal.Signals(stopped_by).name}"
        # The one line of a stopped run: the trainer leaves it to ftcli (STOPS_SAID_BY_VAR), whose command it is
        step = _resume_step(run.base)
        # The run to resume is what the script must act on, and its folder (a fresh ./ftcli-runs/RUN_ID unless
        # --output-dir named one) was on stderr only, in a sentence: with --json stdout holds it as an object,
        # "interrupted" and without a model; a run with nothing to resume leaves stdout empty, the exit status saying
        # it stopped. (say_last: behind a reader that no longer reads, the object waited on it forever, the line unsaid)
        say_last(f"{how}; {_resumes(run.base, step)}" if step is not None else
                 f"{how} before the first checkpoint; nothing to resume",
                 {"run_folder": run.base, "model": None, "metrics": None, "interrupted": True,
                  "resumes_from_step": step} if json_out and step is not None else None)
        raise typer.Exit(128 + stopped_by)
    if run.code == 2:  # the trainer already printed its one-line error
        raise typer.Exit(2)
    # A run that failed before logging anything leaves no folder (ftcli.local._unclaim): name one only if it is there.
    kept = run.base.startswith("gs://") or Path(run.base).exists()
    if run.code < 0:  # a signal ftcli did not pass on ("exited with status -9" said neither which nor why)
        raise JobFailed(*_killed(-run.code, run.base, kept))
    raise JobFailed(f"the trainer exited with status {run.code}",
                    hint=f"its output is above; run folder: {run.base}" if kept else
                    "its output is above; it stopped before logging anything, and left no run folder")


def _stop_signal(run: LocalRun) -> int | None:
    """The signal that stopped the run, if one did: one ftcli passed on, or the trainer's exit status for a stop it
    made itself (130 Ctrl-C, 143 SIGTERM: a signal sent to the trainer alone, not through ftcli)."""
    if run.signal is not None and run.signal != signal.SIGINT:
        return run.signal
    # (a Ctrl-C ftcli passed on that the trainer finished anyway, exit 0, or failed on, is not a stop)
    return {130: signal.SIGINT, -signal.SIGINT: signal.SIGINT, 143: signal.SIGTERM}.get(run.code)


def _resume_step(base: str) -> int | None:
    """The step of the newest complete checkpoint in run folder `base`, which a run started again resumes from."""
    from ftcli_trainer import checkpoint, storage

    # (storage.join: Path() made gs://b/run's checkpoints gs:/b/run/checkpoints, a local folder that is never there)
    return checkpoint.newest_complete_step(storage.join(base, "checkpoints"))


def _resumes(base: str, step: int | None = None) -> str | None:
    """'the same command with --output-dir BASE resumes from its checkpoint at step N' where a complete checkpoint is
    there to resume (at `step`, when it was looked up already), else None."""
    step = _resume_step(base) if step is None else step
    if step is None:
        return None
    return f"the same command with --output-dir {base} resumes from its checkpoint at step {step}"


def _killed(signum: int, base: str, kept: bool) -> tuple[str, str]:
    """(the line, the hint) for a trainer killed by a signal that did not come through ftcli: a SIGKILL nobody here
    sent is most often the kernel's out-of-memory killer (a model or batch too big for the machine's memory)."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    line = f"the trainer was killed by {name}"
    fix = ""
    if signum == signal.SIGKILL:
        line += " (not from ftcli: most often the kernel's out-of-memory killer)"
        fix = "if memory ran out (`dmesg` says so), lower --batch-size or --max-length; "
    if kept and (resumes := _resumes(base)):
        return line, f"{fix}{resumes}"
    return line, f"{fix}run folder: {base}" if kept else f"{fix}it left no run folder"


def register(app: typer.Typer) -> None:
    app.command("local", no_args_is_help=False)(local)
