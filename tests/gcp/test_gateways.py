"""The gateways: Google's errors become one FtcliError with the fix, transfers report their bytes through the
callback they are given, and what comes back is ftcli's own values."""

from __future__ import annotations

import json
import re

import grpc
import pytest
from google.api_core import exceptions as gexc
from google.auth import exceptions as aexc

from ftcli.errors import Conflict, FtcliError, Rejected
from ftcli.gcp import account_problem, quota_metric, translate
from ftcli.values import Job, JobName


def test_an_expired_login_is_one_line_with_the_command_to_run():
    e = translate(aexc.RefreshError("invalid_grant: Token has been expired or revoked."), service="vertex")
    assert e.message.startswith("your Google Cloud credentials do not work: invalid_grant")
    assert e.hint == "run `gcloud auth application-default login`"


def test_failed_precondition_and_invalid_argument_keep_their_kind():
    assert isinstance(translate(gexc.FailedPrecondition("Cannot cancel"), service="vertex"), Conflict)
    rejected = translate(gexc.InvalidArgument('Machine type "x" is not supported'), service="vertex")
    assert isinstance(rejected, Rejected) and rejected.detail == 'Machine type "x" is not supported'


def test_cloud_storages_http_401_and_504_are_said_as_their_grpc_kin(monkeypatch):
    # api_core raises Unauthorized and GatewayTimeout for an HTTP 401 and 504, the parents of Unauthenticated and
    # DeadlineExceeded (which gRPC's codes give): they were said as "Cloud Storage error: Unauthorized: ..." with no
    # hint.
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    e = translate(gexc.Unauthorized("GET https://storage.googleapis.com/...: Invalid Credentials"), service="storage")
    assert (e.message, e.hint) == ("not authenticated to Cloud Storage: GET https://storage.googleapis.com/...: "
                                   "Invalid Credentials", "run `gcloud auth application-default login`")
    e = translate(gexc.GatewayTimeout("GET https://storage.googleapis.com/...: timed out"), service="storage")
    assert (e.message, e.hint) == ("Cloud Storage did not answer after several retries: GET "
                                   "https://storage.googleapis.com/...: timed out",
                                   "check your network and try again; nothing was left half-done")


def test_unreachable_names_the_endpoint_and_its_variable(monkeypatch):
    monkeypatch.setenv("FTCLI_VERTEX_ENDPOINT", "vertex.example:443")
    e = translate(gexc.ServiceUnavailable("connection refused"), service="vertex", endpoint="vertex.example:443",
                  endpoint_var="FTCLI_VERTEX_ENDPOINT")
    assert e.message.startswith("Vertex AI at vertex.example:443 (from FTCLI_VERTEX_ENDPOINT) did not answer")


class Violation:
    def __init__(self, **kw):
        self.subject, self.description, self.quota_metric = kw.get("subject", ""), kw.get("description", ""), \
            kw.get("quota_metric", "")


class Detail:
    def __init__(self, *violations):
        self.violations = violations


@pytest.mark.parametrize(("details", "message", "metric"), [
    ([Detail(Violation(subject="project:1", quota_metric="aiplatform.googleapis.com/x_gpus"))], "quota",
     "aiplatform.googleapis.com/x_gpus"),
    ([Detail(Violation(subject="project:1", description="custom_model_training_nvidia_l4_gpus"))], "quota",
     "custom_model_training_nvidia_l4_gpus"),
    ([], "The following quota metrics exceed quota limits: aiplatform.googleapis.com/custom_model_training_cpus",
     "aiplatform.googleapis.com/custom_model_training_cpus"),
    ([Detail(Violation(subject="project:1"))], "Resource has been exhausted", None),  # the subject is not a metric
])
def test_the_quota_metric_is_read_from_the_details_first(details, message, metric):
    e = gexc.ResourceExhausted(message, details=details)
    assert quota_metric(e) == metric


def test_a_job_comes_back_as_ftclis_own_value(vertex):
    from ftcli.gcp.vertex import VertexGateway

    gateway = VertexGateway.__new__(VertexGateway)  # the real client over the emulator's channel
    gateway.project, gateway.region, gateway.notify = "test-project", "us-central1", None
    gateway.parent, gateway.endpoint = "projects/test-project/locations/us-central1", vertex.address
    gateway.client = vertex.client()
    spec = {"displayName": "x", "labels": {"ftcli_task": "imdb"},
            "jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "a2-highgpu-8g",
                                                             "acceleratorType": "NVIDIA_TESLA_A100",
                                                             "acceleratorCount": 8},
                                             "replicaCount": "1", "containerSpec": {
                                                 "imageUri": "python:3.11",
                                                 "args": ["--task", "csv", "--text-pair-column", "q2"]}}],
                        "scheduling": {"timeout": "3600s"},
                        "baseOutputDirectory": {"outputUriPrefix": "gs://b/runs/x"}}}
    job = gateway.create_custom_job(spec, "sub1")
    assert isinstance(job, Job) and isinstance(job.name, JobName) and job.state == "PENDING"
    assert (job.pools[0].accelerator, job.pools[0].accelerator_count) == ("NVIDIA_TESLA_A100", 8)
    assert job.pools[0].args == ("--task", "csv", "--text-pair-column", "q2")
    assert job.trainer_option("text_pair_column") == "q2" and job.trainer_option("epochs") is None
    assert job.model_dir == "gs://b/runs/x/model/" and job.timeout_s == 3600 and job.labels == {"ftcli_task": "imdb"}
    assert job.created is not None and job.started is None and job.created.tzinfo is not None
    vertex.fail_next("GetCustomJob", grpc.StatusCode.NOT_FOUND, message="gone")
    with pytest.raises(FtcliError, match="job .* not found: gone"):
        gateway.get(job.name)


def test_transfers_report_their_bytes(gcs, tmp_path):
    from ftcli.gcp.storage import StorageGateway

    gcs.create_bucket("bkt")
    data = tmp_path / "data.bin"
    data.write_bytes(b"x" * 300_000)
    storage = StorageGateway("p")
    seen: list[tuple[int, int | None]] = []
    assert storage.upload_if_absent(data, "gs://bkt/d/data.bin", progress=lambda d, t: seen.append((d, t))) == 300_000
    assert seen and seen[-1] == (300_000, 300_000)
    assert storage.read_bytes("gs://bkt/d/data.bin") == data.read_bytes()
    assert storage.read_bytes("gs://bkt/d/missing") is None
    seen.clear()
    got = storage.download_objects("bkt", [("d/data.bin", tmp_path / "out" / "data.bin")], total=300_000,
                                   progress=lambda d, t: seen.append((d, t)))
    assert got == 300_000 and seen[-1] == (300_000, 300_000)


@pytest.mark.parametrize("size", [300_000, 9 * 1024 * 1024])  # one multipart request; a resumable session in chunks
def test_an_upload_that_loses_the_race_keeps_the_object_there(gcs, monkeypatch, tmp_path, size):
    """Another `ftcli train` uploads the same content-addressed object between our existence check and our upload:
    the create-only upload (ifGenerationMatch=0) gets Cloud Storage's 412, which counts as already there; the object
    is not overwritten. (The emulator once ignored the precondition: the second upload overwrote it and said sent.)"""
    from ftcli.gcp.storage import StorageGateway
    from tests.emulators.gcs import FaultyProxy

    gcs.create_bucket("bkt")
    theirs = b"t" * size
    ours = tmp_path / "data.bin"
    ours.write_bytes(b"o" * size)

    def other_uploader_first(method: str, target: str, n: int) -> bool:
        if method in ("POST", "PUT") and "ifGenerationMatch=0" in target and not gcs.list("bkt", "d/"):
            gcs.write("bkt", "d/data.bin", theirs)
        return False  # nothing fails: the request goes on, after the other upload

    with FaultyProxy(gcs.url, fail_when=other_uploader_first) as proxy:
        for name, value in proxy.env().items():
            monkeypatch.setenv(name, value)
        assert StorageGateway("p").upload_if_absent(ours, "gs://bkt/d/data.bin") == 0
        assert any(r.status == 412 for r in proxy.requests)
    assert gcs.read("bkt", "d/data.bin") == theirs


@pytest.mark.parametrize("service", ["vertex", "storage", "logging", "secretmanager"])
def test_a_permission_hint_names_the_role_in_roles(monkeypatch, service):
    """ROLES is the one place a role is named: `translate` (Cloud Logging's hint is translate's) and the gateway that
    writes its own permission hint (Secret Manager) take it from there."""
    from ftcli import gcp
    from ftcli.gcp.cloud_logging import LoggingGateway
    from ftcli.gcp.secrets import SecretsGateway

    monkeypatch.setitem(gcp.ROLES, service, "roles/test.sentinel")
    denied = gexc.PermissionDenied("caller does not have permission")
    hints = [translate(denied, service=service, project="p").hint]
    if service == "logging":
        gateway = LoggingGateway.__new__(LoggingGateway)  # no client: only its error translation is used
        gateway.project, gateway.endpoint = "p", "logging.googleapis.com"
        hints.append(gateway.translate(denied).hint)
    if service == "secretmanager":
        class Denying:
            def get_secret(self, **_):
                raise denied

        gateway = SecretsGateway.__new__(SecretsGateway)
        gateway.project, gateway.client = "p", Denying()
        with pytest.raises(FtcliError) as info:
            gateway.check_exists("projects/p/secrets/wandb")
        hints.append(info.value.hint)
    for hint in hints:
        assert "roles/test.sentinel" in hint, hint


def test_a_tail_the_endpoint_does_not_offer_says_so_with_the_hint_of_its_code(cloud_logging, monkeypatch):
    """A tail answered UNIMPLEMENTED (the follower then polls instead) came with no hint, where translate names the
    endpoint that does not offer the call."""
    import threading

    from ftcli.errors import LogsUnavailable
    from ftcli.gcp.cloud_logging import LoggingGateway

    monkeypatch.setenv("FTCLI_LOGGING_ENDPOINT", cloud_logging.endpoint)
    cloud_logging.tail_unavailable = grpc.StatusCode.UNIMPLEMENTED
    stop = threading.Event()
    with pytest.raises(LogsUnavailable) as info:
        for _ in LoggingGateway("test").tail('resource.labels.job_id="7"', stop):
            pass
    stop.set()
    assert (info.value.reason, info.value.message, info.value.hint) == (
        "unsupported", "live tailing is not available here (TailLogEntries is unavailable (emulator "
        "tail_unavailable))",
        f"Cloud Logging at {cloud_logging.address} (from FTCLI_LOGGING_ENDPOINT) does not offer this call: check that "
        "endpoint")


def test_cloud_logging_unreachable_names_googles_endpoint_when_none_is_set(monkeypatch):
    """Every test sets FTCLI_LOGGING_ENDPOINT to the emulator: the endpoint said without it (every user's case) was
    never checked."""
    from google.auth.credentials import AnonymousCredentials

    from ftcli.gcp import cloud_logging

    monkeypatch.delenv("FTCLI_LOGGING_ENDPOINT", raising=False)
    monkeypatch.setattr(cloud_logging, "credentials", AnonymousCredentials)  # (no login here; nothing is called)
    e = cloud_logging.LoggingGateway("p").translate(gexc.ServiceUnavailable("connection refused"))
    assert (e.reason, e.message, e.hint) == (
        "unreachable", "cannot reach Cloud Logging at logging.googleapis.com (connection refused)",
        "check the network, or FTCLI_LOGGING_ENDPOINT")


def test_a_json_payload_without_a_message_is_shown_as_its_json(cloud_logging, monkeypatch):
    # Found by hand: a line logged as a JSON object without "message" came out as protobuf text per field,
    # {"loss": "number_value: 0.25\n", "split": "string_value: \"eval\"\n"}.
    from ftcli.gcp.cloud_logging import LoggingGateway

    monkeypatch.setenv("FTCLI_LOGGING_ENDPOINT", cloud_logging.endpoint)
    resource = {"type": "ml_job", "labels": {"job_id": "7", "task_name": "workerpool0-0"}}
    cloud_logging.write([{"resource": resource, "json_payload": {"split": "eval", "loss": 0.25, "ok": True},
                          "insert_id": "a"},
                         {"resource": resource, "json_payload": {"message": "époque 1", "loss": 0.5},
                          "insert_id": "b"}])
    got = list(LoggingGateway("test").list('resource.labels.job_id="7"'))
    assert json.loads(got[0].text) == {"split": "eval", "loss": 0.25, "ok": True}
    assert got[1].text == "époque 1" and got[0].replica == "workerpool0-0"


def test_an_expired_login_over_grpc_is_said_at_once_not_retried_as_unavailable(vertex, cloud_logging):
    """gRPC runs the token refresh in its auth plugin and reports what it raised as UNAVAILABLE: an expired login
    was retried for 90 s ("Vertex AI did not answer ...; retrying") and then blamed on the network; `ftcli logs`
    said "cannot reach Cloud Logging" and kept retrying. Real user credentials, a real token endpoint that refuses
    the grant, google-auth's own gRPC plugin."""
    import time

    from google.cloud.aiplatform_v1.services.job_service import JobServiceClient
    from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport
    from google.cloud.logging_v2.services.logging_service_v2 import LoggingServiceV2Client
    from google.cloud.logging_v2.services.logging_service_v2.transports import LoggingServiceV2GrpcTransport
    from google.oauth2.credentials import Credentials

    from ftcli.errors import LogsUnavailable
    from ftcli.gcp.cloud_logging import LoggingGateway
    from ftcli.gcp.vertex import VertexGateway
    from tests.emulators.oauth import RefusingTokenEndpoint

    told: list[str] = []
    with RefusingTokenEndpoint() as tokens:
        def creds():
            return Credentials(None, refresh_token="r", client_id="c", client_secret="s", token_uri=tokens.url)

        gateway = VertexGateway.__new__(VertexGateway)
        gateway.project, gateway.region, gateway.notify = "test-project", "us-central1", told.append
        gateway.parent, gateway.endpoint = "projects/test-project/locations/us-central1", vertex.address
        gateway.client = JobServiceClient(transport=JobServiceGrpcTransport(
            channel=vertex.authenticated_channel(creds())))
        logs = LoggingGateway.__new__(LoggingGateway)
        logs.project, logs.resource, logs.notify, logs.endpoint = "test-project", "projects/test-project", \
            told.append, cloud_logging.address
        logs.client = LoggingServiceV2Client(transport=LoggingServiceV2GrpcTransport(
            channel=cloud_logging.authenticated_channel(creds())))

        started = time.monotonic()
        with pytest.raises(FtcliError) as info:
            gateway.list()
        assert info.value.message == ("your Google Cloud credentials do not work: invalid_grant: Token has been "
                                      "expired or revoked.")
        assert info.value.hint == "run `gcloud auth application-default login`"
        with pytest.raises(LogsUnavailable) as denied:
            list(logs.list('resource.labels.job_id="1"', patience=60))
        assert denied.value.reason == "denied" and "invalid_grant" in denied.value.message
        assert denied.value.hint == "run `gcloud auth application-default login`"
        assert time.monotonic() - started < 10 and told == []  # nothing retried
        assert tokens.requests >= 2 and vertex.requests == [] and cloud_logging.requests == []


def test_a_refused_workload_identity_token_names_the_file_not_a_login(vertex, cloud_logging, tmp_path, monkeypatch):
    """GOOGLE_APPLICATION_CREDENTIALS names a Workload Identity Federation file (a CI runner's, GOOGLE_CLOUD_PROJECT
    set as google-github-actions/auth sets it, so the token is first asked for at the first call) and the STS refuses
    the exchange: ftcli said "run `gcloud auth application-default login`", which changes nothing while the variable
    names the file google.auth reads first. The file's credentials as ftcli loads them, google-auth's gRPC plugin, a
    token endpoint that answers as Google's does."""
    from google.cloud.aiplatform_v1.services.job_service import JobServiceClient
    from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport
    from google.cloud.logging_v2.services.logging_service_v2 import LoggingServiceV2Client
    from google.cloud.logging_v2.services.logging_service_v2.transports import LoggingServiceV2GrpcTransport

    from ftcli.errors import LogsUnavailable
    from ftcli.gcp import credentials
    from ftcli.gcp.cloud_logging import LoggingGateway
    from ftcli.gcp.vertex import VertexGateway
    from tests.emulators.oauth import RefusingTokenEndpoint

    token = tmp_path / "oidc-token"
    token.write_text("header.payload.signature")
    key = tmp_path / "gha-creds.json"
    with RefusingTokenEndpoint(description="The audience in ID Token does not match the expected audience.") as sts:
        key.write_text(json.dumps({
            "type": "external_account",
            "audience": "//iam.googleapis.com/projects/123456789/locations/global/workloadIdentityPools/gh/providers/p",
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt", "token_url": sts.url,
            "credential_source": {"file": str(token), "format": {"type": "text"}}}))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "test-project")
        creds = credentials()
        assert sts.requests == 0  # nothing asked for yet: the first call asks
        gateway = VertexGateway.__new__(VertexGateway)
        gateway.project, gateway.region, gateway.notify = "test-project", "us-central1", None
        gateway.parent, gateway.endpoint = "projects/test-project/locations/us-central1", vertex.address
        gateway.client = JobServiceClient(transport=JobServiceGrpcTransport(
            channel=vertex.authenticated_channel(creds)))
        logs = LoggingGateway.__new__(LoggingGateway)
        logs.project, logs.resource, logs.notify, logs.endpoint = "test-project", "projects/test-project", None, \
            cloud_logging.address
        logs.client = LoggingServiceV2Client(transport=LoggingServiceV2GrpcTransport(
            channel=cloud_logging.authenticated_channel(creds)))
        with pytest.raises(FtcliError) as info:
            gateway.list()
        with pytest.raises(LogsUnavailable) as denied:
            list(logs.list('resource.labels.job_id="1"', patience=60))
        assert sts.requests >= 2
    hint = (f"check GOOGLE_APPLICATION_CREDENTIALS={key} (a key that is not revoked; for workload identity federation, "
            "a token from its credential_source that is current and a provider that accepts it), or unset it and run "
            "`gcloud auth application-default login`")
    assert info.value.message == ("your Google Cloud credentials do not work: Error code invalid_grant: The audience "
                                  "in ID Token does not match the expected audience.")
    assert info.value.hint == hint
    assert denied.value.reason == "denied" and "invalid_grant" in denied.value.message and denied.value.hint == hint
    assert vertex.requests == [] and cloud_logging.requests == []


@pytest.mark.parametrize(("content", "why"), [
    ("not json", "is not a valid json file (Expecting value: line 1 column 1 (char 0))"),
    ('{"type": "service_account"}', "Failed to load service account credentials from"),
    (None, "was not found"),
])
def test_an_unusable_key_file_is_named_not_called_missing_credentials(capsys, tmp_path, monkeypatch, content, why):
    """GOOGLE_APPLICATION_CREDENTIALS set to a file that is missing, not JSON or not a key: google.auth.default says
    which and why; ftcli said "no Google Cloud credentials found" and "set GOOGLE_APPLICATION_CREDENTIALS", which
    was already set."""
    from tests.cli.helpers import run_cli

    key = tmp_path / "key.json"
    if content is not None:
        key.write_text(content)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    monkeypatch.delenv("FTCLI_VERTEX_ENDPOINT", raising=False)  # the real endpoint: credentials are looked up
    monkeypatch.setenv("FTCLI_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    r = run_cli(capsys, "jobs", "list", "--project", "test-project", "--region", "us-central1")
    assert r.code == 1 and "Traceback" not in r.err
    first, hint = r.err.splitlines()
    assert first.startswith(f"error: GOOGLE_APPLICATION_CREDENTIALS={key} cannot be used: ") and why in first
    assert hint == ("hint: point it at a service account key file (JSON), or unset it and run "
                    "`gcloud auth application-default login`")


@pytest.mark.parametrize("case", ["token file missing", "token URL unreachable", "STS refuses"])
def test_a_workload_identity_file_whose_token_fails_is_one_line(capsys, tmp_path, monkeypatch, case):
    """An external_account file (what google-github-actions/auth writes for Workload Identity Federation): without
    GOOGLE_CLOUD_PROJECT, google.auth.default exchanges its subject token at once to look up the pool's project, so a
    token file that is gone, an OIDC URL out of reach or an exchange the STS refuses raised RefreshError or
    TransportError out of credentials(): a traceback instead of one line. Real HTTP: nothing listens on port 1, and the
    token endpoint is a local server that answers as Google's does."""
    from tests.cli.helpers import run_cli
    from tests.emulators.oauth import RefusingTokenEndpoint

    token = tmp_path / "oidc-token"
    if case != "token file missing":
        token.write_text("header.payload.signature")
    source = ({"url": "http://127.0.0.1:1/oidc", "format": {"type": "json", "subject_token_field_name": "value"}}
              if case == "token URL unreachable" else {"file": str(token), "format": {"type": "text"}})
    with RefusingTokenEndpoint(description="The audience in ID Token does not match the expected audience.") as sts:
        key = tmp_path / "gha-creds.json"
        key.write_text(json.dumps({
            "type": "external_account",
            "audience": "//iam.googleapis.com/projects/123456789/locations/global/workloadIdentityPools/gh/providers/p",
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt", "token_url": sts.url,
            "credential_source": source}))
        for var in ("FTCLI_VERTEX_ENDPOINT", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT"):
            monkeypatch.delenv(var, raising=False)  # the real endpoint: credentials are looked up
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
        monkeypatch.setenv("FTCLI_CONFIG", str(tmp_path / "config.toml"))
        monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
        monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
        r = run_cli(capsys, "jobs", "list", "--project", "test-project", "--region", "us-central1")
        assert sts.requests == (1 if case == "STS refuses" else 0)
    assert r.code == 1 and "Traceback" not in r.err and r.out == ""
    first, hint = r.err.splitlines()
    if case == "token URL unreachable":
        assert first.startswith(f"error: cannot get an access token for GOOGLE_APPLICATION_CREDENTIALS={key}: ")
        assert "127.0.0.1" in first and hint.startswith("hint: check your network")
        return
    assert first == {
        "token file missing": f"error: GOOGLE_APPLICATION_CREDENTIALS={key} cannot be used: File '{token}' was not "
                              "found.",
        "STS refuses": f"error: GOOGLE_APPLICATION_CREDENTIALS={key} cannot be used: Error code invalid_grant: The "
                       "audience in ID Token does not match the expected audience."}[case]
    assert hint.startswith("hint: for workload identity federation, the file's credential_source must give a token")


@pytest.mark.parametrize(("reason", "said"), [
    ("SERVICE_DISABLED", "the storage.googleapis.com API is not enabled in project p"),
    ("BILLING_DISABLED", "billing is disabled for project p: storage.googleapis.com needs it"),
])
def test_an_http_error_info_only_the_details_carry_is_read(reason, said):
    # google-api-core before 2.44 keeps an HTTP error's ErrorInfo as the JSON dict, which its .reason and .metadata
    # cannot read: on the stated floor (2.19) Cloud Storage's disabled API or billing was worded as a missing role.
    info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "googleapis.com",
            "metadata": {"service": "storage.googleapis.com", "consumer": "projects/p"}}
    e = gexc.Forbidden("GET https://storage.googleapis.com/storage/v1/b/bkt: denied", details=[info])
    problem = account_problem(e, service="storage", project="p")
    assert problem is not None and problem.message.startswith(said), problem


@pytest.mark.parametrize("line, shown", [
    ("PUT https://storage.googleapis.com/upload/storage/v1/b/b/o?uploadType=resumable&upload_id=ADPy-c_d9: Forbidden",
     "PUT https://storage.googleapis.com/upload/storage/v1/b/b/o?uploadType=resumable&upload_id=REDACTED: Forbidden"),
    ("GET https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential=sa%40p&"
     "X-Goog-Signature=0a1b2c end",
     "GET https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential=REDACTED&"
     "X-Goog-Signature=REDACTED end"),
    ("enable it at https://console.developers.google.com/apis/api/x/overview?project=123 then retry",
     "enable it at https://console.developers.google.com/apis/api/x/overview?project=123 then retry"),
])
def test_error_lines_leave_out_upload_sessions_and_signatures(line, shown):
    from ftcli.gcp import first_line

    assert first_line(Exception(line)) == shown


@pytest.mark.parametrize("where", ["config", "variable"])
def test_gclouds_impersonation_that_adc_does_not_follow_is_said_once(tmp_path, monkeypatch, capsys, where):
    """gcloud impersonates a service account (auth/impersonate_service_account), and Application Default
    Credentials do not follow gcloud's configuration: ftcli created jobs as the user's own account without a word,
    while gcloud beside it acted as the service account. An ADC file that is itself impersonated says nothing."""
    import ftcli.gcp as gcp

    account = "trainer@proj.iam.gserviceaccount.com"
    user = {"type": "authorized_user", "client_id": "id", "client_secret": "secret", "refresh_token": "r"}
    adc = tmp_path / "adc.json"
    adc.write_text(json.dumps(user))
    gcloud = tmp_path / "gcloud"
    (gcloud / "configurations").mkdir(parents=True)
    (gcloud / "active_config").write_text("default")
    if where == "config":
        (gcloud / "configurations" / "config_default").write_text(
            f"[core]\nproject = proj\n\n[auth]\nimpersonate_service_account = {account}\n")
        said = "gcloud configuration default (auth/impersonate_service_account)"
    else:
        (gcloud / "configurations" / "config_default").write_text("[core]\nproject = proj\n")
        monkeypatch.setenv("CLOUDSDK_AUTH_IMPERSONATE_SERVICE_ACCOUNT", account)
        said = "CLOUDSDK_AUTH_IMPERSONATE_SERVICE_ACCOUNT"
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(gcloud))
    if where == "config":  # gcloud's own ADC file (`gcloud auth application-default login`): the user's account
        adc = gcloud / "application_default_credentials.json"
        adc.write_text(json.dumps(user))
        monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
        acts_as = "your own account"
    else:  # a CI runner's or a key's credentials, named by the variable
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
        acts_as = f"the credentials GOOGLE_APPLICATION_CREDENTIALS={adc} names"
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "proj")
    monkeypatch.setattr(gcp, "_said_impersonation", False)
    capsys.readouterr()
    gcp.credentials()
    gcp.credentials()  # one gateway after another: said once
    err = " ".join(capsys.readouterr().err.split())
    assert err == (f"warning: {said} impersonates {account}, but ftcli uses your Application Default Credentials, "
                   f"which do not: it acts as {acts_as} hint: to act as {account}: gcloud auth application-default "
                   f"login --impersonate-service-account {account}"), err

    adc.write_text(json.dumps({  # what `gcloud auth application-default login --impersonate-service-account` writes
        "type": "impersonated_service_account", "source_credentials": user, "delegates": [],
        "service_account_impersonation_url": "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/"
                                             f"{account}:generateAccessToken"}))
    monkeypatch.setattr(gcp, "_said_impersonation", False)
    gcp.credentials()
    assert capsys.readouterr().err == ""


def _media(method: str, target: str) -> bool:
    return (method == "POST" and target.startswith("/upload/")) or (method == "GET" and "alt=media" in target)


def test_a_batch_of_uploads_runs_in_parallel_skips_what_is_there_and_counts_its_bytes(gcs, monkeypatch, tmp_path):
    """A model folder of many files was uploaded one file after the other: 16 files held 0.2 s each by the proxy
    took 3.2 s. Now they overlap; an object already there is not sent again, and progress counts the batch's bytes
    against what was missing."""
    from ftcli.gcp.storage import StorageGateway
    from tests.emulators.gcs import FaultyProxy

    gcs.create_bucket("bkt")
    files = []
    for i in range(16):
        files.append(tmp_path / f"f{i:02d}.bin")
        files[-1].write_bytes(bytes([i]) * (1000 + i))
    gcs.write("bkt", "m/f03.bin", files[3].read_bytes())  # already there: skipped
    pairs = [(f, f"gs://bkt/m/{f.name}") for f in files]
    seen: list[tuple[int, int | None]] = []
    with FaultyProxy(gcs.url, hold_when=lambda m, t, n: 0.2 if _media(m, t) else 0) as proxy:
        for name, value in proxy.env().items():
            monkeypatch.setenv(name, value)
        sent = StorageGateway("p").upload_many(pairs, progress=lambda d, t: seen.append((d, t)))
        uploads = [r for r in proxy.requests if _media(r.method, r.target)]
    missing = sum(f.stat().st_size for f in files) - files[3].stat().st_size
    assert sent == missing and seen[-1] == (missing, missing)
    assert len(uploads) == 15 and not any("f03.bin" in r.target for r in uploads)
    assert proxy.max_in_flight > 1  # one after the other: 1
    assert {o: gcs.read("bkt", o) for o in gcs.list("bkt", "m/")} == {f"m/{f.name}": f.read_bytes() for f in files}


def test_a_refused_upload_stops_the_batch_and_is_the_error_said(gcs, monkeypatch, tmp_path):
    """One file of the batch refused (403): that error is raised, not a stopped neighbour's, and every object in the
    bucket is whole."""
    from ftcli.gcp.storage import TRANSFER_WORKERS, StorageGateway
    from tests.emulators.gcs import FaultyProxy

    gcs.create_bucket("bkt")
    pairs = []
    for i in range(12):
        (tmp_path / f"f{i:02d}.bin").write_bytes(bytes([i]) * 5000)
        pairs.append((tmp_path / f"f{i:02d}.bin", f"gs://bkt/m/f{i:02d}.bin"))
    uploads = []

    def third_upload(method: str, target: str, n: int) -> bool:  # (a multipart upload's name is in its body)
        if _media(method, target):
            uploads.append(n)
        return len(uploads) == 3 and uploads[-1] == n

    # the others take a while: the refusal comes first, and the files not begun never start
    with FaultyProxy(gcs.url, status=403, fail_when=third_upload,
                     hold_when=lambda m, t, n: 0.3 if _media(m, t) and n not in uploads[2:3] else 0) as proxy:
        for name, value in proxy.env().items():
            monkeypatch.setenv(name, value)
        with pytest.raises(FtcliError) as info:
            StorageGateway("p").upload_many(pairs)
    refused = re.match(r"permission denied on gs://bkt/(m/f\d\d\.bin): ", info.value.message)
    assert refused and refused.group(1) not in gcs.list("bkt", "m/"), info.value.message
    # the other uploads under way ended whole; those not begun never began
    assert len(gcs.list("bkt", "m/")) == len(uploads) - 1 and len(uploads) <= TRANSFER_WORKERS < len(pairs)
    for name in gcs.list("bkt", "m/"):
        assert gcs.read("bkt", name) == (tmp_path / name.split("/")[1]).read_bytes()


@pytest.mark.parametrize("direction", ["upload", "download"])
def test_ctrl_c_stops_a_batch_of_transfers_without_waiting_for_the_rest(gcs, monkeypatch, tmp_path, direction):
    """Ctrl-C during a batch of transfers: no transfer starts after it, and an upload either made its object whole
    or made none."""
    import os
    import signal

    from ftcli.gcp import storage
    from ftcli.gcp.storage import TRANSFER_WORKERS, StorageGateway
    from tests.emulators.gcs import FaultyProxy

    gcs.create_bucket("bkt")
    n_files = 3 * TRANSFER_WORKERS
    local = []
    for i in range(n_files):
        local.append(tmp_path / "here" / f"f{i:02d}.bin")
        local[-1].parent.mkdir(exist_ok=True)
        local[-1].write_bytes(bytes([i]) * 300_000)
        if direction == "download":
            gcs.write("bkt", f"m/f{i:02d}.bin", local[-1].read_bytes())
    pressed = []
    stops = []  # each batch's stop (storage._run_batch's): the Ctrl-C sets the batch's own
    run_batch = storage._run_batch
    monkeypatch.setattr(storage, "_run_batch", lambda tasks, stop: stops.append(stop) or run_batch(tasks, stop))

    def ctrl_c_at_the_first(method: str, target: str, n: int) -> float:
        if not _media(method, target):
            return 0
        if not pressed:
            pressed.append(n)
            os.kill(os.getpid(), signal.SIGINT)
        # Every transfer under way is held until the Ctrl-C has been taken (the batch's stop set): held half a second,
        # on a busy machine they could end before it was, and the next ones begin
        stops[-1].wait(60)
        return 0

    with FaultyProxy(gcs.url, hold_when=ctrl_c_at_the_first) as proxy:
        for name, value in proxy.env().items():
            monkeypatch.setenv(name, value)
        storage = StorageGateway("p")
        with pytest.raises(KeyboardInterrupt):
            if direction == "upload":
                storage.upload_many([(f, f"gs://bkt/m/{f.name}") for f in local])
            else:
                storage.download_objects("bkt", [(f"m/{f.name}", tmp_path / "there" / f.name) for f in local])
        started = [r for r in proxy.requests if _media(r.method, r.target)]
    assert pressed and 1 <= len(started) <= TRANSFER_WORKERS < n_files  # without the fix: all 24
    if direction == "upload":
        for name in gcs.list("bkt", "m/"):
            assert gcs.read("bkt", name) == (tmp_path / "here" / name.split("/")[1]).read_bytes()


def test_ctrl_c_ends_a_download_under_way_at_its_next_chunk(gcs, monkeypatch, tmp_path):
    """`ftcli download`'s Ctrl-C waited for the files under way to arrive whole (a model's weights: minutes), since
    transfer_manager gives no way to stop a download once begun. Now it ends at the download's next chunk; the
    partial file is the caller's to remove (download_model's staging folder)."""
    import os
    import signal

    from ftcli.gcp.storage import StorageGateway
    from tests.emulators.gcs import TRICKLE_PIECE, FaultyProxy

    gcs.create_bucket("bkt")
    # 40 pieces of 0.5 s: 20 s for the whole, which the test does not wait for (it ends at the next piece)
    gcs.write("bkt", "m/model.safetensors", b"w" * (40 * TRICKLE_PIECE))

    def slow_body(method: str, target: str, n: int) -> float:
        if method == "GET" and "alt=media" in target:
            # The Ctrl-C as the body begins to come. It was sent half a second into a 4 s body and the download
            # timed (under 2.5 s): on a busy machine either could pass its mark where ftcli did right
            os.kill(os.getpid(), signal.SIGINT)
            return 0.5
        return 0

    target = tmp_path / "there" / "model.safetensors"
    with FaultyProxy(gcs.url, trickle_when=slow_body) as proxy:
        for name, value in proxy.env().items():
            monkeypatch.setenv(name, value)
        with pytest.raises(KeyboardInterrupt):
            StorageGateway("p").download_objects("bkt", [("m/model.safetensors", target)])
    assert target.stat().st_size < 40 * TRICKLE_PIECE  # it did not wait for the rest


# --- a big upload interrupted, then resumed by the next run ------------------------------------------------------

CHUNK = 256 * 1024  # the smallest chunk Cloud Storage takes (a multiple of 256 KiB)


def _big_file(path, chunks: float = 4.5, seed: int = 0):
    import random

    path.write_bytes(random.Random(seed).randbytes(int(chunks * CHUNK)))
    return path


def _crc32c(data: bytes) -> str:
    import base64

    import google_crc32c

    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode()


def _chunk_bytes(requests) -> int:
    """The bytes the data requests of resumable sessions carried (a status query carries none)."""
    return sum(r.body_size for r in requests if r.method == "PUT" and "upload_id=" in r.target)


def _interrupted(local, uri, after: int) -> None:
    """Upload until `after` bytes are in, then Ctrl-C (as a progress callback hears it)."""
    from ftcli.gcp.storage import StorageGateway

    def ctrl_c_at(done, _total):
        if done >= after:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        StorageGateway("p").upload_if_absent(local, uri, progress=ctrl_c_at)


def _kept_sessions() -> int:
    import sqlite3
    from contextlib import closing

    from ftcli import upload_sessions

    with closing(sqlite3.connect(upload_sessions.db_path())) as db:
        return db.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]


def _upload_rewritten_part_way(local):
    """Upload `local` to gs://bkt/d/big.csv, its last bytes rewritten once two chunks are in: the error raised, and
    the file's bytes after the rewrite."""
    from ftcli.gcp.storage import StorageGateway

    data = bytearray(local.read_bytes())

    def rewrite_the_end(done, _total):
        if done == 2 * CHUNK:
            data[-10:] = b"0123456789"
            local.write_bytes(bytes(data))

    with pytest.raises(FtcliError) as info:
        StorageGateway("p").upload_if_absent(local, "gs://bkt/d/big.csv", progress=rewrite_the_end)
    return info, bytes(data)


@pytest.fixture
def proxied(gcs, monkeypatch, small_chunks):
    """Bucket `bkt`, reached through a FaultyProxy that counts the requests (both runs through the same one: a
    session's URL names the host that began it)."""
    from tests.emulators.gcs import FaultyProxy

    gcs.create_bucket("bkt")
    with FaultyProxy(gcs.url) as proxy:
        for name, value in proxy.env().items():
            monkeypatch.setenv(name, value)
        yield proxy


@pytest.fixture
def small_chunks(monkeypatch):
    from ftcli.gcp import storage

    monkeypatch.setattr(storage, "CHUNK_BYTES", CHUNK)


def test_an_interrupted_big_upload_resumes_where_it_stopped(gcs, proxied, tmp_path):
    """A big upload stopped part way (Ctrl-C, a lid closed, the network gone past the retries) started again from
    byte 0 on the next run: a 3 GB file on a slow link was sent whole each time. Now the next run asks Cloud Storage
    where the session stands and sends only the rest; the object is the file's bytes, made once, create-only."""
    import stat

    from ftcli import upload_sessions
    from ftcli.gcp.storage import StorageGateway

    local = _big_file(tmp_path / "big.csv")
    size, uri = local.stat().st_size, "gs://bkt/d/big.csv"
    _interrupted(local, uri, after=2 * CHUNK)
    assert gcs.list("bkt") == []  # an unfinished session makes no object
    assert _chunk_bytes(proxied.requests) == 2 * CHUNK and _kept_sessions() == 1
    assert stat.S_IMODE(upload_sessions.db_path().stat().st_mode) == 0o600  # the session URL is a write credential
    first = proxied.seen
    notes: list[str] = []
    sent = StorageGateway("p", notify=notes.append).upload_if_absent(local, uri)
    second = proxied.requests[first:]
    assert sent == size - 2 * CHUNK
    assert _chunk_bytes(second) == size - 2 * CHUNK  # without the fix: the whole file again
    puts = [r for r in second if r.method == "PUT"]
    assert (puts[0].headers["content-range"], puts[0].status) == (f"bytes */{size}", 308)
    assert puts[1].headers["content-range"] == f"bytes {2 * CHUNK}-{3 * CHUNK - 1}/{size}"
    assert all("ifGenerationMatch=0" in r.target for r in puts)  # still create-only
    assert not any(r.method == "POST" for r in second)  # no new session
    assert notes == ["uploading big.csv: resuming at 524.3 kB of 1.2 MB (the upload an earlier run began)"]
    assert gcs.read("bkt", "d/big.csv") == local.read_bytes()
    (obj,) = StorageGateway("p").list_objects("gs://bkt/d")
    assert obj.crc32c == _crc32c(local.read_bytes())
    assert _kept_sessions() == 0  # the finished session is forgotten
    assert StorageGateway("p").upload_if_absent(local, uri) == 0


def test_a_session_cloud_storage_forgot_starts_afresh(gcs, proxied, tmp_path):
    """A session older than a week (or cancelled) answers 404: the next run begins a new one and sends the file
    whole, instead of failing."""
    from ftcli.gcp.storage import StorageGateway

    local = _big_file(tmp_path / "big.csv")
    _interrupted(local, "gs://bkt/d/big.csv", after=2 * CHUNK)
    gcs.expire_uploads()
    first = proxied.seen
    notes: list[str] = []
    sent = StorageGateway("p", notify=notes.append).upload_if_absent(local, "gs://bkt/d/big.csv")
    second = proxied.requests[first:]
    assert [r.status for r in second if r.method == "PUT"][0] == 404
    assert sent == local.stat().st_size == _chunk_bytes(second)
    assert notes == [] and gcs.read("bkt", "d/big.csv") == local.read_bytes() and _kept_sessions() == 0


def test_a_remembered_session_that_finished_an_object_since_deleted_uploads_it_again(gcs, proxied, tmp_path):
    """Stopped between the last chunk's answer and the session being forgotten, then the object deleted (a lifecycle
    rule, a user): the next upload found no object, asked the old session, heard "finished" and said "already
    there", 0 bytes sent: the job would start without its file. It begins a new session and sends the file."""
    from ftcli.gcp.storage import StorageGateway

    local = _big_file(tmp_path / "big.csv")
    size, uri = local.stat().st_size, "gs://bkt/d/big.csv"
    _interrupted(local, uri, after=size)  # (the progress callback hears of the last byte once the object is made)
    assert gcs.read("bkt", "d/big.csv") == local.read_bytes() and _kept_sessions() == 1
    gcs.client().bucket("bkt").blob("d/big.csv").delete()
    assert StorageGateway("p").upload_if_absent(local, uri) == size
    assert gcs.read("bkt", "d/big.csv") == local.read_bytes() and _kept_sessions() == 0


def test_a_session_holding_nothing_yet_is_resumed_from_its_first_byte(gcs, proxied, tmp_path):
    """Stopped after the session began but before its first chunk was taken: Cloud Storage's status answer has no
    Range (nothing held). The emulator said `bytes=0-0`, one byte held; resuming from it would skip the first byte."""
    from ftcli.gcp.storage import StorageGateway

    local = _big_file(tmp_path / "big.csv")
    _interrupted(local, "gs://bkt/d/big.csv", after=0)
    first = proxied.seen
    assert StorageGateway("p").upload_if_absent(local, "gs://bkt/d/big.csv") == local.stat().st_size
    status = next(r for r in proxied.requests[first:] if r.method == "PUT")
    assert (status.headers["content-range"], status.status) == (f"bytes */{local.stat().st_size}", 308)
    assert gcs.read("bkt", "d/big.csv") == local.read_bytes()


def test_a_changed_file_never_resumes_into_the_old_session(gcs, proxied, tmp_path):
    """The file changed between the runs: its session declared the old bytes' CRC32C, so it is not taken up (an object
    stitched from two versions of a file); the new bytes go whole in a new session."""
    from ftcli.gcp.storage import StorageGateway

    local = _big_file(tmp_path / "big.csv", seed=1)
    _interrupted(local, "gs://bkt/d/big.csv", after=2 * CHUNK)
    (old_session,) = {r.target.split("upload_id=")[1] for r in proxied.requests if r.method == "PUT"}
    first = proxied.seen
    _big_file(local, seed=2)  # same size, other bytes
    assert StorageGateway("p").upload_if_absent(local, "gs://bkt/d/big.csv") == local.stat().st_size
    assert not any(old_session in r.target for r in proxied.requests[first:])
    assert gcs.read("bkt", "d/big.csv") == local.read_bytes()


def test_a_lost_chunk_answer_asks_where_the_session_stands_before_sending_again(gcs, monkeypatch, tmp_path,
                                                                                small_chunks):
    """A chunk reached Cloud Storage but its answer was lost: the retry asks the session what it holds and goes on
    from there, rather than sending again bytes the session already took."""
    from ftcli.gcp.storage import StorageGateway
    from tests.emulators.gcs import FaultyProxy

    gcs.create_bucket("bkt")
    local = _big_file(tmp_path / "big.csv")
    size = local.stat().st_size
    notes: list[str] = []

    def second_chunk(method: str, target: str, n: int) -> bool:
        return method == "PUT" and "upload_id=" in target and n == 4  # GET (exists?), POST, chunk 1, chunk 2

    with FaultyProxy(gcs.url, fail_when=second_chunk, forward_failed=True, status=503) as proxy:
        for name, value in proxy.env().items():
            monkeypatch.setenv(name, value)
        assert StorageGateway("p", notify=notes.append).upload_if_absent(local, "gs://bkt/d/big.csv") == size
    ranges = [r.headers["content-range"] for r in proxy.requests if r.method == "PUT"]
    assert ranges[:4] == [f"bytes 0-{CHUNK - 1}/{size}", f"bytes {CHUNK}-{2 * CHUNK - 1}/{size}", f"bytes */{size}",
                          f"bytes {2 * CHUNK}-{3 * CHUNK - 1}/{size}"]
    assert notes == ["Cloud Storage did not answer uploading big.csv (503 ServiceUnavailable); retrying"]
    assert gcs.read("bkt", "d/big.csv") == local.read_bytes()


def test_a_second_upload_of_the_same_file_under_way_keeps_to_its_own_session(gcs, proxied, tmp_path):
    """Two `ftcli train` with the same big file at once: the second does not write into the session the first is
    still sending (it begins its own), and the first's session stays remembered for it."""
    import os
    import threading

    from ftcli import upload_sessions
    from ftcli.gcp.storage import StorageGateway

    local = _big_file(tmp_path / "big.csv")
    size, uri = local.stat().st_size, "gs://bkt/d/big.csv"
    place = f"{uri} at {os.environ['STORAGE_EMULATOR_HOST']}"
    seen = []

    def other_upload_midway(done, _total):
        if done == 2 * CHUNK and not seen:
            other = threading.Thread(target=lambda: seen.append(
                upload_sessions.claim(place, size, _crc32c(local.read_bytes()))))
            other.start()
            other.join()

    assert StorageGateway("p").upload_if_absent(local, uri, progress=other_upload_midway) == size
    assert seen == [upload_sessions.BUSY]
    assert gcs.read("bkt", "d/big.csv") == local.read_bytes()


def test_a_file_changed_during_its_upload_makes_no_object(gcs, proxied, tmp_path):
    """The session declares the CRC32C of the file as it was when the upload began: a file rewritten part way (or
    two runs' halves of different versions) is refused when the upload ends, instead of becoming an object that
    is neither version."""

    local = _big_file(tmp_path / "big.csv")
    info, _ = _upload_rewritten_part_way(local)
    assert info.value.message == ("big.csv changed while it was being uploaded: Cloud Storage refused bytes that no "
                                  "longer match the file the upload began with")
    assert gcs.list("bkt") == []
    initiation = next(r for r in proxied.requests if r.method == "POST")
    assert initiation.status == 200 and _kept_sessions() == 1



def test_a_big_upload_whose_session_is_refused_as_the_object_is_there_keeps_it(gcs, monkeypatch, tmp_path,
                                                                              small_chunks):
    """Another `ftcli train` made the same content-addressed object between our existence check and the start of our
    resumable session: Cloud Storage refuses the create-only session at its start (412). That counts as already there,
    as the 412 of a last chunk does: 0 bytes sent, the object as the other made it, no session remembered."""
    from ftcli.gcp.storage import StorageGateway
    from tests.emulators.gcs import FaultyProxy

    gcs.create_bucket("bkt")
    local = _big_file(tmp_path / "big.csv")
    theirs = local.read_bytes()

    def other_uploader_first(method: str, target: str, n: int) -> bool:
        if method == "POST" and "uploadType=resumable" in target:
            gcs.write("bkt", "d/big.csv", theirs)
            return True
        return False

    with FaultyProxy(gcs.url, fail_when=other_uploader_first, status=412,
                     error={"error": {"code": 412, "message": "At least one of the pre-conditions you specified did "
                                                              "not hold.", "errors": [{"reason": "conditionNotMet"}]}}
                     ) as proxy:
        for name, value in proxy.env().items():
            monkeypatch.setenv(name, value)
        assert StorageGateway("p").upload_if_absent(local, "gs://bkt/d/big.csv") == 0
        assert [r.status for r in proxy.requests if r.method == "POST"] == [412]
        assert not [r for r in proxy.requests if r.method == "PUT"]  # no byte sent
    assert gcs.read("bkt", "d/big.csv") == theirs and _kept_sessions() == 0


def test_a_folders_listing_holds_only_what_is_inside_it(gcs):
    """gs://b/d/model lists d/model/..., never its neighbours d/model-old/... or d/model.csv: `ftcli download` would
    count them into the model, and a missing --train-file gs://b/d/train beside d/train.csv was called a folder."""
    from ftcli.gcp.storage import StorageGateway

    gcs.create_bucket("bkt")
    for name in ("d/model/config.json", "d/model/sub/x.txt", "d/model-old/config.json", "d/model.csv", "d/modelx"):
        gcs.write("bkt", name, b"x")
    storage = StorageGateway("p")
    assert [o.name for o in storage.list_objects("gs://bkt/d/model")] == ["d/model/config.json", "d/model/sub/x.txt"]
    assert storage.list_objects("gs://bkt/d/train", limit=1) == []


@pytest.mark.parametrize(("seconds", "said"), [("86400", "1 day"), ("3600", "1 hour"), ("5400", "90 minutes"),
                                               ("90", "90 seconds"), ("1209600", "14 days")])
def test_a_retention_period_is_said_as_it_was_set(gcs, seconds, said):
    """The refusal names the bucket's retention period the way `--retention-period 1d` set it, not as 24 hours."""
    from ftcli.gcp.storage import StorageGateway

    gcs.create_bucket("kept", retentionPolicy={"retentionPeriod": seconds})
    with pytest.raises(FtcliError) as info:
        StorageGateway("p").check_bucket("kept", "us-central1")
    assert info.value.message.startswith(f"bucket gs://kept has a retention policy ({said}): ")


def test_a_small_upload_that_gets_a_503_is_sent_again_for_its_own_five_minutes(gcs, monkeypatch, tmp_path):
    """A transient 503 on a small file's one upload request is retried (the upload went without a retry policy and
    `ftcli train` failed on it), for the uploads' own 300 s, not the 120 s (RETRY_S, 0.01 s here) of a lookup."""
    from ftcli.gcp import storage
    from tests.emulators.gcs import FaultyProxy

    monkeypatch.setattr(storage, "RETRY_S", 0.01)
    gcs.create_bucket("bkt")
    local = tmp_path / "small.csv"
    local.write_bytes(b"text,label\n" * 100)
    with FaultyProxy(gcs.url, max_failures=1,
                     fail_when=lambda method, target, n: method == "POST" and "/upload/" in target) as proxy:
        for name, value in proxy.env().items():
            monkeypatch.setenv(name, value)
        assert storage.StorageGateway("p").upload_if_absent(local, "gs://bkt/d/small.csv") == local.stat().st_size
        assert proxy.failed == 1
    assert gcs.read("bkt", "d/small.csv") == local.read_bytes()


def test_a_503_on_asking_where_a_session_stands_still_resumes_it(gcs, proxied, tmp_path):
    """The next run's question to a remembered session (the PUT of `bytes */SIZE`) is retried on a transient error
    like any other request: one 503 there had the session given up and the whole file sent again from byte 0."""
    from ftcli.gcp.storage import StorageGateway

    local = _big_file(tmp_path / "big.csv")
    size, uri = local.stat().st_size, "gs://bkt/d/big.csv"
    _interrupted(local, uri, after=2 * CHUNK)
    first = proxied.seen
    proxied.max_failures, proxied.fail_when = 1, lambda method, target, n: method == "PUT" and n > first
    assert StorageGateway("p").upload_if_absent(local, uri) == size - 2 * CHUNK
    second = proxied.requests[first:]
    assert proxied.failed == 1 and not any(r.method == "POST" for r in second)  # no new session
    assert _chunk_bytes(second) == size - 2 * CHUNK
    assert gcs.read("bkt", "d/big.csv") == local.read_bytes()


def test_a_503_on_beginning_a_session_is_retried(gcs, proxied, tmp_path):
    """The POST that begins a big file's resumable session is retried on a transient error: one 503 there failed
    the upload, and with it `ftcli train`."""
    from ftcli.gcp.storage import StorageGateway

    local = _big_file(tmp_path / "big.csv")
    proxied.max_failures, proxied.fail_when = 1, lambda method, target, n: method == "POST"
    assert StorageGateway("p").upload_if_absent(local, "gs://bkt/d/big.csv") == local.stat().st_size
    assert proxied.failed == 1
    assert gcs.read("bkt", "d/big.csv") == local.read_bytes()


def test_a_download_that_gets_a_503_is_read_again(gcs, monkeypatch, tmp_path):
    """A transient 503 on a model file's download is retried (one failed `ftcli download` and `ftcli predict JOB`)."""
    from ftcli.gcp.storage import StorageGateway
    from tests.emulators.gcs import FaultyProxy

    gcs.create_bucket("bkt")
    gcs.write("bkt", "m/model.safetensors", b"weights" * 1000)
    target = tmp_path / "out" / "model.safetensors"
    with FaultyProxy(gcs.url, max_failures=1,
                     fail_when=lambda method, target, n: method == "GET" and "alt=media" in target) as proxy:
        for name, value in proxy.env().items():
            monkeypatch.setenv(name, value)
        assert StorageGateway("p").download_objects("bkt", [("m/model.safetensors", target)]) == 7000
        assert proxy.failed == 1
    assert target.read_bytes() == b"weights" * 1000


def test_the_head_of_an_object_is_its_first_bytes_asked_for(gcs):
    """`ftcli train` reads a big gs:// data file's first HEAD_BYTES (+1, to know whether that is all of it): one byte
    more or fewer, or the whole object, and the pre-flight checked other bytes than the job reads (or downloaded
    gigabytes); an empty object is b"" (a range of it is no range), a missing one None."""
    from ftcli.gcp.storage import StorageGateway

    gcs.create_bucket("bkt")
    gcs.write("bkt", "d/ten.csv", b"0123456789")
    gcs.client().bucket("bkt").blob("d/empty.csv").upload_from_string(b"")  # (`write` sends no empty body)
    storage = StorageGateway("p")
    assert storage.read_head("gs://bkt/d/ten.csv", 4) == b"0123"
    assert storage.read_head("gs://bkt/d/ten.csv", 10) == b"0123456789"
    assert storage.read_head("gs://bkt/d/ten.csv", 11) == b"0123456789"
    assert storage.read_head("gs://bkt/d/empty.csv", 4) == b""
    assert storage.read_head("gs://bkt/d/missing.csv", 4) is None


@pytest.mark.parametrize("raced", [False, True])
def test_an_object_that_arrived_with_other_bytes_is_removed_but_never_anothers(gcs, proxied, tmp_path, monkeypatch,
                                                                              raced):
    """Where the store did not hold the declared CRC32C against the bytes (here: a session begun without it), an
    upload of a file rewritten part way made an object that is neither version: ftcli removes that object and says
    so. Only that generation: an object written there meanwhile by another writer (`raced`) stays."""
    from google.cloud.storage import Blob


    begin, delete = Blob.create_resumable_upload_session, Blob.delete

    def without_its_checksum(self, *args, **kwargs):
        self._properties.pop("crc32c", None)
        self._changes.discard("crc32c")
        return begin(self, *args, **kwargs)

    def after_another_writer(self, *args, **kwargs):
        gcs.write("bkt", "d/big.csv", b"theirs")
        return delete(self, *args, **kwargs)

    monkeypatch.setattr(Blob, "create_resumable_upload_session", without_its_checksum)
    if raced:
        monkeypatch.setattr(Blob, "delete", after_another_writer)
    local = _big_file(tmp_path / "big.csv")
    began = _crc32c(local.read_bytes())
    info, data = _upload_rewritten_part_way(local)
    # (raced: it said "the object was removed" of the one another writer had put there, which stays)
    gone = ("it could not be removed, or another writer's object has replaced it: check it" if raced else
            "the object was removed")
    assert info.value.message == (f"big.csv arrived in gs://bkt/d/big.csv with other bytes (CRC32C "
                                  f"{_crc32c(data)}, the file's is {began}); {gone}")
    if raced:
        assert gcs.read("bkt", "d/big.csv") == b"theirs"
    else:
        assert gcs.list("bkt") == []


def test_a_session_that_ends_while_under_way_is_begun_again_once(gcs, proxied, tmp_path):
    """Cloud Storage let go of the session part way through the upload (404: expired, cancelled): the upload begins a
    new one and sends the file whole, once; the object is the file's bytes."""
    from ftcli.gcp.storage import StorageGateway

    local = _big_file(tmp_path / "big.csv")
    gone = []

    def expire_midway(done, _total):
        if done == 2 * CHUNK and not gone:
            gone.append(done)
            gcs.expire_uploads()

    assert StorageGateway("p").upload_if_absent(local, "gs://bkt/d/big.csv", progress=expire_midway) == \
        local.stat().st_size
    assert [r.method for r in proxied.requests].count("POST") == 2  # the session, then its successor
    assert gcs.read("bkt", "d/big.csv") == local.read_bytes() and _kept_sessions() == 0


_INTERRUPT_IN_WAIT = r'''
import concurrent.futures._base as futures_base
import signal
import sys
import threading
import time

from ftcli.gcp.storage import Stopped, _run_batch

sig = getattr(signal, sys.argv[1])
if sig != signal.SIGINT:  # SIGTERM as `ftcli train` takes it: KeyboardInterrupt, as for Ctrl-C
    from ftcli.cli.watch import stop_signals_interrupt
    interrupting = stop_signals_interrupt()
    got = interrupting.__enter__()
enter = futures_base._AcquireFutures.__enter__
calls = []


def enter_then_signal(self):  # the signal lands while wait() holds the first future's lock, not yet the rest
    calls.append(1)
    if len(calls) != 3:
        return enter(self)
    first, *rest = sorted(self.futures, key=id)
    first._condition.acquire()
    signal.raise_signal(sig)
    for f in rest:
        f._condition.acquire()


futures_base._AcquireFutures.__enter__ = enter_then_signal
stop = threading.Event()
ran = []


def task(i):
    def run():
        if stop.wait(0.5 * (i + 1)):
            raise Stopped
        ran.append(i)
        return i
    return run


try:
    _run_batch([task(i) for i in range(4)], stop)
except KeyboardInterrupt:
    print("interrupted", sorted(ran), flush=True)
'''


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_inside_the_batchs_wait_does_not_hang_it(tmp_path, sig):
    """A Ctrl-C (or, under `ftcli train`, a SIGTERM) raised KeyboardInterrupt at whatever line the main thread was on;
    landing inside concurrent.futures' wait() while it held some futures' locks, it left them held, and the worker that
    then finished such a future waited for the lock forever: `ftcli download` hung after its Ctrl-C (a CI run once
    timed out on it). The signal now only stops the batch; its KeyboardInterrupt is raised once the batch has ended."""
    import subprocess
    import sys

    script = tmp_path / "interrupt_in_wait.py"
    script.write_text(_INTERRUPT_IN_WAIT)
    try:
        done = subprocess.run([sys.executable, str(script), sig], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the batch hung after the {sig} landed in its wait")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "interrupted []\n", done.stdout + done.stderr  # stopped before any task's end
