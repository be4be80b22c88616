"""gcp-storage-emulator, run by GcsEmulator as `python _gcs_server.py start ...`, with the one Cloud Storage rule it
lacks and ftcli depends on: the ifGenerationMatch precondition on object uploads and deletes.

ftcli's trainer upload is create-only (`if_generation_match=0`): the ifGenerationMatch query parameter makes a
request proceed only "if the generation of the target resource matches the value used in the precondition", else it
"fails with a 412 Precondition Failed response" ("Request preconditions",
https://cloud.google.com/storage/docs/request-preconditions?hl=zh-cn, read 2026-11-27 in its translated copy); with 0,
"blobs that already have a live version will not be overwritten ... Uploads so skipped will result in a 412
Precondition Failed response" (google-cloud-storage 3.17's transfer_manager.py, skip_if_exists; read 2026-11-27).
gcp-storage-emulator ignores every precondition: an upload with ifGenerationMatch=0 overwrote an existing object and
answered 200, so ftcli's 412 path was never run against a real protocol.

Checked on the uploads ftcli sends: media and multipart inserts when they arrive, and resumable sessions on their
data requests (the precondition is a query parameter of the session URL, which the emulator's Location keeps);
the session's start is accepted, as Cloud Storage accepted it in googleapis/google-cloud-java#201 ("Resumable:
Succeeds ... Subsequent data uploads ... fail").

A delete takes the same precondition: objects.delete's ifGenerationMatch "Makes the operation conditional on whether
the object's current generation matches the given value" (googleapis.storage.v1.objects.delete,
https://cloud.google.com/workflows/docs/reference/googleapis/storage/v1/objects/delete, read 2026-11-27), with the
same 412 when it does not hold (the page above). gcp-storage-emulator deleted the object whatever generation was asked
for, so a lease released by a holder that had lost it would have deleted the new holder's (lease.py).

Buckets belong to projects. A bucket's projectNumber is "The project number of the project the bucket belongs to"
(Cloud Storage JSON API, Bucket resource, as Google's generated storage/v1 client documents it:
https://pub.dev/documentation/googleapis/latest/storage_v1/Bucket/projectNumber.html, read 2026-11-27), and
buckets.list "Retrieves a list of buckets for a given project" (its `project` parameter, with `prefix` and
`maxResults`: https://hackage.haskell.org/package/gogol-storage-0.5.0/docs/Network-Google-Resource-Storage-Buckets-List.html,
generated from the same API description, read 2026-11-27). gcp-storage-emulator gives every bucket one project number
and lists every bucket whatever project is asked for. Here a bucket inserted with `?project=NUMBER` (digits) belongs to
that project; any other `project` (an id) stands for the emulator's own project (its number, 1234 by default); and a
list returns the buckets of the project asked for, honouring prefix and maxResults.

Object names. Cloud Storage takes names of 1 to 1,024 bytes of UTF-8, with no carriage return or line feed, none
starting with .well-known/acme-challenge/, and neither . nor .. ("Object naming requirements",
https://cloud.google.com/storage/docs/naming-objects, read 2026-11-29 in its stored ?hl=JA copy:
"UTF-8 エンコード時の長さが 1~1,024 バイト", "改行やラインフィード文字を含めることはできません",
"先頭を .well-known/acme-challenge/ にすることはできません", "「.」や「..」にすることはできません").
gcp-storage-emulator took any name, so an upload Cloud Storage answers 400 went through here. Refused now when the
upload names its object (a media or multipart insert, a resumable session's start), with Cloud Storage's words where
they are on record: "The maximum object length is 1024 characters, but got a name with 1028 characters" (a
BadRequestException quoted in hashicorp/vault#18248 and firebase/firebase-tools#10198, read 2026-11-29) and
"Disallowed unicode characters present in object name" (googleapis/google-cloud-go#196, read 2026-11-29); the words
for the other two are this emulator's own.
"""

from __future__ import annotations

import re
import sys
from http import HTTPStatus

from gcp_storage_emulator import server
from gcp_storage_emulator.__main__ import main
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers import buckets, objects

_insert, _upload_partial, _delete = objects.insert, objects.upload_partial, objects.delete
RESUME_INCOMPLETE = objects.GoogleHTTPStatus.RESUME_INCOMPLETE  # 308 "Resume Incomplete"
_bucket_insert, _bucket_ls = buckets.insert, buckets.ls


def _live_generation(storage, bucket: str, name: str) -> str:
    try:
        return str(storage.get_file_obj(bucket, name).get("generation") or "0")
    except NotFound:
        return "0"  # no live version: only ifGenerationMatch=0 holds


def _refused(request, response, storage, bucket: str | None, name: str | None) -> bool:
    """Answer 412 (as Cloud Storage words it) when the request's ifGenerationMatch does not hold."""
    wanted = request.query.get("ifGenerationMatch")
    if not wanted or bucket is None or name is None or _live_generation(storage, bucket, name) == wanted[0]:
        return False
    _ = request.data  # read the body first: answering before it is read breaks the client's (or proxy's) send
    message = "At least one of the pre-conditions you specified did not hold."
    response.status = HTTPStatus.PRECONDITION_FAILED
    response.json({"error": {"code": 412, "message": message, "errors": [
        {"domain": "global", "reason": "conditionNotMet", "message": message, "locationType": "header",
         "location": "If-Match"}]}})
    return True


MAX_OBJECT_NAME_BYTES = 1024
ACME_PREFIX = ".well-known/acme-challenge/"


def name_problem(name: str) -> str | None:
    """Why Cloud Storage refuses `name` as an object name (see the module's docstring), or None."""
    size = len(name.encode("utf-8"))
    if size > MAX_OBJECT_NAME_BYTES:
        return (f"The maximum object length is {MAX_OBJECT_NAME_BYTES} characters, but got a name with {size} "
                f"characters: '{name[:64]}...'")
    if "\r" in name or "\n" in name:
        return "Disallowed unicode characters present in object name"
    if name.startswith(ACME_PREFIX) or name in (".", ".."):
        return f"Invalid object name: {name[:64]!r}"
    return None


def _bad_name(request, response, name: str | None) -> bool:
    """Answer 400 when the upload's object name is one Cloud Storage refuses."""
    problem = name_problem(name) if name else None
    if problem is None:
        return False
    _ = request.data  # read the body first, as _refused does
    response.status = HTTPStatus.BAD_REQUEST
    response.json({"error": {"code": 400, "message": problem, "errors": [
        {"domain": "global", "reason": "invalid", "message": problem}]}})
    return True


def _session_target(storage, request) -> tuple[str | None, str | None]:
    try:
        obj = storage.get_resumable_file_obj(request.query["upload_id"][0])
    except (NotFound, KeyError, IndexError):
        return None, None  # the emulator answers an unknown session itself
    return obj.get("bucket"), obj.get("name")


def insert(request, response, storage, *args, **kwargs):
    kind = (request.query.get("uploadType") or [""])[0]
    bucket = request.params.get("bucket_name")
    if kind == "resumable" and "upload_id" in request.query:  # a data request POSTed to the session
        if _refused(request, response, storage, *_session_target(storage, request)):
            return None
    elif kind in ("media", "multipart", "resumable"):
        name = (request.query.get("name") or [None])[0]
        if name is None and kind in ("multipart", "resumable") and isinstance(request.data, dict):
            name = (request.data.get("meta") or {}).get("name") if kind == "multipart" else request.data.get("name")
        if _bad_name(request, response, name):
            return None
        if kind != "resumable" and _refused(request, response, storage, bucket, name):
            return None
    return _insert(request, response, storage, *args, **kwargs)


# The sessions that made their object: upload_id -> the object's resource as the last data request answered it.
_FINISHED: dict[str, str] = {}


def upload_partial(request, response, storage, *args, **kwargs):
    if "upload_id" in request.query and _refused(request, response, storage, *_session_target(storage, request)):
        return None
    if _nothing_held(request, storage):
        _ = request.data
        response.status = RESUME_INCOMPLETE  # and no Range: no byte is persisted
        return None
    upload_id = (request.query.get("upload_id") or [None])[0]
    if upload_id in _FINISHED:
        # A request to a session that has made its object is answered as its last data request was: 200 with the
        # object's resource (a status check of a complete upload answers 200 or 201 with the object's metadata:
        # Cloud Storage's "Perform resumable uploads", status check, and leandrodamascena's "Understanding Resumable
        # Upload in Google Cloud Storage": "HTTP 200/201: ... upload is complete"; google-cloud-storage's
        # ResumableUpload.recover reads such an answer as finished; read 2026-11-30). gcp-storage-emulator forgot the
        # session once it finished and answered 404, which no client reads as "finished".
        _ = request.data
        response["Content-type"] = "application/json"
        response._content = _FINISHED[upload_id]
        return None
    result = _upload_partial(request, response, storage, *args, **kwargs)
    if upload_id and response.status == HTTPStatus.OK and response._content:
        _FINISHED[upload_id] = response._content
    return result


def _nothing_held(request, storage) -> bool:
    """A status query (`Content-Range: bytes */SIZE`) of a known session that holds no byte yet. Cloud Storage answers
    308 with no Range header ("a 308 response that does not contain a Range header should interpret as GCS having
    received no data", googleapis/java-storage#2182 on "Perform resumable uploads", status check, read 2026-11-27;
    google-cloud-storage's ResumableUpload.recover reads it so: "the upload has not begun"). gcp-storage-emulator
    answered `Range: bytes=0-0`, one byte held: a client resuming from it would skip the file's first byte."""
    content_range = (request.get_header("Content-Range", "") or "").strip()
    if not re.fullmatch(r"bytes \*/(\d+|\*)", content_range) or "upload_id" not in request.query:
        return False
    upload_id = request.query["upload_id"][0]
    try:
        storage.get_resumable_file_obj(upload_id)
    except NotFound:
        return False  # the emulator answers an unknown session itself (404)
    return storage.get_resumable_byte_count(upload_id) == 0


def _expire_uploads(request, response, storage, *args, **kwargs):
    """Tests only (like the emulator's own /wipe): forget every unfinished resumable session, as Cloud Storage does a
    week after it began; a request to one is then answered 404."""
    for upload_id in list(storage.resumable):
        storage.delete_resumable_file_obj(upload_id)
    response.write("OK")


def delete(request, response, storage, *args, **kwargs):
    if _refused(request, response, storage, request.params.get("bucket_name"), request.params.get("object_id")):
        return None
    return _delete(request, response, storage, *args, **kwargs)


def _project_number(storage, project: str | None) -> str:
    """The number of the project a request names: a number as it is, an id the emulator's own project."""
    return project if project and project.isdigit() else str(storage.project_number)


def bucket_insert(request, response, storage, *args, **kwargs):
    _bucket_insert(request, response, storage, *args, **kwargs)
    name = request.data.get("name") if isinstance(request.data, dict) else None
    project = (request.query.get("project") or [None])[0]
    bucket = storage.buckets.get(name) if name and response.status == HTTPStatus.OK else None
    if bucket is not None and project and project.isdigit():
        bucket["projectNumber"] = project
        storage.create_bucket(name, bucket)
        response.json(bucket)


def bucket_ls(request, response, storage, *args, **kwargs):
    query = {k: (v or [None])[0] for k, v in request.query.items()}
    number = _project_number(storage, query.get("project"))
    items = [b for name, b in sorted(storage.buckets.items())
             if str(b.get("projectNumber")) == number and name.startswith(query.get("prefix") or "")]
    if (most := query.get("maxResults")) and most.isdigit():
        items = items[:int(most)]
    response.json({"kind": "storage#buckets", "items": items})


def _install() -> None:
    # the router's own fallback reads objects.insert
    objects.insert, objects.upload_partial, objects.delete = insert, upload_partial, delete
    server.HANDLERS = ((r"^/expire-uploads$", {server.GET: _expire_uploads}), *server.HANDLERS)
    ours = {_insert: insert, _upload_partial: upload_partial, _delete: delete, _bucket_insert: bucket_insert,
            _bucket_ls: bucket_ls}
    for _, handlers in server.HANDLERS:
        for method, handler in list(handlers.items()):
            if handler in ours:
                handlers[method] = ours[handler]


if __name__ == "__main__":
    _install()
    main(sys.argv[1:])
