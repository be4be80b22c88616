"""Cloud Logging gateway: list (paged) and tail (gRPC bidi stream) with the low-level logging_v2 client.

The high-level google.cloud.logging.Client has no tail API; the low-level client has both.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

from ftcli.gcp import credentials, plaintext_endpoint

ENDPOINT_VAR = "FTCLI_LOGGING_ENDPOINT"


class LoggingGateway:
    def __init__(self, project: str):
        from google.cloud.logging_v2.services.logging_service_v2 import LoggingServiceV2Client

        self.project = project
        self.resource = f"projects/{project}"
        addr = plaintext_endpoint(ENDPOINT_VAR)
        if addr:
            import grpc
            from google.cloud.logging_v2.services.logging_service_v2.transports import LoggingServiceV2GrpcTransport

            self.client = LoggingServiceV2Client(
                transport=LoggingServiceV2GrpcTransport(channel=grpc.insecure_channel(addr)))
        else:
            endpoint = os.environ.get(ENDPOINT_VAR) or "logging.googleapis.com"
            self.client = LoggingServiceV2Client(client_options={"api_endpoint": endpoint},
                                                 credentials=credentials())

    def list(self, filter: str, *, page_size: int = 1000) -> Iterator:
        """Entries matching `filter`, oldest first, across pages."""
        return iter(self.client.list_log_entries(
            request={"resource_names": [self.resource], "filter": filter, "order_by": "timestamp asc",
                     "page_size": page_size},
            retry=None, timeout=60))

    def tail(self, filter: str, stop: threading.Event):
        """A live stream of TailLogEntriesResponse. The request stream stays open until `stop` is set
        (closing it early would half-close the call); call `.cancel()` on the result to end it."""
        from google.cloud.logging_v2.types import TailLogEntriesRequest

        def requests():
            yield TailLogEntriesRequest(resource_names=[self.resource], filter=filter)
            stop.wait()

        return self.client.tail_log_entries(requests=requests(), retry=None)


def get_logging(project: str) -> LoggingGateway:
    return LoggingGateway(project)
