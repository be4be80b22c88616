"""What the gRPC emulators share: an insecure server on 127.0.0.1, request recording, injected faults."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc

HOST = "127.0.0.1"
_instances = itertools.count(1)


@dataclass
class Fault:
    code: grpc.StatusCode
    message: str
    lose_response: bool
    error_info: dict | None = None  # google.rpc.ErrorInfo fields sent as rich status details (reason, metadata)
    quota_failure: list[dict] | None = None  # google.rpc.QuotaFailure violations (subject, description, quota_metric)

    def abort(self, context: grpc.ServicerContext) -> None:
        if not self.error_info and not self.quota_failure:
            context.abort(self.code, self.message)
        # As Google's services send it: a google.rpc.Status with the details in the trailing metadata, which
        # google-api-core reads into the exception's .details (and an ErrorInfo into .reason and .metadata).
        from google.protobuf import any_pb2
        from google.rpc import error_details_pb2, status_pb2
        from grpc_status import rpc_status

        details = []
        if self.error_info:
            details.append(error_details_pb2.ErrorInfo(**self.error_info))
        if self.quota_failure:
            details.append(error_details_pb2.QuotaFailure(
                violations=[error_details_pb2.QuotaFailure.Violation(**v) for v in self.quota_failure]))
        packed = []
        for message in details:
            detail = any_pb2.Any()
            detail.Pack(message)
            packed.append(detail)
        status = status_pb2.Status(code=self.code.value[0], message=self.message, details=packed)
        context.abort_with_status(rpc_status.to_status(status))


class GrpcEmulator:
    """Base: subclasses name their SERVICE and METHODS and build the handlers."""

    SERVICE = ""
    METHODS: tuple[str, ...] = ()

    def __init__(self, max_workers: int = 16) -> None:
        self.max_workers = max_workers
        self.thread_prefix = f"{type(self).__name__}-{next(_instances)}"  # tells this instance's threads apart
        self.port = 0
        self.credentials_port = 0
        self.requests: list[tuple[str, Any]] = []
        self.metadata: list[dict[str, str]] = []  # invocation metadata, aligned with .requests
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._faults: dict[str, list[Fault]] = {}
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._stopping = threading.Event()

    # -- subclass contract -----------------------------------------------------------------------------------------

    def _handlers(self) -> dict[str, grpc.RpcMethodHandler]:
        raise NotImplementedError

    def _on_reset(self) -> None:
        """Subclasses clear their own state here (the lock is held)."""

    # -- lifecycle -------------------------------------------------------------------------------------------------

    def start(self) -> GrpcEmulator:
        if self._server is not None:
            return self
        self._stopping.clear()
        self._executor = ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix=self.thread_prefix)
        server = grpc.server(self._executor, options=[("grpc.so_reuseport", 0)])
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(self.SERVICE, self._handlers()),))
        self.port = server.add_insecure_port(f"{HOST}:0")
        # A second port that takes per-call credentials (gRPC sends them only over a secure channel; local
        # credentials count as one): calls through it run the client's real token refresh, as against Google.
        self.credentials_port = server.add_secure_port(f"{HOST}:0", grpc.local_server_credentials())
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        self._stopping.set()
        with self._changed:
            self._changed.notify_all()  # wakes streaming handlers so they notice _stopping
        if server is not None:
            server.stop(grace=1.0).wait(timeout=5)
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def address(self) -> str:
        """``127.0.0.1:N``: what grpc.insecure_channel takes."""
        return f"{HOST}:{self.port}"

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:N``: the project reads an http:// endpoint as plaintext gRPC."""
        return f"http://{self.address}"

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(self.address)

    def authenticated_channel(self, credentials: Any) -> grpc.Channel:
        """A channel that puts google.auth `credentials` on every call, through google-auth's own gRPC plugin (the
        one Google's clients use): each call first gets an access token from the credentials' token endpoint."""
        import google.auth.transport.grpc
        import google.auth.transport.requests

        plugin = google.auth.transport.grpc.AuthMetadataPlugin(credentials, google.auth.transport.requests.Request())
        return grpc.secure_channel(f"{HOST}:{self.credentials_port}", grpc.composite_channel_credentials(
            grpc.local_channel_credentials(), grpc.metadata_call_credentials(plugin)))

    # -- recording and faults --------------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget requests, faults and all stored state (between tests)."""
        with self._changed:
            self.requests.clear()
            self.metadata.clear()
            self._faults.clear()
            self._on_reset()
            self._changed.notify_all()

    def calls(self, method: str) -> list[Any]:
        """The request messages received for ``method``, oldest first."""
        with self._lock:
            return [req for name, req in self.requests if name == method]

    def wait_for_requests(self, method: str, count: int, timeout: float = 5.0) -> bool:
        """Block until ``count`` requests of ``method`` have arrived; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len([1 for name, _ in self.requests if name == method]) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def fail_next(self, method: str, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE, times: int = 1,
                  message: str = "injected by emulator", lose_response: bool = False,
                  error_info: dict | None = None, quota_failure: list[dict] | None = None) -> None:
        """Make the next ``times`` calls of ``method`` end with ``code``.

        With ``lose_response`` the call is carried out first (a job is created, say) and only then aborted, as when
        a response is lost on the way back: the case that idempotent retries must survive. ``error_info`` adds a
        google.rpc.ErrorInfo detail (e.g. reason SERVICE_DISABLED with metadata {"service": ...}); ``quota_failure``
        a google.rpc.QuotaFailure with these violations (e.g. [{"subject": "project:123", "quota_metric": ...}]).
        """
        if method not in self.METHODS:
            raise ValueError(f"{type(self).__name__} has no method {method!r}; known: {', '.join(self.METHODS)}")
        with self._lock:
            self._faults.setdefault(method, []).extend(Fault(code, message, lose_response, error_info, quota_failure)
                                                       for _ in range(times))

    def _record(self, method: str, request: Any, context: grpc.ServicerContext) -> Fault | None:
        with self._changed:
            self.requests.append((method, request))
            self.metadata.append({k: v for k, v in context.invocation_metadata() if isinstance(v, str)})
            self._changed.notify_all()
            queue = self._faults.get(method)
            return queue.pop(0) if queue else None

    def _unary(self, method: str, impl: Callable[[Any, grpc.ServicerContext], Any], deserialize: Callable[[bytes], Any],
               serialize: Callable[[Any], bytes]) -> grpc.RpcMethodHandler:
        def handler(request: Any, context: grpc.ServicerContext) -> Any:
            fault = self._record(method, request, context)
            if fault is not None and not fault.lose_response:
                fault.abort(context)
            response = impl(request, context)
            if fault is not None:
                fault.abort(context)
            return response

        return grpc.unary_unary_rpc_method_handler(handler, request_deserializer=deserialize,
                                                   response_serializer=serialize)
