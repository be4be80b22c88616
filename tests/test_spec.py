"""The pure CustomJob builder: whole-dict equality for realistic requests, rejections, and the proto round trip."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from ftcli.catalog import Hardware, resolve_gpu
from ftcli.errors import UsageError
from ftcli.spec import JobRequest, build_custom_job, to_proto

PACKAGE = "gs://my-bucket/ftcli/packages/ftcli_trainer-0.1.0+3f2a9c.tar.gz"
US_GPU_IMAGE = "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest"
DISK = {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100}


def request(**changes) -> JobRequest:
    base = JobRequest(
        project="my-project",
        region="us-central1",
        display_name="ftcli-imdb-20240501-120000",
        hardware=resolve_gpu("T4"),
        package_uri=PACKAGE,
        args=("--task", "imdb", "--epochs", "2"),
        base_output_dir="gs://my-bucket/ftcli/runs/imdb-20240501-120000",
    )
    return dataclasses.replace(base, **changes)


T4_SINGLE = request()
T4_SINGLE_JOB = {
    "displayName": "ftcli-imdb-20240501-120000",
    "jobSpec": {
        "workerPoolSpecs": [{
            "machineSpec": {"machineType": "n1-standard-8", "acceleratorType": "NVIDIA_TESLA_T4",
                            "acceleratorCount": 1},
            "replicaCount": "1",
            "pythonPackageSpec": {
                "executorImageUri": US_GPU_IMAGE,
                "packageUris": [PACKAGE],
                "pythonModule": "ftcli_trainer.task",
                "args": ["--task", "imdb", "--epochs", "2"],
            },
            "diskSpec": DISK,
        }],
        "scheduling": {"timeout": "86400s"},
        "baseOutputDirectory": {"outputUriPrefix": "gs://my-bucket/ftcli/runs/imdb-20240501-120000"},
    },
}

L4_SPOT = request(
    region="europe-west4",
    display_name="ftcli-financial",
    hardware=resolve_gpu("L4"),
    args=("--task", "financial", "--dataset-config", "sentences_50agree"),
    base_output_dir="gs://eu-bucket/runs/financial",
    spot=True,
    timeout_s=6 * 3600,
    service_account="trainer@my-project.iam.gserviceaccount.com",
    labels=(("ftcli-task", "financial"), ("team", "nlp")),
    env=(("WANDB_PROJECT", "financial"), ("TOKENIZERS_PARALLELISM", "false")),
)
L4_SPOT_JOB = {
    "displayName": "ftcli-financial",
    "labels": {"ftcli-task": "financial", "team": "nlp"},
    "jobSpec": {
        "workerPoolSpecs": [{
            "machineSpec": {"machineType": "g2-standard-8", "acceleratorType": "NVIDIA_L4", "acceleratorCount": 1},
            "replicaCount": "1",
            "pythonPackageSpec": {
                "executorImageUri": "europe-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest",
                "packageUris": [PACKAGE],
                "pythonModule": "ftcli_trainer.task",
                "args": ["--task", "financial", "--dataset-config", "sentences_50agree"],
                "env": [{"name": "WANDB_PROJECT", "value": "financial"},
                        {"name": "TOKENIZERS_PARALLELISM", "value": "false"}],
            },
            "diskSpec": DISK,
        }],
        "scheduling": {"timeout": "21600s", "strategy": "SPOT", "restartJobOnWorkerRestart": True},
        "serviceAccount": "trainer@my-project.iam.gserviceaccount.com",
        "baseOutputDirectory": {"outputUriPrefix": "gs://eu-bucket/runs/financial"},
    },
}

A100_REDUCTION = request(
    region="asia-southeast1",
    display_name="ftcli-mnli-bert-large",
    hardware=resolve_gpu("A100x8"),
    args=("--task", "mnli", "--model", "bert-large-uncased"),
    base_output_dir="gs://asia-bucket/runs/mnli",
    replicas=2,
    reduction_server=2,
)
_A100_WORKER = {
    "machineSpec": {"machineType": "a2-highgpu-8g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 8},
    "pythonPackageSpec": {
        "executorImageUri": "asia-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest",
        "packageUris": [PACKAGE],
        "pythonModule": "ftcli_trainer.task",
        "args": ["--task", "mnli", "--model", "bert-large-uncased"],
    },
    "diskSpec": DISK,
}
A100_REDUCTION_JOB = {
    "displayName": "ftcli-mnli-bert-large",
    "jobSpec": {
        "workerPoolSpecs": [
            {**_A100_WORKER, "replicaCount": "1"},
            {**_A100_WORKER, "replicaCount": "1"},
            {
                "machineSpec": {"machineType": "n1-highcpu-16"},
                "replicaCount": "2",
                "containerSpec": {"imageUri": "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"},
            },
        ],
        "scheduling": {"timeout": "86400s"},
        "baseOutputDirectory": {"outputUriPrefix": "gs://asia-bucket/runs/mnli"},
    },
}

CPU = request(hardware=resolve_gpu("none"), args=(), display_name="ftcli-sample")
CPU_JOB = {
    "displayName": "ftcli-sample",
    "jobSpec": {
        "workerPoolSpecs": [{
            "machineSpec": {"machineType": "n1-standard-8"},
            "replicaCount": "1",
            "pythonPackageSpec": {
                "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/pytorch-cpu.2-4.py310:latest",
                "packageUris": [PACKAGE],
                "pythonModule": "ftcli_trainer.task",
            },
            "diskSpec": DISK,
        }],
        "scheduling": {"timeout": "86400s"},
        "baseOutputDirectory": {"outputUriPrefix": "gs://my-bucket/ftcli/runs/imdb-20240501-120000"},
    },
}

CASES = {"t4-single": (T4_SINGLE, T4_SINGLE_JOB), "l4-spot": (L4_SPOT, L4_SPOT_JOB),
         "a100x8-reduction-server": (A100_REDUCTION, A100_REDUCTION_JOB), "cpu": (CPU, CPU_JOB)}


@pytest.mark.parametrize("case", CASES)
def test_build_custom_job(case):
    req, expected = CASES[case]
    assert build_custom_job(req) == expected


def test_replicas_without_reduction_server():
    job = build_custom_job(request(replicas=3))
    pools = job["jobSpec"]["workerPoolSpecs"]
    assert len(pools) == 2
    assert [p["replicaCount"] for p in pools] == ["1", "2"]
    assert pools[1] == {**pools[0], "replicaCount": "2"}
    pools[1]["machineSpec"]["machineType"] = "changed"  # the pools share no nested dict
    assert pools[0]["machineSpec"]["machineType"] == "n1-standard-8"


def test_explicit_image_and_module():
    job = build_custom_job(request(image="us-docker.pkg.dev/p/r/trainer:1", python_module="my.task"))
    spec = job["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]
    assert spec["executorImageUri"] == "us-docker.pkg.dev/p/r/trainer:1"
    assert spec["pythonModule"] == "my.task"


def test_parent():
    assert request().parent == "projects/my-project/locations/us-central1"


@pytest.mark.parametrize("labels", [
    (("a" * 63, "b" * 63),),
    (("k", ""),),
    (("ftcli_run-id", "2024-05-01_12"),),
    tuple((f"k{i}", "v") for i in range(64)),
])
def test_valid_labels(labels):
    assert build_custom_job(request(labels=labels))["labels"] == dict(labels)


REJECTED = [
    (dict(replicas=0), "--replicas must be 1 or more (got 0)"),
    (dict(reduction_server=-1), "--reduction-server must be 0 or more (got -1)"),
    (dict(reduction_server=1), "--reduction-server needs --replicas 2 or more"),
    (dict(reduction_server=1, hardware=resolve_gpu("A100x8")), "--reduction-server needs --replicas 2 or more"),
    (dict(reduction_server=1, replicas=2, hardware=resolve_gpu("none")), "--reduction-server needs GPU workers"),
    (dict(timeout_s=0), "the job timeout must be at least 1 second (got 0)"),
    (dict(package_uri="/tmp/ftcli_trainer.tar.gz"), "the trainer package must be a gs://BUCKET/OBJECT URI"),
    (dict(package_uri="gs://bucket-only"), "the trainer package must be a gs://BUCKET/OBJECT URI"),
    (dict(base_output_dir="./runs/x"), "the output directory must be a gs://BUCKET[/PATH] URI for a Vertex job, "
                                       "not './runs/x'"),
    (dict(base_output_dir="s3://bucket/x"), "the output directory must be a gs://"),
    (dict(display_name=""), "the job's display name is empty"),
    (dict(display_name="x" * 129), "the job's display name has 129 characters; Vertex allows at most 128"),
    (dict(service_account="trainer"), "service account 'trainer' is not an email"),
    (dict(labels=(("Team", "nlp"),)), "label key 'Team' is invalid: it must start with a lowercase letter"),
    (dict(labels=(("1team", "nlp"),)), "label key '1team' is invalid"),
    (dict(labels=(("a" * 64, "x"),)), "label key 'aaaa"),
    (dict(labels=(("team", "NLP"),)), "label value 'NLP' (of 'team') is invalid"),
    (dict(labels=(("team", "a.b"),)), "label value 'a.b' (of 'team') is invalid"),
    (dict(labels=(("team", "x" * 64),)), "label value 'xxxx"),
    (dict(labels=(("team", "a"), ("team", "b"))), "label 'team' is given more than once"),
    (dict(labels=tuple((f"k{i}", "v") for i in range(65))), "65 labels; Vertex allows at most 64"),
    (dict(env=(("1BAD", "x"),)), "environment variable name '1BAD' is invalid"),
    (dict(env=(("A", "1"), ("A", "2"))), "environment variable A is given more than once"),
]


@pytest.mark.parametrize(("changes", "message"), REJECTED)
def test_rejected(changes, message):
    with pytest.raises(UsageError) as info:
        build_custom_job(request(**changes))
    assert message in info.value.message
    assert "\n" not in info.value.message and not info.value.problems


def test_every_problem_reported_at_once():
    with pytest.raises(UsageError) as info:
        build_custom_job(request(replicas=0, package_uri="x.tar.gz", labels=(("Bad", "v"),)))
    assert info.value.message == "3 problems with the job:"
    assert len(info.value.problems) == 3


# --- the proto round trip: the dict's names and value forms are the real CustomJob's -------------------

@pytest.mark.parametrize("case", CASES)
def test_proto_round_trip(case):
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    job = build_custom_job(CASES[case][0])
    proto = to_proto(job)
    assert isinstance(proto, aiplatform_v1.CustomJob)
    assert json_format.MessageToDict(aiplatform_v1.CustomJob.pb(proto)) == job


def test_proto_fields():
    from google.cloud import aiplatform_v1

    proto = to_proto(build_custom_job(A100_REDUCTION))
    pools = proto.job_spec.worker_pool_specs
    assert pools[0].machine_spec.accelerator_type == aiplatform_v1.AcceleratorType.NVIDIA_TESLA_A100
    assert pools[0].machine_spec.accelerator_count == 8
    assert pools[2].replica_count == 2
    assert proto.job_spec.scheduling.timeout.total_seconds() == 86400
    spot = to_proto(build_custom_job(L4_SPOT)).job_spec.scheduling
    assert spot.strategy == aiplatform_v1.Scheduling.Strategy.SPOT and spot.restart_job_on_worker_restart


def test_empty_pool_round_trips():
    # The positional padding Vertex documents for skipped pools survives the conversion.
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    pools = build_custom_job(A100_REDUCTION)["jobSpec"]["workerPoolSpecs"]
    job = {"displayName": "x", "jobSpec": {"workerPoolSpecs": [pools[0], {}, pools[2]]}}
    assert json_format.MessageToDict(aiplatform_v1.CustomJob.pb(to_proto(job))) == job


def test_to_proto_rejects_unknown_fields():
    from google.protobuf.json_format import ParseError

    with pytest.raises(ParseError):
        to_proto({"displayName": "x", "jobSpec": {"workerPools": []}})


def test_pure_modules_import_no_google():
    # Compared with the modules present at start-up: google's namespace .pth files import `google.cloud` itself.
    code = ("import sys; before = set(sys.modules); import ftcli.catalog, ftcli.spec; "
            "bad = [m for m in set(sys.modules) - before if m.split('.')[0] in ('google', 'proto', 'grpc')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_hardware_is_what_resolve_gpu_returns():
    assert T4_SINGLE.hardware == Hardware("n1-standard-8", "NVIDIA_TESLA_T4", 1)
