"""Weights & Biases, optional: the run's train lines, evaluations and final metrics logged to a W&B project.

The API key is read inside the job from Secret Manager (`--wandb-secret projects/P/secrets/NAME`) and handed to
wandb through this process's environment only: it never appears in the job's arguments, environment or labels,
where anyone who can read the job would see it (one of the recipes ftcli replaces passed it as a job argument).
The job's service account needs roles/secretmanager.secretAccessor on the secret. Without --wandb-secret (a
local run), wandb finds the key as it always does (WANDB_API_KEY, `wandb login`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict

from ftcli_trainer.errors import TrainerError

log = logging.getLogger("ftcli_trainer")
ENDPOINT_VAR = "FTCLI_SECRETMANAGER_ENDPOINT"  # http://host:port: a plaintext emulator (tests)


def _secret_client():
    from google.cloud import secretmanager_v1

    endpoint = os.environ.get(ENDPOINT_VAR, "")
    if endpoint.startswith("http://"):
        import grpc
        from google.cloud.secretmanager_v1.services.secret_manager_service.transports import (
            SecretManagerServiceGrpcTransport,
        )

        channel = grpc.insecure_channel(endpoint[len("http://"):])
        return secretmanager_v1.SecretManagerServiceClient(transport=SecretManagerServiceGrpcTransport(channel=channel))
    return secretmanager_v1.SecretManagerServiceClient()


def read_secret(name: str) -> str:
    """The text of a secret's version (`latest` unless the name gives one); one-line TrainerError otherwise."""
    version = name if "/versions/" in name else f"{name}/versions/latest"
    try:
        response = _secret_client().access_secret_version(name=version, timeout=60)
    except ImportError:
        raise TrainerError("reading --wandb-secret needs google-cloud-secret-manager: pip install "
                           "google-cloud-secret-manager") from None
    except Exception as e:  # noqa: BLE001 - not found, denied, unreachable: one line with the fix
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TrainerError(f"cannot read the W&B key from {version}: {first[:200]}. The job's service account "
                           "needs roles/secretmanager.secretAccessor on that secret") from None
    return response.payload.data.decode("utf-8").strip()


class WandbTracker:
    """One W&B run for the training run (created on the main process only)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.run = None

    def start(self, extra_config: dict | None = None) -> None:
        cfg = self.cfg
        if cfg.wandb_secret:
            # this process only: children inherit it, the job's spec never holds it
            os.environ["WANDB_API_KEY"] = read_secret(cfg.wandb_secret)
        try:
            import wandb
        except ImportError:
            raise TrainerError("--wandb-project needs the wandb package: pip install wandb") from None
        config = {k: v for k, v in asdict(cfg).items() if k not in ("extra", "wandb_secret")}
        config.update(extra_config or {})
        try:
            self.run = wandb.init(project=cfg.wandb_project, config=config, job_type="fine-tune",
                                  dir=os.environ.get("WANDB_DIR"))
        except Exception as e:  # noqa: BLE001 - a bad key or project is the user's to fix: one line
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise TrainerError(f"Weights & Biases refused the run ({cfg.wandb_project}): {first[:200]}") from None
        log.info("W&B: logging to project %s (run %s)", cfg.wandb_project, self.run.name)

    def record(self, kind: str, step: int, values: dict) -> None:
        """A train line or an evaluation, as the trainer records it in metrics.jsonl."""
        if self.run is not None:
            self.run.log({f"{kind}/{k}": v for k, v in values.items()
                          if isinstance(v, (int, float)) and not isinstance(v, bool)}, step=step)

    def finish(self, results: dict | None = None) -> None:
        if self.run is None:
            return
        if results:
            self.run.summary.update({k: v for k, v in results.items()
                                     if isinstance(v, (int, float)) and not isinstance(v, bool)})
        self.run.finish()
        self.run = None
        # finish() can return while W&B's service process still writes and uploads; teardown waits for it
        # ("Waits for W&B to finish", wandb.teardown's docstring). Its atexit hook is not enough: in a container
        # the service is killed when the trainer exits, and the run's last points would be lost.
        import wandb

        wandb.teardown()
