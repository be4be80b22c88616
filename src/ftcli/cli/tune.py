"""`ftcli tune`: a Vertex AI hyperparameter tuning job whose trials are `ftcli train`'s job."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from ftcli.cli.options import with_job_options
from ftcli.trainer_options import with_trainer_options

if TYPE_CHECKING:
    from ftcli.values import Trial, TuningJob, TuningName

TUNE = "Tuning"


def _values(params: Mapping[str, object]) -> str:
    def one(v: object) -> str:
        return f"{v:.3g}" if isinstance(v, float) and not float(v).is_integer() else (
            str(int(v)) if isinstance(v, float) else str(v))

    return " ".join(f"{k}={one(v)}" for k, v in params.items())


@with_trainer_options(exclude=frozenset({"output_dir"}))
@with_job_options(candidates=False)
def tune(
    trainer: dict[str, Any],
    job: dict[str, Any],
    trials: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--trials", metavar="N", help="Trials in all [default: 8].", rich_help_panel=TUNE)] = None,
    parallel: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--parallel", metavar="N",
        help="Trials at a time [default: 2, or 1 with --trials 1].", rich_help_panel=TUNE)] = None,
    search: Annotated[Optional[list[str]], typer.Option(  # noqa: UP045
        "--search", metavar="NAME=SPACE",
        help="NAME=loguniform(LOW,HIGH) | uniform(LOW,HIGH) | int(LOW,HIGH) | choice(A,B,...); repeat "
        "for each option [default: learning_rate=loguniform(1e-5,1e-4) and batch_size=choice(16,32)].",
        rich_help_panel=TUNE)] = None,
    search_file: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--search-file", metavar="FILE", help="A TOML study: metric, trials, parallel and a [search] table (NAME = "
        "\"loguniform(1e-5,1e-4)\" or NAME = [16, 32]); flags win over it.", rich_help_panel=TUNE)] = None,
    metric: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--metric", metavar="NAME",
        help="The eval metric to optimise (a *_loss or *_mse is minimised) [default: the task's: eval_accuracy, "
        "eval_matthews_correlation for CoLA, eval_pearson for STS-B, ...].", rich_help_panel=TUNE)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the HyperparameterTuningJob JSON; upload and "
                                          "create nothing.")] = False,
    detach: Annotated[Optional[bool], typer.Option(  # noqa: UP045 - None unless given (see train's)
        "--detach/--follow", show_default=False, help="--detach: return once the job is created; --follow: follow "
        "its trials until it ends [default: --follow].")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the created job as JSON (implies --detach).")
                        ] = False,
) -> None:
    """Tune hyperparameters on Vertex AI: a HyperparameterTuningJob whose trials run the job `ftcli train` would
    (same checks, same container, same uploads), each with its own values; the trainer reports the metric after
    every evaluation. --timeout is per trial.

    Examples:

      ftcli tune --task mnli --gpu L4 --trials 16 --parallel 4 --search 'learning_rate=loguniform(1e-5,1e-4)'
      --search 'batch_size=choice(16,32)'

      ftcli tune --task cola --gpu T4 --dry-run          (the task's default search and metric)

      ftcli tune --task mnli --gpu L4 --search-file study.toml --trials 4

      ftcli jobs describe last    (trials, best first)   ·   ftcli download last   (the best trial's model)
    """
    from ftcli import tuning
    from ftcli.cli.train import json_follow_problem
    from ftcli.errors import UsageError
    from ftcli.output import emit_json, err, escape, note, out, transfer

    json_follow_problem(json_out, detach, "ftcli jobs describe JOB")

    for flag, value in (("--gpu", job["gpu"]), ("--region", job["region"])):
        if "," in (value or ""):
            raise UsageError(f"{flag} {value}: ftcli tune takes one; a list of candidates is for ftcli train")
    from ftcli.tune import StudyFile, load_study_file, merge_search

    study = load_study_file(search_file) if search_file else StudyFile()
    search = merge_search(study.search, search or [])
    metric = metric or study.metric
    # a problem names where its number came from: `parallel = 3` in the file, not a --parallel never typed
    trials_from = "--trials" if trials is not None or study.trials is None else f"trials in {search_file}"
    parallel_from = "--parallel" if parallel is not None or study.parallel is None else f"parallel in {search_file}"
    trials = trials if trials is not None else study.trials if study.trials is not None else 8
    # the default (2 at a time) never exceeds the trials asked for: `--trials 1` alone is one trial, not an error
    parallel = parallel if parallel is not None else study.parallel if study.parallel is not None else \
        max(1, min(2, trials))
    ts = tuning.plan(trainer=trainer, search=search, metric=metric, trials=trials, parallel=parallel,
                     trials_from=trials_from, parallel_from=parallel_from, say=note,
                     **{**job, "labels": job["labels"] or []})
    for line in ts.sub.notes:
        err().print(f"note: {line}", markup=False, highlight=False)
    goal = ts.job["studySpec"]["metrics"][0]["goal"].lower()
    err().print(f"study: {trials} trial{'' if trials == 1 else 's'}, {parallel} at a time, {goal} {ts.metric} over "
                f"{', '.join(p.name for p in ts.params)}", markup=False, highlight=False)
    from ftcli.cli.cost import provisioning, say_cost

    say_cost(ts.sub.estimate, job["timeout"], discounted=provisioning(job), trials=trials,
             parallel=parallel)
    if dry_run:
        print(json.dumps(ts.job, indent=2))
        err().print(f"[dim]dry run: nothing uploaded, no job created. Package: {escape(ts.sub.package_uri)}[/]")
        return
    from ftcli.cli.train import named_if_interrupted, submitted_json, submitting

    with submitting([ts.sub], tuning=True, json_out=json_out):
        created, n, sent = tuning.submit(ts, notify=note, uploading=transfer)
    with named_if_interrupted(created.name, n):
        if json_out:
            emit_json(submitted_json(created, n, ts.sub.base_output_dir, sent))
            return
        o = out()
        o.print(f"submitted tuning job [bold]#{n}[/] {escape(created.display_name)}")
        o.print(f"  id       {created.name.id}  ({created.name.full})")
        o.print(f"  console  {escape(created.name.console_url)}")
        o.print(f"  trials   {escape(ts.sub.base_output_dir)}/TRIAL_ID/model/")
        o.print(f"next: ftcli jobs describe {n}   ·   ftcli logs {n} --trial ID   ·   ftcli jobs cancel {n}")
    if detach:
        return
    code = _follow(created.name, n)
    if code:
        raise typer.Exit(code)


def _follow(name: TuningName, n: int) -> int:
    from ftcli import tuning
    from ftcli.cli.train import _say_job_keeps_running
    from ftcli.cli.watch import project_id, stop_signals_interrupt, timing_from_env, tuning_waiting_for
    from ftcli.errors import FollowingLost
    from ftcli.follow import error_parts
    from ftcli.output import err, note, out, say_last, warn

    o = out()
    # What was being printed when the study was read ended, and the state it ended in: an interruption from then on
    # is of a study that has ended (it said "keeps running" and how to cancel it, or the app's bare "interrupted").
    ended: list[tuple[str, str]] = []

    def on_update(job: TuningJob, changed: list[Trial]) -> None:
        if job.final:
            ended[:] = [(job.state, "its last changes were still being printed")]
        for t in changed:
            value = f"{job.metric} {t.value:.4f}" if t.value is not None else ""
            # why an INFEASIBLE trial stopped (its first line: a replica's error goes on with its stderr's end)
            why = error_parts(t.error)[0] if t.error else ""
            # (a trial not yet given its values has none: "trial 3 REQUESTED · " ended on a separator)
            parts = [f"trial {t.id} {t.state}", _values(t.params), value, why]
            o.print(" · ".join(p for p in parts if p), markup=False, highlight=False)
        if not changed:
            # a study not started yet says why, as `ftcli logs` says it of a job (a QUEUED one: the project's quota)
            why = tuning_waiting_for(job.state, job.provisioning, project_id(name.project))
            err().print(f"tuning job {n}: {job.state}" + (f" ({why}; Ctrl-C detaches, ftcli jobs cancel {n} cancels "
                        "it)" if why else ""), markup=False, highlight=False)

    try:
        with stop_signals_interrupt() as got:
            # (a read that fails for a while is said once, as `ftcli logs` says it, and the study is read again)
            job = tuning.follow(lambda: tuning.get(name, note), on_update, interval=timing_from_env().state_interval,
                                on_unreadable=lambda e: warn(f"cannot read tuning job {n}'s state now ({e.message}); "
                                                             "still following it, and trying again", e.hint))
            # The summary is printed while the signals are still this function's, as watch() prints a job's: printed
            # after them, a SIGTERM there (behind a reader that stopped reading) said the app's bare "interrupted".
            ended[:] = [(job.state, "its summary was still being printed")]
            return _summary(job, n)
    except KeyboardInterrupt:
        if ended:
            state, printing = ended[0]
            say_last(f"\ninterrupted; tuning job {n} has ended: {state} ({printing}). Its trials: ftcli jobs "
                     f"describe {n}")
        else:
            _say_job_keeps_running(name, n)  # as train and tune say it during the submission
        return 128 + got[0] if got else 130
    except FollowingLost as e:
        e.then(f"its trials: ftcli jobs describe {n}   cancel it: ftcli jobs cancel {n}")
        raise


def _summary(job: TuningJob, n: int) -> int:
    """What an ended study cost, its best trial or why it failed; the exit status it ends `ftcli tune` with."""
    from ftcli import prices
    from ftcli.cli.cost import say_spent
    from ftcli.follow import EXIT_FOR_STATE, said_error
    from ftcli.output import err, out

    o = out()
    say_spent(lambda: prices.tuning_cost(job), "trials ran {ran} in all: {amount} at your {region} rates "
              "(on-demand; {per_hour} an hour a trial{billed})")
    best = job.best
    if job.state == "SUCCEEDED" and best is not None:
        o.print(f"tuning job #{n} SUCCEEDED · best trial {best.id}: {job.metric} {best.value:.4f} · "
                f"{_values(best.params)}", markup=False, highlight=False)
        o.print(f"next: ftcli download {n}   (the best trial's model)   ·   ftcli jobs describe {n}", markup=False,
                highlight=False)
        return 0
    # (a cancelled job's error is only Vertex's note of the cancel: "CANCELLED: CANCELED" said it twice)
    error = said_error(job.state, job.error)
    err().print(f"tuning job #{n} {job.state}" + (f": {error}" if error else ""), markup=False, highlight=False)
    failed = [t for t in job.trials if t.state == "INFEASIBLE" and t.job is not None]
    if job.state == "FAILED" and failed:
        # the study's error says only that trials failed; the trial's own log says why
        err().print(f"hint: ftcli logs {n} --trial {failed[-1].id} shows why trial {failed[-1].id} failed",
                    markup=False, highlight=False)
    # exit as `ftcli logs` does for the job's state (4: cancelled); a study that succeeded without a value, 3
    return EXIT_FOR_STATE.get(job.state, 3) or 3


def register(app: typer.Typer) -> None:
    app.command("tune")(tune)
