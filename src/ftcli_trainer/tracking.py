"""Weights & Biases, optional: the run's train lines, evaluations and final metrics logged to a W&B project.

The API key is read inside the job from Secret Manager (`--wandb-secret projects/P/secrets/NAME`) and handed to
wandb through this process's environment only: it never appears in the job's arguments, environment or labels,
where anyone who can read the job would see it (one of the recipes ftcli replaces passed it as a job argument).
The job's service account needs roles/secretmanager.secretAccessor on the secret (see secret_manager). Without
--wandb-secret (a local run), wandb finds the key as it always does (WANDB_API_KEY, `wandb login`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict
from typing import TYPE_CHECKING

from ftcli_trainer.errors import TrainerError, one_line
from ftcli_trainer.secret_manager import read_secret

if TYPE_CHECKING:
    from wandb.sdk.wandb_run import Run  # wandb 0.19 (the floor) does not export it as wandb.Run

    from ftcli_trainer.config import TrainConfig

log = logging.getLogger("ftcli_trainer")


def run_id(checkpoint_dir: str) -> str:
    """The W&B run id of this training run, kept beside its checkpoints. A worker restarted after a preemption or
    a crash resumes from a checkpoint, and its W&B run goes on too (one curve, not one W&B run per attempt); a run
    that starts from step 0 (a new output folder, or no checkpoint written yet) gets a new one."""
    import secrets

    from ftcli_trainer import checkpoint, storage

    path = storage.join(checkpoint_dir, checkpoint.WANDB_RUN_ID)
    if checkpoint.has_complete(checkpoint_dir):
        found = (storage.read_text(path) or "").strip()
        if found:
            return found
    new = secrets.token_hex(8)  # W&B run ids: letters, digits, dashes and underscores
    storage.write_text(path, new + "\n")
    return new


class WandbTracker:
    """One W&B run for the training run (created on the main process only); `run_id` (see `run_id`) is resumed
    when W&B already has a run of that id."""

    def __init__(self, cfg: TrainConfig, run_id: str | None = None) -> None:
        self.cfg = cfg
        self.run_id = run_id
        self.run: Run | None = None

    def start(self, extra_config: dict | None = None) -> None:
        cfg = self.cfg
        if cfg.wandb_secret:
            # this process only: children inherit it, the job's spec never holds it
            os.environ["WANDB_API_KEY"] = read_secret(cfg.wandb_secret, "--wandb-secret", "the W&B key")
        try:
            import wandb
        except ImportError:
            raise TrainerError("--wandb-project needs the wandb package: pip install wandb") from None
        config = {k: v for k, v in asdict(cfg).items() if k not in ("extra", "wandb_secret", "hf_secret")}
        config.update(extra_config or {})
        try:
            self.run = wandb.init(project=cfg.wandb_project, config=config, job_type="fine-tune",
                                  dir=os.environ.get("WANDB_DIR"), id=self.run_id,
                                  resume="allow" if self.run_id else None)
        except Exception as e:  # noqa: BLE001 - a bad key or project is the user's to fix: one line
            raise TrainerError(f"Weights & Biases refused the run ({cfg.wandb_project}): {one_line(e, 200)}") \
                from None
        log.info("W&B: logging to project %s (run %s%s)", cfg.wandb_project, self.run.name,
                 f", resumed at step {self.run.starting_step}" if self.run.resumed else "")

    def record(self, kind: str, step: int, values: dict) -> None:
        """A train line or an evaluation, as the trainer records it in metrics.jsonl. Steps that a resumed W&B run
        has already passed (logged by an attempt that crashed after its last checkpoint) are left out: W&B drops
        them anyway, with a warning each."""
        if self.run is not None and step >= self.run.starting_step:
            self.run.log({f"{kind}/{k}": v for k, v in values.items()
                          if isinstance(v, (int, float)) and not isinstance(v, bool)}, step=step)

    def finish(self, results: dict | None = None, failed: bool = False) -> None:
        """`failed`: the run stopped before its end (an error, an interrupt, a preemption): W&B shows it as
        failed, until a restart resumes it."""
        if self.run is None:
            return
        if results:
            self.run.summary.update({k: v for k, v in results.items()
                                     if isinstance(v, (int, float)) and not isinstance(v, bool)})
        self.run.finish(exit_code=1 if failed else 0)
        self.run = None
        # finish() can return while W&B's service process still writes and uploads; teardown waits for it
        # ("Waits for W&B to finish", wandb.teardown's docstring). Its atexit hook is not enough: in a container
        # the service is killed when the trainer exits, and the run's last points would be lost.
        import wandb

        wandb.teardown()
