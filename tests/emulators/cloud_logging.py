"""A local gRPC ``google.logging.v2.LoggingServiceV2`` (ListLogEntries, TailLogEntries) fed by the tests.

    with LoggingEmulator() as logs:
        logs.write_line("123", "workerpool0-0", "epoch 1 loss 0.3")
        client = logs.client()     # LoggingServiceV2Client over grpc.insecure_channel(logs.address)
        pager = client.list_log_entries(request={"resource_names": ["projects/test"],
                                                 "filter": 'resource.labels.job_id="123"'})

Named cloud_logging, not logging, so it never shadows the standard library.
"""

from __future__ import annotations

import datetime as dt
import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import grpc
from google.cloud.logging_v2.types import log_entry
from google.cloud.logging_v2.types import logging as logging_types
from google.logging.type import log_severity_pb2

from . import _filters
from ._grpc import GrpcEmulator

if TYPE_CHECKING:
    from google.cloud.logging_v2.services.logging_service_v2 import LoggingServiceV2Client

LogEntry = log_entry.LogEntry
DEFAULT_PAGE_SIZE = 50  # the API's documented default
MAX_PAGE_SIZE = 1000
Matcher = Callable[[LogEntry], bool]


def severity_number(value: str | int) -> int:
    """LogSeverity number from "WARNING", "warning" or 400."""
    if isinstance(value, int):
        return value
    if value.isdigit():
        return int(value)
    try:
        return log_severity_pb2.LogSeverity.Value(value.upper())
    except ValueError:
        raise _filters.FilterError(f"unknown severity {value!r}") from None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _ts_ns(entry: LogEntry, field: str = "timestamp") -> int:
    ts = getattr(LogEntry.pb(entry), field)
    return ts.seconds * 1_000_000_000 + ts.nanos


class LoggingEmulator(GrpcEmulator):
    """ListLogEntries (filter, order_by, paging) and TailLogEntries (live bidi stream) over entries the test writes.

    ``project``: the project that write_line's entries belong to (log_name ``projects/{project}/logs/{task}``).
    ``max_stream_seconds``: a tail stream ends (OK) after this long, so no test can hang on it forever.
    """

    SERVICE = "google.logging.v2.LoggingServiceV2"
    METHODS = ("ListLogEntries", "TailLogEntries")

    def __init__(self, project: str = "test", max_stream_seconds: float = 120.0, max_workers: int = 16) -> None:
        super().__init__(max_workers)
        self.project = project
        self.max_stream_seconds = max_stream_seconds
        self.filters: list[str] = []
        self.tail_unavailable: bool | grpc.StatusCode = False
        self._entries: list[LogEntry] = []
        self._ids = itertools.count(1)
        self._generation = 0  # bumped by reset(): open tails from an earlier test end
        self._open_tails: dict[int, int] = {}  # stream number -> the generation it was opened in
        self._tail_numbers = itertools.count(1)
        self._tails_opened = 0
        self._cut_after: int | None = None
        self._cut_streams: int | None = None
        self._suppress = 0  # matching entries the open tails leave out (reported in suppression_info)

    def _on_reset(self) -> None:
        self.filters.clear()
        self._entries.clear()
        self.tail_unavailable = False
        self._cut_after = self._cut_streams = None
        self._suppress = 0
        self._tails_opened = 0
        self._generation += 1

    def reset(self) -> None:
        """Forget entries, filters, hooks and requests; end open tails and wait (briefly) until they are gone.

        Waiting matters: a stream of the previous test still counted as open would satisfy the next test's
        wait_for_tails(1) before its own stream exists.
        """
        super().reset()
        deadline = time.monotonic() + 5.0
        with self._changed:
            while self._open_tails and time.monotonic() < deadline:
                self._changed.wait(0.05)

    def _handlers(self) -> dict[str, grpc.RpcMethodHandler]:
        return {
            "ListLogEntries": self._unary("ListLogEntries", self._list, logging_types.ListLogEntriesRequest.deserialize,
                                          logging_types.ListLogEntriesResponse.serialize),
            "TailLogEntries": grpc.stream_stream_rpc_method_handler(
                self._tail, request_deserializer=logging_types.TailLogEntriesRequest.deserialize,
                response_serializer=logging_types.TailLogEntriesResponse.serialize),
        }

    def client(self) -> LoggingServiceV2Client:
        """A LoggingServiceV2Client on a plaintext channel to this server."""
        from google.cloud.logging_v2.services.logging_service_v2 import LoggingServiceV2Client
        from google.cloud.logging_v2.services.logging_service_v2.transports import LoggingServiceV2GrpcTransport

        return LoggingServiceV2Client(transport=LoggingServiceV2GrpcTransport(channel=self.channel()))

    # -- test hooks ------------------------------------------------------------------------------------------------

    @property
    def entries(self) -> list[LogEntry]:
        """Every entry written so far, in arrival order (copies)."""
        with self._lock:
            return [LogEntry(e) for e in self._entries]

    def write(self, entries: Iterable[LogEntry | dict[str, Any]]) -> list[LogEntry]:
        """Store entries as if just ingested; missing timestamp/insert_id are filled in. Open tails see them."""
        stored = []
        with self._changed:
            for item in entries:
                entry = LogEntry(item) if isinstance(item, LogEntry) else LogEntry(mapping=item)
                now = _now()
                if not LogEntry.pb(entry).HasField("timestamp"):
                    entry.timestamp = now
                entry.receive_timestamp = now
                if not entry.insert_id:
                    entry.insert_id = f"emu{next(self._ids):012d}"
                self._entries.append(entry)
                stored.append(LogEntry(entry))
            self._changed.notify_all()
        return stored

    def write_line(self, job_id: str, task_name: str, text: str, severity: str | int = "INFO",
                   timestamp: dt.datetime | None = None, insert_id: str | None = None) -> LogEntry:
        """One line from a CustomJob replica, shaped like Vertex's: resource ml_job {job_id, task_name}."""
        entry: dict[str, Any] = {
            "log_name": f"projects/{self.project}/logs/{task_name}",
            "resource": {"type": "ml_job",
                         "labels": {"job_id": str(job_id), "project_id": self.project, "task_name": task_name}},
            "text_payload": text,
            "severity": severity_number(severity),
        }
        if timestamp is not None:
            entry["timestamp"] = timestamp
        if insert_id is not None:
            entry["insert_id"] = insert_id
        return self.write([entry])[0]

    def cut_streams_after(self, n_entries: int | None, streams: int | None = None) -> None:
        """Tail streams opened from now on end with UNAVAILABLE once they have sent ``n_entries`` entries.

        ``streams`` limits how many streams are cut (None: all); ``n_entries=None`` turns cutting off.
        Entries of a batch beyond the limit are not sent on that stream: a client must catch up by listing.
        """
        with self._lock:
            self._cut_after, self._cut_streams = n_entries, streams

    def suppress_next(self, n_entries: int) -> None:
        """Open tails leave out the next ``n_entries`` matching entries, as Cloud Logging does when a session's
        entries come in faster than its rate limit: the next response carries no such entry, only
        ``suppression_info`` (reason RATE_LIMIT, the count "since the last streamed response"; the entries.tail
        reference, https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/tail, read 2026-11-27).
        The entries stay listable: a client must list them to show them."""
        with self._lock:
            self._suppress = n_entries

    @property
    def active_tails(self) -> int:
        with self._lock:
            return self._count_open()

    @property
    def tails_opened(self) -> int:
        """Tail streams opened since the last reset (including ones already closed)."""
        with self._lock:
            return self._tails_opened

    def wait_for_tails(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Block until exactly ``count`` tail streams are open (0: all closed); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._count_open() != count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    # -- filtering -------------------------------------------------------------------------------------------------

    def _matcher(self, resource_names: Iterable[str], text: str) -> Matcher:
        names = list(resource_names)
        if not names:
            raise _filters.FilterError("resource_names must not be empty")
        tests: list[Matcher] = [lambda e: not e.log_name or any(
            e.log_name == n or e.log_name.startswith(n + "/logs/") for n in names)]
        for field, op, value in _filters.parse(text):
            tests.append(_clause(field, op, value))
        return lambda e: all(t(e) for t in tests)

    # -- RPCs ------------------------------------------------------------------------------------------------------

    def _list(self, request: logging_types.ListLogEntriesRequest,
              context: grpc.ServicerContext) -> logging_types.ListLogEntriesResponse:
        with self._lock:
            self.filters.append(request.filter)
        try:
            match = self._matcher(request.resource_names, request.filter)
        except _filters.FilterError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        order = " ".join(request.order_by.split()).lower()
        if order not in ("", "timestamp", "timestamp asc", "timestamp desc"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported order_by {request.order_by!r}")
        if not 0 <= request.page_size <= MAX_PAGE_SIZE:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"page_size must be in [0, {MAX_PAGE_SIZE}]")
        try:
            offset = int(request.page_token or 0)
        except ValueError:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"invalid page_token {request.page_token!r}")
        size = request.page_size or DEFAULT_PAGE_SIZE
        with self._lock:
            hits = [e for e in self._entries if match(e)]
        # The API orders by timestamp, equal timestamps by insertId, whatever the arrival order.
        hits.sort(key=lambda e: (_ts_ns(e), e.insert_id), reverse=order == "timestamp desc")
        page = [LogEntry(e) for e in hits[offset:offset + size]]
        token = str(offset + size) if offset + size < len(hits) else ""
        return logging_types.ListLogEntriesResponse(entries=page, next_page_token=token)

    def _tail(self, requests: Iterator[logging_types.TailLogEntriesRequest],
              context: grpc.ServicerContext) -> Iterator[logging_types.TailLogEntriesResponse]:
        try:
            first = next(requests)
        except StopIteration:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "TailLogEntries needs a first request")
        with self._lock:
            self.filters.append(first.filter)
        fault = self._record("TailLogEntries", first, context)
        if fault is not None:
            context.abort(fault.code, fault.message)
        refuse = self.tail_unavailable
        if refuse:
            code = refuse if isinstance(refuse, grpc.StatusCode) else grpc.StatusCode.UNIMPLEMENTED
            context.abort(code, "TailLogEntries is unavailable (emulator tail_unavailable)")
        try:
            match = self._matcher(first.resource_names, first.filter)
        except _filters.FilterError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))

        # Wake the wait below as soon as the client goes away, instead of at the next poll.
        context.add_callback(self._notify)
        with self._changed:
            cursor = len(self._entries)  # a tail sees what is written after it opened, not history
            generation = self._generation
            limit = None
            if self._cut_after is not None and (self._cut_streams is None or self._cut_streams > 0):
                limit = self._cut_after
                if self._cut_streams is not None:
                    self._cut_streams -= 1
            number = next(self._tail_numbers)
            self._open_tails[number] = generation
            self._tails_opened += 1
            self._changed.notify_all()
        try:
            yield from self._stream(context, match, cursor, generation, limit)
        finally:
            with self._changed:
                self._open_tails.pop(number, None)
                self._changed.notify_all()

    def _count_open(self) -> int:
        return sum(1 for g in self._open_tails.values() if g == self._generation)

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def _stream(self, context: grpc.ServicerContext, match: Matcher, cursor: int, generation: int,
                limit: int | None) -> Iterator[logging_types.TailLogEntriesResponse]:
        sent = 0
        deadline = time.monotonic() + self.max_stream_seconds
        while True:
            if limit is not None and sent >= limit:
                context.abort(grpc.StatusCode.UNAVAILABLE, f"stream cut by the emulator after {sent} entries")
            with self._changed:
                while True:  # bounded by the deadline: every pass returns, breaks or waits at most 0.1 s
                    if (self._stopping.is_set() or generation != self._generation or not context.is_active()
                            or time.monotonic() >= deadline):
                        return
                    if cursor < len(self._entries):
                        break
                    self._changed.wait(0.1)
                new = self._entries[cursor:]
                cursor = len(self._entries)
            batch = [LogEntry(e) for e in new if match(e)]
            with self._lock:
                left_out = min(self._suppress, len(batch))
                self._suppress -= left_out
            batch = batch[left_out:]
            if limit is not None:
                batch = batch[:limit - sent]
            if batch or left_out:
                sent += len(batch)
                info = [logging_types.TailLogEntriesResponse.SuppressionInfo(
                    reason=logging_types.TailLogEntriesResponse.SuppressionInfo.Reason.RATE_LIMIT,
                    suppressed_count=left_out)] if left_out else []
                yield logging_types.TailLogEntriesResponse(entries=batch, suppression_info=info)


def _clause(field: str, op: str, value: str) -> Matcher:
    """One comparison of the Logging query language, over the fields the project filters on."""
    if field in ("timestamp", "receiveTimestamp", "receive_timestamp"):
        if op == ":":
            raise _filters.FilterError(f"{field}: is not supported")
        at = _filters.rfc3339_ns(value)
        pb_field = "timestamp" if field == "timestamp" else "receive_timestamp"
        return lambda e: _filters.compare(_ts_ns(e, pb_field), op, at)
    if field == "severity":
        if op == ":":
            raise _filters.FilterError("severity: is not supported")
        level = severity_number(value)
        return lambda e: _filters.compare(int(e.severity), op, level)

    getter: Callable[[LogEntry], str | None]
    if field == "resource.type":
        getter = lambda e: e.resource.type  # noqa: E731
    elif field.startswith("resource.labels."):
        key = field[len("resource.labels."):]
        getter = lambda e: e.resource.labels.get(key)  # noqa: E731
    elif field.startswith("labels."):
        key = field[len("labels."):]
        getter = lambda e: e.labels.get(key)  # noqa: E731
    elif field in ("logName", "log_name"):
        getter = lambda e: e.log_name  # noqa: E731
    elif field in ("insertId", "insert_id"):
        getter = lambda e: e.insert_id  # noqa: E731
    elif field in ("textPayload", "text_payload"):
        getter = lambda e: e.text_payload  # noqa: E731
    else:
        raise _filters.FilterError(f"the emulator does not support filtering on {field!r}")
    if op == ":":
        return lambda e: (getter(e) or "").lower().find(value.lower()) >= 0
    if op in ("=", "!="):
        return lambda e: _filters.compare(getter(e), op, value)
    raise _filters.FilterError(f"{field}{op} is not supported (strings take =, != or :)")
