"""Checkpoints to AIP_CHECKPOINT_DIR (local or gs://): atomic, the last few kept, resumable.

A checkpoint is a folder `step-<N>` with the model weights (safetensors) and the rest of the training
state (optimizer, scheduler, scaler, RNG, position) in a torch file read with weights_only=True, so
loading never unpickles arbitrary objects. It counts only once its completion marker exists.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

from ftcli_trainer import storage
from ftcli_trainer.errors import TrainerError

log = logging.getLogger("ftcli_trainer")
STEP_RE = re.compile(r"^step-(\d+)$")
KEEP = 2


def _list(root: str) -> list[tuple[int, str]]:
    if storage.is_gcs(root):
        names = storage.list_subdirs(root)
    else:
        p = Path(root)
        names = [d.name for d in p.iterdir() if d.is_dir()] if p.is_dir() else []
    found = [(int(m.group(1)), n) for n in names if (m := STEP_RE.match(n))]
    return sorted(found)


def save(root: str, step: int, model, state: dict) -> None:
    import torch
    from safetensors.torch import save_model

    target = storage.join(root, f"step-{step:08d}")
    staged = None
    try:
        if storage.is_gcs(root):
            staged = storage.local_tmp("ckpt")
        else:
            staged = storage.staging_dir(Path(root), f"step-{step:08d}")
        save_model(model, str(staged / "model.safetensors"))
        torch.save(state, staged / "trainer_state.pt")
        storage.publish_dir(staged, target)
    except OSError as e:
        # A full disk or a read-only folder is the environment, not a bug: one line, the last checkpoint intact.
        raise TrainerError(storage.write_error(e, f"the step {step} checkpoint", root)) from None
    finally:
        if staged is not None and staged.exists():
            shutil.rmtree(staged, ignore_errors=True)
    # Keep the newest KEEP complete checkpoints; anything else (older, or torn by a crash) goes.
    complete = [name for _, name in _list(root) if _is_complete(storage.join(root, name))]
    keep = set(complete[-KEEP:])
    for _, name in _list(root):
        if name not in keep:
            _remove(storage.join(root, name))


def _is_complete(path: str) -> bool:
    return storage.exists(storage.join(path, storage.COMPLETE_MARKER))


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
        storage.clean_stale_staging(Path(root), r"\.step-\d+")


def load_latest(root: str, model) -> dict | None:
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
            load_model(model, str(local / "model.safetensors"), strict=True)
        except Exception as e:  # noqa: BLE001 - any damage means: not this one
            log.warning("ignoring checkpoint %s: %s", path, str(e).splitlines()[0] if str(e) else type(e).__name__)
            continue
        finally:
            if downloaded is not None:
                shutil.rmtree(downloaded, ignore_errors=True)  # loaded into memory: the copy is not needed
        log.info("resuming from %s (optimizer step %d)", path, step)
        return state
    return None
