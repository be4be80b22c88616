"""Data parallel: Vertex's variables, sharding, and a real 2-process gloo run on CPU."""

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest

from ftcli_trainer.distributed import Dist, master, relaunch_argv, shard_batches, shm_problem, shm_size, vertex_nodes
from tests.conftest import FILLER, sentiment_rows, write_csv

SPEC = json.dumps({"cluster": {"workerpool0": ["cmle-training-workerpool0-ab-0:2222"],
                               "workerpool1": ["w-0:2222", "w-1:2222"], "workerpool2": ["rs-0:2222"]},
                   "environment": "cloud", "task": {"type": "workerpool1", "index": 1}})


def test_vertex_machines_and_ranks_from_cluster_spec():
    assert vertex_nodes({"CLUSTER_SPEC": SPEC}) == (3, 2)  # reduction servers are not trainers
    assert vertex_nodes({"WORLD_SIZE": "2", "RANK": "1"}) == (2, 1)
    assert vertex_nodes({}) == (1, 0)


def test_relaunch_one_process_per_gpu_on_every_machine():
    env = {"CLUSTER_SPEC": SPEC, "MASTER_ADDR": "cmle-training-workerpool0-ab-0", "MASTER_PORT": "2222"}
    argv = relaunch_argv(["--task", "imdb"], gpus=8, env=env)
    assert argv[1:] == ["-m", "ftcli_trainer.launcher", "--nnodes=3", "--node-rank=2", "--nproc-per-node=8",
                        "--master-addr=cmle-training-workerpool0-ab-0", "--master-port=2222", "-m",
                        "ftcli_trainer.task", "--task", "imdb"]
    assert relaunch_argv([], gpus=1, env={}) is None  # one GPU, one machine: no launcher
    assert relaunch_argv([], gpus=8, env={"LOCAL_RANK": "0"}) is None  # already under torchrun
    assert relaunch_argv([], gpus=0, env={"WORLD_SIZE": "2", "RANK": "0"})[3] == "--nnodes=2"  # CPU machines


def test_custom_containers_get_the_chief_from_cluster_spec():
    # Vertex sets MASTER_ADDR only in its prebuilt containers: in ours the chief comes from CLUSTER_SPEC, never
    # 127.0.0.1 on a multi-machine job (every machine would wait for itself).
    assert master({"CLUSTER_SPEC": SPEC}) == ("cmle-training-workerpool0-ab-0", "2222")
    argv = relaunch_argv(["--task", "imdb"], gpus=8, env={"CLUSTER_SPEC": SPEC})
    assert "--master-addr=cmle-training-workerpool0-ab-0" in argv and "--master-port=2222" in argv
    assert master({"CLUSTER_SPEC": SPEC, "MASTER_ADDR": "10.0.0.2", "MASTER_PORT": "29400"}) == ("10.0.0.2", "29400")
    assert master({}) == ("127.0.0.1", "29500")
    assert master({"CLUSTER_SPEC": "not json"}) == ("127.0.0.1", "29500")
    assert master({"CLUSTER_SPEC": json.dumps({"cluster": {"workerpool0": ["chief"]}})}) == ("chief", "29500")


def test_shards_are_disjoint_similar_and_equal_in_count():
    batches = [np.arange(i * 8, i * 8 + 8) for i in range(5)] + [np.array([40])]
    shards = [shard_batches(batches, Dist(rank=r, world_size=2)) for r in range(2)]
    assert len(shards[0]) == len(shards[1]) == 5  # the 1-example tail is dropped: every rank steps together
    flat = np.concatenate([np.concatenate(s) for s in shards])
    assert sorted(flat.tolist()) == list(range(40))


# NCCL's failure for want of room in /dev/shm as torch raises it: a whole one, from a vLLM worker with NCCL 2.26.2, in
# gpustack/gpustack#3573 (read 2026-11-27); its last line is ncclShmOpen's WARN (NVIDIA/nccl src/misc/shmutils.cc)
NCCL_SHM_FULL = ("NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, unhandled system error (run "
                 "with NCCL_DEBUG=INFO for details), NCCL version 2.26.2\nncclSystemError: System call (e.g. socket, "
                 "malloc) or external library call failed or device error. \nLast error:\nError while creating shared "
                 "memory segment /dev/shm/nccl-OTWUcv (size 33030528), error: No space left on device (28)")


def _statvfs(blocks, frsize=4096):
    return lambda path: SimpleNamespace(f_blocks=blocks, f_frsize=frsize, f_bfree=0, f_bavail=0)


def test_nccls_failure_for_want_of_shared_memory_is_one_line_with_the_size_found_and_the_way_out():
    torch = pytest.importorskip("torch")
    e = torch.distributed.DistBackendError(NCCL_SHM_FULL)
    job = {"LOCAL_WORLD_SIZE": "4", "CLOUD_ML_JOB_ID": "7100000000000000001"}  # (Vertex sets it in a job)
    assert shm_problem(e, env=job, statvfs=_statvfs(16384)) == (
        "error: NCCL found no room in /dev/shm for the shared memory of the 4 GPU processes on this machine; /dev/shm "
        "holds 64 MiB here. NCCL needs a larger /dev/shm (its troubleshooting guide: docker run --shm-size=1g), and a "
        "Vertex AI job has no setting for it: put fewer GPUs on each machine (e.g. --gpu L4 --replicas 4 in place of "
        "--gpu L4x4)")
    # every rank says the same line (said once), whatever segment file NCCL drew for it
    other_rank = torch.distributed.DistBackendError(NCCL_SHM_FULL.replace("nccl-OTWUcv", "nccl-s0On3b"))
    assert shm_problem(other_rank, env=job, statvfs=_statvfs(16384)) == shm_problem(e, env=job,
                                                                                     statvfs=_statvfs(16384))
    try:  # found under what wraps it too
        raise RuntimeError("DDP failed") from e
    except RuntimeError as wrapped:
        assert shm_problem(wrapped, env={}, statvfs=_statvfs(16384)).startswith(
            "error: NCCL found no room in /dev/shm for the shared memory of the GPU processes on this machine; "
            "/dev/shm holds 64 MiB here.")


def test_outside_a_vertex_job_the_way_out_of_a_small_dev_shm_is_a_local_runs():
    # ftcli local on a machine of several GPUs (one process each, under torchrun) was told to change --gpu and
    # --replicas, which it does not take, and that "a Vertex AI job has no setting for it"
    torch = pytest.importorskip("torch")
    e = torch.distributed.DistBackendError(NCCL_SHM_FULL)
    assert shm_problem(e, env={"LOCAL_WORLD_SIZE": "4"}, statvfs=_statvfs(16384)) == (
        "error: NCCL found no room in /dev/shm for the shared memory of the 4 GPU processes on this machine; /dev/shm "
        "holds 64 MiB here. NCCL needs a larger /dev/shm (its troubleshooting guide: docker run --shm-size=1g): give "
        "this machine's container a larger one, or train on one GPU (CUDA_VISIBLE_DEVICES=0)")


def test_other_nccl_and_shared_memory_errors_are_not_blamed_on_dev_shm():
    for text in (
        # NCCL's shared memory failing on a CUDA error, with room to spare (NVIDIA/nccl#1518, read 2026-11-27)
        "Error while creating shared memory segment /dev/shm/nccl-NzwJ7O (size 9637888)",
        # a peer that left (torch's interpretation of ncclRemoteError, NCCLUtils.cpp)
        "NCCL error: remote process exited or there was a network error, NCCL version 2.26.2\nncclRemoteError: A call "
        "failed possibly due to a network error or a remote process exiting prematurely.",
        "[Errno 28] No space left on device: '/tmp/ckpt'",  # a full disk is the disk's line (task._run), not NCCL's
        "DataLoader worker (pid 7579) is killed by signal: Bus error.",
    ):
        assert shm_problem(RuntimeError(text), env={}, statvfs=_statvfs(16384)) is None, text


def test_dev_shm_size_is_its_whole_size_or_none():
    assert shm_size(statvfs=_statvfs(262144)) == 2**30

    def gone(path):
        raise FileNotFoundError(path)
    assert shm_size(statvfs=gone) is None
    assert shm_problem(RuntimeError(NCCL_SHM_FULL), env={"LOCAL_WORLD_SIZE": "2"}, statvfs=gone).startswith(
        "error: NCCL found no room in /dev/shm for the shared memory of the 2 GPU processes on this machine. NCCL "
        "needs")


def test_workers_whose_nccl_finds_no_room_in_dev_shm_say_so_once_not_in_tracebacks(tmp_path, tiny_model,
                                                                                   sentiment_csv):
    # NCCL's own failure (each rank's naming its own segment file), raised where the first collective would raise it:
    # each worker printed it as a traceback, the cause on its last line, below "unhandled system error"
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os\n"
        "if os.environ.get('RANK'):\n"
        "    from ftcli_trainer import distributed\n"
        "    real = distributed.setup\n"
        "    def setup(device_type):\n"
        "        real(device_type)\n"
        "        import torch.distributed as td\n"
        # both ranks past their setup first, as at the first collective: a rank that raised as soon as its own setup
        # returned left the other's gloo connection half made ('Connection closed by peer', a traceback of its own)
        "        td.barrier()\n"
        f"        raise td.DistBackendError({NCCL_SHM_FULL!r}.replace('OTWUcv', 'rank' + os.environ['RANK']))\n"
        "    distributed.setup = setup\n")
    r = _two_processes(sentiment_csv, tiny_model, tmp_path / "run",
                       env={"PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])})
    size = shm_size()
    held = f"; /dev/shm holds {size / 2**20:.0f} MiB here" if size is not None else ""
    assert r.returncode == 1
    said = [x for x in r.stderr.splitlines() if x.startswith(("error", "stopped"))]
    assert said[:1] == [
        f"error: NCCL found no room in /dev/shm for the shared memory of the 2 GPU processes on this machine{held}. "
        "NCCL needs a larger /dev/shm (its troubleshooting guide: docker run --shm-size=1g): give this machine's "
        "container a larger one, or train on one GPU (CUDA_VISIBLE_DEVICES=0)",  # (outside a Vertex job)
    ], said
    # torchrun names the ranks it has seen leave when it stops the rest: both, or either one (the job image's CI run,
    # 2026-11-29: "rank 0 with 1" alone); one it stopped says nothing (task.FAILED_MARK) and leaves with 143
    assert len(said) == 2 and re.fullmatch(r"stopped: worker\(s\) left with a non-zero status: "
                                           r"(rank [01] with 1|rank 0 with (1|143), rank 1 with (1|143)) "
                                           r"\(their lines above say why\)", said[1]), said


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_processes_argv(csvs, tiny_model, out, *args: str) -> list[str]:
    """The trainer under torchrun (through ftcli_trainer.launcher, as a job runs it), 2 gloo processes on this CPU."""
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed unavailable")
    train, test = csvs
    return [sys.executable, "-m", "ftcli_trainer.launcher", "--nproc-per-node=2", f"--master-port={_free_port()}",
            "-m", "ftcli_trainer.task", "--task", "csv", "--train-file", str(train), "--eval-file", str(test),
            "--model", str(tiny_model), "--batch-size", "8", "--output-dir", str(out), *args]


def _two_processes(csvs, tiny_model, out, *args: str, env=None) -> subprocess.CompletedProcess:
    """The trainer under torchrun, 2 gloo processes on this CPU, on the sentiment csvs."""
    r = subprocess.run(_two_processes_argv(csvs, tiny_model, out, *args), capture_output=True, text=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, timeout=300)
    # A worker that aborted at its exit (task._exit) made torchrun report SIGABRT as the run's root cause
    assert "SIGABRT" not in r.stderr and "terminate called" not in r.stderr, r.stderr[-3000:]
    # torchrun's own ending is one line (launcher), never its traceback
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return r


def test_two_process_gloo_run_trains_and_evaluates_every_example_once(tmp_path, tiny_model, sentiment_csv):
    out = tmp_path / "ddp"
    r = _two_processes(sentiment_csv, tiny_model, out, "--epochs", "4", "--learning-rate", "3e-3")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("ftcli trainer") == 1  # rank 0 speaks for the job
    assert "8 × 1 accumulation × 2 process(es) = 16 examples per step" in r.stdout
    m = json.loads((out / "model" / "metrics.json").read_text())
    assert sum(map(sum, m["eval_confusion_matrix"])) == 60  # every eval example counted exactly once
    assert m["eval_accuracy"] >= 0.85, m
    assert m["global_step"] == 4 * 15  # 240 examples / 16 per step, 4 epochs


def test_workers_that_resume_from_different_checkpoints_stop_with_one_line(tmp_path, tiny_model, sentiment_csv):
    # Each rank takes the newest checkpoint it can read: one that rank 1 alone could not read left the ranks at
    # different steps, and the run hung in its next collective (or trained diverging copies).
    out = tmp_path / "ddp"
    first = _two_processes(sentiment_csv, tiny_model, out, "--epochs", "2")  # checkpoints at steps 15 and 30
    assert first.returncode == 0, first.stderr[-3000:]
    # rank 1 cannot read the newest one (a passing read error, made here by a sitecustomize for that rank only)
    hook = tmp_path / "hook"
    hook.mkdir()
    reached = tmp_path / "reached-python-shutdown"
    reached.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import atexit, os\n"
        "if os.environ.get('RANK'):\n"
        f"    atexit.register(lambda: open(os.path.join({str(reached)!r}, os.environ['RANK']), 'w').close())\n"
        "if os.environ.get('RANK') == '1':\n"
        "    from ftcli_trainer import checkpoint\n"
        "    real = checkpoint._is_complete\n"
        "    checkpoint._is_complete = lambda path: not path.endswith('00000030') and real(path)\n")
    r = _two_processes(sentiment_csv, tiny_model, out, "--epochs", "2",
                       env={"PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])})
    said = r.stderr + r.stdout
    assert r.returncode != 0 and "error: the workers resumed from different checkpoints (steps 15 and 30)" in said
    # Both ranks leave with 2 after the collective that finds the mismatch; torchrun names those it has seen leave
    # when it stops the rest, which is both or either one (one of them was a fresh-clone CI's, 2026-11-29), and one
    # still leaving when torchrun stops it has its SIGTERM's 143 (as in the bad-row test below)
    assert re.fullmatch(r"stopped: worker\(s\) left with a non-zero status: "
                        r"(rank [01] with 2|rank 0 with (2|143), rank 1 with (2|143)) \(their lines above say why\)",
                        r.stderr.splitlines()[-1]), r.stderr[-3000:]
    assert "ignoring checkpoint" in said and "00000030: no completion marker" in said  # the warning it points at
    # The workers leave without Python's shutdown, where gloo's threads aborted one in about ten such runs (SIGABRT
    # right after the collective that found the mismatch; torchrun then blamed the abort): no atexit ran in them
    assert sorted(p.name for p in reached.iterdir()) == [], r.stderr[-3000:]


def test_workers_failing_on_the_same_bad_row_say_it_once(tmp_path, tiny_model, sentiment_csv):
    # every rank printed the same "error: ..." line: once per GPU in the job's log
    train, _ = sentiment_csv
    bad = write_csv(tmp_path / "eval.csv", ["text", "label"], [("fine", "great")])
    r = _two_processes((train, bad), tiny_model, tmp_path / "run")
    assert r.returncode == 2
    said = [x for x in r.stderr.splitlines() if x.startswith(("error", "hint", "stopped"))]
    assert said[:2] == [f"error: {bad} line 2: label 'great' is not in the label set (negative, positive)",
                        "hint: fix the row or pass --label-names with every label"], said
    del said[1]  # (the hint: said once, with its error line)
    # Each rank fails on the row alone, without a collective: under load one may leave before the other reaches it,
    # and torchrun then stops that one itself and names only the ranks that had left (CI, torch 2.7.1, 2026-11-28).
    # Or it reaches it after torchrun has sent it SIGTERM for the other's failure (143): it then says nothing (its
    # "stopped: SIGTERM; ... goes on from the newest complete checkpoint" was a third line, CI under load, 2026-11-29)
    assert len(said) == 2 and re.fullmatch(r"stopped: worker\(s\) left with a non-zero status: "
                                           r"(rank [01] with 2|rank 0 with (2|143), rank 1 with (2|143)) "
                                           r"\(their lines above say why\)", said[1]), said


def test_a_line_another_worker_said_is_not_said_again_a_different_one_is(tmp_path, monkeypatch, capsys):
    from ftcli_trainer.task import SAID_DIR_VAR, say_once

    monkeypatch.setenv(SAID_DIR_VAR, str(tmp_path))
    for line in ("error: bad row", "error: bad row", "error: out of memory", "error: bad row"):
        say_once(line)
    assert capsys.readouterr().err.splitlines() == ["error: bad row", "error: out of memory"]
    monkeypatch.setenv(SAID_DIR_VAR, str(tmp_path / "gone"))  # the folder cannot be written: said, not lost
    say_once("error: bad row")
    monkeypatch.delenv(SAID_DIR_VAR)  # one process, no launcher: every line
    say_once("error: bad row")
    assert capsys.readouterr().err.splitlines() == ["error: bad row", "error: bad row"]


def test_a_worker_stopped_for_another_ones_failure_does_not_say_how_to_go_on(tmp_path, monkeypatch, capsys):
    # torchrun sends SIGTERM to the workers left once one has left non-zero: the one stopped said "stopped: SIGTERM; a
    # restarted worker, or the same command, goes on from the newest complete checkpoint" under the other's error
    from ftcli_trainer import task
    from ftcli_trainer.config import TrainConfig

    def stopped(cfg):
        raise task.Terminated

    def failing(cfg):
        raise task.TrainerError("bad row")

    monkeypatch.delenv(task.STOPS_SAID_BY_VAR, raising=False)
    for job in ("preempted", "failed"):
        (tmp_path / job).mkdir()
    monkeypatch.setenv(task.SAID_DIR_VAR, str(tmp_path / "preempted"))  # (each launcher its own folder)
    monkeypatch.setattr(task, "run", stopped)
    assert task._run(TrainConfig()) == 143  # no worker failed: a stop of the whole job (preemption), said
    assert capsys.readouterr().err.startswith("stopped: SIGTERM; a restarted worker")
    monkeypatch.setenv(task.SAID_DIR_VAR, str(tmp_path / "failed"))
    monkeypatch.setattr(task, "run", failing)
    assert task._run(TrainConfig()) == 2
    monkeypatch.setattr(task, "run", stopped)
    assert task._run(TrainConfig()) == 143
    assert capsys.readouterr().err.splitlines() == ["error: bad row"]


def test_two_processes_train_as_one_process_does_with_the_same_global_batch(tmp_path, tiny_model, sentiment_csv):
    # Dropout off, the only draw each rank makes on its own: then 2 ranks x 8 examples are one step of 16
    model = tmp_path / "no-dropout"
    shutil.copytree(tiny_model, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "hidden_dropout_prob": 0.0,
                                                   "attention_probs_dropout_prob": 0.0}))
    args = ("--epochs", "2", "--learning-rate", "3e-3", "--log-every", "5")
    two = _two_processes(sentiment_csv, model, tmp_path / "two", *args)
    assert two.returncode == 0, two.stderr[-3000:]
    train, test = sentiment_csv
    one = subprocess.run([sys.executable, "-m", "ftcli_trainer.task", "--task", "csv", "--train-file", str(train),
                          "--eval-file", str(test), "--model", str(model), "--batch-size", "16",
                          "--output-dir", str(tmp_path / "one"), *args],
                         capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]

    from safetensors.numpy import load_file

    weights = [load_file(tmp_path / run / "model" / "model.safetensors") for run in ("one", "two")]
    assert weights[0].keys() == weights[1].keys()
    for name, w in weights[0].items():
        np.testing.assert_allclose(weights[1][name], w, atol=1e-5, err_msg=name)
    # The loss shown, logged and kept is the mean over both ranks' examples: it was rank 0's half alone
    rows = [[json.loads(line) for line in (tmp_path / run / "logs" / "metrics.jsonl").read_text().splitlines()]
            for run in ("one", "two")]
    losses = [[(r["step"], r["loss"]) for r in run_rows if r["type"] == "train"] for run_rows in rows]
    assert [s for s, _ in losses[1]] == [s for s, _ in losses[0]] == [5, 10, 15, 20, 25, 30]
    np.testing.assert_allclose([v for _, v in losses[1]], [v for _, v in losses[0]], rtol=1e-5)
    metrics = [json.loads((tmp_path / run / "model" / "metrics.json").read_text()) for run in ("one", "two")]
    assert metrics[1]["train_loss"] == pytest.approx(metrics[0]["train_loss"], rel=1e-5)
    assert metrics[1]["eval_loss"] == pytest.approx(metrics[0]["eval_loss"], rel=1e-5)
    assert metrics[1]["eval_confusion_matrix"] == metrics[0]["eval_confusion_matrix"]
    # samples/s counts both ranks' examples: 240 per epoch, 2 epochs
    assert metrics[1]["train_samples_per_second"] * metrics[1]["train_runtime"] == pytest.approx(480)


def test_a_resumed_two_process_run_ends_as_the_uninterrupted_one(tmp_path, tiny_model, sentiment_csv):
    # Each rank draws its own dropout masks, on shards of its own sizes (243 rows of 8-18 words: the epoch's last 3
    # rows go 2 to rank 0 and 1 to rank 1), so the ranks' generators part. Only rank 0's state was kept, and every rank
    # resumed with it: the resumed run's weights differed from the uninterrupted run's (by 1.6e-4 here).
    rng = random.Random(3)
    train = write_csv(tmp_path / "varied.csv", ["text", "label"],
                      [(f"{text} {' '.join(rng.choices(FILLER, k=rng.randrange(12)))}", label)
                       for text, label in sentiment_rows(243, seed=1)])
    data = (train, sentiment_csv[1])
    args = ("--epochs", "2", "--learning-rate", "2e-3", "--log-every", "1", "--save-every", "10")
    ref = tmp_path / "ref"
    r = _two_processes(data, tiny_model, ref, *args)
    assert r.returncode == 0, r.stderr[-3000:]
    # The same run stopped after its step 30 checkpoint, 2 steps before its end: its folder without what came later
    out = tmp_path / "resumed"
    shutil.copytree(ref, out, ignore=shutil.ignore_patterns("model", "step-00000032"))
    r = _two_processes(data, tiny_model, out, *args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"resuming from {out / 'checkpoints' / 'step-00000030'}" in r.stdout

    from safetensors.numpy import load_file

    weights = [load_file(run / "model" / "model.safetensors") for run in (ref, out)]
    for name, w in weights[0].items():
        np.testing.assert_allclose(weights[1][name], w, rtol=0, atol=1e-7, err_msg=name)
    curves = [[(row["step"], row["loss"]) for row in map(json.loads, (run / "logs" / "metrics.jsonl").open())
               if row["type"] == "train"] for run in (ref, out)]
    assert [s for s, _ in curves[1]] == [s for s, _ in curves[0]] == list(range(1, 33))
    np.testing.assert_allclose([v for _, v in curves[1]], [v for _, v in curves[0]], rtol=1e-6)

    # With another number of processes the global batch, the steps and the place in the data differ: refused in one
    # line, the checkpoint left as it was
    shutil.rmtree(out / "model")
    shutil.rmtree(out / "checkpoints" / "step-00000032")
    state = (out / "checkpoints" / "step-00000030" / "trainer_state.pt").read_bytes()
    one = subprocess.run([sys.executable, "-m", "ftcli_trainer.task", "--task", "csv", "--train-file", str(train),
                          "--eval-file", str(sentiment_csv[1]), "--model", str(tiny_model), "--batch-size", "8",
                          "--output-dir", str(out), *args],
                         capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert one.returncode == 2, one.stderr[-3000:]
    assert one.stderr.splitlines() == [
        f"error: the step 30 checkpoint in {out / 'checkpoints'} was written by 2 process(es) and this run has 1: a "
        "step would train on 8 examples instead of 16; resume with as many GPUs and machines as before, or start over "
        "with another --output-dir"]
    assert (out / "checkpoints" / "step-00000030" / "trainer_state.pt").read_bytes() == state
    assert not (out / "model").exists()


def test_sigterm_to_the_launcher_stops_every_worker_after_the_checkpoint_said_once(tmp_path, tiny_model,
                                                                                   sentiment_csv):
    # A preempted or maintained Vertex VM sends SIGTERM to the container's main process: torchrun, which passes it to
    # the workers. They checkpointed and said so in a line each, but torchrun then ended with a SignalException
    # traceback (~25 lines) and a warning per worker: some 30 ERROR lines in `ftcli logs` saying nothing more.
    out = tmp_path / "run"
    proc = subprocess.Popen(_two_processes_argv(sentiment_csv, tiny_model, out, "--epochs", "2", "--log-every", "1"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 120
    for line in proc.stdout:  # SIGTERM as soon as step 7 of 30 is logged: mid-epoch
        if line.startswith("step 7/") or time.monotonic() > deadline:
            proc.send_signal(signal.SIGTERM)
            break
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err  # non-zero: Vertex restarts the job, which resumes
    steps = [int(done.parent.name.removeprefix("step-")) for done in (out / "checkpoints").glob("step-*/_COMPLETE")]
    assert len(steps) == 1 and 7 <= (step := steps[0]) < 30, steps
    assert err.splitlines() == [f"stopped: SIGTERM: checkpoint written at step {step}; a restarted worker, or the "
                                "same command, resumes from it"] + [  # said once for both workers (task.say_once)
        "stopped: SIGTERM, passed on to the workers (their lines above say where each stopped)"]


def test_two_processes_stop_early_together_and_export_the_best_evaluations_weights(tmp_path, tiny_model,
                                                                                    sentiment_csv):
    # Each rank decides from the whole evaluation (gathered), and the stop goes through a collective: a rank that went
    # on alone would hang in its next step's all-reduce (the run's timeout). Rank 0 writes the best weights; every rank
    # loads them back for the evaluation of the exported model, a collective too.
    out = tmp_path / "ddp"
    r = _two_processes(sentiment_csv, tiny_model, out, "--epochs", "4", "--warmup-ratio", "1", "--learning-rate",
                       "3e-2", "--eval-every", "3", "--log-every", "100", "--early-stopping", "6")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("stopping early") == 1 and r.stdout.count("kept the weights of step 21") == 1, r.stdout
    m = json.loads((out / "model" / "metrics.json").read_text())
    assert (m["global_step"], m["best_global_step"], m["early_stopping"]["stopped"]) == (39, 21, True)
    evals = {row["step"]: row for row in map(json.loads, (out / "logs" / "metrics.jsonl").open())
             if row["type"] == "eval"}
    assert max(evals) == 39 and evals[21]["eval_accuracy"] == 1.0
    assert m["eval_loss"] == evals[21]["eval_loss"] and m["last_eval"]["eval_loss"] == evals[39]["eval_loss"]
    assert sum(map(sum, m["eval_confusion_matrix"])) == 60

    from safetensors.numpy import load_file

    kept = load_file(out / "checkpoints" / "best-00000021" / "model.safetensors")
    exported = load_file(out / "model" / "model.safetensors")
    for name, w in kept.items():
        np.testing.assert_array_equal(exported[name], w, err_msg=name)


def test_sigterm_during_an_evaluation_stops_every_worker_at_the_same_batch_and_the_restart_evaluates_first(
        tmp_path, tiny_model):
    """Two workers cut an evaluation short together (a collective every few batches, at batches both have): one that
    went on alone would hang in the gather of predictions. The restart, two workers again, evaluates that step first;
    each evaluation row is logged once."""
    train = write_csv(tmp_path / "train.csv", ["text", "label"], sentiment_rows(240, seed=1))
    test = write_csv(tmp_path / "test.csv", ["text", "label"], sentiment_rows(801, seed=2))  # 25 batches a rank
    out = tmp_path / "run"
    # The SIGTERM reaches the launcher from rank 0 at its second batch of step 15's evaluation, and rank 0 goes on
    # only once the launcher has passed it on: inside the evaluation whatever the machine's load. (Sent from here
    # when "step 15/30" was read, it came after the evaluation's end on a busy machine: no evaluation was cut.)
    hook = tmp_path / "hook"
    hook.mkdir()
    sent = tmp_path / "sigterm-sent"
    (hook / "sitecustomize.py").write_text(
        "import os\n"
        "if os.environ.get('RANK') == '0':\n"
        "    import signal, time\n"
        "    from ftcli_trainer import loop\n"
        "    evaluate, collate, evaluating = loop.Trainer.evaluate, loop.collate, []\n"
        "    def watched(self):\n"
        "        evaluating.append(self)\n"
        "        try:\n"
        "            return evaluate(self)\n"
        "        finally:\n"
        "            evaluating.clear()\n"
        "    def counted(*args):\n"
        "        if evaluating and evaluating[0].global_step == 15 and len(evaluating) == 2:\n"
        f"            if not os.path.exists({str(sent)!r}):\n"
        f"                open({str(sent)!r}, 'w').close()\n"
        "                os.kill(os.getppid(), signal.SIGTERM)\n"
        "                deadline = time.monotonic() + 60\n"
        "                while not evaluating[0]._stop_requested and time.monotonic() < deadline:\n"
        "                    time.sleep(0.01)\n"
        "        if evaluating:\n"
        "            evaluating.append(None)\n"
        "        return collate(*args)\n"
        "    loop.Trainer.evaluate, loop.collate = watched, counted\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])}
    argv = _two_processes_argv((train, test), tiny_model, out, "--epochs", "2", "--log-every", "1")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert sent.exists(), proc.stderr[-3000:]
    err = proc.stderr
    assert proc.returncode == 143, err
    assert err.splitlines()[0] == ("stopped: SIGTERM: checkpoint written at step 15; a restarted worker, or the same "
                                   "command, resumes from it")
    torch = pytest.importorskip("torch")
    state = torch.load(out / "checkpoints" / "step-00000015" / "trainer_state.pt", weights_only=True)
    assert state["eval_pending"] is True and len(state["rng"]) == 2
    rows = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["type"], r["step"]) for r in rows if r["type"] == "eval"] == []

    again = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "evaluating step 15 first: a stop cut its evaluation short" in again.stdout
    rows = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["type"] == "eval"] == [15, 30]
    assert (out / "model" / "model.safetensors").is_file()
