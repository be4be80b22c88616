"""`ftcli train` as core code: validate everything, then package, upload, build and create the job.

Every check that can fail runs before the first byte is uploaded; the command module only parses and renders.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ftcli import history
from ftcli.catalog import Hardware, resolve_gpu
from ftcli.errors import UsageError
from ftcli.settings import Settings, raise_problems
from ftcli.settings import resolve as resolve_settings
from ftcli.spec import SUBMISSION_LABEL, JobRequest, build_custom_job, topology_problems
from ftcli.trainer_options import validate as validate_trainer
from ftcli_trainer.tasks import BUNDLED_SAMPLE, bundled_sample_file

TIMEOUT_RE = re.compile(r"^(\d+)([smhd]?)$")
LABEL_BAD = re.compile(r"[^a-z0-9_-]")
DATA_OPTIONS = ("train_file", "eval_file")


def parse_timeout(value: str) -> int:
    m = TIMEOUT_RE.match(value.strip().lower())
    if not m or int(m.group(1)) <= 0:
        raise UsageError(f"--timeout must be a positive duration like 90m, 24h or 2d, got {value!r}")
    return int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def label_value(value: str) -> str:
    """Vertex label values: lowercase letters, digits, '_' and '-', at most 63 characters."""
    return LABEL_BAD.sub("-", value.lower())[:63].strip("-") or "none"


def parse_labels(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        for pair in filter(None, (p.strip() for p in item.split(","))):
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise UsageError(f"--labels takes KEY=VALUE pairs, got {pair!r}")
            out[key.strip()] = value.strip()
    return out


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass
class Submission:
    settings: Settings
    hardware: Hardware
    job: dict
    display_name: str
    submission_id: str
    package_uri: str
    base_output_dir: str
    uploads: list[tuple[Path, str]] = field(default_factory=list)  # (local file, gs:// URI)


def plan(*, trainer: dict[str, Any], gpu: str, machine_type: str | None, replicas: int, reduction_server: int,
         spot: bool, image: str | None, timeout: str, labels: list[str], display_name: str | None,
         project: str | None, region: str | None, bucket: str | None, service_account: str | None) -> Submission:
    """Everything that needs no network: resolve, validate (all problems at once), build the CustomJob."""
    from ftcli.packaging import TrainerPackage

    problems: list[str] = []
    if trainer.get("task") in (None, BUNDLED_SAMPLE) and not trainer.get("train_file"):
        # The bundled sample is not part of the trainer package: send it as data files, like a user's CSV.
        trainer = {**trainer, "train_file": str(bundled_sample_file("sst2_train.csv.gz")),
                   "eval_file": str(bundled_sample_file("sst2_validation.csv.gz"))}

    def collect(fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UsageError as e:
            problems.extend(e.problems or [e.message])
            return None

    settings = collect(resolve_settings, project=project, region=region, bucket=bucket,
                       service_account=service_account)
    validated = collect(validate_trainer, trainer)
    hardware = collect(resolve_gpu, gpu, machine_type)
    timeout_s = collect(parse_timeout, timeout)
    user_labels = collect(parse_labels, labels) or {}
    problems += topology_problems(replicas, reduction_server, gpu=hardware is None or hardware.gpu)
    local_files: dict[str, Path] = {}
    for name in DATA_OPTIONS:
        value = trainer.get(name)
        if value and not str(value).startswith("gs://"):
            path = Path(value).expanduser()
            if not path.is_file():
                problems.append(f"--{name.replace('_', '-')} {value}: no such file (give a local file or a gs:// URI)")
            else:
                local_files[name] = path
    if problems:
        raise_problems(problems, "options")
    assert settings and validated and hardware and timeout_s
    cfg, _ = validated

    submission_id = secrets.token_hex(6)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    display = display_name or f"ftcli-{cfg.task}-{stamp}"
    package = TrainerPackage.current()
    package_uri = settings.gcs_path("packages", package.filename)
    base_output_dir = settings.gcs_path("runs", display) + "/"

    forwarded = dict(trainer)
    uploads = []
    for name, path in local_files.items():
        uri = settings.gcs_path("data", file_digest(path)[:16], path.name)
        uploads.append((path, uri))
        forwarded[name] = uri
    _, args = validate_trainer(forwarded)

    all_labels = {
        **user_labels,
        # ftcli's own labels win: `jobs list` and the idempotent create depend on them
        "created-by": "ftcli",
        "ftcli-task": label_value(cfg.task),
        "ftcli-model": label_value(cfg.model.rsplit("/", 1)[-1]),
        SUBMISSION_LABEL: submission_id,
    }
    request = JobRequest(
        project=settings.project, region=settings.region, display_name=display, hardware=hardware,
        package_uri=package_uri, args=tuple(args), base_output_dir=base_output_dir, replicas=replicas,
        reduction_server=reduction_server, spot=spot, timeout_s=timeout_s, service_account=settings.service_account,
        labels=tuple(sorted(all_labels.items())),
        image=image,
    )
    job = build_custom_job(request)
    return Submission(settings=settings, hardware=hardware, job=job, display_name=display,
                      submission_id=submission_id, package_uri=package_uri, base_output_dir=base_output_dir,
                      uploads=uploads)


def submit(sub: Submission) -> tuple[Any, int, int]:
    """Check the bucket, upload what is missing, create the job. Returns (job, short id, bytes uploaded)."""
    import tempfile

    from ftcli.gcp.storage import get_storage
    from ftcli.gcp.vertex import get_vertex
    from ftcli.packaging import build_sdist

    storage = get_storage(sub.settings.project)
    storage.check_bucket(sub.settings.bucket_name, sub.settings.region)
    sent = 0
    if not storage.exists(sub.package_uri):
        with tempfile.TemporaryDirectory(prefix="ftcli-pkg-") as tmp:
            sdist = build_sdist(Path(tmp))
            sent += storage.upload_if_absent(sdist, sub.package_uri)
    for path, uri in sub.uploads:
        sent += storage.upload_if_absent(path, uri)
    vertex = get_vertex(sub.settings.project, sub.settings.region)
    job = vertex.create_custom_job(sub.job, sub.submission_id)
    n = history.record(job.name, sub.display_name, project=sub.settings.project, region=sub.settings.region,
                       created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                       base_output_dir=sub.base_output_dir)
    return job, n, sent
