"""Cloud Storage gateway: check the bucket, upload create-only-if-absent with retries and progress."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ftcli.errors import FtcliError
from ftcli.gcp import translate
from ftcli_trainer.storage import split_gcs as split_uri


class StorageGateway:
    def __init__(self, project: str):
        from google.cloud import storage

        self.project = project
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            from google.auth.credentials import AnonymousCredentials

            self.client = storage.Client(project=project, credentials=AnonymousCredentials())
        else:
            from ftcli.gcp import credentials

            self.client = storage.Client(project=project, credentials=credentials())

    def check_bucket(self, bucket: str, region: str | None = None) -> None:
        """Fail before anything is uploaded when the bucket is missing, unreadable, or not in the job's region.

        "For Vertex AI training jobs, buckets must be regional", in the region where the job runs ("Vertex AI
        locations", https://docs.cloud.google.com/vertex-ai/docs/general/locations, read 2026-11-26). Reading the
        location takes storage.buckets.get, which roles/storage.objectAdmin lacks (roles/storage.admin and
        roles/storage.legacyBucketReader have it: "Cloud Storage roles and permissions").
        """
        from google.api_core import exceptions as gexc

        create = f"gcloud storage buckets create gs://NEW_BUCKET --location {region}" if region else ""
        try:
            found = self.client.get_bucket(bucket, timeout=30)
        except gexc.NotFound:
            location = f" --location {region}" if region else ""
            raise FtcliError(f"bucket gs://{bucket} does not exist",
                             hint=f"create it: gcloud storage buckets create gs://{bucket}{location}") from None
        except (gexc.Forbidden, gexc.PermissionDenied) as e:
            error = translate(e, service="storage", project=self.project, what=f"gs://{bucket}")
            if error.hint and "services enable" in error.hint:
                raise error from None
            raise FtcliError(
                f"cannot read bucket gs://{bucket}'s location (storage.buckets.get denied)",
                hint=f"grant yourself roles/storage.admin on gs://{bucket} (roles/storage.objectAdmin alone cannot "
                     "read a bucket's location; adding roles/storage.legacyBucketReader to it also works)") from None
        except gexc.GoogleAPICallError as e:
            raise translate(e, service="storage", project=self.project, what=f"gs://{bucket}") from None
        location = (found.location or "").lower()
        if region and location != region.lower():
            # Regions are the only locations with a hyphen (US-CENTRAL1); US, EU, NAM4, ... span several.
            regional = "-" in location
            shape = f"in {location}" if regional else f"in {found.location}, which spans several regions,"
            fix = f"use a bucket in {region} ({create})"
            if regional:
                fix += f", or run the job in the bucket's region with --region {location}"
            raise FtcliError(f"bucket gs://{bucket} is {shape}; Vertex AI training needs a regional bucket in "
                             f"the job's region, {region}", hint=fix)

    def exists(self, uri: str) -> bool:
        from google.api_core import exceptions as gexc

        bucket, name = split_uri(uri)
        try:
            return self.client.bucket(bucket).blob(name).exists(timeout=30)
        except gexc.GoogleAPICallError as e:
            raise translate(e, service="storage", project=self.project, what=uri) from None

    def upload_if_absent(self, local: Path, uri: str, *, show_progress: bool | None = None) -> int:
        """Upload `local` to `uri` unless an object is already there; return the bytes sent (0 if skipped).

        Objects are content-addressed by their names, so an existing object is the same bytes. The upload
        is create-only (if_generation_match=0) and retried on transient errors; a resumable upload in
        chunks either completes or leaves no object behind.
        """
        from google.api_core import exceptions as gexc
        from google.cloud.storage.retry import DEFAULT_RETRY

        if self.exists(uri):
            return 0
        bucket, name = split_uri(uri)
        size = local.stat().st_size
        blob = self.client.bucket(bucket).blob(name, chunk_size=8 * 1024 * 1024 if size > 8 * 1024 * 1024 else None)
        show = sys.stderr.isatty() if show_progress is None else show_progress
        try:
            with open(local, "rb") as f:
                if show:
                    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

                    from ftcli.output import err

                    columns = ("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                               TransferSpeedColumn())
                    with Progress(*columns, console=err(), transient=True) as progress:
                        with progress.wrap_file(f, total=size, description=f"uploading {local.name}") as wrapped:
                            blob.upload_from_file(wrapped, size=size, if_generation_match=0,
                                                  retry=DEFAULT_RETRY.with_timeout(300))
                else:
                    blob.upload_from_file(f, size=size, if_generation_match=0, retry=DEFAULT_RETRY.with_timeout(300))
        except gexc.PreconditionFailed:
            return 0  # someone uploaded the same content-addressed object meanwhile
        except gexc.GoogleAPICallError as e:
            raise translate(e, service="storage", project=self.project, what=uri) from None
        return size

    def list_objects(self, prefix_uri: str) -> list[tuple[str, int]]:
        """(object name, size) of everything under gs://bucket/prefix/."""
        from google.api_core import exceptions as gexc

        bucket, prefix = split_uri(prefix_uri)
        prefix = prefix + "/" if prefix else ""
        try:
            return [(b.name, b.size or 0) for b in self.client.list_blobs(bucket, prefix=prefix, timeout=60)]
        except gexc.GoogleAPICallError as e:
            raise translate(e, service="storage", project=self.project, what=prefix_uri) from None

    def download_prefix(self, prefix_uri: str, dest: Path, *, show_progress: bool | None = None) -> int:
        """Copy every object under `prefix_uri` into `dest` (keeping relative paths); return the bytes read.
        Files land in a temporary folder first and are moved into place at the end."""
        import shutil
        import tempfile

        from google.api_core import exceptions as gexc

        bucket_name, prefix = split_uri(prefix_uri)
        prefix = prefix + "/"
        objects = self.list_objects(prefix_uri)
        total = sum(size for _, size in objects)
        show = sys.stderr.isatty() if show_progress is None else show_progress
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
        bucket = self.client.bucket(bucket_name)
        try:
            progress = None
            if show:
                from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

                from ftcli.output import err

                progress = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                                    TransferSpeedColumn(), console=err(), transient=True)
                progress.start()
                task = progress.add_task(f"downloading {prefix_uri}", total=total)
            for name, size in objects:
                target = staging / name[len(prefix):]
                target.parent.mkdir(parents=True, exist_ok=True)
                bucket.blob(name).download_to_filename(str(target), timeout=300)
                if progress is not None:
                    progress.advance(task, size)
            if progress is not None:
                progress.stop()
            if dest.exists():
                shutil.rmtree(dest)
            staging.rename(dest)
        except gexc.GoogleAPICallError as e:
            raise translate(e, service="storage", project=self.project, what=prefix_uri) from None
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        return total


def get_storage(project: str) -> StorageGateway:
    return StorageGateway(project)
