"""Export: a folder `transformers.pipeline` loads, written so a half-written model never looks complete."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from ftcli_trainer import storage


def export_model(model, tokenizer, model_dir: str, metrics: dict, run_config: dict) -> None:
    if storage.is_gcs(model_dir):
        staged = Path(tempfile.mkdtemp(prefix="ftcli-model-"))
    else:
        dest = Path(model_dir)
        dest.parent.mkdir(parents=True, exist_ok=True)
        # Same filesystem as the target, so the final rename is atomic.
        staged = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        model.save_pretrained(staged)
        tokenizer.save_pretrained(staged)
        (staged / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
        (staged / "ftcli_run.json").write_text(json.dumps(run_config, indent=2, sort_keys=True) + "\n")
        storage.publish_dir(staged, model_dir)
    finally:
        if staged.exists():
            shutil.rmtree(staged, ignore_errors=True)
