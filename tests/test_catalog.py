"""The GPU catalog: every supported GPU and count, every rejected combination, machine-type overrides, compute
capabilities, boot disks, provisioning rules, the Reduction Server image."""

from __future__ import annotations

import pytest

from ftcli import catalog
from ftcli.catalog import (
    REDUCTION_SERVER_MACHINE,
    Hardware,
    boot_disk,
    gpu_names,
    provisioning_problems,
    reduction_server_image,
    resolve_gpu,
)
from ftcli.errors import UsageError

# spec → (default machine type, accelerator enum, count): written out, not derived from the catalog's table.
DEFAULTS = {
    "T4": ("n1-standard-8", "NVIDIA_TESLA_T4", 1),
    "t4x1": ("n1-standard-8", "NVIDIA_TESLA_T4", 1),
    "t4x2": ("n1-standard-16", "NVIDIA_TESLA_T4", 2),
    "T4x4": ("n1-standard-32", "NVIDIA_TESLA_T4", 4),
    "P4": ("n1-standard-8", "NVIDIA_TESLA_P4", 1),
    "P4x2": ("n1-standard-16", "NVIDIA_TESLA_P4", 2),
    "P4x4": ("n1-standard-32", "NVIDIA_TESLA_P4", 4),
    "P100": ("n1-standard-8", "NVIDIA_TESLA_P100", 1),
    "P100x2": ("n1-standard-16", "NVIDIA_TESLA_P100", 2),
    "P100x4": ("n1-standard-32", "NVIDIA_TESLA_P100", 4),
    "V100": ("n1-standard-8", "NVIDIA_TESLA_V100", 1),
    "V100x2": ("n1-standard-16", "NVIDIA_TESLA_V100", 2),
    "V100x4": ("n1-standard-32", "NVIDIA_TESLA_V100", 4),
    "V100x8": ("n1-standard-64", "NVIDIA_TESLA_V100", 8),
    "L4": ("g2-standard-8", "NVIDIA_L4", 1),
    "L4x2": ("g2-standard-24", "NVIDIA_L4", 2),
    "L4x4": ("g2-standard-48", "NVIDIA_L4", 4),
    "l4X8": ("g2-standard-96", "NVIDIA_L4", 8),
    "A100": ("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1),
    "A100x2": ("a2-highgpu-2g", "NVIDIA_TESLA_A100", 2),
    "A100x4": ("a2-highgpu-4g", "NVIDIA_TESLA_A100", 4),
    "A100x8": ("a2-highgpu-8g", "NVIDIA_TESLA_A100", 8),
    "A100x16": ("a2-megagpu-16g", "NVIDIA_TESLA_A100", 16),
    "A100-80GB": ("a2-ultragpu-1g", "NVIDIA_A100_80GB", 1),
    "A100-80GBx2": ("a2-ultragpu-2g", "NVIDIA_A100_80GB", 2),
    "a100-80gbx4": ("a2-ultragpu-4g", "NVIDIA_A100_80GB", 4),
    "A100_80GBx8": ("a2-ultragpu-8g", "NVIDIA_A100_80GB", 8),
    "H100": ("a3-highgpu-1g", "NVIDIA_H100_80GB", 1),
    "H100x2": ("a3-highgpu-2g", "NVIDIA_H100_80GB", 2),
    "H100x4": ("a3-highgpu-4g", "NVIDIA_H100_80GB", 4),
    "H100x8": ("a3-highgpu-8g", "NVIDIA_H100_80GB", 8),
    "H100-MEGA": ("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", 8),
    "h100-megax8": ("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", 8),
    "H200": ("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8),
    "H200x8": ("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8),
    "B200": ("a4-highgpu-8g", "NVIDIA_B200", 8),
    "b200x8": ("a4-highgpu-8g", "NVIDIA_B200", 8),
    # G4: one machine per count, named by its vCPUs (48 per GPU)
    "RTX-PRO-6000": ("g4-standard-48", "NVIDIA_RTX_PRO_6000", 1),
    "RTX-PRO-6000x2": ("g4-standard-96", "NVIDIA_RTX_PRO_6000", 2),
    "rtx-pro-6000x4": ("g4-standard-192", "NVIDIA_RTX_PRO_6000", 4),
    "RTXPRO6000x8": ("g4-standard-384", "NVIDIA_RTX_PRO_6000", 8),
    "rtx pro 6000": ("g4-standard-48", "NVIDIA_RTX_PRO_6000", 1),
    "rtx_pro_6000x2": ("g4-standard-96", "NVIDIA_RTX_PRO_6000", 2),
    # The Vertex enum names themselves.
    "NVIDIA_TESLA_T4": ("n1-standard-8", "NVIDIA_TESLA_T4", 1),
    "NVIDIA_L4x2": ("g2-standard-24", "NVIDIA_L4", 2),
    "nvidia_tesla_v100x8": ("n1-standard-64", "NVIDIA_TESLA_V100", 8),
    "NVIDIA_A100_80GBx4": ("a2-ultragpu-4g", "NVIDIA_A100_80GB", 4),
    "NVIDIA_H100_MEGA_80GB": ("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", 8),
    "NVIDIA_H200_141GB": ("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8),
    " NVIDIA_B200 ": ("a4-highgpu-8g", "NVIDIA_B200", 8),
    "NVIDIA_RTX_PRO_6000x4": ("g4-standard-192", "NVIDIA_RTX_PRO_6000", 4),
}


@pytest.mark.parametrize("spec", DEFAULTS)
def test_defaults(spec):
    machine, enum, count = DEFAULTS[spec]
    assert resolve_gpu(spec) == Hardware(machine, enum, count)


@pytest.mark.parametrize("spec", ["none", "cpu", "NONE", " Cpu "])
def test_cpu_default(spec):
    hw = resolve_gpu(spec)
    assert hw == Hardware("n1-standard-8", None, 0)
    assert not hw.gpu


@pytest.mark.parametrize("machine", ["n1-standard-4", "n1-highmem-16", "n2-standard-32", "e2-highcpu-16",
                                     "c2-standard-60", "N2-HIGHMEM-8", "m1-ultramem-40", "e2-standard-4",
                                     "n4-standard-2", "n4-highcpu-80"])
def test_cpu_machine_override(machine):
    assert resolve_gpu("none", machine) == Hardware(machine.lower())


def _every_pair():
    for gpu in catalog._GPUS:
        for count, machines in gpu.machines.items():
            for machine in machines:
                yield pytest.param(gpu.name, count, machine, gpu.enum, id=f"{gpu.name}x{count}-{machine}")


@pytest.mark.parametrize(("name", "count", "machine", "enum"), list(_every_pair()))
def test_every_listed_pair_resolves(name, count, machine, enum):
    assert resolve_gpu(f"{name}x{count}", machine) == Hardware(machine, enum, count)


@pytest.mark.parametrize(("spec", "machine", "expected"), [
    ("T4", "n1-highmem-8", Hardware("n1-highmem-8", "NVIDIA_TESLA_T4", 1)),
    ("T4x4", "n1-standard-96", Hardware("n1-standard-96", "NVIDIA_TESLA_T4", 4)),
    ("T4", "n1-highcpu-16", Hardware("n1-highcpu-16", "NVIDIA_TESLA_T4", 1)),
    ("T4x2", "n1-highcpu-32", Hardware("n1-highcpu-32", "NVIDIA_TESLA_T4", 2)),
    ("V100x8", "n1-highmem-96", Hardware("n1-highmem-96", "NVIDIA_TESLA_V100", 8)),
    ("V100", "n1-highmem-8", Hardware("n1-highmem-8", "NVIDIA_TESLA_V100", 1)),
    ("L4", "g2-standard-4", Hardware("g2-standard-4", "NVIDIA_L4", 1)),
    ("L4x1", " G2-STANDARD-32 ", Hardware("g2-standard-32", "NVIDIA_L4", 1)),
    ("A100-80GBx2", "a2-ultragpu-2g", Hardware("a2-ultragpu-2g", "NVIDIA_A100_80GB", 2)),
    # Without a count, a machine type that fixes one gives it.
    ("A100", "a2-highgpu-4g", Hardware("a2-highgpu-4g", "NVIDIA_TESLA_A100", 4)),
    ("A100", "a2-megagpu-16g", Hardware("a2-megagpu-16g", "NVIDIA_TESLA_A100", 16)),
    ("H100", "a3-highgpu-8g", Hardware("a3-highgpu-8g", "NVIDIA_H100_80GB", 8)),
    ("L4", "g2-standard-48", Hardware("g2-standard-48", "NVIDIA_L4", 4)),
    ("H200", "a3-ultragpu-8g", Hardware("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8)),
])
def test_machine_type_override(spec, machine, expected):
    assert resolve_gpu(spec, machine) == expected


REJECTED = [
    # (spec, machine type, the whole message or a part of it)
    ("T4x3", None, "T4 comes in counts 1, 2, 4 (got 3)"),
    ("T4x8", None, "T4 comes in counts 1, 2, 4 (got 8)"),
    ("P100x8", None, "P100 comes in counts 1, 2, 4 (got 8)"),
    ("P4x8", None, "P4 comes in counts 1, 2, 4 (got 8)"),
    ("V100x3", None, "V100 comes in counts 1, 2, 4, 8 (got 3)"),
    ("L4x3", None, "L4 comes in counts 1, 2, 4, 8 (got 3)"),
    ("A100x32", None, "A100 comes in counts 1, 2, 4, 8, 16 (got 32)"),
    ("A100-80GBx16", None, "A100-80GB comes in counts 1, 2, 4, 8 (got 16)"),
    ("H200x4", None, "H200 comes only in count 8 (got 4)"),
    ("H100-MEGAx4", None, "H100-MEGA comes only in count 8 (got 4)"),
    ("B200x1", None, "B200 comes only in count 8 (got 1)"),
    ("RTX-PRO-6000x3", None, "RTX-PRO-6000 comes in counts 1, 2, 4, 8 (got 3)"),
    ("RTX-PRO-6000x2", "g4-standard-48", "g4-standard-48 carries 1 RTX-PRO-6000 GPUs, not 2"),
    ("RTX-PRO-6000", "g2-standard-48", "RTX-PRO-6000 runs on g4-standard-* machines, not g2-standard-48"),
    ("RTX-PRO-6000", "g4-standard-24", "RTX-PRO-6000x1 runs on g4-standard-48, not g4-standard-24"),  # a 1/2 GPU
    ("T4x-1", None, "T4 comes in counts 1, 2, 4 (got -1)"),
    ("T4x0", None, "--gpu T4x0 asks for 0 GPUs; T4 comes in counts 1, 2, 4, or use --gpu none for a CPU machine"),
    ("NVIDIA_L4x0", None, "asks for 0 GPUs"),
    ("T4xabc", None, "the GPU count in --gpu T4xabc must be a whole number; T4 comes in counts 1, 2, 4"),
    ("T4x", None, "must be a whole number"),
    ("T4x1.5", None, "must be a whole number"),
    ("T4x2x2", None, "unknown GPU 'T4x2'"),
    ("M60", None, "unknown GPU 'M60'; choose one of T4, P4, L4, P100, V100, A100, A100-80GB, RTX-PRO-6000, H100, "
                  "H100-MEGA, H200, B200, or none (add xN for N GPUs, e.g. L4x2)"),
    ("K80x2", None, "K80 is no longer offered for Vertex AI training (configure-compute's GPU list does not name "
                    "it); use --gpu T4 or L4"),
    ("NVIDIA_TESLA_K80", None, "K80 is no longer offered"),
    ("GB200", None, "GB200 (a4x-highgpu-4g) is not offered by ftcli: its machines have Arm CPUs (NVIDIA Grace)"),
    ("nvidia_gb200x4", None, "GB200 (a4x-highgpu-4g) is not offered by ftcli"),
    ("x2", None, "unknown GPU 'x2'"),
    ("2xT4", None, "unknown GPU '2xT4'"),
    ("RTX4090", None, "unknown GPU 'RTX4090'; choose one of"),  # named whole, not 'RT' (an x inside the name)
    ("rtx4090x2", None, "unknown GPU 'rtx4090'"),
    ("", None, "--gpu is empty; choose one of"),
    ("nonex2", None, "--gpu none takes no count (got nonex2)"),
    # Machine types from the wrong family.
    ("L4", "n1-standard-8",
     "L4 runs on g2-standard-* machines, not n1-standard-8: try --machine-type g2-standard-8 or leave it out"),
    ("T4", "g2-standard-8", "T4 runs on n1-standard-* or n1-highmem-* or n1-highcpu-* machines, not g2-standard-8"),
    ("A100", "a2-ultragpu-1g", "A100 runs on a2-highgpu-* or a2-megagpu-* machines, not a2-ultragpu-1g: "
                               "try --machine-type a2-highgpu-1g or leave it out"),
    ("H100x8", "a3-megagpu-8g", "H100 runs on a3-highgpu-* machines, not a3-megagpu-8g"),
    ("A100x8", "n2-standard-8", "A100 runs on a2-highgpu-* or a2-megagpu-* machines, not n2-standard-8"),
    # The right family, the wrong count.
    ("A100x2", "a2-highgpu-4g", "a2-highgpu-4g carries 4 A100 GPUs, not 2: use --gpu A100x4, "
                                "or try --machine-type a2-highgpu-2g or leave it out"),
    ("L4x2", "g2-standard-8", "g2-standard-8 carries 1 L4 GPUs, not 2: use --gpu L4x1"),
    ("L4x1", "g2-standard-24", "g2-standard-24 carries 2 L4 GPUs, not 1"),
    ("A100x2", "a2-highgpu-3g", "A100x2 runs on a2-highgpu-2g, not a2-highgpu-3g"),
    # N1 limits: too many vCPUs (or too much memory) for the attached GPUs; shapes Vertex does not offer.
    # A machine that takes the GPU in other counts names them (Vertex's table per machine row).
    ("V100", "n1-standard-16", "n1-standard-16 takes 2, 4 or 8 V100 GPUs, not 1: use --gpu V100x2, or try "
                               "--machine-type n1-standard-8 or leave it out"),
    ("T4", "n1-standard-64", "n1-standard-64 takes 4 T4 GPUs, not 1: use --gpu T4x4"),
    # Vertex's table: T4 x1 not on n1-*-32 (Compute Engine alone would allow it).
    ("T4", "n1-standard-32", "n1-standard-32 takes 2 or 4 T4 GPUs, not 1: use --gpu T4x2, or try "
                             "--machine-type n1-standard-8 or leave it out"),
    ("T4", "n1-highcpu-32", "n1-highcpu-32 takes 2 or 4 T4 GPUs, not 1"),
    ("V100x2", "n1-standard-32", "n1-standard-32 takes 4 or 8 V100 GPUs, not 2: use --gpu V100x4"),
    ("P100x4", "n1-highmem-64", "P100x4 allows an n1 machine of at most 64 vCPUs and 208 GB, not n1-highmem-64 "
                                "(64 vCPUs, 416 GB)"),
    ("T4", "n1-standard-2", "n1-standard-2 is not an n1 machine type Vertex training offers"),
    ("T4", "n1-standard-7", "n1-standard-7 is not an n1 machine type Vertex training offers"),
    # not n1-KIND-VCPUS at all, though of an n1 family: no shape is read into it
    ("T4", "n1-standard-eight", "n1-standard-eight is not an n1 machine type Vertex training offers: try "
                                "--machine-type n1-standard-8 or leave it out"),
    ("T4", "n1-standard-8-x", "n1-standard-8-x is not an n1 machine type Vertex training offers"),
    # A CPU job on a GPU machine.
    ("none", "a2-highgpu-1g", "a2-highgpu-1g is a GPU machine (A100): give --gpu A100 with it, or leave "
                              "--machine-type out for a CPU machine (n1-standard-8)"),
    ("cpu", "g2-standard-8", "g2-standard-8 is a GPU machine (L4): give --gpu L4 with it"),
    ("none", "n1-ultramem-40", "--machine-type n1-ultramem-40 is not a machine type Vertex AI custom training "
                               "offers; did you mean m1-ultramem-40"),
    # Only the shapes configure-compute lists (read 2026-11-27): the old regex let these through.
    ("none", "e2-highcpu-8", "--machine-type e2-highcpu-8 is not a machine type Vertex AI custom training offers; "
                             "did you mean e2-highcpu-16 or e2-highcpu-32"),
    ("none", "n2-standard-2", "--machine-type n2-standard-2 is not a machine type Vertex AI custom training offers"),
    ("none", "n1-standard-2", "not a machine type Vertex AI custom training offers"),
    ("none", "c2-highmem-8", "not a machine type Vertex AI custom training offers"),
    ("none", "e2-standard-9999", "not a machine type Vertex AI custom training offers"),
    # the two nearest sizes, not more
    ("none", "n4-standard-96", "not a machine type Vertex AI custom training offers; did you mean n4-standard-80 or "
                               "n4-standard-64? (or leave it out for n1-standard-8)"),
    # A typo keeps its suggestion; a name merely built of the same parts gets none: difflib's 0.6 cutoff answered
    # mars-standard with "did you mean n4-standard-8 or n4-standard-4 or n4-standard-2".
    ("none", "n1-standrd-8", "offers; did you mean n1-standard-8? (or leave it out for n1-standard-8)"),
    ("none", "mars-standard", "offers; e.g. n1-standard-8, n2-standard-8, e2-standard-8 (or leave it out"),
    ("none", "standard", "offers; e.g. n1-standard-8, n2-standard-8, e2-standard-8 (or leave it out"),
]


@pytest.mark.parametrize(("spec", "machine", "message"), REJECTED)
def test_rejected(spec, machine, message):
    with pytest.raises(UsageError) as info:
        resolve_gpu(spec, machine)
    text = info.value.message
    assert message in text
    assert "\n" not in text and not info.value.problems


def test_gpu_names():
    names = gpu_names()
    assert names == ["T4", "P4", "L4", "P100", "V100", "A100", "A100-80GB", "RTX-PRO-6000", "H100", "H100-MEGA",
                     "H200", "B200"]
    assert all(resolve_gpu(n).gpu for n in names)


def test_n1_defaults_within_limits():
    # `_n1` puts the default first only when it fits the count's limits.
    for gpu in catalog._GPUS:
        if not gpu.fixed:
            for count, machines in gpu.machines.items():
                assert machines[0] == catalog._N1_DEFAULT[count], (gpu.name, count)


# Vertex's "Valid numbers of GPUs for each machine type" for the N1 GPUs, cell by cell ("Configure compute resources
# for custom training", https://docs.cloud.google.com/vertex-ai/docs/training/configure-compute, read 2026-11-26;
# columns P4, P100, T4, V100; an empty cell is no valid count).
VERTEX_N1_TABLE = {
    "n1-standard-4": ("1,2,4", "1,2,4", "1,2,4", "1,2,4,8"),
    "n1-standard-8": ("1,2,4", "1,2,4", "1,2,4", "1,2,4,8"),
    "n1-standard-16": ("1,2,4", "1,2,4", "1,2,4", "2,4,8"),
    "n1-standard-32": ("2,4", "2,4", "2,4", "4,8"),
    "n1-standard-64": ("4", "", "4", "8"),
    "n1-standard-96": ("4", "", "4", "8"),
    "n1-highmem-2": ("1,2,4", "1,2,4", "1,2,4", "1,2,4,8"),
    "n1-highmem-4": ("1,2,4", "1,2,4", "1,2,4", "1,2,4,8"),
    "n1-highmem-8": ("1,2,4", "1,2,4", "1,2,4", "1,2,4,8"),
    "n1-highmem-16": ("1,2,4", "1,2,4", "1,2,4", "2,4,8"),
    "n1-highmem-32": ("2,4", "2,4", "2,4", "4,8"),
    "n1-highmem-64": ("4", "", "4", "8"),
    "n1-highmem-96": ("4", "", "4", "8"),
    "n1-highcpu-16": ("1,2,4", "1,2,4", "1,2,4", "2,4,8"),
    "n1-highcpu-32": ("2,4", "2,4", "2,4", "4,8"),
    "n1-highcpu-64": ("4", "4", "4", "8"),
    "n1-highcpu-96": ("4", "", "4", "8"),
}


@pytest.mark.parametrize(("column", "gpu"), list(enumerate(["P4", "P100", "T4", "V100"])))
def test_n1_machines_are_vertex_table(column, gpu):
    expected = {(machine, int(n)) for machine, cells in VERTEX_N1_TABLE.items()
                for n in cells[column].split(",") if n}
    ours = {(machine, count) for count, machines in catalog._BY_KEY[gpu].machines.items() for machine in machines}
    assert ours == expected


def test_accelerator_enum_names_exist():
    from google.cloud.aiplatform_v1.types import AcceleratorType

    for gpu in catalog._GPUS:
        assert gpu.enum in AcceleratorType.__members__, gpu.enum


def test_hardware_rejects_inconsistent_accelerators():
    with pytest.raises(ValueError):
        Hardware("n1-standard-8", "NVIDIA_TESLA_T4", 0)  # the SDK trap: a GPU type with no GPU
    with pytest.raises(ValueError):
        Hardware("n1-standard-8", None, 2)
    with pytest.raises(ValueError):
        Hardware("n1-standard-8", "NVIDIA_TESLA_T4", -1)


def test_hardware_summary():
    assert resolve_gpu("L4x2").summary == "2 x NVIDIA_L4 on g2-standard-24"
    assert resolve_gpu("none").summary == "n1-standard-8 (CPU)"


# Written out from NVIDIA's compute-capability tables, not derived from the catalog.
CC = {"T4": "7.5", "P4": "6.1", "L4": "8.9", "P100": "6.0", "V100": "7.0", "A100": "8.0", "A100-80GB": "8.0",
      "RTX-PRO-6000": "12.0", "H100": "9.0", "H100-MEGA": "9.0", "H200": "9.0", "B200": "10.0"}


@pytest.mark.parametrize("name", CC)
def test_compute_capability(name):
    hw = resolve_gpu(name)
    assert hw.gpu_name == name and hw.compute_capability == CC[name]


def test_cpu_has_no_compute_capability():
    assert resolve_gpu("none").compute_capability is None and resolve_gpu("none").gpu_name is None


@pytest.mark.parametrize(("machine", "disk"), [
    ("a3-ultragpu-8g", "hyperdisk-balanced"), ("a4-highgpu-8g", "hyperdisk-balanced"),
    ("g4-standard-48", "hyperdisk-balanced"), ("g4-standard-384", "hyperdisk-balanced"),
    ("a3-highgpu-8g", "pd-ssd"), ("a3-megagpu-8g", "pd-ssd"), ("a2-highgpu-1g", "pd-ssd"), ("g2-standard-8", "pd-ssd"),
    ("n1-standard-8", "pd-ssd"), ("n1-highcpu-16", "pd-ssd"), ("n2-standard-8", "pd-ssd"),
    ("n4-standard-8", "hyperdisk-balanced"), ("n4-highcpu-80", "hyperdisk-balanced"),
])
def test_boot_disk(machine, disk):
    assert boot_disk(machine) == {"bootDiskType": disk, "bootDiskSizeGb": 100}


def _provisioning(spec, **kw):
    args = dict(spot=False, flex_start=False, reservation=None, timeout_s=3600, reduction_server=0) | kw
    return provisioning_problems(resolve_gpu(spec), **args)


@pytest.mark.parametrize("spec", ["T4", "L4", "A100x8", "RTX-PRO-6000", "RTX-PRO-6000x8", "H100x8", "H100-MEGA",
                                  "none"])
def test_on_demand_is_fine_where_it_is_sold(spec):
    assert _provisioning(spec) == []


@pytest.mark.parametrize(("spec", "ways"), [
    ("H100", "use --spot or --flex-start"), ("H100x2", "use --spot or --flex-start"),
    ("H100x4", "use --spot or --flex-start"),
    ("H200", "use --spot or --flex-start or --reservation NAME"),
    ("B200", "use --spot or --flex-start or --reservation"),
])
def test_machines_not_sold_on_demand(spec, ways):
    (problem,) = _provisioning(spec)
    assert "is not sold on demand" in problem and ways in problem
    assert _provisioning(spec, spot=True) == [] and _provisioning(spec, flex_start=True) == []


def test_reservation_takes_a_full_name_or_any():
    name = "projects/p/zones/us-central1-a/reservations/h200-pool"
    assert _provisioning("H200", reservation=name) == [] and _provisioning("H200", reservation="any") == []
    (problem,) = _provisioning("H200", reservation="h200-pool")
    assert "give the full name projects/PROJECT/zones/ZONE/reservations/NAME" in problem
    # a3-highgpu-1g is sold as Spot or Flex-start only: a reservation is not one of its ways
    assert _provisioning("H100", reservation=name) == [
        "a3-highgpu-1g (1 x NVIDIA_H100_80GB on a3-highgpu-1g) is not sold with --reservation: use --spot or "
        "--flex-start"]


@pytest.mark.parametrize(("spec", "kw", "message"), [
    ("T4", dict(flex_start=True), "--flex-start takes A100, A100-80GB, B200, H100, H200, L4 GPUs, not T4"),
    ("none", dict(flex_start=True), "not a CPU machine"),
    ("H100-MEGA", dict(flex_start=True), "not H100-MEGA"),
    ("RTX-PRO-6000", dict(flex_start=True), "not RTX-PRO-6000"),  # the DWS page names L4, A100, H100, H200, B200
    ("L4", dict(flex_start=True, timeout_s=8 * 86400), "--flex-start jobs run at most 7 days"),
    ("L4", dict(flex_start=True, timeout_s=7 * 86400 + 60),  # it said "--timeout is 168 h", the limit itself
     "--flex-start jobs run at most 7 days (604800s); --timeout is 604860s: give --timeout 7d or less"),
    ("A100x8", dict(flex_start=True, reduction_server=2), "drop --reduction-server or --flex-start"),
    ("H200", dict(flex_start=True, spot=True), "--spot and --flex-start exclude each other"),
    ("H200", dict(flex_start=True, reservation="any"), "--flex-start and --reservation exclude each other"),
])
def test_provisioning_problems(spec, kw, message):
    problems = _provisioning(spec, **kw)
    assert any(message in p for p in problems), problems


@pytest.mark.parametrize(("region", "mirror"), [
    ("us-central1", "us"), ("us-east4", "us"), ("northamerica-northeast1", "us"), ("southamerica-east1", "us"),
    ("me-west1", "europe"), ("me-central2", "europe"), ("africa-south1", "europe"),
    ("europe-west4", "europe"), ("europe-southwest1", "europe"), ("EUROPE-WEST1", "europe"),
    ("asia-northeast1", "asia"), ("asia-southeast1", "asia"), ("australia-southeast1", "asia"),
])
def test_reduction_server_image_from_the_nearest_mirror(region, mirror):
    image = f"{mirror}-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
    assert reduction_server_image(region) == image


def test_reduction_server_machine():
    assert REDUCTION_SERVER_MACHINE == "n1-highcpu-16"


# --- names, and what a job may cost ----------------------------------------------------------------------------

def test_short_names_and_labels():
    from ftcli.catalog import gpu_short_name, machine_label

    assert gpu_short_name("NVIDIA_TESLA_A100") == "A100" and gpu_short_name("NVIDIA_H100_MEGA_80GB") == "H100-MEGA"
    assert gpu_short_name("NVIDIA_TESLA_K80") == "K80"  # a job made elsewhere, with a GPU ftcli does not offer
    assert machine_label("a2-highgpu-8g", "NVIDIA_TESLA_A100", 8) == "8 x A100 on a2-highgpu-8g"
    assert machine_label("n1-standard-8", None, 0) == "n1-standard-8 (CPU)"
    assert resolve_gpu("L4x2").label == "2 x L4 on g2-standard-24"


@pytest.mark.parametrize(("spec", "machine", "note"), [
    ("B200", None, "--gpu B200 means 8 x B200 (a4-highgpu-8g comes only with 8)"),
    ("h200", None, "--gpu h200 means 8 x H200 (a3-ultragpu-8g comes only with 8)"),
    ("A100", "a2-highgpu-4g", "--gpu A100 means 4 x A100 (a2-highgpu-4g carries 4)"),
    ("B200x8", None, None), ("T4", None, None), ("none", None, None), ("A100x2", None, None),
])
def test_an_implied_count_is_said(spec, machine, note):
    from ftcli.catalog import implied_count

    assert implied_count(spec, resolve_gpu(spec, machine)) == note


def test_machines_for_a_gpu_and_count():
    from ftcli.catalog import machines_for

    assert machines_for(resolve_gpu("T4"))[0] == "n1-standard-8"
    assert machines_for(resolve_gpu("L4x2")) == ("g2-standard-24",)
    assert machines_for(resolve_gpu("none")) == ()


def test_estimate_without_a_price_table_gives_the_shape_only():
    from ftcli.catalog import estimate

    e = estimate(resolve_gpu("A100x8"), replicas=2, reduction_server=2, timeout_s=6 * 3600, region="us-central1")
    assert e.shape == "2 x (8 x A100 on a2-highgpu-8g) + 2 x n1-highcpu-16"
    assert e.gpu_hours == 96 and e.per_hour is None and e.at_most is None and e.missing == "no price table"


def test_estimate_with_a_price_table_adds_machines_and_gpus():
    from ftcli.catalog import PriceTable, estimate

    # Made-up numbers, for the arithmetic only (ftcli ships no rates; users bring theirs: tests/test_prices.py).
    table = PriceTable(source="test", read="2026-11-27", region="us-central1",
                       machines={"n1-standard-8": 0.5, "n1-highcpu-16": 0.25}, gpus={"T4": 0.4})
    e = estimate(resolve_gpu("T4x2", "n1-standard-8"), replicas=3, reduction_server=2, timeout_s=2 * 3600,
                 region="us-central1", prices=table)
    assert e.per_hour == pytest.approx(3 * (0.5 + 2 * 0.4) + 2 * 0.25)
    assert e.at_most == pytest.approx(2 * e.per_hour) and e.missing is None
    other = estimate(resolve_gpu("L4"), replicas=1, reduction_server=0, timeout_s=3600, region="us-central1",
                     prices=table)
    assert other.per_hour is None and "no us-central1 rate for g2-standard-8, L4" in other.missing


def test_only_several_rdma_machines_get_the_host_network_note():
    # The note is for several a3-ultragpu/a4 machines; every other job gets none (plan adds whatever this returns).
    assert catalog.rdma_note(resolve_gpu("H200"), 2) == (
        "the 2 a3-ultragpu-8g machines talk over their host network: ftcli does not set up Vertex's GPUDirect-RDMA "
        "(README 'The CustomJob')")
    assert catalog.rdma_note(resolve_gpu("H200"), 1) is None
    assert catalog.rdma_note(resolve_gpu("A100x8"), 2) is None
    assert catalog.rdma_note(resolve_gpu("none"), 4) is None
