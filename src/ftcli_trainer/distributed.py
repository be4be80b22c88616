"""Data-parallel training: one process per GPU (torchrun semantics), several machines on Vertex.

Vertex starts `python -m ftcli_trainer.task` once per machine and sets CLUSTER_SPEC. Its prebuilt PyTorch
containers also set MASTER_ADDR, MASTER_PORT and a per-machine WORLD_SIZE / RANK, but for a custom container
"you must parse CLUSTER_SPEC to populate any environment variables or settings required by the framework"
("Distributed training", https://docs.cloud.google.com/vertex-ai/docs/training/distributed-training, read
2026-11-26): so the chief's address comes from CLUSTER_SPEC's workerpool0 when MASTER_ADDR is absent (never
127.0.0.1 on a multi-machine job, where every other machine would wait for itself). On a machine with several GPUs
the trainer re-launches itself under torch.distributed.run with one process per GPU, turning the machine
counts into global ranks. Under torchrun (LOCAL_RANK set) it joins the process group directly. NCCL on GPUs,
gloo on CPUs.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def vertex_nodes(env: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """(machines, this machine's index) from Vertex's variables; (1, 0) outside a multi-machine job."""
    spec = env.get("CLUSTER_SPEC")
    if spec:
        try:
            cluster = json.loads(spec)
            task = cluster.get("task", {})
            pools = cluster.get("cluster", {})
            # Pools in Vertex's order: workerpool0 (chief), workerpool1 (workers); reduction servers
            # (workerpool2) are not training processes.
            order = [p for p in ("workerpool0", "workerpool1") if p in pools]
            nodes = sum(len(pools[p]) for p in order)
            index = 0
            for p in order:
                if p == task.get("type"):
                    index += int(task.get("index", 0))
                    break
                index += len(pools[p])
            if nodes:
                return nodes, index
        except (ValueError, TypeError, AttributeError):
            pass
    return int(env.get("WORLD_SIZE", "1")), int(env.get("RANK", "0"))


def master(env: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """(address, port) of rank 0: MASTER_ADDR/MASTER_PORT, else workerpool0's first entry in CLUSTER_SPEC
    ("host:port"), else this machine."""
    host, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
    if not host and env.get("CLUSTER_SPEC"):
        try:
            chief = json.loads(env["CLUSTER_SPEC"])["cluster"]["workerpool0"][0]
            host, _, spec_port = str(chief).rpartition(":") if ":" in str(chief) else (str(chief), "", "")
            port = port or spec_port or None
        except (ValueError, KeyError, IndexError, TypeError):
            host = None
    return host or "127.0.0.1", port or "29500"


def relaunch_argv(argv: list[str], gpus: int, env: Mapping[str, str] = os.environ) -> list[str] | None:
    """The torchrun command line that runs this trainer once per GPU on every machine; None when a single
    process is right (one GPU or CPU on one machine, or already running under torchrun)."""
    if "LOCAL_RANK" in env:
        return None
    nodes, node_rank = vertex_nodes(env)
    per_node = max(1, gpus)
    if nodes * per_node <= 1:
        return None
    addr, port = master(env)
    # torchrun, through launcher: its own ending in one line, not a traceback after the workers' reasons
    return [sys.executable, "-m", "ftcli_trainer.launcher", f"--nnodes={nodes}", f"--node-rank={node_rank}",
            f"--nproc-per-node={per_node}", f"--master-addr={addr}", f"--master-port={port}",
            "-m", "ftcli_trainer.task", *argv]


# NCCL and /dev/shm. NCCL "creates shared memory segments, traditionally in /dev/shm ... If insufficient shared memory
# is available, NCCL will fail to initialize"; "Docker containers default to limited shared and pinned memory
# resources", the fix being e.g. `--shm-size=1g --ulimit memlock=-1` on the docker command line (NCCL User Guide,
# "Runtime and MPI issues", https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/
# runtime_and_mpi_issues.html, read 2026-11-27). NCCL documents no minimum size: the segments depend on its version
# and on the transports it picks (its proxy's operation pool, one per process, is in /dev/shm whatever
# NCCL_SHM_DISABLE says, which turns off the SHM transport only: src/proxy.cc proxyProgressInit and
# src/transport/shm.cc, NVIDIA/nccl v2.26.2-1, read 2026-11-27), so NCCL_SHM_DISABLE=1 is no sure fallback either.
# Vertex AI: a CustomJob's containerSpec has imageUri, command, args and env, no shared-memory size (aiplatform_v1 and
# v1beta1 types/custom_job.py, google-cloud-aiplatform 2.7.0); only a Model's serving container has
# sharedMemorySizeMb, "The default shared memory size is 64MB" (https://cloud.google.com/vertex-ai/docs/predictions/
# deploy-genai, read 2026-11-27). Vertex's training pages ("Custom containers overview", "Configure container
# settings") give no /dev/shm size for a training container; users reported multi-GPU NCCL failing for want of it
# (googleapis/python-aiplatform#3434, closed by its author as working in another job type; kubeflow/pipelines#9147;
# both read 2026-11-27). Nothing firm, so nothing is checked before NCCL starts (a guessed floor could stop jobs that
# work); when NCCL does fail on it, the run's line says so (shm_problem).
# NCCL's own words when it cannot allocate one (src/misc/shmutils.cc, ncclShmOpen): "Error while creating shared memory
# segment /dev/shm/nccl-XXXXXX (size N), error: No space left on device (28)", its last error, which torch's
# DistBackendError carries after "Last error:" (torch/csrc/distributed/c10d/NCCLUtils.cpp, getNcclErrorDetailStr; a
# whole one is quoted in gpustack/gpustack#3573; both read 2026-11-27).
_NCCL_SHM_FULL = re.compile(rf"/dev/shm/nccl-\S*.*?error: [^\n]*\({errno.ENOSPC}\)")


def shm_size(path: str = "/dev/shm", statvfs: Callable[[str], os.statvfs_result] = os.statvfs) -> int | None:
    """The size of /dev/shm in bytes (not what is free: every rank reads the same); None where it cannot be read."""
    try:
        st = statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def shm_problem(e: BaseException, env: Mapping[str, str] = os.environ,
                statvfs: Callable[[str], os.statvfs_result] = os.statvfs) -> str | None:
    """The run's line for NCCL failing to set up for want of room in /dev/shm, or None for any other error: the same
    line on every rank of the machine (said once: task.say_once), where NCCL's own names a random segment file. Its
    way out is a Vertex job's (fewer GPUs a machine) inside one (CLOUD_ML_JOB_ID, as task.run tells), else a local
    run's."""
    from ftcli_trainer.errors import causes

    if not any(_NCCL_SHM_FULL.search(str(cause)) for cause in causes(e)):
        return None
    processes = env.get("LOCAL_WORLD_SIZE")
    size = shm_size(statvfs=statvfs)
    held = f"; /dev/shm holds {size / 2**20:.0f} MiB here" if size is not None else ""
    line = (f"error: NCCL found no room in /dev/shm for the shared memory of "
            f"{f'the {processes} GPU processes' if processes else 'the GPU processes'} on this machine{held}. NCCL "
            "needs a larger /dev/shm (its troubleshooting guide: docker run --shm-size=1g)")
    if not env.get("CLOUD_ML_JOB_ID"):  # ftcli local (or by hand) on a machine of several GPUs: no --gpu to change
        return f"{line}: give this machine's container a larger one, or train on one GPU (CUDA_VISIBLE_DEVICES=0)"
    return (f"{line}, and a Vertex AI job has no setting for it: put fewer GPUs on each machine (e.g. --gpu L4 "
            "--replicas 4 in place of --gpu L4x4)")


def setup(device_type: str) -> Dist:
    """Join the process group when launched by torchrun (RANK, WORLD_SIZE, LOCAL_RANK set)."""
    if "LOCAL_RANK" not in os.environ or int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Dist()
    import torch.distributed as td

    if not td.is_initialized():
        td.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
    return Dist(rank=td.get_rank(), world_size=td.get_world_size(), local_rank=int(os.environ["LOCAL_RANK"]))


def shard_batches(global_batches: list[np.ndarray], dist: Dist) -> list[np.ndarray]:
    """This rank's part of each global batch (interleaved, so every rank gets similar lengths). Every rank
    gets the same number of batches: a last global batch too small to give each rank one example is
    dropped, since DDP needs every rank in every step."""
    if not dist.enabled:
        return global_batches
    return [b[dist.rank::dist.world_size] for b in global_batches if len(b) >= dist.world_size]


def any_rank(flag: bool, dist: Dist, device: torch.device) -> bool:
    """Whether `flag` holds on any rank (e.g. SIGTERM arrived somewhere): every rank must stop together."""
    if not dist.enabled:
        return flag
    import torch
    import torch.distributed as td

    t = torch.tensor([1.0 if flag else 0.0], device=device)
    td.all_reduce(t, op=td.ReduceOp.MAX)
    return bool(t.item())


def spread(value: int, dist: Dist, device: torch.device) -> tuple[int, int]:
    """(smallest, largest) of an integer over the ranks (e.g. the step each resumed at)."""
    if not dist.enabled:
        return value, value
    import torch
    import torch.distributed as td

    t = torch.tensor([value, -value], dtype=torch.int64, device=device)
    td.all_reduce(t, op=td.ReduceOp.MAX)
    return -int(t[1].item()), int(t[0].item())


def add_up(values: list[float], dist: Dist, device: torch.device) -> list[float]:
    """Each value summed over the ranks (e.g. a loss sum and the examples it covers)."""
    if not dist.enabled:
        return values
    import torch
    import torch.distributed as td

    t = torch.tensor(values, dtype=torch.float64, device=device)
    td.all_reduce(t)
    return t.tolist()


def gather_rows(local: np.ndarray, idx: np.ndarray, n: int, dist: Dist) -> np.ndarray:
    """Reassemble per-example rows (e.g. eval logits) computed on disjoint shards, each exactly once."""
    if not dist.enabled:
        return local
    import torch.distributed as td

    parts: list = [None] * dist.world_size
    td.all_gather_object(parts, (idx, local))
    out = np.zeros((n, *local.shape[1:]), dtype=local.dtype)
    for part_idx, rows in parts:
        out[part_idx] = rows
    return out


def gather_to_main(value: Any, dist: Dist) -> list | None:
    """Every rank's `value` (small, picklable), in rank order, on rank 0; None on the other ranks."""
    if not dist.enabled:
        return [value]
    import torch.distributed as td

    parts: list | None = [None] * dist.world_size if dist.is_main else None
    td.gather_object(value, parts, dst=0)
    return parts


def barrier(dist: Dist) -> None:
    if dist.enabled:
        import torch.distributed as td

        td.barrier()


def cleanup(dist: Dist) -> None:
    if dist.enabled:
        import torch.distributed as td

        if td.is_initialized():
            td.destroy_process_group()
