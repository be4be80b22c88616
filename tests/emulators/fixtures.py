"""pytest fixtures: one server of each kind per session, reset before every test that asks for it.

    from tests.emulators.fixtures import cloud_logging, gcs, vertex  # noqa: F401  (in tests/conftest.py)

Each fixture is self-contained (it starts its session server lazily, keeps it in pytest's config stash and stops
it at session end), so importing just the fixtures you want into a conftest is enough. The emulator modules are
imported on first use: collecting tests costs nothing (google.cloud.aiplatform_v1 alone takes ~1.3 s to import).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .cloud_logging import LoggingEmulator
    from .gcs import GcsEmulator
    from .vertex import VertexEmulator

_GCS = pytest.StashKey[Any]()
_VERTEX = pytest.StashKey[Any]()
_LOGGING = pytest.StashKey[Any]()


def _session_server(config: pytest.Config, key: pytest.StashKey[Any], make: Callable[[], Any]) -> Any:
    server = config.stash.get(key, None)
    if server is None:
        server = make()
        server.start()
        config.stash[key] = server
        config.add_cleanup(server.stop)  # runs at session end, even when tests fail
    return server


@pytest.fixture
def gcs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[GcsEmulator]:
    """An empty GCS emulator (no buckets), with STORAGE_EMULATOR_HOST pointing at it for this test."""
    from .gcs import GcsEmulator

    server = _session_server(request.config, _GCS, GcsEmulator)
    server.reset()
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    yield server


@pytest.fixture
def vertex(request: pytest.FixtureRequest) -> Iterator[VertexEmulator]:
    """A JobService emulator with no jobs, hooks or recorded requests."""
    from .vertex import VertexEmulator

    server = _session_server(request.config, _VERTEX, VertexEmulator)
    server.reset()
    server.project_number = None
    yield server
    server.reset()


@pytest.fixture
def cloud_logging(request: pytest.FixtureRequest) -> Iterator[LoggingEmulator]:
    """A LoggingServiceV2 emulator with no entries; tail streams still open after the test are ended."""
    from .cloud_logging import LoggingEmulator

    server = _session_server(request.config, _LOGGING, LoggingEmulator)
    server.reset()
    yield server
    server.reset()


@pytest.fixture
def running_vertex(gcs: GcsEmulator, cloud_logging: LoggingEmulator) -> Iterator[Any]:
    """A JobService emulator whose jobs really run (installing the uploaded package), logging to cloud_logging."""
    from .runner import RunningVertexEmulator

    server = RunningVertexEmulator(gcs.url, cloud_logging)
    server.start()
    yield server
    server.stop()


_SECRETS = pytest.StashKey[Any]()


@pytest.fixture
def secret_manager(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A Secret Manager emulator with no secrets; FTCLI_SECRETMANAGER_ENDPOINT points at it for this test."""
    from .secret_manager import SecretManagerEmulator

    server = _session_server(request.config, _SECRETS, SecretManagerEmulator)
    server.reset()
    monkeypatch.setenv("FTCLI_SECRETMANAGER_ENDPOINT", server.endpoint)
    yield server
    server.reset()


_HUB = pytest.StashKey[Any]()


@pytest.fixture
def hub(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path) -> Iterator[Any]:
    """A Hugging Face Hub model API with no models, HF_ENDPOINT pointing at it and the Hub look-up turned on for this
    test (the tests' HF_HUB_OFFLINE=1 off); no Hugging Face token from this machine, and no proxy."""
    from .hub import HubEmulator

    server = _session_server(request.config, _HUB, HubEmulator)
    server.reset()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
                 "HF_HUB_DISABLE_IMPLICIT_TOKEN", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy",
                 "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-hf-token"))
    yield server
    server.reset()
