"""Cloud Storage gateway: check the bucket, upload create-only-if-absent, list, read and download objects.

Transfers report their bytes through a `progress(done, total)` callback the caller passes in (the command draws
the bar); retries, and an upload resumed where an earlier run stopped, are reported through `notify`. Objects come
back as (name, size) pairs.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, NamedTuple, TypeVar

from ftcli.errors import FtcliError
from ftcli.gcp import CallContext, Notify, account_problem, guard, retry_notice
from ftcli.signals import INTERRUPTS
from ftcli_trainer.storage import size_text
from ftcli_trainer.storage import split_gcs as split_uri

if TYPE_CHECKING:
    from google.api_core.retry import Retry
    from google.auth.credentials import Credentials
    from google.auth.transport.requests import AuthorizedSession
    from requests import Response

TRANSFER_WORKERS = 8
# A file over this goes up in a resumable session, in chunks of this size: Google's clients use 8 MiB (gsutil's
# resumable_threshold, "Resumable uploads", https://cloud.google.com/storage/docs/resumable-uploads, read 2026-11-27),
# and a chunk must be a multiple of 256 KiB (google-cloud-storage 3.17's ResumableUpload refuses any other, read
# 2026-11-27). Tests set it smaller.
CHUNK_BYTES = 8 * 1024 * 1024
T = TypeVar("T")
Progress = Callable[[int, int | None], None]  # (bytes done, bytes in all or None)
EMULATOR_VAR = "STORAGE_EMULATOR_HOST"
RETRY_S = 120.0  # how long `_retry` goes on retrying one call (uploads say their own); tests set it shorter


class Stopped(Exception):
    """A transfer stopped on purpose (Ctrl-C, or another transfer of its batch failed). Not one of Cloud Storage's
    transient errors, so no retry policy retries it."""


class _CountingReader:
    """A binary file whose reads report the position: what the upload has sent so far (a retried chunk seeks back,
    and the position follows it). Once `stop` is set, a read raises Stopped: the upload ends at its next chunk,
    and a resumable session left unfinished makes no object."""

    def __init__(self, f: IO[bytes], size: int, progress: Progress | None, stop: threading.Event | None = None) -> None:
        self._f = f
        self._size = size
        self._progress = progress
        self._stop = stop

    def read(self, n: int = -1) -> bytes:
        if self._stop is not None and self._stop.is_set():
            raise Stopped
        data = self._f.read(n)
        if self._progress is not None:
            self._progress(self._f.tell(), self._size)
        return data

    def __getattr__(self, name: str) -> Any:  # seek, tell, name, ... of the real file
        return getattr(self._f, name)


class _StoppableWriter:
    """A download's open target file that reports the bytes written so far; once `stop` is set, a write raises
    Stopped, so the download ends at its next chunk instead of running to its end."""

    def __init__(self, f: IO[bytes], stop: threading.Event, moved: Callable[[int], None]) -> None:
        self._f = f
        self._stop = stop
        self._moved = moved

    def write(self, data: bytes) -> int:
        if self._stop.is_set():
            raise Stopped
        n = self._f.write(data)
        self._moved(self._f.tell())
        return n

    def __getattr__(self, name: str) -> Any:  # seek (decompressive transcoding starts over from 0), tell, ...
        return getattr(self._f, name)




@contextlib.contextmanager
def _signals_deferred(stop: threading.Event) -> Iterator[None]:
    """While the block runs, a Ctrl-C (or a SIGTERM/SIGHUP whose handler raises KeyboardInterrupt, as under `ftcli
    train`) only sets `stop`; its handler runs once the block has ended, and raises there. Raised at whatever line
    the main thread was on, the KeyboardInterrupt could land inside concurrent.futures' wait() while it held some
    futures' locks and leave them held: the worker that then finished such a future waited for the lock forever,
    and ftcli hung after the Ctrl-C. Only in the main thread (the only one signal handlers run in)."""
    import signal

    got: list[tuple[int, FrameType | None]] = []

    def defer(signum: int, frame: FrameType | None) -> None:
        got.append((signum, frame))
        stop.set()

    before: dict[int, Callable[[int, FrameType | None], object]] = {}
    if threading.current_thread() is threading.main_thread():
        for name in ("SIGINT", "SIGTERM", "SIGHUP"):
            sig = getattr(signal, name, None)
            if sig is None:  # (no SIGHUP on Windows)
                continue
            handler = signal.getsignal(sig)
            if callable(handler) and (handler is signal.default_int_handler or getattr(handler, INTERRUPTS, False)):
                before[sig] = handler
                signal.signal(sig, defer)
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        if got:  # the first signal's own handler, now: its KeyboardInterrupt replaces the batch's Stopped
            signum, frame = got[0]
            before[signum](signum, frame)


def _run_batch(tasks: list[Callable[[], T]], stop: threading.Event) -> list[T]:
    """Run `tasks` TRANSFER_WORKERS at a time; return their results in order. The first failure sets `stop` (the
    transfers under way end at their next chunk, those not begun never start) and is raised once all have ended; so
    is Ctrl-C, which does not wait for the rest of the batch either (it is raised once the batch has ended, which
    the transfers under way do at their next chunk)."""
    with _signals_deferred(stop):
        return _run_tasks(tasks, stop)


def _run_tasks(tasks: list[Callable[[], T]], stop: threading.Event) -> list[T]:
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    def guarded(task: Callable[[], T]) -> T:
        if stop.is_set():
            raise Stopped
        try:
            return task()
        except BaseException:
            stop.set()  # here, before this worker takes the next file
            raise

    pool = ThreadPoolExecutor(TRANSFER_WORKERS, thread_name_prefix="ftcli-transfer")
    futures = []
    try:
        for t in tasks:  # (a Ctrl-C can land while the first ones already run)
            futures.append(pool.submit(guarded, t))
        # In short waits: a Ctrl-C the system handed to a worker thread runs its handler only once the main thread
        # wakes, and a wait for the whole batch would wake it only at the end.
        while wait(futures, timeout=0.2, return_when=FIRST_EXCEPTION).not_done and not stop.is_set():
            pass
    finally:
        stop.set()  # (all done, it changes nothing)
        pool.shutdown(wait=True, cancel_futures=True)
    errors = [e for f in futures if not f.cancelled() and (e := f.exception()) is not None]
    for e in errors:
        if not isinstance(e, Stopped):
            raise e
    if errors:  # only stopped ones: stopped from outside
        raise Stopped
    return [f.result() for f in futures]


class _SessionGone(Exception):
    """A resumable session Cloud Storage no longer knows (404, 410): expired, cancelled or finished long ago."""


class _PreconditionFailed(Exception):
    """412: the create-only upload found an object already there."""


def _read_answer(resp: Response) -> int | dict:
    """What a resumable session's answer says: the bytes it holds (308), or the object's resource (200, 201)."""
    from google.api_core import exceptions as gexc

    if resp.status_code == 308:
        held = resp.headers.get("Range")
        if held is None:  # nothing persisted yet
            return 0
        match = re.fullmatch(r"bytes=0-(\d+)", held.strip())
        if match is None:
            raise gexc.from_http_response(resp)
        return int(match.group(1)) + 1
    if resp.status_code in (200, 201):
        return resp.json()
    if resp.status_code in (404, 410):
        raise _SessionGone
    if resp.status_code == 412:
        raise _PreconditionFailed
    raise gexc.from_http_response(resp)  # a transient one (429, 5xx) is retried by the caller's policy


def _crc32c(f: IO[bytes]) -> str:
    """The file's CRC32C, base64 of the big-endian digest, as Cloud Storage keeps it ("Hashes and ETags",
    https://cloud.google.com/storage/docs/hashes-etags, read 2026-11-27)."""
    import base64

    import google_crc32c

    checksum = google_crc32c.Checksum()
    f.seek(0)
    while block := f.read(4 * 1024 * 1024):
        checksum.update(block)
    return base64.b64encode(checksum.digest()).decode("ascii")


class StoredObject(NamedTuple):
    name: str
    size: int
    crc32c: str | None  # base64, as Cloud Storage keeps it for every object


class StorageGateway:
    def __init__(self, project: str, notify: Notify | None = None):
        from google.cloud import storage

        self.project = project
        self.notify = notify
        self.endpoint = os.environ.get(EMULATOR_VAR) or None
        if self.endpoint:
            from google.auth.credentials import AnonymousCredentials

            self._credentials: Credentials = AnonymousCredentials()
        else:
            from ftcli.gcp import credentials

            self._credentials = credentials()
        self.client = storage.Client(project=project, credentials=self._credentials)

    def _context(self, what: str) -> CallContext:
        return CallContext(service="storage", project=self.project, what=what, endpoint=self.endpoint,
                    endpoint_var=EMULATOR_VAR)

    def _retry(self, what: str, timeout: float | None = None) -> Retry:
        """Cloud Storage's own retry policy (transient HTTP errors, a 429, and dropped connections), reported, for
        `timeout` seconds (RETRY_S)."""
        from google.api_core.retry import Retry
        from google.cloud.storage.retry import DEFAULT_RETRY

        # DEFAULT_RETRY's predicate is the library's list of transient errors; only on_error is ours.
        return Retry(predicate=DEFAULT_RETRY._predicate, initial=1.0, maximum=60.0, multiplier=2.0,
                     timeout=RETRY_S if timeout is None else timeout,
                     on_error=retry_notice("storage", what, self.notify))

    def check_bucket(self, bucket: str, region: str | None = None) -> str | None:
        """Fail before anything is uploaded when the bucket is missing, unreadable, not in the job's region, keeps
        its objects under a retention policy, or bills its requesters. Returns the number of the project the bucket
        belongs to (its projectNumber), or None when the answer had none.

        "For Vertex AI training jobs, buckets must be regional", in the region where the job runs ("Vertex AI
        locations", https://docs.cloud.google.com/vertex-ai/docs/general/locations, read 2026-11-26). Reading the
        location takes storage.buckets.get, which roles/storage.objectAdmin lacks (roles/storage.admin and
        roles/storage.legacyBucketReader have it: "IAM roles for Cloud Storage",
        https://cloud.google.com/storage/docs/access-control/iam-roles, named 2026-11-27; the permission sets as
        Google's google-cloud-storage Java reference lists them, StorageRoles: admin() "storage.buckets.*,
        storage.objects.*", objectAdmin() "storage.objects.*", legacyBucketReader() "storage.buckets.get,
        storage.objects.list", https://cloud.google.com/java/docs/reference/google-cloud-storage/latest/
        com.google.cloud.storage.StorageRoles, read 2026-11-27).
        """
        from google.api_core import exceptions as gexc

        create = f"gcloud storage buckets create gs://NEW_BUCKET --location {region}" if region else ""
        with guard(**self._context(f"gs://{bucket}")):
            try:
                found = self.client.get_bucket(bucket, timeout=30, retry=self._retry(f"reading gs://{bucket}"))
            except gexc.NotFound:
                location = f" --location {region}" if region else ""
                raise FtcliError(f"bucket gs://{bucket} does not exist",
                                 hint=f"create it: gcloud storage buckets create gs://{bucket}{location}") from None
            except (gexc.Forbidden, gexc.PermissionDenied) as e:
                error = account_problem(e, service="storage", project=self.project)
                if error is not None:  # the API is off, billing is off, ...: no role fixes it
                    raise error from None
                raise FtcliError(
                    f"cannot read bucket gs://{bucket}'s location (storage.buckets.get denied)",
                    hint=f"grant yourself roles/storage.admin on gs://{bucket} (roles/storage.objectAdmin alone "
                         "cannot read a bucket's location; adding roles/storage.legacyBucketReader to it also "
                         "works)") from None
        location = (found.location or "").lower()
        if region and location != region.lower():
            # Regions are the only locations with a hyphen (US-CENTRAL1); US, EU, NAM4, ... span several.
            regional = "-" in location
            shape = f"in {location}" if regional else f"in {found.location}, which spans several regions"
            fix = f"use a bucket in {region} ({create})"
            if regional:
                fix += f", or run the job in the bucket's region with --region {location}"
            raise FtcliError(f"bucket gs://{bucket} is {shape}; Vertex AI training needs a regional bucket in "
                             f"the job's region, {region}", hint=fix)
        # "When a bucket retention policy is set, objects in the bucket can only be deleted or replaced once their age
        # is greater than the retention period" ("Bucket Lock", https://cloud.google.com/storage/docs/bucket-lock,
        # read 2026-11-27; an attempt is a PERMISSION_DENIED, JSON API Bucket.retentionPolicy). The job replaces its
        # logs/metrics.jsonl at every evaluation and deletes all but its last two checkpoints: it would train for
        # hours and fail at its end. `--clear-retention-period` removes an unlocked policy (`gcloud storage buckets
        # update`, https://cloud.google.com/sdk/gcloud/reference/storage/buckets/update, read 2026-11-27).
        if found.retention_period:
            fix = "use a bucket without a retention policy for --bucket"
            if not found.retention_policy_locked:
                fix += f", or remove it: gcloud storage buckets update gs://{bucket} --clear-retention-period"
            raise FtcliError(f"bucket gs://{bucket} has a retention policy ({_duration(found.retention_period)}): "
                             "nothing there can be replaced or deleted before that age, and the job replaces its logs "
                             "and deletes old checkpoints in its output folder", hint=fix)

        # Requester Pays: "only the following users can access the bucket or its contents: Requesters who include a
        # billing project in their request ... Requesters who don't include a billing project but have
        # resourcemanager.projects.createBillingAssignment permission for the project that contains the bucket ...
        # All other requests to the bucket fail with a 400 UserProjectMissing error" ("Requester Pays",
        # https://cloud.google.com/storage/docs/requester-pays, read 2026-11-27). Neither ftcli's uploads nor the
        # job's writes name a billing project, and the job's service account has no billing role: it would train
        # and fail writing its first log sync or checkpoint. `--no-requester-pays` turns it off (`gcloud storage
        # buckets update`, https://cloud.google.com/sdk/gcloud/reference/storage/buckets/update, read 2026-11-27).
        if found.requester_pays:
            raise FtcliError(f"bucket gs://{bucket} has Requester Pays on: the job's writes name no billing project "
                             "and would fail (400 UserProjectMissing) unless its service account may assign billing "
                             "in the bucket's project",
                             hint=f"turn it off: gcloud storage buckets update gs://{bucket} --no-requester-pays, "
                                  "or use another bucket for --bucket")
        return str(found.project_number) if found.project_number is not None else None

    # A bucket's projectNumber is "The project number of the project the bucket belongs to", and buckets.list
    # "Retrieves a list of buckets for a given project" (Cloud Storage JSON API, as Google's generated storage/v1
    # clients document them: https://pub.dev/documentation/googleapis/latest/storage_v1/Bucket/projectNumber.html,
    # https://hackage.haskell.org/package/gogol-storage-0.5.0/docs/Network-Google-Resource-Storage-Buckets-List.html,
    # read 2026-11-27). Resource Manager, which maps a project id to its number, is no part of ftcli; any bucket of the
    # project tells it too.
    def project_number(self, project: str) -> str | None:
        """The number of `project` (an id), read from one of its buckets; "" when it has no bucket at all; None when
        its buckets cannot be listed (storage.buckets.list denied, or any other error: nothing depends on it)."""
        try:
            with guard(**self._context(f"the buckets of project {project}")):
                found = list(self.client.list_buckets(project=project, max_results=1, timeout=30,
                                                      retry=self._retry(f"listing the buckets of {project}")))
        except FtcliError:  # (every Google error, as guard words it)
            return None
        if not found:
            return ""
        return str(found[0].project_number) if found[0].project_number is not None else None

    def bucket_project(self, bucket: str) -> str | None:
        """The number of the project `bucket` belongs to (its projectNumber), or None when its metadata cannot be read
        (storage.buckets.get denied, no such bucket, or any other error: nothing depends on it). For a bucket the job
        only reads from (a gs:// data file's); the staging bucket's comes from `check_bucket`."""
        try:
            with guard(**self._context(f"gs://{bucket}")):
                found = self.client.get_bucket(bucket, timeout=30, retry=self._retry(f"reading gs://{bucket}"))
        except FtcliError:  # (every Google error, as guard words it)
            return None
        return str(found.project_number) if found.project_number is not None else None

    def bucket_members(self, bucket: str) -> frozenset[str] | None:
        """Every member that the bucket's own IAM policy binds to a role (`serviceAccount:EMAIL`, `user:...`), or None
        when the policy cannot be read (buckets.getIamPolicy takes storage.buckets.getIamPolicy: "Storage Admin
        (roles/storage.admin)" has it, "Set and manage IAM policies on buckets",
        https://cloud.google.com/storage/docs/access-control/using-iam-permissions, read 2026-11-27). Grants on the
        bucket's project, folder or organization are not in it."""
        try:
            with guard(**self._context(f"gs://{bucket}'s IAM policy")):
                policy = self.client.bucket(bucket).get_iam_policy(
                    timeout=30, retry=self._retry(f"reading gs://{bucket}'s IAM policy"))
        except FtcliError:  # (every Google error, as guard words it)
            return None
        return frozenset(m for binding in policy.bindings for m in binding.get("members", ()))

    def exists(self, uri: str) -> bool:
        bucket, name = split_uri(uri)
        with guard(**self._context(uri)):
            return self.client.bucket(bucket).blob(name).exists(timeout=30, retry=self._retry(f"looking up {uri}"))

    def read_bytes(self, uri: str) -> bytes | None:
        """The object's bytes, or None when there is no such object."""
        from google.api_core import exceptions as gexc

        bucket, name = split_uri(uri)
        with guard(**self._context(uri)):
            try:
                return self.client.bucket(bucket).blob(name).download_as_bytes(
                    timeout=30, retry=self._retry(f"reading {uri}"))
            except gexc.NotFound:
                return None

    def read_head(self, uri: str, size: int) -> bytes | None:
        """The object's first `size` bytes (all of a smaller one), or None when there is no such object."""
        from google.api_core import exceptions as gexc

        bucket, name = split_uri(uri)
        with guard(**self._context(uri)):
            try:
                blob = self.client.bucket(bucket).get_blob(name, timeout=30, retry=self._retry(f"looking up {uri}"))
                if blob is None:
                    return None
                if not blob.size:  # (a range of an empty object is no range)
                    return b""
                return blob.download_as_bytes(start=0, end=min(size, blob.size) - 1, timeout=30,
                                              retry=self._retry(f"reading {uri}"))
            except gexc.NotFound:
                return None

    def upload_if_absent(self, local: Path, uri: str, *, progress: Progress | None = None) -> int:
        """Upload `local` to `uri` unless an object is already there; return the bytes sent (0 if skipped).

        Objects are content-addressed by their names, so an existing object is the same bytes. The upload
        is create-only (if_generation_match=0) and retried on transient errors; a resumable upload in
        chunks (a file over CHUNK_BYTES) either completes or leaves no object behind, and one stopped part way is
        taken up where it stopped by the next upload of the same file (`_upload_resumable`).
        """
        if self.exists(uri):
            return 0
        return self._upload(local, uri, progress)

    def _upload(self, local: Path, uri: str, progress: Progress | None, stop: threading.Event | None = None) -> int:
        from google.api_core import exceptions as gexc

        size = local.stat().st_size
        if size > CHUNK_BYTES:
            return self._upload_resumable(local, uri, size, progress, stop)
        bucket, name = split_uri(uri)
        blob = self.client.bucket(bucket).blob(name)
        with guard(**self._context(uri)):
            try:
                with open(local, "rb") as f:
                    stream = _CountingReader(f, size, progress, stop) if progress or stop else f
                    blob.upload_from_file(stream, size=size, if_generation_match=0,
                                          retry=self._retry(f"uploading {local.name}", timeout=300))
            except gexc.PreconditionFailed:
                return 0  # someone uploaded the same content-addressed object meanwhile
        return size

    def _upload_resumable(self, local: Path, uri: str, size: int, progress: Progress | None,
                          stop: threading.Event | None) -> int:
        """A big file in a resumable session, in chunks; return the bytes sent by this run. The session is remembered
        (upload_sessions) until it ends, so a run that stopped part way (Ctrl-C, a lid closed, a network gone past the
        retries) is resumed by the next one where Cloud Storage says it stands, instead of from byte 0.

        google-cloud-storage has no public way to take up a session begun by another process (its ResumableUpload
        learns its URL only from its own initiate()), so the session is begun with the public
        Blob.create_resumable_upload_session and its chunks are sent here, as its _media/_upload.py does: PUT with
        `Content-Range: bytes START-END/SIZE`, answered 308 with `Range: bytes=0-N` (what is persisted) until the last
        one's 200/201; the status query is the same PUT with no body and `bytes */SIZE` (google-cloud-storage 3.17,
        ResumableUpload._prepare_request, _process_resumable_response, recover; read 2026-11-27). A 308 with no Range
        means nothing is persisted yet (Cloud Storage's "Perform resumable uploads", status check, as
        googleapis/java-storage#2182 quotes it, read 2026-11-27). A session that is gone (404, 410: "the only choice is
        to restart the operation", googleapis/python-storage#26, read 2026-11-27) or any other doubt starts afresh.

        The create-only precondition (ifGenerationMatch=0) travels in the session URL and is held against the data
        requests, not the session's start (googleapis/google-cloud-java#201; fake-gcs-server#1967: the server "includes
        the original preconditions in the query string of the returned location"; both read 2026-11-27), so a resumed
        session still never overwrites. The session declares the whole file's CRC32C (as google-cloud-storage's own
        crc32c_checksum_value does): "Cloud Storage performs server-side validation ... When you supply an object's
        MD5 or CRC32C hash in an object upload request", a mismatch "rejected with a BadRequestException: 400 error"
        ("Data validation and change detection", https://cloud.google.com/storage/docs/data-validation, read
        2026-11-27 in a stored copy): an object stitched from two runs is the file's bytes or is not made."""
        from google.api_core import exceptions as gexc

        from ftcli import upload_sessions

        bucket, name = split_uri(uri)
        what = f"uploading {local.name}"
        # An emulator's sessions are kept apart from Cloud Storage's: a session URL is only ever sent to where it began.
        place = uri if self.endpoint is None else f"{uri} at {self.endpoint}"
        with guard(**self._context(uri)), open(local, "rb") as f:
            crc32c = _crc32c(f)
            http = self._authorized_session()
            url = upload_sessions.claim(place, size, crc32c)
            keep = url != upload_sessions.BUSY  # else another upload under way holds it: this one goes alone
            url = url if keep else None
            try:
                for attempt in range(2):  # the remembered session (if any), then one begun now
                    offset = self._persisted(http, url, size, what) if url else None
                    if isinstance(offset, dict):
                        # That session made the object, which was not there when this upload began (the callers
                        # asked): deleted since (a lifecycle rule, a user). "Already there", 0 bytes sent, left the
                        # job without its file: a new session sends it again.
                        offset = None
                    if offset is None:
                        if url and keep:
                            upload_sessions.forget(place, size)
                        blob = self.client.bucket(bucket).blob(name)
                        blob.crc32c = crc32c  # declared in the session's object metadata
                        try:
                            url = blob.create_resumable_upload_session(
                                size=size, if_generation_match=0, timeout=60, retry=self._retry(what))
                        except gexc.PreconditionFailed:
                            return 0
                        if keep:
                            upload_sessions.hold(place, size, crc32c, url)
                        offset = 0
                    elif offset and self.notify:
                        self.notify(f"{what}: resuming at {size_text(offset)} of {size_text(size)} (the upload an "
                                    "earlier run began)")
                    touch = partial(upload_sessions.touch, place, size) if keep else None
                    assert url is not None  # (remembered, or begun just above)
                    try:
                        done = self._send_chunks(http, url, f, offset, size, progress, stop, what, touch)
                    except gexc.ClientError:
                        if _crc32c(f) != crc32c:  # what made Cloud Storage refuse the bytes
                            raise FtcliError(f"{local.name} changed while it was being uploaded: Cloud Storage "
                                             "refused bytes that no longer match the file the upload began with",
                                             hint="leave the file as it is while ftcli uploads it, and run again"
                                             ) from None
                        raise
                    except _SessionGone:
                        if keep:
                            upload_sessions.forget(place, size)
                        url = None
                        if attempt:
                            raise FtcliError(f"Cloud Storage ended the upload session of {uri} while it was under "
                                             "way", hint="run the command again") from None
                        continue
                    if keep:
                        upload_sessions.forget(place, size)
                    if done is None:  # 412: someone uploaded the same content-addressed object meanwhile
                        return 0
                    if done.get("crc32c") not in (None, crc32c):
                        gone = ("the object was removed" if self._remove_mismatch(uri, done) else
                                "it could not be removed, or another writer's object has replaced it: check it")
                        raise FtcliError(f"{local.name} arrived in {uri} with other bytes (CRC32C "
                                         f"{done.get('crc32c')}, the file's is {crc32c}); {gone}",
                                         hint="check that nothing writes the file during the upload, and run again")
                    return size - offset
            finally:
                if keep:  # stopped part way (Ctrl-C, an error): the next run may take the session up
                    upload_sessions.release(place, size)
        raise AssertionError("unreachable")

    def _authorized_session(self) -> AuthorizedSession:
        from google.auth.transport.requests import AuthorizedSession

        return AuthorizedSession(self._credentials)

    def _persisted(self, http: AuthorizedSession, url: str, size: int, what: str) -> int | dict | None:
        """How many bytes the session holds (its object's resource when it already finished), or None when it is gone
        or its answer leaves any doubt."""
        from google.api_core import exceptions as gexc

        try:
            return self._retry(what)(self._status)(http, url, size)
        except (_SessionGone, _PreconditionFailed, gexc.GoogleAPIError):
            return None

    def _status(self, http: AuthorizedSession, url: str, size: int) -> int | dict:
        resp = http.put(url, data=b"", headers={"Content-Range": f"bytes */{size}"}, timeout=60)
        return _read_answer(resp)

    def _send_chunks(self, http: AuthorizedSession, url: str, f: IO[bytes], offset: int, size: int,
                     progress: Progress | None, stop: threading.Event | None, what: str,
                     touch: Callable[[], None] | None) -> dict | None:
        """Send the file from `offset` on; return the object's resource, or None on 412 (the object is there).
        `touch()` hears of each chunk the session took."""
        state = {"offset": offset, "doubt": False}

        def next_chunk() -> dict | int:
            if stop is not None and stop.is_set():
                raise Stopped
            if state["doubt"]:  # an answer was lost: ask where the session stands before sending again
                got = self._status(http, url, size)
                state["doubt"] = False
                if isinstance(got, dict):
                    return got
                state["offset"] = got
            start = state["offset"]
            if start >= size:  # it holds every byte: the empty request that declares the size ends it
                got = self._status(http, url, size)
                if not isinstance(got, dict):
                    raise _SessionGone  # still not made: take no chances with it
                return got
            f.seek(start)
            data = f.read(min(CHUNK_BYTES, size - start))
            state["doubt"] = True
            resp = http.put(url, data=data, timeout=60,
                            headers={"Content-Range": f"bytes {start}-{start + len(data) - 1}/{size}"})
            got = _read_answer(resp)
            state["doubt"] = False
            return got

        if progress:
            progress(offset, size)
        retry = self._retry(what, timeout=300)
        while True:
            try:
                got = retry(next_chunk)()
            except _PreconditionFailed:
                return None
            if isinstance(got, dict):
                if progress:
                    progress(size, size)
                return got
            state["offset"] = got
            if touch:
                touch()
            if progress:
                progress(got, size)

    def _remove_mismatch(self, uri: str, resource: dict) -> bool:
        """Delete the object this upload just made with the wrong bytes (that generation only: never another's);
        whether it went. (The error said is the mismatch; "the object was removed" was said of one another writer
        had replaced, which stays.)"""
        bucket, name = split_uri(uri)
        generation = resource.get("generation")
        try:
            self.client.bucket(bucket).blob(name).delete(
                if_generation_match=int(generation) if generation else None, timeout=30)
        except Exception:  # noqa: BLE001 - said by the caller
            return False
        return True

    def upload_many(self, pairs: list[tuple[Path, str]], *, progress: Progress | None = None) -> int:
        """`upload_if_absent` for each (local file, gs:// URI), TRANSFER_WORKERS at a time (a model folder of many
        files went one file after the other); return the bytes sent. `progress` hears the batch's bytes against
        what is missing from the bucket. The first error stops the rest and is raised; so is Ctrl-C, without
        waiting for the uploads under way to finish: each has either made its object whole or made none.

        (transfer_manager.upload_many takes one set of upload arguments for every file: a file object then goes
        without its size, as a resumable session of two requests even when small, and a file name gives no hook
        to count bytes or to stop.)"""
        stop = threading.Event()
        there = _run_batch([partial(self.exists, uri) for _, uri in pairs], stop)
        missing = [(path, uri) for (path, uri), found in zip(pairs, there, strict=True) if not found]
        sizes = [path.stat().st_size for path, _ in missing]
        total, sent = sum(sizes), [0] * len(missing)
        lock = threading.Lock()

        def counted(i: int) -> Progress:
            def moved(done: int, _size: int | None) -> None:
                with lock:
                    sent[i] = done
                    if progress:
                        progress(sum(sent), total)
            return moved

        stop = threading.Event()
        return sum(_run_batch([partial(self._upload, path, uri, counted(i), stop)
                               for i, (path, uri) in enumerate(missing)], stop))

    def list_objects(self, prefix_uri: str, limit: int | None = None) -> list[StoredObject]:
        """Name, size and CRC32C of everything under gs://bucket/prefix/ (the first `limit` of them, in name order)."""
        bucket, prefix = split_uri(prefix_uri)
        prefix = prefix + "/" if prefix else ""
        with guard(**self._context(prefix_uri)):
            return [StoredObject(b.name, b.size or 0, b.crc32c) for b in self.client.list_blobs(
                bucket, prefix=prefix, max_results=limit, timeout=60, retry=self._retry(f"listing {prefix_uri}"))]

    def download_objects(self, bucket_name: str, pairs: list[tuple[str, Path]], *, total: int | None = None,
                         progress: Progress | None = None) -> int:
        """Download objects of `bucket_name` to the given local files, TRANSFER_WORKERS at a time; return the bytes
        read. The caller picks the paths: this writes only where it is told. The first error stops the rest and is
        raised; so is Ctrl-C, which ends the downloads under way at their next chunk and starts no other
        (transfer_manager.download_many, which gives no way to stop a download once begun, waited for them to
        arrive whole: a model's weights, minutes). What a stopped batch leaves is partial files, for the caller to
        remove."""
        bucket = self.client.bucket(bucket_name)
        for _, target in pairs:
            target.parent.mkdir(parents=True, exist_ok=True)
        stop = threading.Event()
        lock = threading.Lock()
        written = [0] * len(pairs)

        def moved(i: int, position: int) -> None:
            with lock:
                written[i] = position
                if progress:
                    progress(sum(written), total)

        def download(i: int, name: str, target: Path) -> int:
            with guard(**self._context(f"gs://{bucket_name}/{name}")), open(target, "wb") as f:
                bucket.blob(name).download_to_file(
                    _StoppableWriter(f, stop, lambda position: moved(i, position)), timeout=300,
                    retry=self._retry(f"downloading from gs://{bucket_name}"))
                return f.tell()

        done = sum(_run_batch([partial(download, i, name, target) for i, (name, target) in enumerate(pairs)], stop))
        if progress:
            progress(done, total)
        return done


def _duration(seconds: int) -> str:
    """A retention period as people set it: 7 days, 3 hours, 90 seconds."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def get_storage(project: str, notify: Notify | None = None) -> StorageGateway:
    return StorageGateway(project, notify)
