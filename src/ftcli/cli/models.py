"""`ftcli download JOB [DIR]` and `ftcli predict MODEL_OR_JOB TEXT...`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from ftcli.cli.options import JobArg, JsonOpt, ProjectOpt, RegionOpt
from ftcli.errors import FtcliError, UsageError
from ftcli_trainer.storage import COMPLETE_MARKER  # written last by the trainer's export


def download(
    job: JobArg,
    dest: Annotated[Optional[Path], typer.Argument(  # noqa: UP045
        help="Folder for the model, new or empty [default: ./ftcli-models/JOB_ID].")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Write the model's files into a non-empty folder: files with the model's names are "
        "replaced, every other file is kept.")] = False,
    project: ProjectOpt = None,
    region: RegionOpt = None,
) -> None:
    """Copy a job's exported model (its AIP_MODEL_DIR) to a local folder.

    Refuses a model whose completion marker is missing (still running, or failed half-way), and a folder
    that already holds files (unless --force). Nothing is ever deleted.

    Example: ftcli download last ./my-model
    """
    from ftcli.models import download_model
    from ftcli.output import out

    path = download_model(job, dest, project, region, force=force)
    out().print(f"model: {path}")


def _load_texts(texts: list[str], file: Path | None) -> list[str]:
    out = list(texts)
    if file is not None:
        try:
            out += [line.rstrip("\n") for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"cannot read --file {file}: {e}") from None
    if not out:
        raise UsageError("no text to classify", hint='pass texts as arguments or --file texts.txt (one per line)')
    return out


def predict(
    model: Annotated[str, typer.Argument(help="A model folder, or a job (short id, last, id or resource name).")],
    texts: Annotated[Optional[list[str]], typer.Argument(help="Texts to classify.")] = None,  # noqa: UP045
    file: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--file", help="Also classify every non-empty line of this file.")] = None,
    threshold: Annotated[Optional[float], typer.Option(  # noqa: UP045
        "--threshold", help="Multi-label: show labels at or above this probability [default: the model's].")] = None,
    json_out: JsonOpt = False,
    project: ProjectOpt = None,
    region: RegionOpt = None,
) -> None:
    """Classify texts with an exported model: label and score per text (multi-label: every label above the
    threshold).

    Examples:

      ftcli predict ftcli-runs/20261125-120000-ab12/model "a wonderful, moving film"

      ftcli predict last --file reviews.txt --json
    """
    import importlib.util

    from ftcli.output import out

    items = _load_texts(texts or [], file)
    path = Path(model)
    if not path.is_dir():
        from platformdirs import user_cache_dir

        from ftcli.cli.jobs import resolve_job

        _, name = resolve_job(model, project, region)
        path = Path(user_cache_dir("ftcli")) / "models" / name.rsplit("/", 1)[-1]
        if not (path / COMPLETE_MARKER).exists():
            from ftcli.models import download_model

            # ftcli's own cache folder: a copy left without its marker is completed in place
            path = download_model(model, path, project, region, force=True)
    if not (path / "config.json").exists():
        raise UsageError(f"{path} is not a model folder (no config.json)")
    if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("torch") is None:
        raise FtcliError("ftcli predict needs torch and transformers", hint="pip install 'ftcli[train]'")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder: never wait on the Hub
    from transformers import pipeline
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        clf = pipeline("text-classification", model=str(path), top_k=None)
    except Exception as e:  # noqa: BLE001 - a damaged folder fails in many ways deep inside transformers
        detail = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise FtcliError(f"cannot load the model in {path}: {detail}",
                         hint="download it again into a new folder (ftcli download JOB DIR), or give another "
                              "model folder") from None
    config = clf.model.config
    multi = config.problem_type == "multi_label_classification"
    cut = threshold if threshold is not None else getattr(config, "ftcli_threshold", 0.5)
    results = clf(items, function_to_apply="sigmoid" if multi else "softmax", truncation=True)
    o = out()
    for text, scores in zip(items, results, strict=True):
        scores = sorted(scores, key=lambda s: -s["score"])
        if multi:
            labels = [{"label": s["label"], "score": round(s["score"], 4)} for s in scores if s["score"] >= cut]
            if json_out:
                print(json.dumps({"text": text, "labels": labels}))
            else:
                shown = ", ".join(f"{x['label']} {x['score']:.3f}" for x in labels) or "(none)"
                o.print(f"{shown}\t{text}", markup=False)
        else:
            top = scores[0]
            if json_out:
                print(json.dumps({"text": text, "label": top["label"], "score": round(top["score"], 4)}))
            else:
                o.print(f"{top['label']}\t{top['score']:.3f}\t{text}", markup=False)


def register(app: typer.Typer) -> None:
    app.command("download")(download)
    app.command("predict")(predict)
