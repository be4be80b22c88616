"""One thin gateway per Google Cloud service (vertex.py, storage.py, cloud_logging.py) and what they share.

The gateways are the only place that imports google.* (inside functions: `ftcli --help` stays light). They take
and return ftcli's own values (`ftcli.values`), and every Google error that crosses them becomes an FtcliError
here, with the fix in its hint: `guard` wraps a call, `translate` says what went wrong. Retries a gateway makes
are reported through `notify` (a callback the command passes in), so a wait is never silent.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Required, TypedDict, Unpack

from ftcli.errors import Conflict, FtcliError, NoCapacity, NotFound, Rejected

if TYPE_CHECKING:
    from google.api_core.retry import Retry
    from google.auth.credentials import Credentials

Notify = Callable[[str], None]
NAMES = {"vertex": "Vertex AI", "storage": "Cloud Storage", "logging": "Cloud Logging",
         "secretmanager": "Secret Manager"}
# The API behind each gateway, for `gcloud services enable` when a project has it switched off.
APIS = {"vertex": "aiplatform.googleapis.com", "storage": "storage.googleapis.com",
        "logging": "logging.googleapis.com", "secretmanager": "secretmanager.googleapis.com"}
# The role that lets a gateway's calls through, for the hint of a permission error: `translate` uses it, and so
# does the gateway that writes its own permission hint (Secret Manager), so it is said in one place.
# Vertex AI User grants aiplatform.customJobs.* ("Vertex AI access control with IAM",
# https://docs.cloud.google.com/vertex-ai/docs/general/access-control); Storage Admin grants storage.buckets.get
# (which Storage Object Admin lacks) ("IAM roles for Cloud Storage",
# https://cloud.google.com/storage/docs/access-control/iam-roles); Logs Viewer grants logging.logEntries.list
# (https://cloud.google.com/logging/docs/access-control); Secret Manager Viewer grants secretmanager.secrets.get, not
# the payload (https://cloud.google.com/secret-manager/docs/access-control). Pages named 2026-11-27; their role
# tables were not found whole in the stored docs, so these rest on the pages' role names.
ROLES = {"vertex": "roles/aiplatform.user", "storage": "roles/storage.admin on the bucket",
         "logging": "roles/logging.viewer", "secretmanager": "roles/secretmanager.viewer on the secret"}
LOGIN = "run `gcloud auth application-default login`"


def relogin() -> str:
    """The fix for credentials that stopped working: a fresh login, or, when GOOGLE_APPLICATION_CREDENTIALS names the
    credentials (a CI runner's Workload Identity Federation file, a service account key), that file: there a login
    was no fix, since google.auth reads the file first and the login is never used."""
    key_file = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if not key_file:
        return LOGIN
    return (f"check GOOGLE_APPLICATION_CREDENTIALS={key_file} (a key that is not revoked; for workload identity "
            f"federation, a token from its credential_source that is current and a provider that accepts it), or "
            f"unset it and {LOGIN}")


_said_impersonation = False


def _impersonation_note(creds: Credentials) -> None:
    """Once per process: gcloud impersonates a service account, and the Application Default Credentials ftcli uses
    do not (settings.gcloud_impersonation). Jobs were created, and the bucket written, as the user's own identity
    without a word, while `gcloud` commands beside them acted as the service account."""
    global _said_impersonation
    from google.auth import impersonated_credentials

    from ftcli.settings import gcloud_impersonation

    found = gcloud_impersonation()
    if _said_impersonation or found is None or isinstance(creds, impersonated_credentials.Credentials):
        return
    _said_impersonation = True
    account, where = found
    from ftcli.output import warn  # (the one gateway line that speaks for itself: it is about every gateway)

    # The flag, as public set-up scripts use it with `gcloud config set auth/impersonate_service_account` (found
    # 2026-11-27 with the search tool's find_string; gcloud's own reference page for the command was not found whole).
    key_file = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    who = f"the credentials GOOGLE_APPLICATION_CREDENTIALS={key_file} names" if key_file else "your own account"
    warn(f"{where} impersonates {account}, but ftcli uses your Application Default Credentials, which do not: it acts "
         f"as {who}",
         hint=f"to act as {account}: gcloud auth application-default login --impersonate-service-account {account}")


def credentials() -> Credentials:
    """Application Default Credentials, or one clear line saying how to get them."""
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError, GoogleAuthError, TransportError

    key_file = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    try:
        creds, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    except DefaultCredentialsError as e:
        why = str(e.args[0]) if e.args else str(e)
        if len(e.args) > 1 and isinstance(e.args[1], Exception):  # what was wrong in the file: its fields, its JSON
            why = f"{why.rstrip('.')} ({first_line(e.args[1])})"
        if key_file:  # found, but not usable: missing, not JSON, not a key ("no credentials found" sent people astray)
            raise FtcliError(f"GOOGLE_APPLICATION_CREDENTIALS={key_file} cannot be used: {why}",
                             hint=f"point it at a service account key file (JSON), or unset it and {LOGIN}") from None
        if "were not found" not in why:  # the gcloud ADC file itself is broken
            raise FtcliError(f"your Application Default Credentials cannot be used: {why}", hint=LOGIN) from None
        raise FtcliError(
            "no Google Cloud credentials found",
            hint=f"{LOGIN}, or set GOOGLE_APPLICATION_CREDENTIALS to a key file",
        ) from None
    except GoogleAuthError as e:
        # Workload Identity Federation (an external_account file, what google-github-actions/auth writes): without
        # GOOGLE_CLOUD_PROJECT, google.auth.default fetches a token at once to look up the pool's project
        # (google-auth 2.63.0, _default.default: "For external account credentials, scopes are required to determine
        # the project ID"), so a subject token that is missing, expired or unreachable fails here, not at the first
        # call: it was a RefreshError or TransportError traceback.
        where = f"GOOGLE_APPLICATION_CREDENTIALS={key_file}" if key_file else "your Application Default Credentials"
        # A refused exchange is RefreshError(message, response body): its str() is the tuple's repr.
        why = first_line(Exception(e.args[0]) if e.args and isinstance(e.args[0], str) else e)
        if isinstance(e, TransportError):
            raise FtcliError(f"cannot get an access token for {where}: {why}",
                             hint="check your network (and, for workload identity federation, that the file's "
                                  "credential_source can be reached from here) and try again") from None
        raise FtcliError(f"{where} cannot be used: {why}",
                         hint="for workload identity federation, the file's credential_source must give a token that "
                              "exists and has not expired (in CI: run the auth step in the same job); or "
                              + (f"unset it and {LOGIN}" if key_file else LOGIN)) from None
    _impersonation_note(creds)
    return creds


def plaintext_endpoint(var: str) -> str | None:
    """`http://host:port` in `var` means plaintext gRPC with no credentials (emulators); None otherwise."""
    value = os.environ.get(var, "")
    return value[len("http://"):] if value.startswith("http://") else None


def endpoint_origin(var: str) -> str:
    """' (from VAR)' when the endpoint was set by the environment variable `var`: an error then names it."""
    return f" (from {var})" if os.environ.get(var) else ""


# A quota metric in a message (Vertex training quotas are named like custom_model_training_nvidia_t4_gpus, "Vertex AI
# quotas and limits", https://docs.cloud.google.com/vertex-ai/docs/quotas, named 2026-11-27; a QuotaFailure
# violation's quota_metric is SERVICE.googleapis.com/METRIC, google.rpc.error_details): SERVICE.googleapis.com/METRIC,
# or a word like custom_model_training_nvidia_t4_gpus (never the plain word "quota" of "exceed quota limits").
QUOTA_TOKEN = re.compile(r"[\w.-]+\.googleapis\.com/[\w./-]+|[\w.-]*_(?:gpus|cpus)\b|[\w.-]*_quota\w*|quota_[\w.-]+",
                         re.IGNORECASE)


ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


def error_info(e: BaseException) -> tuple[str | None, dict]:
    """The reason and metadata of an error's google.rpc.ErrorInfo (None and {} without one).

    google-api-core before 2.44 hands an HTTP error's ErrorInfo (Cloud Storage's) to the exception as the JSON dict,
    and its `reason` and `metadata` properties then raise AttributeError (`dict` has no `.reason`), which getattr reads
    as no ErrorInfo: a disabled Cloud Storage API or billing read as a missing role. The JSON detail is read here."""
    reason, metadata = getattr(e, "reason", None), getattr(e, "metadata", None)
    if reason is None:
        for detail in getattr(e, "details", None) or []:
            if isinstance(detail, dict) and detail.get("@type") == ERROR_INFO:
                reason, metadata = detail.get("reason"), detail.get("metadata")
                break
    return reason, dict(metadata or {})


def quota_metric(e: BaseException) -> str | None:
    """The quota that ran out, e.g. aiplatform.googleapis.com/custom_model_training_nvidia_t4_gpus.

    From a google.rpc.QuotaFailure detail (its violation's quota_metric, else a metric-looking subject or
    description; the subject is usually "project:ID"), else an ErrorInfo's metadata "quota_metric", else a
    quota-looking word of the message ("... exceed quota limits: aiplatform.googleapis.com/..._gpus")."""
    for detail in getattr(e, "details", None) or []:
        for violation in getattr(detail, "violations", None) or []:
            if getattr(violation, "quota_metric", ""):
                return violation.quota_metric
            for text in (getattr(violation, "subject", ""), getattr(violation, "description", "")):
                m = QUOTA_TOKEN.search(text or "")
                if m:
                    return m.group(0)
    metric = error_info(e)[1].get("quota_metric")
    if metric:
        return metric
    m = QUOTA_TOKEN.search(str(getattr(e, "message", e)))
    return m.group(0) if m else None


def _disabled_service(e: BaseException) -> str | None:
    """The API named by a SERVICE_DISABLED error (google.rpc.ErrorInfo reason, metadata "service"), else None.
    Google answers a call to an API the project has not enabled with PERMISSION_DENIED and this ErrorInfo."""
    reason, metadata = error_info(e)
    if reason != "SERVICE_DISABLED":
        return None
    return metadata.get("service") or "the API"


# gRPC runs the credentials' token refresh in its auth metadata plugin and turns what it raises (an expired or revoked
# login's RefreshError, say) into UNAVAILABLE with this text, so it reaches api_core as ServiceUnavailable, the code
# that means "retry" (grpc's plugin_wrapping; seen here with google-auth's AuthMetadataPlugin and an OAuth token
# endpoint answering 400 invalid_grant). Retrying cannot fix a login.
PLUGIN_FAILED = "Getting metadata from plugin failed with error: "
# The OAuth error codes a token endpoint answers for a grant that no longer works (RFC 6749 section 5.2).
LOGIN_ERRORS = ("invalid_grant", "invalid_client", "unauthorized_client", "invalid_scope")


def credentials_failure(e: BaseException) -> str | None:
    """What went wrong getting an access token, when a gRPC call failed for that (else None)."""
    from google.api_core import exceptions as gexc

    if not isinstance(e, gexc.ServiceUnavailable):
        return None
    text = str(getattr(e, "message", "") or "")
    if not text.startswith(PLUGIN_FAILED):
        return None
    inner = text[len(PLUGIN_FAILED):].strip()
    # google-auth's errors arrive as their args' repr: ('invalid_grant: Token has been expired or revoked.', {...})
    m = re.match(r"""\(\s*(['"])(.*?)\1""", inner, re.DOTALL)
    return (m.group(2) if m else inner).splitlines()[0] if inner else "no access token"


def rate_limited(e: BaseException) -> bool:
    """A request refused for the rate of requests (a per-minute quota such as Vertex's resource_management_requests),
    not for capacity: RESOURCE_EXHAUSTED with the ErrorInfo reason RATE_LIMIT_EXCEEDED ("The request is denied
    because it violates a rate limit", google.api.ErrorReason,
    https://github.com/googleapis/googleapis/blob/master/google/api/error_reason.proto, read 2026-11-27), or Cloud
    Storage's HTTP 429 (below). The same call goes through a while later: it is retried, and never taken for a GPU
    quota (which moves on to the next --gpu or --region).

    An HTTP 429 is api_core's TooManyRequests, of which gRPC's ResourceExhausted is a subclass: only a
    ResourceExhausted can be a quota of machines. Cloud Storage's 429 is its rate limit: "To provide service
    stability, Cloud Storage limits request rates on buckets and objects. Exceeding these limits can cause 429 Too
    Many Requests errors" ("Improve performance by mitigating rate limited request errors",
    https://docs.cloud.google.com/storage/docs/storage-intelligence/findings/improve-performance-by-mitigating-429-errors,
    read 2026-11-29). It was retried, said as "did not answer ...; retrying", and then blamed on the network."""
    from google.api_core import exceptions as gexc

    if isinstance(e, gexc.ResourceExhausted):
        return error_info(e)[0] == "RATE_LIMIT_EXCEEDED"
    return isinstance(e, gexc.TooManyRequests)


# What limits the rate, where a service says it: Cloud Storage's "Request rate and access distribution guidelines"
# (https://cloud.google.com/storage/docs/request-rate, read 2026-11-29 in its German and Japanese versions) give a
# bucket about 1,000 object writes and 5,000 object reads a second to begin with, growing as its load is spread
# over more servers, and a smaller limit on repeated writes to one object name; the fix they give is a request rate
# that grows gradually, which waiting does.
RATE_LIMITS = {"storage": "Cloud Storage limits how many requests a bucket takes a second, and how often one object "
                          "is written: other runs using the bucket at the same time count too"}


def retryable(*kinds: type[BaseException]) -> Callable[[BaseException], bool]:
    """An api_core Retry predicate: one of `kinds`, or a per-minute rate limit (`rate_limited`), and never a failed
    login that gRPC words as UNAVAILABLE (`credentials_failure`): retrying cannot fix that."""
    return lambda e: (isinstance(e, kinds) or rate_limited(e)) and credentials_failure(e) is None


CALL_RETRY_S = 90.0  # how long call_retry goes on retrying one call


def call_retry(service: str, method: str, notify: Notify | None = None) -> Retry:
    """The retry of one call to a Google API: on UNAVAILABLE and DEADLINE_EXCEEDED (AIP-194's code to retry, and a
    call that timed out) and a per-minute rate limit (`retryable`), with growing pauses for CALL_RETRY_S, each said
    (`retry_notice`) when someone listens."""
    from google.api_core import exceptions as gexc
    from google.api_core.retry import Retry

    return Retry(predicate=retryable(gexc.ServiceUnavailable, gexc.DeadlineExceeded), initial=0.5, maximum=8.0,
                 multiplier=2.0, timeout=CALL_RETRY_S, on_error=retry_notice(service, method, notify))


def first_line(e: BaseException) -> str:
    from ftcli_trainer.storage import redact_urls

    text = str(getattr(e, "message", "") or e).strip()
    return redact_urls(text.splitlines()[0]) if text else type(e).__name__


def account_problem(e: Exception, *, service: str, project: str | None = None) -> FtcliError | None:
    """The error, when what failed is the account rather than the call: a login that no longer works, an API the
    project has not enabled, billing switched off, a quota project the caller may not use, a token without the
    scope. Granting a role fixes none of these, so a gateway that words its own permission error asks here first.

    Service Infrastructure names them in a google.rpc.ErrorInfo of domain googleapis.com, whose metadata "consumer"
    is the project and "service" the API ("google.api.ErrorReason",
    https://github.com/googleapis/googleapis/blob/master/google/api/error_reason.proto, and
    https://cloud.google.com/dotnet/docs/reference/Google.Api.CommonProtos/latest/Google.Api.ErrorReason for
    ACCESS_TOKEN_SCOPE_INSUFFICIENT, read 2026-11-27)."""
    token = credentials_failure(e)
    if token is not None:
        if any(code in token for code in LOGIN_ERRORS):
            return FtcliError(f"your Google Cloud credentials do not work: {token}", hint=relogin())
        return FtcliError(f"cannot get an access token for your Google Cloud credentials: {token}",
                          hint=f"check your network and try again, or {relogin()}")
    reason, metadata = error_info(e)
    api = metadata.get("service") or APIS.get(service, service)
    consumer = metadata.get("consumer") or ""
    disabled = _disabled_service(e)
    if disabled:
        # The project it is disabled in is the ErrorInfo's consumer ("This response indicates the
        # "pubsub.googleapis.com" has been disabled in "projects/123"", error_reason.proto above), which is not
        # ftcli's project when the credentials bill another (a quota project); it may be a number. Google's responses
        # carry the page that enables it for that project in metadata "activationUrl" (seen in SERVICE_DISABLED
        # errors of several Google APIs; absent from the proto's example, so only used when sent).
        api = disabled if "." in disabled else APIS.get(service, disabled)
        owner = consumer.removeprefix("projects/")
        where = f" --project {owner if owner and not owner.isdigit() else project}" if owner or project else ""
        billed = f" (the project the request was billed to: {project}, or the quota project your credentials " \
                 "name)" if owner and project and owner != project else ""
        url = metadata.get("activationUrl") or ""
        return FtcliError(f"the {api} API is not enabled in project {owner or project or '?'}{billed}",
                          hint=f"enable it: {url}" if url.startswith("https://")
                          else f"enable it: gcloud services enable {api}{where}")
    if reason == "BILLING_DISABLED":
        # "Billing is enabled on a project when the project is linked to a valid, active Cloud Billing account"
        # (`gcloud billing projects link`, https://cloud.google.com/sdk/gcloud/reference/billing/projects/link,
        # read 2026-11-27).
        return FtcliError(f"billing is disabled for project {project or consumer or '?'}: {api} needs it linked to "
                          "an active Cloud Billing account",
                          hint=f"link one: gcloud billing projects link {project or 'PROJECT_ID'} "
                               "--billing-account=ACCOUNT_ID (`gcloud billing accounts list` shows yours)")
    if reason == "USER_PROJECT_DENIED":
        # The quota project of Application Default Credentials: "The existing application default credentials must
        # have the serviceusage.services.use permission on the given project" (`gcloud auth application-default
        # set-quota-project`, https://cloud.google.com/sdk/gcloud/reference/auth/application-default/set-quota-project,
        # read 2026-11-27).
        of = f" ({consumer})" if consumer else ""
        return FtcliError(f"your credentials may not bill their requests to their quota project{of}: {first_line(e)}",
                          hint="grant yourself serviceusage.services.use on that project, or pick one you may use: "
                               f"gcloud auth application-default set-quota-project {project or 'PROJECT_ID'}")
    if reason == "ACCESS_TOKEN_SCOPE_INSUFFICIENT":
        return FtcliError(f"your credentials' access token lacks the scope {api} needs: {first_line(e)}",
                          hint=f"{LOGIN}, or use credentials that carry the "
                               "https://www.googleapis.com/auth/cloud-platform scope")
    return None


class CallContext(TypedDict, total=False):
    """Where a gateway call went, for `translate` to name in its error: the gateways build it, `guard` passes it on."""

    service: Required[str]
    project: str | None
    what: str
    region: str | None
    endpoint: str | None
    endpoint_var: str | None
    creates_job: bool


def translate(e: Exception, *, service: str, project: str | None = None, what: str = "", region: str | None = None,
              endpoint: str | None = None, endpoint_var: str | None = None, creates_job: bool = False) -> FtcliError:
    """Turn a google.api_core or google.auth exception into an FtcliError that names the fix. `creates_job`: the
    call creates a job (a CustomJob, a HyperparameterTuningJob), the one call whose used-up quota is its machines'."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as aexc

    message = first_line(e)
    name = NAMES.get(service, service)
    target = what or name
    problem = account_problem(e, service=service, project=project)
    if problem is not None:
        return problem
    if isinstance(e, aexc.GoogleAuthError):
        # An expired or revoked login surfaces on the first call (RefreshError), not when the client is made.
        if isinstance(e, aexc.TransportError):
            return FtcliError(f"cannot reach Google's sign-in service to use your credentials: {message}",
                              hint="check your network and try again")
        return FtcliError(f"your Google Cloud credentials do not work: {message}", hint=relogin())
    if isinstance(e, (gexc.PermissionDenied, gexc.Forbidden)):
        # Running a job as a service account takes iam.serviceAccounts.actAs on it, which Service Account User grants
        # ("Use a custom service account", https://docs.cloud.google.com/vertex-ai/docs/general/custom-service-account,
        # named 2026-11-27).
        if "iam.serviceAccounts.actAs" in message:
            return FtcliError(f"you may not run jobs as that service account: {message}",
                              hint="grant yourself roles/iam.serviceAccountUser on the service account "
                                   "(--service-account)")
        return FtcliError(f"permission denied on {target}: {message}",
                          hint=f"grant {ROLES.get(service, 'the right role')} to your account (or the service "
                               f"account) on project {project or '?'}")
    if isinstance(e, gexc.Unauthorized):  # (Unauthenticated over gRPC; Cloud Storage's HTTP 401 is its parent)
        return FtcliError(f"not authenticated to {name}: {message}", hint=relogin())
    # A call retried until its time ran out (RetryError) is said by its last error, when that was a rate limit: it
    # was said as "did not answer after several retries: Timeout of 120.0s exceeded", the 429 left out.
    limited = e.cause if isinstance(e, gexc.RetryError) and e.cause is not None and rate_limited(e.cause) else e
    if rate_limited(limited):
        metric = quota_metric(limited)
        why = f" ({RATE_LIMITS[service]})" if service in RATE_LIMITS else ""
        return FtcliError(f"{name} is limiting the rate of requests{f' ({metric})' if metric else ''}: "
                          f"{first_line(limited)}",
                          hint=f"wait a minute and try again; nothing was left half-done{why}")
    if isinstance(e, gexc.ResourceExhausted):
        metric = quota_metric(e)
        page = f"https://console.cloud.google.com/iam-admin/quotas?project={project}" if project else "the Quotas page"
        of = f"{metric}{f' in {region}' if region else ''}" if metric else "it"
        if creates_job:
            return NoCapacity(f"quota exceeded{f' ({metric})' if metric else ''}: {message}",
                              hint=f"request more of {of} at {page}, or pick another --gpu or --region")
        # Any other call (reading jobs or logs, cancelling) uses no machines: another --gpu or --region was no fix
        # (`ftcli jobs list` has neither), and NoCapacity would have made `ftcli train` try its next GPU. What such a
        # call spends is requests, counted by the minute ("The following quotas apply to Vertex AI requests for a given
        # project and supported region": "Resource management (CRUD) requests", 600 requests per minute, "Vertex AI
        # quotas and limits", https://docs.cloud.google.com/vertex-ai/docs/quotas, read 2026-11-29), so it frees up as
        # the minute passes.
        return FtcliError(f"quota exceeded{f' ({metric})' if metric else ''}: {message}",
                          hint=f"wait a minute and try again: a quota on requests frees up within its minute; if it "
                               f"goes on, {of} and its use are at {page}")
    if isinstance(e, gexc.NotFound):
        # The project itself (a mistyped --project): nothing about the job would fix it.
        of_project = bool(project) and re.search(
            rf"\bproject\s+['\"]?{re.escape(project or '')}['\"]?\s.*\b(?:not found|does not exist|deleted)\b", message,
            re.IGNORECASE) is not None
        where = f"the project ({project or '?'})" + (f" and region ({region})" if region else "")
        return NotFound(f"{target} not found: {message}", of_project=of_project, hint=(
            f"check the project: {project} comes from `ftcli config list` (or pass --project)" if of_project else
            f"check what it names, and {where} it went to: `ftcli config list` shows where each comes from"))
    # What each of the codes below asks of the caller is google.rpc.Code's ("Use FAILED_PRECONDITION if the client
    # should not retry until the system state has been explicitly fixed", "ABORTED if the client should retry at a
    # higher level", "CANCELLED: The operation was cancelled, typically by the caller", "UNIMPLEMENTED: The operation
    # is not implemented or is not supported/enabled in this service", "DATA_LOSS: Unrecoverable data loss or
    # corruption": https://github.com/googleapis/googleapis/blob/master/google/rpc/code.proto and gRPC's
    # doc/statuscodes.md, read 2026-11-29). They were said as "NAME error: KIND: ..." with nothing to do about them.
    if isinstance(e, (gexc.FailedPrecondition, gexc.PreconditionFailed)):
        return Conflict(f"{name} refused: {message}",
                        hint=f"{name} needs what it names changed first: the same request, sent again as it is, fails "
                             "the same way")
    if isinstance(e, gexc.AlreadyExists):
        return FtcliError(f"{name} error: {type(e).__name__}: {message}",
                          hint="it exists already (an earlier or another request made it): check what is there before "
                               "running the command again")
    if isinstance(e, gexc.Conflict):  # ABORTED over gRPC, a 409 over HTTP
        return FtcliError(f"{name} error: {type(e).__name__}: {message}",
                          hint="it met another change made at the same moment: run the command again")
    if isinstance(e, gexc.Cancelled):
        return FtcliError(f"{name} error: {type(e).__name__}: {message}",
                          hint="the call was cancelled before it ended: run the command again")
    if isinstance(e, gexc.MethodNotImplemented):
        at = f" at {endpoint}{endpoint_origin(endpoint_var) if endpoint_var else ''}" if endpoint else ""
        return FtcliError(f"{name} error: {type(e).__name__}: {message}",
                          hint=f"{name}{at} does not offer this call: check that endpoint"
                               + (" and --region" if region else ""))
    if isinstance(e, (gexc.InvalidArgument, gexc.BadRequest)):
        # --dry-run prints the job a create sends, and nothing any other call sends (`ftcli logs` has no --dry-run)
        return Rejected(f"{name} rejected the request: {message}", detail=message,
                        hint="run with --dry-run to see the exact spec ftcli sends" if creates_job
                        else "FTCLI_DEBUG=1 shows where it happened")
    # (GatewayTimeout and BadGateway: an HTTP 504 or 502, which DeadlineExceeded and ServiceUnavailable are not)
    if isinstance(e, (gexc.ServiceUnavailable, gexc.GatewayTimeout, gexc.BadGateway, gexc.RetryError)):
        at = f" at {endpoint}{endpoint_origin(endpoint_var) if endpoint_var else ''}" if endpoint else ""
        return FtcliError(f"{name}{at} did not answer after several retries: {message}",
                          hint="check your network and try again; nothing was left half-done")
    if isinstance(e, (gexc.InternalServerError, gexc.Unknown, gexc.DataLoss)):
        # A failure inside the service, not in the request. Not retried automatically: AIP-194 ("Automatic retry
        # configuration", https://google.aip.dev/194, read 2026-11-27) lists UNAVAILABLE alone as the code to retry.
        # It was said as "Vertex AI error: InternalServerError: ..." with nothing to do about it.
        code = getattr(e, "grpc_status_code", None)
        kind = code.name if code is not None else f"{getattr(e, 'code', 500)} {type(e).__name__}"
        return FtcliError(f"{name} failed on Google's side ({kind}): {message}",
                          hint="nothing in your request caused it: try again in a few minutes; "
                               "https://status.cloud.google.com lists Google Cloud incidents")
    return FtcliError(f"{name} error: {type(e).__name__}: {message}", hint="FTCLI_DEBUG=1 shows where it happened")


@contextmanager
def guard(**context: Unpack[CallContext]) -> Iterator[None]:
    """Run a gateway call; any Google error that escapes it becomes an FtcliError (`translate(**context)`)."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as aexc

    try:
        yield
    except (gexc.GoogleAPIError, aexc.GoogleAuthError) as e:
        raise translate(e, **context) from None


def retry_notice(service: str, what: str, notify: Notify | None) -> Callable[[Exception], None] | None:
    """An api_core Retry `on_error` that says what is being retried (None when nobody listens)."""
    if notify is None:
        return None

    def on_error(e: Exception) -> None:
        code = getattr(e, "code", None)
        if not isinstance(code, int):  # Cloud Storage's transfer errors carry the HTTP response instead
            code = getattr(getattr(e, "response", None), "status_code", None)
        why = f"{int(code)} {type(e).__name__}" if isinstance(code, int) else type(e).__name__
        if rate_limited(e):
            notify(f"{NAMES.get(service, service)} is limiting the rate of requests ({why}, {what}); retrying")
            return
        notify(f"{NAMES.get(service, service)} did not answer {what} ({why}); retrying")

    return on_error
