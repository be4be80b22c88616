"""The GPU catalog: `--gpu L4x2` → accelerator enum, machine type and count; container images; regions.

Plain data, no google import: `resolve_gpu` rejects impossible pairs before anything is uploaded.
Machine/GPU pairs follow Vertex AI's custom-training catalog (accelerator-optimized a2/a3/a4/g2 machines
carry a fixed number of GPUs) and Compute Engine's N1 limits (GPUs attached to an n1 machine cap its vCPUs
and memory).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ftcli.errors import UsageError


@dataclass(frozen=True)
class Hardware:
    """One worker's machine. `accelerator_type` is the Vertex `AcceleratorType` enum name, None for CPU."""

    machine_type: str
    accelerator_type: str | None = None
    accelerator_count: int = 0

    def __post_init__(self) -> None:
        # A GPU type with count 0 is the SDK trap that silently gives a CPU machine: make it unrepresentable.
        if (self.accelerator_type is None) != (self.accelerator_count == 0) or self.accelerator_count < 0:
            raise ValueError(f"inconsistent accelerator: {self.accelerator_type} x {self.accelerator_count}")

    @property
    def gpu(self) -> bool:
        return self.accelerator_count > 0

    @property
    def summary(self) -> str:
        """E.g. '2 x NVIDIA_L4 on g2-standard-24' or 'n1-standard-8 (CPU)'."""
        if not self.gpu:
            return f"{self.machine_type} (CPU)"
        return f"{self.accelerator_count} x {self.accelerator_type} on {self.machine_type}"


@dataclass(frozen=True)
class _Gpu:
    name: str  # what users type (and see in help)
    enum: str  # google.cloud.aiplatform_v1.AcceleratorType name
    machines: Mapping[int, tuple[str, ...]]  # GPU count → machine types that take that many; default first
    # True when the machine type fixes the GPU count (a2/a3/a4/g2), so `--gpu A100 --machine-type
    # a2-highgpu-4g` can mean A100x4. N1 machines take a chosen number of attached GPUs instead.
    fixed: bool
    n1_limits: Mapping[int, tuple[int, int]] | None = None  # count → (max vCPUs, max GB) for n1 GPUs

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(self.machines)

    @property
    def families(self) -> tuple[str, ...]:
        """Machine-type prefixes this GPU runs on, e.g. ('a2-highgpu', 'a2-megagpu')."""
        return tuple(dict.fromkeys(_family(m) for ms in self.machines.values() for m in ms))


def _family(machine_type: str) -> str:
    return "-".join(machine_type.split("-")[:2])


# Vertex custom training offers these n1 shapes (n1-standard-1/2 and small highcpu ones are not offered).
_N1_SIZES = {"standard": (4, 8, 16, 32, 64, 96), "highmem": (2, 4, 8, 16, 32, 64, 96), "highcpu": (16, 32, 64, 96)}
_N1_GB_PER_VCPU = {"standard": 3.75, "highmem": 6.5, "highcpu": 0.9}
# The default per count: enough host CPUs to feed the GPUs' data loaders, within every N1 GPU's limits.
_N1_DEFAULT = {1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32", 8: "n1-standard-64"}


def _n1_shape(machine_type: str) -> tuple[int, float] | None:
    """(vCPUs, memory GB) of an n1 shape Vertex training offers, else None."""
    parts = machine_type.split("-")
    if len(parts) != 3 or parts[0] != "n1" or parts[1] not in _N1_SIZES or not parts[2].isdigit():
        return None
    vcpus = int(parts[2])
    return (vcpus, vcpus * _N1_GB_PER_VCPU[parts[1]]) if vcpus in _N1_SIZES[parts[1]] else None


_N1_SHAPES = {m: _n1_shape(m) for m in (f"n1-{kind}-{n}" for kind, sizes in _N1_SIZES.items() for n in sizes)}


def _n1(name: str, enum: str, limits: dict[int, tuple[int, int]]) -> _Gpu:
    """`limits`: GPU count → (max vCPUs, max memory GB) of the n1 machine, from Compute Engine's N1 GPU table."""
    machines = {}
    for count, (max_vcpus, max_gb) in limits.items():
        fits = [m for m, (vcpus, gb) in _N1_SHAPES.items() if vcpus <= max_vcpus and gb <= max_gb]
        # The default first; a default outside the limits would not be first, and the tests catch that.
        machines[count] = tuple(sorted(fits, key=lambda m, d=_N1_DEFAULT[count]: m != d))
    return _Gpu(name, enum, machines, fixed=False, n1_limits=limits)


def _fixed(name: str, enum: str, machines: dict[int, tuple[str, ...]]) -> _Gpu:
    return _Gpu(name, enum, machines, fixed=True)


def _per_count(pattern: str, counts: tuple[int, ...]) -> dict[int, tuple[str, ...]]:
    return {n: (pattern.format(n=n),) for n in counts}


# Roughly cheapest first: the order of `gpu_names()` and of the error messages.
_GPUS: tuple[_Gpu, ...] = (
    _n1("T4", "NVIDIA_TESLA_T4", {1: (48, 312), 2: (48, 312), 4: (96, 624)}),
    _n1("P4", "NVIDIA_TESLA_P4", {1: (24, 156), 2: (48, 312), 4: (96, 624)}),
    _fixed("L4", "NVIDIA_L4", {
        1: ("g2-standard-8", "g2-standard-4", "g2-standard-12", "g2-standard-16", "g2-standard-32"),
        2: ("g2-standard-24",), 4: ("g2-standard-48",), 8: ("g2-standard-96",),
    }),
    _n1("P100", "NVIDIA_TESLA_P100", {1: (16, 104), 2: (32, 208), 4: (64, 208)}),
    _n1("V100", "NVIDIA_TESLA_V100", {1: (12, 78), 2: (24, 156), 4: (48, 312), 8: (96, 624)}),
    _fixed("A100", "NVIDIA_TESLA_A100",
           {**_per_count("a2-highgpu-{n}g", (1, 2, 4, 8)), 16: ("a2-megagpu-16g",)}),
    _fixed("A100-80GB", "NVIDIA_A100_80GB", _per_count("a2-ultragpu-{n}g", (1, 2, 4, 8))),
    _fixed("H100", "NVIDIA_H100_80GB", _per_count("a3-highgpu-{n}g", (1, 2, 4, 8))),
    _fixed("H100-MEGA", "NVIDIA_H100_MEGA_80GB", {8: ("a3-megagpu-8g",)}),
    _fixed("H200", "NVIDIA_H200_141GB", {8: ("a3-ultragpu-8g",)}),
    _fixed("B200", "NVIDIA_B200", {8: ("a4-highgpu-8g",)}),
)


def _key(name: str) -> str:
    # One spelling for lookups: 't4', 'nvidia_tesla_t4', 'A100_80GB' and 'a100-80gb' all match.
    return name.strip().upper().replace("_", "-")


_BY_KEY: dict[str, _Gpu] = {_key(k): g for g in _GPUS for k in (g.name, g.enum)}
_CPU_NAMES = frozenset({"NONE", "CPU"})
_CPU_DEFAULT = "n1-standard-8"
_CPU_MACHINE = re.compile(r"(n1|n2|e2|c2)-(standard|highmem|highcpu)-\d+")


def gpu_names() -> list[str]:
    """The GPU names `--gpu` takes (cheapest first), without 'none'; any of them takes xN for N GPUs."""
    return [g.name for g in _GPUS]


def resolve_gpu(spec: str, machine_type: str | None = None) -> Hardware:
    """Resolve `--gpu NAME[xCOUNT]` (and an optional `--machine-type`) to one worker's `Hardware`.

    NAME is a short name (T4, L4, A100-80GB, ...), a Vertex enum name (NVIDIA_L4) or none/cpu, any case.
    Without a count: 1 GPU, or the only count the GPU comes in (H200 → 8), or the count a given a2/a3/a4/g2
    machine type carries (`--gpu A100 --machine-type a2-highgpu-4g` → 4).
    `machine_type` replaces the default only when it can carry that GPU and count: the exact machine for
    the fixed-count families; for T4/P4/P100/V100 any offered n1-standard/highmem/highcpu shape within
    Compute Engine's per-count vCPU and memory limits.
    Raises UsageError (one line: what is wrong and what is valid).
    """
    text = spec.strip()
    if not text:
        raise UsageError(f"--gpu is empty; {_choices()}")
    machine = machine_type.strip().lower() if machine_type else None

    key = _key(text)
    count_text: str | None = None
    if key not in _BY_KEY and key not in _CPU_NAMES:
        head, sep, tail = key.rpartition("X")
        if not sep or not head:
            raise UsageError(f"unknown GPU {text!r}; {_choices()}")
        key, count_text = head, tail
        if key not in _BY_KEY and key not in _CPU_NAMES:
            raise UsageError(f"unknown GPU {text[:len(head)]!r}; {_choices()}")

    if key in _CPU_NAMES:
        if count_text is not None:
            raise UsageError(f"--gpu none takes no count (got {text}): write --gpu none for a CPU machine")
        return _cpu(machine)

    gpu = _BY_KEY[key]
    count = _count(gpu, text, count_text, machine)
    valid = gpu.machines[count]
    if machine is None:
        return Hardware(valid[0], gpu.enum, count)
    if machine not in valid:
        raise UsageError(_machine_problem(gpu, count, machine))
    return Hardware(machine, gpu.enum, count)


def _choices() -> str:
    return f"choose one of {', '.join(gpu_names())}, or none (add xN for N GPUs, e.g. L4x2)"


def _comes_in(gpu: _Gpu) -> str:
    if len(gpu.counts) == 1:
        return f"{gpu.name} comes only in count {gpu.counts[0]}"
    return f"{gpu.name} comes in counts {', '.join(map(str, gpu.counts))}"


def _count(gpu: _Gpu, text: str, count_text: str | None, machine: str | None) -> int:
    if count_text is None:
        if gpu.fixed and machine is not None:
            for n, machines in gpu.machines.items():
                if machine in machines:
                    return n
        return gpu.counts[0]
    if not re.fullmatch(r"[+-]?\d+", count_text):
        raise UsageError(f"the GPU count in --gpu {text} must be a whole number; {_comes_in(gpu)}")
    count = int(count_text)
    if count == 0:
        # Explicit: Vertex (and the SDK) would silently drop a GPU asked for with count 0 and run on CPU.
        raise UsageError(f"--gpu {text} asks for 0 GPUs; {_comes_in(gpu)}, "
                         "or use --gpu none for a CPU machine")
    if count not in gpu.machines:
        raise UsageError(f"{_comes_in(gpu)} (got {count})")
    return count


def _machine_problem(gpu: _Gpu, count: int, machine: str) -> str:
    valid = gpu.machines[count]
    fix = f"try --machine-type {valid[0]} or leave it out"
    if _family(machine) not in gpu.families:
        kinds = " or ".join(f"{f}-*" for f in gpu.families)
        return f"{gpu.name} runs on {kinds} machines, not {machine}: {fix}"
    other = next((n for n, ms in gpu.machines.items() if machine in ms), None)
    if other is not None and gpu.fixed:
        return f"{machine} carries {other} {gpu.name} GPUs, not {count}: use --gpu {gpu.name}x{other}, or {fix}"
    if gpu.n1_limits is not None:
        shape = _n1_shape(machine)
        if shape is None:
            return f"{machine} is not an n1 machine type Vertex training offers: {fix}"
        max_vcpus, max_gb = gpu.n1_limits[count]
        return (f"{gpu.name}x{count} allows an n1 machine of at most {max_vcpus} vCPUs and {max_gb} GB, not {machine} "
                f"({shape[0]} vCPUs, {shape[1]:g} GB): {fix}")
    return f"{gpu.name}x{count} runs on {', '.join(valid)}, not {machine}: {fix}"


def _cpu(machine: str | None) -> Hardware:
    if machine is None:
        return Hardware(_CPU_DEFAULT)
    if not _CPU_MACHINE.fullmatch(machine):
        raise UsageError(f"--gpu none needs a CPU machine type (n1-, n2-, e2- or c2- standard/highmem/highcpu), "
                         f"not {machine}: try --machine-type {_CPU_DEFAULT} or leave it out")
    return Hardware(machine)


# --- container images -------------------------------------------------------------------------------

# Vertex's prebuilt PyTorch training images; the trainer's own requirements are pip-installed on top.
PYTORCH_IMAGE_VERSION = "2-4.py310"
REDUCTION_SERVER_IMAGE = "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
# Reduction Server replicas only move gradients: many vCPUs and network bandwidth, no GPU.
REDUCTION_SERVER_MACHINE = "n1-highcpu-16"


def image_mirror(region: str) -> str:
    """The Artifact Registry multi-region nearest to `region`: us, europe or asia."""
    geo = region.strip().lower().split("-", 1)[0]
    if geo == "europe":
        return "europe"
    if geo in ("asia", "australia"):
        return "asia"
    return "us"


def training_image(gpu: bool, region: str, image: str | None = None) -> str:
    """The executor image for the trainer: `image` when given, else the prebuilt PyTorch image from the
    mirror nearest to `region` (the same image in every mirror; a near one pulls faster)."""
    if image:
        return image
    kind = "gpu" if gpu else "cpu"
    return f"{image_mirror(region)}-docker.pkg.dev/vertex-ai/training/pytorch-{kind}.{PYTORCH_IMAGE_VERSION}:latest"


# --- regions ----------------------------------------------------------------------------------------

VERTEX_REGIONS: frozenset[str] = frozenset({
    "us-central1", "us-east1", "us-east4", "us-east5", "us-south1", "us-west1", "us-west2", "us-west3", "us-west4",
    "northamerica-northeast1", "northamerica-northeast2", "southamerica-east1", "southamerica-west1",
    "europe-central2", "europe-north1", "europe-southwest1", "europe-west1", "europe-west2", "europe-west3",
    "europe-west4", "europe-west6", "europe-west8", "europe-west9", "europe-west12",
    "me-central1", "me-central2", "me-west1", "africa-south1",
    "asia-east1", "asia-east2", "asia-northeast1", "asia-northeast2", "asia-northeast3", "asia-south1",
    "asia-southeast1", "asia-southeast2", "australia-southeast1", "australia-southeast2",
})
