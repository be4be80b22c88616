"""A lease on a gs:// checkpoint folder: what the flock on a local folder's `.run.lock` is (checkpoint.lock), for a
folder in a bucket, which runs on different machines share.

Two runs given one gs:// output folder (two `ftcli local --output-dir gs://...`, or one pointed at a Vertex job's
folder while the job runs) both trained, resumed each other's checkpoints and exported into the same folder. Now the
run that writes a folder holds the object `.run.lock` in it, which names its holder (host, process, Vertex job, start)
and how long it holds without renewing it:

- it is created only where there is none: an upload with ifGenerationMatch=0 (the JSON API's ifGenerationMatch:
  "Setting to 0 makes the operation succeed only if there are no live versions of the object", as its objects.delete
  reference words it, https://cloud.google.com/workflows/docs/reference/googleapis/storage/v1/objects/delete), which
  fails with 412 Precondition Failed otherwise ("Request preconditions",
  https://cloud.google.com/storage/docs/request-preconditions?hl=zh-cn; both read 2026-11-27);
- the holder renews it every RENEW_S (re-written with ifGenerationMatch=<its generation>: a 412 means someone took it
  over, and the holder stops writing), and deletes it at its end (generation-matched too: never someone else's);
- a lock not renewed for its holder's TTL (by the bucket's own clock: its `updated` time against that of an object
  written just now, never this machine's clock) is a crashed run's, and may be taken over, generation-matched: of two
  takers, one wins;
- a Vertex job's restarted worker (the same CLOUD_ML_JOB_ID: "The name given to the training job", google-cloud-
  aiplatform's aiplatform/training_utils/environment_variables.py, read 2026-11-27) takes its own job's lock back at
  once. Only rank 0 holds it (task.run).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ftcli_trainer import storage
from ftcli_trainer.errors import TrainerError

if TYPE_CHECKING:
    from google.cloud.storage import Blob

log = logging.getLogger("ftcli_trainer")
LOCK = ".run.lock"
TTL_S = 300.0  # a lock not renewed for this long is a crashed run's
RENEW_S = 60.0  # a quarter of it: a few missed renewals (a slow network) do not lose it
CHECK_S = 5.0  # before a write, the lock is renewed unless that was done this recently (or a quarter of TTL_S)


def _job(env: Mapping[str, str] = os.environ) -> str | None:
    """This process's Vertex job (and tuning trial), or None outside Vertex."""
    job = env.get("CLOUD_ML_JOB_ID")
    if not job:
        return None
    trial = env.get("CLOUD_ML_TRIAL_ID")
    return f"{job}/trial {trial}" if trial else job


def _who(info: dict) -> str:
    parts = []
    if info.get("job"):
        parts.append(f"Vertex job {info['job']}")
    parts.append(f"host {info.get('host') or '?'}, process {info.get('pid') or '?'}")
    if info.get("started"):
        parts.append(f"since {info['started']}")
    return ", ".join(parts)


@dataclass(frozen=True)
class _Found:
    info: dict
    generation: int
    updated: dt.datetime


def _uri(root: str) -> str:
    return storage.join(root, LOCK)


def _read(root: str) -> _Found | None:
    bucket, name = storage.split_gcs(_uri(root))
    blob = storage._client().bucket(bucket).get_blob(name)
    if blob is None:
        return None
    generation, updated = int(blob.generation), blob.updated
    try:
        info = json.loads(blob.download_as_bytes(if_generation_match=generation))
    except Exception:  # noqa: BLE001 - replaced meanwhile, or not ours to read: a holder all the same
        info = {}
    return _Found(info if isinstance(info, dict) else {}, generation, updated)


def _bucket_now(root: str) -> dt.datetime:
    """The bucket's clock now: the `updated` time of an object written for it (and deleted), beside the lock."""
    bucket_name, name = storage.split_gcs(storage.join(root, f"{LOCK}.clock-{secrets.token_hex(4)}"))
    blob = storage._client().bucket(bucket_name).blob(name)
    blob.upload_from_string(b"", if_generation_match=0)
    now = blob.updated
    try:
        blob.delete(if_generation_match=blob.generation)
    except Exception:  # noqa: BLE001 - a leftover empty object is harmless
        pass
    return now


def _left_s(found: _Found, now: dt.datetime) -> float:
    """Seconds until the lock expires unless renewed (negative: expired)."""
    ttl = found.info.get("ttl_s")
    ttl = float(ttl) if isinstance(ttl, int | float) and ttl > 0 else TTL_S
    return ttl - (now - found.updated).total_seconds()


def busy_line(root: str, found: _Found, left_s: float) -> str:
    return (f"{root} is in use by another run ({_who(found.info)}): wait for it to end, or give another "
            f"--output-dir (if that run is gone, its lock {_uri(root)} expires in {max(0, round(left_s))} s "
            "unless renewed; delete it only when you are sure)")


def holder(root: str) -> str | None:
    """Why `root` (gs://) cannot be written now: a live run of another job holds its lock. None when free, expired,
    or this Vertex job's own (a restarted worker takes it back)."""
    found = _read(root)
    if found is None or (_job() and found.info.get("job") == _job()):
        return None
    left = _left_s(found, _bucket_now(root))
    return busy_line(root, found, left) if left > 0 else None


class Lease:
    """This process's lock on the gs:// folder `root`: acquire(), then check() before each write, release() at the
    end. A thread renews it meanwhile."""

    def __init__(self, root: str):
        self.root = root
        self.info = {"host": socket.gethostname(), "pid": os.getpid(), "job": _job(),
                     "started": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
                     "ttl_s": TTL_S, "token": secrets.token_hex(8)}
        self.generation: int | None = None
        self.lost: str | None = None
        self._renewed = 0.0
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _blob(self) -> Blob:
        bucket, name = storage.split_gcs(_uri(self.root))
        return storage._client().bucket(bucket).blob(name)

    def _write(self, if_generation_match: int) -> None:
        blob = self._blob()
        blob.upload_from_string(json.dumps(self.info, sort_keys=True).encode(), content_type="application/json",
                                if_generation_match=if_generation_match)
        self.generation = int(blob.generation)
        self._renewed = time.monotonic()

    def acquire(self, tries: int = 5) -> None:
        from google.api_core.exceptions import PreconditionFailed

        for _ in range(tries):
            try:
                self._write(0)
                break
            except PreconditionFailed:
                pass
            found = _read(self.root)
            if found is None:
                continue  # released meanwhile: create it again
            if found.info.get("token") == self.info["token"]:  # a retried create whose first try had landed
                self.generation, self._renewed = found.generation, time.monotonic()
                break
            if self.info["job"] and found.info.get("job") == self.info["job"]:
                why = "this Vertex job's earlier worker"
            else:
                left = _left_s(found, _bucket_now(self.root))
                if left > 0:
                    raise TrainerError(busy_line(self.root, found, left))
                why = f"a run that stopped renewing it {round(-left)} s ago"
            try:
                self._write(found.generation)  # of two takers, one wins; the other looks again
            except PreconditionFailed:
                continue
            log.warning("took over the lock on %s from %s (%s)", self.root, _who(found.info), why)
            break
        else:
            raise TrainerError(f"{self.root} is in use by another run, which keeps changing its lock {_uri(self.root)}"
                               ": wait for it to end, or give another --output-dir")
        self._thread = threading.Thread(target=self._renew_loop, name="ftcli-lease", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        with self._mutex:
            if self.lost or self.generation is None:
                return
            try:
                self._write(self.generation)
            except (PreconditionFailed, NotFound):
                found = _read(self.root)
                if found is not None and found.info.get("token") == self.info["token"]:
                    self.generation, self._renewed = found.generation, time.monotonic()  # our write did land
                    return
                who = _who(found.info) if found is not None else "its lock was deleted"
                self.lost = (f"this run lost its lock on {self.root} to another run ({who}), not renewed in time: it "
                             "stops without writing more there; give another --output-dir to go on")

    def _renew_loop(self) -> None:
        while not self._stop.wait(RENEW_S):
            try:
                self._renew()
            except Exception as e:  # noqa: BLE001 - the network: the next renewal tries again
                log.warning("could not renew the lock on %s (%s); trying again in %d s", self.root,
                            storage.error_line(e), RENEW_S)
            if self.lost:
                return

    def check(self) -> None:
        """Before writing into the folder: raise TrainerError when another run holds it now."""
        # Renewed this recently, it cannot have expired (a quarter of its TTL): no request before every write.
        if not self.lost and time.monotonic() - self._renewed >= min(CHECK_S, TTL_S / 4):
            try:
                self._renew()
            except Exception as e:  # noqa: BLE001 - the network: still ours until another run takes it
                log.warning("could not renew the lock on %s (%s)", self.root, storage.error_line(e))
        if self.lost:
            raise TrainerError(self.lost)

    def release(self) -> None:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._mutex:
            if self.lost or self.generation is None:
                return
            try:
                self._blob().delete(if_generation_match=self.generation)  # never another run's
            except (PreconditionFailed, NotFound):
                pass
            except Exception as e:  # noqa: BLE001 - it expires by itself
                log.warning("could not remove the lock %s (%s); it expires in %d s", _uri(self.root),
                            type(e).__name__, TTL_S)
            self.generation = None
