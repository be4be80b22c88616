"""A TCP listener on 127.0.0.1 that records the first bytes of each connection and closes it: it tells a test whether
a client came to `host:port`, and whether it spoke TLS there (a TLS record starts with content type 22, handshake,
and version 3.x: RFC 8446 section 5.1) or something else (a plaintext HTTP/2 preface starts "PRI *").

    with TlsProbe() as probe:
        os.environ["FTCLI_SECRETMANAGER_ENDPOINT"] = probe.endpoint
        ...
        assert probe.wait_for_hello()
"""

from __future__ import annotations

import socket
import threading

from tests.emulators._grpc import HOST


class TlsProbe:
    def __init__(self) -> None:
        self.first_bytes: list[bytes] = []
        self._seen = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.endpoint = ""  # host:port, once entered

    def __enter__(self) -> TlsProbe:
        self._sock.bind((HOST, 0))
        self._sock.listen(8)
        self.endpoint = f"{HOST}:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True, name="tls-probe").start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sock.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:  # closed by __exit__
                return
            with conn:  # recorded before the hang-up, which is what ends the client's attempt
                conn.settimeout(5)
                try:
                    data = conn.recv(16)
                except OSError:
                    data = b""
                self.first_bytes.append(data)
                self._seen.set()

    def wait_for_hello(self, timeout: float = 20.0) -> bool:
        """Whether a connection came within `timeout` seconds and its first bytes were a TLS handshake record."""
        self._seen.wait(timeout)
        return bool(self.first_bytes) and self.first_bytes[0][:1] == b"\x16" and self.first_bytes[0][1:2] == b"\x03"
