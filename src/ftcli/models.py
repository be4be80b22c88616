"""Download a job's exported model into a local folder without ever deleting or escaping it.

The model is read into a staging folder next to the destination first (nothing half-written is ever at the
destination). A new or empty destination then receives it whole; a non-empty one only with `force`, and then
only the model's own files are put in place: every other file stays, and the completion marker goes last.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path, PurePosixPath

from ftcli.errors import FtcliError, UsageError
from ftcli_trainer.storage import (
    COMPLETE_MARKER,
    UnsafeObjectName,
    relative_object_path,
    split_gcs,
    staging_dir,
)

MODELS_DIR = "ftcli-models"


def model_uri_of(job) -> str:
    base = job.job_spec.base_output_directory.output_uri_prefix
    if not base:
        raise FtcliError(f"{job.display_name} has no base output directory: it was not started by ftcli train")
    return base.rstrip("/") + "/model/"


def default_destination(job_name: str) -> Path:
    # Named by the numeric job id: the display name is chosen by whoever created the job, and may be a path.
    return Path(MODELS_DIR) / job_name.rsplit("/", 1)[-1]


def check_destination(dest: Path, force: bool) -> None:
    """Refuse, before anything is downloaded, a destination that is a file, or a non-empty folder without force."""
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest} is not a folder", hint="give a folder (new or empty) for the model")
    if dest.is_dir() and not force and any(dest.iterdir()):
        raise UsageError(f"{dest} is not empty",
                         hint="give a new or empty folder, or --force to write the model's files into it "
                              "(other files are kept; files with the model's names are replaced)")


def _model_files(uri: str, objects: list[tuple[str, int]]) -> list[tuple[str, PurePosixPath, int]]:
    """(object name, relative path, size) of the model's files; refuse the whole model if one name could
    land outside the destination."""
    _, prefix = split_gcs(uri)
    prefix = prefix + "/"
    files = []
    for name, size in objects:
        try:
            rel = relative_object_path(name, prefix)
        except UnsafeObjectName as e:
            raise FtcliError(f"refusing to download {uri}: {e}",
                             hint="nothing was written; the model folder holds objects ftcli did not write") from None
        if rel is not None:
            files.append((name, rel, size))
    return files


def _conflicts(dest: Path, rels: list[PurePosixPath]) -> list[str]:
    """Where a model file cannot go into an existing folder without deleting or following something."""
    problems = []
    for rel in rels:
        path = dest
        for part in rel.parts[:-1]:
            path = path / part
            if path.is_symlink() or (path.exists() and not path.is_dir()):
                problems.append(f"{path} is {'a link' if path.is_symlink() else 'a file'}; the model has a folder "
                                f"there")
                break
        else:
            target = dest.joinpath(*rel.parts)
            if target.is_dir() and not target.is_symlink():
                problems.append(f"{target} is a folder; the model has a file there")
    return problems


def place(staging: Path, dest: Path, rels: list[PurePosixPath]) -> None:
    """Move the downloaded files from `staging` into `dest`; the completion marker goes last."""
    if not dest.exists():
        staging.rename(dest)  # same filesystem: the whole model appears at once
        return
    problems = _conflicts(dest, rels)
    if problems:
        raise FtcliError(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
                         hint="move it away, or download into a new folder; nothing was changed")
    marker = dest / COMPLETE_MARKER
    if marker.is_file() or marker.is_symlink():
        marker.unlink()  # until the new marker lands, the folder does not claim to hold a complete model
    ordered = sorted(rels, key=lambda r: r == PurePosixPath(COMPLETE_MARKER))
    for rel in ordered:
        target = dest.joinpath(*rel.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging.joinpath(*rel.parts), target)


def download_model(ref: str, dest: Path | None, project: str | None, region: str | None, *,
                   force: bool = False) -> Path:
    """Copy a job's exported model to `dest` (default ./ftcli-models/JOB_ID); return the folder."""
    from ftcli.cli.jobs import resolve_job
    from ftcli.gcp.storage import get_storage

    gateway, name = resolve_job(ref, project, region)
    job = gateway.get(name)
    uri = model_uri_of(job)
    storage = get_storage(name.split("/")[1])
    files = _model_files(uri, storage.list_objects(uri))
    state = job.state.name.removeprefix("JOB_STATE_")
    if not any(rel == PurePosixPath(COMPLETE_MARKER) for _, rel, _ in files):
        raise FtcliError(f"{uri} holds no complete model (no {COMPLETE_MARKER} marker); the job is {state}",
                         hint=f"ftcli logs {ref} to see how it is going")
    dest = dest or default_destination(name)
    check_destination(dest, force)
    where = Path(os.path.abspath(dest))
    staging = staging_dir(where.parent, where.name or "download")
    try:
        bucket, _ = split_gcs(uri)
        storage.download_objects(bucket, [(n, staging.joinpath(*rel.parts)) for n, rel, _ in files],
                                 total=sum(size for _, _, size in files))
        place(staging, where, [rel for _, rel, _ in files])
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return dest
