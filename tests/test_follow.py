"""The log follower against a fake gateway of ftcli's own values: milliseconds a test, no Google type anywhere.

The emulator tests (tests/cli/test_logs.py) stay the end-to-end proof over the real protocols; these pin down the
follower's own logic: order, de-duplication, waits, fallbacks, how a failure is summed up."""

from __future__ import annotations

import datetime as dt
import itertools
import threading
import time

import pytest

from ftcli.errors import FtcliError, LogsUnavailable, NotFound, UsageError
from ftcli.follow import Events, Timing, follow_job
from ftcli.values import Job, JobName, LogEntry, Pool, TailBatch

NAME = JobName("p", "us-central1", "123")
FAST = Timing(state_interval=0.01, reorder_delay=0.02, drain_quiet=0.05, poll_interval=0.01, quota_interval=0.02,
              max_interval=0.1, read_slice=0.005, reconnect=0.01, reconnect_max=0.05)
T0 = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC)


def job(state: str, error: str | None = None, replicas: int = 1, created: dt.datetime | None = None) -> Job:
    pools = (Pool("n1-standard-8", replicas=1),) + ((Pool("n1-standard-8", replicas=replicas - 1),)
                                                      if replicas > 1 else ())
    return Job(NAME, "run", state, error, created=created, pools=pools)


class FakeVertex:
    """Each get() returns the next state of `states` (the last one sticks)."""

    def __init__(self, *states: str | Job):
        self.states = [s if isinstance(s, Job) else job(s) for s in states]
        self.gets = 0

    def get(self, name: JobName) -> Job:
        assert name == NAME
        self.gets += 1
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


class FakeStream:
    def __init__(self, logs: FakeLogs, start: int, stop: threading.Event):
        self.logs, self.pos, self.stop = logs, start, stop
        self.cancelled = False

    def __iter__(self):
        while not (self.cancelled or self.stop.is_set()):
            with self.logs.cond:
                if self.logs.cut_after is not None and self.pos >= self.logs.cut_after:
                    self.logs.cut_after = None
                    raise ConnectionResetError("stream cut")
                new = self.logs.entries[self.pos:]
                if not new:
                    self.logs.cond.wait(0.01)
                    continue
                self.pos = len(self.logs.entries)
                # as Cloud Logging's rate limit does: the first entries of a response left out, only counted
                left_out, self.logs.suppress = min(self.logs.suppress, len(new)), 0
            batch = TailBatch(new[left_out:])
            batch.suppressed = left_out
            yield batch

    def cancel(self) -> None:
        self.cancelled = True


class FakeLogs:
    """A Cloud Logging gateway in ftcli's terms: list() and tail() of LogEntry values, LogsUnavailable errors."""

    def __init__(self):
        self.entries: list[LogEntry] = []
        self.cond = threading.Condition()
        self.ids = itertools.count()
        self.tail_error: LogsUnavailable | None = None
        self.list_errors: list[LogsUnavailable] = []
        self.lists = self.tails = 0
        self.cut_after: int | None = None
        self.suppress = 0  # the open tail leaves out this many of the next entries (they stay listable)
        self.requests: list[tuple[str, str]] = []  # ("list" or "tail", the filter), in the order they were made
        self.streams: list[FakeStream] = []
        self.list_times: list[float] = []

    def write(self, text: str, replica: str = "workerpool0-0", *, at: dt.datetime | None = None,
              severity: str = "INFO", insert_id: str | None = None, received: dt.datetime | None = None) -> None:
        now = dt.datetime.now(dt.UTC)
        with self.cond:
            self.entries.append(LogEntry(at or now, replica, severity, text, insert_id or f"e{next(self.ids)}",
                                         received or now))
            self.cond.notify_all()

    def list(self, filter: str, *, patience: float = 0.0):
        self.lists += 1
        self.list_times.append(time.monotonic())
        self.requests.append(("list", filter))
        if self.list_errors:
            raise self.list_errors.pop(0)
        with self.cond:
            return sorted(self.entries)

    def tail(self, filter: str, stop: threading.Event):
        self.tails += 1
        self.requests.append(("tail", filter))
        if self.tail_error is not None:
            raise self.tail_error
        with self.cond:
            self.streams.append(FakeStream(self, len(self.entries), stop))
            return self.streams[-1]


class Recorder(Events):
    def __init__(self):
        self.events: list[tuple] = []

    def start(self, job):
        self.events.append(("start", job.state))

    def line(self, line):
        self.events.append(("line", line.replica, line.text, line.severity))

    def state(self, state, error):
        self.events.append(("state", state, error))

    def notice(self, notice):
        self.events.append(("notice", notice.reason))

    def waiting(self, state, elapsed_s):
        self.events.append(("waiting", state, elapsed_s))

    def done_waiting(self):
        self.events.append(("done_waiting",))

    def of(self, kind: str) -> list[tuple]:
        return [e for e in self.events if e[0] == kind]

    @property
    def texts(self) -> list[str]:
        return [e[2] for e in self.of("line")]


def later(delay: float, fn, *args):
    timer = threading.Timer(delay, fn, args)
    timer.start()
    return timer


def follow(vertex, logs, rec=None, **kw):
    rec = rec or Recorder()
    outcome = follow_job(NAME, vertex=vertex, logs=logs, events=rec, timing=FAST, **kw)
    return outcome, rec


def test_lines_of_several_replicas_come_out_in_time_order_once():
    logs = FakeLogs()
    vertex = FakeVertex(job("RUNNING", replicas=2), *["RUNNING"] * 5, "SUCCEEDED")
    at = [T0 + dt.timedelta(seconds=i) for i in range(4)]

    def write():
        logs.write("b", "workerpool1-0", at=at[1], insert_id="b")
        logs.write("a", "workerpool0-0", at=at[0], insert_id="a")
        logs.write("a", "workerpool0-0", at=at[0], insert_id="a")  # the same entry twice (a reconnect's overlap)
        logs.write("c", "workerpool0-0", at=at[2], insert_id="c")

    started = time.monotonic()
    later(0.01, write)
    outcome, rec = follow(vertex, logs)
    assert time.monotonic() - started < 2.0
    assert rec.texts == ["a", "b", "c"]
    assert [e[1] for e in rec.of("state")] == ["RUNNING", "SUCCEEDED"]
    assert outcome.state == "SUCCEEDED" and outcome.exit_code == 0


def test_a_pending_job_reports_its_wait_then_the_first_line_ends_it():
    logs = FakeLogs()
    created = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    vertex = FakeVertex(*[job("PENDING", created=created)] * 5, *["RUNNING"] * 30, "SUCCEEDED")
    later(0.15, logs.write, "hello")
    outcome, rec = follow(vertex, logs)
    waits = rec.of("waiting")
    assert {w[1] for w in waits} == {"PENDING", "RUNNING"}  # for machines, then for the first line
    pending = [w for w in waits if w[1] == "PENDING"]
    assert pending and all(290 < w[2] < 400 for w in pending)  # elapsed since the job was created, not since now
    first_line = rec.events.index(("line", "workerpool0-0", "hello", "INFO"))
    assert ("done_waiting",) in rec.events[:first_line]
    assert not [e for e in rec.events[first_line:] if e[0] == "waiting"]
    assert outcome.state == "SUCCEEDED"


def test_a_job_that_ends_without_a_line_stops_waiting():
    logs = FakeLogs()
    outcome, rec = follow(FakeVertex("PENDING", "PENDING", "CANCELLED"), logs)
    assert rec.of("waiting") and rec.events[-1] == ("done_waiting",) or ("done_waiting",) in rec.events
    assert outcome.state == "CANCELLED" and outcome.exit_code == 4


def test_no_live_tail_falls_back_to_polls_and_loses_nothing():
    logs = FakeLogs()
    logs.tail_error = LogsUnavailable("unsupported", "no tail here")
    for i in range(20):
        logs.write(f"line {i:02d}", at=T0 + dt.timedelta(seconds=i))
    outcome, rec = follow(FakeVertex("RUNNING", "RUNNING", "SUCCEEDED"), logs)
    assert rec.texts == [f"line {i:02d}" for i in range(20)]
    assert logs.tails == 1 and logs.lists >= 1
    # said once (the lines come in batches, and a user could not tell why), though the polls go on
    assert rec.of("notice") == [("notice", "unsupported")]


def test_permission_denied_is_said_once_and_the_state_still_followed():
    logs = FakeLogs()
    denied = LogsUnavailable("denied", "cannot read the job's logs: permission denied")
    logs.tail_error = denied
    logs.list_errors = [denied] * 50
    outcome, rec = follow(FakeVertex("RUNNING", "RUNNING", "RUNNING", "SUCCEEDED"), logs)
    assert [e[1] for e in rec.of("notice")] == ["denied"]
    assert outcome.state == "SUCCEEDED"
    # and it stops reading (no role comes back by itself): one list, no tail, no retry, not even the last read
    assert [kind for kind, _ in logs.requests] == ["list"]


def test_quota_on_the_tail_polls_slowly_and_says_so_once():
    logs = FakeLogs()
    logs.tail_error = LogsUnavailable("quota", "no live tail left")
    logs.list_errors = [LogsUnavailable("quota", "60 reads a minute")] * 2
    logs.write("still here")
    started = time.monotonic()
    outcome, rec = follow(FakeVertex(*["RUNNING"] * 10, "SUCCEEDED"), logs)
    assert rec.texts == ["still here"]
    assert [e[1] for e in rec.of("notice")] == ["quota"]
    assert logs.tails == 1  # never retried in a loop
    assert logs.lists <= (time.monotonic() - started) / FAST.quota_interval + 3


def test_after_the_tail_quota_the_polls_are_no_closer_than_the_quota_interval():
    logs = FakeLogs()
    logs.tail_error = LogsUnavailable("quota", "no live tail left")
    timing = Timing(**{**FAST.__dict__, "poll_interval": 0.01, "quota_interval": 0.1})
    follow_job(NAME, vertex=FakeVertex(*["RUNNING"] * 40, "SUCCEEDED"), logs=logs, events=Recorder(), timing=timing)
    polls = logs.list_times[1:-1]  # (the history before the tail was tried, and the last read once the job ended)
    assert len(polls) >= 2
    assert min(b - a for a, b in itertools.pairwise(polls)) >= 0.1 - 0.005


class ReadsFailing(FakeVertex):
    """RUNNING; the reads from the third (the follower's second) to the `failing`th fail with `error`; SUCCEEDED
    after."""

    def __init__(self, error: FtcliError, failing: int):
        super().__init__("RUNNING")
        self.error, self.failing = error, failing
        self.times: list[float] = []

    def get(self, name: JobName) -> Job:
        self.times.append(time.monotonic())
        n = len(self.times)
        if 3 <= n <= self.failing:
            raise self.error
        return job("RUNNING" if n <= self.failing + 2 else "SUCCEEDED")


def test_a_failed_state_read_is_tried_again_no_sooner_than_the_quota_interval():
    # Re-read at every read slice, a failing GetCustomJob (a 500, the per-minute read quota) was asked 5 times a
    # second, which spends the quota it waits for.
    vertex = ReadsFailing(FtcliError("Vertex AI failed on Google's side (INTERNAL)"), failing=5)
    outcome, rec = follow(vertex, FakeLogs())
    assert outcome.state == "SUCCEEDED" and rec.of("notice") == [("notice", "state")]
    failed = vertex.times[2:6]
    assert min(b - a for a, b in itertools.pairwise(failed)) >= max(FAST.state_interval, FAST.quota_interval) - 0.005


def test_the_jobs_state_is_read_every_state_interval_not_every_read_slice():
    times: list[float] = []
    vertex = FakeVertex(*["RUNNING"] * 6, "SUCCEEDED")
    vertex.get = lambda name, get=vertex.get: times.append(time.monotonic()) or get(name)
    timing = Timing(**{**FAST.__dict__, "state_interval": 0.05})  # 10 read slices
    follow_job(NAME, vertex=vertex, logs=FakeLogs(), events=Recorder(), timing=timing)
    follower_reads = times[1:]  # (the first: follow_job's, before following began)
    assert len(follower_reads) >= 5
    assert min(b - a for a, b in itertools.pairwise(follower_reads)) >= 0.05 - 0.005


def test_the_wait_of_a_job_without_a_creation_time_counts_from_when_following_began():
    outcome, rec = follow(FakeVertex(*["PENDING"] * 5, "CANCELLED"), FakeLogs())
    assert rec.of("waiting") and all(0 <= w[2] < 5 for w in rec.of("waiting"))


def test_a_job_gone_while_followed_ends_the_following_at_once():
    vertex = ReadsFailing(NotFound("job 123 not found"), failing=100)
    started = time.monotonic()
    with pytest.raises(NotFound):
        follow(vertex, FakeLogs())
    assert len(vertex.times) == 3 and time.monotonic() - started < 2


def test_a_cut_stream_reconnects_and_catches_up():
    logs = FakeLogs()
    logs.cut_after = 3

    def write():
        for i in range(10):
            logs.write(f"line {i}", at=T0 + dt.timedelta(seconds=i))
            time.sleep(0.005)

    later(0.02, write)
    outcome, rec = follow(FakeVertex(*["RUNNING"] * 20, "SUCCEEDED"), logs)
    assert rec.texts == [f"line {i}" for i in range(10)]
    assert logs.tails >= 2


def test_a_job_followed_after_it_started_shows_its_history_first_then_the_new_lines():
    # A tail only sends what is written after it opens: `ftcli logs` on a running job showed none of the lines
    # logged before it attached (they came at the end, out of order, or, older than 30 s, never).
    logs = FakeLogs()
    for i in range(5):
        logs.write(f"old {i}", at=T0 + dt.timedelta(seconds=i))

    def write():
        for i in range(5):
            logs.write(f"new {i}")
            time.sleep(0.005)

    later(0.1, write)
    outcome, rec = follow(FakeVertex(*["RUNNING"] * 30, "SUCCEEDED"), logs)
    assert rec.texts == [f"old {i}" for i in range(5)] + [f"new {i}" for i in range(5)]
    assert logs.tails == 1 and outcome.exit_code == 0


class RunningUntilShown:
    """A job RUNNING until `rec` has shown the line `text` (SUCCEEDED then), or `patience` seconds have passed."""

    def __init__(self, rec: Recorder, text: str, created: dt.datetime | None = None, patience: float = 5.0):
        self.rec, self.text, self.created = rec, text, created
        self.deadline = time.monotonic() + patience
        self.shown_while_running = self.ended = False

    def get(self, name: JobName) -> Job:
        assert name == NAME
        if not self.ended:
            self.shown_while_running = self.text in self.rec.texts
            self.ended = self.shown_while_running or time.monotonic() > self.deadline
        return job("SUCCEEDED" if self.ended else "RUNNING", created=self.created)


def until(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


def lists(logs: FakeLogs) -> int:
    return len([r for r in logs.requests if r[0] == "list"])


def test_a_line_is_shown_while_the_job_runs_not_held_until_it_ends():
    rec = Recorder()
    vertex = RunningUntilShown(rec, "step 1")
    logs = FakeLogs()
    later(0.05, logs.write, "step 1")
    outcome, _ = follow(vertex, logs, rec)
    assert vertex.shown_while_running and rec.texts == ["step 1"] and outcome.exit_code == 0


@pytest.mark.parametrize("error", [ConnectionResetError("reset by peer"),
                                   LogsUnavailable("unreachable", "cannot reach Cloud Logging")])
def test_a_tail_that_keeps_failing_gives_way_to_polls_and_lines_show_while_the_job_runs(error):
    # A live tail that failed each time before its first response (a proxy that breaks gRPC streams) was reopened
    # forever, and nothing listed the lines meanwhile: they showed only once the job had ended.
    from ftcli.follow import TAIL_TRIES

    rec = Recorder()
    vertex = RunningUntilShown(rec, "step 1")
    logs = FakeLogs()
    logs.tail_error = error
    later(0.05, logs.write, "step 1")
    outcome, _ = follow(vertex, logs, rec)
    assert vertex.shown_while_running and rec.texts == ["step 1"] and outcome.exit_code == 0
    assert logs.tails == TAIL_TRIES
    assert rec.of("notice")[-1] == ("notice", "unsupported")


class CutAfterEachBatch(FakeLogs):
    """Each tail sends one batch of the lines written after it opened, then is cut."""

    def tail(self, filter: str, stop: threading.Event):
        self.tails += 1
        self.requests.append(("tail", filter))
        start = len(self.entries)

        def stream():
            while not stop.is_set():
                with self.cond:
                    if len(self.entries) > start:
                        batch = TailBatch(self.entries[start:])
                        break
                    self.cond.wait(0.01)
            else:
                return
            yield batch
            raise ConnectionResetError("stream cut")

        return stream()


def test_a_tail_cut_after_it_sent_lines_is_reopened_however_often():
    # (only tails that fail before their first response count towards giving up: a stream cut after it sent lines,
    # as Cloud Logging ends long ones, is reopened as before)
    from ftcli.follow import TAIL_TRIES

    rec = Recorder()
    texts = [f"line {i}" for i in range(2 * TAIL_TRIES)]
    vertex = RunningUntilShown(rec, texts[-1])
    logs = CutAfterEachBatch()

    def write():
        for i, text in enumerate(texts):
            until(lambda i=i: logs.tails > i)  # (one line for each tail)
            logs.write(text, at=T0 + dt.timedelta(seconds=i))

    later(0.02, write)
    outcome, _ = follow(vertex, logs, rec)
    assert vertex.shown_while_running and rec.texts == texts
    assert logs.tails > TAIL_TRIES and not rec.of("notice")


# the filters below: the job's lines since 10 minutes before it was created (follow_job's CLOCK_MARGIN), and, for a
# catch-up list, what Cloud Logging received since 30 s (OVERLAP) before the newest line read
BASE = 'resource.type="ml_job" AND resource.labels.job_id="123" AND timestamp>="2026-11-27T11:50:00.000000Z"'


def received_since(minutes: int, seconds: int) -> str:
    return BASE + f' AND receiveTimestamp>="2026-11-27T12:{minutes:02d}:{seconds:02d}.000000Z"'


def test_the_catch_up_lists_ask_for_what_was_received_since_just_before_the_newest_line():
    # A catch-up list without the receiveTimestamp bound reads the job's whole log again each time (60 reads a minute
    # per project); one bound at the newest line itself misses a late line received just before it.
    rec = Recorder()
    vertex = RunningUntilShown(rec, "new", created=T0)
    logs = FakeLogs()
    logs.write("old", received=T0 + dt.timedelta(minutes=2))

    def write():
        until(lambda: ("tail", BASE) in logs.requests)
        time.sleep(0.05)  # (the fake's stream opens just after the request is counted)
        logs.write("new", received=T0 + dt.timedelta(minutes=3))

    later(0, write)
    outcome, _ = follow(vertex, logs, rec)
    time.sleep(0.05)
    # the history, the tail, the catch-up once the tail is live, the last read once the job has ended; no more after
    assert logs.requests == [("list", BASE), ("tail", BASE), ("list", received_since(2, 30)),
                             ("list", received_since(2, 30))]
    assert rec.texts == ["old", "new"] and vertex.shown_while_running
    # and the tail is closed (a project has 10 live tails; one left open in a process that follows the trials of a
    # tuning job one after another holds its slot)
    assert [s.cancelled for s in logs.streams] == [True]


def test_lines_the_tail_left_out_are_listed_from_before_them_once():
    # The tail leaves out b and c (rate limit) in the response that brings x, received later: the catch-up list must
    # reach back to the newest line before them (a), not to x, whose bound is past them; once it has listed them, the
    # tail's next responses cost no list.
    rec = Recorder()
    vertex = RunningUntilShown(rec, "d", created=T0)
    logs = FakeLogs()

    def write():
        until(lambda: ("tail", BASE) in logs.requests)
        time.sleep(0.05)
        logs.write("a", received=T0 + dt.timedelta(minutes=1))
        until(lambda: lists(logs) == 2)  # the catch-up once the tail is live
        with logs.cond:
            logs.suppress = 2
            for text, minute in (("b", 2), ("c", 3), ("x", 5)):
                logs.write(text, received=T0 + dt.timedelta(minutes=minute))
        until(lambda: lists(logs) == 3)
        time.sleep(0.1)  # past the least time between two catch-up lists (FAST.quota_interval)
        logs.write("d", received=T0 + dt.timedelta(minutes=6))

    later(0, write)
    outcome, _ = follow(vertex, logs, rec)
    time.sleep(0.05)
    assert logs.requests == [("list", BASE), ("tail", BASE), ("list", received_since(0, 30)),
                             ("list", received_since(0, 30)), ("list", received_since(5, 30))]
    assert sorted(rec.texts) == ["a", "b", "c", "d", "x"] and vertex.shown_while_running


@pytest.mark.parametrize("live", [True, False], ids=["followed_live", "ended_before"])
def test_the_end_is_said_after_the_last_line(live):
    # An ended job's state came first and its lines after it (in --json too); a live one's lines still draining
    # came after its end.
    logs = FakeLogs()
    for i in range(3):
        logs.write(f"line {i}", at=T0 + dt.timedelta(seconds=i))
    if live:
        later(0.05, lambda: logs.write("drained"))
    vertex = FakeVertex("RUNNING", "RUNNING", "SUCCEEDED") if live else FakeVertex("SUCCEEDED")
    outcome, rec = follow(vertex, logs)
    kinds = [e for e in rec.events if e[0] in ("line", "state")]
    assert kinds[-1] == ("state", "SUCCEEDED", None) and outcome.exit_code == 0
    assert [e[0] for e in kinds].count("state") == (2 if live else 1)
    assert rec.texts == ["line 0", "line 1", "line 2"] + (["drained"] if live else [])


def test_a_failed_job_names_the_replica_that_logged_the_error():
    logs = FakeLogs()
    logs.write("worker fine", "workerpool1-0", at=T0)
    logs.write("step 1", "workerpool0-0", at=T0 + dt.timedelta(seconds=1))
    logs.write("Traceback (most recent call last):", "workerpool0-0", at=T0 + dt.timedelta(seconds=2),
               severity="ERROR")
    failed = job("FAILED", "The replica workerpool0-0 exited with a non-zero status of 1.", replicas=2)
    outcome, rec = follow(FakeVertex(job("RUNNING", replicas=2), job("RUNNING", replicas=2), failed), logs)
    assert outcome.state == "FAILED" and outcome.exit_code == 3
    assert outcome.failing_replica == "workerpool0-0"
    assert [x.text for x in outcome.last_lines] == ["step 1", "Traceback (most recent call last):"]
    assert "non-zero status of 1" in outcome.job.error


def test_a_failed_job_shows_the_replica_vertex_names_even_past_a_long_traceback():
    # Found by hand: workerpool1-1 failed with a 20-line traceback (its "Traceback" line no longer among the last
    # lines kept, its stderr lines shown as plain output); the summary said "last lines of workerpool0-0" under
    # Vertex's "The replica workerpool1-1 exited ...", with the chief's harmless step lines.
    logs = FakeLogs()
    for i in range(5):
        logs.write(f"step {i}", "workerpool0-0", at=T0 + dt.timedelta(seconds=i))
    logs.write("Traceback (most recent call last):", "workerpool1-1", at=T0 + dt.timedelta(seconds=10),
               severity="ERROR")
    for i in range(20):
        logs.write(f'  File "x.py", line {i}', "workerpool1-1", at=T0 + dt.timedelta(seconds=11 + i), severity="ERROR")
    logs.write("OSError: cannot download the model", "workerpool1-1", at=T0 + dt.timedelta(seconds=40),
               severity="ERROR")
    error = "The replica workerpool1-1 exited with a non-zero status of 1. Termination reason: Error."
    outcome, rec = follow(FakeVertex(job("RUNNING", replicas=3), job("FAILED", error, replicas=3)), logs)
    assert outcome.exit_code == 3 and outcome.failing_replica == "workerpool1-1"
    assert outcome.last_lines[-1].text == "OSError: cannot download the model"


def test_a_failed_job_ends_on_the_traceback_vertex_kept_not_on_a_restarted_containers_lines():
    # Vertex restarts a failed replica's container before it ends the job ("these containers may produce logs"): a
    # real job's log went on with pip's lines after the traceback, which the summary showed as the last lines instead
    # of the cause. Vertex's error carries the end of the failed replica's stderr: that is what is shown.
    logs = FakeLogs()
    logs.write("Traceback (most recent call last):", "workerpool0-0", at=T0, severity="ERROR")
    logs.write("ModuleNotFoundError: No module named 'ultralytics'", "workerpool0-0", at=T0, severity="ERROR")
    for i in range(12):
        logs.write(f"Collecting package{i}", "workerpool0-0", at=T0 + dt.timedelta(seconds=5 + i))
    error = ("The replica workerpool0-0 exited with a non-zero status of 1. Termination reason: Error. \n"
             "Traceback (most recent call last):\n  File \"task.py\", line 261, in __init__\n"
             "ModuleNotFoundError: No module named 'ultralytics'\n\nTo find out more about why your job exited please "
             "check the logs: https://console.cloud.google.com/logs/viewer?project=1&resource=ml_job%2Fjob_id%2F9")
    outcome, rec = follow(FakeVertex(job("RUNNING"), job("FAILED", error)), logs)
    assert outcome.exit_code == 3 and outcome.failing_replica == "workerpool0-0"
    assert [x.text for x in outcome.last_lines] == ["Traceback (most recent call last):",
                                                    '  File "task.py", line 261, in __init__',
                                                    "ModuleNotFoundError: No module named 'ultralytics'"]
    assert outcome.last_lines[0].severity == "ERROR"


def test_a_failed_job_of_two_machines_shows_the_replica_that_failed_first():
    # Found by hand: a worker failed on a bad row; the chief failed next on the connection it closed, its process
    # ended first, and Vertex's error named the chief: the summary ended on gloo's "Connection reset by peer".
    logs = FakeLogs()
    logs.write("step 3/6", "workerpool0-0", at=T0)
    logs.write("Traceback (most recent call last):", "workerpool1-0", at=T0 + dt.timedelta(seconds=1),
               severity="ERROR")
    logs.write("ValueError: bad row 17", "workerpool1-0", at=T0 + dt.timedelta(seconds=1), severity="ERROR")
    logs.write("Traceback (most recent call last):", "workerpool0-0", at=T0 + dt.timedelta(seconds=1.2),
               severity="ERROR")
    logs.write("RuntimeError: Connection reset by peer", "workerpool0-0", at=T0 + dt.timedelta(seconds=1.2),
               severity="ERROR")
    error = ("The replica workerpool0-0 exited with a non-zero status of 1. Termination reason: Error. \n"
             "Traceback (most recent call last):\nRuntimeError: Connection reset by peer\n")
    outcome, rec = follow(FakeVertex(job("RUNNING", replicas=2), job("FAILED", error, replicas=2)), logs)
    assert outcome.failing_replica == "workerpool1-0"
    assert [x.text for x in outcome.last_lines] == ["Traceback (most recent call last):", "ValueError: bad row 17"]


def test_a_replica_the_job_does_not_have_is_refused_with_its_replicas():
    with pytest.raises(UsageError) as e:
        follow(FakeVertex(job("RUNNING", replicas=2)), FakeLogs(), replica="workerpool0-1", label="3")
    assert "--replica workerpool0-1 matches no replica of job 3" in e.value.message
    assert "workerpool0-0, workerpool1-0" in e.value.hint


def test_an_unknown_severity_is_a_usage_error():
    with pytest.raises(UsageError, match="--severity must be one of"):
        follow(FakeVertex("RUNNING"), FakeLogs(), severity="LOUD")


def test_no_follow_is_a_sorted_snapshot():
    logs = FakeLogs()
    logs.write("second", at=T0 + dt.timedelta(seconds=2))
    logs.write("first", at=T0 + dt.timedelta(seconds=1))
    outcome, rec = follow(FakeVertex("RUNNING"), logs, follow=False)
    assert rec.texts == ["first", "second"] and outcome.state is None and outcome.exit_code == 0


@pytest.mark.parametrize(("state", "code"), [("FAILED", 3), ("CANCELLED", 4), ("SUCCEEDED", 0), ("EXPIRED", 3),
                                             ("PARTIALLY_SUCCEEDED", 3)])
def test_no_follow_of_an_ended_job_ends_with_its_state_and_exit_status(state, code):
    # Found by hand: `ftcli logs 2 --no-follow` on a FAILED job exited 0 and never said it had failed.
    logs = FakeLogs()
    logs.write("loading", at=T0)
    logs.write("error: boom", severity="ERROR", at=T0 + dt.timedelta(seconds=1))
    outcome, rec = follow(FakeVertex(job(state, error="replica exited 2")), logs, follow=False)
    assert rec.texts == ["loading", "error: boom"]
    assert outcome.state == state and outcome.exit_code == code
    assert rec.of("state") == [("state", state, "replica exited 2")]
    if state == "FAILED":
        assert outcome.failing_replica == "workerpool0-0"
        assert [x.text for x in outcome.last_lines] == ["loading", "error: boom"]


def test_stderr_lines_show_their_own_level():
    logs = FakeLogs()
    logs.write("Downloading: 100%", severity="ERROR", at=T0)
    logs.write("WARNING: odd", severity="ERROR", at=T0 + dt.timedelta(seconds=1))
    logs.write("10%|#  |\r100%|###|", severity="ERROR", at=T0 + dt.timedelta(seconds=2))
    outcome, rec = follow(FakeVertex("RUNNING", "SUCCEEDED"), logs)
    assert [(e[2], e[3]) for e in rec.of("line")] == [("Downloading: 100%", "INFO"), ("WARNING: odd", "WARNING"),
                                                      ("100%|###|", "INFO")]


@pytest.mark.parametrize(("severity", "text", "shown"), [
    ("ERROR", "Downloading: 100%", "INFO"),  # stderr, all of it ERROR in Cloud Logging
    ("ERROR", "10%|#   | 1/10\r100%|####| 10/10", "INFO"),
    ("ERROR", "Traceback (most recent call last):", "ERROR"),
    ("ERROR", "error: data.csv has no column 'text'", "ERROR"),
    ("ERROR", "hint: pass --text-column NAME", "ERROR"),  # the trainer's error goes on with its fix
    ("INFO", "hint: a stdout line that says so is output", "INFO"),
    ("INFO", "WARNING: the eval set is tiny", "WARNING"),
    ("ERROR", "[WARN] slow step", "WARNING"),
    ("ERROR", "FATAL: out of memory", "CRITICAL"),
    ("INFO", "ERROR: nope", "ERROR"),
    ("WARNING", "disk 95% full", "WARNING"),  # Cloud Logging's own level, when a line states none
    ("CRITICAL", "lost the GPU", "CRITICAL"),
    ("INFO", "step 1/8 | loss 0.69", "INFO"),
])
def test_a_line_is_shown_at_the_level_it_states_else_at_cloud_loggings_warning_or_above(severity, text, shown):
    from ftcli.follow import to_line

    assert to_line(LogEntry(T0, "workerpool0-0", severity, text, "i")).severity == shown


@pytest.mark.parametrize(("severity", "text"), [("ERROR", "The replica workerpool0-0 exited with a non-zero status"),
                                                ("INFO", "error: a word Vertex's own line happens to start with")])
def test_vertexs_own_lines_keep_the_level_vertex_gives_them(severity, text):
    from ftcli.follow import to_line

    assert to_line(LogEntry(T0, "service", severity, text, "i")).severity == severity


def test_a_failed_jobs_summary_is_its_last_10_lines():
    logs = FakeLogs()
    for i in range(12):
        logs.write(f"line {i}", at=T0 + dt.timedelta(seconds=i))
    outcome, _ = follow(FakeVertex("RUNNING", "FAILED"), logs)
    assert [x.text for x in outcome.last_lines] == [f"line {i}" for i in range(2, 12)]
    # Vertex's error carries the end of the failed replica's stderr: its last 10 lines, without the blank lines
    # around them and the link to the console
    error = ("The replica workerpool0-0 exited with a non-zero status of 1. Termination reason: Error. \n\n"
             + "".join(f"frame {i}\n" for i in range(12)) + "\nTo find out more about why your job exited please check "
             "the logs: https://console.cloud.google.com/logs/viewer?project=1\n")
    outcome, _ = follow(FakeVertex("RUNNING", job("FAILED", error)), logs)
    assert [x.text for x in outcome.last_lines] == [f"frame {i}" for i in range(2, 12)]


def test_a_tail_refused_is_said_once_and_what_was_listed_still_shown():
    logs = FakeLogs()
    logs.write("step 1")
    logs.tail_error = LogsUnavailable("denied", "cannot read the job's logs: permission denied")
    outcome, rec = follow(FakeVertex("RUNNING", "RUNNING", "SUCCEEDED"), logs)
    assert rec.texts == ["step 1"] and rec.of("notice") == [("notice", "denied")]
    assert [kind for kind, _ in logs.requests] == ["list", "tail"]


def test_a_failed_job_without_an_error_still_exits_3_with_its_last_lines():
    logs = FakeLogs()
    logs.write("step 1", at=T0)
    logs.write("Killed", at=T0 + dt.timedelta(seconds=1), severity="ERROR")
    outcome, rec = follow(FakeVertex("RUNNING", "FAILED"), logs)
    assert outcome.exit_code == 3 and outcome.failing_replica == "workerpool0-0"
    assert [x.text for x in outcome.last_lines] == ["step 1", "Killed"]
    assert rec.events[-1] == ("state", "FAILED", None)


def test_timing_scales_every_wait_but_the_read_slice():
    t = Timing().scaled(0.1)
    assert (t.state_interval, t.drain_quiet, t.quota_interval) == pytest.approx((0.3, 0.3, 0.5))
    assert t.read_slice == Timing().read_slice


def test_polling_without_a_tail_leaves_room_in_the_projects_read_quota():
    """Cloud Logging gives a project 60 entries.list a minute: a follower polling every 2 s (without live tailing)
    used half of it, and two terminals (or a tuning job's trials) all of it."""
    from ftcli.follow import Timing

    assert 60 / Timing().poll_interval <= 12
