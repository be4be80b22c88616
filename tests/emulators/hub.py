"""A Hugging Face Hub model API on 127.0.0.1, answering GET /api/models/{repo_id} as the real Hub does (read
2026-11-27; the sources are in src/ftcli/hub.py's docstring):

- a public or gated model: 200 with its info (`id`, `private`, `gated`: false, "auto" or "manual", `sha`, `siblings`:
  [{"rfilename": ...}]); a gated model's info and file list are public, its files are not;
- a private model: the same 200 to a token that can read it;
- a missing model, or a private one asked by anyone else: 401 without a token, 404 with one, `X-Error-Code:
  RepoNotFound` (the Hub does not say which of the two it is);
- a token the Hub does not know: 401 with `X-Error-Message: Invalid credentials in Authorization header`;
- a renamed model: a 307 to its new name.

Point HF_ENDPOINT at ``url``. ``requests`` records (path, Authorization header or None); ``fail_with`` makes every
answer that status (a Hub that is down: 503), ``not_json`` a web page
instead of an answer.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

from tests.emulators._grpc import HOST

PREFIX = "/api/models/"


@dataclass
class HubModel:
    files: tuple[str, ...] = ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt")
    private: bool = False
    gated: bool | str = False  # "auto" or "manual" when gated
    readers: frozenset[str] = frozenset()  # tokens that can read a private model


@dataclass
class HubEmulator:
    models: dict[str, HubModel] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)  # old id -> new id
    tokens: set[str] = field(default_factory=set)  # tokens the Hub knows
    fail_with: int | None = None
    not_json: bool = False  # answer 200 with a web page (a proxy's or a captive portal's)
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    def reset(self) -> None:
        self.models.clear()
        self.renamed.clear()
        self.tokens.clear()
        self.requests.clear()
        self.fail_with = None
        self.not_json = False

    def start(self) -> HubEmulator:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                auth = self.headers.get("Authorization")
                hub.requests.append((self.path, auth))
                status, headers, body = hub.answer(self.path, auth)
                if hub.not_json:
                    status, headers, body = 200, {"Content-Type": "text/html"}, None
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                data = b"<html><body>Sign in to continue</body></html>" if hub.not_json else json.dumps(body).encode()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True, name="hub-emulator").start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://{HOST}:{self._server.server_port}"

    def answer(self, path: str, auth: str | None) -> tuple[int, dict[str, str], Any]:
        if self.fail_with is not None:
            return self.fail_with, {}, {"error": "Service Unavailable"}
        if not path.startswith(PREFIX):
            return 404, {}, {"error": "Not Found"}
        repo_id = unquote(path[len(PREFIX):].split("?", 1)[0]).rstrip("/")
        token = auth.removeprefix("Bearer ").strip() if auth else None
        if token is not None and token not in self.tokens:
            return 401, {"X-Error-Message": "Invalid credentials in Authorization header"}, \
                {"error": "Invalid credentials in Authorization header"}
        if repo_id in self.renamed:
            return 307, {"Location": PREFIX + self.renamed[repo_id]}, {"message": "Temporary Redirect"}
        model = self.models.get(repo_id)
        if model is None or (model.private and token not in model.readers):
            return 404 if token else 401, {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"}, \
                {"error": "Repository not found"}
        return 200, {}, {"id": repo_id, "modelId": repo_id, "private": model.private, "gated": model.gated,
                         "sha": "0" * 40, "siblings": [{"rfilename": f} for f in model.files]}
