"""The Vertex emulator refuses what the real service refuses, over its gRPC protocol; and every job ftcli's dry run
builds for the issue's configurations is accepted by it."""

from __future__ import annotations

import copy
import json

import grpc
import pytest
from google.api_core import exceptions as gexc

from tests.cli.helpers import run_cli

PARENT = "projects/p/locations/us-central1"
IMAGE = "docker.io/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"


def pool(machine="n1-standard-8", accel="NVIDIA_TESLA_T4", count=1, **extra) -> dict:
    spec = {"machineSpec": {"machineType": machine}, "replicaCount": "1",
            "containerSpec": {"imageUri": IMAGE, "command": ["python", "-m", "ftcli_trainer.task"]}}
    if count:
        spec["machineSpec"].update(acceleratorType=accel, acceleratorCount=count)
    for key, value in extra.items():
        spec[key] = value
    return spec


def job(*pools, scheduling=None) -> dict:
    out = {"displayName": "x", "jobSpec": {"workerPoolSpecs": list(pools)}}
    if scheduling:
        out["jobSpec"]["scheduling"] = scheduling
    return out


def create(vertex, body: dict, parent: str = PARENT):
    from ftcli.gcp.vertex import to_proto

    with vertex.client() as client:
        return client.create_custom_job(parent=parent, custom_job=to_proto(body))


PREBUILT = {"executorImageUri": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest",
            "packageUris": ["gs://b/p.tar.gz"], "pythonModule": "ftcli_trainer.task"}


def _package_pool(image: str) -> dict:
    p = pool()
    del p["containerSpec"]
    p["pythonPackageSpec"] = {**PREBUILT, "executorImageUri": image}
    return p


REFUSED = [
    # the prebuilt image ftcli used: past its end of availability (2026-07-24)
    (job(_package_pool(PREBUILT["executorImageUri"])), "reached its end of availability on 2026-07-24"),
    # pythonPackageSpec takes only the prebuilt list (the old `--gpu none` image, and any user image)
    (job(_package_pool("us-docker.pkg.dev/vertex-ai/training/pytorch-cpu.2-4.py310:latest")),
     "is not a prebuilt training container"),
    (job(_package_pool("docker.io/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime")), "not a prebuilt"),
    # GPUs the region does not train on
    (job(pool("g2-standard-8", "NVIDIA_L4")), None, "projects/p/locations/europe-west6"),
    (job(pool("a2-ultragpu-1g", "NVIDIA_A100_80GB")), None, "projects/p/locations/me-west1"),
    # boot disks
    (job(pool("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8, diskSpec={"bootDiskType": "pd-ssd"}),
         scheduling={"strategy": "SPOT"}), "boots only from hyperdisk-balanced"),
    (job(pool("g2-standard-8", "NVIDIA_L4", diskSpec={"bootDiskType": "pd-standard"})), "pd-standard"),
    (job(pool(diskSpec={"bootDiskType": "hyperdisk-balanced"})), "does not support hyperdisk-balanced"),
    (job(pool(diskSpec={"bootDiskSizeGb": 50})), "outside [100, 64000]"),
    # provisioning
    (job(pool("a3-highgpu-1g", "NVIDIA_H100_80GB")), "only be provisioned as Spot or Flex-start"),
    (job(pool("a4-highgpu-8g", "NVIDIA_B200", 8, diskSpec={"bootDiskType": "hyperdisk-balanced"})),
     "needs a reservation, Spot or Flex-start"),
    (job(pool("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", 8), scheduling={"strategy": "FLEX_START"}),
     "Flex-start does not offer NVIDIA_H100_MEGA_80GB"),
    (job(pool("g2-standard-8", "NVIDIA_L4"), scheduling={"strategy": "FLEX_START", "timeout": f"{8 * 86400}s"}),
     "7 days or less"),
    (job(pool("a2-highgpu-8g", "NVIDIA_TESLA_A100", 8), pool("a2-highgpu-8g", "NVIDIA_TESLA_A100", 8),
         {"machineSpec": {"machineType": "n1-highcpu-16"}, "replicaCount": "2",
          "containerSpec": {"imageUri": "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"}},
         scheduling={"strategy": "FLEX_START"}), "same machine configuration"),
]


@pytest.mark.parametrize("case", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_refused_like_vertex(vertex, case):
    body, message, *parent = case
    with pytest.raises(gexc.InvalidArgument) as info:
        create(vertex, body, *parent)
    if message:
        assert message in str(info.value)
    else:
        assert "is not supported for custom training in" in str(info.value)
    assert vertex.jobs == {}


def test_accepted_variants(vertex):
    create(vertex, job(pool("a3-highgpu-1g", "NVIDIA_H100_80GB"), scheduling={"strategy": "SPOT"}))
    reserved = pool("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8, diskSpec={"bootDiskType": "hyperdisk-balanced"})
    reserved["machineSpec"]["reservationAffinity"] = {"reservationAffinityType": "ANY_RESERVATION"}
    create(vertex, job(reserved))
    assert len(vertex.jobs) == 2


# --- every configuration of the issue, from `ftcli train --dry-run` to the strict emulator ----------------------

CONFIGS = {
    "T4": ["--gpu", "T4"],
    "L4": ["--gpu", "L4"],
    "A100x8-2-replicas-2-reduction-servers": ["--gpu", "A100x8", "--replicas", "2", "--reduction-server", "2"],
    "H100x8": ["--gpu", "H100x8"],
    "H200-spot": ["--gpu", "H200", "--spot"],
    "H200-reservation": ["--gpu", "H200", "--reservation", "projects/p/zones/us-central1-b/reservations/r"],
    "B200-flex-start": ["--gpu", "B200", "--flex-start", "--max-wait", "4h"],
    "H100-flex-start": ["--gpu", "H100", "--flex-start"],
    "cpu": ["--gpu", "none"],
}


@pytest.mark.parametrize("name", CONFIGS)
def test_dry_runs_are_accepted_by_the_strict_emulator(name, capsys, monkeypatch, tmp_path, vertex):
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("FTCLI_CONFIG", str(tmp_path / "config.toml"))
    r = run_cli(capsys, "train", "--task", "imdb", "--project", "my-project", "--bucket", "gs://my-bucket/x",
                "--region", "us-central1", "--dry-run", *CONFIGS[name])
    assert r.code == 0, r.err
    body = json.loads(r.out)
    created = create(vertex, copy.deepcopy(body))
    assert created.display_name == body["displayName"]


def test_dry_run_refuses_a_gpu_the_region_does_not_train_on(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    r = run_cli(capsys, "train", "--task", "imdb", "--project", "my-project", "--bucket", "gs://my-bucket/x",
                "--region", "europe-west2", "--gpu", "A100", "--dry-run")
    assert r.code == 2
    assert "europe-west2 does not offer A100 GPUs for training: try --region europe-west4" in r.err
    assert r.out == "" and "Traceback" not in r.err


def test_status_codes_are_grpc_invalid_argument(vertex):
    from ftcli.gcp.vertex import to_proto

    channel = grpc.insecure_channel(vertex.address)
    from google.cloud.aiplatform_v1.types import job_service

    stub = channel.unary_unary("/google.cloud.aiplatform.v1.JobService/CreateCustomJob",
                               request_serializer=job_service.CreateCustomJobRequest.serialize,
                               response_deserializer=lambda b: b)
    request = job_service.CreateCustomJobRequest(parent=PARENT, custom_job=to_proto(job(_package_pool(
        PREBUILT["executorImageUri"]))))
    with pytest.raises(grpc.RpcError) as info:
        stub(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    channel.close()
