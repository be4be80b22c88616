"""One thin gateway per Google Cloud service. google.* is imported inside functions (ftcli --help stays
light), and Google's exceptions become FtcliErrors here and nowhere else."""

from __future__ import annotations

import os
import re

from ftcli.errors import FtcliError


def credentials():
    """Application Default Credentials, or one clear line saying how to get them."""
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        creds, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    except DefaultCredentialsError:
        raise FtcliError(
            "no Google Cloud credentials found",
            hint="run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a key file",
        ) from None
    return creds


def plaintext_endpoint(var: str) -> str | None:
    """`http://host:port` in `var` means plaintext gRPC with no credentials (emulators); None otherwise."""
    value = os.environ.get(var, "")
    return value[len("http://"):] if value.startswith("http://") else None


QUOTA_TOKEN = re.compile(r"[\w.-]*(?:_gpus|_cpus|quota)[\w./-]*", re.IGNORECASE)


def _quota_metric(e) -> str | None:
    """The quota that ran out: a QuotaFailure detail's subject, else a quota-looking word of the message
    (e.g. custom_model_training_nvidia_t4_gpus)."""
    for detail in getattr(e, "details", None) or []:
        for violation in getattr(detail, "violations", None) or []:
            subject = getattr(violation, "subject", "")
            if subject:
                return subject
    m = QUOTA_TOKEN.search(str(getattr(e, "message", e)))
    return m.group(0) if m else None


# The API behind each gateway, for `gcloud services enable` when a project has it switched off.
APIS = {"vertex": "aiplatform.googleapis.com", "storage": "storage.googleapis.com",
        "logging": "logging.googleapis.com", "secretmanager": "secretmanager.googleapis.com"}


def _disabled_service(e) -> str | None:
    """The API named by a SERVICE_DISABLED error (google.rpc.ErrorInfo reason, metadata "service"), else None.
    Google answers a call to an API the project has not enabled with PERMISSION_DENIED and this ErrorInfo."""
    if getattr(e, "reason", None) != "SERVICE_DISABLED":
        return None
    return (getattr(e, "metadata", None) or {}).get("service") or "the API"


def translate(e: Exception, *, service: str, project: str | None = None, what: str = "") -> FtcliError:
    """Turn a google.api_core exception into an FtcliError that names the fix."""
    from google.api_core import exceptions as gexc

    message = str(getattr(e, "message", "") or e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    role = {"vertex": "roles/aiplatform.user", "storage": "roles/storage.admin on the bucket",
            "logging": "roles/logging.viewer"}.get(service, "the right role")
    target = what or service
    disabled = _disabled_service(e)
    if disabled:
        api = disabled if "." in disabled else APIS.get(service, disabled)
        where = f" --project {project}" if project else ""
        return FtcliError(f"the {api} API is not enabled in project {project or '?'}",
                          hint=f"enable it: gcloud services enable {api}{where}")
    if isinstance(e, (gexc.PermissionDenied, gexc.Forbidden)):
        if "iam.serviceAccounts.actAs" in message:
            return FtcliError(f"you may not run jobs as that service account: {message}",
                              hint="grant yourself roles/iam.serviceAccountUser on the service account "
                                   "(--service-account)")
        return FtcliError(f"permission denied on {target}: {message}",
                          hint=f"grant {role} to your account (or the service account) on project {project or '?'}")
    if isinstance(e, gexc.Unauthenticated):
        return FtcliError(f"not authenticated to {service}: {message}",
                          hint="run `gcloud auth application-default login`")
    if isinstance(e, gexc.ResourceExhausted):
        metric = _quota_metric(e)
        where = f"https://console.cloud.google.com/iam-admin/quotas?project={project}" if project else "the Quotas page"
        return FtcliError(
            f"quota exceeded{f' ({metric})' if metric else ''}: {message}",
            hint=f"request more at {where}, or pick another --gpu or --region")
    if isinstance(e, gexc.NotFound):
        return FtcliError(f"{target} not found: {message}")
    if isinstance(e, gexc.InvalidArgument):
        return FtcliError(f"{service} rejected the request: {message}",
                          hint="run with --dry-run to see the exact spec ftcli sends")
    if isinstance(e, (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.RetryError)):
        return FtcliError(f"{service} did not answer after several retries: {message}",
                          hint="check your network and try again; nothing was left half-done")
    return FtcliError(f"{service} error: {type(e).__name__}: {message}")
