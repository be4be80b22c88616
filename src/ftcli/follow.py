"""Follow a Vertex job's logs until it ends: nothing lost, nothing repeated, then say how it ended.

Core code, shared by `ftcli logs` and `ftcli train`: it talks to a JobService gateway (`get(JobName) -> Job`) and
a Cloud Logging gateway (`list(filter)` and `tail(filter, stop)` of `LogEntry` values, errors as
`LogsUnavailable`), and reports through an `Events` object the command renders. No Google type reaches here, so
the tests drive it with a fake gateway in milliseconds.

A tail stream (Cloud Logging TailLogEntries) feeds a queue from a background thread; when tailing is not
available, overlapping ListLogEntries polls do. The main thread de-duplicates by insertId, holds entries
for a moment so lines from several replicas come out in timestamp order, re-reads the job's state every
few seconds, and once the job has ended drains what is still arriving before it returns. While the job waits
for machines, or before its first line, it reports the wait (`Events.waiting`) so the command can show it.
"""

from __future__ import annotations

import datetime as dt
import errno
import queue
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from ftcli.errors import FollowingLost, FtcliError, LogsUnavailable, NotFound, UsageError
from ftcli.values import FINAL_STATES, WAITING_STATES, Job, JobName, LogEntry, TailBatch

# LogSeverity (https://cloud.google.com/logging/docs/reference/v2/rest/v2/LogEntry#logseverity, read 2026-11-27):
# DEFAULT < DEBUG < INFO < NOTICE < WARNING < ERROR < CRITICAL < ALERT < EMERGENCY. --severity takes the levels a
# training job logs at (ALERT and EMERGENCY are left out).
SEVERITIES = ("DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL")
# The levels in that order, with the numbers Cloud Logging gives them (a severity can reach us as its number).
SEVERITY_RANK = {"DEFAULT": 0, "DEBUG": 100, "INFO": 200, "NOTICE": 300, "WARNING": 400, "ERROR": 500,
                 "CRITICAL": 600, "ALERT": 700, "EMERGENCY": 800}
# `ftcli logs` exits with the job's status: 0 SUCCEEDED, 3 FAILED (and EXPIRED, PARTIALLY_SUCCEEDED), 4 CANCELLED.
EXIT_FOR_STATE = {"SUCCEEDED": 0, "FAILED": 3, "CANCELLED": 4, "EXPIRED": 3, "PARTIALLY_SUCCEEDED": 3}
# (the trainer's "error: ..." is the first alternative's ERROR followed by ":")
LEVEL_RE = re.compile(r"^\s*(?:\[?(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\]?[:\s])|^(Traceback)", re.IGNORECASE)
# Vertex's error for a failed CustomJob names the replica: "The replica workerpool1-1 exited with a non-zero status
# of 1. Termination reason: Error. ..." (as quoted in GoogleCloudPlatform/vertex-ai-samples PR #1504, read
# 2026-11-27). A long traceback pushes its "Traceback" line out of the last lines kept, and the other replicas of a
# distributed job log on: that replica's lines are the ones to show.
FAILED_REPLICA_RE = re.compile(r"\bThe replica (workerpool\d+-\d+) exited\b")
# That error goes on: "Termination reason: Error. ", then the end of the replica's stderr (its traceback), a blank line
# and "To find out more about why your job exited please check the logs: https://console.cloud.google.com/logs/...";
# Vertex also logs it as an ERROR entry of its own, task_name "service" (`gcloud ai custom-jobs stream-logs` output of
# a failed job, 2026-02-23, in a public repository's notes; AI Platform's of 2019 and 2020 the same; read 2026-11-28).
LOGS_LINK = "To find out more about why your job exited"
SERVICE = "service"  # the task_name of the lines Vertex itself logs about the job
FAILURE_START_RE = re.compile(r"^(Traceback \(most recent call last\)|error: )")
CLOCK_MARGIN = dt.timedelta(minutes=10)  # how far before a job's creation its log lines are still looked for
OVERLAP = dt.timedelta(seconds=30)  # re-read this much before the newest line after a reconnect or poll
# A live tail that fails this many times in a row before it sends anything (a proxy that breaks gRPC streams, a
# network that drops long-lived connections) is given up for polls: it reconnected forever, and nothing listed the
# lines meanwhile, so they showed only once the job had ended.
TAIL_TRIES = 3


@dataclass(order=True)
class Line:
    timestamp: dt.datetime
    replica: str = field(compare=False)
    severity: str = field(compare=False)
    text: str = field(compare=False)
    insert_id: str = field(compare=False)


def job_filter(job_id: str, replica: str | None = None, since: dt.datetime | None = None) -> str:
    # The filter gcloud's `ai custom-jobs stream-logs` builds: 'resource.type="ml_job"', 'resource.labels.job_id="ID"'
    # and, for one replica, 'resource.labels.task_name="NAME"' (workerpool0-0, ...), joined with AND (Google Cloud
    # SDK's lib/googlecloudsdk/command_lib/ai/log_util.py, _LogFilters, as mirrored in
    # https://github.com/google-cloud-sdk-unofficial/google-cloud-sdk, commit 01f043c2; read 2026-11-28).
    parts = ['resource.type="ml_job"', f'resource.labels.job_id="{job_id}"']
    if replica:
        parts.append(f'resource.labels.task_name="{replica}"')
    # No `severity>=LEVEL` here: Cloud Logging holds a job's stdout at INFO and its stderr at ERROR, whatever a
    # line says (GoogleCloudPlatform/vertex-ai-samples#242, read 2026-11-28: see display_severity), so that filter
    # dropped the trainer's `warning: ...` lines (stdout) and let stderr's download bars through. --severity is
    # applied to the level a line is shown at (Follower.wanted).
    if since:
        parts.append(f'timestamp>="{rfc3339(since)}"')
    return " AND ".join(parts)


def rfc3339(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def clean_text(text: str) -> str:
    """tqdm and friends redraw with carriage returns: keep only the last state of the line."""
    text = text.rstrip("\n")
    if "\r" in text:
        text = [part for part in text.split("\r") if part.strip()][-1] if text.strip() else ""
    return text


def display_severity(entry_severity: str, text: str) -> str:
    """Vertex files every stderr line as ERROR. Trust the line's own level when it states one, and show
    ERROR only for what looks like one; otherwise the line is plain output.

    Vertex documents no severity for a container's output; what it does is reported in GoogleCloudPlatform/vertex-ai-
    samples#242 ("Google cloud logging type ERROR for regular training progress output": tqdm bars and "Configuration
    saved in ..." logged as ERROR, a printed dict as INFO; https://github.com/GoogleCloudPlatform/vertex-ai-samples/
    issues/242, read 2026-11-28)."""
    m = LEVEL_RE.match(text)
    if m:
        word = (m.group(1) or m.group(2) or "").upper()
        return {"WARN": "WARNING", "TRACEBACK": "ERROR", "FATAL": "CRITICAL"}.get(word, word)
    if entry_severity == "ERROR" and text.startswith("hint: "):
        # the trainer's error goes on with its fix on a line of its own (ftcli_trainer.errors.TrainerError.lines):
        # shown as plain output, `--severity ERROR` kept the error and dropped how to fix it
        return "ERROR"
    if entry_severity in ("WARNING", "CRITICAL", "ALERT", "EMERGENCY"):
        return entry_severity
    return "INFO"


def to_line(entry: LogEntry) -> Line:
    text = clean_text(entry.text)
    # Vertex's own lines (a replica's failure) are at the level Vertex gives them; only a replica's stderr is all ERROR
    severity = entry.severity if entry.replica == SERVICE else display_severity(entry.severity, text)
    return Line(entry.timestamp, entry.replica, severity, text, entry.insert_id)


# A cancelled job's error is Vertex's note of the cancel: "On successful cancellation, the CustomJob is not deleted;
# instead it becomes a job with a CustomJob.error value with a google.rpc.Status.code of 1, corresponding to
# Code.CANCELLED" (JobServiceClient.cancel_custom_job, google-cloud-aiplatform 2.7.0, read 2026-11-28), its message
# "CANCELED" (prefect-gcp's Vertex worker treats an error message with "CANCELED" in it as a cancel, not a failure:
# PrefectHQ/prefect-gcp PR #213, prefect_gcp/workers/vertex.py, read 2026-11-28). Said after the state it only
# repeated it: "job 6 CANCELLED: CANCELED".
CANCEL_NOTES = frozenset({"CANCELED", "CANCELLED"})


def said_error(state: str | None, error: str | None) -> str | None:
    """The job's error as worth saying next to its state: nothing for a cancelled job's note of the cancel (any other
    message on a cancelled job, a reason Vertex gives, is kept)."""
    if not error or not error.strip():
        return None
    if state == "CANCELLED" and error.strip().strip(".").upper() in CANCEL_NOTES:
        return None
    return error


def error_parts(error: str | None) -> tuple[str | None, list[str]]:
    """A job's error as its first line and the lines it goes on with: for Vertex's error of a failed replica, the
    end of that replica's stderr as Vertex kept it (the traceback, the cause last), without the link to the console's
    logs (`ftcli logs` reads the same logs)."""
    if not error or not error.strip():
        return error, []
    first, *rest = error.strip("\n").splitlines()
    kept = [x.rstrip() for x in rest if not x.startswith(LOGS_LINK)]
    while kept and not kept[-1].strip():
        kept.pop()
    while kept and not kept[0].strip():
        kept.pop(0)
    return first.rstrip(), kept


@dataclass
class Notice:
    """Something the reader must tell the user once (logs unreadable, and why; reason "state": the job's state
    unreadable for now; reason "unsupported": no live tail, the logs polled instead); it keeps following the job."""

    reason: str
    message: str
    hint: str | None = None


class LogStream(Protocol):
    """A live tail: a `TailBatch` per response until cut; `cancel()` ends it from another thread."""

    def __iter__(self) -> Iterator[TailBatch]: ...

    def cancel(self) -> None: ...


class LogsGateway(Protocol):
    """What the follower reads logs through (ftcli.gcp.cloud_logging.LoggingGateway, or a test's fake)."""

    def list(self, filter: str, *, patience: float = ...) -> Iterable[LogEntry]: ...

    def tail(self, filter: str, stop: threading.Event) -> LogStream: ...


class JobsGateway(Protocol):
    """What the follower reads a job's state through (ftcli.gcp.vertex.VertexGateway, or a test's fake)."""

    def get(self, name: JobName) -> Job: ...


class Source(threading.Thread):
    """Background reader: a tail stream with reconnects, or overlapping list polls when tail is unavailable.

    It never loops hot: a cut or unreachable stream reconnects with a growing pause, RESOURCE_EXHAUSTED on the
    tail falls back to polling no faster than `quota_interval`, and on a list it doubles the poll interval (up
    to `max_interval`). Without permission it reports once and stops reading; the job's state is still followed.
    """

    def __init__(self, gateway: LogsGateway, base_filter: str, since: dt.datetime | None, out: queue.Queue, *,
                 poll_interval: float, tail: bool, quota_interval: float, max_interval: float, reconnect: float,
                 reconnect_max: float):
        # (the waits are the follower's Timing, where their defaults are said; defaults here, a poll every 2 s
        # where Timing says 5, were never used and told a reader otherwise)
        super().__init__(daemon=True)
        self.gateway = gateway
        self.base_filter = base_filter
        self.since = since
        self.out = out
        self.poll_interval = poll_interval
        self.quota_interval = quota_interval
        self.max_interval = max_interval
        self.reconnect, self.reconnect_max = reconnect, reconnect_max
        self.use_tail = tail
        self.stop_event = threading.Event()
        self.newest: dt.datetime | None = None  # the newest receiveTimestamp seen
        # Entries the tail left out (suppression_info): the next catch-up list reaches back to `_gap_from`, the
        # newest receiveTimestamp seen before them (None: from the start), until one list has covered them.
        self._gaps = 0  # bumped at each response that reports left-out entries
        self._gap_from: dt.datetime | None = None
        self._next_gap_list = 0.0
        self.denied = False
        self._stream: LogStream | None = None
        self._told: set[str] = set()
        self.mode = "tail" if tail else "poll"

    def _filter(self, catch_up: bool = False) -> str:
        """The tail asks for everything new (a late line carries an old timestamp, so a timestamp bound would
        drop it); a catch-up list asks for what Cloud Logging *received* since a little before the newest
        entry seen, which finds late lines too."""
        f = self.base_filter + (f' AND timestamp>="{rfc3339(self.since)}"' if self.since else "")
        start = self.newest
        if self._gaps and start is not None:
            start = None if self._gap_from is None else min(start, self._gap_from)
        if catch_up and start is not None:
            f += f' AND receiveTimestamp>="{rfc3339(start - OVERLAP)}"'
        return f

    def _left_out(self, before: dt.datetime | None) -> None:
        """The tail says it left entries out, received after `before` (the newest seen until then): the catch-up
        lists reach back to them until one has listed them all. Those lists come at most once every
        `quota_interval`: a job that logs faster than a tail may send would otherwise cost an entries.list per
        response, and the project has 60 a minute."""
        if not self._gaps:
            self._gap_from = before
        elif before is None or self._gap_from is None:
            self._gap_from = None
        else:
            self._gap_from = min(self._gap_from, before)
        self._gaps += 1

    def _emit(self, entries: Iterable[LogEntry]) -> None:
        for entry in entries:
            received_at = entry.received or entry.timestamp
            if self.newest is None or received_at > self.newest:
                self.newest = received_at
            self.out.put(to_line(entry))

    def _tell(self, e: LogsUnavailable, suffix: str = "") -> None:
        """Say it once per reason: a problem that lasts is not repeated at every retry."""
        if e.reason in self._told:
            return
        self._told.add(e.reason)
        self.out.put(Notice(e.reason, e.message + suffix, e.hint))

    def stop(self) -> None:
        self.stop_event.set()
        if self._stream is not None:
            try:
                self._stream.cancel()
            except Exception:  # noqa: BLE001 - already closed
                pass

    def run(self) -> None:
        backoff = self.reconnect
        failed_opens = 0  # tails in a row that failed before their first response
        if self.use_tail:
            # A tail only sends what is written after it opens: a job followed after it started (`ftcli logs`
            # on a running job) has its history listed first, in order.
            self.poll_once()
        while not self.stop_event.is_set() and not self.denied:
            if self.use_tail:
                caught_up = False
                try:
                    self._stream = self.gateway.tail(self._filter(), self.stop_event)
                    for entries in self._stream:
                        before = self.newest
                        self._emit(entries)
                        backoff, failed_opens = self.reconnect, 0
                        if entries.suppressed:
                            self._left_out(before)
                        if not caught_up or (self._gaps and time.monotonic() >= self._next_gap_list):
                            # Once this tail is live, list what was written before it opened: since the first
                            # list, or while the last tail was down (duplicates are dropped later). Entries the
                            # tail left out are listed the same way, at most once every quota_interval.
                            self.poll_once()
                            caught_up = True
                except LogsUnavailable as e:
                    if e.reason in ("unsupported", "quota"):
                        # No live tail here, or no tail session left in the project: poll instead, gently.
                        self.use_tail, self.mode = False, "poll"
                        if e.reason == "quota":
                            self.poll_interval = max(self.poll_interval, self.quota_interval)
                            self._tell(e, f"; polling every {self.poll_interval:g} s instead")
                        else:
                            # Said once, as a note (nothing is wrong, nothing to fix): the lines came in batches
                            # every few seconds without a word, and a user could not tell why, nor how far behind
                            # the screen was.
                            self._tell(e, f"; reading the logs every {self.poll_interval:g} s instead, so lines "
                                          "come in batches")
                        continue
                    if e.reason == "denied":
                        self.denied = True
                        self._tell(e, "; following the job's state only")
                        return
                    self._tell(e, "; retrying, and following the job's state meanwhile")
                    failed_opens += 0 if caught_up else 1
                    why = ""  # (said above)
                except Exception as e:  # noqa: BLE001 - a cut stream: reconnect from the newest line
                    failed_opens += 0 if caught_up else 1
                    why = f" ({type(e).__name__}: {e})" if str(e) else f" ({type(e).__name__})"
                if self.stop_event.is_set():
                    return
                if failed_opens >= TAIL_TRIES:
                    self.use_tail, self.mode = False, "poll"
                    self._tell(LogsUnavailable("unsupported", f"the live tail of the logs failed {failed_opens} "
                                               f"times in a row{why}; reading the logs every "
                                               f"{self.poll_interval:g} s instead, so lines come in batches"))
                    continue
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, self.reconnect_max)
            else:
                self.poll_once()
                self.stop_event.wait(self.poll_interval)

    def poll_once(self) -> None:
        """One overlapping list; a failure is reported once and slows the polls down, never raised."""
        if self.denied:
            return
        gaps = self._gaps
        if gaps:
            self._next_gap_list = time.monotonic() + max(self.poll_interval, self.quota_interval)
        try:
            self._emit(self.gateway.list(self._filter(catch_up=True)))
            if gaps and self._gaps == gaps:  # the left-out entries are listed now (none left out meanwhile)
                self._gaps, self._gap_from = 0, None
        except LogsUnavailable as e:
            if e.reason == "denied":
                self.denied = True
                self._tell(e, "; following the job's state only")
            elif e.reason == "quota":
                self.poll_interval = min(max(self.poll_interval * 2, self.quota_interval), self.max_interval)
                self._tell(e, f"; reading less often (every {self.poll_interval:g} s or more)")
            else:
                # transient: the next poll overlaps and catches up
                self.poll_interval = min(max(self.poll_interval, self.quota_interval), self.max_interval)
                self._tell(e, "; retrying, and following the job's state meanwhile")


class Events:
    """What following reports; the command renders it (the defaults ignore everything)."""

    def start(self, job: Job) -> None:
        """The job as found when following starts (its replicas, say)."""

    def line(self, line: Line) -> None:
        """A log line, in order, once."""

    def state(self, state: str, error: str | None) -> None:
        """The job's state changed (RUNNING, SUCCEEDED, ...), with the job's error when it has one."""

    def draining(self, state: str) -> None:
        """The job ended in `state`; the lines still arriving are read before the end is said (state())."""

    def notice(self, notice: Notice) -> None:
        """The logs cannot be read now (said once per reason); the job's state is still followed."""

    def waiting(self, state: str, elapsed_s: float) -> None:
        """Called every read slice while the job waits for machines (QUEUED, PENDING) or has not logged a line
        yet; `elapsed_s` is the time in that state (since the job was created, or started)."""

    def done_waiting(self) -> None:
        """The first line arrived, or the job ended: the wait is over."""

    def reader_gone(self) -> bool:
        """Asked every read slice: True once nobody reads what is shown (the pipe's reader exited); following
        then ends with BrokenPipeError, as the next write would."""
        return False


@dataclass(frozen=True)
class Timing:
    """Every wait of the follower, in seconds. `scaled` shortens them all (the CLI tests run at 0.1)."""

    state_interval: float = 3.0  # re-read the job's state
    reorder_delay: float = 1.0  # hold a line this long so replicas come out in timestamp order
    drain_quiet: float = 3.0  # after the job ended: stop once the logs were quiet this long
    # between list polls when tailing is not available: 12 of the project's 60 entries.list a minute (see
    # gcp/cloud_logging.py), so a few followers at once (two terminals, a tuning job's trials) stay under it
    poll_interval: float = 5.0
    quota_interval: float = 5.0  # the slowest-start poll after RESOURCE_EXHAUSTED
    max_interval: float = 60.0  # polls never further apart than this
    read_slice: float = 0.2  # read this long at most before printing what is due
    reconnect: float = 0.5  # the first pause before re-opening a cut tail; it doubles up to reconnect_max
    reconnect_max: float = 5.0

    def scaled(self, factor: float) -> Timing:
        return Timing(**{k: v * factor for k, v in self.__dict__.items() if k != "read_slice"},
                      read_slice=self.read_slice)


# How long the follower goes on while the job's state cannot be read (each read already retries a 503 for 90 s).
STATE_PATIENCE = 600.0


@dataclass
class Follower:
    """Reports a job's log lines and state changes; `run` returns the final state."""

    logs: LogsGateway
    get_job: Callable[[], Job]
    job_id: str
    events: Events
    replica: str | None = None
    severity: str | None = None
    since: dt.datetime | None = None
    timing: Timing = field(default_factory=Timing)
    tail: bool = True
    last_lines: dict[str, deque] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._seen: set[str] = set()
        self.job: Job | None = None  # the last one read
        # replica -> when its last failure began (a traceback's first line, the trainer's "error: ..."): in a job of
        # several machines, the replica that failed first is the cause; the others fail on the connection it closed
        self.failed_at: dict[str, dt.datetime] = {}

    def _accept(self, line: Line) -> bool:
        if line.insert_id in self._seen:
            return False
        self._seen.add(line.insert_id)
        self.last_lines.setdefault(line.replica, deque(maxlen=15)).append(line)
        if line.replica != SERVICE and FAILURE_START_RE.match(line.text):
            self.failed_at[line.replica] = line.timestamp
        return True

    def wanted(self, line: Line) -> bool:
        """Whether --severity shows the line: by the level it is shown at (display_severity), not Cloud Logging's."""
        if self.severity is None:
            return True
        rank = SEVERITY_RANK.get(line.severity.upper())
        if rank is None:
            rank = int(line.severity) if line.severity.isdigit() else SEVERITY_RANK["INFO"]
        return rank >= SEVERITY_RANK[self.severity.upper()]

    def snapshot(self) -> None:
        """--no-follow: what is there now, in order. Nothing retries it later, so the gateway retries a page that
        failed on something passing (a 503, the per-minute read quota) for up to `max_interval`."""
        base = job_filter(self.job_id, self.replica, self.since)
        entries = self.logs.list(base, patience=self.timing.max_interval)
        lines = sorted(line for line in map(to_line, entries) if self._accept(line) and self.wanted(line))
        for line in lines:
            self.events.line(line)

    def _waited(self, state: str, t0: float) -> float:
        """Seconds the job has been in its waiting phase (its create or start time when known)."""
        job = self.job
        since = (job.created if state in WAITING_STATES else job.started or job.created) if job else None
        if since is None:
            return time.monotonic() - t0
        return max(0.0, (dt.datetime.now(dt.UTC) - since).total_seconds())

    def run(self) -> str:
        t = self.timing
        base = job_filter(self.job_id, self.replica)
        q: queue.Queue = queue.Queue()
        source = Source(self.logs, base, self.since, q, poll_interval=t.poll_interval, tail=self.tail,
                        quota_interval=t.quota_interval, max_interval=t.max_interval, reconnect=t.reconnect,
                        reconnect_max=t.reconnect_max)
        source.start()
        pending: list[tuple[float, Line]] = []
        state: str | None = None
        job: Job | None = None
        next_state_check = 0.0
        ended_at = None
        started = last_arrival = time.monotonic()
        final_listed = False
        shown_any = waiting = False
        unreadable_since: float | None = None
        told_state = False
        try:
            while True:
                if self.events.reader_gone():
                    # `ftcli logs JOB | head -1`: a quiet job would otherwise be followed until its next line
                    raise BrokenPipeError(errno.EPIPE, "the reader of ftcli's output has gone")
                now = time.monotonic()
                if now >= next_state_check:
                    try:
                        self.job = job = self.get_job()
                        unreadable_since = None
                    except FtcliError as e:
                        # One failed read of the state (a 500, the per-minute read quota, 90 s of 503s) ended the
                        # following of a job that ran on; its logs are still read, and the state is read again.
                        # What lasts past STATE_PATIENCE (a login that expired, a role taken away) is raised.
                        if job is None or isinstance(e, NotFound):
                            raise
                        unreadable_since = unreadable_since or now
                        if now - unreadable_since > STATE_PATIENCE:
                            raise FollowingLost(e, "the job", STATE_PATIENCE) from e
                        if not told_state:
                            told_state = True
                            self.events.notice(Notice("state", f"cannot read the job's state now ({e.message}); "
                                                      "still following it, and trying again", e.hint))
                        next_state_check = now + max(t.state_interval, t.quota_interval)
                        continue
                    if job.state != state:
                        state = job.state
                        if state not in FINAL_STATES:
                            self.events.state(state, job.error)
                    if state in FINAL_STATES and ended_at is None:
                        ended_at = now
                        self.events.draining(state)
                    next_state_check = now + t.state_interval
                assert state is not None and job is not None  # both read on the first pass
                if ended_at is None and (state in WAITING_STATES or not shown_any):
                    waiting = True
                    self.events.waiting(state, self._waited(state, started))
                elif waiting:
                    waiting = False
                    self.events.done_waiting()
                # Read for one slice at most, then print what is due: a steady stream must not keep the
                # lines off the screen until it pauses.
                until = time.monotonic() + t.read_slice
                try:
                    while (left := until - time.monotonic()) > 0:
                        item = q.get(timeout=left)
                        if isinstance(item, Notice):
                            self.events.notice(item)
                        elif self._accept(item) and self.wanted(item):
                            pending.append((time.monotonic(), item))
                            last_arrival = time.monotonic()
                except queue.Empty:
                    pass
                now = time.monotonic()
                flush_all = ended_at is not None and now - last_arrival >= t.drain_quiet
                ready = [p for p in pending if flush_all or now - p[0] >= t.reorder_delay]
                if ready:
                    pending = [p for p in pending if not (flush_all or now - p[0] >= t.reorder_delay)]
                    if waiting:
                        waiting = False
                        self.events.done_waiting()
                    shown_any = True
                    for _, line in sorted(ready, key=lambda p: p[1]):
                        self.events.line(line)
                if ended_at is not None and now - last_arrival >= t.drain_quiet and not pending:
                    if not final_listed:
                        # One last overlapping read catches lines the stream had not delivered yet.
                        source.poll_once()
                        final_listed = True
                        # ... and what it found gets a sixth of the quiet time (0.5 s by default) to come in.
                        last_arrival = time.monotonic() - t.drain_quiet + t.drain_quiet / 6
                        continue
                    # The end is said after the lines still arriving when it came: last, whether the job was
                    # followed live or had ended before `ftcli logs` started (it came first there, in --json too).
                    self.events.state(state, job.error)
                    return state
        finally:
            source.stop()
            if waiting:
                self.events.done_waiting()


@dataclass
class Outcome:
    """How following ended. `state` is None after a snapshot (--no-follow). For a job that did not succeed,
    `failing_replica` and `last_lines` are the replica that logged an error (else the first that logged) and its
    last lines, and `job` is the job as last read (with its error)."""

    state: str | None
    job: Job
    failing_replica: str | None = None
    last_lines: list[Line] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if self.state is None else EXIT_FOR_STATE.get(self.state, 3)


def check_severity(severity: str | None) -> None:
    """Refuse a --severity that is no level --severity takes, with the one it most likely meant (`warn`: WARNING)."""
    from ftcli_trainer.config import choice_line

    if severity is not None and severity.upper() not in SEVERITIES:
        raise UsageError(choice_line("--severity", severity, SEVERITIES))


def follow_job(name: JobName, *, vertex: JobsGateway, logs: LogsGateway, events: Events, follow: bool = True,
               replica: str | None = None, severity: str | None = None, since: dt.datetime | None = None,
               timing: Timing | None = None, label: str | None = None) -> Outcome:
    """Follow job `name` until it ends (or, with follow=False, report what is logged now). `label` is how the user
    refers to the job (its short id), for error messages."""
    label = label or name.id
    check_severity(severity)
    job = vertex.get(name)
    replicas = job.replica_names
    if replica and replica not in replicas:
        raise UsageError(f"--replica {replica} matches no replica of job {label}",
                         hint=f"its replicas: {', '.join(replicas) or 'none listed'}")
    events.start(job)
    if since is None and job.created is not None:
        # A job logs nothing before it was created: without a timestamp bound, entries.list scans the project's
        # whole retention (Google's Go and Java clients add a 24 h default for that reason: google-cloud-go PR
        # 3120, java-logging PR 304, read 2026-11-27). The margin covers a VM clock running behind.
        since = job.created - CLOCK_MARGIN
    follower = Follower(logs=logs, get_job=lambda: vertex.get(name), job_id=name.id, events=events, replica=replica,
                        severity=severity, since=since, timing=timing or Timing())
    if not follow:
        if job.final:
            # (its lines are printed before the end is said: an interruption there is of a job that has ended)
            events.draining(job.state)
        follower.snapshot()
        if not job.final:
            return Outcome(None, job)
        # A job that has already ended: the snapshot ends as following it would, with its state and exit status (a
        # FAILED job's --no-follow exited 0 and never said it failed).
        events.state(job.state, job.error)
        return _ended(job.state, job, follower)
    state = follower.run()
    if state == "SUCCEEDED":
        return Outcome(state, follower.job or job)
    return _ended(state, vertex.get(name), follower)


def _ended(state: str, job: Job, follower: Follower) -> Outcome:
    """The outcome of a job that ended in `state`: for a failed one, the replica Vertex's error names (else the one
    that logged an error, else the first that logged) and its last lines: those Vertex's error carries when it
    does (what the replica wrote last before it failed), else the last ones it logged."""
    if state != "FAILED":
        return Outcome(state, job)
    _, said = error_parts(job.error)
    vertex_named = FAILED_REPLICA_RE.match(job.error or "")
    failed = follower.failed_at
    if len(failed) > 1 and vertex_named and min(failed, key=lambda r: failed[r]) != vertex_named[1]:
        # Vertex names the replica whose process ended first; the chief's can end before the worker whose bad row
        # closed the connection it then failed on ("Connection reset by peer"). The one whose failure began first
        # says why.
        rep = min(failed, key=lambda r: failed[r])
        return Outcome(state, job, rep, list(follower.last_lines[rep])[-10:])
    if vertex_named and said:
        # Not the lines logged last: "If any containers restart before Vertex AI shuts down the entire job, these
        # containers may produce logs" ("Understand the custom training service", Vertex AI docs, read 2026-11-28),
        # and a restarted container's start (pip's lines) came after the traceback that says why.
        rep, at = vertex_named[1], job.ended or dt.datetime.now(dt.UTC)
        return Outcome(state, job, rep, [Line(at, rep, display_severity("ERROR", text), text, "")
                                         for text in said][-10:])
    failing = [r for r in follower.last_lines if r and r != SERVICE] or list(follower.last_lines)
    if not failing:
        return Outcome(state, job)
    named = [r for r in FAILED_REPLICA_RE.findall(job.error or "") if r in follower.last_lines]
    errors = [r for r in failing if any(x.severity == "ERROR" for x in follower.last_lines[r])]
    rep = (named or errors or failing)[0]
    return Outcome(state, job, rep, list(follower.last_lines[rep])[-10:])
