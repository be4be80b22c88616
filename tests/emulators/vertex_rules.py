"""What the real Vertex AI refuses at CreateCustomJob, so the emulator refuses it too (INVALID_ARGUMENT).

Each rule names the page it comes from, with the date it was read. The region table is the one ftcli's pre-flight
uses (`ftcli.regions`, transcribed from the Locations page): the emulator's check is the net under every code
path that builds a job, not a second opinion on the table. The machine tables below are the emulator's own
transcription of the configure-compute page (tests/emulators/test_vertex_rules.py holds ftcli's catalog to them).
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata

from google.cloud.aiplatform_v1.types import custom_job

# "Prebuilt containers for custom training" (https://docs.cloud.google.com/vertex-ai/docs/training/pre-built-
# containers, read 2026-11-26): pythonPackageSpec.executorImageUri "You must use an image from this list", with the
# `latest` tag;
# "Framework support policy": after the end-of-availability date "services might block the creation of new
# resources using these images" ("Framework support policy",
# https://docs.cloud.google.com/vertex-ai/docs/framework-support-policy, read 2026-11-26). The newest PyTorch
# training images and their end of availability ("Supported frameworks list",
# https://docs.cloud.google.com/vertex-ai/docs/supported-frameworks-list, read 2026-11-26):
PREBUILT_PYTORCH = {
    "pytorch-gpu.2-4.py310": dt.date(2026, 7, 24), "pytorch-xla.2-4.py310": dt.date(2026, 7, 24),
    "pytorch-gpu.2-3.py310": dt.date(2026, 4, 24), "pytorch-xla.2-3.py310": dt.date(2026, 4, 24),
    "pytorch-gpu.2-2.py310": dt.date(2026, 1, 30), "pytorch-xla.2-2.py310": dt.date(2026, 10, 23),
    "pytorch-gpu.2-1.py310": dt.date(2025, 10, 4), "pytorch-xla.2-1.py310": dt.date(2025, 10, 4),
    # The rest of the page's PyTorch table (the same page as served at https://docs.cloud.google.com/gemini-enterprise-
    # agent-platform/machine-learning/training/pre-built-containers, read 2026-11-29): the TPU images (named cp310, or
    # with no Python) and the older ones. A containerSpec job on one of them was accepted here.
    "pytorch-tpu.2-2.cp310": dt.date(2025, 11, 6), "pytorch-tpu.2-1.cp310": dt.date(2025, 10, 23),
    "pytorch-gpu.2-0.py310": dt.date(2025, 3, 15), "pytorch-xla.2-0.py310": dt.date(2025, 3, 15),
    "pytorch-tpu.2-0": dt.date(2025, 5, 15),
    "pytorch-gpu.1-13.py310": dt.date(2025, 5, 15), "pytorch-gpu.1-13": dt.date(2024, 12, 8),
    "pytorch-gpu.1-12.py310": dt.date(2025, 5, 15), "pytorch-gpu.1-12": dt.date(2024, 9, 1),
    **{f"pytorch-{kind}.1-{minor}": dt.date(2024, 9, 1) for kind in ("gpu", "xla") for minor in (9, 10, 11)},
}
PREBUILT_PREFIXES = tuple(f"{m}-docker.pkg.dev/vertex-ai/training/" for m in ("us", "europe", "asia"))

CONFIGURE_COMPUTE = ("https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/training/"
                     "configure-compute")  # formerly https://cloud.google.com/vertex-ai/docs/training/configure-compute

# Machine types without a GPU: "you must specify one of the following machine types in the machineSpec.machineType
# field" (CONFIGURE_COMPUTE, "Machine types", read 2026-11-27 in the stored copy titled "Configure compute resources
# for Gemini Enterprise Agent Platform serverless training"): the entries without the page's "*" ("must be used with
# certain GPUs or TPUs"). Its a2/a3/a4/g2/g4 machines are in GPU_MACHINES; its a4x and TPU machines are not here
# (ftcli sends none of them).
CPU_MACHINES = frozenset(
    [f"n4-{kind}-{n}" for kind in ("standard", "highmem", "highcpu") for n in (2, 4, 8, 16, 32, 48, 64, 80)] +
    [f"e2-standard-{n}" for n in (4, 8, 16, 32)] + [f"e2-highmem-{n}" for n in (2, 4, 8, 16)]
    + [f"e2-highcpu-{n}" for n in (16, 32)]
    + [f"n2-standard-{n}" for n in (4, 8, 16, 32, 48, 64, 80)]
    + [f"n2-highmem-{n}" for n in (2, 4, 8, 16, 32, 48, 64, 80)]
    + [f"n2-highcpu-{n}" for n in (16, 32, 48, 64, 80)]
    + [f"n1-standard-{n}" for n in (4, 8, 16, 32, 64, 96)] + [f"n1-highmem-{n}" for n in (2, 4, 8, 16, 32, 64, 96)]
    + [f"n1-highcpu-{n}" for n in (16, 32, 64, 96)]
    + [f"c2-standard-{n}" for n in (4, 8, 16, 30, 60)]
    + ["m1-ultramem-40", "m1-ultramem-80", "m1-ultramem-160", "m1-megamem-96"])

# GPUs per machine: CONFIGURE_COMPUTE's table "Valid numbers of GPUs for each machine type" (read 2026-11-27), one
# row per machine type as the page has it: accelerator → the counts that machine takes ("you can use 2 or 4
# NVIDIA_TESLA_T4 GPUs on a VM, but not 3"). A cell not here is refused.
_ALL_N1 = {"NVIDIA_TESLA_T4": (1, 2, 4), "NVIDIA_TESLA_P4": (1, 2, 4), "NVIDIA_TESLA_P100": (1, 2, 4),
           "NVIDIA_TESLA_V100": (1, 2, 4, 8)}
_N1_16 = {"NVIDIA_TESLA_T4": (1, 2, 4), "NVIDIA_TESLA_P4": (1, 2, 4), "NVIDIA_TESLA_P100": (1, 2, 4),
          "NVIDIA_TESLA_V100": (2, 4, 8)}
_N1_32 = {"NVIDIA_TESLA_T4": (2, 4), "NVIDIA_TESLA_P4": (2, 4), "NVIDIA_TESLA_P100": (2, 4),
          "NVIDIA_TESLA_V100": (4, 8)}
_N1_64 = {"NVIDIA_TESLA_T4": (4,), "NVIDIA_TESLA_P4": (4,), "NVIDIA_TESLA_V100": (8,)}
GPU_TABLE: dict[str, dict[str, tuple[int, ...]]] = {
    "n1-standard-4": _ALL_N1, "n1-standard-8": _ALL_N1, "n1-standard-16": _N1_16, "n1-standard-32": _N1_32,
    "n1-standard-64": _N1_64, "n1-standard-96": _N1_64,
    "n1-highmem-2": _ALL_N1, "n1-highmem-4": _ALL_N1, "n1-highmem-8": _ALL_N1, "n1-highmem-16": _N1_16,
    "n1-highmem-32": _N1_32, "n1-highmem-64": _N1_64, "n1-highmem-96": _N1_64,
    "n1-highcpu-16": _N1_16, "n1-highcpu-32": _N1_32, "n1-highcpu-64": {**_N1_64, "NVIDIA_TESLA_P100": (4,)},
    "n1-highcpu-96": _N1_64,
    **{f"a2-highgpu-{n}g": {"NVIDIA_TESLA_A100": (n,)} for n in (1, 2, 4, 8)},
    "a2-megagpu-16g": {"NVIDIA_TESLA_A100": (16,)},
    **{f"a2-ultragpu-{n}g": {"NVIDIA_A100_80GB": (n,)} for n in (1, 2, 4, 8)},
    **{f"a3-highgpu-{n}g": {"NVIDIA_H100_80GB": (n,)} for n in (1, 2, 4, 8)},
    "a3-megagpu-8g": {"NVIDIA_H100_MEGA_80GB": (8,)},
    "a3-ultragpu-8g": {"NVIDIA_H200_141GB": (8,)},
    "a4-highgpu-8g": {"NVIDIA_B200": (8,)},
    **{f"g2-standard-{n}": {"NVIDIA_L4": (1,)} for n in (4, 8, 12, 16, 32)},
    "g2-standard-24": {"NVIDIA_L4": (2,)}, "g2-standard-48": {"NVIDIA_L4": (4,)}, "g2-standard-96": {"NVIDIA_L4": (8,)},
    "g4-standard-48": {"NVIDIA_RTX_PRO_6000": (1,)}, "g4-standard-96": {"NVIDIA_RTX_PRO_6000": (2,)},
    "g4-standard-192": {"NVIDIA_RTX_PRO_6000": (4,)}, "g4-standard-384": {"NVIDIA_RTX_PRO_6000": (8,)},
}
GPU_MACHINES = frozenset(m for m in GPU_TABLE if not m.startswith("n1-"))
MACHINES = CPU_MACHINES | GPU_MACHINES

# Boot disks: DiskSpec takes pd-ssd, pd-standard or hyperdisk-balanced, 100 to 64000 GB (DiskSpec reference,
# https://docs.cloud.google.com/vertex-ai/docs/reference/rest/v1/DiskSpec, read 2026-11-26; the size range is the
# SDK's check). Unset, it is "pd-ssd (hyperdisk-balanced is the default for a3-ultragpu-8g and a4-highgpu-8g)"
# (CONFIGURE_COMPUTE, "Boot disk options", read 2026-11-27; DiskSpec says "for A3U machines" only). Compute Engine
# "Accelerator-optimized machine family" (https://docs.cloud.google.com/compute/docs/accelerator-optimized-machines,
# read 2026-11-26): A3 Ultra and A4 boot only from Hyperdisk Balanced; G2, A3 High and A3 Mega list no Standard
# Persistent Disk (pd-standard) among their disk types; A2 and G2 have no Hyperdisk Balanced; N1 takes no Hyperdisk.
# G4 takes no Persistent Disk and boots only from Hyperdisk Balanced (same page, "Supported disk types for G4
# instances", read 2026-11-27), yet Vertex's documented default is pd-ssd there: a G4 job without a boot disk type is
# refused here (HYPERDISK_BOOT without the HYPERDISK_DEFAULT).
DISK_TYPES = {"pd-ssd", "pd-standard", "hyperdisk-balanced"}
HYPERDISK_DEFAULT = ("a3-ultragpu", "a4-highgpu")
# N4 likewise: "N4 doesn't support Persistent Disk or Local SSD" (Compute Engine "General-purpose machine family",
# https://docs.cloud.google.com/compute/docs/general-purpose-machines, read 2026-11-27).
HYPERDISK_BOOT = (*HYPERDISK_DEFAULT, "g4-standard", "n4-")
NO_HYPERDISK = ("a2-", "g2-", "n1-")
NO_PD_STANDARD = ("g2-", "a3-highgpu-", "a3-megagpu-")
# Same page: "When provisioning a3-highgpu-1g, a3-highgpu-2g, or a3-highgpu-4g machine types, you must create
# instances by using Spot VMs or Flex-start VMs"; A3 Ultra and A4 need a reservation, Spot or Flex-start.
# Documented as ambiguous for Vertex: CONFIGURE_COMPUTE (read 2026-11-27) lists a3-highgpu-1g/2g/4g among the
# training machines without that condition; the emulator keeps Compute Engine's rule, as ftcli's catalog does.
SPOT_OR_FLEX = {"a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g"}
NEEDS_CAPACITY = {"a3-ultragpu-8g", "a4-highgpu-8g"}
# Reservations: values "must be the full resource name of the reservation or reservation block" (the aiplatform API
# reference's MachineSpec.reservationAffinity, as cited in ftcli.catalog, read 2026-11-27), under the key
# compute.googleapis.com/reservation-name ("Use reservations with training",
# https://docs.cloud.google.com/vertex-ai/docs/training/use-reservations, read 2026-11-26).
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
# Spot VMs take no reservation: "You can't consume a reservation to create the following Compute Engine resources:
# Spot VMs or preemptible instances; Sole-tenant nodes" (Compute Engine "Consume reservations", Limitations,
# https://docs.cloud.google.com/compute/docs/instances/reservations-consume, read 2026-11-28 in its stored es-419, pt
# and ja copies; "All Spot VMs limitations apply when using Spot VMs with Vertex AI", "Use Spot VMs with prediction",
# https://cloud.google.com/vertex-ai/docs/predictions/use-spot-vms, read 2026-11-28). So SPOT with a
# SPECIFIC_RESERVATION is refused; ANY_RESERVATION only "falls back to on-demand" (ReservationAffinity.Type, aiplatform
# v1 reference, https://docs.cloud.google.com/dotnet/docs/reference/Google.Cloud.AIPlatform.V1/latest/
# Google.Cloud.AIPlatform.V1.ReservationAffinity.Types.Type, read 2026-11-28), as a Compute Engine VM's default
# ANY_RESERVATION does not stop it being Spot, so that one is not refused here (ftcli refuses both combinations
# itself, catalog.provisioning_problems). Documented as ambiguous: Vertex's own training pages do not say whether the
# create call or the provisioning refuses it; the emulator refuses at create, the earliest Google could.
_CE = r"[a-z](?:[-a-z0-9]*[a-z0-9])?"
RESERVATION = re.compile(rf"projects/[^/]+/zones/(?P<zone>(?P<region>[a-z]+-[a-z]+\d+)-[a-z])/reservations/{_CE}"
                         rf"(?:/reservationBlocks/{_CE})?")
# CustomJob.displayName: "The name can be up to 128 characters long and can consist of any UTF-8 characters"
# (REST CustomJob, https://docs.cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.customJobs,
# read 2026-11-27).
MAX_DISPLAY_NAME = 128
# CustomJob.labels: "Label keys and values can be no longer than 64 characters (Unicode codepoints), can only
# contain lowercase letters, numeric characters, underscores and dashes. International characters are allowed."
# (same reference, read 2026-11-27). Its link, Resource Manager's "Requirements for labels"
# (https://cloud.google.com/resource-manager/docs/creating-managing-labels#requirements, read 2026-11-27), adds
# "Keys must start with a lowercase letter or international character" and "up to a maximum of 64" labels (and
# says 63 characters: the emulator holds Vertex's own 64, so it refuses nothing Vertex documents as valid).
MAX_LABEL_CHARS = 64
MAX_LABELS = 64
# "Schedule training jobs based on resource availability" (DWS,
# https://docs.cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws, read 2026-11-26): L4, A100, H100, H200
# or B200; timeout of 7 days or less; the same machine configuration for all worker pools; not with Compute Engine
# reservations. Documented as ambiguous: the page says "H100" without naming H100 Mega (a3-megagpu-8g), which
# Compute Engine counts as an H100 machine ("Accelerator-optimized machine family", above); the emulator, like
# ftcli, refuses H100 Mega with Flex-start until Vertex names it.
FLEX_START_ACCELERATORS = {"NVIDIA_L4", "NVIDIA_TESLA_A100", "NVIDIA_A100_80GB", "NVIDIA_H100_80GB",
                           "NVIDIA_H200_141GB", "NVIDIA_B200"}
FLEX_START_MAX = dt.timedelta(days=7)
# ContainerSpec.env: "Environment variables to be passed to the container. Maximum limit is 100." (PythonPackageSpec.env
# the same); EnvVar.name: "Required. Name of the environment variable. Must be a valid C identifier." (the aiplatform
# v1 EnvVar reference, https://cloud.google.com/dotnet/docs/reference/Google.Cloud.AIPlatform.V1/latest/
# Google.Cloud.AIPlatform.V1.EnvVar, and the installed google-cloud-aiplatform 2.7.0's aiplatform_v1/types/
# custom_job.py and env_var.py; read 2026-11-27).
MAX_ENV = 100
C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# StudySpec (HyperparameterTuningJob.study_spec), from the docstrings of the installed google-cloud-aiplatform 2.7.0's
# aiplatform_v1/types/study.py (read 2026-11-27; the ScaleType lines also on
# https://documentation.s3ns.fr/java/docs/reference/google-cloud-aiplatform/3.81.0/com.google.cloud.aiplatform.v1.StudySpec.ParameterSpec.ScaleType,
# read 2026-11-27): MetricSpec.metric_id and ParameterSpec.parameter_id are "Required ... Must not contain
# whitespaces and must be unique amongst all" metric (parameter) specs; MetricSpec.goal is Required;
# DoubleValueSpec/IntegerValueSpec: "Required. Inclusive minimum value" and maximum; UNIT_LOG_SCALE and
# UNIT_REVERSE_LOG_SCALE: "The entire feasible space must be strictly positive"; DiscreteValueSpec.values: "The list
# should be in increasing order and at least 1e-10 apart ... should not contain more than 1,000 values";
# CategoricalValueSpec.values: "Required". HyperparameterTuningJob.labels: the same rule as CustomJob.labels
# (types/hyperparameter_tuning_job.py, read 2026-11-27).
DISCRETE_MIN_GAP = 1e-10
MAX_DISCRETE_VALUES = 1000

Strategy = custom_job.Scheduling.Strategy


def _pools(job: custom_job.CustomJob):
    return [(i, p) for i, p in enumerate(job.job_spec.worker_pool_specs) if p.machine_spec.machine_type]


def refusal(job: custom_job.CustomJob, location: str, today: dt.date | None = None) -> str | None:
    """Why Vertex would refuse `job` in `location`, or None."""
    from ftcli.catalog import gpu_short_name
    from ftcli.regions import TRAINING_GPUS

    today = today or dt.date.today()
    if len(job.display_name) > MAX_DISPLAY_NAME:
        return (f"CustomJob.display_name is too long: {len(job.display_name)} characters, at most "
                f"{MAX_DISPLAY_NAME} allowed.")
    problem = _labels_problem(dict(job.labels))
    if problem:
        return problem
    # CustomJobSpec.worker_pool_specs: "All worker pools except the first one are optional and can be skipped by
    # providing an empty value" (installed google-cloud-aiplatform 2.7.0's aiplatform_v1/types/custom_job.py, and
    # https://cloud.google.com/vertex-ai/docs/reference/rest/v1beta1/CustomJobSpec; read 2026-11-27): an empty first
    # pool was skipped like the others and the job accepted with no primary replica.
    first = job.job_spec.worker_pool_specs[0] if job.job_spec.worker_pool_specs else None
    if first is not None and not (first.machine_spec.machine_type or first.container_spec.image_uri
            or first.python_package_spec.executor_image_uri):
        return "workerPoolSpecs[0] (the primary replica) cannot be empty: only the later worker pools may be skipped."
    # The first worker pool is the primary replica: "Exactly one replica is designated the primary replica"
    # ("Distributed training", https://docs.cloud.google.com/vertex-ai/docs/training/distributed-training, read
    # 2026-11-28), and Google's SDK refuses more ("Chief spec replica count cannot be greater than 1.",
    # google/cloud/aiplatform/utils/worker_spec_utils.py in google-cloud-aiplatform 2.7.0, read 2026-11-28). Two were
    # accepted here. An unset count (0) is left alone: WorkerPoolSpec.replica_count is "Optional".
    if first is not None and first.replica_count > 1:
        return (f"workerPoolSpecs[0] is the primary replica: its replicaCount must be 1, not {first.replica_count}; "
                "put the other machines in workerPoolSpecs[1].")
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
        else:
            # The same images named as a custom container (containerSpec.imageUri, e.g. `--image`): the policy above
            # is about the images, however a job names them ("the images are no longer available for download"), so
            # a containerSpec job on one of them past its date is refused too; it was accepted, and the scripted
            # emulator walked it to SUCCEEDED.
            uri = pool.container_spec.image_uri
            image = next((uri[len(p):] for p in PREBUILT_PREFIXES if uri.startswith(p)), "")
            image = re.split(r"[:@]", image, maxsplit=1)[0]
            if image in PREBUILT_PYTORCH and PREBUILT_PYTORCH[image] < today:
                return f"the prebuilt container {uri} reached its end of availability on {PREBUILT_PYTORCH[image]}"
        env = pool.container_spec.env if has_container else pool.python_package_spec.env
        if len(env) > MAX_ENV:
            return f"workerPoolSpecs[{i}] has {len(env)} environment variables; the maximum is {MAX_ENV}."
        for var in env:
            if not C_IDENTIFIER.fullmatch(var.name):
                return (f"Invalid environment variable name {var.name!r} (workerPoolSpecs[{i}]): it must be a valid C "
                        "identifier.")
        if machine not in MACHINES:
            return f'Machine type "{machine}" is not supported for custom training (workerPoolSpecs[{i}]).'
        accel = pool.machine_spec.accelerator_type.name
        count = pool.machine_spec.accelerator_count
        # CONFIGURE_COMPUTE's "Machine types" list marks its a2/a3/a4/g2/g4 entries "*" ("must be used with certain
        # GPUs or TPUs", read 2026-11-27, as CPU_MACHINES above): one of them without its GPUs was accepted here.
        if machine in GPU_MACHINES and not (count and accel != "ACCELERATOR_TYPE_UNSPECIFIED"):
            return (f'Machine type "{machine}" must be used with its GPUs: set acceleratorType and acceleratorCount '
                    f"(workerPoolSpecs[{i}]).")
        if count and accel != "ACCELERATOR_TYPE_UNSPECIFIED":
            counts = GPU_TABLE.get(machine, {}).get(accel)
            if counts is None:
                return f'Accelerator "{accel}" is not supported for machine type "{machine}".'
            if count not in counts:
                valid = ", ".join(map(str, counts))
                return (f"Accelerator count {count} is not valid for accelerator {accel} on machine type {machine}; "
                        f"valid counts: {valid}.")
            if gpu_short_name(accel) not in TRAINING_GPUS.get(location, frozenset()):
                return f"Accelerator {accel} is not supported for custom training in {location}"
        default_disk = "hyperdisk-balanced" if machine.startswith(HYPERDISK_DEFAULT) else "pd-ssd"
        disk = pool.disk_spec.boot_disk_type or default_disk
        size = pool.disk_spec.boot_disk_size_gb or 100
        if disk not in DISK_TYPES:
            return f"boot disk type {disk!r} is not one of {sorted(DISK_TYPES)}"
        if not 100 <= size <= 64000:
            return f"boot disk size {size} GB is outside [100, 64000]"
        if machine.startswith(HYPERDISK_BOOT) and disk != "hyperdisk-balanced":
            unset = "" if pool.disk_spec.boot_disk_type else " (the default)"
            return f"{machine} boots only from hyperdisk-balanced, not {disk}{unset}"
        if machine.startswith(NO_HYPERDISK) and disk == "hyperdisk-balanced":
            return f"{machine} does not support hyperdisk-balanced boot disks"
        if machine.startswith(NO_PD_STANDARD) and disk == "pd-standard":
            return f"{machine} does not support pd-standard boot disks"
        affinity = pool.machine_spec.reservation_affinity
        kind = affinity.reservation_affinity_type.name
        reserved = kind in ("ANY_RESERVATION", "SPECIFIC_RESERVATION")
        if kind == "SPECIFIC_RESERVATION":
            if affinity.key != RESERVATION_KEY or len(affinity.values) != 1:
                return f"SPECIFIC_RESERVATION needs key {RESERVATION_KEY} and one reservation name as its value"
            m = RESERVATION.fullmatch(affinity.values[0])
            if not m:
                return (f"Invalid reservation name {affinity.values[0]!r}: it must be the full resource name of the "
                        "reservation or reservation block")
            if m["region"] != location:
                return f"Reservation zone {m['zone']} is not in the job's region {location}"
            if strategy == Strategy.SPOT:
                return "Spot VMs cannot consume a reservation: drop the SPECIFIC_RESERVATION or the SPOT strategy"
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


def _label_chars_ok(text: str) -> bool:
    # lowercase letters, numeric characters, underscores and dashes; international characters allowed (letters
    # of any script that has no case, or a lowercase one)
    return all(c in "_-" or c.isdigit() or (c.isalpha() and not c.isupper() and unicodedata.category(c) != "Lt")
               for c in text)


def _labels_problem(labels: dict[str, str]) -> str | None:
    if len(labels) > MAX_LABELS:
        return f"CustomJob.labels has {len(labels)} labels; at most {MAX_LABELS} are allowed."
    for key, value in labels.items():
        if not key or len(key) > MAX_LABEL_CHARS or not _label_chars_ok(key) or not key[0].isalpha():
            return (f"Invalid label key {key!r}: keys are 1 to {MAX_LABEL_CHARS} lowercase letters, digits, '_' or "
                    "'-', starting with a letter.")
        if len(value) > MAX_LABEL_CHARS or not _label_chars_ok(value):
            return (f"Invalid label value {value!r} for key {key!r}: values are at most {MAX_LABEL_CHARS} lowercase "
                    "letters, digits, '_' or '-'.")
    return None


def tuning_refusal(job, location: str, today: dt.date | None = None) -> str | None:
    """Why Vertex would refuse the HyperparameterTuningJob `job` in `location`, or None: its own fields (labels, the
    StudySpec), then its trial job spec as a CustomJob of the same display name."""
    problem = _labels_problem(dict(job.labels)) or _study_problem(job.study_spec)
    if problem:
        return problem.replace("CustomJob.labels", "HyperparameterTuningJob.labels")
    return refusal(custom_job.CustomJob(display_name=job.display_name, job_spec=job.trial_job_spec), location, today)


def _ids_problem(ids: list[str], what: str) -> str | None:
    for ident in ids:
        if not ident or any(c.isspace() for c in ident):
            return f"Invalid {what} {ident!r}: it is required and must not contain whitespace."
    dup = sorted({i for i in ids if ids.count(i) > 1})
    return f"{what} {dup[0]!r} is not unique." if dup else None


def _study_problem(study) -> str | None:
    problem = _ids_problem([m.metric_id for m in study.metrics], "metric_id")
    if problem:
        return problem
    for m in study.metrics:
        if not m.goal:
            return f"MetricSpec {m.metric_id!r} needs a goal (MAXIMIZE or MINIMIZE)."
    problem = _ids_problem([p.parameter_id for p in study.parameters], "parameter_id")
    if problem:
        return problem
    for p in study.parameters:
        pid, kind = p.parameter_id, p._pb.WhichOneof("parameter_value_spec")
        if kind is None:
            return f"ParameterSpec {pid!r} has no value spec."
        if kind in ("double_value_spec", "integer_value_spec"):
            spec = getattr(p, kind)
            low, high = spec.min_value, spec.max_value
            if low > high:
                return f"ParameterSpec {pid!r}: min_value {low} is greater than max_value {high}."
            scale = p.scale_type.name
            if scale in ("UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE") and low <= 0:
                return f"ParameterSpec {pid!r}: {scale} needs a strictly positive feasible space (min_value {low})."
        elif kind == "discrete_value_spec":
            values = list(p.discrete_value_spec.values)
            if not values:
                return f"ParameterSpec {pid!r}: discrete_value_spec.values is required."
            if len(values) > MAX_DISCRETE_VALUES:
                return f"ParameterSpec {pid!r}: {len(values)} discrete values; at most {MAX_DISCRETE_VALUES} allowed."
            if any(b - a < DISCRETE_MIN_GAP for a, b in zip(values, values[1:], strict=False)):
                return (f"ParameterSpec {pid!r}: discrete values must be in increasing order and at least "
                        f"{DISCRETE_MIN_GAP:g} apart.")
        elif kind == "categorical_value_spec" and not p.categorical_value_spec.values:
            return f"ParameterSpec {pid!r}: categorical_value_spec.values is required."
    return None
