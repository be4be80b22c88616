"""Local paths and gs:// URIs, behind the same few calls.

Vertex hands the trainer gs:// URIs in AIP_MODEL_DIR and friends; the user may pass gs:// data files.
google-cloud-storage is imported only when a gs:// URI is actually used (it honours
STORAGE_EMULATOR_HOST, which is how the tests point it at an emulator).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

COMPLETE_MARKER = "_COMPLETE"


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


def _client():
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


def upload_dir(local: Path, uri: str, *, marker: bool = True) -> None:
    """Upload a folder's files under `uri`; the completion marker goes last, so a reader that checks
    for it never sees a half-written folder."""
    bucket_name, prefix = split_gcs(uri)
    bucket = _client().bucket(bucket_name)
    for path in sorted(p for p in local.rglob("*") if p.is_file() and p.name != COMPLETE_MARKER):
        rel = path.relative_to(local).as_posix()
        bucket.blob(f"{prefix}/{rel}" if prefix else rel).upload_from_filename(str(path))
    if marker:
        bucket.blob(f"{prefix}/{COMPLETE_MARKER}" if prefix else COMPLETE_MARKER).upload_from_string(b"")


def list_subdirs(uri: str) -> list[str]:
    """Names of the immediate sub-folders of a gs:// prefix."""
    bucket_name, prefix = split_gcs(uri)
    prefix = f"{prefix}/" if prefix else ""
    it = _client().list_blobs(bucket_name, prefix=prefix, delimiter="/")
    for _ in it.pages:
        pass
    return sorted(p[len(prefix):].rstrip("/") for p in it.prefixes)


def exists(uri: str) -> bool:
    if is_gcs(uri):
        bucket, name = split_gcs(uri)
        return _client().bucket(bucket).blob(name).exists()
    return Path(uri).exists()


def download_dir(uri: str, dest: Path) -> Path:
    bucket_name, prefix = split_gcs(uri)
    prefix = f"{prefix}/" if prefix else ""
    for blob in _client().list_blobs(bucket_name, prefix=prefix):
        target = dest / blob.name[len(prefix):]
        target.parent.mkdir(parents=True, exist_ok=True)
        blob.download_to_filename(str(target))
    return dest


def delete_prefix(uri: str) -> None:
    bucket_name, prefix = split_gcs(uri)
    client = _client()
    for blob in client.list_blobs(bucket_name, prefix=prefix.rstrip("/") + "/"):
        blob.delete()


def publish_dir(staged: Path, target: str) -> None:
    """Make `staged` appear at `target` whole: an atomic rename locally, marker-last on GCS."""
    if is_gcs(target):
        upload_dir(staged, target)
        return
    dest = Path(target)
    (staged / COMPLETE_MARKER).touch()
    dest.parent.mkdir(parents=True, exist_ok=True)
    old = dest.with_name(dest.name + ".old")
    if dest.exists():
        if old.exists():
            shutil.rmtree(old)
        dest.rename(old)
    staged.rename(dest)
    if old.exists():
        shutil.rmtree(old)
