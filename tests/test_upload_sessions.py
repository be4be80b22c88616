"""The store of unfinished upload sessions: private to its owner, keyed by the object and its bytes, held by the
upload under way, and never a reason for an upload to fail."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time

import pytest

from ftcli import upload_sessions as sessions

URI, SIZE, CRC = "gs://b/ftcli/data/abc/big.csv", 3_000_000_000, "AAAAAA=="


def _set(**fields) -> None:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(sessions.db_path())) as db:
        for name, value in fields.items():
            db.execute(f"UPDATE sessions SET {name} = ?", (value,))
        db.commit()


def test_the_store_is_readable_by_its_owner_only_whatever_the_umask(monkeypatch, tmp_path):
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    old = os.umask(0)
    try:
        sessions.hold(URI, SIZE, CRC, "https://storage.googleapis.com/upload/x?upload_id=secret")
    finally:
        os.umask(old)
    assert stat.S_IMODE(sessions.db_path().stat().st_mode) == 0o600
    os.chmod(sessions.db_path(), 0o644)  # one an older tool left readable is narrowed
    sessions.release(URI, SIZE)
    assert stat.S_IMODE(sessions.db_path().stat().st_mode) == 0o600


def test_a_session_is_taken_up_only_for_the_same_bytes_and_within_its_week(monkeypatch, tmp_path):
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    sessions.hold(URI, SIZE, CRC, "URL")
    sessions.release(URI, SIZE)
    assert sessions.claim(URI, SIZE + 1, CRC) is None  # another size
    assert sessions.claim(URI, SIZE, CRC) == "URL"
    sessions.release(URI, SIZE)
    _set(started=time.time() - sessions.LIFETIME_S - 1)
    assert sessions.claim(URI, SIZE, CRC) is None  # older than a week: Cloud Storage has let it go
    sessions.hold(URI, SIZE, CRC, "URL")
    sessions.release(URI, SIZE)
    assert sessions.claim(URI, SIZE, "BBBBBB==") is None  # other bytes: the session declared the old ones
    assert sessions.claim(URI, SIZE, CRC) is None  # and it is gone


def test_a_session_held_by_a_running_upload_is_left_to_it_and_one_whose_process_ended_is_not(monkeypatch, tmp_path):
    import socket

    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    sessions.hold(URI, SIZE, CRC, "URL")
    _set(holder=f"{socket.gethostname()} {os.getpid()} 1")  # another thread of this process, under way
    assert sessions.claim(URI, SIZE, CRC) == sessions.BUSY
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _set(holder=f"{socket.gethostname()} {int(ended.stdout)} 1")  # killed before it could let go
    if os.name == "nt":
        pytest.skip("Windows: a holder's process is not looked up")
    assert sessions.claim(URI, SIZE, CRC) == "URL"


def test_a_store_that_cannot_be_written_is_an_empty_one(monkeypatch, tmp_path):
    (tmp_path / "state").write_text("a file where the folder should be")
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    sessions.hold(URI, SIZE, CRC, "URL")
    sessions.touch(URI, SIZE)
    sessions.release(URI, SIZE)
    sessions.forget(URI, SIZE)
    assert sessions.claim(URI, SIZE, CRC) is None


def test_sessions_past_their_week_are_dropped_whatever_file_they_were_for(monkeypatch, tmp_path):
    # A session whose file was edited afterwards (a new gs:// name) was never claimed again, and its URL stayed in the
    # store for good.
    import sqlite3
    from contextlib import closing

    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    sessions.hold(URI, SIZE, CRC, "URL")
    sessions.release(URI, SIZE)
    _set(started=time.time() - sessions.LIFETIME_S - 1)
    sessions.hold("gs://b/ftcli/data/def/big.csv", SIZE, CRC, "URL2")
    sessions.release("gs://b/ftcli/data/def/big.csv", SIZE)
    assert sessions.claim("gs://b/ftcli/data/xyz/other.csv", 10, CRC) is None
    with closing(sqlite3.connect(sessions.db_path())) as db:
        assert db.execute("SELECT uri FROM sessions").fetchall() == [("gs://b/ftcli/data/def/big.csv",)]


def test_a_session_let_go_of_is_taken_up_while_the_process_that_held_it_runs_on(monkeypatch, tmp_path):
    # An upload stopped part way (an error, Ctrl-C caught by a caller that goes on: ftcli used from Python, a tune
    # that submits the next trial) lets go of its session: the next upload of the file resumes it, instead of being
    # told it is busy and sending the whole file again.
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    code = ("import sys; from ftcli import upload_sessions as s; "
            f"s.hold({URI!r}, {SIZE}, {CRC!r}, 'URL'); s.release({URI!r}, {SIZE}); print('let go', flush=True); "
            "sys.stdin.read()")
    other = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "FTCLI_STATE_DIR": str(tmp_path / "state")})
    try:
        assert other.stdout.readline() == "let go\n"
        assert sessions.claim(URI, SIZE, CRC) == "URL"
    finally:
        other.communicate("")


@pytest.mark.parametrize("loose", [0o604, 0o640, 0o601], ids=lambda mode: f"{mode:o}")
def test_a_store_readable_by_anyone_but_its_owner_is_narrowed(monkeypatch, tmp_path, loose):
    # Each session URL in it is a write credential for its object: a store only others (not the group) could read
    # was left so.
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    sessions.hold(URI, SIZE, CRC, "https://storage.googleapis.com/upload/x?upload_id=secret")
    os.chmod(sessions.db_path(), loose)
    sessions.release(URI, SIZE)
    assert stat.S_IMODE(sessions.db_path().stat().st_mode) == 0o600
