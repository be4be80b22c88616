"""--gpu L4,T4 and --region A,B: candidates in order; the next one when the machines cannot be had (a used-up quota
at create time, or a job that failed for want of resources), said each time; the labels record what ran."""

from __future__ import annotations

import json

import grpc
import pytest

from tests.cli.helpers import run_cli

BASE = ["train", "--task", "imdb", "--detach", "--json"]


def created_jobs(vertex):
    return [r.custom_job for m, r in vertex.requests if m == "CreateCustomJob"]


def test_dry_run_drops_what_the_region_does_not_offer(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "L4,T4", "--region", "europe-west6,us-central1",
                "--project", "my-project", "--bucket", "gs://my-bucket-{region}", "--dry-run")
    assert r.code == 0, r.err
    # europe-west6 trains on no GPU: both of its pairs are skipped, with a note each
    assert "skipping L4 in europe-west6" in r.err and "skipping T4 in europe-west6" in r.err
    assert "candidates, in order: L4 in us-central1, T4 in us-central1" in r.err
    jobs = json.loads(r.out)  # every candidate's job, in order
    assert [j["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] for j in jobs] == [
        "NVIDIA_L4", "NVIDIA_TESLA_T4"]
    assert [j["labels"]["ftcli_try"] for j in jobs] == ["1-of-2", "2-of-2"]
    assert all(j["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"].startswith("gs://my-bucket-us-central1/")
               for j in jobs)


def test_several_regions_need_a_bucket_per_region(capsys, cloud_env):
    r = run_cli(capsys, *BASE, "--gpu", "L4", "--region", "us-central1,europe-west4")
    assert r.code == 2 and "give --bucket gs://NAME-{region}" in r.err


def test_no_candidate_left_is_one_line(capsys, cloud_env):
    r = run_cli(capsys, *BASE, "--gpu", "L4,T4", "--region", "europe-west6")
    assert r.code == 2 and "no --gpu/--region candidate can run: skipping L4 in europe-west6" in r.err
    assert "skipping T4 in europe-west6" in r.err
    # one candidate keeps the single-job error, with the regions that have the GPU
    r = run_cli(capsys, *BASE, "--gpu", "L4", "--region", "europe-west6")
    assert r.code == 2 and "europe-west6 does not offer L4 GPUs for training: try --region" in r.err


def test_a_used_up_quota_moves_on_to_the_next_gpu(capsys, cloud_env):
    gcs, vertex = cloud_env
    vertex.fail_next("CreateCustomJob", grpc.StatusCode.RESOURCE_EXHAUSTED,
                     message="The following quota metrics exceed quota limits: "
                             "aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus")
    r = run_cli(capsys, *BASE, "--gpu", "L4,T4")
    assert r.code == 0, r.err
    assert "L4 in us-central1: quota exceeded" in r.err and "trying T4 in us-central1" in r.err
    (job,) = vertex.jobs.values()
    assert job.job_spec.worker_pool_specs[0].machine_spec.accelerator_type.name == "NVIDIA_TESLA_T4"
    assert job.labels["ftcli_try"] == "2-of-2" and job.labels["ftcli_gpu"] == "t4"
    assert json.loads(r.out)["short_id"] == 1


def test_a_bucket_of_another_project_is_said_once_for_all_the_candidates(capsys, cloud_env, monkeypatch):
    # Each candidate tried staged again: the warning for a staging bucket of another project came once per GPU
    # tried, and its project and policy were asked for again each time.
    from tests.emulators.gcs import FaultyProxy

    gcs, vertex = cloud_env
    gcs.create_bucket("other-team", project="5678")
    monkeypatch.setenv("FTCLI_BUCKET", "gs://other-team")
    vertex.fail_next("CreateCustomJob", grpc.StatusCode.RESOURCE_EXHAUSTED,
                     message="The following quota metrics exceed quota limits: "
                             "aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus")
    with FaultyProxy(gcs.url) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        r = run_cli(capsys, *BASE, "--gpu", "L4,T4")
    assert r.code == 0 and "trying T4 in us-central1" in r.err and len(vertex.jobs) == 1, r.err
    warned = [x for x in r.err.splitlines() if x.startswith("warning: gs://other-team belongs to project number 5678")]
    assert len(warned) == 1, r.err
    asked = [q.path for q in proxy.requests if q.method == "GET"]
    assert asked.count("/storage/v1/b") == 1 and asked.count("/storage/v1/b/other-team/iam") == 1


def test_the_last_candidate_out_of_quota_is_the_error(capsys, cloud_env):
    gcs, vertex = cloud_env
    vertex.fail_next("CreateCustomJob", grpc.StatusCode.RESOURCE_EXHAUSTED, times=2, message="quota")
    r = run_cli(capsys, *BASE, "--gpu", "L4,T4")
    assert r.code == 1 and "quota exceeded" in r.err and not vertex.jobs


@pytest.fixture
def following(cloud_env, cloud_logging, monkeypatch):
    gcs, vertex = cloud_env
    monkeypatch.setenv("FTCLI_LOGGING_ENDPOINT", cloud_logging.endpoint)
    monkeypatch.setenv("FTCLI_LOGS_INTERVAL", "0.1")
    monkeypatch.setattr(cloud_logging, "project", "test-project")
    return gcs, vertex


def test_a_job_without_machines_is_submitted_again_on_the_next_candidate(capsys, following):
    gcs, vertex = following
    vertex.next_scripts = [
        [("FAILED", "Resources are insufficient in region: us-central1. Please try a different region.")],
        ["RUNNING", "SUCCEEDED"],
    ]
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "L4,T4")
    assert r.code == 0, r.err + r.out
    assert "could not get its machines: Resources are insufficient in region: us-central1" in r.err
    assert "trying T4 in us-central1" in r.err
    first, second = created_jobs(vertex)
    assert first.labels["ftcli_gpu"] == "l4" and second.labels["ftcli_gpu"] == "t4"
    assert "submitted job #1" in r.out and "submitted job #2" in r.out


def test_a_resubmission_on_the_next_candidate_does_not_warn_again(capsys, following, monkeypatch):
    gcs, vertex = following
    gcs.create_bucket("other-team", project="5678")
    monkeypatch.setenv("FTCLI_BUCKET", "gs://other-team")
    vertex.next_scripts = [[("FAILED", "Resources are insufficient in region: us-central1.")], ["RUNNING", "SUCCEEDED"]]
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "L4,T4")
    assert r.code == 0 and len(created_jobs(vertex)) == 2, r.err + r.out
    assert sum(x.startswith("warning: gs://other-team belongs to project") for x in r.err.splitlines()) == 1, r.err


def test_a_trainer_failure_is_not_retried(capsys, following):
    gcs, vertex = following
    vertex.next_scripts = [[("FAILED", "The replica workerpool0-0 exited with a non-zero status of 1.")]]
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "L4,T4")
    assert r.code == 3 and len(created_jobs(vertex)) == 1  # the next GPU would fail the same way


@pytest.mark.parametrize("flag,value", [("--gpu", "L4,T4"), ("--region", "us-central1,europe-west4")])
def test_tune_says_candidates_are_for_train(capsys, cloud_env, flag, value):
    r = run_cli(capsys, "tune", "--task", "cola", "--dry-run", *(["--gpu", "T4"] if flag != "--gpu" else []),
                flag, value)
    assert r.code == 2 and f"{flag} {value}: ftcli tune takes one" in r.err


def test_a_gpu_that_cannot_run_varlen_attention_goes_without_it(capsys, monkeypatch, tmp_path):
    """--varlen-attention is a speed switch: of several candidates, one whose GPU cannot run it (T4: compute
    capability 7.5) keeps its place in the order and runs without it, with a note."""
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "L4,T4", "--varlen-attention", "--project", "my-project",
                "--bucket", "gs://my-bucket", "--dry-run")
    assert r.code == 0, r.err
    assert ("note: T4 goes without --varlen-attention (torch's flash kernel needs compute capability 8.0 or later, "
            "and this GPU has 7.5)") in r.err
    jobs = json.loads(r.out)
    args = [j["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"] for j in jobs]
    assert "--varlen-attention" in args[0] and "--varlen-attention" not in args[1]
    assert [a for a in args[0] if a != "--varlen-attention"] == args[1]  # nothing else differs


def test_varlen_attention_that_no_candidate_can_run_is_refused(capsys, cloud_env):
    gcs, vertex = cloud_env
    r = run_cli(capsys, *BASE, "--gpu", "T4,V100", "--varlen-attention")
    assert r.code == 2 and "--varlen-attention would be left off in this job" in r.err
    assert vertex.requests == [] and gcs.list("ftcli-test") == []


def test_a_candidate_given_twice_is_tried_once(capsys, monkeypatch, tmp_path):
    # `--region us-central1,us-central1` was refused as "several regions", `--gpu L4,L4` planned two jobs.
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "L4,L4", "--region", "us-central1,us-central1",
                "--project", "my-project", "--bucket", "gs://my-bucket", "--dry-run")
    assert r.code == 0, r.err
    job = json.loads(r.out)
    assert job["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] == "NVIDIA_L4"
    assert "candidates" not in r.err


def test_local_data_is_read_once_for_all_candidates(capsys, monkeypatch, tmp_path):
    # Every candidate's plan read (and hashed) the local files again: a 1 GB CSV took 20 s more per candidate, and
    # the pre-flight's warnings were said once per candidate.
    from ftcli_trainer import data
    from tests.conftest import write_csv

    reads = []
    real = data.read_rows
    monkeypatch.setattr(data, "read_rows", lambda path, **kw: reads.append(path) or real(path, **kw))
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    rows = [(f"good {i}", "pos") for i in range(30)] + [(f"bad {i}", "neg") for i in range(30)] + [("odd", "rare")]
    train = write_csv(tmp_path / "rare.csv", ["text", "label"], rows)
    r = run_cli(capsys, "train", "--task", "csv", "--train-file", str(train), "--gpu", "L4,T4", "--region",
                "us-central1,europe-west4", "--project", "my-project", "--bucket", "gs://my-bucket-{region}",
                "--dry-run")
    assert r.code == 0, r.err
    assert reads == [str(train)]
    assert len([x for x in r.err.splitlines() if "too few to learn" in x]) == 1, r.err
    jobs = json.loads(r.out)
    assert len(jobs) == 4
    data_args = {a[a.index("--train-file") + 1].split("/ftcli/", 1)[1]
                 for a in (j["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"] for j in jobs)}
    assert len(data_args) == 1 and data_args.pop().startswith("data/")
