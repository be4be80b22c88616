"""Follow a Vertex job's logs until it ends: nothing lost, nothing repeated, then exit with its status.

A tail stream (Cloud Logging TailLogEntries) feeds a queue from a background thread; when tailing is not
available, overlapping ListLogEntries polls do. The main thread de-duplicates by insertId, holds entries
for a moment so lines from several replicas come out in timestamp order, re-reads the job's state every
few seconds, and once the job has ended drains what is still arriving before it returns.
"""

from __future__ import annotations

import datetime as dt
import json
import queue
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

FINAL_STATES = {"SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED", "PARTIALLY_SUCCEEDED"}
LEVEL_RE = re.compile(r"^\s*(?:\[?(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\]?[:\s])|^(Traceback|error:)",
                      re.IGNORECASE)
OVERLAP = dt.timedelta(seconds=30)  # re-read this much before the newest line after a reconnect or poll


@dataclass(order=True)
class Line:
    timestamp: dt.datetime
    replica: str = field(compare=False)
    severity: str = field(compare=False)
    text: str = field(compare=False)
    insert_id: str = field(compare=False)


def job_filter(job_id: str, replica: str | None = None, severity: str | None = None,
               since: dt.datetime | None = None) -> str:
    parts = ['resource.type="ml_job"', f'resource.labels.job_id="{job_id}"']
    if replica:
        parts.append(f'resource.labels.task_name="{replica}"')
    if severity:
        parts.append(f"severity>={severity.upper()}")
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
    ERROR only for what looks like one; otherwise the line is plain output."""
    m = LEVEL_RE.match(text)
    if m:
        word = (m.group(1) or m.group(2) or "").upper()
        return {"WARN": "WARNING", "TRACEBACK": "ERROR", "ERROR:": "ERROR", "FATAL": "CRITICAL"}.get(word, word)
    if entry_severity in ("WARNING", "CRITICAL", "ALERT", "EMERGENCY"):
        return entry_severity
    return "INFO"


def to_line(entry) -> Line:
    from google.cloud.logging_v2.types import LogEntry

    pb = LogEntry.pb(entry)
    ts = pb.timestamp.ToDatetime(tzinfo=dt.UTC)
    if pb.HasField("text_payload") or pb.text_payload:
        text = pb.text_payload
    elif pb.HasField("json_payload"):
        fields = pb.json_payload.fields
        text = fields["message"].string_value if "message" in fields else json.dumps(
            {k: str(v) for k, v in fields.items()})
    else:
        text = ""
    severity = entry.severity.name if hasattr(entry.severity, "name") else str(entry.severity)
    replica = pb.resource.labels.get("task_name", "")
    text = clean_text(text)
    return Line(ts, replica, display_severity(severity, text), text, pb.insert_id or f"{ts.isoformat()}:{text}")


@dataclass
class Notice:
    """Something the reader must tell the user once (logs unreadable, and why); it keeps following the job."""

    reason: str
    message: str
    hint: str | None = None


class Source(threading.Thread):
    """Background reader: a tail stream with reconnects, or overlapping list polls when tail is unavailable.

    It never loops hot: a cut or unreachable stream reconnects with a growing pause, RESOURCE_EXHAUSTED on the
    tail falls back to polling no faster than `quota_interval`, and on a list it doubles the poll interval (up
    to `max_interval`). Without permission it reports once and stops reading; the job's state is still followed.
    """

    def __init__(self, gateway, base_filter: str, since: dt.datetime | None, out: queue.Queue,
                 poll_interval: float = 2.0, tail: bool = True, quota_interval: float = 5.0,
                 max_interval: float = 60.0):
        super().__init__(daemon=True)
        self.gateway = gateway
        self.base_filter = base_filter
        self.since = since
        self.out = out
        self.poll_interval = poll_interval
        self.quota_interval = quota_interval
        self.max_interval = max_interval
        self.use_tail = tail
        self.stop_event = threading.Event()
        self.newest: dt.datetime | None = None  # the newest receiveTimestamp seen
        self.reconnects = 0
        self.denied = False
        self._stream = None
        self._told: set[str] = set()
        self.mode = "tail" if tail else "poll"

    def _filter(self, catch_up: bool = False) -> str:
        """The tail asks for everything new (a late line carries an old timestamp, so a timestamp bound would
        drop it); a catch-up list asks for what Cloud Logging *received* since a little before the newest
        entry seen, which finds late lines too."""
        f = self.base_filter + (f' AND timestamp>="{rfc3339(self.since)}"' if self.since else "")
        if catch_up and self.newest is not None:
            f += f' AND receiveTimestamp>="{rfc3339(self.newest - OVERLAP)}"'
        return f

    def _emit(self, entries) -> None:
        from google.cloud.logging_v2.types import LogEntry

        for entry in entries:
            pb = LogEntry.pb(entry)
            received = pb.receive_timestamp if pb.HasField("receive_timestamp") else pb.timestamp
            received_at = received.ToDatetime(tzinfo=dt.UTC)
            if self.newest is None or received_at > self.newest:
                self.newest = received_at
            self.out.put(to_line(entry))

    def _tell(self, e, suffix: str = "") -> None:
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
        from ftcli.gcp.cloud_logging import LogsUnavailable

        backoff = 0.5
        while not self.stop_event.is_set() and not self.denied:
            if self.use_tail:
                try:
                    self._stream = self.gateway.tail(self._filter(), self.stop_event)
                    caught_up = self.reconnects == 0
                    for response in self._stream:
                        self._emit(response.entries)
                        backoff = 0.5
                        if not caught_up:
                            # A tail only sends what is written after it opens: once this one is live, list
                            # what was written while the last one was down (duplicates are dropped later).
                            self.poll_once()
                            caught_up = True
                except LogsUnavailable as e:
                    if e.reason in ("unsupported", "quota"):
                        # No live tail here, or no tail session left in the project: poll instead, gently.
                        self.use_tail, self.mode = False, "poll"
                        if e.reason == "quota":
                            self.poll_interval = max(self.poll_interval, self.quota_interval)
                            self._tell(e, f"; polling every {self.poll_interval:g} s instead")
                        continue
                    if e.reason == "denied":
                        self.denied = True
                        self._tell(e, "; following the job's state only")
                        return
                    self._tell(e, "; retrying, and following the job's state meanwhile")
                except Exception:  # noqa: BLE001 - a cut stream: reconnect from the newest line
                    pass
                if self.stop_event.is_set():
                    return
                self.reconnects += 1
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            else:
                self.poll_once()
                self.stop_event.wait(self.poll_interval)

    def poll_once(self) -> None:
        """One overlapping list; a failure is reported once and slows the polls down, never raised."""
        from ftcli.gcp.cloud_logging import LogsUnavailable

        if self.denied:
            return
        try:
            self._emit(self.gateway.list(self._filter(catch_up=True)))
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


@dataclass
class Follower:
    """Prints a job's log lines and state changes; returns the final state (or None with follow=False)."""

    logs: object  # LoggingGateway
    get_job: Callable[[], object]  # returns the CustomJob
    job_id: str
    emit: Callable[[Line], None]
    on_state: Callable[[str, str | None], None]
    on_notice: Callable[[Notice], None] = lambda notice: None
    replica: str | None = None
    severity: str | None = None
    since: dt.datetime | None = None
    state_interval: float = 3.0
    reorder_delay: float = 1.0
    drain_quiet: float = 3.0
    poll_interval: float = 2.0
    quota_interval: float = 5.0
    max_interval: float = 60.0
    read_slice: float = 0.2
    tail: bool = True
    last_lines: dict[str, deque] = field(default_factory=dict)

    def __post_init__(self):
        self._seen: set[str] = set()

    def _accept(self, line: Line) -> bool:
        if line.insert_id in self._seen:
            return False
        self._seen.add(line.insert_id)
        self.last_lines.setdefault(line.replica, deque(maxlen=15)).append(line)
        return True

    def snapshot(self) -> None:
        """--no-follow: what is there now, in order."""
        base = job_filter(self.job_id, self.replica, self.severity, self.since)
        lines = sorted(line for line in map(to_line, self.logs.list(base)) if self._accept(line))
        for line in lines:
            self.emit(line)

    def run(self) -> str:
        base = job_filter(self.job_id, self.replica, self.severity)
        q: queue.Queue = queue.Queue()
        source = Source(self.logs, base, self.since, q, poll_interval=self.poll_interval, tail=self.tail,
                        quota_interval=self.quota_interval, max_interval=self.max_interval)
        source.start()
        pending: list[tuple[float, Line]] = []
        state = None
        next_state_check = 0.0
        ended_at = None
        last_arrival = time.monotonic()
        final_listed = False
        try:
            while True:
                now = time.monotonic()
                if now >= next_state_check:
                    job = self.get_job()
                    new_state = job.state.name.removeprefix("JOB_STATE_")
                    if new_state != state:
                        self.on_state(new_state, job.error.message or None)
                        state = new_state
                    if state in FINAL_STATES and ended_at is None:
                        ended_at = now
                    next_state_check = now + self.state_interval
                # Read for one slice at most, then print what is due: a steady stream must not keep the
                # lines off the screen until it pauses.
                until = time.monotonic() + self.read_slice
                try:
                    while (left := until - time.monotonic()) > 0:
                        item = q.get(timeout=left)
                        if isinstance(item, Notice):
                            self.on_notice(item)
                        elif self._accept(item):
                            pending.append((time.monotonic(), item))
                            last_arrival = time.monotonic()
                except queue.Empty:
                    pass
                now = time.monotonic()
                flush_all = ended_at is not None and now - last_arrival >= self.drain_quiet
                ready = [p for p in pending if flush_all or now - p[0] >= self.reorder_delay]
                if ready:
                    pending = [p for p in pending if not (flush_all or now - p[0] >= self.reorder_delay)]
                    for _, line in sorted(ready, key=lambda p: p[1]):
                        self.emit(line)
                if ended_at is not None and now - last_arrival >= self.drain_quiet and not pending:
                    if not final_listed:
                        # One last overlapping read catches lines the stream had not delivered yet.
                        source.poll_once()
                        final_listed = True
                        last_arrival = time.monotonic() - self.drain_quiet + 0.5
                        continue
                    return state
        finally:
            source.stop()
