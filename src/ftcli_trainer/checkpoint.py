"""Checkpoints to AIP_CHECKPOINT_DIR (local or gs://): atomic, the last few kept, resumable.

A checkpoint is a folder `step-<N>` with the model weights (safetensors) and the rest of the training
state (optimizer, scheduler, scaler, every rank's RNG, position) in a torch file read with weights_only=True, so
loading never unpickles arbitrary objects. It counts only once its completion marker exists.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ftcli_trainer import storage
from ftcli_trainer.errors import TrainerError, one_line

if TYPE_CHECKING:
    import torch

    from ftcli_trainer.config import TrainConfig

log = logging.getLogger("ftcli_trainer")
STEP_RE = re.compile(r"^step-(\d+)$")
BEST_RE = re.compile(r"^best-(\d+)$")  # --keep-best: the best evaluation's weights, beside the checkpoints
KEEP = 2
_T = TypeVar("_T")


def _list(root: str, pattern: re.Pattern = STEP_RE) -> list[tuple[int, str]]:
    if storage.is_gcs(root):
        names = storage.list_subdirs(root)
    else:
        p = Path(root)
        names = [d.name for d in p.iterdir() if d.is_dir()] if p.is_dir() else []
    found = [(int(m.group(1)), n) for n in names if (m := pattern.match(n))]
    return sorted(found)


@contextlib.contextmanager
def _staged(root: str, name: str, prefix: str, what: str, files: list,
            copies: dict[str, str] | None = None) -> Iterator[Path]:
    """A folder `name` staged (in a local temporary folder named `prefix` for gs://, else beside it), filled by the
    with-block, then published whole under `root`: a reader sees all of it or none. A full disk or a read-only folder
    is the environment, not a bug: one line that names `what` (an OSError recorded by one of `files`, the block's
    RecordingFiles, names the cause); the last complete checkpoint is still there to resume from. The staging goes
    either way. `copies`, filled by the with-block for a gs:// `root`: files of the folder copied from objects
    (storage.publish_dir's)."""
    staged = None
    try:
        staged = storage.local_tmp(prefix) if storage.is_gcs(root) else storage.staging_dir(Path(root), name)
        yield staged
        storage.publish_dir(staged, storage.join(root, name), ours_only=False, copies=copies)
    except Exception as e:
        os_error = storage.os_error_of(e, *files)
        if os_error is None:
            raise
        where = storage.staged_where(root, staged) if staged is not None else root
        raise TrainerError(storage.write_error(os_error, what, where)) from None
    finally:
        if staged is not None and staged.exists():
            shutil.rmtree(staged, ignore_errors=True)


WEIGHTS = "model.safetensors"
# In a final checkpoint's trainer_state.pt, and in a best-<step>'s best.json: its WEIGHTS are the file the export
# writes (save_pretrained's), so the export takes that file instead of writing the same weights again
# (export.export_model's weights_from).
AS_EXPORTED = "weights_as_exported"


def save(root: str, step: int, model: torch.nn.Module, state: dict, final: bool = False,
         weights_from: str | None = None) -> bool:
    """Write the step's checkpoint. `final` (after the last epoch, or an early stop: the export follows) writes the
    weights as the export does when it can (_save_as_exported); return whether it did. `weights_from`: a folder under
    `root` whose weights file is `model`'s weights as the export writes them (--keep-best's best-<step> of this very
    step, written a moment ago by save_best), taken instead of written again (take_weights)."""
    still_held(root)  # never over another run's checkpoints
    as_exported = taking_weights(lambda source: _save(root, step, model, state, final, source), weights_from,
                                 f"the step {step} checkpoint")
    # Keep the newest KEEP complete checkpoints, and always this one; anything else (older, or torn by a crash)
    # goes. (Newer ones than this step are there when the resume could not read them: two of them took both places,
    # and the checkpoint just written was deleted.)
    keep = set(_complete(root)[-KEEP:]) | {f"step-{step:08d}"}
    for _, name in _list(root):
        if name not in keep:
            _remove(storage.join(root, name))
    return as_exported


def _save(root: str, step: int, model: torch.nn.Module, state: dict, final: bool, weights_from: str | None) -> bool:
    """save's staging and publishing of the checkpoint; storage.SourceGone when `weights_from`'s weights object was
    deleted before its copy (nothing published)."""
    import torch
    from safetensors.torch import save_model

    files: list[storage.RecordingFile] = []
    copies: dict[str, str] = {}
    with _staged(root, f"step-{step:08d}", "ckpt", f"the step {step} checkpoint", files, copies) as staged:
        taken = weights_from is not None and take_weights(storage.join(weights_from, WEIGHTS), staged, copies)
        as_exported = final and (taken or _save_as_exported(model, staged))
        if not (taken or as_exported):
            save_model(model, str(staged / WEIGHTS))
        state = {**state, AS_EXPORTED: True} if as_exported else state
        files.append(state_file := storage.RecordingFile(staged / "trainer_state.pt", "wb"))
        with state_file:
            torch.save(state, state_file)
    return as_exported


def taking_weights(publish: Callable[[str | None], _T], weights_from: str | None, into: str) -> _T:
    """`publish(weights_from)`: a folder staged, its weights file taken from `weights_from` (take_weights), and
    published (save's checkpoint, export.export_model's model). When that file's object was deleted from the bucket
    between take_weights' look and its copy (storage.SourceGone: a lifecycle rule, someone cleaning up), the job
    ended with a NotFound traceback: the folder is made again with `publish(None)`, the weights written as when the
    file is not there at all, and a warning names the object and `into`, the folder it was to be copied into."""
    try:
        return publish(weights_from)
    except storage.SourceGone as e:
        log.warning("%s was deleted before it could be copied into %s; writing the weights instead", e.source, into)
        return publish(None)


def take_weights(source: str, staged: Path, copies: dict[str, str]) -> bool:
    """The weights file `source` taken as the staged folder's own (a checkpoint's, or the export's): a second name of
    it locally (a hard link, or a copy across filesystems: storage.link_or_copy), a copy made inside Cloud Storage on
    publishing for gs:// (`copies`). With --keep-best and the best evaluation at the step being checkpointed (the
    last step's, where the curve still improves: the end of the run), best-<step> and step-<step> wrote the same
    tensors twice, each with save_pretrained (BERT-base: 440 MB more written, and uploaded from a Vertex job). Each
    folder keeps its own name of the file, so the rotation may delete either (rmtree, or the objects under its
    prefix) and the other stays whole; no writer here changes a file in place. False (write them then) when `source`
    is gone (removed by hand, an object deleted); an object deleted after this look is found by the copy, which raises
    storage.SourceGone from the publishing (the caller's taking_weights then writes them as for False)."""
    if storage.is_gcs(source):
        if not storage.exists(source):
            return False
        copies[WEIGHTS] = source
        return True
    try:
        storage.link_or_copy(Path(source), staged / WEIGHTS)
    except FileNotFoundError:
        return False
    return True


def _save_as_exported(model: torch.nn.Module, staged: Path) -> bool:
    """The weights written into `staged` as the export writes them (save_pretrained: its tensor names, its "format"
    metadata, which from_pretrained requires), when that one file loads back into `model` as a checkpoint does
    (load_latest's load_model, strict). The last epoch's checkpoint and the export held the same tensors, written
    twice (BERT-base: 440 MB more written and uploaded at the end of every job); the export now takes this file
    (export.export_model's weights_from). Not when save_pretrained shards the weights or renames them (a model with
    conversions on save): the checkpoint is written as any other then, and the export writes its own."""
    from safetensors import safe_open
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # ("Writing model shards", a bar on the job's stderr)
    written = staged / ".save_pretrained"
    model.save_pretrained(written)  # type: ignore[operator]  # (a PreTrainedModel: every model the trainer loads)
    try:
        if not (written / WEIGHTS).is_file() or any(written.glob("*.index.json")):
            return False
        with safe_open(str(written / WEIGHTS), "pt") as f:
            names = set(f.keys())
        tensors = model.state_dict()

        def same(t: torch.Tensor) -> tuple:
            return t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride()

        # A name left out must be the very tensor of one that is there (tied weights), which load_model takes
        kept = {same(tensors[n]) for n in names & tensors.keys()}
        if names - tensors.keys() or any(same(tensors[n]) not in kept for n in tensors.keys() - names):
            return False
        os.replace(written / WEIGHTS, staged / WEIGHTS)
        return True
    finally:
        shutil.rmtree(written, ignore_errors=True)


def save_best(root: str, step: int, model: torch.nn.Module, info: dict) -> bool:
    """--keep-best: the weights of the best evaluation so far, as `best-<step>` beside the checkpoints (never only in
    memory: a preempted worker's restart exports them), staged and published whole as a checkpoint is. `info` (the
    step, its metric) goes beside them in best.json, for whoever looks into the folder.

    The weights are written as the export writes them when that file loads back as a checkpoint (_save_as_exported),
    and best.json says so (AS_EXPORTED): when the best step is not the last, the export writes these very weights,
    and it now takes this file (load_best's answer, export_model's weights_from) instead of writing them again; when
    it is the last step, the final checkpoint takes it (save's weights_from). Return whether it is written so."""
    import json

    from safetensors.torch import save_model

    still_held(root)  # never over another run's
    with _staged(root, f"best-{step:08d}", "best", f"the best weights (step {step})", []) as staged:
        as_exported = _save_as_exported(model, staged)
        if not as_exported:
            save_model(model, str(staged / WEIGHTS))
        info = {**info, AS_EXPORTED: True} if as_exported else info
        (staged / "best.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return as_exported


def has_best(root: str, step: int) -> bool:
    """The step's best weights are there whole: marked complete, and their file not lost since (removed by hand, an
    object deleted from the bucket), which load_best read as a FileNotFoundError traceback."""
    path = storage.join(root, f"best-{step:08d}")
    return _is_complete(path) and storage.exists(storage.join(path, WEIGHTS))


def load_best(root: str, step: int, model: torch.nn.Module) -> bool:
    """Load the step's best weights (save_best) into `model`; a TrainerError when they are not there whole. Return
    whether their file is written as the export writes it (its best.json says so; an earlier trainer's best-<step>
    does not, and its file, save_model's, is loaded all the same)."""
    import json

    from safetensors.torch import load_model

    path = storage.join(root, f"best-{step:08d}")
    if not has_best(root, step):
        raise TrainerError(f"the best evaluation's weights (step {step}) are not in {path}: run again with another "
                           "--output-dir")  # (without --keep-best, these checkpoints are another run's)
    downloaded = None
    try:
        if storage.is_gcs(path):
            downloaded = local = storage.download_dir(path, storage.local_tmp("best"))
        else:
            local = Path(path)
        load_model(model, str(local / WEIGHTS), strict=True)
        try:
            info = json.loads((local / "best.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):  # (only for whoever looks into the folder until AS_EXPORTED: not needed)
            return False
        return isinstance(info, dict) and info.get(AS_EXPORTED) is True
    finally:
        if downloaded is not None:
            shutil.rmtree(downloaded, ignore_errors=True)


def prune_best(root: str, keep: set[int], above: int | None = None) -> None:
    """Remove the best-<step> folders not in `keep` (the best steps that the kept checkpoints and the run still name);
    with `above`, only those after that step (a restart's: they are evaluated again)."""
    for step, name in _list(root, BEST_RE):
        if step not in keep and (above is None or step > above):
            _remove(storage.join(root, name))


def _is_complete(path: str) -> bool:
    return storage.exists(storage.join(path, storage.COMPLETE_MARKER))


def _complete(root: str) -> list[str]:
    """The names of `root`'s complete checkpoints, oldest first."""
    return [name for _, name in _list(root) if _is_complete(storage.join(root, name))]


def newest_complete_step(root: str) -> int | None:
    """The step of `root`'s newest complete checkpoint, the one a run resumes from (None: none)."""
    steps = [step for step, name in _list(root) if _is_complete(storage.join(root, name))]
    return steps[-1] if steps else None


def has_complete(root: str) -> bool:
    """Whether `root` holds a checkpoint that a run would resume from."""
    return bool(_complete(root))


def _remove(path: str) -> None:
    if storage.is_gcs(path):
        storage.delete_prefix(path)
    else:
        shutil.rmtree(path, ignore_errors=True)


def clean_stale(root: str) -> None:
    """At a run's start: remove staging folders that a crashed run left (local checkpoint staging in `root`,
    gs:// transfer staging in the system temp folder). A live writer's folders are left alone."""
    storage.clean_stale_tmp()
    if not storage.is_gcs(root) and Path(root).is_dir():
        storage.clean_stale_staging(Path(root), r"\.(?:step|best)-\d+")


def load_latest(root: str, model: torch.nn.Module) -> dict | None:
    """Load the newest complete checkpoint into `model` and return its state; None when there is none.

    A checkpoint that is incomplete or unreadable is skipped with a warning, never half-loaded.
    """
    import torch
    from safetensors.torch import load_model

    clean_stale(root)
    for step, name in reversed(_list(root)):
        path = storage.join(root, name)
        downloaded = None
        try:
            if not _is_complete(path):
                raise ValueError("no completion marker")
            if storage.is_gcs(path):
                downloaded = local = storage.download_dir(path, storage.local_tmp("resume"))
            else:
                local = Path(path)
            state = torch.load(local / "trainer_state.pt", map_location="cpu", weights_only=True)
            load_model(model, str(local / WEIGHTS), strict=True)
        except Exception as e:  # noqa: BLE001 - any damage means: not this one
            why = one_line(e)
            if downloaded is not None:  # the checkpoint's own gs:// name, not the temporary copy's
                why = why.replace(str(downloaded), path)
            log.warning("ignoring checkpoint %s: %s", path, why)
            continue
        finally:
            if downloaded is not None:
                shutil.rmtree(downloaded, ignore_errors=True)  # loaded into memory: the copy is not needed
        log.info("resuming from %s (optimizer step %d)", path, step)
        return state
    return None


# -- which run the checkpoints belong to ---------------------------------------------------------------------

FINGERPRINT = "run-fingerprint.json"
WANDB_RUN_ID = "wandb-run-id"  # the W&B run a resumed run goes on with (tracking.run_id)
# Options that change what is learnt: resuming with another value would silently mix two runs. (Not: eval,
# logging and checkpoint cadence, torch.compile, the threshold, which change no weight; --max-eval-samples does where
# evaluations pick the weights: run_fingerprint.)
MATH_OPTIONS = ("task", "model", "dataset_config", "text_column", "text_pair_column", "label_column",
                "label_columns", "label_names", "epochs", "batch_size", "learning_rate", "weight_decay",
                "warmup_ratio", "max_length", "gradient_accumulation_steps", "max_grad_norm", "max_train_samples",
                "fraction_of_train_data", "eval_fraction", "seed", "precision", "regression")


# Set by `ftcli local` for a local run folder: its own way out of a refusal, said in place of "move that folder
# away". Its claim refuses most runs before the trainer starts, with --restart (which sets the earlier run aside) in
# its hint; a run told apart by its rows only is refused here, once the data is loaded (record_train_rows), and that
# refusal named no --restart. The words are ftcli's (the trainer knows none of its options).
MISMATCH_WAY_VAR = "FTCLI_RUN_MISMATCH_WAY"


class RunMismatch(TrainerError):
    """The checkpoint folder holds another run's checkpoints. `detail` (the message) says how it differs; `fix`, where
    there is one, how the earlier run is found again, said in the hint before the other ways out."""

    def __init__(self, detail: str, fix: str | None = None):
        way = os.environ.get(MISMATCH_WAY_VAR) or "move that folder away"
        super().__init__(detail, hint=f"{fix + '; or ' if fix else ''}start fresh with a new --output-dir, or {way}")
        self.detail = detail
        self.fix = fix


def _digest(path: str) -> str:
    """The content of a data file, local or gs:// (GCS's own CRC32C and size: no download)."""
    import hashlib

    if storage.is_gcs(path):
        bucket, name = storage.split_gcs(path)
        blob = storage._client().bucket(bucket).get_blob(name)
        return f"crc32c:{blob.crc32c}:{blob.size}" if blob is not None else "missing"
    h = hashlib.sha256()
    try:
        with open(Path(path).expanduser(), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return "missing"
    return "sha256:" + h.hexdigest()


def run_fingerprint(cfg: TrainConfig) -> dict:
    """What makes two runs the same run: the options that change the math and the data's content."""
    from dataclasses import asdict

    from ftcli_trainer.tasks import BUNDLED_SAMPLE, TASKS, bundled_sample_file

    values = asdict(cfg)
    fp = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items() if k in MATH_OPTIONS}
    if not fp.get("regression"):
        # Absent unless on: a classification run's checkpoints written before the option existed still resume.
        fp.pop("regression", None)
    if cfg.keep_best:
        # Which weights the export is (the best evaluation's, not the last step's): a finished --keep-best run run
        # again without it exported its last step over the kept model. Absent unless on, as regression.
        fp["keep_best"] = True
    task = TASKS[cfg.task]
    if not (cfg.eval_file or (not cfg.train_file and task.eval_splits) or cfg.regression or cfg.multi_label):
        # Which rows are held out for eval (data._hold_out splits single-label classes by label; earlier trainers
        # drew them at random): a run started by one of those would train on some of its held-out rows. Absent where
        # nothing is held out or the split is still the random one (--label-columns, --regression), so those resume
        # (JSON lists of labels, seen only in the data, carry it).
        fp["held_out_by_label"] = True
    subset = cfg.max_train_samples is not None or cfg.fraction_of_train_data is not None
    if subset and not (cfg.regression or cfg.multi_label):
        # Which rows --max-train-samples or --fraction-of-train-data trains on (data._subset_idx draws single-label
        # classes label by label; earlier trainers drew them at random): resumed here, a run one of those started would
        # go on with other rows. Absent where the subset is still the random one, as held_out_by_label. (Present too
        # where the option asks for all the rows, which only the data says: claim compares these keys by the rows they
        # keep once the fingerprint holds the count, TRAIN_ROWS; an older run, whose file has none, is refused.)
        fp["train_subset_by_label"] = True
    if cfg.max_eval_samples is not None and (cfg.keep_best or cfg.early_stopping):
        # The rows whose evaluations pick the exported weights (--keep-best) or end the run (--early-stopping): resumed
        # on another --max-eval-samples, a run weighed one subset's evaluations against another's best and kept (or
        # stopped at) whichever subset scored higher. Absent where no evaluation decides anything, or none is a
        # subset: the evaluation set changes no weight there, and such runs resume as before.
        fp["max_eval_samples"] = cfg.max_eval_samples
    if cfg.train_file:
        fp["train_data"] = _digest(cfg.train_file)
        fp["eval_data"] = _digest(cfg.eval_file) if cfg.eval_file else None
    elif cfg.task == BUNDLED_SAMPLE:
        fp["train_data"] = _digest(str(bundled_sample_file("sst2_train.csv.gz")))
        fp["eval_data"] = _digest(str(bundled_sample_file("sst2_validation.csv.gz")))
    else:
        fp["train_data"] = f"hub:{task.hf_dataset}/{cfg.dataset_config or task.hf_config or ''}"
        fp["eval_data"] = None
    return fp


def _holds_something(path: str) -> bool:
    """A file with content, or a folder with anything in it, local or gs:// (`ftcli local --output-dir gs://...` is
    any folder of the user's; a Vertex job's own folder is empty at its first claim, and its fingerprint is there
    when a restarted worker claims it again)."""
    if storage.is_gcs(path):
        return storage.gcs_holds_something(path)
    p = Path(path)
    try:
        return any(p.iterdir()) if p.is_dir() else p.stat().st_size > 0
    except OSError:
        return False


def foreign_model_dir(model_dir: str) -> str | None:
    """A model folder, local or gs://, that is there and is no export of ftcli's (storage.not_an_export): the export
    at the run's end would leave it as it is and put the model beside it (storage._beside), so the run is refused
    before any work. Say why, in the export's own words, or None. (It said "the export would replace it", which the
    export no longer does; a gs:// folder of the user's files was called "an earlier run's output".)"""
    files = storage.not_an_export(model_dir)
    if files is None:
        return None
    return (f"{storage.not_an_export_line(model_dir, files)}: this run's export would leave it as it is and put the "
            f"new model beside it, in {model_dir.rstrip('/')}-TIME")


# In a local run folder whose checkpoints/, logs/ or logs/metrics.jsonl is a link: what each said (its own text, as
# os.readlink gives it, so that a relative one still matches once the run folder moved) when a run wrote through it
# (record_links). A run folder whose links all point to nothing holds nothing else, and was taken for one set up ahead
# on a bigger disk, with nothing said: a disk not mounted, or the run folder moved without it, and the same command
# trained a finished run again from step 0, its output made where the links point (under the mount point), without a
# word of the earlier run. With this record, a dead link that says what it said then is an earlier run's (dead_links).
LINKS_RECORD = ".ftcli-links.json"


def _link_paths(checkpoint_dir: str, logs_dir: str) -> list[str]:
    """checkpoints/, logs/ and logs/metrics.jsonl, the local ones, as gone_links and record_links look at them."""
    logs = logs_dir.rstrip("/")
    return [p.rstrip("/") for p in (checkpoint_dir, logs, f"{logs}/{METRICS}") if not storage.is_gcs(p)]


def record_links(base: str) -> None:
    """Once a run has claimed the local run folder `base`: keep in LINKS_RECORD what its checkpoints/, logs/ and
    logs/metrics.jsonl links say (none: nothing written, the record an earlier run left stays)."""
    import json

    if storage.is_gcs(base):
        return
    paths = _link_paths(os.path.join(base, "checkpoints"), os.path.join(base, "logs"))
    links = {os.path.relpath(p, base): os.readlink(p) for p in paths if os.path.islink(p)}
    if not links or _recorded_links(base) == links:
        return
    storage.write_text(os.path.join(base, LINKS_RECORD), json.dumps(links, indent=2, sort_keys=True) + "\n")


def _recorded_links(base: str) -> dict:
    import json

    try:
        value = json.loads(Path(base, LINKS_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def wrote_through(base: str | None, gone: Sequence[str]) -> list[str]:
    """The links of `gone` (gone_links') in the local run folder `base` that an earlier run wrote through: they say
    what LINKS_RECORD says they said then."""
    if not base or not gone or storage.is_gcs(base):
        return []
    recorded = _recorded_links(base)
    found = []
    for link in gone:
        with contextlib.suppress(OSError):
            if recorded.get(os.path.relpath(link, base)) == os.readlink(link):
                found.append(link)
    return found


def gone_links(checkpoint_dir: str, logs_dir: str, model_dir: str | None = None) -> list[str]:
    """checkpoints/, logs/, logs/metrics.jsonl and model/ (local ones) where they are links to something not there,
    looked at before the run makes it (storage.make_dirs: lock, claim, the metrics' writer, the export): dead_links'
    warnings, and claim's `gone`, and ftcli.local's _missing_through_links (the folders the run makes where they point,
    which a failed run removes again). A dead model/ link alone (the disk of the earlier run's model not mounted) was
    not looked at: the run resumed and exported a model into a new folder made where the link points, without a
    word of the earlier one."""
    paths = _link_paths(checkpoint_dir, logs_dir)
    if model_dir and not storage.is_gcs(model_dir):
        paths.append(model_dir.rstrip("/"))
    return [p for p in paths if os.path.islink(p) and not os.path.exists(p)]


METRICS = "metrics.jsonl"  # in logs/: the run's metrics, a row a line (loop.py)


def _gone_line(link: str) -> str:
    return (f"{link} links to {os.path.realpath(link)}, which is not there (the run folder moved without it, or a disk "
            "not mounted?)")


def _wrote_into(checkpoint_dir: str, logs_dir: str, model_dir: str | None, gone: Sequence[str]) -> bool:
    """Whether an earlier run wrote into the run folder: checkpoints/, logs/ or model/ (None: not looked at) hold
    something, the dead links aside (a logs/ that holds only a metrics.jsonl link to a file not made yet is a run set
    up ahead, as a dead checkpoints/ link is)."""
    logs = logs_dir.rstrip("/")
    for path in (checkpoint_dir.rstrip("/"), logs, *([model_dir.rstrip("/")] if model_dir else [])):
        if storage.is_gcs(path) or path in gone:
            continue
        if path == logs and f"{logs}/{METRICS}" in gone:
            try:
                held = any(e.name != METRICS for e in Path(path).iterdir())
            except OSError:
                held = False
        else:
            held = _holds_something(path)
        if held:
            return True
    return False


def dead_links(checkpoint_dir: str, logs_dir: str, model_dir: str, gone: Sequence[str],
               base: str | None = None) -> list[str]:
    """The warnings for a local checkpoints/, logs/, logs/metrics.jsonl or model/ that is a link to something not
    there (`gone`: gone_links'; a relative link moved with its run folder, a disk not mounted), in a run folder an
    earlier run wrote into: the run made the folder the link points to (storage.make_dirs), found no checkpoints there
    and started from step 0, or put its logs, metrics or model apart from the earlier ones, without a word. Said once
    claim has taken the folder (where the earlier run's model or metrics are there, claim refuses and its error names
    the dead links instead: a warning that the run starts from step 0, then an error that it does not, was two
    stories).
    Not for links to something not made yet in a run folder that holds nothing else (model/ nothing, checkpoints/ and
    logs/ nothing but those links): that is how a run is set up on a bigger disk (a logs/metrics.jsonl link to a file
    not made yet was taken for an earlier run's logs, and a checkpoints/ link beside it said to have lost "the earlier
    run's checkpoints"), unless the run folder `base` records that a run wrote through them (wrote_through: its folders
    were all links, and all are gone)."""
    if not gone or not (_wrote_into(checkpoint_dir, logs_dir, model_dir, gone) or wrote_through(base, gone)):
        return []
    lines = []
    for link in gone:
        if link == checkpoint_dir.rstrip("/"):
            lines.append(f"{_gone_line(link)}: the earlier run's checkpoints are not found, and none is resumed (a run "
                         "starts from step 0, in a new folder made there); to resume them, stop and fix the link")
        elif link == logs_dir.rstrip("/"):
            lines.append(f"{_gone_line(link)}: this run's logs go to a new folder made there, apart from the earlier "
                         "run's; to keep them together, stop it and fix the link")
        elif link == model_dir.rstrip("/"):
            lines.append(f"{_gone_line(link)}: the earlier run's model is not found, and this run exports its own to a "
                         "new folder made there; to export it where the earlier one is, stop it and fix the link")
        else:
            lines.append(f"{_gone_line(link)}: this run's metrics go to a new file made there, apart from the earlier "
                         "run's; to keep them together, stop it and fix the link")
    return lines


# In the fingerprint file, beside the run's options: the rows left to train on before a subset (data's
# rows_before_subset), written once the data is loaded (record_train_rows). Not an option: never compared itself.
TRAIN_ROWS = "train_rows"
# Beside it, for a Hub dataset (named in the fingerprint by its name only): the digest of its rows as loaded (data's
# hub_rows), written and compared by record_train_rows. Not an option either.
HUB_ROWS = "hub_rows"
# The fingerprint's keys that say which rows are trained on, compared by the rows they keep once TRAIN_ROWS is known.
SUBSET_KEYS = ("max_train_samples", "fraction_of_train_data", "train_subset_by_label")


def _rows_kept(fp: dict, rows: int) -> int | None:
    """How many of `rows` the subset options in `fp` train on; None for all of them, in their order: as no option."""
    from ftcli_trainer.config import kept_train_rows

    kept = kept_train_rows(rows, fp.get("max_train_samples"), fp.get("fraction_of_train_data"))
    return None if kept >= rows else kept


def _same_rows(found: dict, fingerprint: dict, rows: object) -> bool:
    """Whether the subset options of `found` (the folder's fingerprint) and `fingerprint` (this run's) train on the
    same rows of the `rows` left to train on (found's TRAIN_ROWS). A run started with --max-train-samples 100000 on
    8,000 rows trains on every row, as one without it; a resume that dropped the option (or gave another that keeps
    them all, or the --fraction-of-train-data that keeps as many) was refused as "a different run". Two options that
    keep the same count draw the same rows (data._subset_idx: the count, the seed, the labels, and whether it is drawn
    by label, which is compared then). Without `rows` (a fingerprint from before TRAIN_ROWS, or of a run that failed
    before its data loaded) the options are compared as given, as they were."""
    if all(found.get(k) == fingerprint.get(k) for k in SUBSET_KEYS):
        return True
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 1:
        return False
    try:
        kept = _rows_kept(found, rows)
    except TypeError:  # (a value in the file of another type than the option's: not comparable, so not the same)
        return False
    return kept == _rows_kept(fingerprint, rows) and (
        kept is None or found.get("train_subset_by_label") == fingerprint.get("train_subset_by_label"))


def _has_subset(fp: dict) -> bool:
    return fp.get("max_train_samples") is not None or fp.get("fraction_of_train_data") is not None


def _rows_decide(found: dict, fingerprint: dict, differ: Sequence[str]) -> bool:
    """Whether `found` (the folder's fingerprint, with no TRAIN_ROWS: an older ftcli's, or a run's that stopped before
    its data loaded) and `fingerprint` differ (`differ`, as given) only by subset options that the rows, once loaded,
    may show to train on the same rows: one of the two has no subset option (the other may keep every row), or both
    draw by label or both not (two counts that keep as many rows draw the same ones). Such a run was refused as "a
    different run" before anything loaded, `ftcli local --max-train-samples 100000` on 8,000 rows run again without the
    option; its claim is taken now, and record_train_rows decides on the rows (refused there when they differ). Not
    where both are subsets and only one is drawn by label (an older trainer's random draw): refused by claim, as it
    was."""
    return (bool(differ) and set(differ) <= set(SUBSET_KEYS) and TRAIN_ROWS not in found
            and (not _has_subset(found) or not _has_subset(fingerprint)
                 or found.get("train_subset_by_label") == fingerprint.get("train_subset_by_label")))


def rows_to_check(root: str, fingerprint: dict) -> bool:
    """Whether `root`'s fingerprint is taken for this run's only until the data's rows are counted (_rows_decide): the
    trainer must load them (record_train_rows) before the run can be said to be this one, finished or not."""
    found = _read_fingerprint(root)
    return found is not None and _rows_decide(found, fingerprint, _differing(found, fingerprint))


def _started_with(found: dict) -> str:
    """How the run in the folder was started, as to its training subset: the way to resume it (record_train_rows)."""
    if found.get("max_train_samples") is not None:
        return f"give --max-train-samples {found['max_train_samples']} as it was started"
    if found.get("fraction_of_train_data") is not None:
        return f"give --fraction-of-train-data {found['fraction_of_train_data']:g} as it was started"
    return "give neither --max-train-samples nor --fraction-of-train-data, as it was started"


def _differing(found: dict, fingerprint: dict, rows: object = None) -> list[str]:
    """The keys on which `found` and `fingerprint` differ, TRAIN_ROWS and HUB_ROWS aside and the subset options
    compared by the rows they keep (_same_rows: of `rows`, found's own TRAIN_ROWS when not given)."""
    rows = found.get(TRAIN_ROWS) if rows is None else rows
    same_rows = _same_rows(found, fingerprint, rows)
    return [k for k in sorted(set(found) | set(fingerprint))
            if k not in (TRAIN_ROWS, HUB_ROWS) and found.get(k) != fingerprint.get(k)
            and not (k in SUBSET_KEYS and same_rows)]


def record_train_rows(root: str, fingerprint: dict, rows: int | None, hub_rows: str | None = None) -> None:
    """Once the data is loaded, on the main process: keep the number of rows left to train on before a subset
    (`rows`: data's rows_before_subset) in the folder's fingerprint (TRAIN_ROWS), so that a resume compares the subset
    options by the rows they keep (_same_rows). The file keeps the options it was claimed with. Where it held another
    count (a Hub dataset of the same name that changed since), or none (an older ftcli's fingerprint, which claim
    took on the subset options alone: _rows_decide), and the options differ as given, what claim took for the same rows
    is checked on the rows there are now: refused when they are not (RunMismatch), naming the option the run was
    started with. `hub_rows` (a Hub dataset's: data's hub_rows) is kept beside the count the first time, and a resume
    whose Hub dataset has other rows now is refused: the fingerprint names the dataset only, and the run went on with
    the new rows after training on the old ones (whose count, when the same, said nothing)."""
    import json

    found = _read_fingerprint(root)
    if not found or (rows is not None and found.get(TRAIN_ROWS) == rows and found.get(HUB_ROWS) == hub_rows):
        return
    if hub_rows is not None and found.get(HUB_ROWS) not in (None, hub_rows):
        dataset = str(fingerprint.get("train_data", "")).removeprefix("hub:").rstrip("/")
        raise RunMismatch(f"{root} holds checkpoints of a run on other rows of the Hub dataset {dataset} (it "
                          "changed on the Hub since that run started): resuming them would mix two datasets")
    if differ := _differing(found, fingerprint, rows):  # (no `rows`: by found's own count, as claim compared them)
        counted = f", on the {rows:,} rows there are to train on now" if rows is not None else ""
        raise RunMismatch(f"{root} holds checkpoints of a different run ({_differ(differ)}{counted}): resuming them "
                          "would mix two runs",
                          fix=f"to resume it, {_started_with(found)}" if set(differ) <= set(SUBSET_KEYS) else None)
    if rows is None:
        return
    kept = {TRAIN_ROWS: rows, **({HUB_ROWS: hub_rows} if hub_rows is not None else {})}
    storage.write_text(storage.join(root, FINGERPRINT), json.dumps({**found, **kept}, indent=2, sort_keys=True) + "\n")


def _dead_too(root: str, metrics: str | None, gone: Sequence[str]) -> str:
    """The dead links (`gone`) that a refusal of the model folder (one of the user's) adds, where checkpoints/ or logs/
    hold an earlier run's output besides (_wrote_into, model/ aside): said after it only, once model/ was fixed, the
    same command was refused again for the dead checkpoints/ link, or started from step 0 with a warning. Not in a run
    folder set up ahead, where such links point to folders not made yet (dead_links says nothing there either)."""
    logs = metrics.rsplit("/", 1)[0] if metrics else None
    if not gone or logs is None or not _wrote_into(root, logs, None, gone):
        return ""
    also = "".join(f" ({link} links to {os.path.realpath(link)}, not there either)" for link in gone[1:])
    them, they = ("those links", "they") if len(gone) > 1 else ("that link", "it")
    return f"; and {_gone_line(gone[0])}{also}: fix {them} too (move what {they} pointed at back, or mount the disk)"


def _read_fingerprint(root: str) -> dict | None:
    import json

    text = storage.read_text(storage.join(root, FINGERPRINT))
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _differ(keys: list[str], most: int = 5) -> str:
    """'seed differs', 'seed and model differ', 'a, b and c differ', 'a, b, c, d, e and 2 more differ'."""
    names = [k.replace("_", "-") for k in keys[:most]]
    if len(keys) > most:
        names.append(f"{len(keys) - most} more")
    if len(names) == 1:
        return f"{names[0]} differs"
    return f"{', '.join(names[:-1])} and {names[-1]} differ"


LOCK = ".run.lock"  # held (flock; a lease in a bucket: lease.py) by the trainer that writes into this checkpoint folder
_held = None  # this process's lock file, kept open
_leases: dict = {}  # this process's gs:// leases, by folder


def _lock_holder(root: str) -> str | None:
    """The pid written in `root`'s lock file when another process holds it, else None (free, absent, no flock
    on this system, or a gs:// folder: lease.holder says who holds one of those)."""
    try:
        import fcntl
    except ImportError:
        return None
    if storage.is_gcs(root):
        return None
    try:
        fd = os.open(Path(root) / LOCK, os.O_RDONLY)
    except OSError:
        return None
    with os.fdopen(fd) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return f.read().strip() or "?"
        except OSError:
            return None
    return None


def _busy(root: str, pid: str) -> str:
    return f"{root} is in use by another run (process {pid}): wait for it to end, or give another --output-dir"


def in_use(root: str) -> str | None:
    """Why `root` cannot be written now: another live run holds it. None if nobody does."""
    if storage.is_gcs(root):
        from ftcli_trainer import lease

        return None if root.rstrip("/") in _leases else lease.holder(root.rstrip("/"))
    pid = _lock_holder(root)
    return None if pid is None else _busy(root, pid)


def lock(root: str) -> None:
    """Hold `root` for this process until it exits: a second run in the same folder (two terminals, one command)
    resumed the first one's checkpoints while it was still writing them, and both exported."""
    global _held
    if storage.is_gcs(root):
        # Another machine's run shares a bucket, not a file lock: a lease object in the folder (lease.py).
        from ftcli_trainer import lease

        if root.rstrip("/") not in _leases:
            held = lease.Lease(root.rstrip("/"))
            held.acquire()
            _leases[root.rstrip("/")] = held
        return
    try:
        import fcntl
    except ImportError:
        return
    if _held is not None:
        return
    storage.make_dirs(Path(root))
    f = open(Path(root) / LOCK, "a+")  # noqa: SIM115 - held open for the life of the process
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        pid = f.read().strip() or "?"
        f.close()
        raise TrainerError(_busy(root, pid)) from None
    except OSError:  # a filesystem without locks: go on without one
        f.close()
        return
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    _held = f


def lock_and_claim(root: str, fingerprint: dict, model_dir: str | None = None, metrics: str | None = None,
                   gone: Sequence[str] = ()) -> bool:
    """The trainer's start: lock(root), then claim (its arguments, its answer). A refused claim leaves nothing that
    lock made: run by hand (`python -m ftcli_trainer.task`, as the README says one may) with checkpoints/ a link to
    a folder not there, lock made that folder and its .run.lock before claim refused; the folder stayed, the link
    was no longer dead, and the same command was refused again in other, older words ("an earlier run's, and no
    checkpoints say which run it was", nothing of the link). The lock is given back then, its file removed where lock
    made it, and the folders lock made (a missing checkpoints/, or where its link points) are removed when empty.
    (`ftcli local` claims before the trainer starts, and without lock: nothing to leave.) A gs:// folder makes no
    folders; its lease is given back at the process's end (unlock), as for any failure."""
    local = not storage.is_gcs(root)
    made = missing_folders(root) if local else []
    lock_file = Path(root) / LOCK
    fresh_lock = local and not os.path.lexists(lock_file)
    ours = _held is None  # (a process locks once: a second lock, of another folder, holds nothing)
    lock(root)
    try:
        return claim(root, fingerprint, model_dir, metrics, gone)
    except RunMismatch:
        if local:
            _let_go(lock_file if fresh_lock else None, ours, made)
        raise


def missing_folders(root: str) -> list[Path]:
    """The folders that storage.make_dirs would make for the local `root` (through a link, where it points) that are
    not there now, deepest first (also ftcli.local's _missing_through_links)."""
    missing = []
    folder = Path(os.path.realpath(root))
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _let_go(lock_file: Path | None, ours: bool, made: Sequence[Path]) -> None:
    """lock_and_claim's refusal: this process's flock given back (if it took it), `lock_file` removed (the one lock
    made; removed first, while still held, so that no other run's lock file is removed), `made` removed when empty."""
    global _held
    if lock_file is not None:
        with contextlib.suppress(OSError):
            lock_file.unlink()
    if ours and _held is not None:
        _held.close()
        _held = None
    for folder in made:  # (deepest first: each one's parent is empty once it is gone)
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when empty


def still_held(root: str) -> None:
    """Before writing into `root`: raise TrainerError when this run lost its gs:// lease to another run (it could
    not renew it in time). A local folder's flock cannot be lost."""
    held = _leases.get(root.rstrip("/")) if storage.is_gcs(root) else None
    if held is not None:
        held.check()


def unlock() -> None:
    """At the run's end: give back the gs:// leases this process holds (a local flock ends with the process)."""
    while _leases:
        _, held = _leases.popitem()
        held.release()


def claim(root: str, fingerprint: dict, model_dir: str | None = None, metrics: str | None = None,
          gone: Sequence[str] = ()) -> bool:
    """Make `root` this run's checkpoint folder, or refuse: checkpoints of another run (other data, labels,
    model or options that change the math) are never resumed. Call once, on the main process, before
    training. A folder with no checkpoints is taken unless the run's local `model_dir` or `metrics` (its
    metrics.jsonl) hold something that is not known to be this run's: its model would be replaced and its metrics
    mixed with this run's; where `root` is among `gone` (gone_links', found before lock made the folder), the error
    says that its link points to nothing, the cause, and how to get the earlier run back. A model folder that ftcli did
    not export is refused whatever the checkpoints say. Return whether the fingerprint was written now."""
    import json

    if model_dir and (why := foreign_model_dir(model_dir)):
        raise RunMismatch(why + _dead_too(root, metrics, gone))

    has_checkpoints = bool(_list(root))
    found = _read_fingerprint(root)
    differ = _differing(found or {}, fingerprint)
    if found and _rows_decide(found, fingerprint, differ):
        differ = []  # (the rows decide, once the data is loaded: record_train_rows)
    if has_checkpoints:
        if found is None:
            raise RunMismatch(f"{root} holds checkpoints that do not say which run they belong to")
        if not differ:
            return False
        raise RunMismatch(f"{root} holds checkpoints of a different run ({_differ(differ)}): resuming them "
                          f"would mix two runs")
    if found is not None and not differ:
        return False
    held = [path for path in (model_dir, metrics) if path and _holds_something(path)]
    if held and root.rstrip("/") in gone:
        # (dead_links' warning said the run starts from step 0, and "no checkpoints say which run it was" followed,
        # about the model, with nothing of the link)
        also = [f"{link} links to {os.path.realpath(link)}, not there either" for link in gone
                if link != root.rstrip("/")]
        them = "the links point at its checkpoints and logs" if also else "the link point at its checkpoints"
        hold = f"{' and '.join(held)} hold{'s' if len(held) == 1 else ''}"
        raise RunMismatch(f"{_gone_line(root.rstrip('/'))}: the earlier run's checkpoints, which say whose output "
                          f"{hold}, are not found, and this run would replace or mix with it"
                          f"{''.join(f' ({a})' for a in also)}",
                          fix=f"to resume the earlier run, make {them} again (move them back, or mount the disk)")
    if held:
        whose = (f"a different run's ({_differ(differ)})" if found else
                 "an earlier run's, and no checkpoints say which run it was,")
        raise RunMismatch(f"{' and '.join(held)} hold{'s' if len(held) == 1 else ''} {whose} output: this run would "
                          "replace or mix with it")
    storage.write_text(storage.join(root, FINGERPRINT), json.dumps(fingerprint, indent=2, sort_keys=True) + "\n")
    return True
