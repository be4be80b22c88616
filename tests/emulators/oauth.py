"""An OAuth 2.0 token endpoint on 127.0.0.1 that refuses every grant, as Google's does for a revoked or expired login.

The refusal is RFC 6749's error response (section 5.2: HTTP 400, JSON {"error": "invalid_grant", ...}); google-auth
raises RefreshError on it. Point user credentials' token_uri at ``url``:

    with RefusingTokenEndpoint() as tokens:
        creds = google.oauth2.credentials.Credentials(None, refresh_token="r", client_id="c", client_secret="s",
                                                      token_uri=tokens.url)
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.emulators._grpc import HOST


class RefusingTokenEndpoint:
    def __init__(self, error: str = "invalid_grant", description: str = "Token has been expired or revoked."):
        self.body = json.dumps({"error": error, "error_description": description}).encode()
        self.requests = 0
        self._server: ThreadingHTTPServer | None = None

    def __enter__(self) -> RefusingTokenEndpoint:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                endpoint.requests += 1
                self.send_response(400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(endpoint.body)))
                self.end_headers()
                self.wfile.write(endpoint.body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True, name="refusing-token-endpoint").start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://{HOST}:{self._server.server_port}/token"
