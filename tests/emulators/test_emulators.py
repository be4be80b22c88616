"""The emulators, driven by the real SDK clients: what works here works against the wire protocol they speak."""

from __future__ import annotations

import datetime as dt
import http.client
import io
import os
import re
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import pytest
from google.api_core import exceptions as gexc

from tests.emulators.cloud_logging import LoggingEmulator
from tests.emulators.gcs import FaultyProxy, GcsEmulator
from tests.emulators.vertex import VertexEmulator

PARENT = "projects/test-proj/locations/us-central1"
JOB_NAME = re.compile(r"^projects/test-proj/locations/us-central1/customJobs/\d+$")


def fast_storage_retry():
    # The storage client's default backoff starts at 1 s; the tests only care that it retries.
    from google.cloud.storage.retry import DEFAULT_RETRY

    return DEFAULT_RETRY.with_delay(initial=0.01, maximum=0.1).with_timeout(30)


# -- GCS ---------------------------------------------------------------------------------------------------------------


def test_gcs_client_from_environment_round_trips(gcs: GcsEmulator) -> None:
    from google.cloud import storage

    gcs.create_bucket("bkt")
    client = storage.Client(project="test")  # only the fixture's STORAGE_EMULATOR_HOST points it here
    bucket = client.bucket("bkt")
    bucket.blob("pkgs/a.tar.gz").upload_from_string(b"aaa")
    bucket.blob("pkgs/b.tar.gz").upload_from_string(b"bbb")
    bucket.blob("other/c").upload_from_string(b"ccc")

    assert gcs.read("bkt", "pkgs/a.tar.gz") == b"aaa"
    assert gcs.list("bkt", prefix="pkgs/") == ["pkgs/a.tar.gz", "pkgs/b.tar.gz"]
    assert sorted(b.name for b in client.list_blobs("bkt", prefix="pkgs/")) == ["pkgs/a.tar.gz", "pkgs/b.tar.gz"]
    assert bucket.blob("other/c").download_as_bytes() == b"ccc"
    assert not bucket.blob("missing").exists()
    with pytest.raises(gexc.NotFound):
        bucket.blob("missing").download_as_bytes()
    with pytest.raises(FileNotFoundError):
        gcs.read("bkt", "missing")


def test_a_job_mounts_objects_named_with_hash_and_question_marks(gcs: GcsEmulator) -> None:
    # any object in a bucket the job names is mirrored under /gcs/: one named "a #1?.csv" failed every job (a 404
    # through the listing's unquoted mediaLink) before the trainer started
    from google.cloud.aiplatform_v1.types import CustomJob

    from tests.emulators.runner import JobRun

    gcs.create_bucket("mount-bkt")
    names = {"in put/tr #1?a=b&c%20 [é]*.csv": b"x,y\n", "pkg/ftcli_trainer.whl": b"wheel"}
    for name, data in names.items():
        gcs.write("mount-bkt", name, data)
    job = CustomJob(name=f"{PARENT}/customJobs/1", job_spec={"worker_pool_specs": [{"container_spec": {
        "image_uri": "i", "command": ["bash", "-c", "true"], "args": ["/gcs/mount-bkt/pkg/ftcli_trainer.whl"]}}]})
    run = JobRun(type("Emulator", (), {"gcs_url": gcs.url})(), job)
    try:
        root = run._mount_gcs()
        assert {str(p.relative_to(root / "mount-bkt")): p.read_bytes() for p in (root / "mount-bkt").rglob("*")
                if p.is_file()} == names
    finally:
        import shutil

        shutil.rmtree(run.workdir, ignore_errors=True)


def test_gcs_reset_empties_the_store(gcs: GcsEmulator) -> None:
    gcs.create_bucket("bkt")
    gcs.write("bkt", "x", b"1")
    gcs.reset(keep_buckets=True)
    assert gcs.list("bkt") == []
    gcs.reset()
    with pytest.raises(FileNotFoundError):
        gcs.list("bkt")


def test_gcs_buckets_belong_to_projects_and_keep_their_iam_policy(gcs: GcsEmulator) -> None:
    # what ftcli's check of the job's access to its bucket reads: a bucket's projectNumber, the buckets of a project
    # (an id stands for the emulator's own project), and the bucket's IAM policy
    from tests.emulators.gcs import PROJECT_NUMBER

    gcs.create_bucket("ours-b")
    gcs.create_bucket("ours-a")
    gcs.create_bucket("theirs", project="567890123")
    client = gcs.client()
    assert client.get_bucket("theirs").project_number == 567890123
    assert client.get_bucket("ours-a").project_number == int(PROJECT_NUMBER)
    assert [b.name for b in client.list_buckets(project="any-project-id")] == ["ours-a", "ours-b"]
    assert [b.name for b in client.list_buckets(project="any-project-id", max_results=1)] == ["ours-a"]
    assert [b.name for b in client.list_buckets(project="any-project-id", prefix="ours-b")] == ["ours-b"]
    assert [b.name for b in client.list_buckets(project="567890123")] == ["theirs"]
    assert list(client.list_buckets(project="111111111")) == []
    gcs.set_iam_policy("theirs", [{"role": "roles/storage.objectAdmin", "members": ["serviceAccount:a@b.c"]}])
    assert client.bucket("theirs").get_iam_policy().bindings == [
        {"role": "roles/storage.objectAdmin", "members": {"serviceAccount:a@b.c"}}]


def test_gcs_generation_preconditions_on_create_update_and_delete(gcs: GcsEmulator) -> None:
    # what a lease in a bucket is built on (ftcli_trainer/lease.py): create-only, generation-matched update and delete
    gcs.create_bucket("bkt")
    bucket = gcs.client().bucket("bkt")
    first = bucket.blob("lock")
    first.upload_from_string(b"a", if_generation_match=0)
    with pytest.raises(gexc.PreconditionFailed):
        bucket.blob("lock").upload_from_string(b"b", if_generation_match=0)
    with pytest.raises(gexc.PreconditionFailed):
        bucket.blob("lock").upload_from_string(b"b", if_generation_match=int(first.generation) + 1)
    assert gcs.read("bkt", "lock") == b"a"
    second = bucket.blob("lock")
    second.upload_from_string(b"c", if_generation_match=first.generation)
    assert second.generation != first.generation and gcs.read("bkt", "lock") == b"c"
    with pytest.raises(gexc.PreconditionFailed):
        bucket.blob("lock").delete(if_generation_match=first.generation)  # a stale holder cannot delete it
    assert gcs.read("bkt", "lock") == b"c"
    bucket.blob("lock").delete(if_generation_match=second.generation)
    assert gcs.list("bkt") == []


@pytest.mark.parametrize("name,says", [
    ("p" * 1021 + "/é.txt", "The maximum object length is 1024 characters, but got a name with 1028 characters"),
    ("two\nlines.csv", "Disallowed unicode characters present in object name"),
    (".well-known/acme-challenge/token", "Invalid object name"),
    ("..", "Invalid object name"),
])
@pytest.mark.parametrize("upload", ["media", "multipart", "resumable"])
def test_gcs_refuses_object_names_cloud_storage_refuses(gcs: GcsEmulator, name: str, says: str, upload: str) -> None:
    # "Object naming requirements": 1-1024 bytes of UTF-8 (é is two), no CR or LF, not under
    # .well-known/acme-challenge/, not . or ..; gcp-storage-emulator took every one of these, by every kind of upload
    gcs.create_bucket("bkt")
    blob = gcs.client().bucket("bkt").blob(name)
    if upload == "media":
        with pytest.raises(RuntimeError, match=f"HTTP 400 .*{re.escape(says)}"):
            gcs.write("bkt", name, b"x")
    else:
        with pytest.raises(gexc.BadRequest, match=re.escape(says)):
            if upload == "multipart":
                blob.upload_from_string(b"x")
            else:  # no size: the client starts a resumable session, refused at its start
                blob.upload_from_file(io.BytesIO(b"x"), size=None)
    assert gcs.list("bkt") == []
    gcs.write("bkt", "p" * 1017 + "/é.txt", b"x")  # 1024 bytes: taken
    assert gcs.list("bkt") == ["p" * 1017 + "/é.txt"]


def test_a_resumable_sessions_status_query_answers_as_cloud_storage_does(gcs: GcsEmulator) -> None:
    """`PUT SESSION` with `Content-Range: bytes */SIZE` and no body: 308 with no Range while nothing is held (the
    emulator said `bytes=0-0`), `Range: bytes=0-N` once N + 1 bytes are, 404 once the session is forgotten."""
    import requests

    gcs.create_bucket("bkt")
    url = gcs.client().bucket("bkt").blob("big.bin").create_resumable_upload_session(size=1024 * 1024)

    def status() -> requests.Response:
        return requests.put(url, data=b"", headers={"Content-Range": f"bytes */{1024 * 1024}"}, timeout=10)

    empty = status()
    assert empty.status_code == 308 and "Range" not in empty.headers
    chunk = requests.put(url, data=b"x" * 256 * 1024, timeout=10,
                         headers={"Content-Range": f"bytes 0-{256 * 1024 - 1}/{1024 * 1024}"})
    assert chunk.status_code == 308 and chunk.headers["Range"] == f"bytes=0-{256 * 1024 - 1}"
    held = status()
    assert held.status_code == 308 and held.headers["Range"] == f"bytes=0-{256 * 1024 - 1}"
    gcs.expire_uploads()
    assert status().status_code == 404


@pytest.mark.parametrize("status", [503, None], ids=["503", "dropped-connection"])
def test_resumable_upload_through_faults_keeps_the_bytes(gcs: GcsEmulator, status: int | None) -> None:
    gcs.create_bucket("bkt")
    data = os.urandom(10 * 1024 * 1024 + 123)  # above the client's 8 MiB multipart limit: a resumable upload
    chunk_puts = 0

    def every_other_chunk(method: str, target: str, n: int) -> bool:
        nonlocal chunk_puts
        if method == "PUT" and "upload_id=" in target:
            chunk_puts += 1
            return chunk_puts % 2 == 1  # the first try of each chunk fails, the retry goes through
        return False

    with FaultyProxy(gcs.url, fail_when=every_other_chunk, status=status) as proxy:
        blob = proxy.client().bucket("bkt").blob("big.bin", chunk_size=4 * 1024 * 1024)
        blob.upload_from_string(data, retry=fast_storage_retry())

    assert gcs.read("bkt", "big.bin") == data
    puts = [r for r in proxy.requests if r.method == "PUT"]
    assert proxy.failed == 3 and len(puts) == 6  # three 4 MiB-or-less chunks, each sent twice
    assert [r.headers["content-range"] for r in puts if not r.failed] == [
        "bytes 0-4194303/10485883", "bytes 4194304-8388607/10485883", "bytes 8388608-10485882/10485883"]
    assert all(r.status == status for r in puts if r.failed)


def test_proxy_fail_every_counts_and_forwards_chunked_bodies(gcs: GcsEmulator) -> None:
    gcs.create_bucket("bkt")
    with FaultyProxy(gcs.url, fail_every=2) as proxy:
        host, port = proxy.url.removeprefix("http://").split(":")
        statuses = []
        for _ in range(2):
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            # A chunked request body: the proxy must re-frame it for the emulator.
            conn.request("POST", "/upload/storage/v1/b/bkt/o?uploadType=media&name=chunked.txt",
                         body=iter([b"hello ", b"chunked ", b"world"]), encode_chunked=True,
                         headers={"Content-Type": "text/plain", "Transfer-Encoding": "chunked"})
            statuses.append(conn.getresponse().status)
            conn.close()
        with urllib.request.urlopen(proxy.url + "/") as r:  # request 3 passes
            assert r.status == 200
    assert statuses == [200, 503]
    assert (proxy.seen, proxy.failed) == (3, 1)
    assert gcs.read("bkt", "chunked.txt") == b"hello chunked world"


def test_proxy_can_lose_the_response_after_the_write(gcs: GcsEmulator) -> None:
    gcs.create_bucket("bkt")
    with FaultyProxy(gcs.url, fail_when=lambda m, t, n: m == "POST", forward_failed=True, max_failures=1) as proxy:
        blob = proxy.client().bucket("bkt").blob("once")
        with pytest.raises(gexc.ServiceUnavailable):
            blob.upload_from_string(b"payload", retry=None)
        assert gcs.read("bkt", "once") == b"payload"  # the client saw 503, but the write happened
        blob.upload_from_string(b"payload", retry=fast_storage_retry())  # a retry overwrites with the same bytes
    assert gcs.read("bkt", "once") == b"payload"


# -- Vertex JobService -------------------------------------------------------------------------------------------------


def job_spec(display_name: str = "ftcli-imdb", **labels: str) -> dict:
    return {
        "display_name": display_name,
        "labels": labels,
        "job_spec": {"worker_pool_specs": [{
            "machine_spec": {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
                             "accelerator_count": 1},
            "replica_count": 1,
            "container_spec": {
                "image_uri": "docker.io/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime",
                "command": ["bash", "-c", "exec python -m ftcli_trainer.task \"$@\"", "ftcli-trainer"],
                "args": ["--task", "imdb"]},
        }]},
    }


@pytest.fixture
def job_client(vertex: VertexEmulator) -> Iterator:
    # How a client reaches the emulator: a plaintext channel handed to the gRPC transport, no credentials.
    from google.cloud.aiplatform_v1.services.job_service import JobServiceClient
    from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

    client = JobServiceClient(transport=JobServiceGrpcTransport(channel=grpc.insecure_channel(vertex.address)))
    with client:
        yield client


def test_vertex_create_and_get_record_what_was_sent(vertex: VertexEmulator, job_client) -> None:
    from google.cloud.aiplatform_v1.types import JobState

    job = job_client.create_custom_job(parent=PARENT, custom_job=job_spec(run="r1"))
    assert JOB_NAME.match(job.name)
    assert job.state == JobState.JOB_STATE_PENDING and job.create_time
    assert job_client.get_custom_job(name=job.name).name == job.name

    method, sent = vertex.requests[0]
    assert method == "CreateCustomJob" and sent.parent == PARENT
    pool = sent.custom_job.job_spec.worker_pool_specs[0]
    assert pool.container_spec.args == ["--task", "imdb"]
    assert pool.machine_spec.accelerator_count == 1 and sent.custom_job.labels["run"] == "r1"
    assert vertex.metadata[0]["x-goog-request-params"] == f"parent={PARENT}"
    assert vertex.endpoint == f"http://{vertex.address}" and list(vertex.jobs) == [job.name]


def test_vertex_list_filters_pages_newest_first(vertex: VertexEmulator, job_client) -> None:
    made = [job_client.create_custom_job(parent=PARENT, custom_job=job_spec("train", team="a" if i % 2 else "b"))
            for i in range(7)]
    job_client.create_custom_job(parent="projects/other/locations/us-central1", custom_job=job_spec("train", team="a"))
    pager = job_client.list_custom_jobs(request={"parent": PARENT, "page_size": 2,
                                                 "filter": 'labels.team="a" AND display_name="train"'})
    names = [j.name for j in pager]
    assert names == [made[5].name, made[3].name, made[1].name]
    assert [r.page_token for r in vertex.calls("ListCustomJobs")] == ["", "2"]

    assert len(list(job_client.list_custom_jobs(parent=PARENT))) == 7
    with pytest.raises(gexc.InvalidArgument):
        list(job_client.list_custom_jobs(request={"parent": PARENT, "filter": 'labels.team="a" OR labels.team="b"'}))


def test_vertex_cancel_then_cancelled_on_next_get(vertex: VertexEmulator, job_client) -> None:
    from google.cloud.aiplatform_v1.types import JobState

    job = job_client.create_custom_job(parent=PARENT, custom_job=job_spec())
    assert job_client.cancel_custom_job(name=job.name) is None  # google.protobuf.Empty on the wire
    assert vertex.job(job.name).state == JobState.JOB_STATE_CANCELLING
    done = job_client.get_custom_job(name=job.name)
    assert done.state == JobState.JOB_STATE_CANCELLED and done.end_time and done.error.code == 1
    with pytest.raises(gexc.FailedPrecondition):
        job_client.cancel_custom_job(name=job.name)


def test_vertex_unknown_names_are_not_found(job_client) -> None:
    missing = f"{PARENT}/customJobs/42"
    with pytest.raises(gexc.NotFound):
        job_client.get_custom_job(name=missing)
    with pytest.raises(gexc.NotFound):
        job_client.cancel_custom_job(name=missing)


def test_vertex_fail_next_reaches_the_client(vertex: VertexEmulator, job_client) -> None:
    vertex.fail_next("CreateCustomJob", grpc.StatusCode.UNAVAILABLE, message="try later")
    with pytest.raises(gexc.ServiceUnavailable, match="try later"):
        job_client.create_custom_job(parent=PARENT, custom_job=job_spec())
    assert vertex.jobs == {}  # JobService methods have no default retry: the first failure surfaces
    job_client.create_custom_job(parent=PARENT, custom_job=job_spec())
    assert len(vertex.jobs) == 1


def test_vertex_lost_response_leaves_a_job_to_find_by_label(vertex: VertexEmulator, job_client) -> None:
    vertex.fail_next("CreateCustomJob", lose_response=True)
    with pytest.raises(gexc.ServiceUnavailable):
        job_client.create_custom_job(parent=PARENT, custom_job=job_spec(ftcli_request="req-1"))
    # An idempotent retry looks before it creates again.
    found = list(job_client.list_custom_jobs(request={"parent": PARENT, "filter": 'labels.ftcli_request="req-1"'}))
    assert [j.name for j in found] == list(vertex.jobs)


def test_vertex_script_and_set_state(vertex: VertexEmulator, job_client) -> None:
    from google.cloud.aiplatform_v1.types import JobState

    vertex.script = ["JOB_STATE_RUNNING", "SUCCEEDED"]
    job = job_client.create_custom_job(parent=PARENT, custom_job=job_spec())
    running = job_client.get_custom_job(name=job.name)
    assert running.state == JobState.JOB_STATE_RUNNING and running.start_time and not running.end_time
    states = [job_client.get_custom_job(name=job.name).state for _ in range(2)]
    assert states == [JobState.JOB_STATE_SUCCEEDED] * 2
    assert vertex.job(job.name).end_time >= vertex.job(job.name).start_time

    other = job_client.create_custom_job(parent=PARENT, custom_job=job_spec())
    vertex.set_state(other.name, "FAILED", "exit 3")
    failed = job_client.get_custom_job(name=other.name)
    assert failed.state == JobState.JOB_STATE_FAILED and failed.error.message == "exit 3"


def test_vertex_names_use_the_project_number_when_set(vertex: VertexEmulator, job_client) -> None:
    vertex.project_number = "123456789012"
    job = job_client.create_custom_job(parent=PARENT, custom_job=job_spec())
    assert job.name.startswith("projects/123456789012/locations/us-central1/customJobs/")
    by_id = job.name.replace("123456789012", "test-proj")
    assert job_client.get_custom_job(name=by_id).name == job.name
    assert [j.name for j in job_client.list_custom_jobs(parent=PARENT)] == [job.name]


# -- Cloud Logging -----------------------------------------------------------------------------------------------------

T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


@pytest.fixture
def log_client(cloud_logging: LoggingEmulator) -> Iterator:
    from google.cloud.logging_v2.services.logging_service_v2 import LoggingServiceV2Client
    from google.cloud.logging_v2.services.logging_service_v2.transports import LoggingServiceV2GrpcTransport

    client = LoggingServiceV2Client(
        transport=LoggingServiceV2GrpcTransport(channel=grpc.insecure_channel(cloud_logging.address)))
    with client:
        yield client


def test_logging_list_filters_orders_and_pages(cloud_logging: LoggingEmulator, log_client) -> None:
    # Written out of time order: the list comes back sorted by timestamp all the same.
    for i in (3, 0, 4, 1, 2, 5):
        cloud_logging.write_line("123", "workerpool0-0", f"line {i}", severity="WARNING" if i % 2 else "INFO",
                                 timestamp=T0 + dt.timedelta(seconds=i))
    cloud_logging.write_line("123", "workerpool1-0", "other task", timestamp=T0)
    cloud_logging.write_line("999", "workerpool0-0", "other job", timestamp=T0)

    flt = ('resource.type="ml_job" AND resource.labels.job_id="123" AND resource.labels.task_name="workerpool0-0" '
           'AND timestamp>="2025-01-01T00:00:01Z"')
    pager = log_client.list_log_entries(request={"resource_names": ["projects/test"], "filter": flt, "page_size": 2})
    assert [e.text_payload for e in pager] == ["line 1", "line 2", "line 3", "line 4", "line 5"]
    assert len(cloud_logging.calls("ListLogEntries")) == 3 and cloud_logging.filters == [flt] * 3

    desc = log_client.list_log_entries(request={
        "resource_names": ["projects/test"], "order_by": "timestamp desc",
        "filter": 'resource.labels.job_id="123" AND severity>=WARNING AND timestamp>"2025-01-01T00:00:01Z"'})
    assert [e.text_payload for e in desc] == ["line 5", "line 3"]

    entry = cloud_logging.entries[0]
    assert entry.resource.type == "ml_job" and dict(entry.resource.labels)["task_name"] == "workerpool0-0"
    assert entry.log_name == "projects/test/logs/workerpool0-0" and entry.insert_id
    assert entry.timestamp == T0 + dt.timedelta(seconds=3)


def test_logging_list_bad_filter_and_retried_unavailable(cloud_logging: LoggingEmulator, log_client) -> None:
    with pytest.raises(gexc.InvalidArgument):
        list(log_client.list_log_entries(request={"resource_names": ["projects/test"], "filter": "(a=1 OR b=2)"}))
    cloud_logging.write_line("1", "workerpool0-0", "x")
    # ListLogEntries, unlike JobService, has a default Retry on UNAVAILABLE: one injected failure is invisible.
    cloud_logging.fail_next("ListLogEntries", grpc.StatusCode.UNAVAILABLE)
    assert [e.text_payload for e in log_client.list_log_entries(resource_names=["projects/test"])] == ["x"]
    assert len(cloud_logging.calls("ListLogEntries")) == 3  # the bad filter, the failure, the retry


@contextmanager
def tailing(client, flt: str, stop_after: int) -> Iterator[tuple[list[str], list[Exception]]]:
    """Tail in a thread: the GAPIC call itself blocks until the server sends its first response."""
    from google.cloud.logging_v2.types import TailLogEntriesRequest

    got: list[str] = []
    errors: list[Exception] = []

    def run() -> None:
        request = TailLogEntriesRequest(resource_names=["projects/test"], filter=flt)
        try:
            # retry=None: the default Retry would re-send on UNAVAILABLE with the request iterator already spent.
            for response in client.tail_log_entries(requests=iter([request]), retry=None, timeout=30):
                got.extend(e.text_payload for e in response.entries)
                if len(got) >= stop_after:
                    return
        except Exception as e:  # collected for the test thread to assert on
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield got, errors
    finally:
        thread.join(timeout=30)
        assert not thread.is_alive(), f"tail still running; got {got}, errors {errors}"


def test_logging_tail_streams_new_matching_entries_in_arrival_order(cloud_logging: LoggingEmulator,
                                                                     log_client) -> None:
    cloud_logging.write_line("123", "workerpool0-0", "before the tail opened")
    with tailing(log_client, 'resource.type="ml_job" AND resource.labels.job_id="123"', stop_after=3) as (got, errors):
        assert cloud_logging.wait_for_tails(1)
        cloud_logging.write_line("123", "workerpool0-0", "late", timestamp=T0 + dt.timedelta(hours=1))
        cloud_logging.write_line("999", "workerpool0-0", "another job")
        cloud_logging.write_line("123", "workerpool0-0", "early", timestamp=T0)
        cloud_logging.write_line("123", "workerpool1-0", "worker 1")
    assert got == ["late", "early", "worker 1"] and errors == []
    assert cloud_logging.filters == ['resource.type="ml_job" AND resource.labels.job_id="123"']
    assert cloud_logging.wait_for_tails(0)  # the client's break closed the stream on the server too


def test_logging_tail_cut_after_n_entries(cloud_logging: LoggingEmulator, log_client) -> None:
    cloud_logging.cut_streams_after(2)
    with tailing(log_client, 'resource.labels.job_id="7"', stop_after=99) as (got, errors):
        assert cloud_logging.wait_for_tails(1)
        for i in range(4):
            cloud_logging.write_line("7", "workerpool0-0", f"l{i}")
    assert got == ["l0", "l1"]
    assert len(errors) == 1 and isinstance(errors[0], gexc.ServiceUnavailable)


def test_logging_tail_unavailable_forces_a_fallback(cloud_logging: LoggingEmulator, log_client) -> None:
    cloud_logging.tail_unavailable = True
    with tailing(log_client, 'resource.labels.job_id="7"', stop_after=1) as (got, errors):
        pass
    assert got == [] and len(errors) == 1 and isinstance(errors[0], gexc.MethodNotImplemented)


def test_logging_reset_ends_open_tails(cloud_logging: LoggingEmulator, log_client) -> None:
    with tailing(log_client, 'resource.labels.job_id="7"', stop_after=1) as (got, errors):
        assert cloud_logging.wait_for_tails(1)
        cloud_logging.reset()
    assert got == [] and errors == [] and cloud_logging.active_tails == 0


def test_logging_a_new_tail_is_not_confused_with_the_previous_tests(cloud_logging: LoggingEmulator,
                                                                     log_client) -> None:
    for round_ in range(3):  # the race this guards against is short: go round a few times
        with tailing(log_client, "", stop_after=1) as (got, errors):
            assert cloud_logging.wait_for_tails(1)
            cloud_logging.write_line("1", "workerpool0-0", f"round {round_}")
        assert got == [f"round {round_}"] and errors == []
        cloud_logging.reset()  # as between tests, right after the client dropped its stream
        assert cloud_logging.active_tails == 0 and cloud_logging.entries == []


# -- the classes on their own, outside the fixtures --------------------------------------------------------------------


def test_context_managers_start_and_stop_cleanly() -> None:
    with GcsEmulator() as gcs, VertexEmulator() as vertex, FaultyProxy(gcs.url) as proxy:
        assert gcs.url.startswith("http://127.0.0.1:") and gcs.env()["STORAGE_EMULATOR_HOST"] == gcs.url
        assert proxy.env()["STORAGE_EMULATOR_HOST"] == proxy.url != gcs.url
        assert vertex.address.startswith("127.0.0.1:") and vertex.endpoint == f"http://{vertex.address}"
        with vertex.client() as client:
            client.create_custom_job(parent=PARENT, custom_job=job_spec())
        proc = gcs._proc
    assert proc is not None and proc.poll() is not None

    logs = LoggingEmulator().start()
    try:
        with logs.client() as log_client, tailing(log_client, "", stop_after=99) as (got, errors):
            assert logs.wait_for_tails(1)
            logs.stop()  # with a tail still open: stop() must end it rather than wait on it
    finally:
        logs.stop()
    prefixes = (vertex.thread_prefix, logs.thread_prefix, proxy.thread_prefix)
    assert [t.name for t in threading.enumerate() if t.name.startswith(prefixes)] == []
