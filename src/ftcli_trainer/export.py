"""Export: a folder `transformers.pipeline` loads, written so a half-written model never looks complete."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ftcli_trainer import storage
from ftcli_trainer.errors import TrainerError


def export_model(model, tokenizer, model_dir: str, metrics: dict, run_config: dict) -> None:
    staged = None
    try:
        if storage.is_gcs(model_dir):
            staged = storage.local_tmp("model")
        else:
            dest = Path(model_dir)
            # Next to the target (same filesystem: the final rename is atomic); a dead run's staging goes first.
            staged = storage.staging_dir(dest.parent, dest.name)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        model.save_pretrained(staged)
        tokenizer.save_pretrained(staged)
        (staged / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
        (staged / "ftcli_run.json").write_text(json.dumps(run_config, indent=2, sort_keys=True) + "\n")
        storage.publish_dir(staged, model_dir)
    except Exception as e:
        os_error = storage.os_error_of(e)  # save_pretrained's safetensors reports "(os error 28)"
        if os_error is None:
            raise
        where = storage.staged_where(model_dir, staged) if staged is not None else model_dir
        raise TrainerError(storage.write_error(os_error, "the model", where)) from None
    finally:
        if staged is not None and staged.exists():
            shutil.rmtree(staged, ignore_errors=True)
