"""A gs:// checkpoint folder's lease (lease.py), against the GCS emulator: runs on different machines (here: other
processes, which no flock of this machine could stop) never write one folder at once."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from ftcli_trainer import checkpoint, lease
from ftcli_trainer.errors import TrainerError

ROOT = "gs://b/run/checkpoints"
LOCK_NAME = "run/checkpoints/.run.lock"

# Another machine's trainer: it takes the lease and holds it until its stdin closes (then gives it back), or until it
# is killed (a crash: the lease stays). argv: root, TTL.
HOLDER = """import sys
from ftcli_trainer import checkpoint, lease
lease.TTL_S = float(sys.argv[2])
checkpoint.lock(sys.argv[1])
print("held", flush=True)
sys.stdin.read()
checkpoint.unlock()
"""


@pytest.fixture(autouse=True)
def _bucket(gcs):
    gcs.create_bucket("b")
    yield
    checkpoint.unlock()


def _holder(ttl: float = 300.0, env: dict | None = None) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLDER, ROOT, str(ttl)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, env={**os.environ, **(env or {})})
    assert p.stdout.readline() == "held\n"
    return p


def _end(p: subprocess.Popen, crash: bool = False) -> None:
    if crash:
        p.kill()
    else:
        p.stdin.close()
    p.wait(timeout=60)


def test_a_second_run_is_refused_while_another_machines_run_holds_the_gs_folder(gcs):
    # Two `ftcli local --output-dir gs://...` (or one beside a Vertex job on that folder) both trained, resumed each
    # other's checkpoints and exported into the same folder: a gs:// folder was never locked.
    holder = _holder()
    try:
        info = json.loads(gcs.read("b", LOCK_NAME))
        assert (info["host"], info["pid"], info["job"], info["ttl_s"]) == (socket.gethostname(), holder.pid, None, 300)
        busy = (f"{ROOT} is in use by another run (host {socket.gethostname()}, process {holder.pid}, since "
                f"{info['started']}): wait for it to end, or give another --output-dir (if that run is gone, its lock "
                f"{ROOT}/.run.lock expires in ")
        assert checkpoint.in_use(ROOT).startswith(busy)
        assert checkpoint.in_use(ROOT).endswith(" s unless renewed; delete it only when you are sure)")
        with pytest.raises(TrainerError) as e:
            checkpoint.lock(ROOT)
        assert str(e.value).startswith(busy)
        assert gcs.list("b") == [LOCK_NAME]  # nothing else written (the clock probe is gone again)
        assert json.loads(gcs.read("b", LOCK_NAME)) == info
    finally:
        _end(holder)
    assert gcs.list("b") == []  # given back at its end
    assert checkpoint.in_use(ROOT) is None
    checkpoint.lock(ROOT)
    assert json.loads(gcs.read("b", LOCK_NAME))["pid"] == os.getpid()
    assert checkpoint.in_use(ROOT) is None  # this process's own


def test_a_crashed_runs_lease_expires_and_is_taken_over(gcs, caplog):
    holder = _holder(ttl=1.5)
    _end(holder, crash=True)  # kill -9: the lock stays
    with pytest.raises(TrainerError, match=r"in use by another run .*expires in [12] s"):
        checkpoint.lock(ROOT)
    time.sleep(1.6)  # by the bucket's clock (the emulator's), not this process's
    assert checkpoint.in_use(ROOT) is None
    checkpoint.lock(ROOT)
    info = json.loads(gcs.read("b", LOCK_NAME))
    assert info["pid"] == os.getpid()
    assert f"took over the lock on {ROOT} from host {socket.gethostname()}, process {holder.pid}" in caplog.text


def test_a_restarted_worker_of_the_same_vertex_job_takes_its_lock_back_at_once(gcs, monkeypatch):
    # A preempted (or crashed) worker's lock stays; its job's restarted worker must not wait 5 minutes for it.
    holder = _holder(env={"CLOUD_ML_JOB_ID": "123"})
    _end(holder, crash=True)
    monkeypatch.setenv("CLOUD_ML_JOB_ID", "456")
    assert "(Vertex job 123, host " in checkpoint.in_use(ROOT)
    with pytest.raises(TrainerError, match="in use by another run \\(Vertex job 123, "):
        checkpoint.lock(ROOT)
    monkeypatch.setenv("CLOUD_ML_JOB_ID", "123")
    assert checkpoint.in_use(ROOT) is None
    checkpoint.lock(ROOT)
    assert json.loads(gcs.read("b", LOCK_NAME))["job"] == "123"


def test_of_two_runs_taking_over_an_expired_lease_one_wins(gcs, monkeypatch):
    holder = _holder(ttl=0.5)
    _end(holder, crash=True)
    time.sleep(0.6)
    first, second = lease.Lease(ROOT), lease.Lease(ROOT)
    bucket_now, asked = lease._bucket_now, []

    def the_other_takes_it_meanwhile(root):
        now = bucket_now(root)  # (expired by then)
        if not asked:  # the first taker found it expired; the second takes it first
            asked.append(root)
            second.acquire()
        return now

    monkeypatch.setattr(lease, "_bucket_now", the_other_takes_it_meanwhile)
    try:
        with pytest.raises(TrainerError, match=f"process {second.info['pid']}"):
            first.acquire()  # its generation-matched takeover got 412: it looked again, and found a live holder
        assert json.loads(gcs.read("b", LOCK_NAME))["token"] == second.info["token"]
    finally:
        second.release()


def test_a_renewed_lease_holds_and_one_taken_over_stops_its_holder_before_it_writes(gcs, monkeypatch):
    from ftcli_trainer import storage

    monkeypatch.setattr(lease, "TTL_S", 1.0)
    monkeypatch.setattr(lease, "RENEW_S", 0.2)
    checkpoint.lock(ROOT)
    time.sleep(1.5)  # renewed meanwhile: still held
    other = lease.Lease(ROOT)
    with pytest.raises(TrainerError, match="in use by another run"):
        other.acquire()

    mine = checkpoint._leases[ROOT]
    mine._stop.set()  # this run stalls (a VM paused, a network down) past its lease
    mine._thread.join()
    time.sleep(1.1)
    other.acquire()
    try:
        with pytest.raises(TrainerError, match=f"this run lost its lock on {ROOT} to another run .*process "):
            checkpoint.save(ROOT, 3, None, {})  # before anything is written
        assert [n for n in storage.list_subdirs(ROOT)] == []
        checkpoint.unlock()  # never deletes the other run's lock
        assert json.loads(gcs.read("b", LOCK_NAME))["token"] == other.info["token"]
    finally:
        other.release()
    assert gcs.list("b") == []
