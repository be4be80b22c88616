"""Secret Manager gateway: is a secret there (before a job that reads it is submitted)?"""

from __future__ import annotations

from ftcli.errors import FtcliError
from ftcli.gcp import ROLES, account_problem, plaintext_endpoint, translate

ENDPOINT_VAR = "FTCLI_SECRETMANAGER_ENDPOINT"


class SecretsGateway:
    def __init__(self, project: str):
        from google.cloud import secretmanager_v1

        self.project = project
        addr = plaintext_endpoint(ENDPOINT_VAR)
        if addr:
            import grpc
            from google.cloud.secretmanager_v1.services.secret_manager_service.transports import (
                SecretManagerServiceGrpcTransport,
            )

            transport = SecretManagerServiceGrpcTransport(channel=grpc.insecure_channel(addr))
            self.client = secretmanager_v1.SecretManagerServiceClient(transport=transport)
        else:
            from ftcli.gcp import credentials

            self.client = secretmanager_v1.SecretManagerServiceClient(credentials=credentials())

    def check_exists(self, name: str) -> None:
        """Fail, before anything is uploaded, when the secret (projects/P/secrets/NAME[/versions/V]) is missing."""
        from google.api_core import exceptions as gexc

        secret = name.split("/versions/", 1)[0]
        short = secret.rsplit("/", 1)[-1]
        try:
            self.client.get_secret(name=secret, timeout=30)
        except gexc.NotFound:
            raise FtcliError(f"secret {secret} does not exist",
                             hint=f"create it: printf %s \"$WANDB_API_KEY\" | gcloud secrets create {short} "
                                  "--data-file=-") from None
        except (gexc.PermissionDenied, gexc.Forbidden) as e:
            error = account_problem(e, service="secretmanager", project=self.project)
            if error is not None:  # the API is off, billing is off, ...: no role fixes it
                raise error from None
            # Reading the payload inside the job takes secretmanager.versions.access: Secret Manager Secret Accessor
            # (https://cloud.google.com/secret-manager/docs/access-control, named 2026-11-27, not re-read).
            raise FtcliError(f"cannot see secret {secret} (secretmanager.secrets.get denied)",
                             hint=f"grant yourself {ROLES['secretmanager']}; the job's service account needs "
                                  "roles/secretmanager.secretAccessor") from None
        except gexc.GoogleAPICallError as e:
            raise translate(e, service="secretmanager", project=self.project, what=secret) from None


def get_secrets(project: str) -> SecretsGateway:
    return SecretsGateway(project)
