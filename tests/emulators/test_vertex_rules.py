"""The Vertex emulator refuses what the real service refuses, over its gRPC protocol; and every job ftcli's dry run
builds for the issue's configurations is accepted by it."""

from __future__ import annotations

import copy
import datetime as dt
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


def _container_pool(image: str) -> dict:
    p = pool()
    p["containerSpec"]["imageUri"] = image
    return p


def _reserved(p: dict, name: str) -> dict:
    p["machineSpec"]["reservationAffinity"] = {"reservationAffinityType": "SPECIFIC_RESERVATION",
                                               "key": "compute.googleapis.com/reservation-name", "values": [name]}
    return p


REFUSED = [
    # the prebuilt image ftcli used: past its end of availability (2026-07-24)
    (job(_package_pool(PREBUILT["executorImageUri"])), "reached its end of availability on 2026-07-24"),
    # pythonPackageSpec takes only the prebuilt list (the old `--gpu none` image, and any user image)
    (job(_package_pool("us-docker.pkg.dev/vertex-ai/training/pytorch-cpu.2-4.py310:latest")),
     "is not a prebuilt training container"),
    (job(_package_pool("docker.io/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime")), "not a prebuilt"),
    # the same images past their end of availability named as a custom container (`--image`): they were accepted
    (job(_container_pool(PREBUILT["executorImageUri"])), "reached its end of availability on 2026-07-24"),
    (job(_container_pool("europe-docker.pkg.dev/vertex-ai/training/pytorch-xla.2-1.py310")),
     "reached its end of availability on 2025-10-04"),
    # the page's TPU and older PyTorch images (cp310, or no Python in the name): they were accepted
    (job(_container_pool("us-docker.pkg.dev/vertex-ai/training/pytorch-tpu.2-2.cp310:latest")),
     "reached its end of availability on 2025-11-06"),
    (job(_container_pool("asia-docker.pkg.dev/vertex-ai/training/pytorch-gpu.1-13:latest")),
     "reached its end of availability on 2024-12-08"),
    (job(_package_pool("us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-0.py310:latest")),
     "reached its end of availability on 2025-03-15"),
    # GPUs the region does not train on
    (job(pool("g2-standard-8", "NVIDIA_L4")), None, "projects/p/locations/europe-west6"),
    (job(pool("a2-ultragpu-1g", "NVIDIA_A100_80GB")), None, "projects/p/locations/me-west1"),
    (job(pool("g4-standard-48", "NVIDIA_RTX_PRO_6000", diskSpec={"bootDiskType": "hyperdisk-balanced"})), None,
     "projects/p/locations/europe-west1"),
    # boot disks
    (job(pool("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8, diskSpec={"bootDiskType": "pd-ssd"}),
         scheduling={"strategy": "SPOT"}), "boots only from hyperdisk-balanced"),
    (job(pool("g2-standard-8", "NVIDIA_L4", diskSpec={"bootDiskType": "pd-standard"})), "pd-standard"),
    # G4 takes no Persistent Disk, and Vertex's default boot disk there is pd-ssd: it must be named
    (job(pool("g4-standard-96", "NVIDIA_RTX_PRO_6000", 2)),
     "g4-standard-96 boots only from hyperdisk-balanced, not pd-ssd (the default)"),
    (job(pool("g4-standard-48", "NVIDIA_RTX_PRO_6000", diskSpec={"bootDiskType": "pd-ssd"})),
     "g4-standard-48 boots only from hyperdisk-balanced, not pd-ssd"),
    (job(pool("n4-standard-8", count=0)), "n4-standard-8 boots only from hyperdisk-balanced, not pd-ssd (the default)"),
    (job(pool(diskSpec={"bootDiskType": "hyperdisk-balanced"})), "does not support hyperdisk-balanced"),
    (job(pool(diskSpec={"bootDiskSizeGb": 50})), "outside [100, 64000]"),
    # provisioning
    (job(pool("a3-highgpu-1g", "NVIDIA_H100_80GB")), "only be provisioned as Spot or Flex-start"),
    (job(pool("a4-highgpu-8g", "NVIDIA_B200", 8, diskSpec={"bootDiskType": "hyperdisk-balanced"})),
     "needs a reservation, Spot or Flex-start"),
    (job(pool("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", 8), scheduling={"strategy": "FLEX_START"}),
     "Flex-start does not offer NVIDIA_H100_MEGA_80GB"),
    (job(pool("g4-standard-48", "NVIDIA_RTX_PRO_6000", diskSpec={"bootDiskType": "hyperdisk-balanced"}),
         scheduling={"strategy": "FLEX_START"}), "Flex-start does not offer NVIDIA_RTX_PRO_6000"),
    (job(pool("g2-standard-8", "NVIDIA_L4"), scheduling={"strategy": "FLEX_START", "timeout": f"{8 * 86400}s"}),
     "7 days or less"),
    (job(pool("a2-highgpu-8g", "NVIDIA_TESLA_A100", 8), pool("a2-highgpu-8g", "NVIDIA_TESLA_A100", 8),
         {"machineSpec": {"machineType": "n1-highcpu-16"}, "replicaCount": "2",
          "containerSpec": {"imageUri": "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"}},
         scheduling={"strategy": "FLEX_START"}), "same machine configuration"),
    # GPU counts per machine (configure-compute's table): cells it lacks
    (job(pool("n1-standard-8", "NVIDIA_TESLA_T4", 3)),
     "Accelerator count 3 is not valid for accelerator NVIDIA_TESLA_T4 on machine type n1-standard-8; "
     "valid counts: 1, 2, 4."),
    (job(pool("a2-highgpu-1g", "NVIDIA_TESLA_A100", 8)),
     "Accelerator count 8 is not valid for accelerator NVIDIA_TESLA_A100 on machine type a2-highgpu-1g; "
     "valid counts: 1."),
    (job(pool("n1-standard-32", "NVIDIA_TESLA_T4", 1)), "valid counts: 2, 4."),
    (job(pool("n1-standard-64", "NVIDIA_TESLA_P100", 4)),
     'Accelerator "NVIDIA_TESLA_P100" is not supported for machine type "n1-standard-64".'),
    (job(pool("g2-standard-8", "NVIDIA_TESLA_T4", 1)),
     'Accelerator "NVIDIA_TESLA_T4" is not supported for machine type "g2-standard-8".'),
    (job(pool("g4-standard-48", "NVIDIA_RTX_PRO_6000", 2, diskSpec={"bootDiskType": "hyperdisk-balanced"})),
     "valid counts: 1."),
    (job(pool("g4-standard-24", "NVIDIA_RTX_PRO_6000", 1, diskSpec={"bootDiskType": "hyperdisk-balanced"})),
     'Machine type "g4-standard-24" is not supported'),  # a half GPU: on Compute Engine, not on Vertex's list
    # machine types outside configure-compute's list
    (job(pool("e2-highcpu-8", count=0)),
     'Machine type "e2-highcpu-8" is not supported for custom training (workerPoolSpecs[0]).'),
    (job(pool("n1-standard-2", count=0)), 'Machine type "n1-standard-2" is not supported'),
    (job(pool("n2d-standard-8", count=0)), 'Machine type "n2d-standard-8" is not supported'),
    # an accelerator-optimized machine without its GPUs (configure-compute marks them "must be used with certain GPUs")
    (job(pool("a2-highgpu-1g", count=0)), 'Machine type "a2-highgpu-1g" must be used with its GPUs'),
    (job(pool("g2-standard-8", "NVIDIA_L4", 0)), 'Machine type "g2-standard-8" must be used with its GPUs'),
    # pd-standard: A3 High and A3 Mega list no Standard Persistent Disk
    (job(pool("a3-highgpu-8g", "NVIDIA_H100_80GB", 8, diskSpec={"bootDiskType": "pd-standard"})),
     "a3-highgpu-8g does not support pd-standard boot disks"),
    (job(pool("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", 8, diskSpec={"bootDiskType": "pd-standard"})),
     "a3-megagpu-8g does not support pd-standard boot disks"),
    # reservations: a full reservation (or block) name, in a zone of the job's region
    (job(_reserved(pool("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8), "h200-pool")),
     "it must be the full resource name of the reservation or reservation block"),
    (job(_reserved(pool("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8),
                   "projects/p/zones/europe-west4-a/reservations/r/reservationBlocks/b")),
     "Reservation zone europe-west4-a is not in the job's region us-central1"),
    # Spot VMs consume no reservation (Compute Engine "Consume reservations"): the pair was accepted
    (job(_reserved(pool("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8), "projects/p/zones/us-central1-b/reservations/r"),
         scheduling={"strategy": "SPOT"}), "Spot VMs cannot consume a reservation"),
    # display name and labels
    ({**job(pool()), "displayName": "x" * 129},
     "CustomJob.display_name is too long: 129 characters, at most 128 allowed."),
    ({**job(pool()), "labels": {"Team": "a"}}, "Invalid label key 'Team'"),
    ({**job(pool()), "labels": {"team": "A"}}, "Invalid label value 'A' for key 'team'"),
    ({**job(pool()), "labels": {"team": "a" * 65}}, "Invalid label value"),
    ({**job(pool()), "labels": {"1team": "a"}}, "Invalid label key '1team'"),
    ({**job(pool()), "labels": {f"k{i}": "v" for i in range(65)}}, "has 65 labels; at most 64 are allowed."),
    # the first pool is the one primary replica
    (job({**pool(), "replicaCount": "2"}),
     "workerPoolSpecs[0] is the primary replica: its replicaCount must be 1, not 2"),
    # only the later worker pools may be skipped with an empty spec
    (job({}, pool()), "workerPoolSpecs[0] (the primary replica) cannot be empty"),
    # environment variables: at most 100 per container, each name a C identifier
    (job(pool(containerSpec={**pool()["containerSpec"], "env": [{"name": f"V{i}", "value": "1"} for i in range(101)]})),
     "workerPoolSpecs[0] has 101 environment variables; the maximum is 100."),
    (job(pool(containerSpec={**pool()["containerSpec"], "env": [{"name": "NCCL-DEBUG", "value": "INFO"}]})),
     "Invalid environment variable name 'NCCL-DEBUG' (workerPoolSpecs[0]): it must be a valid C identifier."),
    (job(pool(containerSpec={**pool()["containerSpec"], "env": [{"name": "1X", "value": "1"}]})),
     "Invalid environment variable name '1X'"),
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


def test_a_hundred_environment_variables_are_accepted(vertex):
    env = [{"name": f"_V{i}", "value": ""} for i in range(100)]
    created = create(vertex, job(pool(containerSpec={**pool()["containerSpec"], "env": env})))
    assert len(created.job_spec.worker_pool_specs[0].container_spec.env) == 100


def tuning(parameters: list[dict], metrics: list[dict] | None = None, **extra) -> dict:
    return {"displayName": "t", "studySpec": {"metrics": metrics or [{"metricId": "eval_accuracy", "goal": "MAXIMIZE"}],
                                              "parameters": parameters},
            "maxTrialCount": 4, "parallelTrialCount": 1, "trialJobSpec": job(pool())["jobSpec"], **extra}


LR = {"parameterId": "learning_rate", "doubleValueSpec": {"minValue": 1e-5, "maxValue": 1e-4},
      "scaleType": "UNIT_LOG_SCALE"}
TUNING_REFUSED = [
    (tuning([LR], labels={"Team": "a"}), "Invalid label key 'Team'"),
    (tuning([LR], [{"metricId": "eval accuracy", "goal": "MAXIMIZE"}]), "Invalid metric_id 'eval accuracy'"),
    (tuning([LR], [{"metricId": "eval_accuracy"}]), "MetricSpec 'eval_accuracy' needs a goal"),
    (tuning([LR, LR]), "parameter_id 'learning_rate' is not unique."),
    (tuning([{"parameterId": "lr", "doubleValueSpec": {"minValue": 0.0, "maxValue": 1e-4},
              "scaleType": "UNIT_LOG_SCALE"}]), "UNIT_LOG_SCALE needs a strictly positive feasible space"),
    (tuning([{"parameterId": "lr", "doubleValueSpec": {"minValue": 1e-3, "maxValue": 1e-4}}]),
     "min_value 0.001 is greater than max_value 0.0001"),
    (tuning([{"parameterId": "wd", "discreteValueSpec": {"values": [0.1, 0.01]}}]), "increasing order"),
    (tuning([{"parameterId": "wd", "discreteValueSpec": {"values": [1e-11, 5e-11]}}]), "at least 1e-10 apart"),
    (tuning([{"parameterId": "bs", "discreteValueSpec": {"values": [float(v) for v in range(1001)]}}]),
     "1001 discrete values; at most 1000 allowed."),
    (tuning([{"parameterId": "model", "categoricalValueSpec": {}}]), "categorical_value_spec.values is required"),
    (tuning([{"parameterId": "lr"}]), "ParameterSpec 'lr' has no value spec."),
    # the trial job spec is a CustomJob's: its rules hold too
    (tuning([LR], trialJobSpec=job(pool("n1-standard-8", "NVIDIA_TESLA_T4", 3))["jobSpec"]), "valid counts: 1, 2, 4."),
]


@pytest.mark.parametrize("case", TUNING_REFUSED, ids=[str(i) for i in range(len(TUNING_REFUSED))])
def test_tuning_jobs_refused_like_vertex(vertex, case):
    from ftcli.gcp.vertex import tuning_to_proto

    body, message = case
    with vertex.client() as client, pytest.raises(gexc.InvalidArgument) as info:
        client.create_hyperparameter_tuning_job(parent=PARENT, hyperparameter_tuning_job=tuning_to_proto(body))
    assert message in str(info.value)
    assert vertex.tuning_jobs == {}


def test_tuning_job_edges_are_accepted(vertex):
    from ftcli.gcp.vertex import tuning_to_proto

    params = [{"parameterId": "wd", "discreteValueSpec": {"values": [0.0, 1e-10, 1.0]}},
              {"parameterId": "epochs", "integerValueSpec": {"minValue": "2", "maxValue": "2"}},
              {"parameterId": "model", "categoricalValueSpec": {"values": ["a", "b"]}}]
    with vertex.client() as client:
        created = client.create_hyperparameter_tuning_job(
            parent=PARENT, hyperparameter_tuning_job=tuning_to_proto(tuning(params, labels={"équipe": "r"})))
    assert [p.parameter_id for p in created.study_spec.parameters] == ["wd", "epochs", "model"]


def test_accepted_variants(vertex):
    create(vertex, job(pool("a3-highgpu-1g", "NVIDIA_H100_80GB"), scheduling={"strategy": "SPOT"}))
    reserved = pool("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8, diskSpec={"bootDiskType": "hyperdisk-balanced"})
    reserved["machineSpec"]["reservationAffinity"] = {"reservationAffinityType": "ANY_RESERVATION"}
    create(vertex, job(reserved))
    # Spot with ANY_RESERVATION: a Compute Engine VM's default affinity, which a Spot VM simply does not consume
    create(vertex, job(copy.deepcopy(reserved), scheduling={"strategy": "SPOT"}))
    # a specific reservation on demand
    create(vertex, job(_reserved(pool("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8),
                                 "projects/p/zones/us-central1-b/reservations/r")))
    assert len(vertex.jobs) == 4


def test_a_prebuilt_image_as_a_custom_container_is_refused_only_after_its_end_of_availability():
    from ftcli.gcp.vertex import to_proto
    from tests.emulators.vertex_rules import refusal

    body = to_proto(job(_container_pool(PREBUILT["executorImageUri"])))
    assert refusal(body, "us-central1", today=dt.date(2026, 7, 24)) is None
    assert refusal(body, "us-central1", today=dt.date(2026, 7, 25)) == (
        f"the prebuilt container {PREBUILT['executorImageUri']} reached its end of availability on 2026-07-24")
    # Vertex's Reduction Server image is not a framework image: never refused by date
    assert refusal(to_proto(job(_container_pool("us-docker.pkg.dev/vertex-ai-restricted/training/"
                                                 "reductionserver:latest"))), "us-central1") is None


# Cells of configure-compute's GPU table that the emulator once answered with gRPC UNKNOWN (it asked ftcli's
# resolve_gpu, which ignored the count): Vertex takes them.
@pytest.mark.parametrize(("machine", "accel", "count"), [
    ("n1-standard-32", "NVIDIA_TESLA_T4", 4), ("n1-standard-8", "NVIDIA_TESLA_V100", 2),
    ("n1-standard-8", "NVIDIA_TESLA_V100", 4), ("n1-standard-8", "NVIDIA_TESLA_V100", 8),
    ("n1-standard-8", "NVIDIA_TESLA_P100", 4), ("n1-standard-8", "NVIDIA_TESLA_P4", 4),
    ("n1-highcpu-64", "NVIDIA_TESLA_P100", 4), ("g2-standard-96", "NVIDIA_L4", 8),
])
def test_valid_gpu_cells_are_accepted(vertex, machine, accel, count):
    created = create(vertex, job(pool(machine, accel, count)))
    spec = created.job_spec.worker_pool_specs[0].machine_spec
    assert (spec.machine_type, spec.accelerator_type.name, spec.accelerator_count) == (machine, accel, count)


@pytest.mark.parametrize("machine", ["e2-highcpu-16", "n2-highmem-80", "c2-standard-30", "m1-ultramem-40",
                                     "n1-highmem-2"])
def test_documented_cpu_machines_are_accepted(vertex, machine):
    assert create(vertex, job(pool(machine, count=0))).job_spec.worker_pool_specs[0].machine_spec.machine_type == \
        machine


def test_unset_boot_disk_takes_the_machines_default(vertex):
    # "The default value is pd-ssd (hyperdisk-balanced is the default for a3-ultragpu-8g and a4-highgpu-8g)": an
    # A4 or A3 Ultra job without a diskSpec is accepted (it boots from Hyperdisk), not refused as pd-ssd.
    for machine, accel in (("a4-highgpu-8g", "NVIDIA_B200"), ("a3-ultragpu-8g", "NVIDIA_H200_141GB")):
        create(vertex, job(pool(machine, accel, 8), scheduling={"strategy": "SPOT"}))
    with pytest.raises(gexc.InvalidArgument, match="does not support hyperdisk-balanced"):
        create(vertex, job(pool("g2-standard-8", "NVIDIA_L4", diskSpec={"bootDiskType": "hyperdisk-balanced"})))
    assert len(vertex.jobs) == 2


def test_reservation_blocks_and_long_names_are_accepted(vertex):
    block = "projects/p/zones/us-central1-b/reservations/h200-pool/reservationBlocks/block-1"
    created = create(vertex, {**job(_reserved(pool("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8), block)),
                              "displayName": "é" * 128, "labels": {"team": "ü-1", "café": ""}})
    assert list(created.job_spec.worker_pool_specs[0].machine_spec.reservation_affinity.values) == [block]
    assert len(created.display_name) == 128


def test_emulator_tables_match_ftclis_catalog():
    """Two transcriptions of configure-compute (ftcli's catalog, the emulator's rows) must agree cell for cell."""
    from ftcli import catalog
    from tests.emulators import vertex_rules

    ftcli_cells = {(m, g.enum, n) for g in catalog._GPUS for n, ms in g.machines.items() for m in ms}
    emulator_cells = {(m, a, n) for m, row in vertex_rules.GPU_TABLE.items() for a, ns in row.items() for n in ns}
    assert ftcli_cells == emulator_cells
    assert set(catalog.CPU_MACHINE_TYPES) == vertex_rules.CPU_MACHINES


# --- every configuration of the issue, from `ftcli train --dry-run` to the strict emulator ----------------------

CONFIGS = {
    "T4": ["--gpu", "T4"],
    "L4": ["--gpu", "L4"],
    "A100x8-2-replicas-2-reduction-servers": ["--gpu", "A100x8", "--replicas", "2", "--reduction-server", "2"],
    "H100x8": ["--gpu", "H100x8"],
    "H200-spot": ["--gpu", "H200", "--spot"],
    "H200-reservation": ["--gpu", "H200", "--reservation", "projects/p/zones/us-central1-b/reservations/r"],
    "H200-reservation-block": ["--gpu", "H200", "--reservation",
                               "projects/p/zones/us-central1-b/reservations/r/reservationBlocks/b1"],
    "T4x4-n1-standard-32": ["--gpu", "T4x4", "--machine-type", "n1-standard-32"],
    "V100x2": ["--gpu", "V100x2"],
    "P100x4": ["--gpu", "P100x4"],
    "P4x4": ["--gpu", "P4x4"],
    "cpu-e2-highcpu-16": ["--gpu", "none", "--machine-type", "e2-highcpu-16"],
    "cpu-n4-highmem-32": ["--gpu", "none", "--machine-type", "n4-highmem-32"],
    "B200-flex-start": ["--gpu", "B200", "--flex-start", "--max-wait", "4h"],
    "RTX-PRO-6000": ["--gpu", "RTX-PRO-6000"],
    "RTX-PRO-6000x8-spot": ["--gpu", "RTX-PRO-6000x8", "--spot"],
    "H100-flex-start": ["--gpu", "H100", "--flex-start"],
    # maxWaitDuration 0: "waits indefinitely" (https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws,
    # read 2026-11-27)
    "L4-flex-start-wait-forever": ["--gpu", "L4", "--flex-start", "--max-wait", "0"],
    "international-labels-and-a-slash": ["--gpu", "L4", "--labels", "équipe=recherche,チーム=開発", "--display-name",
                                         "bert/mnli \\ 2"],
    "cpu": ["--gpu", "none"],
    "cpu-follow": ["--gpu", "none", "--follow"],  # --follow, the default, may be written out (--detach/--follow)
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
