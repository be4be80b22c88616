"""Cloud Logging gateway: list (paged) and tail (gRPC bidi stream) with the low-level logging_v2 client.

The high-level google.cloud.logging.Client has no tail API; the low-level client has both. Entries come back as
ftcli's `LogEntry` values; Google's errors become `LogsUnavailable` here, with a `reason` the follower acts on
(fall back, back off, or say why it stops). Cloud Logging's read limits: entries.list 60 requests per minute
per project, 10 live-tailing sessions per project ("Quotas and limits", https://cloud.google.com/logging/quotas,
"Logging API" table; read 2026-11-26, re-read 2026-11-27).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ftcli.errors import LogsUnavailable
from ftcli.gcp import (
    Notify,
    account_problem,
    credentials,
    first_line,
    plaintext_endpoint,
    retry_notice,
    retryable,
    translate,
)
from ftcli.values import LogEntry, TailBatch

if TYPE_CHECKING:
    from google.cloud.logging_v2.types import TailLogEntriesRequest

ENDPOINT_VAR = "FTCLI_LOGGING_ENDPOINT"


def to_entry(entry: Any) -> LogEntry:  # a logging_v2 LogEntry (proto-plus)
    """ftcli's `LogEntry` from a logging_v2 LogEntry (text payload, or a JSON payload's "message")."""
    from google.cloud.logging_v2.types import LogEntry as Proto

    pb = Proto.pb(entry)
    ts = pb.timestamp.ToDatetime(tzinfo=dt.UTC)
    if pb.HasField("text_payload") or pb.text_payload:
        text = pb.text_payload
    elif pb.HasField("json_payload"):
        from google.protobuf.json_format import MessageToDict

        fields = pb.json_payload.fields
        text = fields["message"].string_value if "message" in fields else json.dumps(
            MessageToDict(pb.json_payload), ensure_ascii=False)
    else:
        text = ""
    # LogEntry.severity is a protobuf enum, not a proto-plus one: it comes back as its number (400), which the follower
    # never took for WARNING, so a line Cloud Logging holds at WARNING showed as plain output
    from google.logging.type import log_severity_pb2  # type: ignore[import-untyped]

    try:
        severity = log_severity_pb2.LogSeverity.Name(pb.severity)
    except ValueError:  # a number the enum does not name
        severity = str(pb.severity)
    received = pb.receive_timestamp.ToDatetime(tzinfo=dt.UTC) if pb.HasField("receive_timestamp") else ts
    return LogEntry(ts, pb.resource.labels.get("task_name", ""), severity, text,
                    pb.insert_id or f"{ts.isoformat()}:{text}", received)


class _Stream:
    """A tail stream: yields a `TailBatch` of `LogEntry` per response, with the count of entries the response says
    were left out (`suppression_info`: "If entries that otherwise would have been included in the session were not
    sent back to the client, counts of relevant entries omitted from the session", the entries.tail reference,
    https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/tail, read 2026-11-27); errors arrive as
    LogsUnavailable; `cancel()` ends it from another thread."""

    def __init__(self, call: Any, gateway: LoggingGateway) -> None:  # call: the gRPC stream (iterable, cancel())
        self._call = call
        self._gateway = gateway

    def __iter__(self) -> Iterator[TailBatch]:
        from google.api_core import exceptions as gexc
        from google.auth import exceptions as aexc

        try:
            for response in self._call:
                batch = TailBatch(to_entry(e) for e in response.entries)
                batch.suppressed = sum(info.suppressed_count for info in response.suppression_info)
                yield batch
        except (gexc.GoogleAPIError, aexc.GoogleAuthError) as e:
            raise self._gateway.translate(e, tail=True) from None

    def cancel(self) -> None:
        self._call.cancel()


class LoggingGateway:
    def __init__(self, project: str, notify: Notify | None = None):
        from google.cloud.logging_v2.services.logging_service_v2 import LoggingServiceV2Client

        self.project = project
        self.notify = notify
        self.resource = f"projects/{project}"
        addr = plaintext_endpoint(ENDPOINT_VAR)
        if addr:
            import grpc
            from google.cloud.logging_v2.services.logging_service_v2.transports import LoggingServiceV2GrpcTransport

            self.endpoint = addr
            self.client = LoggingServiceV2Client(
                transport=LoggingServiceV2GrpcTransport(channel=grpc.insecure_channel(addr)))
        else:
            self.endpoint = os.environ.get(ENDPOINT_VAR) or "logging.googleapis.com"
            self.client = LoggingServiceV2Client(client_options={"api_endpoint": self.endpoint},
                                                 credentials=credentials())

    def translate(self, e: Exception, *, tail: bool = False) -> LogsUnavailable:
        """Google's error as LogsUnavailable, in the words and with the hint of the one translation
        (`ftcli.gcp.translate`), so `ftcli logs` says a code as every other command does. A second mapping here had
        gone its own way: every code it did not name was "Cloud Logging error: KIND: ..." with no hint, and a tail
        the endpoint does not offer no hint either. What is Cloud Logging's own: the `reason` the follower acts on,
        its read quota (the limits in this module's docstring, and who else spends them), and what an endpoint that
        does not answer is called (the follower, which makes no retry within a call, retries it itself)."""
        from google.api_core import exceptions as gexc
        from google.auth import exceptions as aexc

        detail = first_line(e)
        problem = account_problem(e, service="logging", project=self.project)
        if problem is None and isinstance(e, gexc.ResourceExhausted):
            limit = "10 live tails per project" if tail else "60 log reads a minute per project"
            return LogsUnavailable("quota", f"Cloud Logging's read quota is used up ({limit}): {detail}",
                                   hint="other `ftcli logs` or consoles are reading this project's logs")
        if problem is None and isinstance(e, (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.GatewayTimeout,
                                              gexc.BadGateway, gexc.RetryError, aexc.TransportError)):
            origin = f" (from {ENDPOINT_VAR})" if os.environ.get(ENDPOINT_VAR) else ""
            return LogsUnavailable("unreachable", f"cannot reach Cloud Logging at {self.endpoint}{origin} ({detail})",
                                   hint=f"check the network, or {ENDPOINT_VAR}")
        said = translate(e, service="logging", project=self.project, what=f"project {self.project}",
                         endpoint=self.endpoint, endpoint_var=ENDPOINT_VAR)
        if problem is not None or isinstance(e, (gexc.PermissionDenied, gexc.Forbidden, gexc.Unauthorized,
                                                 aexc.GoogleAuthError)):
            # (an expired login, the API or billing off, no role: no retry helps, and the follower stops reading)
            return LogsUnavailable("denied", f"cannot read the job's logs: {said.message}", hint=said.hint)
        if tail and isinstance(e, (gexc.MethodNotImplemented, gexc.InvalidArgument)):
            return LogsUnavailable("unsupported", f"live tailing is not available here ({detail})", hint=said.hint)
        return LogsUnavailable("error", said.message, hint=said.hint)

    def list(self, filter: str, *, page_size: int = 1000, patience: float = 0.0) -> Iterator[LogEntry]:
        """Entries matching `filter`, oldest first, across pages (each page is one entries.list request).

        With `patience` (seconds), each page is retried, with growing pauses and said, on what Google's own client
        retries ListLogEntries on (UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL: the default retry of the generated
        logging_v2 client) and on RESOURCE_EXHAUSTED (the per-minute read quota frees up within the minute);
        without it (the follower, which retries by itself) a failure is raised at once."""
        from google.api_core import exceptions as gexc
        from google.api_core.retry import Retry
        from google.auth import exceptions as aexc

        retry = None
        if patience > 0:
            unanswered = retry_notice("logging", "ListLogEntries", self.notify)

            def on_error(e: Exception) -> None:
                if self.notify is not None and isinstance(e, gexc.ResourceExhausted):
                    self.notify("Cloud Logging's read quota is used up (60 log reads a minute per project); retrying")
                elif unanswered is not None:
                    unanswered(e)

            retry = Retry(predicate=retryable(gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.InternalServerError,
                                              gexc.ResourceExhausted),
                          initial=min(1.0, patience / 8), maximum=16.0, multiplier=2.0, timeout=patience,
                          on_error=on_error)
        try:
            pager = self.client.list_log_entries(
                request={"resource_names": [self.resource], "filter": filter, "order_by": "timestamp asc",
                         "page_size": page_size},
                retry=retry, timeout=60)
            for entry in pager:
                yield to_entry(entry)
        except gexc.RetryError as e:  # patience ran out: the last error says why
            raise self.translate(e.cause or e) from None
        except (gexc.GoogleAPIError, aexc.GoogleAuthError) as e:
            raise self.translate(e) from None

    def tail(self, filter: str, stop: threading.Event) -> _Stream:
        """A live stream of entry batches. The request stream stays open until `stop` is set (closing it early
        would half-close the call); call `.cancel()` on the result to end it."""
        from google.api_core import exceptions as gexc
        from google.auth import exceptions as aexc
        from google.cloud.logging_v2.types import TailLogEntriesRequest

        def requests() -> Iterator[TailLogEntriesRequest]:
            yield TailLogEntriesRequest(resource_names=[self.resource], filter=filter)
            stop.wait()

        try:
            return _Stream(self.client.tail_log_entries(requests=requests(), retry=None), self)
        except (gexc.GoogleAPIError, aexc.GoogleAuthError) as e:
            raise self.translate(e, tail=True) from None


def get_logging(project: str, notify: Notify | None = None) -> LoggingGateway:
    return LoggingGateway(project, notify)
