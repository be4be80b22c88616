"""`ftcli train` as core code: validate everything, then package, upload, build and create the job.

Every check that can fail runs before the first byte is uploaded; the command module only parses and renders.
`plan` also says what the job may cost (`catalog.estimate`) and what ftcli chose for the user (notes); `submit`
reports upload progress and retries through the callbacks it is given.
"""

from __future__ import annotations

import datetime as dt
import errno
import hashlib
import os
import re
import secrets
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from ftcli import history
from ftcli.catalog import Estimate, Hardware, resolve_gpu
from ftcli.errors import NoCapacity, Rejected, UsageError, gather
from ftcli.settings import Settings, object_name_length_problem, object_name_of, object_name_problem, raise_problems
from ftcli.settings import resolve as resolve_settings
from ftcli.spec import (
    CREATED_BY_LABEL,
    GPU_LABEL,
    MAX_LABELS,
    MODEL_LABEL,
    SUBMISSION_LABEL,
    TASK_LABEL,
    JobRequest,
    build_custom_job,
    gcs_mount_path,
    label_value,
    model_label,
    topology_problems,
)
from ftcli.trainer_options import validate as validate_trainer
from ftcli_trainer.config import Problem, hint_of
from ftcli_trainer.model import folder_max_length_problem, model_problem, resolve_model_path
from ftcli_trainer.tasks import BUNDLED_SAMPLE, bundled_sample_file

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from ftcli.gcp import Notify
    from ftcli.gcp.storage import Progress, StorageGateway
    from ftcli.values import Job, TuningJob
    from ftcli_trainer.config import TrainConfig

    # output.transfer: a context manager for one upload (given its description) that yields its progress callback,
    # or None
    Uploading = Callable[[str], AbstractContextManager[Progress | None]]

P = ParamSpec("P")
T = TypeVar("T")

DURATION_RE = re.compile(r"^(\d+)([smhd])$")
# google.protobuf.Duration's seconds "Must be from -315,576,000,000 to +315,576,000,000 inclusive" (duration.proto;
# the installed protobuf 7.36's json_format refuses more, well_known_types._DURATION_SECONDS_MAX; read 2026-11-27).
MAX_DURATION_S = 315_576_000_000
DATA_OPTIONS = ("train_file", "eval_file")


def gcs_file_problem(flag: str, uri: str) -> str | None:
    """A gs:// data file must name a bucket and an object in it (whether it is there is asked at staging)."""
    from ftcli.settings import check_bucket
    from ftcli_trainer.storage import split_gcs

    if (p := check_bucket(uri, flag, staging=False)) is not None:
        return p
    if not split_gcs(uri)[1] or uri.endswith("/"):
        return f"{flag} {uri} names no file; give gs://BUCKET/PATH/FILE (a CSV or JSON Lines file)"
    return None


def parse_duration(value: str, flag: str = "--timeout") -> int:
    """Seconds in `90m`, `24h`, `2d` or `3600s`: a bare number is refused (minutes? hours?)."""
    m = DURATION_RE.match(value.strip().lower())
    if not m or int(m.group(1)) <= 0:
        raise UsageError(f"{flag} needs a positive duration with a unit, like 30m, 6h or 2d (got {value!r})")
    seconds = int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    if seconds > MAX_DURATION_S:
        # It reached the create call, after the upload, and broke there with a traceback.
        raise UsageError(f"{flag} {value} is longer than a job's duration can be (google.protobuf.Duration: about "
                         "10,000 years): give a shorter one")
    return seconds


def parse_max_wait(value: str) -> int:
    """--max-wait: a duration, or 0 (with or without a unit) to queue for the machines however long it takes.
    Scheduling.maxWaitDuration: "A value of 0 means that the job waits indefinitely until the requested resources
    become available. The default is 24 hours" ("Schedule training jobs based on resource availability",
    https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws, read 2026-11-27; the same in the
    installed aiplatform_v1 Scheduling.max_wait_duration docstring, google-cloud-aiplatform 2.7.0)."""
    if re.fullmatch(r"0+[smhd]?", value.strip().lower()):
        return 0
    return parse_duration(value, "--max-wait")


TRY_LABEL = "ftcli_try"  # which of several --gpu/--region candidates a job is


def local_data_problem(flag: str, value: str) -> UsageError | None:
    """Why the local data file `value` given to `flag` cannot be read (a folder: the data files in it to pick from, as
    the trainer says it, with its hint; nothing there), or None: `ftcli train` and `ftcli local` say it before anything
    starts."""
    path = Path(value).expanduser()
    if path.is_dir():
        from ftcli_trainer.data import local_file_error

        error = local_file_error(value)
        assert error is not None  # (a folder)
        return UsageError(f"{flag}: {error}", hint=error.hint)
    if not path.is_file():
        from ftcli_trainer.data import NOT_A_FILE_HINT, not_a_regular_file

        if (kind := not_a_regular_file(path)) is not None:
            # (`--train-file /dev/stdin`, `<(zcat data.csv.gz)`: "no such file" of a pipe that was there)
            return UsageError(f"{flag} {value} is {kind}, not a file", hint=NOT_A_FILE_HINT)
        return UsageError(f"{flag} {value}: no such file (give a local file or a gs:// URI)")
    return None


def parse_labels(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        for pair in filter(None, (p.strip() for p in item.split(","))):
            key, sep, value = pair.partition("=")
            key = key.strip()
            if not sep or not key:
                # (the form alone, without one written out; the example is in the line, which reads whole in the
                # pre-flight's list of problems)
                raise UsageError(f"--labels takes KEY=VALUE pairs, e.g. --labels team=nlp,owner=ana; got {pair!r}")
            if key in out and out[key] != value.strip():  # the last one won, without a word
                raise UsageError(f"--labels gives {key} twice ({out[key]!r} and {value.strip()!r}): keep one")
            # ftcli's own won, without a word (ftcli_try comes from plan_candidates through this same list)
            if key == CREATED_BY_LABEL or (key.startswith("ftcli_") and key != TRY_LABEL):
                raise UsageError(f"--labels {key}: ftcli sets the {key} label itself (jobs list and the job "
                                 "lookup read it); pick another key")
            out[key] = value.strip()
    return out


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def model_upload(settings: Settings, folder: Path, given: str | None = None,
                 notes: list[str] | None = None) -> tuple[str, list[tuple[Path, str]]]:
    """A local model folder's place in the bucket, content-addressed (the same model is uploaded once): the /gcs/
    path a job's trainer reads it from, and the (file, gs:// URI) uploads that put it there. `given` is how the
    user named the folder in errors (default `--model FOLDER`); what is left out is said in `notes`."""
    left_out: list[Path] = []
    hidden: list[Path] = []
    digest, files = folder_digest(folder, given, left_out, hidden)

    def named(paths: list[Path]) -> str:
        return ", ".join(str(p.relative_to(folder)) for p in paths[:3]) + (", …" if len(paths) > 3 else "")

    name = given or f"--model {folder}"
    if hidden and notes is not None:
        notes.append(f"{name}: {len(hidden)} hidden file(s) left out ({named(hidden)}); from_pretrained reads none, "
                     "and a .env or token file there stays here")
    if left_out and notes is not None:
        size = sum(p.stat().st_size for p in left_out if p.exists())  # (a dangling link there is left out too)
        notes.append(f"{name}: {len(left_out)} file(s) of a Hugging Face Trainer's training state left out "
                     f"({size / 1e6:,.1f} MB: {named(left_out)}); the model is read without them")
    base = settings.gcs_path("models", digest[:16])
    uploads = [(f, f"{base}/{f.relative_to(folder).as_posix()}") for f in files]
    for f, uri in uploads:
        if (p := object_name_length_problem(uri)) is not None:
            raise UsageError(f"{name}: the file {f.relative_to(folder).as_posix()}: {p}: shorten its path in the "
                             "folder, or the bucket's prefix", hint=OBJECT_NAMES_HINT)
    return gcs_mount_path(base), uploads


# What the Hugging Face Trainer writes beside a model and into its checkpoint-N/ folders, which from_pretrained never
# reads: its training state (transformers 5.24 trainer.py: TRAINING_ARGS_NAME "training_args.bin", TRAINER_STATE_NAME
# "trainer_state.json", OPTIMIZER_NAME "optimizer.pt", OPTIMIZER_NAME_BIN "optimizer.bin", SCHEDULER_NAME
# "scheduler.pt", SCALER_NAME "scaler.pt", _save_rng_state's rng_state.pth / rng_state_RANK.pth) and its checkpoints
# (trainer_utils.PREFIX_CHECKPOINT_DIR "checkpoint", as checkpoint-STEP). A model saved by the Trainer's output_dir
# held every checkpoint's weights and optimizer (twice the weights' size each): gigabytes uploaded for nothing.
TRAINER_STATE_FILES = frozenset({"training_args.bin", "trainer_state.json", "optimizer.pt", "optimizer.bin",
                                 "scheduler.pt", "scaler.pt"})
_TRAINER_STATE_RE = re.compile(r"^rng_state(?:_\d+)?\.pth$")
_TRAINER_CHECKPOINT_RE = re.compile(r"^checkpoint-\d+$")


def _trainer_state(rel: Path) -> bool:
    return rel.name in TRAINER_STATE_FILES or bool(_TRAINER_STATE_RE.match(rel.name)) or \
        any(_TRAINER_CHECKPOINT_RE.match(part) for part in rel.parts[:-1])


def folder_digest(root: Path, given: str | None = None, left_out: list[Path] | None = None,
                  hidden: list[Path] | None = None) -> tuple[str, list[Path]]:
    """sha256 over a folder's relative file names and bytes (a .git folder left out), and the files in a stable
    order. A symbolic link to a file counts as that file under the link's name, as from_pretrained reads it: a
    Hugging Face cache snapshot (snapshots/SHA/) is all links into ../../blobs/. Links to folders, dangling links,
    link loops and anything that is not a regular file are refused. A Hugging Face Trainer's training state and
    checkpoints are left out too (appended to `left_out`), and so are hidden files and folders (appended to
    `hidden`). `given` names the folder in errors (default `--model ROOT`)."""
    name = given or f"--model {root}"
    hidden = [] if hidden is None else hidden
    left_out = [] if left_out is None else left_out
    entries = []
    # (rglob does not descend into linked folders, and is_dir() follows links: a link to a folder is found below.)
    for p in sorted(p for p in root.rglob("*") if p.is_symlink() or not p.is_dir()):
        parts = p.relative_to(root).parts
        if ".git" in parts:
            continue  # a model cloned with git (git lfs) holds its weights twice: once in .git, never read
        if any(part.startswith(".") for part in parts):
            # No model file is hidden; what is (a .env with keys, `hf download --local-dir`'s .cache/) would be
            # readable by everyone who reads the bucket.
            hidden.append(p)
        elif _trainer_state(p.relative_to(root)):
            left_out.append(p)
        else:
            entries.append(p)
    for p in entries:
        rel = str(p.relative_to(root))
        if p.is_symlink():
            try:
                target = p.resolve(strict=True)
            except FileNotFoundError:
                raise UsageError(f"{name}: {rel} is a symbolic link to {os.readlink(p)}, which does not exist: "
                                 "fetch the missing file again (a Hugging Face cache: download the model again) "
                                 "or remove the link") from None
            except (RuntimeError, OSError) as e:  # a loop: RuntimeError up to Python 3.12, OSError ELOOP from 3.13
                why = "is a symbolic link loop" if isinstance(e, RuntimeError) or e.errno == errno.ELOOP else \
                    f"is a symbolic link that cannot be followed ({e.strerror})"
                raise UsageError(f"{name}: {rel} {why}: remove it or point it at a file") from None
            if target.is_dir():
                raise UsageError(f"{name}: {rel} is a symbolic link to a folder ({os.readlink(p)}): put the folder "
                                 "itself there, or give a folder without links to folders")
        if not p.is_file():
            raise UsageError(f"{name}: {rel} is not a regular file (a pipe, socket or device): remove it")
        if (problem := object_name_problem(rel)) is not None:
            raise UsageError(f"{name}: the file name {rel!r} {problem}: rename it")
    h = hashlib.sha256()
    for p in entries:
        # as_posix: str() is "sub\\f" on Windows, and the same folder's digest (its bucket prefix) differed there.
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + file_digest(p).encode() + b"\0")
    return h.hexdigest(), entries


@dataclass
class Submission:
    settings: Settings
    hardware: Hardware
    job: dict
    display_name: str
    submission_id: str
    package_uri: str
    base_output_dir: str
    image: str
    extras: tuple[str, ...] = ()
    # The Secret Manager secrets the job reads (checked to exist before submitting), each with the variable its value
    # usually comes from (for the hint that makes one): --wandb-secret's, --hf-secret's.
    secrets: tuple[tuple[str, str], ...] = ()
    trainer: dict[str, Any] = field(default_factory=dict)  # the trainer options with local paths (--smoke runs them)
    uploads: list[tuple[Path, str]] = field(default_factory=list)  # (local file, gs:// URI)
    notes: list[str] = field(default_factory=list)  # said before submitting (e.g. an image ftcli cannot check)
    estimate: Estimate = field(kw_only=True)  # plan always works it out (its amounts may be missing)
    create_sent: bool = False  # the create call has started: after a Ctrl-C, Vertex may hold a job of ours


def _varlen_problem(cfg: TrainConfig, hardware: Hardware) -> str | None:
    """--varlen-attention where the job would leave it off (the trainer's own rule): said now, not found in the
    job's log."""
    why = _varlen_refusal(cfg, hardware) if cfg.varlen_attention else ""
    return f"--varlen-attention would be left off in this job ({why}): leave it out" if why else None


def _cpu_precision_problem(cfg: TrainConfig, hardware: Hardware) -> Problem | None:
    """A precision the trainer refuses on a CPU machine (--gpu none): said now, not after the job's machine started,
    with the trainer's fix or a GPU as the hint."""
    from ftcli_trainer.task import precision_problem, resolve_precision

    if hardware.gpu:
        return None
    problem = precision_problem(resolve_precision(cfg.precision, "cpu", None), "cpu")
    return Problem(f"{problem} (--gpu none is a CPU machine)", hint=f"{problem.hint}, or give --gpu a GPU (--gpu T4)"
                   ) if problem else None


def _varlen_refusal(cfg: TrainConfig, hardware: Hardware) -> str:
    from ftcli_trainer.model import flash_refusal

    cc = hardware.compute_capability
    major, _, minor = (cc or "").partition(".")
    return flash_refusal((int(major), int(minor)) if cc else None, cfg.precision)


def _region_problem(hw: Hardware, region: str) -> str | None:
    from ftcli import regions

    if hw.gpu_name is None or region not in regions.VERTEX_REGIONS or regions.offers(region, hw.gpu_name):
        return None
    near = regions.regions_with(hw.gpu_name, region)
    where = f": try --region {' or '.join(near)}" if near else ""
    return f"{region} does not offer {hw.gpu_name} GPUs for training{where}"


def _image_problems(image: str | None, hw: Hardware, notes: list[str],
                    mirror: str | None = None) -> tuple[str, list[str]]:
    """The image the job runs (`--image`, else ftcli's image for the GPU, through the configured image-mirror when
    there is one) and why it cannot run the trainer on `hw`."""
    from ftcli import images
    from ftcli.packaging import REQUIRES_PYTHON, TRAINER_DEPENDENCIES

    if not image and mirror:
        default = images.default_image(hw)
        path = images.docker_hub_path(default.uri)
        assert path is not None  # ftcli's images are Docker Hub's
        return f"{mirror}/{path}", images.problems(default, hw, REQUIRES_PYTHON, TRAINER_DEPENDENCIES)
    chosen = images.known(image) if image else images.default_image(hw)
    if chosen is None and image and (upstream := images.mirror_of(image)) is not None:
        notes.append(f"--image {image}: checked as Docker Hub's {upstream.ref}, which an Artifact Registry remote "
                     "repository serves under that path")
        return image, images.problems(upstream, hw, REQUIRES_PYTHON, TRAINER_DEPENDENCIES)
    if chosen is None:
        assert image  # default_image always finds one
        if problem := images.prebuilt_problem(image, REQUIRES_PYTHON):
            return image, [problem]
        if problem := images.pytorch_tag_problem(image, TRAINER_DEPENDENCIES):
            return image, [problem]
        notes.append(f"--image {image}: ftcli cannot check this image; it needs Python {REQUIRES_PYTHON} with pip, "
                     "and torch>=2.6 built for the GPU (the trainer is pip-installed into it at start)")
        return image, []
    return chosen.uri, images.problems(chosen, hw, REQUIRES_PYTHON, TRAINER_DEPENDENCIES)


def _local_data_problems(cfg: TrainConfig, local_files: dict[str, Path], done: dict | None = None,
                         say: Callable[[str], None] | None = None,
                         searched: AbstractSet[str] = frozenset()) -> list[str]:
    """Read local data files with the trainer's own readers (columns, labels, encoding): a wrong column shows up
    here, not after the GPUs are billed; and with the number of rows trained on, an --early-stopping that --eval-every
    leaves no room to stop with any number of GPUs (unless `searched`, a tuning job's, varies what counts the steps).
    `done` keeps the answer for the next candidate of `--gpu L4,T4`: each read a 1 GB file again (20 s more per
    candidate) and said its warnings again."""
    if not local_files:
        return []  # before the imports: the trainer's readers bring numpy (0.2 s of every `train --dry-run`)
    import dataclasses

    from ftcli_trainer.config import early_stopping_data_problem
    from ftcli_trainer.data import SAY_READING_BYTES, check_files
    from ftcli_trainer.errors import TrainerError
    from ftcli_trainer.storage import size_text

    # Candidates differ only in --varlen-attention (dropped where the GPU lacks it), which reading does not use.
    key = ("check", repr(dataclasses.replace(cfg, varlen_attention=False)),
           tuple(sorted(map(str, local_files.items()))))
    if done is not None and key in done:
        if isinstance(done[key], UsageError):
            raise done[key]
        return done[key]
    sizes = {p: p.stat().st_size for p in local_files.values()}
    if say is not None and sum(sizes.values()) >= SAY_READING_BYTES:  # the trainer's own threshold and wording
        say(f"reading {', '.join(f'{p.name} ({size_text(n)})' for p, n in sizes.items())} with the trainer's readers, "
            f"to check {'it' if len(sizes) == 1 else 'them'} before anything is uploaded")
    try:
        rows = check_files(cfg, {k: str(v) for k, v in local_files.items()})
    except TrainerError as e:
        # Alone (plan reads the data only once every other option passed), so said with the trainer's hint: a list
        # of problems keeps none, and "no column 'body' (columns: text, label)" lost its "pass --text-column NAME".
        error = UsageError(str(e), hint=e.hint)
        if done is not None:
            done[key] = error
        raise error from None
    problems = []
    counting = {"early_stopping", "eval_every", "epochs", "batch_size", "gradient_accumulation_steps",
                "max_train_samples", "fraction_of_train_data", "eval_fraction"}
    if rows is not None and not searched & counting and (p := early_stopping_data_problem(cfg, rows)):
        problems.append(p)  # (a job would only warn, its machines billed, and train to the end)
    if done is not None:
        done[key] = problems
    return problems


def hub_model_problem(cfg: TrainConfig, notes: list[str], checks: dict | None, *, job_has_token: bool,
                      model: str | None = None,
                      flag: str = "--model") -> str | None:
    """What the Hugging Face Hub says is wrong with a Hub `--model` (`model`, default cfg.model) for a job that gets a
    token or not (`ftcli.hub.check_model`); a note (the Hub unreachable, say) is added to `notes`. `checks` carries
    the answers from one candidate's plan to the next, so the Hub is asked once."""
    from ftcli import hub
    from ftcli_trainer.model import MINILM, MINILM_ALIASES
    from ftcli_trainer.tasks import TASKS

    name = model or cfg.model
    repo_id = MINILM if name in MINILM_ALIASES else name  # the job has no MiniLM wheel: it downloads the Hub's
    known = checks if checks is not None else {}
    key = ("hub", repo_id, flag, job_has_token)
    if key not in known:
        known[key] = hub.check_model(repo_id, job_has_token=job_has_token, flag=flag,
                                     default=TASKS[cfg.task].default_model, checks=known)
    problem, note = known[key]
    if note and note not in notes:
        notes.append(note)
    return problem


def plan(*, trainer: dict[str, Any], gpu: str, machine_type: str | None, replicas: int, reduction_server: int,
         spot: bool, image: str | None, timeout: str, labels: list[str], display_name: str | None,
         project: str | None, region: str | None, bucket: str | None, service_account: str | None,
         flex_start: bool = False, max_wait: str | None = None, reservation: str | None = None,
         data_checks: dict | None = None, say: Callable[[str], None] | None = None,
         look_up_model: bool = True, searched: AbstractSet[str] = frozenset()) -> Submission:
    """Everything that needs no cloud account: resolve, validate (all problems at once), build the CustomJob; a Hub
    --model is looked up on the Hugging Face Hub (`hub_model_problem`) once everything else passes, unless
    `look_up_model` is False (a tuning job's model search: its trials never use the trial job's own --model).
    `searched`: the options a tuning job's trials vary (their values here are not the trials').
    `data_checks` carries what reading the local data files found (and their hashes) from one candidate's plan to
    the next. `say(message)` hears what takes a while (reading big local data)."""
    from ftcli import catalog
    from ftcli.packaging import TrainerPackage
    from ftcli_trainer.tasks import TASKS

    problems: list[str] = []
    hints: list[str] = []  # what the errors gathered by `collect` say to do about them
    notes: list[str] = []
    image_uri = ""
    if trainer.get("task") in (None, BUNDLED_SAMPLE) and not trainer.get("train_file"):
        # The bundled sample is not part of the trainer package: send it as data files, like a user's CSV.
        trainer = {**trainer, "train_file": str(bundled_sample_file("sst2_train.csv.gz")),
                   "eval_file": str(bundled_sample_file("sst2_validation.csv.gz"))}

    def collect(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T | None:
        try:
            return fn(*args, **kwargs)
        except UsageError as e:
            gather(e, problems, hints)
            return None

    def add(problem: str) -> None:
        # A problem found here whose fix is its hint (config.Problem): the fix goes with the gathered errors' hints,
        # which raise_problems says on the hint line (a plain str in the list lost it)
        problems.append(str(problem))
        if (hint := hint_of(problem)) and hint not in hints:
            hints.append(hint)

    settings = collect(resolve_settings, project=project, region=region, bucket=bucket,
                       service_account=service_account)
    validated = collect(validate_trainer, trainer)
    hardware = collect(resolve_gpu, gpu, machine_type)
    timeout_s = collect(parse_duration, timeout)
    max_wait_s = collect(parse_max_wait, max_wait) if max_wait else None
    if max_wait and not flex_start:
        problems.append("--max-wait is how long a --flex-start job queues for machines: add --flex-start")
    if display_name is not None and not display_name.strip():
        # (`--display-name "$NAME"` with NAME unset: the job went out as ftcli-TASK-TIME without a word)
        problems.append("--display-name is empty: give the job a name, or leave --display-name out for "
                        "ftcli-TASK-TIME")
    user_labels = collect(parse_labels, labels) or {}
    # ftcli_try (several candidates) comes in through --labels' list: it is ftcli's, not the user's
    own = [CREATED_BY_LABEL, TASK_LABEL, MODEL_LABEL, GPU_LABEL, SUBMISSION_LABEL] + [TRY_LABEL] * (
        TRY_LABEL in user_labels)
    given = len(user_labels) - (TRY_LABEL in user_labels)
    if given + len(own) > MAX_LABELS:  # it was said as "65 labels; Vertex allows at most 64" to someone who gave 60
        problems.append(f"--labels gives {given} labels and ftcli adds {len(own)} of its own ({', '.join(own)}): "
                        f"Vertex allows at most {MAX_LABELS} in all, so give at most {MAX_LABELS - len(own)}")
    problems += topology_problems(replicas, reduction_server, gpu=hardware is None or hardware.gpu)
    if hardware is not None:
        problems += catalog.provisioning_problems(hardware, spot=spot, flex_start=flex_start, reservation=reservation,
                                                  timeout_s=timeout_s or 0, reduction_server=reduction_server)
        if settings is not None and (p := _region_problem(hardware, settings.region)):
            problems.append(p)
        if settings is not None and (p := catalog.reservation_region_problem(reservation, settings.region)):
            problems.append(p)
        image_uri, image_problems = _image_problems(image, hardware, notes,
                                                    settings.image_mirror if settings is not None else None)
        problems += image_problems
    local_files: dict[str, Path] = {}
    for name in DATA_OPTIONS:
        value = trainer.get(name)
        if value and str(value).startswith("gs://"):
            if (p := gcs_file_problem(f"--{name.replace('_', '-')}", str(value))) is not None:
                problems.append(p)
        elif value:
            if (e := local_data_problem(f"--{name.replace('_', '-')}", str(value))) is not None:
                gather(e, problems, hints)
            else:
                local_files[name] = Path(value).expanduser()
    if validated and validated[0].wandb_project and not validated[0].wandb_secret:
        add(Problem("--wandb-project on Vertex reads the W&B key from Secret Manager (the key is never passed in the "
                    "job), and no --wandb-secret is given", hint="add --wandb-secret projects/PROJECT/secrets/NAME (a "
                    "secret that holds the key: printf %s \"$WANDB_API_KEY\" | gcloud secrets create NAME "
                    "--data-file=-)"))
    if validated and hardware is not None and (p := _varlen_problem(validated[0], hardware)):
        problems.append(p)
    if validated and hardware is not None and (p := _cpu_precision_problem(validated[0], hardware)):
        add(p)
    model_dir = None
    if validated and (p := model_problem(validated[0].model)):
        problems.append(p)  # a mistyped folder would reach the job as a Hub id, and fail there
    elif validated:
        if Path(validated[0].model).expanduser().is_dir():
            model_dir = Path(validated[0].model).expanduser()
        # A local folder's limit (the offline MiniLM's folder stands for the Hub's copy the job reads: the same
        # files): the job loaded the data and the model, then stopped on it.
        folder = resolve_model_path(validated[0].model)
        if os.path.isdir(folder) and (p := folder_max_length_problem(folder, validated[0].max_length,
                                                                     validated[0].model)):
            problems.append(p)
    if validated and not problems and model_dir is None and look_up_model:
        # A gated or private Hub model loads in the job only with the token --hf-secret has it read
        if p := hub_model_problem(validated[0], notes, data_checks, job_has_token=bool(validated[0].hf_secret)):
            problems.append(p)
    if validated and not problems:
        problems += _local_data_problems(validated[0], local_files, data_checks, say, searched)
    if problems:
        raise_problems(problems, "options", hints)
    assert settings and validated and hardware and timeout_s
    cfg, _ = validated

    submission_id = secrets.token_hex(6)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    # The submission's first 4 hex digits: a sweep's jobs started in one second (`ftcli train ... &` in a loop) had
    # one name each in the console; they are told apart there now, and each names its run folder's suffix.
    display = display_name or f"ftcli-{cfg.task}-{stamp}-{submission_id[:4]}"
    package = TrainerPackage.current()
    package_uri = settings.gcs_path("packages", package.filename)
    # Every submission has its own output folder: two jobs with one display name never share checkpoints.
    base_output_dir = settings.gcs_path("runs", f"{label_value(display)}-{submission_id}")

    forwarded = dict(trainer)
    uploads = []
    for name, path in local_files.items():
        # Named by its contents; the file's own name is kept for the reader (its .csv/.jsonl/.gz) and the logs, but
        # without line breaks or bytes that are not UTF-8, which Cloud Storage object names cannot hold
        # (settings.object_name_problem).
        known = data_checks if data_checks is not None else {}
        if ("digest", path) not in known:
            known["digest", path] = file_digest(path)
        uri = settings.gcs_path("data", known["digest", path][:16], object_name_of(path.name))
        uploads.append((path, uri))
        forwarded[name] = uri
    if (p := _object_names_problem(settings, package_uri, uploads, local_files)) is not None:
        raise UsageError(p, hint=OBJECT_NAMES_HINT)
    if model_dir is not None:
        # A local model folder is not there inside the job: upload it content-addressed and point the trainer at
        # its /gcs/ mount, which from_pretrained reads like a local folder.
        forwarded["model"], model_uploads = model_upload(settings, model_dir, notes=notes)
        uploads += model_uploads
    _, args = validate_trainer(forwarded)
    task = TASKS[cfg.task]
    extras = (("hub",) if task.hf_dataset is not None and not cfg.train_file else ()) + \
        (("wandb",) if cfg.wandb_project else ()) + (("secrets",) if cfg.hf_secret and not cfg.wandb_project else ())

    all_labels = {
        **user_labels,
        # ftcli's own labels win: `jobs list` and the idempotent create depend on them
        CREATED_BY_LABEL: "ftcli",
        TASK_LABEL: label_value(cfg.task),
        MODEL_LABEL: model_label(cfg.model),
        GPU_LABEL: label_value(hardware.gpu_name or "cpu"),
        SUBMISSION_LABEL: submission_id,
    }
    request = JobRequest(
        project=settings.project, region=settings.region, display_name=display, hardware=hardware,
        image=image_uri, package_uri=package_uri, extras=extras, args=tuple(args), base_output_dir=base_output_dir,
        replicas=replicas, reduction_server=reduction_server, spot=spot, flex_start=flex_start,
        max_wait_s=max_wait_s, reservation=reservation, timeout_s=timeout_s,
        service_account=settings.service_account, labels=tuple(sorted(all_labels.items())),
    )
    job = build_custom_job(request)
    if (implied := catalog.implied_count(gpu, hardware)) is not None:
        notes.insert(0, implied)
    if (retired := catalog.end_of_support_warning(hardware)) is not None:
        notes.append(retired)  # a GPU past Google's end of support: said, but Vertex decides
    if (rdma := catalog.rdma_note(hardware, replicas)) is not None:
        notes.append(rdma)
    from ftcli import prices

    table, why = prices.for_region(settings.region)
    cost = catalog.estimate(hardware, replicas=replicas, reduction_server=reduction_server, timeout_s=timeout_s,
                            region=settings.region, prices=table, missing=why)
    return Submission(settings=settings, hardware=hardware, job=job, display_name=display,
                      submission_id=submission_id, package_uri=package_uri, base_output_dir=base_output_dir,
                      image=image_uri, extras=extras, secrets=job_secrets(cfg), trainer=trainer, uploads=uploads,
                      notes=notes, estimate=cost)


OBJECT_NAMES_HINT = ("ftcli names what it uploads PREFIX/ftcli/packages|data|models/...: the bucket's prefix counts "
                     "towards every name")


def _object_names_problem(settings: Settings, package_uri: str, uploads: list[tuple[Path, str]],
                          local_files: dict[str, Path]) -> str | None:
    """The first object ftcli would upload whose name Cloud Storage refuses for its length, said by what makes it
    long, or None (a model folder's files are checked by `model_upload`). A long bucket prefix (or a long data file
    name) went through the pre-flight, and Cloud Storage answered the upload with a 400 that ftcli printed as a raw
    HTTP error."""
    if (p := object_name_length_problem(package_uri)) is not None:
        return f"the bucket prefix in {settings.bucket} is too long for the trainer package ({package_uri}): {p}"
    for name, path in local_files.items():
        uri = next(u for f, u in uploads if f == path)
        if (p := object_name_length_problem(uri)) is not None:
            return (f"--{name.replace('_', '-')} {path}: {p}: give the file a shorter name, or the bucket a shorter "
                    "prefix")
    return None


def job_secrets(cfg: TrainConfig) -> tuple[tuple[str, str], ...]:
    """The secrets the job reads (--wandb-secret, --hf-secret), each with the variable its value usually comes from."""
    from ftcli_trainer.config import SECRET_OPTIONS

    return tuple((getattr(cfg, name), variable) for name, (_, _, variable) in SECRET_OPTIONS.items()
                 if getattr(cfg, name))


def machine_hint(hw: Hardware, detail: str) -> str | None:
    """For Vertex refusing a machine/GPU pairing (a 400 naming the machine or the accelerator): the machines the
    catalog pairs with this GPU and count, default first."""
    from ftcli import catalog

    text = detail.lower()
    # a pairing names both sides; "...machine_spec.accelerator_count; Message: Accelerator count must be positive"
    # alone is no machine's fault
    pairing = any(w in text for w in ("machine type", hw.machine_type)) and any(
        w in text for w in ("accelerator", "gpu", (hw.accelerator_type or "").lower()) if w)
    if not hw.gpu or not pairing:
        return None
    fits = [m for m in catalog.machines_for(hw) if m != hw.machine_type]
    if not fits:
        return None
    return (f"{hw.gpu_name}x{hw.accelerator_count} also runs on {', '.join(fits[:3])}: try --machine-type {fits[0]}"
            f" (or another --gpu count)")


def _check_gcs_data(sub: Submission, storage: StorageGateway) -> None:
    """gs:// data files read as the job will, before anything is uploaded: a missing one refused, a small one read
    whole (with the trainer's readers, as a local file), a big one's header (its first HEAD_BYTES: the columns, the
    encoding, the format); a wrong column failed the job after its machines had started. A local file beside it
    gives its header too (it was read whole already, in `plan`): a multi-label eval file needs the training file's
    label columns."""
    import tempfile

    from ftcli_trainer.data import HEAD_BYTES, check_files
    from ftcli_trainer.errors import TrainerError
    from ftcli_trainer.storage import split_gcs

    given = {name: str(v) for name in DATA_OPTIONS if (v := sub.trainer.get(name))}
    if not any(v.startswith("gs://") for v in given.values()):
        return
    cfg, _ = validate_trainer(sub.trainer)
    files: dict[str, str] = {}
    heads: dict[str, tuple[str, bytes]] = {}
    with tempfile.TemporaryDirectory(prefix="ftcli-data-") as tmp:
        for name, value in given.items():
            if value.startswith("gs://"):
                head = storage.read_head(value, HEAD_BYTES + 1)  # one byte more: is that all of it?
                if head is None:  # read by the job: it would fail after its machines were paid for
                    option = f"--{name.replace('_', '-')}"
                    # A folder of files (gs://b/data/, shards) is no object either: "no such file" sent the user to
                    # look for a typo in a path that is there. The trainer reads one file per option.
                    bucket, path = split_gcs(value)
                    inside = storage.list_objects(value, limit=1) if path else []
                    if inside:
                        first = f"gs://{bucket}/{inside[0].name}"
                        raise UsageError(f"{option} {value} is a folder in the bucket, not a file: the trainer reads "
                                         "one CSV or JSON Lines file",
                                         hint=f"name one file, e.g. {option} {first} (several files: join them into "
                                              "one first)")
                    raise UsageError(f"{option} {value}: no such file in the bucket",
                                     hint=f"gcloud storage ls {value.rsplit('/', 1)[0]}/ lists what is there")
                if len(head) <= HEAD_BYTES:
                    # its name's endings (.csv, .jsonl, .gz) pick the reader; the rest may be too long for a file name
                    local = Path(tmp, name, "data" + "".join(Path(value.rsplit("/", 1)[-1]).suffixes[-2:]))
                    local.parent.mkdir()
                    local.write_bytes(head)
                    files[name] = str(local)
                    continue
            else:
                with open(Path(value).expanduser(), "rb") as f:
                    head = f.read(HEAD_BYTES)
            heads[name] = (value, head)
        try:
            check_files(cfg, files, heads, shown=given)
        except TrainerError as e:
            raise UsageError(str(e), hint=e.hint) from None


# The account a job runs as, unless --service-account names another: "When you create a CustomJob,
# HyperparameterTuningJob, or a custom TrainingPipeline, the training container runs using your Google Cloud project's
# ... Custom Code Service Agent by default" ("Use a custom service account",
# https://cloud.google.com/vertex-ai/docs/general/custom-service-account, read 2026-11-27), whose e-mail is
# service-PROJECT_NUMBER@gcp-sa-aiplatform-cc.iam.gserviceaccount.com ("Service agents",
# https://cloud.google.com/iam/docs/service-agents, read 2026-11-27). "By default, a custom training job can access any
# Cloud Storage bucket within the same Google Cloud project by using the Vertex AI Custom Code Service Agent"; for
# read and write access to a bucket it names roles/storage.objectAdmin ("Use Cloud Storage as a mounted file system",
# https://cloud.google.com/vertex-ai/docs/training/cloud-storage-file-system, read 2026-11-27); a bucket of another
# project needs a grant ("if it is not part of the project you are using to run AI Platform Training, you must
# explicitly grant access to the AI Platform Training service accounts", the predecessor's "Working with Cloud
# Storage", https://cloud.google.com/ml-engine/docs/scikit/working-with-cloud-storage, read 2026-11-27). The job reads
# its trainer wheel from /gcs/BUCKET, so without one it fails once its machines are up.
#
# Only a note, never a refusal: "The effective allow policy for a resource is the union of the allow policy set at
# that resource and the allow policy inherited from its parent" ("Using resource hierarchy for access control",
# https://cloud.google.com/iam/docs/resource-hierarchy-access-control, read 2026-11-27), and ftcli reads the bucket's
# own policy only: a role granted on the bucket's project, folder or organization is invisible to it.
CUSTOM_CODE_AGENT = "service-{}@gcp-sa-aiplatform-cc.iam.gserviceaccount.com"
OBJECT_ROLE = "roles/storage.objectAdmin"  # the staging bucket: the job reads its wheel and writes its outputs there
# A bucket the job only reads (a gs:// --train-file/--eval-file's): roles/storage.objectViewer "Grants access to view
# objects and their metadata ... Can also list the objects" ("IAM roles for Cloud Storage",
# https://cloud.google.com/storage/docs/access-control/iam-roles, read 2026-11-27); the trainer only gets objects there.
READ_ROLE = "roles/storage.objectViewer"

# --service-account: the job runs as that account instead. An account reaches a bucket only through a role binding in
# the bucket's allow policy or in its project's, folder's or organization's (the union above). The principals a
# bucket's policy can name are a Google account, a service account, a Google group, a domain, allUsers,
# allAuthenticatedUsers, and the project convenience values projectOwner/projectEditor/projectViewer:PROJECT
# (com.google.cloud.Identity, Google's Java reference for IAM policies,
# https://docs.cloud.google.com/java/docs/reference/google-cloud-core/latest/com.google.cloud.Identity, read
# 2026-11-27): a group, a domain, allUsers or allAuthenticatedUsers may include the account without naming it (so
# nothing firm is said then); a convenience value includes it only through a basic role on that project, which is a
# project grant the note already allows for. "User-managed service accounts are service accounts that you create in
# your projects", named `service-account-name@project-id.iam.gserviceaccount.com` ("Service account types",
# https://docs.cloud.google.com/iam/docs/service-account-types, read 2026-11-27), and Vertex's set-up of a custom
# service account has you grant it the roles it needs after creating it ("Use a custom service account", step 2, read
# in its zh-cn version https://docs.cloud.google.com/vertex-ai/docs/general/custom-service-account?hl=zh-cn,
# 2026-11-27). A default service account is another matter: "When a default service account is created, it is
# automatically granted the Editor role (roles/editor) on your project" ("Restrict IAM service account usage",
# https://docs.cloud.google.com/organization-policy/restrict-service-accounts, read 2026-11-27); only an account of
# the user-managed form above is spoken of.
USER_MANAGED_SA = re.compile(r"[a-z][a-z0-9-]*@[a-z][a-z0-9-]*\.iam\.gserviceaccount\.com")
COVERS_ANY = ("group:", "domain:", "allUsers", "allAuthenticatedUsers", "principalSet:", "principal:")


def _grant(bucket: str, account: str, role: str) -> str:
    return (f"gcloud storage buckets add-iam-policy-binding gs://{bucket} --member=serviceAccount:{account} "
            f"--role={role}")


def _job_buckets(sub: Submission) -> dict[str, list[str]]:
    """Every bucket the job reads or writes, staging bucket first, each with the gs:// data options read from it."""
    from ftcli_trainer.storage import split_gcs

    buckets: dict[str, list[str]] = {sub.settings.bucket_name: []}
    for name in DATA_OPTIONS:
        value = str(sub.trainer.get(name) or "")
        if value.startswith("gs://"):
            buckets.setdefault(split_gcs(value)[0], []).append(f"--{name.replace('_', '-')} {value}")
    return buckets


@dataclass
class BucketFacts:
    """What the bucket access check learnt, kept for every candidate of one command (`--gpu L4,T4`, a resubmission):
    no request is made twice and no line said twice."""

    numbers: dict[str, str | None] = field(default_factory=dict)  # bucket -> its project's number (None: unknown)
    members: dict[str, frozenset[str] | None] = field(default_factory=dict)  # bucket -> its policy's members
    job_numbers: dict[str, str | None] = field(default_factory=dict)  # job project -> its number ("": no bucket)
    said: set[str] = field(default_factory=set)

    def number(self, storage: StorageGateway, bucket: str) -> str | None:
        if bucket not in self.numbers:
            self.numbers[bucket] = storage.bucket_project(bucket)
        return self.numbers[bucket]

    def job_number(self, storage: StorageGateway, project: str) -> str | None:
        if project not in self.job_numbers:
            self.job_numbers[project] = project if project.isdigit() else storage.project_number(project)
        return self.job_numbers[project]

    def covers(self, storage: StorageGateway, bucket: str, member: str) -> bool | None:
        """Does the bucket's own policy name `member` or a principal that may include it? None: unreadable."""
        if bucket not in self.members:
            self.members[bucket] = storage.bucket_members(bucket)
        found = self.members[bucket]
        if found is None:
            return None
        return member in found or any(m.startswith(COVERS_ANY) for m in found)


def bucket_access_notes(sub: Submission, storage: StorageGateway, staging_number: str | None,
                        facts: BucketFacts | None = None) -> list[str]:
    """One line for each bucket the job touches (the staging bucket, a gs:// data file's) that the account it runs as
    may not reach, from what the bucket's project and its own IAM policy show; none where nothing firm can be said
    (`_agent_line`, `_account_line`). `staging_number`: the staging bucket's project number, as `check_bucket` read
    it."""
    facts = BucketFacts() if facts is None else facts
    settings = sub.settings
    facts.numbers.setdefault(settings.bucket_name, staging_number)
    lines = []
    for bucket, reads in _job_buckets(sub).items():
        staging = bucket == settings.bucket_name
        role = OBJECT_ROLE if staging else READ_ROLE
        what = " and ".join(([f"/gcs/{bucket}"] if staging else []) + reads)
        fails = f"the job will fail reading {what} once its machines are up"
        line = (_account_line(settings, storage, facts, bucket, role, fails) if settings.service_account else
                _agent_line(settings, storage, facts, bucket, role, fails))
        if line is not None and line not in facts.said:
            facts.said.add(line)
            lines.append(line)
    return lines


def _agent_line(settings: Settings, storage: StorageGateway, facts: BucketFacts, bucket: str, role: str,
                fails: str) -> str | None:
    """The default account, the job project's Custom Code Service Agent, reaches its own project's buckets: a bucket
    of another project whose policy does not name it gets a warning, or a note when ftcli cannot tell."""
    project = settings.project
    number = facts.number(storage, bucket)
    if number is None:
        return None
    ours = facts.job_number(storage, project)
    if ours == number:
        return None
    or_sa = "or give --service-account an account that may use the bucket"
    if not ours:  # None: the project's buckets cannot be listed; "": it has none, so not this one
        agent_grant = _grant(bucket, CUSTOM_CODE_AGENT.format("PROJECT_NUMBER"), role)
        unless = (f"unless the project's Custom Code Service Agent, the account the job runs as, was granted access: "
                  f"{agent_grant} with {project}'s number (`gcloud projects describe {project}` shows it), {or_sa}")
        if ours is None:
            return (f"note: cannot tell whether gs://{bucket} (project number {number}) is in the job's project "
                    f"{project} (listing {project}'s buckets, storage.buckets.list, was denied); if it is not, {fails} "
                    f"{unless}")
        return f"warning: gs://{bucket} belongs to project number {number}, not to the job's project {project}: " \
            f"{fails} {unless}"
    agent = CUSTOM_CODE_AGENT.format(ours)
    seen = facts.covers(storage, bucket, f"serviceAccount:{agent}")
    if seen:
        return None
    policy = ("its IAM policy does not name" if seen is False else
              "ftcli cannot read its IAM policy (storage.buckets.getIamPolicy) to see whether it names")
    return (f"warning: gs://{bucket} belongs to project number {number}, not to the job's project {project} ({ours}), "
            f"and {policy} the account the job runs as, {agent}: unless that account holds a role on the bucket's "
            f"project, folder or organization, {fails}; grant it access: {_grant(bucket, agent, role)}, {or_sa}")


def _account_line(settings: Settings, storage: StorageGateway, facts: BucketFacts, bucket: str, role: str,
                  fails: str) -> str | None:
    """--service-account: a user-managed account reaches no bucket by default, but the usual set-up grants it its
    roles on its own project ("Use a custom service account", above), which a bucket's policy does not show. So only a
    bucket of another project than the account's is spoken of, where that is known: the account's project (its e-mail
    names it) is the job's, and the bucket's number is not the job project's; and its readable policy names neither
    the account nor a principal that may include it."""
    project, account = settings.project, settings.service_account or ""
    if USER_MANAGED_SA.fullmatch(account) is None or account.partition("@")[2].partition(".")[0] != project:
        return None
    number = facts.number(storage, bucket)
    if number is None or facts.job_number(storage, project) in (None, number):
        return None
    if facts.covers(storage, bucket, f"serviceAccount:{account}") is not False:
        return None
    return (f"note: gs://{bucket} belongs to project number {number}, not to {project}, the project of {account}, "
            "the account the job runs as (--service-account), and its IAM policy names neither that account nor a "
            "group or domain that could include it: unless the account holds a role on the bucket's project, folder "
            f"or organization, {fails}; grant it access: {_grant(bucket, account, role)}")


def stage(sub: Submission, *, notify: Notify | None = None, uploading: Uploading | None = None,
          access: BucketFacts | None = None) -> int:
    """Everything before the create call: the history is writable, the bucket is there and in the job's region,
    the secret the job reads exists, the trainer wheel and local inputs are uploaded (what is missing only).
    Returns the bytes uploaded. `notify(message)` hears about retries and the buckets the job may not reach
    (`bucket_access_notes`, with `access`: one BucketFacts for all the tries of one command);
    `uploading(description)` is a context manager that yields a `progress(done, total)` callback (or None) for one
    upload, or for the local files' batch."""
    import contextlib
    import tempfile

    from ftcli.gcp.storage import get_storage
    from ftcli.packaging import build_wheel

    def upload(path: Path, uri: str) -> int:
        with (uploading or (lambda _: contextlib.nullcontext()))(f"uploading {path.name}") as progress:
            return storage.upload_if_absent(path, uri, progress=progress)

    history.ensure_writable()  # found before anything is uploaded, not after the job exists
    storage = get_storage(sub.settings.project, notify)
    bucket_number = storage.check_bucket(sub.settings.bucket_name, sub.settings.region)
    if sub.secrets:
        from ftcli.gcp.secrets import get_secrets

        gateway = get_secrets(sub.settings.project)
        for name, variable in sub.secrets:
            gateway.check_exists(name, variable)
    _check_gcs_data(sub, storage)
    if notify is not None:  # (after the data files are found: nothing is said of a submission refused)
        for line in bucket_access_notes(sub, storage, bucket_number, access):
            notify(line)
    sent = 0
    if not storage.exists(sub.package_uri):
        with tempfile.TemporaryDirectory(prefix="ftcli-pkg-") as tmp:
            sent += upload(build_wheel(Path(tmp)), sub.package_uri)
    if sub.uploads:  # the data files and a model folder's files, together (a model of many files went one by one)
        what = sub.uploads[0][0].name if len(sub.uploads) == 1 else f"{len(sub.uploads)} files"
        with (uploading or (lambda _: contextlib.nullcontext()))(f"uploading {what}") as progress:
            sent += storage.upload_many(sub.uploads, progress=progress)
    return sent


def submit(sub: Submission, *, notify: Notify | None = None, uploading: Uploading | None = None,
           access: BucketFacts | None = None) -> tuple[Job, int, int]:
    """Stage (see `stage`), then create the job. Returns (job, short id, bytes uploaded)."""
    from ftcli.gcp.vertex import get_vertex

    sent = stage(sub, notify=notify, uploading=uploading, access=access)
    vertex = get_vertex(sub.settings.project, sub.settings.region, notify)
    sub.create_sent = True
    try:
        job = vertex.create_custom_job(sub.job, sub.submission_id)
    except Rejected as e:
        hint = machine_hint(sub.hardware, e.detail)
        if hint is None:
            raise
        raise Rejected(e.message, e.detail, hint=hint) from None
    n = history.record(job.name.full, sub.display_name, project=sub.settings.project, region=sub.settings.region,
                       created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                       base_output_dir=sub.base_output_dir)
    return job, n, sent


def recover(sub: Submission, *, tuning: bool = False) -> tuple[bool, Job | TuningJob | None, int | None]:
    """After Ctrl-C during `submit` (`tuning`: during `tuning.submit`): the create call may have reached Vertex even
    though its answer did not reach us. Look for this submission's job (by its label), so that a running job is
    never left unnamed, and give it a short id. Returns (looked, job or None, short id or None); looked is False
    when Vertex could not be asked."""
    from ftcli.gcp.vertex import get_vertex

    if not sub.create_sent:  # interrupted while checking or uploading: no create call was made
        return True, None, None
    try:
        job = get_vertex(sub.settings.project, sub.settings.region).find_by_submission(sub.submission_id,
                                                                                        tuning=tuning)
    except (KeyboardInterrupt, Exception):  # noqa: BLE001 - a second Ctrl-C, or no answer: say what we know
        return False, None, None
    if job is None:
        return True, None, None
    n = history.short_id(job.name)
    if n is None:
        try:
            n = history.record(job.name.full, sub.display_name, project=sub.settings.project,
                               region=sub.settings.region, base_output_dir=sub.base_output_dir,
                               **({"kind": "tune"} if tuning else {}))
        except Exception:  # noqa: BLE001 - the job still gets named
            n = None
    return True, job, n


# --- several candidates: --gpu L4,T4 --region us-central1,europe-west4 ----------------------------------------

# How Vertex says a job could not get its machines: "Resources are insufficient in region: us-central1" (seen in
# the wild, e.g. openreview/openreview-expertise#401, 2026-08-19); Compute Engine's stockout wording for a zone
# ("does not have enough resources available", ZONE_RESOURCE_POOL_EXHAUSTED) may come through too.
NO_RESOURCES = ("resources are insufficient", "not have enough resources", "zone_resource_pool_exhausted",
                "stockout", "resource_availability")


def lacks_resources(error: str | None) -> bool:
    """Did a job fail because its machines could not be had (not because of the trainer)?"""
    text = (error or "").lower()
    return any(marker in text for marker in NO_RESOURCES)


@dataclass
class Candidate:
    sub: Submission

    @property
    def what(self) -> str:
        return f"{self.sub.hardware.gpu_name or 'CPU'} in {self.sub.settings.region}"


def plan_candidates(*, gpu: str, region: str | None, bucket: str | None, labels: list[str], trainer: dict[str, Any],
                    **rest: Any) -> tuple[list[Candidate], list[str]]:
    """`--gpu A,B` and `--region R1,R2`: every (GPU, region) pair in that order (GPU first), planned and checked
    like a single job. Of several pairs, one whose region does not train on its GPU is dropped with a note, and
    one whose GPU cannot run --varlen-attention (a speed switch; the math is the same) goes without it, with a
    note, when another pair can run it; every other problem is the user's to fix and fails as usual. Returns
    (candidates, notes). With several regions the bucket names its region (`gs://NAME-{region}`): Vertex needs a
    bucket in the job's own region."""
    from ftcli import regions, settings

    # A value given twice (`--gpu L4,L4`) is one candidate: tried twice, it would only fail twice.
    gpus = list(dict.fromkeys(g.strip() for g in gpu.split(",") if g.strip())) or [gpu]
    where: list[str | None] = [*dict.fromkeys(r.strip() for r in (region or "").split(",") if r.strip())] or [region]
    if len(where) > 1 and len({settings.effective(bucket=bucket, region=r)["bucket"].value for r in where}) == 1:
        raise UsageError(f"--region {region} runs in several regions, and Vertex needs the staging bucket in the "
                         "job's region: give --bucket gs://NAME-{region} (one bucket per region)")
    pairs = [(g, r) for g in gpus for r in where]
    notes, kept = [], []
    for g, r in pairs:
        try:
            hw = resolve_gpu(g)
        except UsageError:
            kept.append((g, r))  # plan() says what is wrong with it
            continue
        if len(pairs) > 1 and r and hw.gpu_name and r in regions.VERTEX_REGIONS and not regions.offers(r, hw.gpu_name):
            notes.append(f"skipping {hw.gpu_name} in {r}: the region does not offer it for training")
            continue
        kept.append((g, r))
    if not kept:
        raise UsageError("no --gpu/--region candidate can run: " + "; ".join(notes))
    without_varlen = _varlen_left_out(kept, trainer, notes) if len(kept) > 1 else set()
    plain = {k: v for k, v in trainer.items() if k != "varlen_attention"}
    data_checks: dict = {}  # the local files are read and hashed once, not once per candidate
    out = []
    for i, (g, r) in enumerate(kept, 1):
        tries = [f"{TRY_LABEL}={i}-of-{len(kept)}"] if len(kept) > 1 else []
        sub = plan(gpu=g, region=r, bucket=bucket, labels=[*labels, *tries],
                   trainer=plain if g in without_varlen else trainer, data_checks=data_checks, **rest)
        out.append(Candidate(sub))
    return out, notes


def _varlen_left_out(pairs: list[tuple[str, str | None]], trainer: dict[str, Any], notes: list[str]) -> set[str]:
    """The --gpu values whose jobs go without --varlen-attention (their GPU cannot run it, another candidate's
    can), each with a note; none when no candidate can run it (then each plan refuses it, as for one job)."""
    try:
        cfg, _ = validate_trainer(trainer)
        hardware = {g: resolve_gpu(g) for g in dict.fromkeys(g for g, _ in pairs)}
    except UsageError:
        return set()  # plan() says what is wrong
    if not cfg.varlen_attention:
        return set()
    why = {g: _varlen_refusal(cfg, hw) for g, hw in hardware.items()}
    if all(why.values()):
        return set()
    for g, reason in why.items():
        if reason:
            notes.append(f"{hardware[g].gpu_name or 'a CPU machine'} goes without --varlen-attention ({reason})")
    return {g for g, reason in why.items() if reason}


def submit_first(candidates: list[Candidate], *, notify: Notify | None = None, uploading: Uploading | None = None,
                 start: int = 0, access: BucketFacts | None = None) -> tuple[Job, int, int, int]:
    """Submit candidates in order from `start` until one is created; a used-up quota moves on to the next, and
    says so. Returns (job, short id, bytes uploaded, index of the candidate that ran). `access`: see `stage` (one
    for every try of the command: a bucket's note is said once, not once per candidate)."""
    access = BucketFacts() if access is None else access
    for i in range(start, len(candidates)):
        try:
            job, n, sent = submit(candidates[i].sub, notify=notify, uploading=uploading, access=access)
            return job, n, sent, i
        except NoCapacity as e:
            if i + 1 == len(candidates) or notify is None:
                raise
            notify(f"{candidates[i].what}: {e.message}; trying {candidates[i + 1].what}")
    raise AssertionError("no candidates")  # plan_candidates never returns an empty list
