"""Local paths and gs:// URIs, behind the same few calls.

Vertex hands the trainer gs:// URIs in AIP_MODEL_DIR and friends; the user may pass gs:// data files.
google-cloud-storage is imported only when a gs:// URI is actually used (it honours
STORAGE_EMULATOR_HOST, which is how the tests point it at an emulator).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NoReturn

from ftcli_trainer.errors import one_line

if TYPE_CHECKING:
    from collections.abc import Callable

    from _typeshed import ReadableBuffer
    from google.cloud.storage import Client

COMPLETE_MARKER = "_COMPLETE"
# An export's list of the files it wrote (JSON: {"ftcli_export": 1, "files": [...]}, relative to the model folder). A
# re-export replaces and removes only those: a README or notes the user put beside config.json stay, locally and in a
# bucket. Written first as the old and new lists together, marker removed; last, after the files, the new list alone.
EXPORT_MANIFEST = "ftcli_files.json"
TRANSFER_WORKERS = 8
# Staging folders are named `<stem>.tmp-<pid>-<mkdtemp's 8 characters>`: the pid tells a dead writer's leftovers
# (removed at the next start) from a live writer's (left alone); the exact shape keeps a user's own folders safe.
# Where there is flock, the writer also holds a shared one on the folder itself (_hold), which another container with
# the same home mounted sees where it cannot see the pid (see _writer_alive; untried on NFS).
STAGING_TAIL = r"\.tmp-(\d+)-[a-z0-9_]{8}"
_held_staging: dict[Path, int] = {}  # this process's staging folders, each with the descriptor that holds its flock
# With gs:// logs, the trainer copies them there at every evaluation and checkpoint, and with a train line once
# this long has passed since the last copy (the files change only at those lines)
LOGS_SYNC_S = 120.0


class UnsafeObjectName(ValueError):
    """An object name that would land outside the folder it is downloaded into."""


def relative_object_path(name: str, prefix: str) -> PurePosixPath | None:
    """Where object `name` (under `prefix`, which ends with "/" or is empty) goes, relative to the destination.

    None for a folder placeholder (a name ending in "/", as the console's "create folder" makes). Raise
    UnsafeObjectName for anything that could escape the destination: an absolute path, "." or ".." segments,
    empty segments ("a//b"), backslashes or NULs. GCS accepts all of these in object names.
    """
    if not name.startswith(prefix):
        raise UnsafeObjectName(f"object {name} is not under {prefix}")
    rel = name[len(prefix):]
    placeholder = rel.endswith("/") or rel == ""
    parts = rel.removesuffix("/").split("/") if rel.removesuffix("/") else []
    if (not parts and not placeholder) or any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
        raise UnsafeObjectName(f"object {name} would land outside the destination (an absolute path, '.' or "
                               f"'..', or an empty path segment)")
    # On Windows a segment with a colon is a drive ("c:x", joined, drops the destination: "If a segment is an absolute
    # path, all previous segments are ignored", with PureWindowsPath('c:/Windows', 'd:bar') == PureWindowsPath('d:bar')
    # as its example, pathlib's documentation, Doc/library/pathlib.rst, python/cpython, read 2026-11-27) or an NTFS
    # stream ("model.safetensors:x" writes no file of that name). Elsewhere a colon is an ordinary character.
    if ON_WINDOWS and any(":" in p for p in parts):
        raise UnsafeObjectName(f"object {name} has a ':' in its name, which on Windows names a drive or a file "
                               "stream, not a file in the destination")
    if placeholder:
        return None
    return PurePosixPath(*parts)


# The query of a resumable upload's request carries its session (upload_id), which lets whoever holds it upload to that
# object with no credentials ("This process allows untrusted clients to upload to an access-controlled bucket",
# Blob.create_resumable_upload_session's docstring in google-cloud-storage 3.17, read 2026-11-27), and
# google-cloud-storage puts the whole URL in its errors ("PUT URL: reason"); a signed URL's query holds its signature.
# An error line is pasted into CI logs and issues, and a job's log is read by everyone with logs access: those
# values are left out, the rest of the URL is kept (ftcli's error lines and the trainer's tracebacks).
_SECRET_PARAM = re.compile(r"(?i)([?&](?:upload_id|x-goog-signature|x-goog-credential|signature|access_token)=)"
                           r"[^&\s]*?(?=&|:?(?:\s|$))")


ON_WINDOWS = os.name == "nt"


def redact_urls(text: str) -> str:
    """`text` with the upload sessions, signatures and tokens in its URLs' queries replaced by REDACTED."""
    return _SECRET_PARAM.sub(r"\1REDACTED", text)


def error_line(e: BaseException) -> str:
    """The first line of a storage error, for a warning: its upload session and signatures redacted (redact_urls),
    or the error's type when it says nothing."""
    return redact_urls(one_line(e))


def make_dirs(path: Path) -> None:
    """The folder `path` and its parents, where they are missing. A link there to a folder not made yet (checkpoints/
    or logs/ kept on a bigger disk, a run folder set up ahead) gets the folder it points to, as model/ does (the
    export's): mkdir on the link itself failed with "File exists"."""
    Path(os.path.realpath(path)).mkdir(parents=True, exist_ok=True)


def staging_dir(parent: Path, name: str) -> Path:
    """A fresh folder `.NAME.tmp-PID-XXXXXXXX` in `parent` (the target's filesystem: a final rename is atomic).
    Stale ones of dead writers are removed first. Unlike mkdtemp's 0700, it gets the umask's usual mode: it
    becomes the user's folder once renamed."""
    import secrets

    make_dirs(parent)
    stem = f".{name}"
    clean_stale_staging(parent, re.escape(stem))
    while True:
        path = parent / f"{stem}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            path.mkdir(mode=0o777)
        except FileExistsError:
            continue
        _hold(path)
        return path


def staging_for(target: Path, name: str) -> Path:
    """A staging folder for files that will move into `target`: inside it when it is a folder that exists (its
    parent may be another filesystem: a mount point, a Docker volume, where every move in failed with EXDEV after
    all the work), named `.NAME.tmp-...`; else beside it, on the filesystem it will be renamed onto."""
    return staging_dir(target, name) if target.is_dir() else staging_dir(target.parent, target.name or name)


def clear_staging_inside(target: Path, name: str) -> None:
    """What a dead writer staged inside `target` (staging_for) goes, so that it does not make the folder look
    "not empty" before the check that comes ahead of staging."""
    if target.is_dir():
        clean_stale_staging(target, re.escape(f".{name}"))


def is_staging_inside(path: Path, name: str) -> bool:
    """Whether `path` is a staging folder that a writer made inside its target (staging_for's `.NAME.tmp-...`): a
    live one's (a dead one's is gone after clear_staging_inside) does not make that folder "not empty"."""
    return re.fullmatch(re.escape(f".{name}") + STAGING_TAIL, path.name) is not None and path.is_dir()


def local_tmp(kind: str) -> Path:
    """A fresh folder `ftcli-KIND.tmp-PID-XXXXXXXX` in the system temp folder, for staging gs:// transfers.
    Stale ones of dead writers are removed first."""
    stem = f"ftcli-{kind}"
    clean_stale_staging(Path(tempfile.gettempdir()), re.escape(stem))
    path = Path(tempfile.mkdtemp(prefix=f"{stem}.tmp-{os.getpid()}-"))
    _hold(path)
    return path


def _hold(path: Path) -> None:
    """Hold a shared flock on the staging folder `path` (its own descriptor, not a file in it: the folder is renamed
    into place whole) until this process ends or the folder is gone (renamed or removed: its descriptor is closed at
    the next staging folder made). A folder's pid alone said "dead" for a live writer in another PID namespace (another
    container with the same home or /tmp mounted, another host on NFS), and its staging was removed under it. Nothing
    is held where there is no flock (Windows) or the filesystem refuses it: the pid decides there, as before."""
    try:
        import fcntl
    except ImportError:
        return
    for held, fd in list(_held_staging.items()):
        if not os.path.lexists(held):
            os.close(fd)
            del _held_staging[held]
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return
    _held_staging[path] = fd


def _writer_alive(path: Path, pid: int) -> bool:
    """Whether the writer of the staging folder `path` (named with `pid`) may still be running. Its flock held (by a
    process this one may not see at all) says alive; otherwise its pid decides: a folder is removed only when both
    say its writer is gone (a writer that did not lock it, an older ftcli, is judged by its pid alone)."""
    try:
        import fcntl
    except ImportError:
        return _alive(pid)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return _alive(pid)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True  # a live writer holds it, whatever its pid looks like from here
    except OSError:
        pass  # no flock on this filesystem: the pid alone
    finally:
        os.close(fd)  # (a lock taken here goes with it)
    return _alive(pid)


def _alive(pid: int) -> bool:
    if ON_WINDOWS:
        return _alive_on_windows(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def _alive_on_windows(pid: int, kernel32: Any = None, last_error: Callable[[], int] | None = None) -> bool:
    """os.kill(pid, 0) is no probe on Windows: "It calls GenerateConsoleCtrlEvent when the sig parameter is
    CTRL_C_EVENT or CTRL_BREAK_EVENT" (https://stackoverflow.com/questions/35772001, answer 35792192, read
    2026-11-27), and CTRL_C_EVENT is 0: "If dwProcessGroupId is nonzero, this function will succeed, but the CTRL+C
    signal will not be received by processes within the specified process group" (GenerateConsoleCtrlEvent,
    http://msdn2.microsoft.com/en-us/library/ms683155.aspx, read 2026-11-27). Every dead writer looked alive, and
    its staging folder stayed (a download folder "not empty" for good). Asked of the process itself instead: "If the
    process has not terminated and the function succeeds, the status returned is STILL_ACTIVE" (GetExitCodeProcess,
    Microsoft Learn's processthreadsapi reference, read 2026-11-27 in a mirror of it). A process that cannot be
    opened for another reason than its absence (ERROR_INVALID_PARAMETER) is someone else's, and counts as alive.
    `kernel32` and `last_error` stand in for ctypes' kernel32 and get_last_error."""
    import ctypes
    from ctypes import wintypes

    if kernel32 is None:  # pragma: no cover - Windows only
        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
        kernel32.OpenProcess.restype = wintypes.HANDLE
        last_error = ctypes.get_last_error  # type: ignore[attr-defined]
    assert last_error is not None  # (a test that stands in for kernel32 gives its get_last_error too)
    process_query_limited_information, error_invalid_parameter, still_active = 0x1000, 87, 259
    handle = kernel32.OpenProcess(process_query_limited_information, False, pid)
    if not handle:
        return last_error() != error_invalid_parameter
    try:
        code = wintypes.DWORD()
        if not kernel32.GetExitCodeProcess(handle, ctypes.byref(code)):
            return True
        return code.value == still_active
    finally:
        kernel32.CloseHandle(handle)


def clean_stale_staging(parent: Path, stem: str) -> list[Path]:
    """Remove the staging folders `STEM.tmp-PID-XXXXXXXX` in `parent` (`stem` is a regular expression) whose
    writer died (a crash, kill -9); return them. A live writer's folder is left alone, and so is anything else."""
    pattern = re.compile(stem + STAGING_TAIL)
    removed: list[Path] = []
    try:
        candidates = list(parent.iterdir())
    except OSError:
        return removed
    for path in candidates:
        m = pattern.fullmatch(path.name)
        if not m or path.is_symlink() or not path.is_dir() or _writer_alive(path, int(m.group(1))):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def clean_stale_tmp() -> list[Path]:
    """At a run's start: what dead runs left in the system temp folder (gs:// transfers are staged there)."""
    return clean_stale_staging(Path(tempfile.gettempdir()), r"ftcli-[a-z]+")


class RecordingFile(io.FileIO):
    """A file that keeps the OSError of a failed write: torch.save reports a full disk only as an opaque
    RuntimeError ("unexpected pos ..."), with no errno to tell it from a bug."""

    error: OSError | None = None

    def write(self, b: ReadableBuffer) -> int:
        try:
            return super().write(b)
        except OSError as e:
            self.error = e
            raise


OS_ERROR_RE = re.compile(r"\(os error (\d+)\)")


def os_error_of(e: BaseException, *files: RecordingFile | None) -> OSError | None:
    """The operating-system error behind a failed write, if there is one: an OSError itself, one recorded by
    a RecordingFile, or safetensors' Rust I/O error ("... (os error 28)")."""
    if isinstance(e, OSError):
        return e
    for f in files:
        if f is not None and f.error is not None:
            return f.error
    m = OS_ERROR_RE.search(str(e))
    if m:
        code = int(m.group(1))
        return OSError(code, os.strerror(code))
    return None


def staged_where(target: str, staged: Path) -> str:
    """Where a failed write was going, as the user should look for it."""
    return f"the local staging folder {staged.parent} (on its way to {target})" if is_gcs(target) else target


def write_error(e: OSError, what: str, where: str) -> str:
    """One line for a local write that failed: disk full, read-only, not a folder, permission."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"no space left on the device while writing {what} to {where}; free some space or point "
                f"--output-dir at a bigger disk, then run again")
    reason = e.strerror or type(e).__name__
    named = f" ({e.filename})" if e.filename and str(e.filename) not in where else ""
    if e.errno == errno.EROFS:
        fix = "; point --output-dir at a writable disk, then run again"
    elif e.errno in (errno.EACCES, errno.EPERM):
        fix = "; fix its permissions or point --output-dir at a folder you may write to, then run again"
    else:
        fix = ""
    return f"cannot write {what} to {where}: {reason}{named}{fix}"


def size_text(n: int) -> str:
    """Bytes as a person reads them: 1.2 GB, 840.0 MB, 12.3 kB, 812 bytes (the reading lines, the upload's notes)."""
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def is_gcs(path: str | os.PathLike | None) -> bool:
    return isinstance(path, str) and path.startswith("gs://")


def split_gcs(uri: str) -> tuple[str, str]:
    """gs://bucket/some/prefix -> ("bucket", "some/prefix") (prefix without a trailing slash)."""
    rest = uri[len("gs://"):]
    bucket, _, prefix = rest.partition("/")
    return bucket, prefix.strip("/")


def join(base: str, *parts: str) -> str:
    if is_gcs(base):
        return "/".join([base.rstrip("/"), *parts])
    return str(Path(base, *parts))


# One client a process (and emulator setting): "it is safe to share instances across threads. In multiprocessing
# scenarios, best practice is to create client instances *after* ... os.fork" (googleapis/python-storage,
# docs/index.rst, read 2026-11-28). A client made at each call fetched credentials and opened connections anew.
_CLIENTS: dict[tuple, object] = {}


def _client() -> Client:
    key = (os.getpid(), os.environ.get("STORAGE_EMULATOR_HOST"), os.environ.get("GOOGLE_CLOUD_PROJECT"))
    client = _CLIENTS.get(key)
    if client is None:
        client = _CLIENTS[key] = _new_client()
    return client


def _new_client() -> Client:
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project=os.environ.get("GOOGLE_CLOUD_PROJECT", "local"),
                              credentials=AnonymousCredentials())
    return storage.Client()


def download_file(uri: str, dest: Path) -> Path:
    bucket, name = split_gcs(uri)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _client().bucket(bucket).blob(name).download_to_filename(str(dest))
    return dest


class InTheWay(Exception):
    """Files of the user's (not in the earlier export's list) where a re-export would write its own."""

    def __init__(self, names: list[str]):
        super().__init__(", ".join(names))
        self.names = names


class NotAnExport(InTheWay):
    """A folder with files in it that is no export of ftcli's: it has neither the marker nor the list of its files (a
    model from elsewhere, the user's notes). Nothing of it is replaced: locally too (replaceable)."""


class SourceGone(Exception):
    """An object that upload_dir was to copy inside Cloud Storage (`copies`), there when the caller looked for it
    (checkpoint.take_weights) and gone when the copy was made: deleted in between (a lifecycle rule, someone cleaning
    the bucket). The folder is not published; the caller writes the file itself and publishes it again."""

    def __init__(self, source: str):
        super().__init__(f"{source} is gone")
        self.source = source


class Unlisted(InTheWay):
    """An earlier ftcli's export, without the list of its files, that holds files the new export does not write: that
    export's own (a shard, a tokenizer file), which would be left beside the new model and loaded with it, or the
    user's, which are never deleted. They cannot be told apart. `unreadable`: why the list that is there cannot be
    read (_read_export_list), where there is one."""

    def __init__(self, names: list[str], unreadable: str | None = None):
        super().__init__(names)
        self.unreadable = unreadable


def _export_list(text: str | None) -> set[str] | None:
    """The files an export's EXPORT_MANIFEST names, or None (absent or unreadable)."""
    return _read_export_list(None if text is None else text.encode("utf-8"))[0]


def _read_export_list(data: bytes | None) -> tuple[set[str] | None, str | None]:
    """The files an export's EXPORT_MANIFEST (its bytes, None when absent) names, and why it cannot be read where it
    is there and cannot: (files, None), (None, None) for none (an export of an older ftcli), (None, why)."""
    import json

    if data is None:
        return None, None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8"
    try:
        value = json.loads(text)
    except ValueError:
        return None, "not JSON"
    files = value.get("files") if isinstance(value, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None, "not the list of files ftcli writes"
    return set(files), None


def _export_list_text(files: AbstractSet[str]) -> str:
    import json

    return json.dumps({"ftcli_export": 1, "files": sorted(files)}, indent=2) + "\n"


def upload_dir(local: Path, uri: str, *, marker: bool = True, ours_only: bool = False,
               copies: Mapping[str, str] | None = None) -> None:
    """Upload a folder's files under `uri`, in parallel.

    With `marker` (a model or a checkpoint) the folder is published whole: an old completion marker goes first
    (a reader never takes a half-overwritten folder for complete), objects the new folder no longer has go
    next, and the marker is written last. With `ours_only` (a model) only objects an earlier export wrote (its
    EXPORT_MANIFEST) are replaced or removed: what the user put beside them stays; one of theirs where the new export
    writes a file raises InTheWay before anything changes. `copies` (a name relative to `uri` -> a gs:// object) are
    files of the folder too, copied inside Cloud Storage (_copy_object) instead of uploaded; SourceGone when one of
    those objects is gone, with the folder not published (no marker).
    """
    from google.cloud.storage import transfer_manager

    copies = copies or {}
    bucket_name, prefix = split_gcs(uri)
    base = f"{prefix}/" if prefix else ""
    client = _client()
    bucket = client.bucket(bucket_name)
    files = sorted(p for p in local.rglob("*")
                   if p.is_file() and p.name != COMPLETE_MARKER and not (ours_only and p.name == EXPORT_MANIFEST)
                   and p.relative_to(local).as_posix() not in copies)
    rels = {p.relative_to(local).as_posix() for p in files} | set(copies)
    names = {base + rel for rel in rels}
    old: list[str] = []
    stale: list[str] = []
    if marker:
        old = [b.name for b in client.list_blobs(bucket_name, prefix=base)]
        if ours_only:
            earlier, unreadable = None, None
            if base + EXPORT_MANIFEST in old:
                # (bytes: download_as_text of a list not UTF-8 ended the export with a UnicodeDecodeError traceback)
                earlier, unreadable = _read_export_list(bucket.blob(base + EXPORT_MANIFEST).download_as_bytes())
            ours = {base + rel for rel in earlier or ()}
            there = set(old)
            if earlier is not None and (taken := sorted(n for n in names - ours if n in there)):
                raise InTheWay([n[len(base):] for n in taken])
            if earlier is None:  # (a name ending in "/" is a console folder's placeholder, no file)
                # With its marker, an earlier ftcli's export, whose files this export may replace; without it (and
                # without the list) nothing says any file there is ftcli's: a folder of the user's, as locally
                # (replaceable), where an export wrote over a config.json or model.safetensors of theirs. A list that
                # is there but unreadable makes it an export of ftcli's too, as locally (replaceable), which lost it.
                ftclis = base + COMPLETE_MARKER in there or unreadable is not None
                others = there - (names if ftclis else set()) - {base + COMPLETE_MARKER, base + EXPORT_MANIFEST}
                if left := sorted(n[len(base):] for n in others if not n.endswith("/")):
                    raise Unlisted(left, unreadable) if ftclis else NotAnExport(left)
            stale = sorted((ours & there) - names)
        else:
            stale = [n for n in old if n not in names and n != base + COMPLETE_MARKER]
        if base + COMPLETE_MARKER in old:
            bucket.blob(base + COMPLETE_MARKER).delete()
        if ours_only:  # both lists, until the stale files are gone: a failure half-way still knows them all
            both = {n[len(base):] for n in stale} | rels
            bucket.blob(base + EXPORT_MANIFEST).upload_from_string(_export_list_text(both).encode())
    # The copies first: one whose object is gone (SourceGone) is found before the uploads, which the caller's second
    # publishing makes again (a checkpoint's trainer_state.pt: twice the weights' size, with AdamW's two moments).
    for rel, source in sorted(copies.items()):
        _copy_object(source, bucket.blob(base + rel))
    pairs = [(str(p), bucket.blob(base + p.relative_to(local).as_posix())) for p in files]
    transfer_manager.upload_many(pairs, raise_exception=True, worker_type=transfer_manager.THREAD,
                                 max_workers=TRANSFER_WORKERS)
    if marker:
        for name in stale:
            bucket.blob(name).delete()
        if ours_only:
            bucket.blob(base + EXPORT_MANIFEST).upload_from_string(_export_list_text(rels).encode())
        bucket.blob(base + COMPLETE_MARKER).upload_from_string(b"")


def _copy_object(source: str, dest: Any) -> None:
    """The gs:// object `source` copied to the blob `dest` by Cloud Storage itself: no byte through this machine.
    "For large objects, this method requires the use of multiple requests ... you must keep calling the endpoint
    using the rewriteToken returned in the prior response until the done flag is true" (Objects: rewrite,
    https://cloud.google.com/storage/docs/json_api/v1/objects/rewrite, read 2026-11-29); within one location and
    storage class it is done in one."""
    from google.api_core.exceptions import NotFound

    bucket_name, name = split_gcs(source)
    blob = _client().bucket(bucket_name).blob(name)
    try:
        token, _, _ = dest.rewrite(blob)
        while token is not None:
            token, _, _ = dest.rewrite(blob, token=token)
    except NotFound:
        # (a 404 names no side: the source is the one that can go, but the destination's bucket is asked too)
        if blob.exists():
            raise
        raise SourceGone(source) from None


def link_or_copy(source: Path, dest: Path) -> None:
    """`dest` as a second name of the file `source` (a hard link: nothing written), or a copy of it where the two
    cannot share it (another filesystem: a folder linked to a bigger disk; a filesystem without hard links). Every
    writer here replaces a file whole (a new file renamed over it), never in place, so the two names never differ."""
    try:
        os.link(source, dest)
    except OSError:
        shutil.copyfile(source, dest)


def list_subdirs(uri: str) -> list[str]:
    """Names of the immediate sub-folders of a gs:// prefix."""
    bucket_name, prefix = split_gcs(uri)
    prefix = f"{prefix}/" if prefix else ""
    it = _client().list_blobs(bucket_name, prefix=prefix, delimiter="/")
    for _ in it.pages:
        pass
    return sorted(p[len(prefix):].rstrip("/") for p in it.prefixes)


def read_text(uri: str) -> str | None:
    """A small text file's content, local or gs://; None when it does not exist."""
    if is_gcs(uri):
        bucket, name = split_gcs(uri)
        blob = _client().bucket(bucket).get_blob(name)
        return blob.download_as_text() if blob is not None else None
    try:
        return Path(uri).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def write_text(uri: str, text: str) -> None:
    """Write a small text file whole, local (atomic rename) or gs:// (one object upload)."""
    if is_gcs(uri):
        bucket, name = split_gcs(uri)
        _client().bucket(bucket).blob(name).upload_from_string(text.encode("utf-8"))
        return
    import secrets

    path = Path(uri)
    make_dirs(path.parent)
    # A name of its own, created anew ("x": never through a link, never another writer's file) with the umask's
    # usual mode (mkstemp's 0600 would hide the run's metrics from a teammate). A full disk left the temporary file
    # behind (checkpoints/.run-fingerprint.json.tmp-PID, which kept the folder of a run that never started) and said
    # only "No space left on device", naming no file and so no disk.
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    with names_on_failure(path), open(tmp, "x", encoding="utf-8") as f:
        try:
            f.write(text)
            f.close()
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise


@contextlib.contextmanager
def names_on_failure(path: str | os.PathLike) -> Iterator[None]:
    """An OSError raised in the block that names no file gets `path` as its filename, then goes on: a failed write
    (a full disk, a file too large, an I/O error) names none, and "No space left on device" alone does not say
    which disk. `path` is the file or folder the user knows (a destination, not its staging folder)."""
    try:
        yield
    except OSError as e:
        if not e.filename:
            e.filename = str(path)
        raise


def gcs_holds_something(uri: str) -> bool:
    """Whether a gs:// "file" is there with content, or a gs:// "folder" has any object under it."""
    bucket_name, name = split_gcs(uri)
    client = _client()
    blob = client.bucket(bucket_name).get_blob(name) if name else None
    if blob is not None and (blob.size or 0) > 0:
        return True
    prefix = f"{name.rstrip('/')}/" if name else ""
    return any(True for _ in client.list_blobs(bucket_name, prefix=prefix, max_results=1))


def exists(uri: str) -> bool:
    if is_gcs(uri):
        bucket, name = split_gcs(uri)
        return _client().bucket(bucket).blob(name).exists()
    return Path(uri).exists()


def download_dir(uri: str, dest: Path) -> Path:
    """Copy every object under `uri` into `dest`, in parallel. Every name is checked before anything is
    written: one that would land outside `dest` raises UnsafeObjectName."""
    from google.cloud.storage import transfer_manager

    bucket_name, prefix = split_gcs(uri)
    prefix = f"{prefix}/" if prefix else ""
    client = _client()
    pairs = []
    for blob in client.list_blobs(bucket_name, prefix=prefix):
        rel = relative_object_path(blob.name, prefix)
        if rel is not None:
            pairs.append((blob, dest.joinpath(*rel.parts)))
    for _, target in pairs:
        target.parent.mkdir(parents=True, exist_ok=True)
    transfer_manager.download_many([(b, str(t)) for b, t in pairs], raise_exception=True,
                                   worker_type=transfer_manager.THREAD, max_workers=TRANSFER_WORKERS)
    return dest


def delete_prefix(uri: str) -> None:
    bucket_name, prefix = split_gcs(uri)
    client = _client()
    for blob in client.list_blobs(bucket_name, prefix=prefix.rstrip("/") + "/"):
        blob.delete()


def replaceable(dest: Path) -> bool:
    """Whether the trainer may export into the local folder `dest`: it is not there, empty, or an earlier export of
    the trainer's own (it has the marker, or the list of its files: an export cut short half-way)."""
    if not dest.exists():
        return True
    return dest.is_dir() and (not any(dest.iterdir()) or (dest / COMPLETE_MARKER).is_file()
                              or (dest / EXPORT_MANIFEST).is_file())


def not_an_export(target: str) -> list[str] | None:
    """The files of the model folder `target` when it is there and is no export of ftcli's (neither its marker nor
    the list of its files), which the export never writes into (replaceable locally, NotAnExport in a bucket); [] for
    a file in the folder's place; None where the export may write (nothing there, empty, or an export of ftcli's)."""
    if is_gcs(target):
        bucket_name, name = split_gcs(target)
        base = f"{name}/" if name else ""
        there = [b.name[len(base):] for b in _client().list_blobs(bucket_name, prefix=base)]
        if COMPLETE_MARKER in there or EXPORT_MANIFEST in there:
            return None
        return sorted(n for n in there if not n.endswith("/")) or None  # (a console folder's placeholder: no file)
    dest = Path(target)
    if replaceable(dest):
        return None
    return sorted(_files_in(dest)) if dest.is_dir() else []


def not_an_export_line(target: str, files: list[str]) -> str:
    """What the model folder `target` is, for a folder not_an_export found (`files`): the export's refusal at the
    end (_beside) and the run's at its start (checkpoint.foreign_model_dir) begin with these words."""
    if not files:
        return f"{target} is there and is not a model this trainer exported"
    return (f"{target} is not a model ftcli exported (it has neither {COMPLETE_MARKER} nor {EXPORT_MANIFEST}) and "
            f"holds {files[0]}{_more(files)}, which ftcli did not write")


def _files_in(folder: Path) -> set[str]:
    """Every file and link under `folder` (links not followed), relative, as the export lists them."""
    found = set()
    for top, dirs, names in os.walk(folder):
        for name in [*names, *(d for d in dirs if os.path.islink(os.path.join(top, d)))]:
            found.add(Path(top, name).relative_to(folder).as_posix())
    return found


def _in_the_way(dest: Path, rels: AbstractSet[str], ours: AbstractSet[str]) -> list[str]:
    """The new export's files whose place in `dest` holds something an earlier export did not write (a file or link
    of that name, or one where the file's folder would be)."""
    taken = []
    for rel in sorted(rels - ours):
        parts = PurePosixPath(rel).parts
        folders = (dest.joinpath(*parts[:i]) for i in range(1, len(parts)))
        if os.path.lexists(dest / rel) or any(os.path.lexists(f) and (f.is_symlink() or not f.is_dir())
                                              for f in folders):
            taken.append(rel)
    return taken


def _replace_in(staged: Path, dest: Path, rels: AbstractSet[str], ours: AbstractSet[str]) -> None:
    """Move the export's files from `staged` into the earlier export `dest`, file by file, and remove the earlier
    export's files it no longer has; any other file of `dest` (the user's) stays where it is. The marker goes first,
    and the list of both exports' files stands in for the earlier one's until the end: cut short anywhere, the folder
    is a torn export of ours (replaceable) that the next export finishes, never a complete-looking mix."""
    stale = sorted(rel for rel in ours - rels if os.path.lexists(dest / rel))
    both = staged / f".{EXPORT_MANIFEST}.both"
    both.write_text(_export_list_text(set(stale) | rels), encoding="utf-8")
    with contextlib.suppress(FileNotFoundError):
        (dest / COMPLETE_MARKER).unlink()
    os.replace(both, dest / EXPORT_MANIFEST)
    for rel in sorted(rels):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged / rel, dest / rel)  # a link there is replaced, never followed
    for rel in stale:
        if (dest / rel).is_dir() and not (dest / rel).is_symlink():
            continue  # a folder of the user's now where the earlier export had a file
        (dest / rel).unlink()
        for parent in list((dest / rel).parents)[:len(PurePosixPath(rel).parts) - 1]:
            try:
                parent.rmdir()  # a sub-folder of the earlier export's that is now empty
            except OSError:
                break
    os.replace(staged / EXPORT_MANIFEST, dest / EXPORT_MANIFEST)
    os.replace(staged / COMPLETE_MARKER, dest / COMPLETE_MARKER)


def _usual_modes(folder: Path) -> None:
    """Give each file the read/write bits the umask allows: safetensors' save_file writes the weights 0600, so an
    exported model.safetensors was the one file of the model that a teammate or another container could not
    read, while its config and tokenizer were 0644."""
    mask = os.umask(0)
    os.umask(mask)
    usual = 0o666 & ~mask
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink() and (mode := path.stat().st_mode & 0o7777) | usual != mode:
            path.chmod(mode | usual)


def publish_dir(staged: Path, target: str, ours_only: bool = True, copies: Mapping[str, str] | None = None) -> None:
    """Make `staged` appear at `target` whole: a rename locally, marker-last on GCS. With `ours_only` (a model) the
    folder gets the list of its files (EXPORT_MANIFEST), and a `target` that is there is written into only when it is
    an earlier export (its marker or list) or empty: only the earlier export's files are replaced or removed, and
    what else the user put there stays (one of theirs where this export has a file: refused, nothing changed, the new
    model beside it). An earlier ftcli's export, which does not list its files, is written into only when it holds no
    file this export does not write (Unlisted); a folder with files that is neither, never (NotAnExport). A
    checkpoint's step-N, in a folder that is the trainer's own, is replaced whole, torn or not (ours_only=False).
    `copies` (gs:// `target` only: upload_dir's) are files of the folder copied from objects."""
    rels = _files_in(staged) - {COMPLETE_MARKER, EXPORT_MANIFEST} | set(copies or {})
    if ours_only:
        (staged / EXPORT_MANIFEST).write_text(_export_list_text(rels), encoding="utf-8")
    if is_gcs(target):
        try:
            upload_dir(staged, target, ours_only=ours_only, copies=copies)
        except Unlisted as e:
            _beside(staged, target, copies=copies, unlisted=e.names, unreadable=e.unreadable)
        except NotAnExport as e:
            _beside(staged, target, copies=copies, foreign=e.names)
        except InTheWay as e:
            _beside(staged, target, f"{join(target, e.names[0])}" + _more(e.names), copies)
        return
    assert not copies, "copies are for a gs:// target"
    dest = Path(target)
    (staged / COMPLETE_MARKER).touch()
    _usual_modes(staged)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not dest.exists():
        staged.rename(dest)
        return
    if ours_only:
        if not replaceable(dest):
            _beside(staged, target, foreign=sorted(_files_in(dest)) if dest.is_dir() else None)
        try:
            ours, unreadable = _read_export_list((dest / EXPORT_MANIFEST).read_bytes())
        except FileNotFoundError:
            ours, unreadable = None, None
        except OSError as e:
            ours, unreadable = None, e.strerror or type(e).__name__
        if ours is not None and (taken := _in_the_way(dest, rels, ours)):
            _beside(staged, target, f"{dest / taken[0]}" + _more(taken))
        if ours is None and (left := sorted(_files_in(dest) - rels - {COMPLETE_MARKER, EXPORT_MANIFEST})):
            _beside(staged, target, unlisted=left, unreadable=unreadable)
        # (an earlier ftcli's export, with no list, and no file this export does not write: they are the ones it wrote)
        _replace_in(staged, dest, rels, ours if ours is not None else rels)
        shutil.rmtree(staged, ignore_errors=True)  # its empty folders
        return
    # A step-N goes into a staging folder of its own first (a crash leaves it where the next start cleans it up),
    # never a fixed name that could be someone's.
    aside = staging_dir(dest.parent, dest.name)
    dest.rename(aside / dest.name)
    staged.rename(dest)
    shutil.rmtree(aside)


def _more(names: list[str]) -> str:
    return f" (and {len(names) - 1} more)" if len(names) > 1 else ""


def _beside(staged: Path, target: str, theirs: str | None = None, copies: Mapping[str, str] | None = None,
            unlisted: list[str] | None = None, foreign: list[str] | None = None,
            unreadable: str | None = None) -> NoReturn:
    """Refuse to export into `target`: the new model goes to `target-TIME` beside it, and the error says so.
    `theirs`: the user's file where this export has one; `unlisted`: an earlier ftcli's export's files (Unlisted),
    with `unreadable` why its list that is there cannot be read; `foreign`: the files of a folder that is no export
    (NotAnExport)."""
    import datetime as dt

    from ftcli_trainer.errors import TrainerError

    beside = f"{target.rstrip('/')}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"
    if is_gcs(beside):
        try:
            upload_dir(staged, beside, ours_only=True, copies=copies)
        except SourceGone:
            delete_prefix(beside)  # (this run's, begun a moment ago: the export made again goes to a new one)
            raise
    else:
        staged.rename(beside)
    if unlisted:
        # (an unreadable list was said to be none: "does not list its files", or in a bucket without the marker "has
        # neither _COMPLETE nor ftcli_files.json")
        what = (f"{join(target, EXPORT_MANIFEST)} is unreadable ({unreadable}), so which files of {target} an earlier "
                f"export wrote is not known, and {target}" if unreadable else
                f"{target} is an earlier ftcli's export, which does not list its files ({EXPORT_MANIFEST}), and")
        raise TrainerError(f"{what} holds {unlisted[0]}{_more(unlisted)}, which this export does not write: left over "
                           "from that export (loaded with the new model) or yours, they cannot be told apart, so "
                           f"{target} is left as it is, and the new model is in {beside}",
                           hint=f"keep what is yours from {target}, then put {beside} in its place")
    if foreign:
        # (it was called "an earlier ftcli's export" in a bucket, where it held only files of the user's)
        raise TrainerError(f"{not_an_export_line(target, foreign)}: {target} is left as it is, and the new model is "
                           f"in {beside}", hint=f"keep what is yours from {target}, then put {beside} in its place")
    if theirs is None:
        raise TrainerError(f"{not_an_export_line(target, [])}: it is left as it is, and the new model is in {beside}")
    raise TrainerError(f"{theirs} is not from the earlier export, and this one has a file there: {target} is left as "
                       f"it is, and the new model is in {beside}")
