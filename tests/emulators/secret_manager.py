"""A local gRPC ``google.cloud.secretmanager.v1.SecretManagerService`` (GetSecret, AccessSecretVersion) holding
the secrets a test puts in it, built from the SDK's own request and response classes.

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
    METHODS = ("GetSecret", "AccessSecretVersion")

    def __init__(self, max_workers: int = 8) -> None:
        super().__init__(max_workers)
        self._secrets: dict[str, list[bytes]] = {}

    def _on_reset(self) -> None:
        self._secrets.clear()

    def put(self, name: str, data: bytes) -> None:
        """Add a version holding `data` to secret `name` (creating the secret)."""
        with self._lock:
            self._secrets.setdefault(name, []).append(data)

    def _handlers(self) -> dict[str, grpc.RpcMethodHandler]:
        return {
            "GetSecret": self._unary("GetSecret", self._get, service.GetSecretRequest.deserialize,
                                     resources.Secret.serialize),
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

    def _access(self, request, context) -> service.AccessSecretVersionResponse:
        m = VERSION.match(request.name)
        if not m:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid resource field value: {request.name!r}")
        with self._lock:
            versions = self._secrets.get(m["secret"])
            if not versions:
                context.abort(grpc.StatusCode.NOT_FOUND, f"Secret [{m['secret']}] not found or has no versions.")
            n = len(versions) if m["version"] == "latest" else int(m["version"])
            if not 1 <= n <= len(versions):
                context.abort(grpc.StatusCode.NOT_FOUND, f"Secret Version [{request.name}] not found.")
            data = versions[n - 1]
        return service.AccessSecretVersionResponse(name=f"{m['secret']}/versions/{n}",
                                                   payload=resources.SecretPayload(data=data))
