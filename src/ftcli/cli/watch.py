"""Following a job on the screen, shared by `ftcli logs` and `ftcli train`: the core follower (`ftcli.follow`)
reports events, `FollowView` renders them (lines to stdout, states and waits to stderr, or JSON Lines)."""

from __future__ import annotations

import datetime as dt
import os
from typing import TYPE_CHECKING

from ftcli.follow import Events, Line, Notice, Outcome, Timing
from ftcli.signals import stop_signals_interrupt as stop_signals_interrupt  # (where the commands import it from)
from ftcli.values import WAITING_STATES, Job, JobName

if TYPE_CHECKING:
    from rich.console import Console

# Scales every wait of the follower: the tests' knob (they run it at 0.1), left out of README and of every message
# on purpose. A user gains nothing from it: shorter, the waits overrun the read quotas they are paced by (Timing's
# poll_interval, 12 of the project's 60 entries.list a minute) and cut what they are for (lines of several replicas
# put in order, the last lines read after the job ended); longer, they only slow the screen, and RESOURCE_EXHAUSTED
# already slows the polls.
INTERVAL_VAR = "FTCLI_LOGS_INTERVAL"
COLORS = {"WARNING": "yellow", "ERROR": "red", "CRITICAL": "bold red"}


def timing_from_env() -> Timing:
    """The follower's waits, scaled by INTERVAL_VAR when it holds a positive finite number. Any other value is
    ignored: it was refused as a usage error naming a variable README does not mention (and, from `ftcli train`, with
    exit 2, "nothing uploaded, no job created", after the job was created)."""
    import math

    try:
        factor = float(os.environ.get(INTERVAL_VAR) or "1")
    except ValueError:
        factor = 1.0
    return Timing().scaled(factor) if factor > 0 and math.isfinite(factor) and factor != 1 else Timing()


def waiting_for(state: str, provisioning: str | None, project: str = "PROJECT_ID") -> str:
    """What a job that has no machines yet waits for, and what the user can do about a long wait. QUEUED: "This
    period is usually brief, but if your Google Cloud project does not have sufficient remaining custom training
    quotas for your job, then Vertex AI keeps the job queued until you have sufficient quotas" ("Understand the
    custom training service"); PENDING: "The service is preparing to run the job" (JobState), and "Vertex AI starts
    running your code on each worker as soon as it becomes available. When all the workers are available, Vertex AI
    sets the job state to JOB_STATE_RUNNING" (the same page): a job of several machines may log while PENDING;
    Flex-start: the job waits for its GPUs up to scheduling.maxWaitDuration, "The default value is 1 day" ("Schedule
    training jobs based on resource availability"; the three at cloud.google.com/vertex-ai/docs, read 2026-11-28,
    the first two again 2026-11-29). `project`: the id the quota page is opened for."""
    if provisioning == "Flex-start":
        return "waiting for Flex-start GPUs, up to its maximum wait (--max-wait; 1 day by default)"
    if state == "QUEUED":
        return ("queued by Vertex, not started: a long wait means the project lacks custom-training quota for it; "
                f"request more at https://console.cloud.google.com/iam-admin/quotas?project={project}, or cancel it "
                "and pick another --gpu or --region")
    return "Vertex is starting its machines; with several, the job is PENDING until all are up"


def tuning_waiting_for(state: str, provisioning: str | None, project: str = "PROJECT_ID") -> str | None:
    """What a tuning job not started yet waits for, where the docs say it: QUEUED, the project's quota, as a CustomJob's
    (the page `waiting_for` cites says it of "a CustomJob or HyperparameterTuningJob"), and Flex-start GPUs; None for
    a PENDING one on demand, whose trials' machines the docs say nothing of."""
    if state == "QUEUED" or (provisioning == "Flex-start" and state in WAITING_STATES):
        return waiting_for(state, provisioning, project)
    return None


def waiting_briefly(state: str, provisioning: str | None) -> str:
    """`waiting_for` in a few words, for the line that counts the wait."""
    if provisioning == "Flex-start":
        return "waiting for Flex-start GPUs"
    return "not started yet" if state == "QUEUED" else "waiting for machines"


class FollowView(Events):
    def __init__(self, shown: str, *, json_out: bool, out: Console | None = None, err: Console | None = None,
                 follow: bool = True) -> None:
        from ftcli import output

        self.shown = shown
        self.follow = follow  # False: --no-follow, what is logged now and no more
        self.multi = False
        self.replicas: set[str] = set()
        self.json_out = json_out
        self.out = out or output.out()
        self.err = err or output.err()
        self.wait = output.Waiting(self.err)
        self.provisioning: str | None = None
        self.project = "PROJECT_ID"
        self.ended_in: str | None = None  # the state the job ended in, once known (its last lines still read)
        self.read_in: str | None = None  # the state the job was in when following (or the snapshot) began

    def start(self, job: Job) -> None:
        self.read_in = job.state
        self.provisioning = job.provisioning
        self.project = project_id(job.name.project)
        self.multi = len(job.replica_names) > 1
        self.replicas = set(job.replica_names)

    def line(self, line: Line) -> None:
        from ftcli.output import emit_json, escape

        if self.json_out:
            emit_json({"timestamp": line.timestamp.isoformat(), "replica": line.replica, "severity": line.severity,
                       "text": line.text, "insert_id": line.insert_id})
            return
        t = line.timestamp.astimezone().strftime("%H:%M:%S")
        # Vertex's own lines ("service") are named even in a one-replica job: they are not the trainer's
        named = line.replica and (self.multi or line.replica not in self.replicas)
        who = f" [cyan]{escape(line.replica)}[/]" if named else ""
        sev = f" [{COLORS[line.severity]}]{line.severity}[/]" if line.severity in COLORS else ""
        # one entry of several lines (Vertex's error of a failed replica) as several lines, each with the prefix, as
        # gcloud shows it: `grep workerpool1-0` and `cut` see every one
        for text in line.text.splitlines() or [""]:
            self.out.print(f"[dim]{t}[/]{who}{sev} {escape(text.rstrip())}")

    def state(self, state: str, error: str | None) -> None:
        from ftcli.output import emit_json

        if self.json_out:
            emit_json({"event": "state", "state": state, "error": error})
        elif state in WAITING_STATES:
            # what it waits for, and that nobody has to watch it wait (a Flex-start job can wait a day)
            why = waiting_for(state, self.provisioning, self.project)
            self.err.print(f"[bold]job {self.shown}: {state}[/] ({why}; Ctrl-C detaches, ftcli jobs cancel "
                           f"{self.shown} cancels it)")
        else:
            self.err.print(f"[bold]job {self.shown}: {state}[/]")

    def notice(self, notice: Notice) -> None:
        from ftcli.output import emit_json, note, warn

        if notice.reason == "unsupported":
            # No live tail, the logs polled instead: how the lines come, not a problem (no JSON event: the logs are
            # available, and a consumer of "logs_unavailable" would stop waiting for them).
            note(notice.message)
            return
        if self.json_out:
            event = "state_unavailable" if notice.reason == "state" else "logs_unavailable"
            emit_json({"event": event, "reason": notice.reason, "message": notice.message,
                       "hint": notice.hint})
        warn(notice.message, notice.hint)

    def waiting(self, state: str, elapsed_s: float) -> None:
        why = waiting_briefly(state, self.provisioning) if state in WAITING_STATES else "waiting for its first log line"
        self.wait.update(f"job {self.shown}: {state}, {why}", elapsed_s)

    def done_waiting(self) -> None:
        self.wait.stop()

    def reader_gone(self) -> bool:
        from ftcli.output import reader_gone

        return reader_gone(self.out.file)

    def draining(self, state: str) -> None:
        self.ended_in = state

    def detached(self) -> None:
        """Ctrl-C (SIGTERM, SIGHUP) ended the following, the job running on: said on stderr with what to run next,
        with output.say_last: a reader that no longer reads does not keep ftcli from exiting. A job that had already
        ended, its last lines still coming in, is said as ended, in its state: "the job keeps running" and a cancel
        to run said otherwise of a job that had SUCCEEDED (or FAILED). With --no-follow nothing was attached to: the
        lines of a job read in some state were being printed, said with that state ("detached ... Re-attach: ftcli
        logs N" was said of a RUNNING job's snapshot, as if the user had been following it and `ftcli logs N` would
        give them back the same thing). Before the job's state was first read, what is known is said: not that it
        keeps running."""
        from ftcli.output import say_last

        self.wait.stop()
        if self.ended_in is not None and not self.follow:
            say_last(f"\ninterrupted; job {self.shown} has ended: {self.ended_in} (its lines were still being "
                     f"printed). Its logs: ftcli logs {self.shown}", to=self.err)
            return
        if not self.follow:
            n = self.shown
            read = (f"job {n} was {self.read_in} when its lines were read (they were still being printed)"
                    if self.read_in is not None else f"job {n}'s state was still being read")
            say_last(f"\ninterrupted; {read}. Its lines: ftcli logs {n} --no-follow   follow it: ftcli logs {n}   "
                     f"cancel: ftcli jobs cancel {n}", to=self.err)
            return
        if self.read_in is None:
            # (interrupted in the follower's first read of the job: nothing was attached yet, and a job it never read
            # may have ended long before; "detached; the job keeps running" said more than was known)
            n = self.shown
            say_last(f"\ninterrupted; job {n}'s state was still being read (whether it runs on is not known here). "
                     f"Follow it: ftcli logs {n}   its state: ftcli jobs describe {n}   cancel: ftcli jobs cancel {n}",
                     to=self.err)
            return
        if self.ended_in is not None:
            say_last(f"\ndetached; job {self.shown} has ended: {self.ended_in} (its last lines were still coming in). "
                     f"Its logs: ftcli logs {self.shown}", to=self.err)
            return
        say_last(f"\ndetached; the job keeps running. Re-attach: ftcli logs {self.shown}   "
                 f"cancel: ftcli jobs cancel {self.shown}", to=self.err)

    def summary_cut_short(self, state: str) -> None:
        """Ctrl-C (SIGTERM, SIGHUP) while the summary of a job that ended in `state` was printed: the job has ended,
        and what the summary said is in its logs and its description."""
        from ftcli.output import say_last

        n = self.shown
        say_last(f"\ninterrupted; job {n} has ended: {state} (its summary was still being printed). Its logs: "
                 f"ftcli logs {n}   the job: ftcli jobs describe {n}", to=self.err)

    def ended(self, outcome: Outcome) -> None:
        from ftcli.follow import FAILED_REPLICA_RE, error_parts
        from ftcli.images import pull_failure_hint
        from ftcli.output import escape

        e = self.err
        self._spent(outcome.job)
        if outcome.state == "SUCCEEDED":
            n = self.shown
            pair = escape(_pair_hint(outcome.job))  # a column's name: "[/]" in it broke Rich's markup
            e.print(f"next: [bold]ftcli download {n}[/]   ·   ftcli predict {n} \"text\"{pair}")
            return
        from ftcli.follow import said_error

        job = outcome.job
        error = said_error(outcome.state, job.error)
        # Vertex's error of a failed replica goes on with that replica's traceback and a link to the logs: its first
        # line here, the traceback as the last lines below, so the cause is the last line said
        said = error_parts(error)[0] if error and FAILED_REPLICA_RE.match(error) else error
        e.print(f"[red]job {self.shown} {outcome.state}[/]" + (f": {escape(said)}" if said else ""))
        if outcome.last_lines:
            named = FAILED_REPLICA_RE.match(error or "")
            first = ", which failed first" if named and outcome.failing_replica not in (None, named[1]) else ""
            e.print(f"last lines of {outcome.failing_replica or 'the job'}{first}:")
            for line in outcome.last_lines:
                e.print(f"  {escape(line.text)}")
        if job.pools and (hint := pull_failure_hint(error, job.pools[0].image, project_id(job.name.project),
                                                    job.name.region)):
            e.print(f"[dim]hint:[/] {escape(hint)}")

    def _spent(self, job: Job | None) -> None:
        """At the end: what the job cost at the user's rates, when their price file has them (else nothing)."""
        from ftcli import prices
        from ftcli.cli.cost import say_spent

        if job is not None:
            say_spent(lambda: prices.job_cost(job), "ran {ran}: {amount} at your {region} rates (on-demand; "
                      "{per_hour} an hour{billed})", err=self.err)


def watch(name: JobName, *, shown: str, follow: bool = True, replica: str | None = None,
          since: dt.datetime | None = None, severity: str | None = None, json_out: bool = False) -> int:
    """Follow job `name` on the screen; return the exit status (the job's, or 130 on Ctrl-C, 128 + the signal's
    number on SIGTERM or SIGHUP)."""
    from ftcli import follow as core
    from ftcli.errors import FollowingLost
    from ftcli.gcp.cloud_logging import get_logging
    from ftcli.gcp.vertex import get_vertex
    from ftcli.output import note

    timing = timing_from_env()
    vertex = get_vertex(name.project, name.region, notify=note)
    view = FollowView(shown, json_out=json_out, follow=follow)
    ended: str | None = None  # the state the job ended in, once its summary is being printed
    try:
        with stop_signals_interrupt() as got:
            outcome = core.follow_job(name, vertex=vertex, logs=get_logging(name.project, notify=note),
                                      events=view, follow=follow,
                                      replica=replica, severity=severity, since=since, timing=timing, label=shown)
            view.done_waiting()
            # The summary (its cost, the error, the failing replica's last lines) is printed while the signals are
            # still this function's: printed after them, a SIGTERM there (behind a reader that stopped reading) said
            # the app's bare "interrupted" from `ftcli logs`, and from `ftcli train` that the job, FAILED, kept
            # running, with how to cancel it.
            if outcome.state is not None:
                ended = outcome.state
                view.ended(outcome)
    except KeyboardInterrupt:
        if ended is not None:
            view.summary_cut_short(ended)
        else:
            view.detached()
        return 128 + got[0] if got else 130
    except FollowingLost as e:
        e.then(f"follow it again: ftcli logs {shown}   cancel it: ftcli jobs cancel {shown}")
        raise
    finally:
        view.done_waiting()
    return outcome.exit_code


def project_id(project: str) -> str:
    """The project's id for a command to copy: a job's name carries the project's number (Artifact Registry paths
    take the id), so the configured project stands in for it, else PROJECT_ID."""
    if not project.isdigit():
        return project
    from ftcli.settings import effective

    try:
        configured = effective()["project"].value
    except Exception:  # noqa: BLE001 - a hint never fails the command
        configured = None
    return configured if configured and not configured.isdigit() else "PROJECT_ID"


def _pair_hint(job: Job) -> str:
    """` --pair "COLUMN"` when the job trained on sentence pairs: its task (its label) is one of pairs, or its
    trainer options name a --text-pair-column (a CSV of pairs). `predict` then needs a pair per text."""
    from ftcli.jobs import task_and_model
    from ftcli_trainer.tasks import TASKS

    # (the labels of ftcli's own jobs, or a tuning trial's trainer options: its job has no labels)
    task = TASKS.get(task_and_model(job.labels, job.pools)[0] or "")
    column = job.trainer_option("text_pair_column") or (task.text_pair_column if task is not None else None)
    return f' --pair "{column}"' if column else ""
