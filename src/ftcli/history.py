"""A short local history of submitted jobs, so `ftcli logs 3` and `ftcli logs last` work.

An SQLite database, `<user state dir>/ftcli/history.sqlite3` (FTCLI_STATE_DIR overrides the folder).
Several `ftcli train` may run at once: a short id is allocated inside an IMMEDIATE transaction, so two
processes never get the same number, and SQLite's journal makes a crash mid-write lose only that record.
A `history.jsonl` written by older versions is imported once, keeping its numbers; the file is left as it was.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from ftcli.errors import FtcliError, UsageError, reason
from ftcli.values import (
    JOB_FORMS,
    JobName,
    TuningName,
    console_url_problem,
    console_url_says_kind,
    from_console_url,
    resource_name_problem,
)

DB_NAME = "history.sqlite3"
OLD_JSONL = "history.jsonl"
COLUMNS = ("n", "name", "display_name")
SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    n INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    display_name TEXT NOT NULL DEFAULT '',
    extra TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS jobs_by_name ON jobs (name);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
BUSY_TIMEOUT_S = 30.0  # another ftcli holding the write lock commits in milliseconds


class HistoryError(FtcliError):
    """The state folder cannot hold the history."""


def _dir() -> Path:
    from ftcli.settings import env_path

    if path := env_path("FTCLI_STATE_DIR"):
        return path
    from platformdirs import user_state_dir

    return Path(user_state_dir("ftcli"))


def db_path() -> Path:
    return _dir() / DB_NAME


def _connect() -> sqlite3.Connection:
    """Open (creating if needed) the database, migrating an old history.jsonl the first time."""
    path = db_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        raise sqlite3.OperationalError(f"{path} is a folder")
    # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE ... COMMIT) below
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        db.executescript(SCHEMA)
        if db.execute("SELECT 1 FROM meta WHERE key = 'jsonl_migrated'").fetchone() is None:
            _migrate(db, path.parent / OLD_JSONL)
    except BaseException:
        db.close()
        raise
    return db


def _old_records(path: Path) -> list[dict]:
    """The usable objects of an old history.jsonl: torn lines, non-objects and nameless ones are skipped."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            out.append(obj)
    return out


def _migrate(db: sqlite3.Connection, old: Path) -> None:
    db.execute("BEGIN IMMEDIATE")
    try:
        # Re-checked under the write lock: another process may have migrated meanwhile.
        if db.execute("SELECT 1 FROM meta WHERE key = 'jsonl_migrated'").fetchone() is None:
            later = []
            for rec in _old_records(old):
                n = rec.get("n")
                extra = {k: v for k, v in rec.items() if k not in COLUMNS}
                row = (rec["name"], str(rec.get("display_name") or ""), json.dumps(extra))
                taken = isinstance(n, int) and n > 0 and db.execute("SELECT 1 FROM jobs WHERE n = ?", (n,)).fetchone()
                if isinstance(n, int) and n > 0 and not taken:
                    db.execute("INSERT INTO jobs (n, name, display_name, extra) VALUES (?, ?, ?, ?)", (n, *row))
                else:
                    later.append(row)  # a duplicate number from the old race: the first one keeps it
            for row in later:
                db.execute("INSERT INTO jobs (name, display_name, extra) VALUES (?, ?, ?)", row)
            db.execute("INSERT INTO meta (key, value) VALUES ('jsonl_migrated', ?)", (str(old),))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _fail(e: BaseException) -> HistoryError:
    return HistoryError(f"cannot write ftcli's job history at {db_path()}: {reason(e)}",
                        hint="set FTCLI_STATE_DIR to a writable folder")


def ensure_writable() -> None:
    """Fail now, before anything is uploaded or created, when the history cannot be written."""
    try:
        with closing(_connect()) as db:
            db.execute("BEGIN IMMEDIATE")  # takes the write lock: a read-only file or folder fails here
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('checked', datetime('now'))")
            db.execute("COMMIT")
    except (OSError, sqlite3.Error) as e:
        raise _fail(e) from None


def _row(n: int, name: str, display_name: str, extra: str) -> dict:
    try:
        more = json.loads(extra)
    except json.JSONDecodeError:
        more = {}
    return {"n": n, "name": name, "display_name": display_name, **(more if isinstance(more, dict) else {})}


def entries() -> list[dict]:
    """Every recorded submission, oldest short id first."""
    if not db_path().exists() and not (db_path().parent / OLD_JSONL).exists():
        return []  # nothing to read: do not create the state folder just to look
    try:
        with closing(_connect()) as db:
            return [_row(*r) for r in db.execute("SELECT n, name, display_name, extra FROM jobs ORDER BY n")]
    except (OSError, sqlite3.Error) as e:
        raise HistoryError(f"cannot read ftcli's job history at {db_path()}: {reason(e)}",
                           hint="set FTCLI_STATE_DIR to a readable folder, or use numeric job ids") from None


def record(name: str, display_name: str, **extra: Any) -> int:
    """Save a submission; return its short id. Called once the job exists, so a failure still names it."""
    try:
        with closing(_connect()) as db:
            db.execute("BEGIN IMMEDIATE")  # the number is allocated and used under one write lock
            try:
                (n,) = db.execute("SELECT COALESCE(MAX(n), 0) + 1 FROM jobs").fetchone()
                db.execute("INSERT INTO jobs (n, name, display_name, extra) VALUES (?, ?, ?, ?)",
                           (n, name, display_name, json.dumps(extra, default=str)))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return n
    except (OSError, sqlite3.Error) as e:
        where = ""
        if extra.get("project") and extra.get("region"):
            where = f" --project {extra['project']} --region {extra['region']}"
        raise HistoryError(
            f"job {name} was created, but its short id could not be saved ({db_path()}: {reason(e)})",
            hint=f"follow it with: ftcli logs {job_id(name)}{where}; set FTCLI_STATE_DIR to a writable folder",
        ) from None


def _key(name: str | JobName | TuningName) -> tuple[str, str] | None:
    """Region and numeric id: the same job whether its name carries the project id or the project number (Vertex
    answers with the number). A tuning job's id shares the space of CustomJob ids."""
    if isinstance(name, JobName | TuningName):
        return name.region, name.id
    for kind in (JobName, TuningName):
        try:
            parsed = kind.parse(name)
        except ValueError:
            continue
        return parsed.region, parsed.id
    return None


def short_ids() -> dict[tuple[str, str], int]:
    """(region, job id) -> short id, for every recorded job (the newest record wins)."""
    out: dict[tuple[str, str], int] = {}
    for e in entries():
        key = _key(e.get("name", ""))
        if key is not None:
            out[key] = e["n"]
    return out


def short_id(name: str | JobName | TuningName) -> int | None:
    key = _key(name)
    return short_ids().get(key) if key is not None else None


def job_id(name: str) -> str:
    """The numeric id: the last segment of projects/P/locations/R/customJobs/ID (or hyperparameterTuningJobs/ID:
    `ftcli tune` records its tuning job, and `ftcli logs ID` takes either)."""
    key = _key(name)
    if key is None:
        raise ValueError(f"not a job's resource name: {name!r}")
    return key[1]


SHORT_ID_DIGITS = 8  # a short id (#3) has at most this many digits; a Vertex job id (19 digits) has more


def is_short_id(ref: str) -> bool:
    """`3`: this machine's third submission, not a Vertex job id."""
    return ref.isdigit() and len(ref) <= SHORT_ID_DIGITS


def is_job_id(ref: str) -> bool:
    """A numeric Vertex job id (it needs a project and a region to name a job)."""
    return ref.isdigit() and len(ref) > SHORT_ID_DIGITS


def folder_over_job(ref: str) -> str | None:
    """Where a command takes a folder or a job (predict, report) and `ref` is both a folder here and a job reference
    (`last`, a short id): the folder is taken, and this says so."""
    ref = ref.strip()
    if not ((ref == "last" or is_short_id(ref)) and Path(ref).is_dir()):
        return None
    used = f"'{ref}' is a folder here, so that folder is used"
    # The job it would have meant, by its resource name: the note said "projects/P/locations/R/customJobs/ID" for
    # any job, which for a tuning job (ftcli tune's) names no job.
    try:
        name = resolve(ref)
    except FtcliError:  # no such job here, or no readable history: the general words
        return f"{used}; for a job, give its numeric id or resource name (ftcli jobs list)"
    return f"{used}; for job #{short_id(name)}, give {name}"


def resolve(ref: str, project: str | None = None, region: str | None = None, *, folder_too: bool = False) -> str:
    """A job reference in any of the forms JOB_FORMS says (short id, `last`, numeric id, resource name, console URL,
    display name) -> the full resource name. `folder_too`: the command takes a folder as well (predict, report), so a
    reference that is neither is said to be neither."""
    ref = ref.strip()
    if JobName.is_full(ref) or TuningName.is_full(ref):
        return ref
    if (shown := from_console_url(ref)) is not None:  # the console URL ftcli (or Google's SDK) prints for a job
        # One without an earlier ftcli's page after the id names either kind of job (both are at training/ID): this
        # machine's history knows which for the ones it submitted (by region and id); jobs.resolve_any asks Vertex
        # for the others.
        if not console_url_says_kind(ref) and (n := short_id(shown)) is not None:
            return resolve(str(n))
        return shown.full
    # A console URL or resource name that misses a part says which: it was "not a job reference" (the URL), or a
    # hint without the console URL or a tuning job's name, as if those were not taken.
    if (wrong := console_url_problem(ref)) is not None:
        raise UsageError(f"{ref!r} is not a job's console URL: {wrong}",
                         hint=f"a job's page is {JobName('PROJECT', 'REGION', 'ID').console_url}, as ftcli train and "
                              "ftcli jobs describe show it")
    if ref.startswith("projects/"):
        raise UsageError(f"{ref!r} is not a job's resource name: {resource_name_problem(ref)}",
                         hint=f"give a job as: {JOB_FORMS}")
    if ref == "last":
        hist = entries()
        if not hist:
            raise UsageError("no jobs submitted from this machine yet", hint="ftcli jobs list shows the project's jobs")
        return hist[-1]["name"]
    if is_short_id(ref):
        for e in entries():
            if e.get("n") == int(ref):
                return e["name"]
        raise UsageError(f"no job #{ref} in this machine's history",
                         hint="use `ftcli jobs list`, the numeric job id, or the full resource name")
    if is_job_id(ref):
        if not (project and region):
            raise UsageError(f"job {ref}: a numeric id needs --project and --region (or a full resource name)")
        return f"projects/{project}/locations/{region}/customJobs/{ref}"
    # The display name `ftcli train` prints ("submitted job #3 ftcli-imdb-20261128-..."), and the console shows: it
    # was "not a job reference". Only this machine's jobs: Vertex does not keep display names unique.
    named = [e for e in entries() if e.get("display_name") == ref]
    if len(named) == 1:
        return named[0]["name"]
    if named:
        raise UsageError(f"{len(named)} jobs submitted from this machine are named {ref!r}",
                         hint="give one's short id: " + ", ".join(f"#{e['n']}" for e in named))
    if folder_too:  # predict, report: a mistyped path or name is said as one
        what = f"{ref!r} is a file, not a folder" if Path(ref).expanduser().exists() else f"{ref!r}: no such folder"
        raise UsageError(f"{what}, and not a job reference", hint=f"check the path, or give a job as: {JOB_FORMS}")
    raise UsageError(f"{ref!r} is not a job reference", hint=f"give a job as: {JOB_FORMS}")
