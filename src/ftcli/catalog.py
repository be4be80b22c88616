"""The GPU catalog: `--gpu L4x2` → accelerator enum, machine type and count; each GPU's compute capability;
the boot disk and the provisioning each machine family allows; the Reduction Server image.

Plain data, no google import: `resolve_gpu` rejects impossible pairs before anything is uploaded.
Machine/GPU pairs follow Vertex AI's custom-training catalog (accelerator-optimized a2/a3/a4/g2 machines
carry a fixed number of GPUs) and Compute Engine's N1 limits (GPUs attached to an n1 machine cap its vCPUs
and memory). Container images live in `ftcli.images`, regions in `ftcli.regions`.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ftcli.errors import UsageError
from ftcli.spelling import near


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
    def gpu_name(self) -> str | None:
        """The short name users type (T4, H200, ...), None for CPU."""
        return _BY_KEY[_key(self.accelerator_type)].name if self.accelerator_type else None

    @property
    def compute_capability(self) -> str | None:
        return _BY_KEY[_key(self.accelerator_type)].cc if self.accelerator_type else None

    @property
    def summary(self) -> str:
        """E.g. '2 x NVIDIA_L4 on g2-standard-24' or 'n1-standard-8 (CPU)'."""
        if not self.gpu:
            return f"{self.machine_type} (CPU)"
        return f"{self.accelerator_count} x {self.accelerator_type} on {self.machine_type}"

    @property
    def label(self) -> str:
        """E.g. '2 x L4 on g2-standard-24' or 'n1-standard-8 (CPU)': the names users type."""
        return machine_label(self.machine_type, self.accelerator_type, self.accelerator_count)


@dataclass(frozen=True)
class _Gpu:
    name: str  # what users type (and see in help)
    enum: str  # google.cloud.aiplatform_v1.AcceleratorType name
    machines: Mapping[int, tuple[str, ...]]  # GPU count → machine types that take that many; default first
    # True when the machine type fixes the GPU count (a2/a3/a4/g2), so `--gpu A100 --machine-type
    # a2-highgpu-4g` can mean A100x4. N1 machines take a chosen number of attached GPUs instead.
    fixed: bool
    cc: str  # CUDA compute capability: which kernels an image must carry (see ftcli.images)
    n1_limits: Mapping[int, tuple[int, int]] | None = None  # count → (max vCPUs, max GB) for n1 GPUs
    aliases: tuple[str, ...] = ()  # other spellings --gpu takes (RTXPRO6000)

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(self.machines)

    @property
    def families(self) -> tuple[str, ...]:
        """Machine-type prefixes this GPU runs on, e.g. ('a2-highgpu', 'a2-megagpu')."""
        return tuple(dict.fromkeys(_family(m) for ms in self.machines.values() for m in ms))


def _family(machine_type: str) -> str:
    return "-".join(machine_type.split("-")[:2])


# The machines and GPU counts below follow Vertex's "Configure compute resources for custom training"
# (https://docs.cloud.google.com/vertex-ai/docs/training/configure-compute, now served as
# https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/training/configure-compute,
# read 2026-11-26): its "Machine types" list and its table "Valid numbers of GPUs for each machine type".
# That list offers these n1 shapes (no n1-standard-1/2, no n1-highcpu-2/4/8).
_N1_SIZES = {"standard": (4, 8, 16, 32, 64, 96), "highmem": (2, 4, 8, 16, 32, 64, 96), "highcpu": (16, 32, 64, 96)}
# GB per vCPU: "n1-standard: 3.75GB of memory per vCPU, n1-highmem: 6.5GB ..., n1-highcpu: 0.9 GB" (Google's
# GoogleCloudPlatform/vertex-ai-samples notebooks, "Set machine types"; read 2026-11-26); the page above agrees for
# standard ("n1-standard-32 ... 32 virtual CPUs and 120 GB of memory").
_N1_GB_PER_VCPU = {"standard": 3.75, "highmem": 6.5, "highcpu": 0.9}
# The default per count: enough host CPUs to feed the GPUs' data loaders; each is a valid cell of that table for
# every N1 GPU that comes in that count (tests/test_catalog.py holds the table).
_N1_DEFAULT = {1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32", 8: "n1-standard-64"}


def _n1_shape(machine_type: str) -> tuple[int, float] | None:
    """(vCPUs, memory GB) of an n1 shape Vertex training offers, else None."""
    parts = machine_type.split("-")
    if len(parts) != 3 or parts[0] != "n1" or parts[1] not in _N1_SIZES or not parts[2].isdigit():
        return None
    vcpus = int(parts[2])
    return (vcpus, vcpus * _N1_GB_PER_VCPU[parts[1]]) if vcpus in _N1_SIZES[parts[1]] else None


_N1_SHAPES = {m: shape for m in (f"n1-{kind}-{n}" for kind, sizes in _N1_SIZES.items() for n in sizes)
              if (shape := _n1_shape(m)) is not None}


def _n1(name: str, enum: str, cc: str, limits: dict[int, tuple[int, int]]) -> _Gpu:
    """`limits`: GPU count → (max vCPUs, max memory GB) of the n1 machine, from Compute Engine's N1 GPU table."""
    machines = {}
    for count, (max_vcpus, max_gb) in limits.items():
        fits = [m for m, (vcpus, gb) in _N1_SHAPES.items() if vcpus <= max_vcpus and gb <= max_gb]
        # The default first; a default outside the limits would not be first, and the tests catch that.
        machines[count] = tuple(sorted(fits, key=_N1_DEFAULT[count].__ne__))
    return _Gpu(name, enum, machines, fixed=False, cc=cc, n1_limits=limits)


def _fixed(name: str, enum: str, cc: str, machines: dict[int, tuple[str, ...]], aliases: tuple[str, ...] = ()) -> _Gpu:
    return _Gpu(name, enum, machines, fixed=True, cc=cc, aliases=aliases)


def _per_count(pattern: str, sizes: tuple[int, ...], per_gpu: int = 1) -> dict[int, tuple[str, ...]]:
    """GPU count → its one machine type, for families named by GPU count (a2-highgpu-4g) or by vCPUs, `per_gpu` to a
    GPU (g4-standard-96: 2 GPUs)."""
    return {n // per_gpu: (pattern.format(n=n),) for n in sizes}


# Roughly cheapest first: the order of `gpu_names()` and of the error messages. Compute capabilities: NVIDIA's
# "CUDA GPU Compute Capability" and "Legacy CUDA GPU Compute Capability" tables
# (https://developer.nvidia.com/cuda-gpus, /cuda-legacy-gpus; read 2026-11-26).
# Machines and counts: Vertex's table "Valid numbers of GPUs for each machine type" (configure-compute page above,
# read 2026-11-26). For the N1 GPUs the (max vCPUs, max GB) limits per count are the ones that give exactly that
# table's cells; Vertex is stricter than Compute Engine in places: "A configuration with 4 NVIDIA_TESLA_P100 GPUs
# only provides up to 64 virtual CPUS and up to 208 GB of memory in all regions and zones", and T4 x1 is valid on
# n1-*-16 but not n1-*-32 (so 24 vCPUs, as P4; 48 let n1-standard-32 through, which the table refuses).
_GPUS: tuple[_Gpu, ...] = (
    _n1("T4", "NVIDIA_TESLA_T4", "7.5", {1: (24, 156), 2: (48, 312), 4: (96, 624)}),
    _n1("P4", "NVIDIA_TESLA_P4", "6.1", {1: (24, 156), 2: (48, 312), 4: (96, 624)}),
    _fixed("L4", "NVIDIA_L4", "8.9", {
        1: ("g2-standard-8", "g2-standard-4", "g2-standard-12", "g2-standard-16", "g2-standard-32"),
        2: ("g2-standard-24",), 4: ("g2-standard-48",), 8: ("g2-standard-96",),
    }),
    _n1("P100", "NVIDIA_TESLA_P100", "6.0", {1: (16, 104), 2: (32, 208), 4: (64, 208)}),
    _n1("V100", "NVIDIA_TESLA_V100", "7.0", {1: (12, 78), 2: (24, 156), 4: (48, 312), 8: (96, 624)}),
    _fixed("A100", "NVIDIA_TESLA_A100", "8.0",
           {**_per_count("a2-highgpu-{n}g", (1, 2, 4, 8)), 16: ("a2-megagpu-16g",)}),
    _fixed("A100-80GB", "NVIDIA_A100_80GB", "8.0", _per_count("a2-ultragpu-{n}g", (1, 2, 4, 8))),
    # G4: "g4-standard-48 1, g4-standard-96 2, g4-standard-192 4, g4-standard-384 8" in the configure-compute table
    # (read 2026-11-27; its smaller g4-standard-6/12/24 shapes, fractions of a GPU, are not on Vertex's list).
    # "12.0 | NVIDIA RTX PRO 6000 Blackwell Server Edition" (NVIDIA's CUDA GPUs page above, read 2026-11-27).
    _fixed("RTX-PRO-6000", "NVIDIA_RTX_PRO_6000", "12.0", _per_count("g4-standard-{n}", (48, 96, 192, 384), per_gpu=48),
           aliases=("RTXPRO6000",)),
    _fixed("H100", "NVIDIA_H100_80GB", "9.0", _per_count("a3-highgpu-{n}g", (1, 2, 4, 8))),
    _fixed("H100-MEGA", "NVIDIA_H100_MEGA_80GB", "9.0", {8: ("a3-megagpu-8g",)}),
    _fixed("H200", "NVIDIA_H200_141GB", "9.0", {8: ("a3-ultragpu-8g",)}),
    _fixed("B200", "NVIDIA_B200", "10.0", {8: ("a4-highgpu-8g",)}),
)


def _key(name: str) -> str:
    # One spelling for lookups: 't4', 'nvidia_tesla_t4', 'A100_80GB', 'a100-80gb' and 'rtx pro 6000' all match.
    return re.sub(r"[\s_]+", "-", name.strip().upper())


_BY_KEY: dict[str, _Gpu] = {_key(k): g for g in _GPUS for k in (g.name, g.enum, *g.aliases)}

# GPUs with a Vertex AcceleratorType that ftcli does not offer, and why. GB200: configure-compute (above, read
# 2026-11-27) lists NVIDIA_GB200 on a4x-highgpu-4g, "Requires obtaining capacity using shared reservations", and
# Compute Engine's A4X machines have "NVIDIA Grace CPUs with Arm Neoverse V2 cores" ("Accelerator-optimized machine
# family", read 2026-11-27): ftcli's trainer images are not checked on Arm. K80: the SDK still has the enum, but
# configure-compute's list of GPUs for serverless training no longer names it.
_NOT_OFFERED = {
    "GB200": "GB200 (a4x-highgpu-4g) is not offered by ftcli: its machines have Arm CPUs (NVIDIA Grace), which "
             "ftcli's trainer images are not checked on, and need a shared reservation; use --gpu B200 or H200",
    "K80": "K80 is no longer offered for Vertex AI training (configure-compute's GPU list does not name it); use "
           "--gpu T4 or L4",
}
_NOT_OFFERED |= {"NVIDIA-GB200": _NOT_OFFERED["GB200"], "NVIDIA-TESLA-K80": _NOT_OFFERED["K80"]}  # the enum names
_CPU_NAMES = frozenset({"NONE", "CPU"})

# The machine types custom training takes without a GPU: "you must specify one of the following machine types in
# the machineSpec.machineType field" (Vertex "Configure compute resources for custom training", "Machine types",
# https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/training/configure-compute,
# formerly https://cloud.google.com/vertex-ai/docs/training/configure-compute; read 2026-11-27): the entries the page
# does not mark "must be used with certain GPUs or TPUs". Only these shapes: e.g. no e2-highcpu-2..8, no
# n1-standard-1/2, no n2-highcpu-2..8. The list's GPU machines (a2/a3/a4/g2/g4) take their GPUs through --gpu, and
# its TPU machines are not for ftcli. N4 boots from Hyperdisk only (see HYPERDISK_ONLY below).
CPU_MACHINE_TYPES: tuple[str, ...] = (
    *(f"n4-{kind}-{n}" for kind in ("standard", "highmem", "highcpu") for n in (2, 4, 8, 16, 32, 48, 64, 80)),
    *(f"e2-standard-{n}" for n in (4, 8, 16, 32)),
    *(f"e2-highmem-{n}" for n in (2, 4, 8, 16)),
    *(f"e2-highcpu-{n}" for n in (16, 32)),
    *(f"n2-standard-{n}" for n in (4, 8, 16, 32, 48, 64, 80)),
    *(f"n2-highmem-{n}" for n in (2, 4, 8, 16, 32, 48, 64, 80)),
    *(f"n2-highcpu-{n}" for n in (16, 32, 48, 64, 80)),
    *(f"n1-{kind}-{n}" for kind, sizes in _N1_SIZES.items() for n in sizes),
    *(f"c2-standard-{n}" for n in (4, 8, 16, 30, 60)),
    "m1-ultramem-40", "m1-ultramem-80", "m1-ultramem-160", "m1-megamem-96",
)
# ftcli's CPU machine: n1-standard-8 (8 vCPUs, 30 GB) is on the list above (same page, read 2026-11-27); enough
# host cores for the tokenizer and data loader of a small model.
_CPU_DEFAULT = "n1-standard-8"


# "NVIDIA P100 GPUs reach end of support on September 15, 2026" (configure-compute page above, read 2026-11-27):
# that date has passed, so `ftcli train/tune --gpu P100` warns (Vertex may still take the job; ftcli does not
# refuse it) and points at the GPUs that replace it.
END_OF_SUPPORT = {"P100": dt.date(2026, 9, 15)}


def end_of_support_warning(hw: Hardware, today: dt.date | None = None) -> str | None:
    """One line when `hw`'s GPU has reached (or is about to reach) Google's end of support, else None."""
    day = END_OF_SUPPORT.get(hw.gpu_name or "")
    if day is None:
        return None
    today = today or dt.date.today()
    when = "reached" if today >= day else "reaches"
    return (f"NVIDIA {hw.gpu_name} GPUs {when} end of support on Vertex AI on {day:%B} {day.day}, {day.year}: "
            "jobs may be refused or lose capacity; use --gpu T4 or --gpu L4 instead")


# GPUDirect-RDMA: "The a3-ultragpu-8g and a4-highgpu-8g machine types have ... GPUDirect-RDMA, which enables higher
# network performance for GPU communication ... through RoCE", and "When using RDMA, add `source
# /usr/local/gib/scripts/set_nccl_env.sh` to the beginning of the training command" (configure-compute page above,
# read 2026-11-29). ftcli does not: the page does not say that the gIB files are there in a custom container, and
# AI Hypercomputer's NCCL page (https://docs.cloud.google.com/ai-hypercomputer/docs/nccl/test-vms, read 2026-11-29)
# also needs /usr/local/gib/lib64 on LD_LIBRARY_PATH and system libraries a PyTorch image may lack; the script sets
# NCCL_NET=gIB, and NCCL then fails to start without them ("Failed to initialize any NET plugin"). Unverified either
# way without such machines, so a job of several of them is told once that they talk over their host network.
RDMA_MACHINES = ("a3-ultragpu-8g", "a4-highgpu-8g")


def rdma_note(hw: Hardware, replicas: int) -> str | None:
    """One line when a job of several machines that have GPUDirect-RDMA will not use it, else None."""
    if replicas < 2 or hw.machine_type not in RDMA_MACHINES:
        return None
    return (f"the {replicas} {hw.machine_type} machines talk over their host network: ftcli does not set up Vertex's "
            "GPUDirect-RDMA (README 'The CustomJob')")


def gpu_short_name(enum: str) -> str:
    """The name users type for an AcceleratorType enum name (NVIDIA_TESLA_A100 -> A100); an enum the catalog does
    not know (a job made elsewhere) loses only its NVIDIA_/TESLA_ prefix."""
    gpu = _BY_KEY.get(_key(enum))
    return gpu.name if gpu else enum.removeprefix("NVIDIA_").removeprefix("TESLA_")


def machine_label(machine_type: str, accelerator: str | None, count: int) -> str:
    """'8 x A100 on a2-highgpu-8g', or 'n1-standard-8 (CPU)'."""
    if not accelerator or not count:
        return f"{machine_type} (CPU)"
    return f"{count} x {gpu_short_name(accelerator)} on {machine_type}"


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

    key, count_text = _split(text)

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


_SHORT_COUNT = re.compile(r"[+-]?\d{1,2}(?:\.\d*)?|")  # what a count after an unknown name looks like


def _split(text: str) -> tuple[str, str | None]:
    """(GPU key, count text or None) of a --gpu value; UsageError naming what is unknown. An unknown name is named
    whole unless what follows its last x looks like a count: 'K80x2' names K80, 'RTX4090' names RTX4090."""
    key = _key(text)
    if key in _BY_KEY or key in _CPU_NAMES:
        return key, None
    head, sep, tail = key.rpartition("X")
    if sep and head and (head in _BY_KEY or head in _CPU_NAMES):
        return head, tail
    for name in (key, head if sep else None):
        if name in _NOT_OFFERED:
            raise UsageError(_NOT_OFFERED[name])
    counted = bool(sep and head and _SHORT_COUNT.fullmatch(tail))
    shown = text[:len(head)] if counted else text
    if close := _near_gpus(shown):
        count = f"x{tail}" if counted and tail.isdigit() else ""
        raise UsageError(f"unknown GPU {shown!r}; did you mean {' or '.join(g + count for g in close)}?")
    raise UsageError(f"unknown GPU {shown!r}; {_choices()}")


_MEMORY = re.compile(r"(\d+)GB$")


def _near_gpus(value: str) -> list[str]:
    """The GPUs an unknown --gpu name is a typo of (`A100-80`, `T5`, `tesla-t4`), by the one rule of "did you mean"
    (spelling.near, as for --region and --machine-type): counted against each GPU's short name, aliases and Vertex
    enum name, the enum name without its NVIDIA_ (NVIDIA_TESLA_) prefix too, and each of these without the memory's
    trailing GB (A100-80 is A100-80GB, H100-80GB is NVIDIA_H100_80GB). A name that states a memory size other than
    a GPU's is no typo of it: `A100_40GB` is one edit from A100-80GB, and "did you mean" would have sent someone
    who asked for 40 GB to a GPU of twice the memory, and price."""
    spellings: dict[str, str] = {}
    for g in _GPUS:
        names = [g.name, *g.aliases, g.enum, g.enum.removeprefix("NVIDIA_"), g.enum.removeprefix("NVIDIA_TESLA_")]
        for name in names:
            spellings.setdefault(name, g.name)
            spellings.setdefault(_MEMORY.sub(r"\1", name), g.name)
    given = _MEMORY.search(_key(value))
    memory = {g.name: m.group(1) for g in _GPUS if (m := _MEMORY.search(g.enum))}
    close = [g for g in dict.fromkeys(spellings[s] for s in near(value, spellings, n=len(spellings)))
             if given is None or memory.get(g) == given.group(1)]
    return close if len(close) <= 3 else []  # (as spelling.near: more, equally near, say nothing of which was meant)


def implied_count(spec: str, hw: Hardware) -> str | None:
    """A note when `--gpu NAME` without xN means more than one GPU (H200 and B200 come only in 8s; an a2/a3/g2
    --machine-type carries its own count): the bill is for all of them."""
    if hw.accelerator_type is None or hw.accelerator_count == 1 or _split(spec)[1] is not None:
        return None
    only = len(_BY_KEY[_key(hw.accelerator_type)].counts) == 1
    why = f"{hw.machine_type} comes only with {hw.accelerator_count}" if only else f"{hw.machine_type} carries " \
        f"{hw.accelerator_count}"
    return f"--gpu {spec.strip()} means {hw.accelerator_count} x {hw.gpu_name} ({why})"


def machines_for(hw: Hardware) -> tuple[str, ...]:
    """The machine types that carry `hw`'s GPUs in that count, ftcli's default first (() for a CPU machine)."""
    if hw.accelerator_type is None:  # a CPU machine (a GPU type comes with a count, see Hardware)
        return ()
    return _BY_KEY[_key(hw.accelerator_type)].machines.get(hw.accelerator_count, ())


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
        # Vertex's table, e.g. "you can use 2 or 4 NVIDIA_TESLA_T4 GPUs on a VM, but not 3" (configure-compute
        # page above, read 2026-11-27): a count outside it is refused whatever the machine.
        raise UsageError(f"{_comes_in(gpu)} (got {count})")
    return count


def _counts_text(counts: Iterable[int]) -> str:
    texts = [str(n) for n in counts]
    return texts[0] if len(texts) == 1 else f"{', '.join(texts[:-1])} or {texts[-1]}"


def _nearest(counts: Iterable[int], count: int) -> int:
    return min(counts, key=lambda n: (abs(n - count), n))


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
        takes = [n for n, ms in gpu.machines.items() if machine in ms]
        if takes:
            return (f"{machine} takes {_counts_text(takes)} {gpu.name} GPUs, not {count}: use --gpu "
                    f"{gpu.name}x{_nearest(takes, count)}, or {fix}")
        max_vcpus, max_gb = gpu.n1_limits[count]
        return (f"{gpu.name}x{count} allows an n1 machine of at most {max_vcpus} vCPUs and {max_gb} GB, not {machine} "
                f"({shape[0]} vCPUs, {shape[1]:g} GB): {fix}")
    return f"{gpu.name}x{count} runs on {', '.join(valid)}, not {machine}: {fix}"


def _cpu(machine: str | None) -> Hardware:
    if machine is None:
        return Hardware(_CPU_DEFAULT)
    if machine not in CPU_MACHINE_TYPES:
        gpu = next((g for g in _GPUS for ms in g.machines.values() if machine in ms), None)
        if gpu is not None:
            raise UsageError(f"{machine} is a GPU machine ({gpu.name}): give --gpu {gpu.name} with it, or leave "
                             f"--machine-type out for a CPU machine ({_CPU_DEFAULT})")
        # The same family's sizes first (e2-highcpu-8 -> e2-highcpu-16), else the nearest spellings.
        family = [m for m in CPU_MACHINE_TYPES if _family(m) == _family(machine)]
        size = machine.rsplit("-", 1)[-1]
        if family and size.isdigit():
            close = sorted(family, key=lambda m: abs(int(m.rsplit("-", 1)[1]) - int(size)))[:2]
        else:
            # a few keystrokes away, not merely of the same parts (`mars-standard` was "did you mean n4-standard-8,
            # n4-standard-4 or n4-standard-2", difflib's 0.6 cutoff: spelling.near says why)
            close = near(machine, CPU_MACHINE_TYPES)
        hint = f"did you mean {' or '.join(close)}?" if close else f"e.g. {_CPU_DEFAULT}, n2-standard-8, e2-standard-8"
        raise UsageError(f"--machine-type {machine} is not a machine type Vertex AI custom training offers; {hint} "
                         f"(or leave it out for {_CPU_DEFAULT})")
    return Hardware(machine)


# --- machine families: boot disk and provisioning ---------------------------------------------------------

# DiskSpec.bootDiskType takes pd-ssd, pd-standard or hyperdisk-balanced (DiskSpec reference,
# https://docs.cloud.google.com/vertex-ai/docs/reference/rest/v1/DiskSpec, read 2026-11-26). Its default depends on
# the machine: "The default value is pd-ssd (hyperdisk-balanced is the default for a3-ultragpu-8g and
# a4-highgpu-8g)" (configure-compute page above, read 2026-11-27; the DiskSpec reference says only "for A3U
# machines"), so ftcli always sets it rather than lean on a default that moves. A3 Ultra (H200)
# and A4 (B200) take Hyperdisk only: "Hyperdisk Balanced: this is the only disk type that is supported for the
# boot disk" (Compute Engine "Accelerator-optimized machine family",
# https://docs.cloud.google.com/compute/docs/accelerator-optimized-machines, updated 2026-04-13).
# G4 (RTX PRO 6000) too: "You can't use Persistent Disk (regional or zonal) on an instance that uses a G4 machine
# type" and "Hyperdisk Balanced (hyperdisk-balanced): this is the only disk type that is supported for the boot disk"
# (same page, "Supported disk types for G4 instances", updated 2026-04-13, read 2026-11-27), while Vertex's default
# is pd-ssd for every machine but A3 Ultra and A4: a G4 job must name hyperdisk-balanced. N4 (CPU) alike: "N4 VMs
# supports only the NVMe disk interface and can use the following Hyperdisk block storage: Hyperdisk Balanced ...",
# "N4 doesn't support Persistent Disk or Local SSD" (Compute Engine "General-purpose machine family",
# https://docs.cloud.google.com/compute/docs/general-purpose-machines, "Supported disk types for N4", read
# 2026-11-27).
# G2, A3 High and A3 Mega take no pd-standard (same page's disk tables); a2/a3-high/a3-mega and n1 take pd-ssd.
# 100 GB holds the image, model and HF cache.
HYPERDISK_ONLY = ("a3-ultragpu", "a4-highgpu", "g4-standard", "n4-standard", "n4-highmem", "n4-highcpu")
BOOT_DISK_GB = 100


def boot_disk(machine_type: str) -> dict[str, object]:
    """The diskSpec for a machine type (REST JSON)."""
    kind = "hyperdisk-balanced" if _family(machine_type) in HYPERDISK_ONLY else "pd-ssd"
    return {"bootDiskType": kind, "bootDiskSizeGb": BOOT_DISK_GB}


# G4 machines with several GPUs let them exchange data over PCIe directly, once NCCL is told to: "For G4 instances
# with 2 or 4 GPUs (g4-standard-96, g4-standard-192): set NCCL_P2P_LEVEL=PHB", "For G4 instances with 8 GPUs
# (g4-standard-384): set NCCL_P2P_LEVEL=SYS" (Compute Engine "Accelerator-optimized machine family", "GPU
# peer-to-peer (P2P) communication", read 2026-11-27). The trainer's workers all-reduce through NCCL.
_MACHINE_ENV: dict[str, tuple[tuple[str, str], ...]] = {
    "g4-standard-96": (("NCCL_P2P_LEVEL", "PHB"),), "g4-standard-192": (("NCCL_P2P_LEVEL", "PHB"),),
    "g4-standard-384": (("NCCL_P2P_LEVEL", "SYS"),),
}


def machine_env(machine_type: str) -> tuple[tuple[str, str], ...]:
    """Environment variables Google documents for running on `machine_type` (none for most machines)."""
    return _MACHINE_ENV.get(machine_type, ())


# Documented as ambiguous for Vertex: its configure-compute page (above, read 2026-11-27) lists a3-highgpu-1g/2g/4g
# without this condition; Compute Engine's page is the one that states it, and ftcli keeps it.
# Machines that Compute Engine does not sell on demand (same page as above): "When provisioning a3-highgpu-1g,
# a3-highgpu-2g, or a3-highgpu-4g machine types, you must create instances by using Spot VMs or Flex-start
# VMs"; A3 Ultra and A4: "you must reserve capacity ..., use Spot VMs, use Flex-start VMs" (or a MIG resize
# request, which Vertex does not use). G4 (RTX PRO 6000) is taken on demand: configure-compute (read 2026-11-27)
# marks B200, H100 Mega and H200 "*" (capacity through reservations or Spot recommended) and GB200 "+" (reservations
# required), not NVIDIA_RTX_PRO_6000; Compute Engine's consumption table lost its marks in the stored copy.
NOT_ON_DEMAND: dict[str, tuple[str, ...]] = {
    "a3-highgpu-1g": ("spot", "flex-start"), "a3-highgpu-2g": ("spot", "flex-start"),
    "a3-highgpu-4g": ("spot", "flex-start"),
    "a3-ultragpu-8g": ("spot", "flex-start", "reservation"), "a4-highgpu-8g": ("spot", "flex-start", "reservation"),
}

# Flex-start (Dynamic Workload Scheduler) on Vertex: "requests L4, A100, H100, H200, or B200 GPUs", a timeout of
# "7 days or less", and "the same machine configuration for all worker pools" ("Schedule training jobs based on
# resource availability", https://docs.cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws, read
# 2026-11-26). Documented as ambiguous: the page names H100, not H100 Mega, while Compute Engine counts a3-megagpu-8g
# as an H100 machine ("Accelerator-optimized machine family", above): a3-megagpu-8g is left out until Vertex says so.
FLEX_START_GPUS = frozenset({"L4", "A100", "A100-80GB", "H100", "H200", "B200"})
FLEX_START_MAX_TIMEOUT_S = 7 * 24 * 3600
# ReservationAffinity: "To target a SPECIFIC_RESERVATION by name, use compute.googleapis.com/reservation-name as
# the key"; not with Flex-start ("Use reservations with training",
# https://docs.cloud.google.com/vertex-ai/docs/training/use-reservations, read 2026-11-26). Its values "must be the
# full resource name of the reservation or reservation block" (MachineSpec.reservationAffinity.values in the
# aiplatform API reference as Google's MCP tools reference renders it, https://docs.cloud.google.com/gemini-enterprise-
# agent-platform/reference/mcp/tools_list/colab_enterprise_create_notebook_runtime_template, updated 2026-04-07, read
# 2026-11-27; older generated client docs say only "of the reservation"): projects/P/zones/Z/reservations/R, or
# .../reservations/R/reservationBlocks/B (a block of a reservation, same zone).
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
_CE_NAME = r"[a-z]([-a-z0-9]*[a-z0-9])?"  # a Compute Engine resource name (RFC 1035)
RESERVATION_NAME = re.compile(rf"projects/[^/]+/zones/[a-z]+-[a-z]+\d+-[a-z]/reservations/{_CE_NAME}"
                              rf"(/reservationBlocks/{_CE_NAME})?")


def reservation_region_problem(reservation: str | None, region: str) -> str | None:
    """A reservation is zonal, and a zone's name is its region's and a letter (us-central1-b): a job can only take
    one in a zone of its own region."""
    if not reservation or not RESERVATION_NAME.fullmatch(reservation):
        return None
    zone = reservation.split("/")[3]
    if zone.rsplit("-", 1)[0] == region:
        return None
    return (f"--reservation is in {zone}, outside the job's region {region}: give --region {zone.rsplit('-', 1)[0]}, "
            "or a reservation in a zone of that region")


def provisioning_problems(hw: Hardware, *, spot: bool, flex_start: bool, reservation: str | None,
                          timeout_s: int, reduction_server: int) -> list[str]:
    """What is wrong with how the machines are to be obtained (one line each, with the fix)."""
    problems = []
    chosen = [n for n, on in (("--spot", spot), ("--flex-start", flex_start), ("--reservation", reservation))
              if on]
    if len(chosen) > 1:
        problems.append(f"{' and '.join(chosen)} exclude each other: pick one way to get the machines")
    if flex_start:
        if hw.gpu_name not in FLEX_START_GPUS:
            problems.append(f"--flex-start takes {', '.join(sorted(FLEX_START_GPUS))} GPUs, not "
                            f"{hw.gpu_name or 'a CPU machine'}: drop --flex-start or pick one of those")
        if timeout_s > FLEX_START_MAX_TIMEOUT_S:
            # in seconds: 7 days and a minute said "--timeout is 168 h", the limit itself
            problems.append(f"--flex-start jobs run at most 7 days ({FLEX_START_MAX_TIMEOUT_S}s); --timeout is "
                            f"{timeout_s}s: give --timeout 7d or less")
        if reduction_server:
            problems.append("--flex-start needs the same machine in every worker pool, and Reduction Server "
                            "replicas run on n1-highcpu-16: drop --reduction-server or --flex-start")
    if reservation and reservation != "any" and not RESERVATION_NAME.fullmatch(reservation):
        problems.append(f"--reservation {reservation!r}: give the full name "
                        "projects/PROJECT/zones/ZONE/reservations/NAME[/reservationBlocks/BLOCK] (Compute Engine "
                        "names: lowercase letters, digits and '-'), or 'any' for any matching reservation")
    ways = NOT_ON_DEMAND.get(hw.machine_type)
    picked = [w for w, on in (("spot", spot), ("flex-start", flex_start), ("reservation", reservation)) if on]
    if ways and not any(w in ways for w in picked):
        flags = " or ".join("--reservation NAME" if w == "reservation" else f"--{w}" for w in ways)
        how = "on demand" if not picked else f"with --{picked[0]}"
        problems.append(f"{hw.machine_type} ({hw.summary}) is not sold {how}: use {flags}")
    return problems


# --- Reduction Server ----------------------------------------------------------------------------------------

# "Distributed training" (https://docs.cloud.google.com/vertex-ai/docs/training/distributed-training, read
# 2026-11-26): the image is in the us, europe and asia multi-regions ("Choosing the multi-region closest to where
# you are running custom training might reduce latency"); "We recommend that you use the n1-highcpu-16 machine
# type for Reduction Server nodes"; GPU workers need NCCL and the google-reduction-server plugin.
REDUCTION_SERVER_IMAGE = "{mirror}-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
REDUCTION_SERVER_MACHINE = "n1-highcpu-16"


def image_mirror(region: str) -> str:
    """The Artifact Registry multi-region nearest to `region`: us, europe or asia. The Middle East (me-west1 Tel Aviv,
    me-central1 Doha, me-central2 Dammam) and africa-south1 (Johannesburg) are nearer Europe than the US (the same
    order as ftcli.regions' _NEXT_AREAS): they took the us image."""
    geo = region.strip().lower().split("-", 1)[0]
    if geo in ("europe", "me", "africa"):
        return "europe"
    if geo in ("asia", "australia"):
        return "asia"
    return "us"


def reduction_server_image(region: str) -> str:
    return REDUCTION_SERVER_IMAGE.format(mirror=image_mirror(region))


# --- what a job may cost -------------------------------------------------------------------------------------

# Vertex AI bills custom training per machine-hour, the machine's vCPUs and memory plus each attached GPU ("Vertex
# AI pricing", https://cloud.google.com/vertex-ai/pricing, "Custom-trained models"). ftcli ships no copy of that
# table: the stored copies of the page hold only its opening (read 2026-11-26, also the ?hl= translations and the
# Compute Engine GPU pricing pages), and every value mirroring Google here must say where and when it was read.
# So `estimate` always gives the shape of the bill (machines, GPUs, hours at most), and the amounts come from the
# user's own price file (prices.py: their rates, their source, their date).
PRICE_PAGE = "https://cloud.google.com/vertex-ai/pricing"


@dataclass(frozen=True)
class PriceTable:
    """Vertex AI custom-training prices in USD per hour, for one region: a machine type (its vCPUs and memory) and
    one GPU (by the names `--gpu` takes), on-demand."""

    source: str  # the page the numbers were read from
    read: str  # when (YYYY-MM-DD)
    region: str
    machines: Mapping[str, float]
    gpus: Mapping[str, float]

    def per_hour(self, parts: Sequence[tuple[int, str, str | None, int]]) -> tuple[float | None, str | None]:
        """USD an hour for `parts` (count, machine type, GPU name or None, GPUs each), or None and which rates the
        table lacks."""
        unknown = [m for _, m, _, _ in parts if m not in self.machines]
        unknown += [g for _, _, g, _ in parts if g and g not in self.gpus]
        if unknown:
            return None, f"no {self.region} rate for {', '.join(dict.fromkeys(unknown))} in the price file"
        return sum(n * (self.machines[m] + (self.gpus[g] * k if g else 0.0)) for n, m, g, k in parts), None


@dataclass(frozen=True)
class Estimate:
    """What a job asks for, per hour and at most (its timeout); the amounts when the price table has them."""

    parts: tuple[tuple[int, str, str | None, int], ...]  # (count, machine type, GPU name, GPUs each)
    timeout_s: int
    per_hour: float | None = None  # USD
    missing: str | None = None  # why there is no amount
    table: PriceTable | None = None

    @property
    def gpu_hours(self) -> float:
        return sum(n * gpus for n, _, gpu, gpus in self.parts if gpu) * self.timeout_s / 3600

    @property
    def at_most(self) -> float | None:
        return None if self.per_hour is None else self.per_hour * self.timeout_s / 3600

    @property
    def shape(self) -> str:
        """E.g. '2 x (8 x A100 on a2-highgpu-8g) + 2 x n1-highcpu-16'."""
        items = []
        for n, machine, gpu, gpus in self.parts:
            one = f"{gpus} x {gpu} on {machine}" if gpu else machine
            items.append(one if n == 1 else f"{n} x ({one})" if gpu else f"{n} x {one}")
        return " + ".join(items)


def estimate(hw: Hardware, *, replicas: int, reduction_server: int, timeout_s: int, region: str,
             prices: PriceTable | None = None, missing: str | None = None) -> Estimate:
    """The bill's shape for `replicas` machines of `hw` (and Reduction Server machines) up to `timeout_s`, and its
    amount per hour and at most when `prices` covers every part (`missing`: why there is no table)."""
    parts = [(replicas, hw.machine_type, hw.gpu_name, hw.accelerator_count)]
    if reduction_server:
        parts.append((reduction_server, REDUCTION_SERVER_MACHINE, None, 0))
    if prices is None:
        return Estimate(tuple(parts), timeout_s, missing=missing or "no price table")
    assert prices.region == region, (prices.region, region)  # prices.for_region(region) gives the region's table
    per_hour, why = prices.per_hour(parts)
    if per_hour is None:
        return Estimate(tuple(parts), timeout_s, missing=why, table=prices)
    return Estimate(tuple(parts), timeout_s, per_hour=per_hour, table=prices)
