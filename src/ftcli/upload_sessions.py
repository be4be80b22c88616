"""The resumable upload sessions of big uploads that a run began and did not finish, so the next run sends the rest.

An SQLite database, `<user state dir>/ftcli/uploads.sqlite3` (the history's folder: FTCLI_STATE_DIR moves both),
readable by its owner only (0600): a session URL is all an upload needs ("This process allows untrusted clients to
upload to an access-controlled bucket", google-cloud-storage 3.17, Blob.create_resumable_upload_session, read
2026-11-27), which is also why error lines print it as upload_id=REDACTED. A session
is kept under the gs:// URI, which names the content (ftcli's objects are content-addressed), and the size; it is
resumed only for a local file with the same CRC32C, the checksum the session's object was declared with.

An upload under way holds its session (`holder`, renewed at each chunk): another ftcli sending the same file at the
same time begins a session of its own instead of writing into that one. A holder that stopped (Ctrl-C, an error)
lets go of it; one that ended without (a closed terminal, kill -9) is taken as gone once its process is (on Windows,
once it has been silent for HOLD_S).

Remembering is a convenience: a store that cannot be read or written is taken as an empty one, and never fails an
upload. Sessions last a week ("A resumable upload must be completed within a week of being initiated", "Resumable
uploads", https://cloud.google.com/storage/docs/resumable-uploads, read 2026-11-27): older ones are not asked about.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

DB_NAME = "uploads.sqlite3"
LIFETIME_S = 7 * 24 * 3600
HOLD_S = 15 * 60  # longer than one chunk with all its retries (storage.py: 300 s a chunk)
SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    uri TEXT NOT NULL,
    size INTEGER NOT NULL,
    crc32c TEXT NOT NULL,
    url TEXT NOT NULL,
    started REAL NOT NULL,
    holder TEXT NOT NULL DEFAULT '',
    touched REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (uri, size)
);
"""
BUSY_TIMEOUT_S = 10.0
BUSY = "busy"  # claim(): another upload under way holds the session


def db_path() -> Path:
    from ftcli.history import db_path as history_path

    return history_path().parent / DB_NAME


def _me() -> str:
    return f"{socket.gethostname()} {os.getpid()} {threading.get_ident()}"


def _may_run(holder: str) -> bool:
    """False when the holder is a process of this machine that has ended (a closed terminal's SIGHUP, kill -9: no
    chance to let go); True when it runs, or where that cannot be told (another machine, Windows)."""
    host, _, rest = holder.partition(" ")
    pid = rest.split(" ")[0]
    if os.name == "nt" or host != socket.gethostname() or not pid.isdigit():
        return True
    if int(pid) == os.getpid():
        return True  # another thread of this process
    try:
        os.kill(int(pid), 0)  # signal 0: only asks whether it exists
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _connect() -> sqlite3.Connection:
    path = db_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Created 0600 before SQLite opens it (SQLite gives its journal the database file's mode); an older, looser file
    # is narrowed.
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    if os.name != "nt" and path.stat().st_mode & 0o077:
        os.chmod(path, 0o600)
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        db.executescript(SCHEMA)
    except BaseException:
        db.close()
        raise
    return db


def claim(uri: str, size: int, crc32c: str) -> str | None:
    """The URL of the session an earlier run began for these bytes, now held by this upload; None when there is none
    worth asking about; BUSY when another upload under way holds it (this one then keeps its own session to itself)."""
    now = time.time()
    try:
        with closing(_connect()) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                # Sessions Cloud Storage has let go of (a week old) are of no use to any upload, and their URLs are not
                # kept longer than needed: one whose file was edited since (a new content address) or whose object
                # another machine finished was never asked about again, and stayed.
                db.execute("DELETE FROM sessions WHERE started <= ?", (now - LIFETIME_S,))
                row = db.execute("SELECT url, crc32c, started, holder, touched FROM sessions "
                                 "WHERE uri = ? AND size = ?", (uri, size)).fetchone()
                if row is None:
                    db.execute("COMMIT")
                    return None
                url, kept_crc32c, started, holder, touched = row
                if holder not in ("", _me()) and now - touched < HOLD_S and _may_run(holder):
                    db.execute("COMMIT")
                    return BUSY
                if kept_crc32c != crc32c or now - started >= LIFETIME_S:
                    db.execute("DELETE FROM sessions WHERE uri = ? AND size = ?", (uri, size))
                    url = None
                else:
                    db.execute("UPDATE sessions SET holder = ?, touched = ? WHERE uri = ? AND size = ?",
                               (_me(), now, uri, size))
                db.execute("COMMIT")
                return url
            except BaseException:
                db.execute("ROLLBACK")
                raise
    except (OSError, sqlite3.Error):
        return None


def _write(sql: str, args: tuple) -> None:
    try:
        with closing(_connect()) as db:
            db.execute(sql, args)
    except (OSError, sqlite3.Error):
        pass


def hold(uri: str, size: int, crc32c: str, url: str) -> None:
    """Remember a session this upload just began, held by it."""
    now = time.time()
    _write("INSERT OR REPLACE INTO sessions (uri, size, crc32c, url, started, holder, touched) "
           "VALUES (?, ?, ?, ?, ?, ?, ?)", (uri, size, crc32c, url, now, _me(), now))


def touch(uri: str, size: int) -> None:
    """This upload still holds its session (after each chunk)."""
    _write("UPDATE sessions SET touched = ? WHERE uri = ? AND size = ? AND holder = ?",
           (time.time(), uri, size, _me()))


def release(uri: str, size: int) -> None:
    """This upload stopped before its end: the next run may take the session up."""
    _write("UPDATE sessions SET holder = '' WHERE uri = ? AND size = ? AND holder = ?", (uri, size, _me()))


def forget(uri: str, size: int) -> None:
    """This upload's session ended (the object is made, or the session is gone)."""
    if db_path().exists():
        _write("DELETE FROM sessions WHERE uri = ? AND size = ? AND holder = ?", (uri, size, _me()))
