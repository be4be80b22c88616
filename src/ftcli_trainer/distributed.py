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

import json
import os
import sys
from dataclasses import dataclass

import numpy as np


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


def vertex_nodes(env=os.environ) -> tuple[int, int]:
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


def master(env=os.environ) -> tuple[str, str]:
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


def relaunch_argv(argv: list[str], gpus: int, env=os.environ) -> list[str] | None:
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


def any_rank(flag: bool, dist: Dist, device) -> bool:
    """Whether `flag` holds on any rank (e.g. SIGTERM arrived somewhere): every rank must stop together."""
    if not dist.enabled:
        return flag
    import torch
    import torch.distributed as td

    t = torch.tensor([1.0 if flag else 0.0], device=device)
    td.all_reduce(t, op=td.ReduceOp.MAX)
    return bool(t.item())


def spread(value: int, dist: Dist, device) -> tuple[int, int]:
    """(smallest, largest) of an integer over the ranks (e.g. the step each resumed at)."""
    if not dist.enabled:
        return value, value
    import torch
    import torch.distributed as td

    t = torch.tensor([value, -value], dtype=torch.int64, device=device)
    td.all_reduce(t, op=td.ReduceOp.MAX)
    return -int(t[1].item()), int(t[0].item())


def add_up(values: list[float], dist: Dist, device) -> list[float]:
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


def gather_to_main(value, dist: Dist) -> list | None:
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
