"""`ftcli train`: package the trainer, upload it, create a Vertex AI CustomJob with the GPU."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from ftcli.cli.options import with_job_options
from ftcli.trainer_options import with_trainer_options
from ftcli.values import JobName, TuningName

if TYPE_CHECKING:
    from ftcli.submit import Submission
    from ftcli.values import Job, TuningJob


@with_trainer_options(exclude=frozenset({"output_dir"}))
@with_job_options
def train(
    trainer: dict[str, Any],
    job: dict[str, Any],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the CustomJob JSON; upload and create nothing.")
                       ] = False,
    smoke: Annotated[bool, typer.Option(
        "--smoke", help="Run the job's own start here first, on the CPU: the trainer wheel installed by the job's "
        "start script, a few rows, one evaluation. Uploads and creates nothing.")] = False,
    # None unless given: an explicit --follow with --json (which returns at once) is refused, not ignored
    detach: Annotated[Optional[bool], typer.Option(  # noqa: UP045
        "--detach/--follow", show_default=False, help="--detach: return once the job is created; --follow: follow "
        "its logs until it ends, and exit with its status [default: --follow].")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the created job as JSON (implies --detach).")
                        ] = False,
) -> None:
    """Fine-tune on Vertex AI: package the trainer, upload it, and create a CustomJob with the GPU.

    Everything is checked before anything is uploaded. Local --train-file/--eval-file are uploaded too.

    Examples:

      ftcli train --task imdb --gpu T4

      ftcli train --task mnli --model bert-large-uncased --gpu A100x8 --replicas 2 --reduction-server 2

      ftcli train --task csv --train-file gs://my-bkt/train.csv --label-columns 'toxic,insult' --gpu L4 --spot --dry-run

      ftcli train --task mnli --gpu H100x8 --flex-start --max-wait 6h

      ftcli train --task csv --train-file ./train.csv --gpu L4 --smoke   (try the job's start here first)
    """
    from ftcli import submit
    from ftcli.output import err, escape, note, transfer

    json_follow_problem(json_out, detach, "ftcli logs JOB")
    smoke_problem(smoke, dry_run=dry_run, json_out=json_out, detach=detach)
    cands, skipped = submit.plan_candidates(trainer=trainer, **{**job, "labels": job["labels"] or []}, say=note)
    sub = cands[0].sub
    for line in dict.fromkeys([*skipped, *(n for c in cands for n in c.sub.notes)]):  # every candidate's, once
        err().print(f"note: {line}", markup=False, highlight=False)
    if len(cands) > 1:
        err().print(f"candidates, in order: {', '.join(c.what for c in cands)} (the next is tried when the machines "
                    "cannot be had)", markup=False, highlight=False)
    if smoke:
        from ftcli import smoke as smoke_run

        err().print(f"smoke run: the job's start on {smoke_run.SMOKE_TRAIN_ROWS} rows, here, on the CPU; nothing "
                    "uploaded, no job created", markup=False, highlight=False)
        for left_out in (smoke_run.wandb_note(sub.trainer), smoke_run.hf_secret_note(sub.trainer)):
            if left_out:
                err().print(f"note: {left_out}", markup=False, highlight=False)
        code, scratch = smoke_run.run(sub.trainer, sub.extras)
        if code:
            err().print(f"smoke run failed (exit status {code}): the job would fail the same way; fix the above "
                        "before submitting", markup=False, highlight=False)
            raise typer.Exit(3)
        err().print(f"smoke run passed: the job starts, trains and evaluates; submit without --smoke (the smoke's "
                    f"scratch folder {scratch}, where the paths above point, is removed)", markup=False,
                    highlight=False)
        return
    from ftcli.cli.cost import provisioning, say_cost

    for c in cands:
        say_cost(c.sub.estimate, job["timeout"], discounted=provisioning(job),
                 label=c.what if len(cands) > 1 else "")
    if dry_run:
        specs = [c.sub.job for c in cands]
        print(json.dumps(specs[0] if len(specs) == 1 else specs, indent=2))
        uploads = escape("".join(f"\n  {p} -> {u}" for p, u in sub.uploads))
        several = f" {len(specs)} candidate jobs, in order (a JSON list)." if len(specs) > 1 else ""
        err().print(f"[dim]dry run: nothing uploaded, no job created.{several} Package: {escape(sub.package_uri)}"
                    f"{uploads}[/]")
        return
    start = 0
    access = submit.BucketFacts()  # what the bucket access check learnt and said, for every candidate tried
    while True:
        with submitting([c.sub for c in cands[start:]], json_out=json_out):
            created, n, sent, start = submit.submit_first(cands, notify=note, uploading=transfer, start=start,
                                                          access=access)
        sub = cands[start].sub
        code = _report_and_follow(created, n, sent, sub, detach=bool(detach), json_out=json_out)
        if code == 3 and start + 1 < len(cands):
            # The job failed for want of machines (a stockout, not the trainer): on to the next candidate.
            from ftcli import jobs

            failed = jobs.vertex_for(created.name, note).get(created.name)
            if submit.lacks_resources(failed.error):
                note(f"job #{n} ({cands[start].what}) could not get its machines: {failed.error}; trying "
                     f"{cands[start + 1].what}")
                start += 1
                continue
        if code:
            raise typer.Exit(code)
        return


def json_follow_problem(json_out: bool, detach: bool | None, follow_later: str) -> None:
    """--json returns as soon as the job exists (it prints the job, not its logs): an explicit --follow with it was
    silently not followed. Refused before anything is checked or uploaded; `follow_later` says how to follow it."""
    from ftcli.errors import UsageError

    if json_out and detach is False:
        raise UsageError("--json prints the created job and returns at once (it implies --detach): it cannot also "
                         "--follow", hint=f"drop --follow (then follow the job with {follow_later}), or drop --json")


def smoke_problem(smoke: bool, *, dry_run: bool, json_out: bool, detach: bool | None) -> None:
    """--smoke runs the job's start here and creates no job: `--smoke --dry-run` ran the smoke and never printed the
    job, and --json, --detach or --follow with it were ignored as silently. Refused before anything is checked."""
    from ftcli.errors import UsageError

    given = [flag for flag, on in (("--dry-run", dry_run), ("--json", json_out), ("--detach", detach is True),
                                   ("--follow", detach is False)) if on]
    if smoke and given:
        raise UsageError(f"--smoke runs the job's start here and creates no job: {' and '.join(given)} "
                         f"{'has' if len(given) == 1 else 'have'} no job to act on",
                         hint=f"run with --smoke alone first, then without --smoke (with {' '.join(given)})")


def _report_and_follow(created: Job, n: int, sent: int, sub: Submission, *, detach: bool, json_out: bool) -> int:
    """Say what was created and follow it (unless --detach/--json); the exit status to end with."""
    from ftcli.output import emit_json, escape, out

    with named_if_interrupted(created.name, n):
        if json_out:
            emit_json(submitted_json(created, n, sub.base_output_dir, sent))
            return 0
        o = out()
        o.print(f"submitted job [bold]#{n}[/] {escape(created.display_name)}")
        o.print(f"  id       {created.name.id}  ({created.name.full})")
        o.print(f"  console  {escape(created.name.console_url)}")
        o.print(f"  model    {escape(sub.base_output_dir)}/model/")
        o.print(f"  uploaded {sent:,} bytes" + ("  (trainer unchanged: already in the bucket)" if sent == 0 else ""))
        o.print(f"next: [bold]ftcli logs {n}[/]   ·   ftcli jobs describe {n}   ·   ftcli jobs cancel {n}")
        if detach:
            return 0
        from ftcli.cli.watch import watch

        return watch(created.name, shown=str(n))


@contextlib.contextmanager
def named_if_interrupted(name: JobName | TuningName, n: int | None) -> Iterator[None]:
    """While a job that was just created is said (and followed): Ctrl-C, SIGTERM or SIGHUP name it on stderr and end
    with 130, or 128 + the signal's number. A write that waits on a reader that stopped reading (`ftcli train --json
    ... | reader`) is where one lands: SIGTERM killed ftcli there without a word, and Ctrl-C said only
    "interrupted", the job running on unnamed. (An ignored signal stays ignored: stop_signals_interrupt.)"""
    from ftcli.cli.watch import stop_signals_interrupt

    got: list[int] = []
    try:
        with stop_signals_interrupt() as got:
            yield
    except KeyboardInterrupt:
        _say_job_keeps_running(name, n)
        raise typer.Exit(128 + got[0] if got else 130) from None


def submitted_json(created: Job | TuningJob, n: int | None, base_output_dir: str, sent: int | None) -> dict:
    """What `train --json` and `tune --json` print for the job they created (`sent`: the bytes uploaded; None when
    not known, after an interruption)."""
    return {"short_id": n, "name": created.name.full, "id": created.name.id, "display_name": created.display_name,
            "console_url": created.name.console_url, "base_output_dir": base_output_dir, "uploaded_bytes": sent}


def _say_job_keeps_running(name: JobName | TuningName, n: int | None, obj: dict | None = None) -> None:
    """The line of an interruption once the job exists (then `obj`, --json's, on stdout), with output.say_last:
    behind a reader that no longer reads (`ftcli train ... | reader`, its pipe full) the lines the signal cut short
    kept ftcli from exiting."""
    from ftcli.output import say_last

    ref = str(n) if n else name.full
    # (a tuning job has no command that follows it again: describe shows its trials as they are now)
    what, follow = ("tuning job", "Its trials: ftcli jobs describe") if isinstance(name, TuningName) else (
        "job", "Follow it: ftcli logs")
    say_last(f"\ninterrupted; {what} {f'#{n} ' if n else ''}{name.id} keeps running ({name.full}). "
             f"{follow} {ref}   cancel it: ftcli jobs cancel {ref}", obj)


@contextlib.contextmanager
def submitting(subs: Iterable[Submission], *, tuning: bool = False, json_out: bool = False) -> Iterator[None]:
    """Around the submission of `subs` (any of the candidates still to try; `tuning`: a tuning job's): Ctrl-C, and
    SIGTERM or SIGHUP (a CI step's timeout, a closed terminal; by default they killed ftcli without a word, and the job
    ran on without a short id), say whether a job exists and name it when it does (`interrupted_submission`), then
    end with 130, or 128 + the signal's number as a shell reports it. An ignored signal stays ignored: `nohup ftcli
    train ...` asks to outlive its terminal's SIGHUP."""
    from ftcli.cli.watch import stop_signals_interrupt

    try:
        with stop_signals_interrupt() as got:
            yield
    except KeyboardInterrupt:
        code = interrupted_submission(subs, tuning=tuning, json_out=json_out)
        raise typer.Exit(128 + got[0] if got else code) from None


def interrupted_submission(subs: Iterable[Submission], *, tuning: bool = False, json_out: bool = False) -> int:
    """Ctrl-C while submitting (any of the candidates still to try; `tuning`: a tuning job's submission): say
    whether a job exists, and name it when it does; exit 130. With --json, a job that exists is also printed on
    stdout as a finished submission prints it, with "interrupted": true: a script reads the job it must follow or
    cancel from stdout, and it runs, billed, whether or not the answer to the create call came. Nothing is printed
    there when no job exists (the exit status says the command did not finish), nor when Vertex could not be asked.
    What it says is said with output.say_last once Vertex was asked, the line on stderr first: behind a reader that no
    longer reads (`ftcli train --json ... | reader`, its pipe full) the object waited on it forever, and the job was
    never named."""
    from ftcli import submit
    from ftcli.output import say_last

    what = "tuning job" if tuning else "job"
    for sub in subs:
        looked, job, n = submit.recover(sub, tuning=tuning)
        if not looked:
            say_last(f"\ninterrupted; a {what} may have been created: ftcli jobs list shows it (label "
                     f"ftcli_submission={sub.submission_id})")
            return 130
        if job is not None:
            _say_job_keeps_running(job.name, n, {**submitted_json(job, n, sub.base_output_dir, None),
                                                 "interrupted": True} if json_out else None)
            return 130
    say_last(f"\ninterrupted before the {what} was created; nothing is running")
    return 130


def register(app: typer.Typer) -> None:
    app.command("train")(train)
