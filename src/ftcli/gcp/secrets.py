"""Secret Manager gateway: is a secret there (before a job that reads it is submitted)?"""

from __future__ import annotations

import os

from ftcli.errors import FtcliError
from ftcli.gcp import ROLES, account_problem, call_retry, plaintext_endpoint, translate

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

            self.endpoint = addr
            transport = SecretManagerServiceGrpcTransport(channel=grpc.insecure_channel(addr))
            self.client = secretmanager_v1.SecretManagerServiceClient(transport=transport)
        else:
            from ftcli.gcp import credentials

            # `host:port` is a TLS endpoint, as FTCLI_VERTEX_ENDPOINT's and FTCLI_LOGGING_ENDPOINT's are: it was read
            # only in its http:// form, and any other value was dropped without a word (the check went to Google's
            # endpoint, and its errors never named the variable).
            self.endpoint = os.environ.get(ENDPOINT_VAR) or "secretmanager.googleapis.com"
            self.client = secretmanager_v1.SecretManagerServiceClient(client_options={"api_endpoint": self.endpoint},
                                                                      credentials=credentials())

    def check_exists(self, name: str, variable: str = "WANDB_API_KEY") -> None:
        """Fail, before anything is uploaded, when the secret (projects/P/secrets/NAME[/versions/V]) is missing, or the
        version the job reads (`latest` unless the name gives one) is missing or not ENABLED. `variable`: where its
        value usually is (WANDB_API_KEY, HF_TOKEN), for the command that stores it."""
        from google.api_core import exceptions as gexc

        secret = name.split("/versions/", 1)[0]
        noun = "token" if variable == "HF_TOKEN" else "key"
        short = secret.rsplit("/", 1)[-1]
        try:
            # Retried as Vertex's calls are: a moment's UNAVAILABLE stopped `ftcli train --wandb-secret` before the
            # upload, with "did not answer after several retries" though none was made (the generated client retries
            # only AccessSecretVersion)
            self.client.get_secret(name=secret, timeout=30, retry=call_retry("secretmanager", "GetSecret"))
        except gexc.NotFound:
            raise FtcliError(f"secret {secret} does not exist",
                             hint=f"create it: printf %s \"${variable}\" | gcloud secrets create {short} "
                                  "--data-file=-") from None
        except (gexc.PermissionDenied, gexc.Forbidden) as e:
            error = account_problem(e, service="secretmanager", project=self.project)
            if error is not None:  # the API is off, billing is off, ...: no role fixes it
                raise error from None
            # Reading the payload inside the job takes secretmanager.versions.access, which Secret Manager Secret
            # Accessor (roles/secretmanager.secretAccessor, "Allows accessing the payload of secrets") grants
            # (https://cloud.google.com/iam/docs/roles-permissions/secretmanager, read 2026-11-27).
            raise FtcliError(f"cannot see secret {secret} (secretmanager.secrets.get denied)",
                             hint=f"grant yourself {ROLES['secretmanager']}; the job's service account needs "
                                  "roles/secretmanager.secretAccessor") from None
        except (gexc.GoogleAPICallError, gexc.RetryError) as e:  # (RetryError: the retries ran out)
            raise translate(e, service="secretmanager", project=self.project, what=secret, endpoint=self.endpoint,
                            endpoint_var=ENDPOINT_VAR) from None
        # The version the job reads must be there and ENABLED: a secret made without --data-file has none, and a
        # disabled one cannot be accessed. "projects/*/secrets/*/versions/latest is an alias to the most recently
        # created SecretVersion" (https://docs.cloud.google.com/secret-manager/docs/reference/rest/v1/
        # projects.secrets.versions/get); State "ENABLED The SecretVersion may be accessed. DISABLED The SecretVersion
        # may not be accessed" (https://cloud.google.com/secret-manager/docs/reference/rest/v1beta1/
        # projects.secrets.versions); a version's metadata takes Secret Manager Viewer, as the secret's does
        # (https://cloud.google.com/secret-manager/docs/managing-secret-versions?hl=es-AR); all read 2026-11-27.
        version = name if "/versions/" in name else f"{secret}/versions/latest"
        add = f"printf %s \"${variable}\" | gcloud secrets versions add {short} --data-file=-"
        try:
            found = self.client.get_secret_version(name=version, timeout=30,
                                                   retry=call_retry("secretmanager", "GetSecretVersion"))
        except gexc.NotFound:
            raise FtcliError(f"secret {secret} has no version {version.rsplit('/', 1)[-1]} for the job to read",
                             hint=f"add the {noun} to it: {add}") from None
        except (gexc.GoogleAPICallError, gexc.RetryError) as e:  # (RetryError: the retries ran out)
            raise translate(e, service="secretmanager", project=self.project, what=version, endpoint=self.endpoint,
                            endpoint_var=ENDPOINT_VAR) from None
        if found.state.name != "ENABLED":
            raise FtcliError(f"secret version {found.name} is {found.state.name}: the job could not read it",
                             hint=f"enable it (gcloud secrets versions enable {found.name.rsplit('/', 1)[-1]} "
                                  f"--secret {short}), or add the {noun} as a new version: {add}")


def get_secrets(project: str) -> SecretsGateway:
    return SecretsGateway(project)
