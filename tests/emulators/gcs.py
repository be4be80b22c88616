"""A real-HTTP Cloud Storage for tests: gcp-storage-emulator in a subprocess, and a fault-injecting proxy.

    with GcsEmulator() as gcs:
        gcs.create_bucket("b")
        gcs.client().bucket("b").blob("x").upload_from_string(b"hi")
        assert gcs.read("b", "x") == b"hi"

    with GcsEmulator() as gcs, FaultyProxy(gcs.url, fail_every=3) as proxy:
        client = proxy.client()            # or monkeypatch.setenv(**proxy.env()) for code that builds its own
"""

from __future__ import annotations

import atexit
import http.client
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from google.cloud import storage

HOST = "127.0.0.1"
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
# google-cloud-storage >= 3.x fires a background GET /storage/v1/b/{bucket} on a bucket's first use (a metadata
# cache for tracing). It races the real requests, making request logs non-deterministic; this turns it off.
NO_BUCKET_METADATA_ENV = "DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA"
# gcp-storage-emulator's own project (every project id names it): the projectNumber of its buckets
PROJECT_NUMBER = "1234"


def free_port() -> int:
    """A port free right now on 127.0.0.1 (another process could take it before use: callers retry)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def storage_client(url: str, project: str = "test") -> storage.Client:
    """A google-cloud-storage client speaking to ``url`` with anonymous credentials.

    Passing the endpoint in client_options is enough for this client object; code that builds its own
    client still needs ``STORAGE_EMULATOR_HOST`` in the environment (see ``env()``).
    """
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project=project, credentials=AnonymousCredentials(), client_options={"api_endpoint": url})


class GcsEmulator:
    """gcp-storage-emulator (in-memory) as a child process on a free 127.0.0.1 port; uploads honour ifGenerationMatch
    (412 when it does not hold), which the emulator alone ignores."""

    def __init__(self, project: str = "test", startup_timeout: float = 10.0) -> None:
        self.project = project
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self.port = 0

    # -- lifecycle -------------------------------------------------------------------------------------------------

    def start(self) -> GcsEmulator:
        if self._proc is not None:
            return self
        last_error = ""
        # The free port can be taken between probing and the child binding it: try a few ports.
        for _ in range(3):
            self.port = free_port()
            self._log = tempfile.TemporaryFile()
            # gcp-storage-emulator with Cloud Storage's ifGenerationMatch on uploads (see _gcs_server.py)
            cmd = [sys.executable, str(Path(__file__).with_name("_gcs_server.py")), "start", "--host", HOST,
                   "--port", str(self.port), "--in-memory", "--quiet", "--project-number", PROJECT_NUMBER]
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT)
            if self._wait_ready():
                atexit.register(self.stop)  # no orphaned emulator if a caller never reaches stop()
                return self
            last_error = self._read_log()
            self.stop()
        raise RuntimeError(f"gcp-storage-emulator did not answer within {self.startup_timeout} s:\n{last_error}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url + "/", timeout=1) as r:
                    if r.status == 200:
                        return True
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.05)
        return False

    def _read_log(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-4000:]

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        atexit.unregister(self.stop)
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> GcsEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses -------------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:N`` (the scheme is required by STORAGE_EMULATOR_HOST)."""
        return f"http://{HOST}:{self.port}"

    def env(self) -> dict[str, str]:
        """Variables that make any google-cloud-storage client built afterwards use this emulator."""
        return {EMULATOR_ENV: self.url, NO_BUCKET_METADATA_ENV: "true"}

    def client(self) -> storage.Client:
        """A storage.Client (AnonymousCredentials, project "test") pointed at this emulator."""
        return storage_client(self.url, self.project)

    # -- direct JSON-API helpers: independent of google-cloud-storage, so assertions don't trust the code under test

    def _request(self, method: str, path: str, body: bytes | None = None,
                 headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def create_bucket(self, name: str, location: str = "US-CENTRAL1", *, project: str | None = None,
                      **metadata: Any) -> None:
        """Create ``name`` in ``location`` (GCS reports locations in upper case: a region such as US-CENTRAL1,
        a multi-region such as US), with more of the JSON API's bucket fields (``retentionPolicy={...}``) if given;
        an existing bucket is fine. ``project``: the number of another project to create it in (any project id is
        the emulator's own project, number PROJECT_NUMBER; see _gcs_server.py)."""
        body = json.dumps({"name": name}).encode()
        status, body = self._request("POST", f"/storage/v1/b?project={project or self.project}", body,
                                     {"Content-Type": "application/json"})
        if status not in (200, 409):
            raise RuntimeError(f"create bucket {name}: HTTP {status} {body[:200]!r}")
        # gcp-storage-emulator's insert ignores the location (every bucket reads "US"); its PATCH sets it.
        fields = json.dumps({"location": location, **metadata}).encode()
        status, body = self._request("PATCH", f"/storage/v1/b/{name}", fields, {"Content-Type": "application/json"})
        if status != 200:
            raise RuntimeError(f"set location of bucket {name}: HTTP {status} {body[:200]!r}")

    def set_iam_policy(self, bucket: str, bindings: list[dict[str, Any]]) -> None:
        """Replace the bucket's IAM policy with ``bindings`` ([{"role": ..., "members": [...]}]), as
        buckets.setIamPolicy does (the emulator stores it; it enforces nothing)."""
        body = json.dumps({"bindings": bindings}).encode()
        status, body = self._request("PUT", f"/storage/v1/b/{bucket}/iam", body, {"Content-Type": "application/json"})
        if status != 200:
            raise RuntimeError(f"set IAM policy of gs://{bucket}: HTTP {status} {body[:200]!r}")

    def write(self, bucket: str, name: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        """Seed an object without going through the client under test."""
        q = urllib.parse.urlencode({"uploadType": "media", "name": name})
        status, body = self._request("POST", f"/upload/storage/v1/b/{bucket}/o?{q}", data,
                                     {"Content-Type": content_type})
        if status != 200:
            raise RuntimeError(f"write gs://{bucket}/{name}: HTTP {status} {body[:200]!r}")

    def read(self, bucket: str, name: str) -> bytes:
        """The object's bytes; FileNotFoundError when absent."""
        status, body = self._request("GET", f"/download/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}"
                                            "?alt=media")
        if status == 404:
            raise FileNotFoundError(f"gs://{bucket}/{name}")
        if status != 200:
            raise RuntimeError(f"read gs://{bucket}/{name}: HTTP {status}")
        return body

    def list(self, bucket: str, prefix: str = "") -> list[str]:
        """Sorted object names in ``bucket`` under ``prefix``."""
        names: list[str] = []
        token = ""
        for _ in range(10_000):  # bounded: the emulator returns everything in one page today
            q = {"prefix": prefix} | ({"pageToken": token} if token else {})
            status, body = self._request("GET", f"/storage/v1/b/{bucket}/o?{urllib.parse.urlencode(q)}")
            if status == 404:
                raise FileNotFoundError(f"gs://{bucket}")
            if status != 200:
                raise RuntimeError(f"list gs://{bucket}/{prefix}: HTTP {status}")
            page = json.loads(body or b"{}")
            names += [item["name"] for item in page.get("items", [])]
            token = page.get("nextPageToken", "")
            if not token:
                break
        return sorted(names)

    def expire_uploads(self) -> None:
        """Forget every unfinished resumable upload session, as Cloud Storage does a week after it began."""
        status, _ = self._request("GET", "/expire-uploads")
        if status != 200:
            raise RuntimeError(f"expire-uploads: HTTP {status}")

    def reset(self, keep_buckets: bool = False) -> None:
        """Delete every object (and, unless keep_buckets, every bucket): a fresh store for the next test."""
        status, _ = self._request("GET", "/wipe" + ("?keep-buckets=1" if keep_buckets else ""))
        if status != 200:
            raise RuntimeError(f"wipe: HTTP {status}")


# ---------------------------------------------------------------------------------------------------------------------

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "proxy-connection"}
MAX_CHUNKS = 1_000_000
_proxies = itertools.count(1)


@dataclass
class ProxiedRequest:
    """One request the proxy saw: n is 1-based; status is what the client got (None: connection dropped)."""

    n: int
    method: str
    target: str  # path with query, e.g. /upload/storage/v1/b/b/o?uploadType=resumable&upload_id=...
    headers: dict[str, str]  # names lower-cased: headers["content-range"]
    body_size: int
    failed: bool
    status: int | None = None

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


FailWhen = Callable[[str, str, int], bool]
TRICKLE_PIECE = 64 * 1024


class FaultyProxy:
    """A threaded HTTP proxy on 127.0.0.1 in front of ``upstream`` that fails chosen requests.

    A request fails when ``fail_every`` divides its 1-based number n, or when ``fail_when(method, target, n)``
    is true (target is the path with its query). A failed request gets ``status`` (default 503) with a GCS-style
    JSON error (``error`` replaces the body), or, with ``status=None``, a connection closed without any
    response. With ``forward_failed=True`` the request first reaches upstream (its effect happens) and only the
    response is lost, the harder case for idempotent retries. ``hold_when(method, target, n)`` gives the seconds
    a request waits before it is forwarded (0 for none), outside the lock that orders the requests, so held
    requests overlap; ``max_in_flight`` is how many were under way at once at most. ``trickle_when(method,
    target, n)`` gives the seconds to wait after each TRICKLE_PIECE bytes of the response body (0: all at once), a
    slow download.
    """

    def __init__(self, upstream: str, *, fail_every: int | None = None, fail_when: FailWhen | None = None,
                 status: int | None = 503, forward_failed: bool = False, max_failures: int | None = None,
                 error: dict | None = None, hold_when: Callable[[str, str, int], float] | None = None,
                 trickle_when: Callable[[str, str, int], float] | None = None) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        if parsed.scheme != "http" or not parsed.hostname or not parsed.port:
            raise ValueError(f"upstream must look like http://host:port, got {upstream!r}")
        self.upstream = (parsed.hostname, parsed.port)
        self.fail_every = fail_every
        self.fail_when = fail_when
        self.status = status
        self.forward_failed = forward_failed
        self.max_failures = max_failures
        self.error = error  # the JSON error body of a failed request ({"error": {...}}), else a backendError
        self.hold_when = hold_when
        self.trickle_when = trickle_when
        self.in_flight = 0
        self.max_in_flight = 0
        self.requests: list[ProxiedRequest] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.thread_prefix = f"faulty-proxy-{next(_proxies)}"

    # -- counters --------------------------------------------------------------------------------------------------

    @property
    def seen(self) -> int:
        with self._lock:
            return len(self.requests)

    @property
    def failed(self) -> int:
        with self._lock:
            return sum(r.failed for r in self.requests)

    def _decide(self, method: str, target: str, headers: dict[str, str], size: int) -> ProxiedRequest:
        with self._lock:
            n = len(self.requests) + 1
            fail = bool(self.fail_every and n % self.fail_every == 0)
            if self.fail_when is not None and self.fail_when(method, target, n):
                fail = True
            if self.max_failures is not None and sum(r.failed for r in self.requests) >= self.max_failures:
                fail = False
            rec = ProxiedRequest(n, method, target, headers, size, fail)
            self.requests.append(rec)
            return rec

    # -- lifecycle -------------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("proxy not started")
        return f"http://{HOST}:{self._server.server_address[1]}"

    def env(self) -> dict[str, str]:
        return {EMULATOR_ENV: self.url, NO_BUCKET_METADATA_ENV: "true"}

    def client(self, project: str = "test") -> storage.Client:
        return storage_client(self.url, project)

    def start(self) -> FaultyProxy:
        if self._server is not None:
            return self
        self._server = _ProxyServer((HOST, 0), _ProxyHandler, self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=self.thread_prefix, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()  # joins the per-request threads (each handles one request, then closes)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FaultyProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = False  # so server_close() joins them: nothing outlives the proxy
    block_on_close = True

    def __init__(self, addr: tuple[str, int], handler: type[BaseHTTPRequestHandler], proxy: FaultyProxy) -> None:
        self.proxy = proxy
        super().__init__(addr, handler)


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows failures anyway
        pass

    def _read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is not None:
            return self.rfile.read(int(length))
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            for _ in range(MAX_CHUNKS):
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    # Trailer section ends with an empty line.
                    for _ in range(100):
                        if self.rfile.readline() in (b"\r\n", b"\n", b""):
                            break
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(parts)
        return b""

    def _handle(self) -> None:
        # One request per connection: no idle keep-alive threads left behind at shutdown.
        self.close_connection = True
        proxy = self.server.proxy
        body = self._read_body()
        headers = {k.lower(): v for k, v in self.headers.items()}
        rec = proxy._decide(self.command, self.path, headers, len(body))
        with proxy._lock:
            proxy.in_flight += 1
            proxy.max_in_flight = max(proxy.max_in_flight, proxy.in_flight)
        try:
            if proxy.hold_when is not None and (seconds := proxy.hold_when(self.command, self.path, rec.n)):
                time.sleep(seconds)
            self._answer(rec, body)
        finally:
            with proxy._lock:
                proxy.in_flight -= 1

    def _answer(self, rec: ProxiedRequest, body: bytes) -> None:
        proxy = self.server.proxy
        if rec.failed and not proxy.forward_failed:
            self._fail(rec)
            return
        try:
            status, reason, resp_headers, resp_body = self._forward(body)
        except OSError as e:
            rec.status = 502
            self._send(502, "Bad Gateway", [("Content-Type", "text/plain")], f"upstream error: {e}".encode())
            return
        if rec.failed:
            self._fail(rec)
            return
        rec.status = status
        trickle = proxy.trickle_when(self.command, self.path, rec.n) if proxy.trickle_when is not None else 0
        self._send(status, reason, resp_headers, resp_body, trickle)

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.server.proxy.upstream, timeout=30)
        try:
            # The Host header passes through untouched so the emulator's resumable-session Location points back
            # at the proxy, keeping later chunks on the faulty path too.
            out = [(k, v) for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP | {"content-length"}]
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for k, v in out:
                conn.putheader(k, v)
            if body or self.command in ("POST", "PUT", "PATCH"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
            resp = conn.getresponse()
            data = resp.read()
            headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP | {"content-length"}]
            return resp.status, resp.reason, headers, data
        finally:
            conn.close()

    def _fail(self, rec: ProxiedRequest) -> None:
        status = self.server.proxy.status
        rec.status = status
        if status is None:
            return  # close without a response: the client sees a connection error
        msg = self.server.proxy.error or {
            "error": {"code": status, "message": "injected by FaultyProxy", "errors": [{"reason": "backendError"}]}}
        self._send(status, "Injected Fault", [("Content-Type", "application/json")], json.dumps(msg).encode())

    def _send(self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes,
              trickle: float = 0) -> None:
        self.send_response_only(status, reason)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command == "HEAD":
            return
        if not trickle:
            self.wfile.write(body)
            return
        try:
            for start in range(0, len(body), TRICKLE_PIECE):
                self.wfile.write(body[start:start + TRICKLE_PIECE])
                self.wfile.flush()
                time.sleep(trickle)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle


def apply_env(env: dict[str, str]) -> Callable[[], None]:
    """Set ``env`` in os.environ; returns an undo (for code without pytest's monkeypatch)."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)

    def undo() -> None:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    return undo
