"""A JobService emulator that runs what it is given, the way Vertex runs a python_package_spec.

For each CreateCustomJob it downloads the job's package_uris from the GCS emulator, installs them into a
fresh virtual environment that sees the test environment's packages (torch, transformers, ... as Vertex's
prebuilt PyTorch container provides them) but not ftcli, then runs `python -m <module> <args>` once per
replica with the environment Vertex gives (AIP_* folders under base_output_dir, CLUSTER_SPEC, MASTER_ADDR/
MASTER_PORT/WORLD_SIZE/RANK, the storage emulator's host). Each replica's stdout/stderr lines go to the
Logging emulator as ml_job entries. The job moves PENDING -> RUNNING -> SUCCEEDED / FAILED (with the
replica's exit status in the error); CancelCustomJob sends SIGTERM, then kills; `preempt()` SIGTERMs a
replica and, when the job asked for restart on worker restart, starts it again (it should resume).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

import grpc
from google.cloud.aiplatform_v1.types import job_service

from .cloud_logging import LoggingEmulator
from .gcs import free_port, storage_client
from .vertex import CustomJob, JobState, VertexEmulator

CANCEL_GRACE_S = 10.0


class Replica:
    def __init__(self, pool: int, index: int):
        self.task_name = f"workerpool{pool}-{index}"
        self.pool = pool
        self.index = index
        self.proc: subprocess.Popen | None = None
        self.exit_codes: list[int] = []
        self.restarts = 0
        self.recorded: subprocess.Popen | None = None  # the process whose exit is already in exit_codes
        self.preempted = False  # SIGTERM-ed by preempt(): restart it when the job allows


class JobRun(threading.Thread):
    def __init__(self, emulator: RunningVertexEmulator, job: CustomJob):
        super().__init__(daemon=True, name=f"job-{job.name.rsplit('/', 1)[-1]}")
        self.emulator = emulator
        self.job = job
        self.job_id = job.name.rsplit("/", 1)[-1]
        self.workdir = Path(tempfile.mkdtemp(prefix=f"vertex-job-{self.job_id}-"))
        self.replicas: list[Replica] = []
        self.cancelled = threading.Event()
        self.error: str | None = None

    # -- set-up --------------------------------------------------------------------------------------------------

    def _install(self) -> Path:
        spec = self.job.job_spec.worker_pool_specs[0].python_package_spec
        venv = self.workdir / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
        site.mkdir(parents=True, exist_ok=True)
        # The test environment's packages are visible (as the container's are) but its .pth files are not
        # processed, so the editable ftcli install stays invisible: `import ftcli` fails in the job.
        paths = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
        (site / "_container_packages.pth").write_text("\n".join(sorted(paths)) + "\n")
        client = storage_client(self.emulator.gcs_url)
        for uri in spec.package_uris:
            bucket, _, name = uri[len("gs://"):].partition("/")
            local = self.workdir / Path(name).name
            client.bucket(bucket).blob(name).download_to_filename(str(local))
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                            "--no-index", "--prefix", str(venv), str(local)], check=True, capture_output=True)
        return venv / "bin" / "python"

    def _env(self, replica: Replica, nodes: int, rank: int, master_port: int) -> dict[str, str]:
        base = self.job.job_spec.base_output_directory.output_uri_prefix.rstrip("/")
        cluster = {"cluster": {}, "environment": "cloud",
                   "task": {"type": f"workerpool{replica.pool}", "index": replica.index}}
        for r in self.replicas:
            cluster["cluster"].setdefault(f"workerpool{r.pool}", []).append(f"127.0.0.1:{master_port}")
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR", "HF_HOME")}
        env.update(
            AIP_MODEL_DIR=f"{base}/model/", AIP_CHECKPOINT_DIR=f"{base}/checkpoints/",
            AIP_TENSORBOARD_LOG_DIR=f"{base}/logs/", CLOUD_ML_JOB_ID=self.job_id,
            CLUSTER_SPEC=json.dumps(cluster), STORAGE_EMULATOR_HOST=self.emulator.gcs_url,
            DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA="true", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
            OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 2) // max(1, nodes))), PYTHONUNBUFFERED="1",
        )
        if nodes > 1:
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port), WORLD_SIZE=str(nodes), RANK=str(rank))
        return env

    # -- running -------------------------------------------------------------------------------------------------

    def _pump(self, stream, replica: Replica, severity: str) -> None:
        for raw in stream:
            text = raw.rstrip("\n")
            if text:
                self.emulator.logs.write_line(self.job_id, replica.task_name, text, severity=severity)

    def _start(self, python: Path, replica: Replica, env: dict[str, str]) -> list[threading.Thread]:
        spec = self.job.job_spec.worker_pool_specs[replica.pool].python_package_spec
        replica.proc = subprocess.Popen([str(python), "-m", spec.python_module, *spec.args], env=env,
                                        cwd=self.workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        pumps = [threading.Thread(target=self._pump, args=(replica.proc.stdout, replica, "INFO"), daemon=True),
                 # Vertex files every stderr line as ERROR; ftcli must not show them all as errors
                 threading.Thread(target=self._pump, args=(replica.proc.stderr, replica, "ERROR"), daemon=True)]
        for p in pumps:
            p.start()
        return pumps

    def run(self) -> None:
        try:
            self._run()
        except Exception as e:  # noqa: BLE001 - an emulator failure must show up as a failed job, not a hang
            self.emulator._finish(self.job.name, JobState.JOB_STATE_FAILED, f"emulator: {type(e).__name__}: {e}")

    def _run(self) -> None:
        python = self._install()
        pools = self.job.job_spec.worker_pool_specs
        for p, pool in enumerate(pools[:2]):  # chief and workers; reduction servers are not emulated
            for i in range(int(pool.replica_count or 0)):
                self.replicas.append(Replica(p, i))
        if self.cancelled.is_set():
            return
        self.emulator._finish(self.job.name, JobState.JOB_STATE_RUNNING)
        port = free_port()
        envs = {r.task_name: self._env(r, len(self.replicas), n, port) for n, r in enumerate(self.replicas)}
        pumps = {r.task_name: self._start(python, r, envs[r.task_name]) for r in self.replicas}
        restart = self.job.job_spec.scheduling.restart_job_on_worker_restart
        while True:
            running = False
            for r in self.replicas:
                code = r.proc.poll()
                if code is None:
                    running = True
                    continue
                if r.recorded is r.proc:
                    continue
                for p in pumps[r.task_name]:
                    p.join(timeout=10)
                r.recorded = r.proc
                r.exit_codes.append(code)
                if code != 0 and restart and r.preempted and not self.cancelled.is_set():
                    r.preempted = False
                    r.restarts += 1
                    pumps[r.task_name] = self._start(python, r, envs[r.task_name])
                    running = True
            if not running:
                break
            time.sleep(0.1)
        if self.cancelled.is_set():
            return
        failed = [r for r in self.replicas if r.exit_codes and r.exit_codes[-1] != 0]
        if failed:
            r = failed[0]
            self.emulator._finish(self.job.name, JobState.JOB_STATE_FAILED,
                                  f"The replica {r.task_name} exited with a non-zero status of {r.exit_codes[-1]}.")
        else:
            self.emulator._finish(self.job.name, JobState.JOB_STATE_SUCCEEDED)

    def signal_all(self, sig: int) -> None:
        for r in self.replicas:
            if r.proc and r.proc.poll() is None:
                r.proc.send_signal(sig)

    def cancel(self) -> None:
        self.cancelled.set()

        def stop():
            self.signal_all(signal.SIGTERM)
            deadline = time.monotonic() + CANCEL_GRACE_S
            while time.monotonic() < deadline and any(r.proc and r.proc.poll() is None for r in self.replicas):
                time.sleep(0.1)
            self.signal_all(signal.SIGKILL)
            self.join(timeout=30)  # the run loop records the replicas' exit statuses before the job reads CANCELLED
            self.emulator._finish(self.job.name, JobState.JOB_STATE_CANCELLED)

        threading.Thread(target=stop, daemon=True).start()


class RunningVertexEmulator(VertexEmulator):
    """VertexEmulator whose CustomJobs really run (see the module docstring)."""

    def __init__(self, gcs_url: str, logs: LoggingEmulator, **kwargs):
        super().__init__(**kwargs)
        self.gcs_url = gcs_url
        self.logs = logs
        self.runs: dict[str, JobRun] = {}

    def _finish(self, name: str, state: JobState, message: str | None = None) -> None:
        with self._lock:
            job = self._jobs.get(name)
            if job is None:
                return
            if job.state in (JobState.JOB_STATE_CANCELLING, JobState.JOB_STATE_CANCELLED) and \
                    state != JobState.JOB_STATE_CANCELLED:
                return  # a cancel wins over whatever the replicas did while stopping
            self._apply(job, state, message)

    def _step(self, key: str) -> None:
        # States come from the running job, not from Gets: a cancel completes when the replicas have stopped.
        pass

    def _create(self, request: job_service.CreateCustomJobRequest, context: grpc.ServicerContext) -> CustomJob:
        job = super()._create(request, context)
        run = JobRun(self, job)
        self.runs[job.name] = run
        run.start()
        return job

    def _cancel(self, request, context):
        out = super()._cancel(request, context)
        run = self.runs.get(self._resolve(request.name))
        if run is not None:
            run.cancel()
        return out

    def preempt(self, name: str, task_name: str = "workerpool0-0") -> None:
        """What a Spot preemption does to a replica: SIGTERM (the trainer checkpoints and exits)."""
        run = self.runs[self._resolve(name)]
        for r in run.replicas:
            if r.task_name == task_name and r.proc and r.proc.poll() is None:
                r.preempted = True
                r.proc.send_signal(signal.SIGTERM)

    def wait(self, name: str, timeout: float = 300.0) -> CustomJob:
        """Block until the job reaches a final state (for tests and scripts)."""
        deadline = time.monotonic() + timeout
        final = {JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED}
        while time.monotonic() < deadline:
            job = self.job(name)
            if job.state in final:
                return job
            time.sleep(0.2)
        raise TimeoutError(f"{name} still {self.job(name).state.name} after {timeout} s")

    def stop(self) -> None:
        for run in self.runs.values():
            run.signal_all(signal.SIGKILL)
        super().stop()
