"""`ftcli local`: run the trainer on this machine, exactly as Vertex would run it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ftcli.errors import FtcliError, JobFailed
from ftcli.trainer_options import validate, with_trainer_options


def _check_train_extra() -> None:
    missing = [m for m in ("torch", "transformers", "numpy") if importlib.util.find_spec(m) is None]
    if missing:
        raise FtcliError(
            f"ftcli local needs the trainer's dependencies ({', '.join(missing)} missing)",
            hint="pip install 'ftcli[train]' (see the README's set-up command)",
        )


def needs_hub(cfg) -> bool:
    from ftcli_trainer.model import resolve_model_path
    from ftcli_trainer.tasks import TASKS

    task = TASKS[cfg.task]
    data_remote = task.hf_dataset is not None and not cfg.train_file
    return data_remote or not Path(resolve_model_path(cfg.model)).is_dir()


def run_local(trainer: dict[str, Any], offline: bool) -> int:
    from ftcli.output import err, out
    from ftcli_trainer.task import new_run_id

    cfg, argv = validate(trainer)
    _check_train_extra()
    base = Path(cfg.output_dir) if cfg.output_dir else Path("ftcli-runs") / new_run_id()
    if not cfg.output_dir:
        argv += ["--output-dir", str(base)]
    env = dict(os.environ)
    # The same variables Vertex sets with base_output_dir, pointing at the local folders.
    env.update(
        AIP_MODEL_DIR=str(base / "model") + "/",
        AIP_CHECKPOINT_DIR=str(base / "checkpoints") + "/",
        AIP_TENSORBOARD_LOG_DIR=str(base / "logs") + "/",
    )
    if offline or not needs_hub(cfg):
        # Set before transformers is imported: later, a Hub id retries DNS for ~20 s before failing.
        env["HF_HUB_OFFLINE"] = "1"
        env["HF_DATASETS_OFFLINE"] = "1"
    cmd = [sys.executable, "-m", "ftcli_trainer.task", *argv]
    err().print(f"[dim]running: python -m ftcli_trainer.task {' '.join(argv)}[/]")
    try:
        code = subprocess.call(cmd, env=env)
    except KeyboardInterrupt:
        code = 130
    if code == 0:
        out().print(f"run folder: {base}")
        err().print(f"[dim]load it: transformers.pipeline('text-classification', model='{base / 'model'}')[/]")
        return 0
    if code == 130 or code == -2:
        err().print(f"interrupted; partial output and checkpoints are in {base}")
        return 130
    if code == 2:  # the trainer already printed its one-line error
        return 2
    raise JobFailed(f"the trainer exited with status {code}", hint=f"its output is above; run folder: {base}")


@with_trainer_options
def local(
    trainer: dict[str, Any],
    offline: Annotated[bool, typer.Option(
        "--offline",
        help="Never contact the Hugging Face Hub (HF_HUB_OFFLINE=1). Implied when the model and the data "
        "are both local, as for the bundled default.")] = False,
) -> None:
    """Run the trainer on this machine, with Vertex's output layout (model/, checkpoints/, logs/).

    With no options it fine-tunes MiniLM-L6 on the bundled SST-2 sample, offline, in a few minutes on a
    laptop CPU.

    Examples:

      ftcli local --epochs 1

      ftcli local --task csv --train-file reviews.csv --label-column sentiment --model distilbert-base-uncased
    """
    code = run_local(trainer, offline)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("local", no_args_is_help=False)(local)
