"""Cloud Storage gateway: check the bucket, upload create-only-if-absent with retries and progress."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ftcli.errors import FtcliError
from ftcli.gcp import translate
from ftcli_trainer.storage import split_gcs as split_uri

TRANSFER_WORKERS = 8


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

    def download_objects(self, bucket_name: str, pairs: list[tuple[str, Path]], *, total: int | None = None,
                         show_progress: bool | None = None) -> int:
        """Download objects of `bucket_name` to the given local files, in parallel (transfer_manager's
        threads); return the bytes read. The caller picks the paths: this writes only where it is told."""
        import time
        from concurrent.futures import ThreadPoolExecutor

        from google.api_core import exceptions as gexc
        from google.cloud.storage import transfer_manager

        bucket = self.client.bucket(bucket_name)
        for _, target in pairs:
            target.parent.mkdir(parents=True, exist_ok=True)
        jobs = [(bucket.blob(name), str(target)) for name, target in pairs]

        def fetch() -> None:
            transfer_manager.download_many(jobs, download_kwargs={"timeout": 300}, raise_exception=True,
                                           worker_type=transfer_manager.THREAD, max_workers=TRANSFER_WORKERS)

        def done_bytes() -> int:
            return sum(t.stat().st_size for _, t in pairs if t.exists())

        show = sys.stderr.isatty() if show_progress is None else show_progress
        try:
            if not show:
                fetch()
            else:
                from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

                from ftcli.output import err

                columns = ("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                           TransferSpeedColumn())
                # transfer_manager reports nothing until every file is done: show the bytes on disk meanwhile.
                with Progress(*columns, console=err(), transient=True) as progress, ThreadPoolExecutor(1) as pool:
                    task = progress.add_task(f"downloading {len(pairs)} files", total=total)
                    future = pool.submit(fetch)
                    while not future.done():
                        progress.update(task, completed=done_bytes())
                        time.sleep(0.2)
                    future.result()
        except gexc.GoogleAPICallError as e:
            raise translate(e, service="storage", project=self.project, what=f"gs://{bucket_name}") from None
        return done_bytes()


def get_storage(project: str) -> StorageGateway:
    return StorageGateway(project)
