"""A Hugging Face Hub on 127.0.0.1: its model API, and a model's files as huggingface_hub downloads them (read
2026-11-27; the model API's sources are in src/ftcli/hub.py's docstring).

The model API, GET /api/models/{repo_id}[/revision/{revision}]:
- a public or gated model: 200 with its info (`id`, `private`, `gated`: false, "auto" or "manual", `sha`, `siblings`:
  [{"rfilename": ...}]); a gated model's info and file list are public, its files are not;
- a private model: the same 200 to a token that can read it;
- a missing model, or a private one asked by anyone else: 401 without a token, 404 with one, `X-Error-Code:
  RepoNotFound` (the Hub does not say which of the two it is);
- a token the Hub does not know: 401 with `X-Error-Message: Invalid credentials in Authorization header`;
- a renamed model: a 307 to its new name.
GET /api/models/{repo_id}/tree/{revision}[/{path}] lists a model's files as list_repo_tree reads them (`type`, `path`,
`oid`, `size`, `lfs`: {`oid`, `size`, `pointerSize`}); a folder the model lacks is a 404 `EntryNotFound`.

A model's files, HEAD and GET /{repo_id}/resolve/{revision}/{path}, answered as huggingface_hub 2.4's
file_download.get_hf_file_metadata and hf_hub_download read them (and as huggingface.js's fileDownloadInfo tests
record bert-base-uncased's answers: https://github.com/huggingface/huggingface.js/pull/1024, read 2026-11-27):
- every answer carries `X-Repo-Commit` (the commit the revision names; huggingface_hub refuses a file without it);
- a file kept in git: 200, `ETag` its git blob id (sha1 of "blob SIZE\\0" + bytes), `Content-Length`, the bytes;
- a file kept in LFS (*.safetensors, *.bin, *.model here): 302 to a signed URL on another host (the CDN, its own
  server here), with `X-Linked-Etag` its sha256 and `X-Linked-Size` its size; huggingface_hub sends the CDN no
  Authorization header (utils/_http.py _is_same_or_hub_host);
- a file the model lacks: 404 `X-Error-Code: EntryNotFound` (huggingface_hub remembers it in the cache's .no_exist/);
  a revision it lacks: 404 `RevisionNotFound`;
- a gated model's files, without a token: 401 `X-Error-Code: GatedRepo`, "Access to model ORG/NAME is restricted. You
  must have access to it and be authenticated to access it. Please log in."; with a token that has no access: 403
  `GatedRepo`, "... is restricted and you are not in the authorized list" (huggingface_hub raises GatedRepoError for
  both: utils/_http.py hf_raise_for_status; the answers as users report them:
  https://github.com/ToTheBeginning/PuLID/issues/97 and https://github.com/huggingface/diffusers/issues/4447, read
  2026-11-27);
- nothing advertises Xet storage (no X-Xet-* header, no `xetHash`): huggingface_hub downloads over plain HTTP.

A model's files come from `HubModel.folder` (a folder save_pretrained wrote); without one it has the names in `files`
and no bytes (the model API answers, downloads do not). `readers` are the tokens that can read a private model, and
that have access to a gated one.

Point HF_ENDPOINT at ``url``. ``requests`` records every Hub request as (path, Authorization header or None),
``calls`` as (method, path, Authorization, User-Agent) with the CDN's as ("cdn " + method, ...); ``fail_with`` makes
every answer that status (a Hub that is down: 503), ``not_json`` a web page instead of an answer.
huggingface_hub 2.4 also asks GET /api/agent-harnesses (its telemetry's registry, utils/_detect_agent.py); the 404 it
gets here it ignores, as it ignores any failure of that request.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from tests.emulators._grpc import HOST

PREFIX = "/api/models/"
LFS_SUFFIXES = (".safetensors", ".bin", ".model", ".h5", ".msgpack", ".onnx")


@dataclass
class HubModel:
    files: tuple[str, ...] = ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt")
    private: bool = False
    gated: bool | str = False  # "auto" or "manual" when gated
    readers: frozenset[str] = frozenset()  # tokens that can read a private model, or have access to a gated one
    folder: Path | None = None  # its files' bytes (the names in `files` are then this folder's files)

    def __post_init__(self) -> None:
        if self.folder is not None:
            self.files = tuple(sorted(p.relative_to(self.folder).as_posix() for p in Path(self.folder).rglob("*")
                                      if p.is_file()))

    def data(self, path: str) -> bytes | None:
        if self.folder is None or path not in self.files:
            return None
        return (Path(self.folder) / path).read_bytes()

    @property
    def sha(self) -> str:
        """The commit `main` names: changes with the files."""
        h = hashlib.sha1()
        for f in self.files:
            h.update(f.encode() + b"\0" + hashlib.sha1(self.data(f) or b"").digest())
        return h.hexdigest()


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs(path: str) -> bool:
    return path.endswith(LFS_SUFFIXES)


@dataclass
class HubEmulator:
    models: dict[str, HubModel] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)  # old id -> new id
    tokens: set[str] = field(default_factory=set)  # tokens the Hub knows
    fail_with: int | None = None
    not_json: bool = False  # answer 200 with a web page (a proxy's or a captive portal's)
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    calls: list[tuple[str, str, str | None, str]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _cdn: ThreadingHTTPServer | None = None
    _blobs: dict[str, bytes] = field(default_factory=dict)  # sha256 -> bytes, what the CDN serves

    def reset(self) -> None:
        self.models.clear()
        self.renamed.clear()
        self.tokens.clear()
        self.requests.clear()
        self.calls.clear()
        self._blobs.clear()
        self.fail_with = None
        self.not_json = False

    def start(self) -> HubEmulator:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as huggingface_hub's httpx client expects of the Hub

            def _answer(self, head: bool) -> None:
                auth = self.headers.get("Authorization")
                hub.requests.append((self.path, auth))
                hub.calls.append((self.command, self.path, auth, self.headers.get("User-Agent", "")))
                status, headers, body = hub.answer(self.path, auth)
                if hub.not_json:
                    status, headers, body = 200, {"Content-Type": "text/html"}, \
                        b"<html><body>Sign in to continue</body></html>"
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                content_type = "application/octet-stream" if isinstance(body, bytes) else "application/json"
                for name, value in {"Content-Type": content_type, **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not head:
                    self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._answer(head=False)

            def do_HEAD(self) -> None:  # noqa: N802
                self._answer(head=True)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Cdn(Handler):
            def _answer(self, head: bool) -> None:
                auth = self.headers.get("Authorization")
                hub.calls.append(("cdn " + self.command, self.path, auth, self.headers.get("User-Agent", "")))
                data = hub._blobs.get(urlsplit(self.path).path.rsplit("/", 1)[-1])
                self.send_response(200 if data is not None else 404)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data or b"")))
                self.send_header("ETag", f'"{hashlib.sha256(data or b"").hexdigest()}"')
                self.end_headers()
                if not head and data:
                    self.wfile.write(data)

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self._cdn = ThreadingHTTPServer((HOST, 0), Cdn)
        for server, name in ((self._server, "hub-emulator"), (self._cdn, "hub-emulator-cdn")):
            threading.Thread(target=server.serve_forever, daemon=True, name=name).start()
        return self

    def stop(self) -> None:
        for server in (self._server, self._cdn):
            if server is not None:
                server.shutdown()
                server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://{HOST}:{self._server.server_port}"

    @property
    def cdn_url(self) -> str:
        assert self._cdn is not None
        return f"http://{HOST}:{self._cdn.server_port}"

    def hub_calls(self) -> list[tuple[str, str, str | None, str]]:
        """The requests the Hub itself received (not the CDN)."""
        return [c for c in self.calls if not c[0].startswith("cdn ")]

    def _token(self, auth: str | None) -> tuple[str | None, tuple[int, dict[str, str], Any] | None]:
        token = auth.removeprefix("Bearer ").strip() if auth else None
        if token is not None and token not in self.tokens:
            return token, (401, {"X-Error-Message": "Invalid credentials in Authorization header"},
                           {"error": "Invalid credentials in Authorization header"})
        return token, None

    def _model(self, repo_id: str, token: str | None) -> tuple[HubModel | None, tuple[int, dict[str, str], Any] | None]:
        model = self.models.get(repo_id)
        if model is None or (model.private and token not in model.readers):
            return None, (404 if token else 401, {"X-Error-Code": "RepoNotFound",
                                                  "X-Error-Message": "Repository not found"},
                          {"error": "Repository not found"})
        return model, None

    def answer(self, path: str, auth: str | None) -> tuple[int, dict[str, str], Any]:
        if self.fail_with is not None:
            return self.fail_with, {}, {"error": "Service Unavailable"}
        route, query = urlsplit(path).path, urlsplit(path).query
        if route.startswith(PREFIX):
            return self._api(unquote(route[len(PREFIX):]).rstrip("/"), auth, "?" + query if query else "")
        if "/resolve/" in route:
            return self._resolve(route, auth)
        return 404, {}, {"error": "Not Found"}

    def _api(self, rest: str, auth: str | None, query: str = "") -> tuple[int, dict[str, str], Any]:
        repo_id, what, revision, inside, tail = rest, "info", "main", "", ""
        for verb in ("/tree/", "/revision/"):
            if verb in rest:
                repo_id, tail = rest.split(verb, 1)
                what = verb.strip("/")
                revision, _, inside = tail.partition("/")
                tail = verb + tail
        token, refused = self._token(auth)
        if refused:
            return refused
        if repo_id in self.renamed:
            moved = PREFIX + self.renamed[repo_id] + quote(tail) + query
            return 307, {"Location": moved}, {"message": "Temporary Redirect"}
        model, refused = self._model(repo_id, token)
        if refused:
            return refused
        assert model is not None
        if revision not in ("main", model.sha):
            return 404, {"X-Error-Code": "RevisionNotFound", "X-Error-Message": f"Invalid rev id: {revision}"}, \
                {"error": f"Invalid rev id: {revision}"}
        if what == "tree":
            return self._tree(model, inside)
        return 200, {}, {"id": repo_id, "modelId": repo_id, "private": model.private, "gated": model.gated,
                         "sha": model.sha, "siblings": [{"rfilename": f} for f in model.files]}

    def _tree(self, model: HubModel, inside: str) -> tuple[int, dict[str, str], Any]:
        prefix = inside.strip("/") + "/" if inside.strip("/") else ""
        if prefix and not any(f.startswith(prefix) for f in model.files):
            return 404, {"X-Error-Code": "EntryNotFound", "X-Error-Message": f"{inside} does not exist on \"main\""}, \
                {"error": f"{inside} does not exist on \"main\""}
        entries: list[dict[str, Any]] = []
        folders: set[str] = set()
        for f in model.files:
            if not f.startswith(prefix):
                continue
            name = f[len(prefix):]
            if "/" in name:
                folders.add(prefix + name.split("/", 1)[0])
                continue
            data = model.data(f) or b""
            entry: dict[str, Any] = {"type": "file", "path": f, "size": len(data), "oid": git_blob_id(data)}
            if is_lfs(f):
                entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            entries.append(entry)
        entries += [{"type": "directory", "path": d, "oid": "0" * 40} for d in sorted(folders)]
        return 200, {}, entries

    def _resolve(self, route: str, auth: str | None) -> tuple[int, dict[str, str], Any]:
        repo_part, _, rest = route.lstrip("/").partition("/resolve/")
        repo_id = unquote(repo_part)
        revision, _, file = rest.partition("/")
        revision, file = unquote(revision), unquote(file)
        token, refused = self._token(auth)
        if refused:
            return refused
        if repo_id in self.renamed:
            return 307, {"Location": f"/{self.renamed[repo_id]}/resolve/{quote(revision, safe='')}/{quote(file)}"}, \
                {"message": "Temporary Redirect"}
        model, refused = self._model(repo_id, token)
        if refused:
            return refused
        assert model is not None
        if model.gated and token not in model.readers:
            if token is None:
                message = (f"Access to model {repo_id} is restricted. You must have access to it and be authenticated "
                           "to access it. Please log in.")
            else:
                message = (f"Access to model {repo_id} is restricted and you are not in the authorized list. Visit "
                           f"https://huggingface.co/{repo_id} to ask for access.")
            return 401 if token is None else 403, {"X-Error-Code": "GatedRepo", "X-Error-Message": message}, \
                {"error": message}
        if revision not in ("main", model.sha):
            return 404, {"X-Error-Code": "RevisionNotFound", "X-Error-Message": f"Invalid rev id: {revision}"}, \
                {"error": f"Invalid rev id: {revision}"}
        commit = {"X-Repo-Commit": model.sha}
        data = model.data(file)
        if data is None:
            return 404, {**commit, "X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found"}, \
                {"error": "Entry not found"}
        if is_lfs(file):
            digest = hashlib.sha256(data).hexdigest()
            self._blobs[digest] = data
            return 302, {**commit, "ETag": f'"{git_blob_id(data)}"', "X-Linked-Etag": f'"{digest}"',
                         "X-Linked-Size": str(len(data)),
                         "Location": f"{self.cdn_url}/repos/{digest}?X-Amz-Signature=emulated"}, b""
        return 200, {**commit, "ETag": f'"{git_blob_id(data)}"'}, data
