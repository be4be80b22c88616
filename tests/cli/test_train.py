"""`ftcli train` against emulators that speak the real protocols: assert on what the servers received."""

import io
import json
import tarfile

import grpc
import pytest

from tests.cli.helpers import run_cli
from tests.conftest import write_csv

BASE = ["train", "--detach", "--json", "--epochs", "1"]


def submitted(capsys, *args):
    r = run_cli(capsys, *BASE, *args)
    assert r.code == 0, r.err
    return json.loads(r.out)


def test_dry_run_prints_the_job_and_touches_nothing(capsys, monkeypatch, tmp_path):
    # unreachable endpoints and no credentials: a dry run must not need them
    monkeypatch.setenv("FTCLI_VERTEX_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "L4x2", "--spot", "--project", "my-project",
                "--bucket", "gs://my-bucket/x", "--region", "europe-west4", "--dry-run", "--epochs", "2")
    assert r.code == 0, r.err
    job = json.loads(r.out)
    pool = job["jobSpec"]["workerPoolSpecs"][0]
    assert pool["machineSpec"] == {"machineType": "g2-standard-24", "acceleratorType": "NVIDIA_L4",
                                   "acceleratorCount": 2}
    spec = pool["pythonPackageSpec"]
    assert spec["executorImageUri"].startswith("europe-docker.pkg.dev/vertex-ai/training/pytorch-gpu")
    assert spec["pythonModule"] == "ftcli_trainer.task" and spec["args"] == ["--task", "imdb", "--epochs", "2"]
    assert spec["packageUris"][0].startswith("gs://my-bucket/x/ftcli/packages/ftcli_trainer-")
    assert job["jobSpec"]["scheduling"] == {"timeout": "86400s", "strategy": "SPOT", "restartJobOnWorkerRestart": True}
    assert job["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"].startswith("gs://my-bucket/x/ftcli/runs/ftcli-imdb-")
    assert job["labels"]["ftcli-task"] == "imdb" and job["labels"]["created-by"] == "ftcli"
    assert "nothing uploaded" in r.err
    assert not (tmp_path / "state").exists()


def test_submit_uploads_once_and_creates_exactly_the_built_job(capsys, cloud_env, tmp_path):
    gcs, vertex = cloud_env
    train = write_csv(tmp_path / "train.csv", ["text", "label"], [("good", "pos"), ("bad", "neg")] * 20)
    dry = run_cli(capsys, "train", "--task", "csv", "--train-file", str(train), "--gpu", "T4", "--dry-run",
                  "--epochs", "1", "--display-name", "exp-1")
    expected = json.loads(dry.out)

    first = submitted(capsys, "--task", "csv", "--train-file", str(train), "--gpu", "T4", "--display-name", "exp-1")
    assert first["short_id"] == 1 and first["uploaded_bytes"] > 0
    (method, request), = [(m, r) for m, r in vertex.requests if m == "CreateCustomJob"]
    assert request.parent == "projects/test-project/locations/us-central1"
    from ftcli.spec import to_proto

    sent = type(request.custom_job).to_dict(request.custom_job)
    want = type(request.custom_job).to_dict(to_proto(expected))
    want["labels"]["ftcli-submission"] = sent["labels"]["ftcli-submission"]  # new id per submission
    assert sent == want

    objects = gcs.list("ftcli-test")
    package = [o for o in objects if o.startswith("team/ftcli/packages/ftcli_trainer-")]
    data = [o for o in objects if o.startswith("team/ftcli/data/")]
    assert len(package) == 1 and len(data) == 1 and len(objects) == 2
    assert gcs.read("ftcli-test", data[0]) == train.read_bytes()
    args = request.custom_job.job_spec.worker_pool_specs[0].python_package_spec.args
    assert args[args.index("--train-file") + 1] == f"gs://ftcli-test/{data[0]}"
    with tarfile.open(fileobj=io.BytesIO(gcs.read("ftcli-test", package[0]))) as tar:
        names = tar.getnames()
    assert any(n.endswith("ftcli_trainer/task.py") for n in names)
    assert not any("/ftcli/" in n or "sample" in n for n in names)

    again = submitted(capsys, "--task", "csv", "--train-file", str(train), "--gpu", "T4")
    assert again["uploaded_bytes"] == 0 and again["short_id"] == 2
    assert gcs.list("ftcli-test") == objects
    assert len(vertex.jobs) == 2


@pytest.mark.parametrize("lose_response", [False, True])
def test_unavailable_on_create_makes_exactly_one_job(capsys, cloud_env, lose_response):
    gcs, vertex = cloud_env
    vertex.fail_next("CreateCustomJob", grpc.StatusCode.UNAVAILABLE, lose_response=lose_response)
    out = submitted(capsys, "--task", "imdb", "--gpu", "T4")
    assert len(vertex.jobs) == 1
    assert out["name"] in vertex.jobs
    creates = [m for m, _ in vertex.requests if m == "CreateCustomJob"]
    assert len(creates) == (1 if lose_response else 2)  # a lost response is found by its label, not re-created


def test_gcs_503s_during_upload_still_give_equal_bytes(capsys, cloud_env, tmp_path, monkeypatch):
    from tests.emulators.gcs import FaultyProxy

    gcs, vertex = cloud_env
    big = tmp_path / "big.csv"
    big.write_text("text,label\n" + "".join(f"row number {i} with some words,{i % 2}\n" for i in range(400_000)))
    assert big.stat().st_size > 8 * 1024 * 1024  # resumable, chunked upload
    with FaultyProxy(gcs.url, fail_when=lambda m, t, n: m in ("PUT", "POST") and n % 3 == 0) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        out = submitted(capsys, "--task", "csv", "--train-file", str(big), "--gpu", "T4")
        assert proxy.failed > 0
    assert out["uploaded_bytes"] > big.stat().st_size
    data = [o for o in gcs.list("ftcli-test") if o.endswith("/big.csv")]
    assert gcs.read("ftcli-test", data[0]) == big.read_bytes()
    assert len(vertex.jobs) == 1


@pytest.mark.parametrize("code,needle,hint", [
    (grpc.StatusCode.RESOURCE_EXHAUSTED, "quota exceeded (custom_model_training_nvidia_t4_gpus)",
     "iam-admin/quotas?project=test-project"),
    (grpc.StatusCode.PERMISSION_DENIED, "permission denied", "roles/aiplatform.user"),
    (grpc.StatusCode.INVALID_ARGUMENT, "rejected the request", "--dry-run"),
])
def test_vertex_errors_are_one_clear_line(capsys, cloud_env, code, needle, hint):
    gcs, vertex = cloud_env
    vertex.fail_next("CreateCustomJob", code, message="custom_model_training_nvidia_t4_gpus exceeded")
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 1
    assert needle in r.err and hint in r.err and "Traceback" not in r.err
    assert not vertex.jobs


@pytest.mark.parametrize("args,needle", [
    (["--gpu", "T4x3"], "T4 comes in counts 1, 2, 4"),
    (["--gpu", "L4", "--machine-type", "n1-standard-8"], "g2-standard"),
    (["--epochs", "0", "--replicas", "0"], "--replicas"),
    (["--region", "us-centrall1"], "did you mean us-central1"),
    (["--train-file", "/no/such.csv", "--task", "csv"], "no such file"),
    (["--timeout", "forever"], "--timeout"),
])
def test_bad_input_uploads_nothing_and_creates_nothing(capsys, cloud_env, args, needle):
    gcs, vertex = cloud_env
    r = run_cli(capsys, "train", "--detach", *args)
    assert r.code == 2, r.err
    assert needle in r.err and "Traceback" not in r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_missing_bucket_is_caught_before_any_upload(capsys, cloud_env, monkeypatch):
    gcs, vertex = cloud_env
    monkeypatch.setenv("FTCLI_BUCKET", "gs://no-such-bucket")
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 1 and "gs://no-such-bucket does not exist" in r.err and "gcloud storage buckets create" in r.err
    assert vertex.requests == [] and gcs.list("ftcli-test") == []


def test_jobs_list_describe_cancel(capsys, cloud_env):
    gcs, vertex = cloud_env
    job = submitted(capsys, "--task", "imdb", "--gpu", "A100x8", "--display-name", "big-one")
    r = run_cli(capsys, "jobs", "list", "--json")
    rows = [json.loads(line) for line in r.out.splitlines()]
    assert [(x["short_id"], x["displayName"]) for x in rows] == [(1, "big-one")]
    assert any(m == "ListCustomJobs" and 'labels.created-by="ftcli"' in req.filter for m, req in vertex.requests)
    r = run_cli(capsys, "jobs", "describe", "last")
    assert r.code == 0 and "big-one" in r.out and "PENDING" in r.out and "a2-highgpu-8g" in r.out
    r = run_cli(capsys, "jobs", "cancel", "1", "--yes")
    assert r.code == 0
    assert any(m == "CancelCustomJob" and req.name == job["name"] for m, req in vertex.requests)
    r = run_cli(capsys, "jobs", "describe", job["id"], "--json")
    assert json.loads(r.out)["state"] == "JOB_STATE_CANCELLED"
    r = run_cli(capsys, "jobs", "describe", "99")
    assert r.code == 2 and "no job #99" in r.err


def test_values_that_would_crash_inside_the_job_are_refused_before_anything(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "T4", "--project", "p", "--bucket", "gs://b",
                "--dry-run", "--learning-rate", "nan", "--weight-decay", "inf", "--seed", str(2**32))
    assert r.code == 2 and r.out == ""
    for needle in ("--learning-rate must be a finite number, got nan", "--weight-decay must be a finite number",
                   "--seed must be at most 4294967295"):
        assert needle in r.err
    assert "Traceback" not in r.err
