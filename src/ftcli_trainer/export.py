"""Export: a folder `transformers.pipeline` loads, written so a half-written model never looks complete."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ftcli_trainer import metrics, storage
from ftcli_trainer.checkpoint import WEIGHTS, take_weights, taking_weights
from ftcli_trainer.errors import TrainerError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

PREDICTIONS = "eval_predictions.npz"


def prediction_arrays(predictions: dict[str, tuple[np.ndarray, np.ndarray]], label_names: list[str],
                      multi_label: bool, regression: bool, threshold: float) -> dict[str, np.ndarray]:
    """What `ftcli report` draws from, per eval set (in order): `NAME/labels` (the truth), `NAME/predicted`
    (class ids; multi-label a 0/1 matrix at the threshold; regression the predicted number) and `NAME/scores`
    (softmax or sigmoid probabilities; regression the prediction again). Plain arrays, no pickles."""
    kind = "regression" if regression else "multi_label" if multi_label else "single_label"
    out: dict[str, np.ndarray] = {"kind": np.array(kind), "label_names": np.array(label_names, dtype=str),
                                  "eval_sets": np.array(list(predictions), dtype=str)}
    for name, (labels, logits) in predictions.items():
        if regression:
            scores = logits[:, 0].astype(np.float64)
            predicted = scores.astype(np.float32)
        elif multi_label:
            scores = metrics.sigmoid(logits)
            predicted = (scores >= threshold).astype(np.uint8)
            labels = (labels >= 0.5).astype(np.uint8)
        else:
            scores = metrics.softmax(logits)
            predicted = logits.argmax(axis=1).astype(np.int64)
        out[f"{name}/labels"] = labels
        out[f"{name}/predicted"] = predicted
        out[f"{name}/scores"] = scores.astype(np.float32)
    return out


def metrics_json(metrics: dict) -> str:
    """metrics.json's text: indented, but a matrix (the confusion matrix) one row a line. One number a line made a
    1,000-label run's metrics.json 9 MB (7 of them the matrix's indentation) and a 3,000-label one's 82 MB."""
    rows: dict[str, str] = {}

    def placeholder(value: Any) -> Any:  # a metrics.json value (JSON)
        if isinstance(value, list) and value and all(isinstance(r, list) for r in value):
            key = f"@@ftcli-matrix-{len(rows)}@@"
            rows[key] = "[\n" + ",\n".join("    " + json.dumps(r, separators=(",", ":")) for r in value) + "\n  ]"
            return key
        return value

    text = json.dumps({k: placeholder(v) for k, v in metrics.items()}, indent=2, sort_keys=True) + "\n"
    for key, matrix in rows.items():
        text = text.replace(json.dumps(key), matrix, 1)
    return text


def export_model(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, model_dir: str, metrics: dict,
                 run_config: dict, predictions: dict[str, np.ndarray] | None = None,
                 weights_from: str | None = None) -> None:
    """`weights_from`: a checkpoint folder whose weights file is the model's weights as save_pretrained writes them
    (the final checkpoint's: checkpoint._save_as_exported), taken instead of written again."""
    taking_weights(lambda source: _export(model, tokenizer, model_dir, metrics, run_config, predictions, source),
                   weights_from, "the model")


def _export(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, model_dir: str, metrics: dict,
            run_config: dict, predictions: dict[str, np.ndarray] | None, weights_from: str | None) -> None:
    """export_model's staging and publishing; storage.SourceGone when `weights_from`'s weights object was deleted
    before its copy (the model not published)."""
    staged = None
    target = model_dir
    copies: dict[str, str] = {}
    try:
        if storage.is_gcs(model_dir):
            staged = storage.local_tmp("model")
        else:
            dest = Path(model_dir)
            if dest.is_symlink():
                # A model/ that links to a folder elsewhere (a bigger disk) is that folder: the link itself was
                # renamed away and deleted, and the model put in its place on the run's disk (a link to nothing: the
                # whole run, then "Not a directory").
                dest = Path(os.path.realpath(dest))
                target = str(dest)
            # Next to the target (same filesystem: the final rename is atomic); a dead run's staging goes first.
            staged = storage.staging_dir(dest.parent, dest.name)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        source = storage.join(weights_from, WEIGHTS) if weights_from is not None else None
        taken = False
        if source is not None and storage.is_gcs(source) == storage.is_gcs(model_dir):
            # The last checkpoint (or the kept best) wrote these weights with this very call: its file is taken (a
            # hard link, or a copy made inside Cloud Storage: checkpoint.take_weights, as a checkpoint takes a best's),
            # and save_pretrained writes the rest (the config, a remote-code model's code), which an empty state_dict
            # leaves without a weights file. (First: save_pretrained removes the weight files it did not write.)
            model.save_pretrained(staged, state_dict={})
            (staged / WEIGHTS).unlink(missing_ok=True)
            taken = take_weights(source, staged, copies)
        if not taken:  # (none to take, or the file gone since: removed by hand, an object deleted)
            model.save_pretrained(staged)
        # The length the run trained and evaluated at becomes the tokenizer's limit: pipeline(...) and ftcli predict
        # then cut a long text where the run did, not at the model's 512 (the same text scored differently).
        told = getattr(tokenizer, "model_max_length", None)
        if isinstance(run_config.get("max_length"), int):
            tokenizer.model_max_length = run_config["max_length"]
        # The side the run padded (data.collate: on the right). A tokenizer saved for generation pads on the left
        # (Llama's, Gemma's, many GPT-2 fine-tunes'): a model of learned absolute positions (GPT-2, GPT-Neo, BigCode)
        # then read a short text in a batch at other positions than in training, and scored it otherwise than alone.
        # Written into tokenizer_config.json (save_pretrained writes its init_kwargs), not only set: Llama's and Gemma's
        # tokenizer classes pad on the left unless their config says otherwise.
        side = getattr(tokenizer, "padding_side", "right")
        init_kwargs = getattr(tokenizer, "init_kwargs", None)
        init_side = init_kwargs.get("padding_side") if isinstance(init_kwargs, dict) else None
        tokenizer.padding_side = "right"
        if isinstance(init_kwargs, dict):
            init_kwargs["padding_side"] = "right"
        try:
            tokenizer.save_pretrained(staged)
        finally:
            tokenizer.model_max_length = told
            tokenizer.padding_side = side
            if isinstance(init_kwargs, dict):
                if init_side is None:
                    init_kwargs.pop("padding_side", None)
                else:
                    init_kwargs["padding_side"] = init_side
        (staged / "metrics.json").write_text(metrics_json(metrics))
        (staged / "ftcli_run.json").write_text(json.dumps(run_config, indent=2, sort_keys=True) + "\n")
        if predictions:  # part of the model folder, so it is published (and marked complete) with it
            # mypy: a **dict could fill savez's allow_pickle; these keys are array names ("eval/labels", ...). NumPy
            # 1.26's stubs (the floor) do not say so: unused-ignore there.
            np.savez_compressed(staged / PREDICTIONS, **predictions)  # type: ignore[arg-type, unused-ignore]
        storage.publish_dir(staged, target, copies=copies)
    except Exception as e:
        os_error = storage.os_error_of(e)  # save_pretrained's safetensors reports "(os error 28)"
        if os_error is None:
            raise
        where = storage.staged_where(model_dir, staged) if staged is not None else model_dir
        raise TrainerError(storage.write_error(os_error, "the model", where)) from None
    finally:
        if staged is not None and staged.exists():
            shutil.rmtree(staged, ignore_errors=True)
