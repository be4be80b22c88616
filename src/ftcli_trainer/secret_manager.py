"""Secrets the trainer reads from Secret Manager where it runs: the W&B API key (--wandb-secret) and a Hugging Face
token (--hf-secret).

Only the secret's name travels in the job's arguments; its value is read here, at the start, and kept in this
process's environment (and its children's: torchrun's workers), never in the job's spec, labels or logs, where
anyone who can read the job would see it. The job's service account needs roles/secretmanager.secretAccessor on the
secret ("Allows accessing the payload of secrets": secretmanager.versions.access, which AccessSecretVersion requires;
https://cloud.google.com/iam/docs/roles-permissions/secretmanager and https://cloud.google.com/secret-manager/docs/
reference/rest/v1/projects.secrets.versions/access, read 2026-11-27).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from ftcli_trainer.errors import TrainerError, one_line

if TYPE_CHECKING:
    from google.cloud.secretmanager_v1 import SecretManagerServiceClient

log = logging.getLogger("ftcli_trainer")
ENDPOINT_VAR = "FTCLI_SECRETMANAGER_ENDPOINT"  # host:port over TLS, or http://host:port: a plaintext emulator
# Which --hf-secret this process's HF_TOKEN came from: torchrun's workers inherit both and need not read it again.
HF_TOKEN_FROM = "FTCLI_HF_TOKEN_FROM"


def _secret_client() -> SecretManagerServiceClient:
    from google.cloud import secretmanager_v1

    endpoint = os.environ.get(ENDPOINT_VAR, "")
    if endpoint.startswith("http://"):
        import grpc
        from google.cloud.secretmanager_v1.services.secret_manager_service.transports import (
            SecretManagerServiceGrpcTransport,
        )

        channel = grpc.insecure_channel(endpoint[len("http://"):])
        return secretmanager_v1.SecretManagerServiceClient(transport=SecretManagerServiceGrpcTransport(channel=channel))
    if endpoint:  # host:port, as the launcher's check takes it (`ftcli local` hands this process the user's variables)
        return secretmanager_v1.SecretManagerServiceClient(client_options={"api_endpoint": endpoint})
    return secretmanager_v1.SecretManagerServiceClient()


def read_secret(name: str, flag: str, what: str) -> str:
    """The text of a secret's version (`latest` unless the name gives one); a one-line TrainerError that names `what`
    the secret holds and the `flag` that named it otherwise. The value is never part of a message."""
    version = name if "/versions/" in name else f"{name}/versions/latest"
    try:
        response = _secret_client().access_secret_version(name=version, timeout=60)
    except ImportError:
        raise TrainerError(f"reading {flag} needs google-cloud-secret-manager: pip install "
                           "google-cloud-secret-manager") from None
    except Exception as e:  # noqa: BLE001 - not found, denied, unreachable: one line with the fix
        first = one_line(e)
        # Outside a Vertex job (`ftcli local`) the reader is the user's own account, not a service account of a job.
        # CLOUD_ML_JOB_ID: "The name given to the training job" (google-cloud-aiplatform's aiplatform/training_utils/
        # environment_variables.py, as lease.py reads it).
        who = "The job's service account" if os.environ.get("CLOUD_ML_JOB_ID") else \
            "The account that runs this (here: your Application Default Credentials; in a job: its service account)"
        raise TrainerError(f"cannot read {what} from {version} ({flag}): {first[:200]}. {who} needs "
                           "roles/secretmanager.secretAccessor on that secret") from None
    try:
        text = response.payload.data.decode("utf-8").strip()
    except UnicodeDecodeError:
        text = None
    if not text:
        raise TrainerError(f"{version} ({flag}) holds no text: add {what} as a new version of the secret (printf %s "
                           f"\"$VALUE\" | gcloud secrets versions add {name.split('/')[3]} --data-file=-)")
    return text


def use_hub_token(name: str) -> None:
    """Read the Hugging Face token in secret `name` and hand it to huggingface_hub (transformers' and datasets'
    downloads) as HF_TOKEN, in this process's environment only: "If set, this value will overwrite the token stored
    on the machine" (https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables, read
    2026-11-27); huggingface_hub 2.4 reads HF_TOKEN at each request (utils/_auth.py, _get_token_from_environment),
    not once at import, so setting it before the first download is enough. Called before torchrun's re-launch,
    whose workers inherit it. Not read when the Hub is off (HF_HUB_OFFLINE: `ftcli local` with a local model and
    local data), where no token would be sent."""
    if os.environ.get(HF_TOKEN_FROM) == name and os.environ.get("HF_TOKEN"):
        return  # read by the process that started this one
    from ftcli_trainer.model import hub_switch

    if hub_switch("HF_HUB_OFFLINE"):
        log.info("--hf-secret not read: HF_HUB_OFFLINE is set, so nothing is downloaded from the Hugging Face Hub")
        return
    os.environ["HF_TOKEN"] = read_secret(name, "--hf-secret", "the Hugging Face token")
    os.environ[HF_TOKEN_FROM] = name


def token_source() -> str | None:
    """Where the token huggingface_hub sends comes from, in words; None when it sends none."""
    try:
        from huggingface_hub import constants, get_token
    except ImportError:  # pragma: no cover - a trainer dependency (through transformers)
        return None
    if constants.HF_HUB_DISABLE_IMPLICIT_TOKEN or not get_token():
        return None
    if os.environ.get(HF_TOKEN_FROM) and os.environ.get("HF_TOKEN"):
        return f"from --hf-secret {os.environ[HF_TOKEN_FROM]}"
    return "this machine's HF_TOKEN or Hugging Face login"
