"""What the real Vertex AI refuses at CreateCustomJob, so the emulator refuses it too (INVALID_ARGUMENT).

Each rule names the page it comes from (all read 2026-11-26). The region table is the one ftcli's pre-flight
uses (`ftcli.regions`, transcribed from the Locations page): the emulator's check is the net under every code
path that builds a job, not a second opinion on the table.
"""

from __future__ import annotations

import datetime as dt

from google.cloud.aiplatform_v1.types import custom_job

# "Prebuilt containers for custom training" (https://docs.cloud.google.com/vertex-ai/docs/training/pre-built-
# containers): pythonPackageSpec.executorImageUri "You must use an image from this list", with the `latest` tag;
# "Framework support policy": after the end-of-availability date "services might block the creation of new
# resources using these images". The newest PyTorch training images and their end of availability:
PREBUILT_PYTORCH = {
    "pytorch-gpu.2-4.py310": dt.date(2026, 7, 24), "pytorch-xla.2-4.py310": dt.date(2026, 7, 24),
    "pytorch-gpu.2-3.py310": dt.date(2026, 4, 24), "pytorch-xla.2-3.py310": dt.date(2026, 4, 24),
    "pytorch-gpu.2-2.py310": dt.date(2026, 1, 30), "pytorch-xla.2-2.py310": dt.date(2026, 10, 23),
    "pytorch-gpu.2-1.py310": dt.date(2025, 10, 4), "pytorch-xla.2-1.py310": dt.date(2025, 10, 4),
}
PREBUILT_PREFIXES = tuple(f"{m}-docker.pkg.dev/vertex-ai/training/" for m in ("us", "europe", "asia"))

# Boot disks: DiskSpec takes pd-ssd, pd-standard or hyperdisk-balanced, 100 to 64000 GB (DiskSpec reference; the
# size range is the SDK's check). Compute Engine "Accelerator-optimized machine family": A3 Ultra and A4 boot only
# from Hyperdisk Balanced; G2 has no pd-standard; A2 and G2 have no Hyperdisk Balanced; N1 takes no Hyperdisk.
DISK_TYPES = {"pd-ssd", "pd-standard", "hyperdisk-balanced"}
HYPERDISK_ONLY = ("a3-ultragpu", "a4-highgpu")
NO_HYPERDISK = ("a2-", "g2-", "n1-")
# Same page: a3-highgpu-1g/2g/4g only as Spot or Flex-start; A3 Ultra and A4 need a reservation, Spot or
# Flex-start.
SPOT_OR_FLEX = {"a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g"}
NEEDS_CAPACITY = {"a3-ultragpu-8g", "a4-highgpu-8g"}
# "Schedule training jobs based on resource availability" (DWS): L4, A100, H100, H200 or B200; timeout of
# 7 days or less; the same machine configuration for all worker pools; not with Compute Engine reservations.
FLEX_START_ACCELERATORS = {"NVIDIA_L4", "NVIDIA_TESLA_A100", "NVIDIA_A100_80GB", "NVIDIA_H100_80GB",
                           "NVIDIA_H200_141GB", "NVIDIA_B200"}
FLEX_START_MAX = dt.timedelta(days=7)

Strategy = custom_job.Scheduling.Strategy


def _pools(job: custom_job.CustomJob):
    return [(i, p) for i, p in enumerate(job.job_spec.worker_pool_specs) if p.machine_spec.machine_type]


def refusal(job: custom_job.CustomJob, location: str, today: dt.date | None = None) -> str | None:
    """Why Vertex would refuse `job` in `location`, or None."""
    from ftcli.catalog import resolve_gpu
    from ftcli.regions import TRAINING_GPUS

    today = today or dt.date.today()
    strategy = job.job_spec.scheduling.strategy
    if strategy == Strategy.FLEX_START:
        configs = {(p.machine_spec.machine_type, p.machine_spec.accelerator_type, p.machine_spec.accelerator_count)
                   for _, p in _pools(job)}
        if len(configs) > 1:
            return "Flex-start needs the same machine configuration in every worker pool"
        timeout = job.job_spec.scheduling.timeout
        if timeout and timeout > FLEX_START_MAX:
            return "Flex-start jobs have a timeout of 7 days or less"
    for i, pool in _pools(job):
        machine = pool.machine_spec.machine_type
        has_container = bool(pool.container_spec.image_uri)
        has_package = bool(pool.python_package_spec.executor_image_uri)
        if has_container == has_package:
            return f"workerPoolSpecs[{i}] needs exactly one of containerSpec and pythonPackageSpec"
        if has_package:
            uri = pool.python_package_spec.executor_image_uri
            image = next((uri[len(p):] for p in PREBUILT_PREFIXES if uri.startswith(p)), "").removesuffix(":latest")
            if image not in PREBUILT_PYTORCH or not uri.endswith(":latest"):
                return f"{uri} is not a prebuilt training container: pythonPackageSpec needs one from the list"
            if PREBUILT_PYTORCH[image] < today:
                return f"the prebuilt container {uri} reached its end of availability on {PREBUILT_PYTORCH[image]}"
        accel = pool.machine_spec.accelerator_type.name
        if pool.machine_spec.accelerator_count and accel != "ACCELERATOR_TYPE_UNSPECIFIED":
            gpu = resolve_gpu(accel, machine).gpu_name
            if gpu not in TRAINING_GPUS.get(location, frozenset()):
                return f"Accelerator {accel} is not supported for custom training in {location}"
        disk = pool.disk_spec.boot_disk_type or "pd-ssd"
        size = pool.disk_spec.boot_disk_size_gb or 100
        if disk not in DISK_TYPES:
            return f"boot disk type {disk!r} is not one of {sorted(DISK_TYPES)}"
        if not 100 <= size <= 64000:
            return f"boot disk size {size} GB is outside [100, 64000]"
        if machine.startswith(HYPERDISK_ONLY) and disk != "hyperdisk-balanced":
            return f"{machine} boots only from hyperdisk-balanced, not {disk}"
        if machine.startswith(NO_HYPERDISK) and disk == "hyperdisk-balanced":
            return f"{machine} does not support hyperdisk-balanced boot disks"
        if machine.startswith("g2-") and disk == "pd-standard":
            return f"{machine} does not support pd-standard boot disks"
        reserved = pool.machine_spec.reservation_affinity.reservation_affinity_type.name in (
            "ANY_RESERVATION", "SPECIFIC_RESERVATION")
        if machine in SPOT_OR_FLEX and strategy not in (Strategy.SPOT, Strategy.FLEX_START):
            return f"{machine} can only be provisioned as Spot or Flex-start"
        if machine in NEEDS_CAPACITY and not (reserved or strategy in (Strategy.SPOT, Strategy.FLEX_START)):
            return f"{machine} needs a reservation, Spot or Flex-start"
        if strategy == Strategy.FLEX_START:
            if reserved:
                return "Flex-start does not use Compute Engine reservations"
            if accel not in FLEX_START_ACCELERATORS:
                return f"Flex-start does not offer {accel}"
    return None
