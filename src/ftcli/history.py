"""A short local history of submitted jobs, so `ftcli logs 3` and `ftcli logs last` work.

One JSON line per submission in `<user state dir>/ftcli/history.jsonl` (FTCLI_STATE_DIR overrides).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ftcli.errors import UsageError

FULL_NAME_RE = re.compile(r"^projects/[^/]+/locations/[^/]+/customJobs/\d+$")


def _path() -> Path:
    if os.environ.get("FTCLI_STATE_DIR"):
        return Path(os.environ["FTCLI_STATE_DIR"]) / "history.jsonl"
    from platformdirs import user_state_dir

    return Path(user_state_dir("ftcli")) / "history.jsonl"


def entries() -> list[dict]:
    path = _path()
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn last line after a crash: skip it, keep the rest
    return out


def record(name: str, display_name: str, **extra) -> int:
    """Append a submission; return its short id."""
    path = _path()
    path.parent.mkdir(parents=True, exist_ok=True)
    n = max((e.get("n", 0) for e in entries()), default=0) + 1
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"n": n, "name": name, "display_name": display_name, **extra}) + "\n")
    return n


def short_id(name: str) -> int | None:
    for e in reversed(entries()):
        if e.get("name") == name:
            return e.get("n")
    return None


def job_id(name: str) -> str:
    """The numeric id: the last segment of projects/P/locations/R/customJobs/ID."""
    return name.rsplit("/", 1)[-1]


def resolve(ref: str, project: str | None = None, region: str | None = None) -> str:
    """A short id (3), `last`, a numeric job id or a full resource name -> the full resource name."""
    ref = ref.strip()
    if FULL_NAME_RE.match(ref):
        return ref
    hist = entries()
    if ref == "last":
        if not hist:
            raise UsageError("no jobs submitted from this machine yet", hint="ftcli jobs list shows the project's jobs")
        return hist[-1]["name"]
    if ref.isdigit() and len(ref) < 9:
        for e in hist:
            if e.get("n") == int(ref):
                return e["name"]
        raise UsageError(f"no job #{ref} in this machine's history",
                         hint="use `ftcli jobs list`, the numeric job id, or the full resource name")
    if ref.isdigit():
        if not (project and region):
            raise UsageError(f"job {ref}: a numeric id needs --project and --region (or a full resource name)")
        return f"projects/{project}/locations/{region}/customJobs/{ref}"
    raise UsageError(f"{ref!r} is not a job reference",
                     hint="use a short id (3), `last`, a numeric job id, or projects/P/locations/R/customJobs/ID")
