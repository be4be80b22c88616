"""`ftcli train --smoke`: the job's own start, here, on a few rows, before paying for a GPU.

The trainer wheel that would be uploaded is built, pip-installed into a local stand-in for the container
(`ftcli.container`) by the job's own start script, and run with the job's trainer options (local files where
the job would read their uploaded copies), cut to a few rows, one epoch and one evaluation, on this machine's
CPU. A wrong column, label, model id or option fails here in seconds. Nothing is uploaded, no job is created.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ftcli_trainer.config import TrainConfig

SMOKE_TRAIN_ROWS = 64
SMOKE_EVAL_ROWS = 32
# W&B is left out: the smoke would read the key from Secret Manager with the user's own credentials (submitting needs
# only secretmanager.secrets.get on it; the job's service account reads it) and log a 64-row run to the project.
WANDB_OPTIONS = ("wandb_project", "wandb_secret")
# --hf-secret is not read either (the same credentials): with it, the smoke downloads from the Hub with this machine's
# own Hugging Face login (HF_TOKEN, `hf auth login`), the nearest stand-in for the job's token; without it, with none.
LEFT_OUT = (*WANDB_OPTIONS, "hf_secret")
# The stand-in for the container is a POSIX virtual environment (bin/python; Windows makes Scripts\python.exe) that
# runs the job's bash start script: on Windows the smoke ended in "cannot use ...\bin\python", naming no cause.
ON_WINDOWS = os.name == "nt"


def wandb_note(trainer: dict[str, Any]) -> str | None:
    """What the smoke leaves out of the job's options, said before it runs."""
    project = trainer.get("wandb_project")
    return f"the smoke run leaves W&B out (--wandb-project {project}): it reads no key and logs no run" \
        if project else None


def hf_secret_note(trainer: dict[str, Any]) -> str | None:
    """What the smoke does instead of reading --hf-secret, said before it runs."""
    return "the smoke run does not read --hf-secret (the job does): it downloads from the Hugging Face Hub with this " \
        "machine's own login (HF_TOKEN, hf auth login), if there is one" if trainer.get("hf_secret") else None


def smoke_options(trainer: dict[str, Any], output_dir: str) -> dict[str, Any]:
    """The job's trainer options cut down to a smoke run (never more rows than the job asked for). Local paths
    are made absolute: the smoke runs in a folder of its own, not the user's."""
    def at_most(key: str, n: int) -> int:
        given = trainer.get(key)
        return min(given, n) if given else n

    def absolute(value: str) -> str:
        path = Path(value).expanduser()
        return str(path.absolute()) if path.exists() else value

    paths = {k: absolute(v) for k, v in trainer.items()
             if k in ("train_file", "eval_file", "model") and isinstance(v, str) and not v.startswith("gs://")}
    kept = {k: v for k, v in trainer.items() if k not in LEFT_OUT}
    if kept.pop("early_stopping", None):
        # One epoch of a few rows cannot stop early (the trainer refuses an --early-stopping that could never stop):
        # the smoke keeps the best instead, the export path an early stop takes
        kept["keep_best"] = True
    kept.pop("early_stopping_threshold", None)
    return {**kept, **paths, "max_train_samples": at_most("max_train_samples", SMOKE_TRAIN_ROWS),
            "max_eval_samples": at_most("max_eval_samples", SMOKE_EVAL_ROWS), "epochs": 1,
            "log_every": 1, "output_dir": output_dir}


def missing_here(requirements: list[str]) -> list[str]:
    """The requirements that this machine's packages do not meet (with the version here, where one is installed).
    The smoke's pip takes them from here only (no index): a trainer dependency missing here (sentencepiece, added after
    `ftcli[train]` was installed) failed the smoke as if the job would fail, with the start script's line blaming the
    image, though the job's pip gets it from PyPI."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    out = []
    for text in requirements:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            here = version(req.name)
        except PackageNotFoundError:
            out.append(text)
            continue
        if not req.specifier.contains(here, prereleases=True):
            out.append(f"{text} ({here} here)")
    return out


def _check_hub(cfg: TrainConfig) -> bool:
    """Whether the smoke runs offline, on this machine's Hugging Face cache (`ftcli local`'s one probe of the Hub).
    With no network here, the smoke of a Hub model (README's and -h's own example) printed 12 retry lines over a minute
    and ended "the job would fail the same way": the job, on Vertex, downloads the model itself."""
    from ftcli.errors import FtcliError
    from ftcli.local import check_hub
    from ftcli.output import note

    try:
        return check_hub(cfg, note)
    except FtcliError as e:
        raise FtcliError(e.message, hint="the job downloads it on Vertex, not from here: run the smoke where the Hub "
                         "is reachable, give --model a local copy (hf download ID --local-dir DIR), or submit without "
                         "--smoke") from None


def run(trainer: dict[str, Any], extras: tuple[str, ...] = (), timeout_s: float = 1800) -> tuple[int, Path]:
    """Run the smoke; the trainer's output goes straight to this terminal, on stderr with ftcli's own lines (stdout
    is the submitted job's, for --json). Returns the trainer's exit status and the scratch folder it ran in, which
    is removed by then: the model, metrics and logs paths the trainer printed are gone, and the caller says so."""
    from ftcli import container
    from ftcli.errors import FtcliError
    from ftcli.local import require_train_extra
    from ftcli.packaging import EXTRAS, TRAINER_DEPENDENCIES, build_wheel
    from ftcli.spec import START_SCRIPT, WHEEL_ENV
    from ftcli.trainer_options import validate

    if ON_WINDOWS:
        raise FtcliError("ftcli train --smoke runs the job's Linux start script (bash) in a stand-in for its "
                         "container, which Windows cannot run",
                         hint="run the smoke under WSL, on Linux or on macOS; or submit without --smoke")
    require_train_extra("ftcli train --smoke")
    extras = tuple(e for e in extras if e not in ("wandb", "secrets"))  # what reads the secrets in the job
    if missing := missing_here([*TRAINER_DEPENDENCIES, *(r for e in extras for r in EXTRAS.get(e, ()))]):
        import shlex

        raise FtcliError("the smoke installs the trainer from this machine's packages, without the network, and "
                         f"this machine lacks {', '.join(missing)} (the job gets its packages from PyPI)",
                         hint="pip install " + " ".join(shlex.quote(m.split(" (")[0]) for m in missing)
                         + ", then run the smoke again")
    with tempfile.TemporaryDirectory(prefix="ftcli-smoke-") as tmp:
        root = Path(tmp)
        cfg, args = validate(smoke_options(trainer, str(root / "run")))
        offline = _check_hub(cfg)
        wheel = build_wheel(root / "dist")
        bin_dir = container.make(root / "container")
        env = container.env(bin_dir, dict(os.environ))
        if offline:
            env["HF_HUB_OFFLINE"] = "1"
        # The job's CUDA build would pick a GPU here if there is one; the smoke is a CPU check of the job's start.
        env.update({WHEEL_ENV: str(wheel) + (f"[{','.join(extras)}]" if extras else ""), "CUDA_VISIBLE_DEVICES": ""})
        env.pop("AIP_MODEL_DIR", None)
        if not trainer.get("hf_secret"):
            # The job has no Hugging Face token (none travels in its spec): nor does the smoke, or a gated model would
            # pass here and fail there. HF_HUB_DISABLE_IMPLICIT_TOKEN keeps a saved login (`hf auth login`) unsent
            # too. With --hf-secret the job has one, and this machine's login stands in for it (LEFT_OUT).
            for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
                env.pop(name, None)
            env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
        try:
            done = subprocess.run(["bash", "-c", START_SCRIPT, "ftcli-trainer", *args], env=env, cwd=root,
                                  stdout=2, timeout=timeout_s)  # fd 2: the terminal's stderr
        except subprocess.TimeoutExpired:
            raise FtcliError(f"the smoke run did not finish in {timeout_s:.0f} s",
                             hint="a smoke run takes seconds to minutes; check the model id and the data") from None
        return done.returncode, root
