"""Cloud Logging gateway: list (paged) and tail (gRPC bidi stream) with the low-level logging_v2 client.

The high-level google.cloud.logging.Client has no tail API; the low-level client has both. Google's errors
become LogsUnavailable here, with a `reason` the follower acts on (fall back, back off, or say why it stops).
Cloud Logging's read limits: entries.list 60 requests per minute per project, 10 live-tailing sessions per
project.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

from ftcli.errors import FtcliError
from ftcli.gcp import credentials, plaintext_endpoint

ENDPOINT_VAR = "FTCLI_LOGGING_ENDPOINT"


class LogsUnavailable(FtcliError):
    """The job's logs cannot be read now. `reason`: "denied" (no permission or credentials), "unreachable"
    (network, endpoint), "quota" (RESOURCE_EXHAUSTED), "unsupported" (no live tail here), "error" (other)."""

    def __init__(self, reason: str, message: str, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.reason = reason


class _Stream:
    """A tail stream whose errors arrive as LogsUnavailable; `cancel()` ends it from another thread."""

    def __init__(self, call, gateway: LoggingGateway):
        self._call = call
        self._gateway = gateway

    def __iter__(self):
        from google.api_core import exceptions as gexc

        try:
            yield from self._call
        except gexc.GoogleAPICallError as e:
            raise self._gateway.translate(e, tail=True) from None

    def cancel(self) -> None:
        self._call.cancel()


class LoggingGateway:
    def __init__(self, project: str):
        from google.cloud.logging_v2.services.logging_service_v2 import LoggingServiceV2Client

        self.project = project
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
        from google.api_core import exceptions as gexc

        text = str(getattr(e, "message", "") or e).strip()
        detail = text.splitlines()[0] if text else type(e).__name__
        if isinstance(e, (gexc.PermissionDenied, gexc.Forbidden)):
            return LogsUnavailable(
                "denied", f"cannot read the job's logs: permission denied on project {self.project} ({detail})",
                hint=f"grant roles/logging.viewer on project {self.project} to your account")
        if isinstance(e, gexc.Unauthenticated):
            return LogsUnavailable("denied", f"cannot read the job's logs: not authenticated ({detail})",
                                   hint="run `gcloud auth application-default login`")
        if isinstance(e, gexc.ResourceExhausted):
            limit = "10 live tails per project" if tail else "60 log reads a minute per project"
            return LogsUnavailable("quota", f"Cloud Logging's read quota is used up ({limit}): {detail}",
                                   hint="other `ftcli logs` or consoles are reading this project's logs")
        if isinstance(e, (gexc.ServiceUnavailable, gexc.DeadlineExceeded)):
            return LogsUnavailable("unreachable", f"cannot reach Cloud Logging at {self.endpoint} ({detail})",
                                   hint=f"check the network, or {ENDPOINT_VAR}")
        if tail and isinstance(e, (gexc.MethodNotImplemented, gexc.InvalidArgument)):
            return LogsUnavailable("unsupported", f"live tailing is not available here ({detail})")
        return LogsUnavailable("error", f"Cloud Logging error: {type(e).__name__}: {detail}")

    def list(self, filter: str, *, page_size: int = 1000) -> Iterator:
        """Entries matching `filter`, oldest first, across pages (each page is one entries.list request)."""
        from google.api_core import exceptions as gexc

        try:
            pager = self.client.list_log_entries(
                request={"resource_names": [self.resource], "filter": filter, "order_by": "timestamp asc",
                         "page_size": page_size},
                retry=None, timeout=60)
            yield from pager
        except gexc.GoogleAPICallError as e:
            raise self.translate(e) from None

    def tail(self, filter: str, stop: threading.Event) -> _Stream:
        """A live stream of TailLogEntriesResponse. The request stream stays open until `stop` is set
        (closing it early would half-close the call); call `.cancel()` on the result to end it."""
        from google.api_core import exceptions as gexc
        from google.cloud.logging_v2.types import TailLogEntriesRequest

        def requests():
            yield TailLogEntriesRequest(resource_names=[self.resource], filter=filter)
            stop.wait()

        try:
            return _Stream(self.client.tail_log_entries(requests=requests(), retry=None), self)
        except gexc.GoogleAPICallError as e:
            raise self.translate(e, tail=True) from None


def get_logging(project: str) -> LoggingGateway:
    return LoggingGateway(project)
