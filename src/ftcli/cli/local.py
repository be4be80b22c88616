"""`ftcli local`: run the trainer on this machine, exactly as Vertex would run it."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ftcli.errors import FtcliError, JobFailed, UsageError
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


# Forwarded to the trainer: SIGTERM (what `docker stop`, systemd and Vertex send) makes it checkpoint and stop;
# SIGHUP is a closed terminal. A trainer left running after ftcli is gone would keep writing the run folder.
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def _terminal_sent_it_too() -> bool:
    """True when a Ctrl-C reached the trainer directly (it shares our terminal's foreground process group)."""
    try:
        fd = sys.stdin.fileno()
        return os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp()
    except (OSError, ValueError):
        return False


def run_trainer(cmd: list[str], env: dict[str, str]) -> tuple[int, int | None]:
    """Run the trainer as a child and pass on the signals that stop ftcli; return (exit status, the last
    signal forwarded or None)."""
    forwarded: list[int] = []
    proc = subprocess.Popen(cmd, env=env)

    def forward(signum, frame):
        if signum == signal.SIGINT and _terminal_sent_it_too():
            return  # the trainer has its own copy of this Ctrl-C; a second one would cut its clean exit short
        forwarded.append(signum)
        if proc.poll() is None:
            proc.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (*FORWARDED, signal.SIGINT)}
    try:
        while True:
            try:
                code = proc.wait()
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for old interpreters
                continue
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return code, (forwarded[-1] if forwarded else None)


def _set_aside(base: str) -> str | None:
    """--restart: move an earlier run's model/, checkpoints/ and logs/ into previous-TIME/ (nothing deleted)."""
    import datetime as dt

    from ftcli_trainer import storage

    if storage.is_gcs(base):
        raise UsageError("--restart works on local run folders; for gs:// give a new --output-dir")
    found = [Path(base) / d for d in ("model", "checkpoints", "logs") if (Path(base) / d).exists()]
    if not found:
        return None
    aside = Path(base) / f"previous-{dt.datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"
    aside.mkdir(parents=True)
    for d in found:
        d.rename(aside / d.name)
    return str(aside)


def _claim(base: str, cfg) -> bool:
    """Refuse, before the trainer starts, to resume another run's checkpoints in this output folder; return
    whether a fingerprint was written now."""
    from ftcli_trainer import checkpoint, storage

    root = storage.join(base, "checkpoints")
    if not storage.is_gcs(root):
        storage.clean_stale_staging(Path(base), r"\.model")  # a crashed export's staging
        checkpoint.clean_stale(root)
    try:
        return checkpoint.claim(root, checkpoint.run_fingerprint(cfg))
    except checkpoint.RunMismatch as e:
        raise UsageError(e.detail,
                         hint="start fresh with a new --output-dir, or --restart to set the earlier run's model, "
                              "checkpoints and logs aside in this folder (nothing is deleted)") from None


def _unclaim(base: str) -> None:
    """A run that failed before its first checkpoint leaves no folder behind just for its fingerprint."""
    from ftcli_trainer import checkpoint, storage

    if storage.is_gcs(base):
        return
    ckpt = Path(base) / "checkpoints"
    if any(ckpt.glob("step-*")):
        return
    (ckpt / checkpoint.FINGERPRINT).unlink(missing_ok=True)
    for folder in (ckpt, Path(base)):
        try:
            folder.rmdir()  # only when empty: anything else in there stays
        except OSError:
            return


def run_local(trainer: dict[str, Any], offline: bool, restart: bool = False) -> int:
    from ftcli.output import err, out
    from ftcli_trainer import storage
    from ftcli_trainer.task import new_run_id

    cfg, argv = validate(trainer)
    _check_train_extra()
    base = cfg.output_dir or str(Path("ftcli-runs") / new_run_id())
    if not cfg.output_dir:
        argv += ["--output-dir", base]
    elif restart:
        aside = _set_aside(base)
        if aside:
            err().print(f"[dim]--restart: the earlier run is in {aside}[/]")
    claimed = _claim(base, cfg)
    env = dict(os.environ)
    # The same variables Vertex sets with base_output_dir, pointing at the local folders (or gs:// ones).
    env.update(
        AIP_MODEL_DIR=storage.join(base, "model") + "/",
        AIP_CHECKPOINT_DIR=storage.join(base, "checkpoints") + "/",
        AIP_TENSORBOARD_LOG_DIR=storage.join(base, "logs") + "/",
    )
    if offline or not needs_hub(cfg):
        # Set before transformers is imported: later, a Hub id retries DNS for ~20 s before failing.
        env["HF_HUB_OFFLINE"] = "1"
        env["HF_DATASETS_OFFLINE"] = "1"
    cmd = [sys.executable, "-m", "ftcli_trainer.task", *argv]
    err().print(f"[dim]running: python -m ftcli_trainer.task {' '.join(argv)}[/]")
    code, signum = run_trainer(cmd, env)
    model = storage.join(base, "model")
    if code != 0 and claimed:
        _unclaim(base)
    if code == 0:
        out().print(f"run folder: {base}")
        err().print(f"[dim]load it: transformers.pipeline('text-classification', model='{model}')[/]")
        return 0
    if signum is not None and signum != signal.SIGINT:
        name = signal.Signals(signum).name
        err().print(f"stopped by {name}; checkpoints are in {storage.join(base, 'checkpoints')}: the same command "
                    f"with --output-dir {base} resumes")
        return 128 + signum
    if code in (130, -signal.SIGINT):
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
    restart: Annotated[bool, typer.Option(
        "--restart",
        help="Start over in an --output-dir that holds an earlier run: its model/, checkpoints/ and logs/ are "
        "moved into previous-TIME/ first (nothing is deleted).")] = False,
) -> None:
    """Run the trainer on this machine, with Vertex's output layout (model/, checkpoints/, logs/).

    With no options it fine-tunes MiniLM-L6 on the bundled SST-2 sample, offline, in a few minutes on a
    laptop CPU. Run again with the same --output-dir and the same data and options, it resumes from the last
    checkpoint; with other data or options it refuses (use a new --output-dir, or --restart).

    Examples:

      ftcli local --epochs 1

      ftcli local --task csv --train-file reviews.csv --label-column sentiment --model distilbert-base-uncased
    """
    code = run_local(trainer, offline, restart)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("local", no_args_is_help=False)(local)
