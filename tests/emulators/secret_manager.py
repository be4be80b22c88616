"""A local gRPC ``google.cloud.secretmanager.v1.SecretManagerService`` (GetSecret, GetSecretVersion,
AccessSecretVersion) holding the secrets a test puts in it, built from the SDK's own request and response classes.
`latest` is the most recently created version, whatever its state; only an ENABLED version can be accessed.

    with SecretManagerEmulator() as secrets:
        secrets.put("projects/p/secrets/wandb", b"KEY")
        os.environ["FTCLI_SECRETMANAGER_ENDPOINT"] = secrets.endpoint
"""

from __future__ import annotations

import re

import grpc
from google.cloud.secretmanager_v1.types import resources, service

from ._grpc import GrpcEmulator

SECRET = re.compile(r"^projects/[^/]+/secrets/[^/]+$")
VERSION = re.compile(r"^(?P<secret>projects/[^/]+/secrets/[^/]+)/versions/(?P<version>[^/]+)$")


class SecretManagerEmulator(GrpcEmulator):
    SERVICE = "google.cloud.secretmanager.v1.SecretManagerService"
    METHODS = ("GetSecret", "GetSecretVersion", "AccessSecretVersion")

    def __init__(self, max_workers: int = 8) -> None:
        super().__init__(max_workers)
        self._secrets: dict[str, list[bytes]] = {}
        self._disabled: set[tuple[str, int]] = set()

    def _on_reset(self) -> None:
        self._secrets.clear()
        self._disabled.clear()

    def create(self, name: str) -> None:
        """A secret with no version yet (`gcloud secrets create NAME` without --data-file)."""
        with self._lock:
            self._secrets.setdefault(name, [])

    def disable(self, name: str, version: int) -> None:
        """`gcloud secrets versions disable VERSION --secret NAME`."""
        with self._lock:
            self._disabled.add((name, version))

    def put(self, name: str, data: bytes) -> None:
        """Add a version holding `data` to secret `name` (creating the secret)."""
        with self._lock:
            self._secrets.setdefault(name, []).append(data)

    def _handlers(self) -> dict[str, grpc.RpcMethodHandler]:
        return {
            "GetSecret": self._unary("GetSecret", self._get, service.GetSecretRequest.deserialize,
                                     resources.Secret.serialize),
            "GetSecretVersion": self._unary("GetSecretVersion", self._version,
                                            service.GetSecretVersionRequest.deserialize,
                                            resources.SecretVersion.serialize),
            "AccessSecretVersion": self._unary("AccessSecretVersion", self._access,
                                               service.AccessSecretVersionRequest.deserialize,
                                               service.AccessSecretVersionResponse.serialize),
        }

    def _get(self, request: service.GetSecretRequest, context: grpc.ServicerContext) -> resources.Secret:
        if not SECRET.match(request.name):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid resource field value: {request.name!r}")
        with self._lock:
            if request.name not in self._secrets:
                context.abort(grpc.StatusCode.NOT_FOUND, f"Secret [{request.name}] not found or has no versions.")
        return resources.Secret(name=request.name)

    def _find(self, name: str, context: grpc.ServicerContext) -> tuple[str, int, bytes, bool]:
        """(secret, version number, data, enabled) of a version name, `latest` resolved; aborts when missing."""
        m = VERSION.match(name)
        if not m:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid resource field value: {name!r}")
        with self._lock:
            versions = self._secrets.get(m["secret"])
            if not versions:
                context.abort(grpc.StatusCode.NOT_FOUND, f"Secret [{m['secret']}] not found or has no versions.")
            n = len(versions) if m["version"] == "latest" else int(m["version"])
            if not 1 <= n <= len(versions):
                context.abort(grpc.StatusCode.NOT_FOUND, f"Secret Version [{name}] not found.")
            return m["secret"], n, versions[n - 1], (m["secret"], n) not in self._disabled

    def _version(self, request, context) -> resources.SecretVersion:
        secret, n, _, enabled = self._find(request.name, context)
        state = resources.SecretVersion.State.ENABLED if enabled else resources.SecretVersion.State.DISABLED
        return resources.SecretVersion(name=f"{secret}/versions/{n}", state=state)

    def _access(self, request, context) -> service.AccessSecretVersionResponse:
        secret, n, data, enabled = self._find(request.name, context)
        if not enabled:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{secret}/versions/{n} is in DISABLED state.")
        return service.AccessSecretVersionResponse(name=f"{secret}/versions/{n}",
                                                   payload=resources.SecretPayload(data=data))
