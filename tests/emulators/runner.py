"""A JobService emulator that runs what it is given, the way Vertex runs a custom container (containerSpec).

For each CreateCustomJob it looks the image up in its registry (`IMAGES`: what each image holds, Python's minor
version first), builds a "container": a fresh virtual environment on that Python (pyenv's interpreters stand in
for the image's), with pip, which sees the test environment's packages (torch, transformers, ...) only when the
minor version matches theirs, and never ftcli. It mirrors the buckets the job names under /gcs/ (Cloud Storage
FUSE) into a local folder, then runs the container's command and args once per replica, with the environment
Vertex gives a custom container (AIP_* folders under base_output_dir, CLUSTER_SPEC; no MASTER_ADDR/WORLD_SIZE/
RANK: Vertex documents those for its prebuilt containers only), pip kept off the network (PIP_NO_INDEX: what
the "image" lacks fails to install, as a missing wheel would on a real one). Each replica's stdout/stderr lines
go to the Logging emulator as ml_job entries. The job moves PENDING -> RUNNING -> SUCCEEDED / FAILED (with the
replica's exit status in the error; a replica's failure stops the others: Vertex shuts the whole job down);
CancelCustomJob sends SIGTERM, then kills; `preempt()` SIGTERMs a replica and, when the job asked for restart on
worker restart, restarts the whole job, every replica (they should resume).
"""

from __future__ import annotations

import contextlib
import glob
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

import grpc
from google.cloud.aiplatform_v1.types import custom_job, job_service

from .cloud_logging import LoggingEmulator
from .gcs import free_port, storage_client
from .vertex import CustomJob, JobState, VertexEmulator, _now

CANCEL_GRACE_S = 10.0
# How Vertex says a replica failed, in the job's error and in an ERROR entry of the job's log whose task_name is
# "service": the replica and its exit status, "Termination reason: Error.", the end of what it wrote to stderr (its
# traceback), a blank line, then a link to the logs. Seen in `gcloud ai custom-jobs stream-logs` output of a failed
# Vertex job (2026-02-23: "ERROR ... service The replica workerpool0-0 exited with a non-zero status of 1. Termination
# reason: Error.", the traceback, "To find out more about why your job exited please check the logs: https://console
# .cloud.google.com/logs/viewer?project=NUMBER&resource=ml_job%2Fjob_id%2FID&advancedFilter=..."), and in AI Platform's
# from 2019 and 2020 the same way (public repositories' notes, found with the code search, read 2026-11-28). Vertex
# documents neither the message nor how much stderr it keeps: the emulator keeps the last traceback, else the last
# TAIL_LINES lines.
FAILURE = ("The replica {replica} exited with a non-zero status of {code}. Termination reason: Error. \n{tail}\n"
           "To find out more about why your job exited please check the logs: https://console.cloud.google.com/logs/"
           "viewer?project={project}&resource=ml_job%2Fjob_id%2F{job_id}&advancedFilter=resource.type%3D%22ml_job%22"
           "%0Aresource.labels.job_id%3D%22{job_id}%22")
TAIL_LINES = 10
# The emulated registry: image -> the Python minor version of its `python` (pytorch/pytorch's runtime images are
# built with conda Python 3.11). Tests add images with `RunningVertexEmulator.images[uri] = "3.10"`.
IMAGES = {
    "docker.io/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime": "3.11",
    "docker.io/pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime": "3.11",
}
HOST_MINOR = f"{sys.version_info.major}.{sys.version_info.minor}"


def expand(text: str, variables: dict[str, str]) -> str:
    """Kubernetes' expansion of $(VAR_NAME) in a container's command, args and env values, which Vertex applies
    (EnvVar.value in aiplatform_v1 types/env_var.py: "Variables that reference a $(VAR_NAME) are expanded ... If a
    variable cannot be resolved, the reference in the input string will be unchanged. The $(VAR_NAME) syntax can be
    escaped with a double $$"; args: Google's sample passes "--model-dir=$(AIP_MODEL_DIR)" in containerSpec.args,
    https://cloud.google.com/vertex-ai/docs/samples/aiplatform-create-training-pipeline-custom-job-sample; both read
    2026-11-27). As Kubernetes' third_party/forked/golang/expansion does it: $$ is one $, $(NAME) the variable's value
    or itself when there is none, any other $ (and an unclosed $( ) stays."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "$" or i + 1 >= len(text):
            out.append(c)
            i += 1
        elif text[i + 1] == "$":
            out.append("$")
            i += 2
        elif text[i + 1] == "(" and (end := text.find(")", i + 2)) != -1:
            name = text[i + 2:end]
            out.append(variables.get(name, text[i:end + 1]))
            i = end + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def interpreter(minor: str) -> str | None:
    """A python<minor> executable on this machine (PATH, then pyenv's versions), or None."""
    if minor == HOST_MINOR:
        return sys.executable
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    versions = sorted(glob.glob(os.path.join(root, "versions", f"{minor}.*", "bin", f"python{minor}")))
    if versions:
        return versions[-1]
    found = shutil.which(f"python{minor}")
    # pyenv's shims answer for every version but fail (127) for one that is not selected: not an interpreter
    return found if found and "/shims/" not in found else None


class ImageError(RuntimeError):
    """The job's container cannot start (unknown image, no interpreter for it): the job fails, as on Vertex."""


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
        self.variables: dict[str, str] = {}  # what $(VAR_NAME) in its command and args can name (`expand`)
        self.stderr: deque[str] = deque(maxlen=200)  # the end of what its process wrote to stderr (`failure`)
        self.exited_at: float | None = None  # when its process ended (time.monotonic), set by its waiter thread

    def failure(self, job_id: str, project: str) -> str:
        """Vertex's error for this replica's non-zero exit (FAILURE)."""
        lines = list(self.stderr)
        starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
        tail = lines[starts[-1]:] if starts else lines[-TAIL_LINES:]
        return FAILURE.format(replica=self.task_name, code=self.exit_codes[-1], tail="".join(f"{x}\n" for x in tail),
                              project=project, job_id=job_id)


class JobRun(threading.Thread):
    def __init__(self, emulator: RunningVertexEmulator, job: CustomJob, extra_env: dict[str, str] | None = None):
        super().__init__(daemon=True, name=f"job-{job.name.rsplit('/', 1)[-1]}")
        self.emulator = emulator
        self.job = job
        self.job_id = job.name.rsplit("/", 1)[-1]
        self.workdir = Path(tempfile.mkdtemp(prefix=f"vertex-job-{self.job_id}-"))
        self.replicas: list[Replica] = []
        self.cancelled = threading.Event()
        self.error: str | None = None
        self.extra_env = dict(extra_env or {})  # e.g. a tuning trial's CLOUD_ML_TRIAL_ID
        self.image: tuple[str, bool] | None = None  # the image's stand-in Python, and whether it shares our packages
        self.gcs_root: Path | None = None  # what /gcs/ maps to
        self.released = threading.Event()  # set: the job may leave the queue (RunningVertexEmulator.hold)
        if not getattr(emulator, "hold", False):  # (a test's stand-in emulator has no queue)
            self.released.set()

    # -- set-up --------------------------------------------------------------------------------------------------

    def _container(self) -> tuple[str, bool]:
        """The Python standing in for the image's, and whether it sees the test environment's packages (each
        replica's container is made from it: `_replica_container`)."""
        pools = [p for p in self.job.job_spec.worker_pool_specs[:2] if p.machine_spec.machine_type]
        if any(p.python_package_spec.executor_image_uri for p in pools):
            raise ImageError("the emulator runs containerSpec jobs only")
        if len(self.job.job_spec.worker_pool_specs) > 2:
            raise ImageError("the emulator does not run Reduction Server pools")
        uri = pools[0].container_spec.image_uri
        if (refusal := self.emulator.pull_refusals.get(uri)) is not None:
            raise ImageError(f"Unable to pull the container image {uri}: {refusal}")
        minor = self.emulator.images.get(uri)
        if minor is None:
            raise ImageError(f"Unable to pull the container image {uri}: not found in the (emulated) registry")
        python = interpreter(minor)
        if python is None:
            raise ImageError(f"no Python {minor} on this machine to stand in for {uri}")
        # The host's minor version sees the test environment's packages as the image's own; another minor gets a
        # bare interpreter with its own pip (nothing of the test environment loads under it anyway).
        return python, minor == HOST_MINOR

    def _replica_container(self, replica: Replica) -> Path:
        """A venv of its own for each replica, as each of Vertex's replicas runs in a container of its own: one venv
        for all had the replicas' start scripts pip-install the trainer into the same site-packages at once, a race
        a real job never runs (suspected, not shown, when a two-replica test's job once never reached its 20th step
        in CI)."""
        from ftcli import container

        assert self.image is not None
        python, share = self.image
        return container.make(self.workdir / f"container-{replica.task_name}", python, share_packages=share)

    def _mount_gcs(self) -> Path:
        """Mirror every bucket the job names under /gcs/ into workdir/gcs (read-only use: the trainer writes
        through gs:// URIs)."""
        root = self.workdir / "gcs"
        root.mkdir()
        spec = self.job.job_spec.worker_pool_specs[0].container_spec
        texts = [*spec.command, *spec.args, *(e.value for e in spec.env)]
        buckets = {t.split("/gcs/", 1)[1].split("/", 1)[0] for t in texts if "/gcs/" in t}
        client = storage_client(self.emulator.gcs_url)
        for bucket in buckets:
            for blob in client.list_blobs(bucket):
                local = root / bucket / blob.name
                local.parent.mkdir(parents=True, exist_ok=True)
                # by name, not through the listed blob's mediaLink: gcp-storage-emulator writes the name into that
                # link unquoted, so an object named with '#' or '?' (a user's data file) 404-ed and failed the job
                client.bucket(bucket).blob(blob.name).download_to_filename(str(local))
        return root

    def _gcs(self, text: str) -> str:
        return text.replace("/gcs/", f"{self.gcs_root}/")

    def _env(self, replica: Replica, master_port: int) -> dict[str, str]:
        from ftcli import container

        base = self.job.job_spec.base_output_directory.output_uri_prefix.rstrip("/")
        cluster = {"cluster": {}, "environment": "cloud",
                   "task": {"type": f"workerpool{replica.pool}", "index": replica.index}}
        for r in self.replicas:
            cluster["cluster"].setdefault(f"workerpool{r.pool}", []).append(f"127.0.0.1:{master_port}")
        env = {k: v for k, v in os.environ.items() if k in ("HOME", "LANG", "TMPDIR", "HF_HOME")}
        spec = self.job.job_spec.worker_pool_specs[replica.pool].container_spec
        service = dict(AIP_MODEL_DIR=f"{base}/model/", AIP_CHECKPOINT_DIR=f"{base}/checkpoints/",
                       AIP_TENSORBOARD_LOG_DIR=f"{base}/logs/", CLOUD_ML_JOB_ID=self.job_id,
                       CLUSTER_SPEC=json.dumps(cluster), **self.extra_env)
        variables = dict(service)
        for e in spec.env:  # each value sees the service's variables and the ones defined before it
            variables[e.name] = expand(e.value, variables)
        replica.variables = variables
        env.update({e.name: self._gcs(variables[e.name]) for e in spec.env})
        env = container.env(self._replica_container(replica), env)
        env.update(
            STORAGE_EMULATOR_HOST=self.emulator.gcs_url,
            DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA="true",
            # the cores this process may use (its share under pytest-xdist: tests/conftest.py), split between replicas
            OMP_NUM_THREADS=str(max(1, int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 2)
                                    // max(1, len(self.replicas)))),
            **self.emulator.job_env,
        )
        env.update(service)
        return env

    # -- running -------------------------------------------------------------------------------------------------

    def _pump(self, stream, replica: Replica, severity: str) -> None:
        for raw in stream:
            text = raw.rstrip("\n")
            if text:
                if severity == "ERROR":
                    replica.stderr.append(text)
                self.emulator.logs.write_line(self.job_id, replica.task_name, text, severity=severity)

    def _start(self, replica: Replica, env: dict[str, str]) -> list[threading.Thread]:
        spec = self.job.job_spec.worker_pool_specs[replica.pool].container_spec
        argv = [self._gcs(expand(a, replica.variables)) for a in (*spec.command, *spec.args)]
        replica.stderr.clear()
        replica.exited_at = None
        proc = replica.proc = subprocess.Popen(argv, env=env, cwd=self.workdir, stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE, text=True)

        def wait() -> None:
            proc.wait()
            if replica.proc is proc:
                replica.exited_at = time.monotonic()

        threading.Thread(target=wait, daemon=True).start()
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
        # QUEUED until it may start ("the job might remain in the JOB_STATE_QUEUED state for some time before Vertex AI
        # runs it ... if your Google Cloud project does not have sufficient remaining custom training quotas for your
        # job, then Vertex AI keeps the job queued"), PENDING while its machines are readied ("The service is preparing
        # to run the job", JobState), RUNNING "When all the workers are available" ("Understand the custom training
        # service", https://cloud.google.com/vertex-ai/docs/training/understanding-training-service; JobState,
        # https://cloud.google.com/vertex-ai/docs/reference/rest/v1/JobState; both read 2026-11-28).
        while not self.released.wait(0.1):
            if self.cancelled.is_set():
                return
        if self.cancelled.is_set():
            return
        self.emulator._finish(self.job.name, JobState.JOB_STATE_PENDING)
        try:
            self.image = self._container()
            self.gcs_root = self._mount_gcs()
        except ImageError as e:
            self.emulator._finish(self.job.name, JobState.JOB_STATE_FAILED, str(e))
            return
        pools = self.job.job_spec.worker_pool_specs
        for p, pool in enumerate(pools[:2]):  # chief and workers; reduction servers are not emulated
            for i in range(int(pool.replica_count or 0)):
                self.replicas.append(Replica(p, i))
        if self.cancelled.is_set():
            return
        self.emulator._finish(self.job.name, JobState.JOB_STATE_RUNNING)
        port = free_port()
        envs = {r.task_name: self._env(r, port) for r in self.replicas}
        pumps = {r.task_name: self._start(r, envs[r.task_name]) for r in self.replicas}
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
                if r.exited_at is None:  # its waiter thread has not said yet
                    r.exited_at = time.monotonic()
                # a replica that fails on a preempted one (the chief, when its worker stopped) is part of that restart
                if code != 0 and restart and any(x.preempted for x in self.replicas) and not self.cancelled.is_set():
                    self._restart_all(pumps, envs)
                    running = True
                    break
                if code != 0 and not self.cancelled.is_set():
                    # "If a worker fails due to a common error, it is treated as a permanent error, and Vertex AI shuts
                    # down the entire job" ("Understand the custom training service", https://cloud.google.com/
                    # vertex-ai/docs/training/understanding-training-service, read 2026-11-28). The emulator waited
                    # for the other replicas instead: a chief blocked in a collective on the failed worker kept the
                    # job RUNNING (and billed) until its own timeout.
                    self._stop_all(pumps)
                    running = False
                    break
            if not running:
                break
            time.sleep(0.1)
        if self.cancelled.is_set():
            return
        # The replica that failed first is the one Vertex names: in a distributed job the others then fail too, on
        # the connection it closed (gloo's "Connection closed by peer"), and naming the chief for its list order
        # showed that consequence as the job's error instead of the worker's own.
        failed = sorted((r for r in self.replicas if r.exit_codes and r.exit_codes[-1] != 0),
                        key=lambda r: r.exited_at if r.exited_at is not None else math.inf)
        if failed:
            message = failed[0].failure(self.job_id, self.job.name.split("/")[1])
            self.emulator.logs.write_line(self.job_id, "service", message, severity="ERROR")
            self.emulator._finish(self.job.name, JobState.JOB_STATE_FAILED, message)
        else:
            self.emulator._finish(self.job.name, JobState.JOB_STATE_SUCCEEDED)

    def _stop_all(self, pumps: dict) -> None:
        """Every replica still running stops (SIGTERM, then a kill after the grace period); each exit is recorded, at
        the time it came (the replica that failed first stays the first)."""
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + CANCEL_GRACE_S
        while time.monotonic() < deadline and any(r.proc.poll() is None for r in self.replicas):
            time.sleep(0.1)
        self.signal_all(signal.SIGKILL)
        for r in self.replicas:
            code = r.proc.wait()
            for p in pumps[r.task_name]:
                p.join(timeout=10)
            if r.recorded is not r.proc:
                r.recorded = r.proc
                r.exit_codes.append(code)
                if r.exited_at is None:
                    r.exited_at = time.monotonic()

    def _restart_all(self, pumps: dict, envs: dict) -> None:
        """restartJobOnWorkerRestart: "Restarts the entire CustomJob if a worker gets restarted" (Scheduling, see
        ftcli.spec): every replica stops and starts again with its command and environment. Restarting only the
        preempted one left it waiting for the others to join, forever."""
        self._stop_all(pumps)
        if self.cancelled.is_set():
            return
        for r in self.replicas:
            r.preempted = False
            r.restarts += 1
            pumps[r.task_name] = self._start(r, envs[r.task_name])

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


class TuningRun(threading.Thread):
    """A HyperparameterTuningJob's trials, one after another (Vertex runs up to parallel_trial_count at once; the
    order does not change what each trial sees). Each trial is a CustomJob of the trial spec with the trial's
    values appended to the container args as `--PARAMETER_ID VALUE`, its outputs under BASE/TRIAL_ID, and
    CLOUD_ML_TRIAL_ID / CLOUD_ML_HP_METRIC_FILE set; the metric the trainer last wrote there is the trial's
    final measurement. Values are drawn at random (seeded by the job id): the emulator does no Bayesian search."""

    def __init__(self, emulator: RunningVertexEmulator, job):
        super().__init__(daemon=True, name=f"tuning-{job.name.rsplit('/', 1)[-1]}")
        self.emulator = emulator
        self.job = job
        self.cancelled = threading.Event()
        self.current: JobRun | None = None

    def _values(self, rng: random.Random) -> list[tuple[str, object, str]]:
        """(parameter id, proto value, command-line text) for one trial."""
        out = []
        for p in self.job.study_spec.parameters:
            if p.double_value_spec:
                lo, hi = p.double_value_spec.min_value, p.double_value_spec.max_value
                log = p.scale_type.name == "UNIT_LOG_SCALE"
                v = math.exp(rng.uniform(math.log(lo), math.log(hi))) if log else rng.uniform(lo, hi)
                out.append((p.parameter_id, v, repr(v)))
            elif p.integer_value_spec:
                v = rng.randint(int(p.integer_value_spec.min_value), int(p.integer_value_spec.max_value))
                out.append((p.parameter_id, float(v), str(v)))
            elif p.discrete_value_spec:
                v = rng.choice(list(p.discrete_value_spec.values))
                out.append((p.parameter_id, v, repr(float(v))))  # a double on the command line: "16.0"
            else:
                v = rng.choice(list(p.categorical_value_spec.values))
                out.append((p.parameter_id, v, v))
        return out

    def run(self) -> None:
        from google.cloud.aiplatform_v1.types import study
        from google.protobuf import struct_pb2

        emulator, name = self.emulator, self.job.name
        emulator._finish_tuning(name, JobState.JOB_STATE_RUNNING)
        rng = random.Random(name)
        metric = self.job.study_spec.metrics[0].metric_id
        base = self.job.trial_job_spec.base_output_directory.output_uri_prefix.rstrip("/")
        succeeded = 0
        for n in range(1, self.job.max_trial_count + 1):
            if self.cancelled.is_set():
                break
            values = self._values(rng)
            spec = custom_job.CustomJobSpec(self.job.trial_job_spec)
            # Each value as two arguments, `--PARAMETER_ID VALUE`, after the job's own: Vertex's example trial is
            # `python3 -m my_trainer --learning_rate learning-rate-in-this-trial` ("Create a hyperparameter tuning
            # job", https://docs.cloud.google.com/vertex-ai/docs/training/using-hyperparameter-tuning, read
            # 2026-11-26 in its ja, ko and zh-cn editions; the page says no more about the form). The trainer's
            # argparse takes `--PARAMETER_ID=VALUE` as well (tests/trainer/test_hypertune.py).
            for pool in spec.worker_pool_specs[:2]:  # the trainers; a reduction-server pool takes no hyperparameters
                if pool.container_spec.image_uri:
                    pool.container_spec.args.extend(a for pid, _, text in values for a in (f"--{pid}", text))
            if base:
                spec.base_output_directory.output_uri_prefix = f"{base}/{n}"
            trial_job = emulator._store_job(CustomJob(display_name=f"{self.job.display_name}-trial-{n}",
                                                      job_spec=spec), name.split("/hyperparameterTuningJobs/")[0])
            trial = study.Trial(id=str(n), state=study.Trial.State.ACTIVE, start_time=_now(), custom_job=trial_job.name)
            for pid, value, _ in values:
                proto_value = struct_pb2.Value(string_value=value) if isinstance(value, str) else \
                    struct_pb2.Value(number_value=value)
                trial.parameters.append(study.Trial.Parameter(parameter_id=pid, value=proto_value))
            emulator._add_trial(name, trial)
            run = JobRun(emulator, trial_job)
            run.extra_env = {"CLOUD_ML_TRIAL_ID": str(n),
                             "CLOUD_ML_HP_METRIC_FILE": str(run.workdir / "hypertune" / "output.metrics")}
            emulator.runs[trial_job.name] = run
            self.current = run
            run.start()
            run.join()
            value = _final_metric(run.workdir / "hypertune" / "output.metrics", metric, self.job.study_spec)
            ran = emulator.job(trial_job.name)
            reason = _infeasible_reason(ran, metric, value)
            succeeded += reason is None
            trial.end_time = _now()
            if reason is None:
                trial.state = study.Trial.State.SUCCEEDED
                trial.final_measurement = study.Measurement(metrics=[study.Measurement.Metric(metric_id=metric,
                                                                                              value=value)])
            else:
                trial.state, trial.infeasible_reason = study.Trial.State.INFEASIBLE, reason
            emulator._add_trial(name, trial)
        if self.cancelled.is_set():
            emulator._finish_tuning(name, JobState.JOB_STATE_CANCELLED)
        elif succeeded:
            emulator._finish_tuning(name, JobState.JOB_STATE_SUCCEEDED)
        else:
            emulator._finish_tuning(name, JobState.JOB_STATE_FAILED, "All trials failed.")


def _infeasible_reason(ran, metric: str, value: float | None) -> str | None:
    """Why a trial whose CustomJob ended as `ran` is INFEASIBLE, or None: it SUCCEEDED. Vertex sets a trial INFEASIBLE
    "when it's done but missing the final_measurement" (Trial.State), and an infeasible trial's final measurement "will
    be ignored" (CompleteTrialRequest.trial_infeasible), with "A human readable string describing why" in
    infeasible_reason (Trial; the three in the installed google-cloud-aiplatform 2.7.0's aiplatform_v1 types/study.py
    and vizier_service.py, read 2026-11-28). So a failed trial has no value, whatever it reported before it failed.
    The reason's wording is not documented: here the trial job's own error, or that the metric never came."""
    if ran.state != JobState.JOB_STATE_SUCCEEDED:
        return ran.error.message or f"The trial's job ended {ran.state.name.removeprefix('JOB_STATE_')}."
    if value is None:
        return f"The trial reported no value of the metric {metric!r}."
    return None


def _final_metric(path: Path, tag: str, spec) -> float | None:
    """The trial's final measurement from the values it reported: the last one, or the best with BEST_MEASUREMENT
    ("MEASUREMENT_SELECTION_TYPE_UNSPECIFIED: Will be treated as LAST_MEASUREMENT", StudySpec.MeasurementSelectionType
    in the installed google-cloud-aiplatform 2.7.0's aiplatform_v1/types/study.py, read 2026-11-28)."""
    from google.cloud.aiplatform_v1.types import study

    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    values = [float(json.loads(x)[tag]) for x in lines if x.strip() and tag in json.loads(x)]
    if not values:
        return None
    if spec.measurement_selection_type == study.StudySpec.MeasurementSelectionType.BEST_MEASUREMENT:
        goal = spec.metrics[0].goal
        return min(values) if goal == study.StudySpec.MetricSpec.GoalType.MINIMIZE else max(values)
    return values[-1]


class RunningVertexEmulator(VertexEmulator):
    """VertexEmulator whose CustomJobs really run (see the module docstring)."""

    def __init__(self, gcs_url: str, logs: LoggingEmulator, **kwargs):
        super().__init__(**kwargs)
        self.gcs_url = gcs_url
        self.logs = logs
        self.runs: dict[str, JobRun] = {}
        self.tuning_runs: dict[str, TuningRun] = {}
        self.images: dict[str, str] = dict(IMAGES)
        # image -> what its registry answers instead of the image (e.g. Docker Hub's rate limit): the job fails
        self.pull_refusals: dict[str, str] = {}
        # What the network gives every replica, this emulator's (one test's) own: no Hugging Face Hub unless a test
        # points the job at the Hub emulator (HF_HUB_OFFLINE="0", HF_ENDPOINT, HF_HOME) and, for --hf-secret, at the
        # Secret Manager emulator (FTCLI_SECRETMANAGER_ENDPOINT).
        self.job_env: dict[str, str] = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
        # True: jobs created from now on stay QUEUED (no quota, no Spot or Flex-start capacity yet) until `release`
        self.hold = False

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
        with self._lock:  # created into the queue (JobRun._run)
            self._jobs[job.name].state = job.state = JobState.JOB_STATE_QUEUED
        run = JobRun(self, job)
        self.runs[job.name] = run
        run.start()
        return job

    # -- tuning jobs -----------------------------------------------------------------------------------------------

    def _create_tuning(self, request, context):
        job = super()._create_tuning(request, context)
        run = TuningRun(self, job)
        self.tuning_runs[job.name] = run
        run.start()
        return job

    def _store_job(self, job: CustomJob, parent: str) -> CustomJob:
        """A trial's CustomJob, stored as Create would store it (its name, state and times)."""
        with self._lock:
            job.name = f"{parent}/customJobs/{next(self._ids)}"
            job.state = JobState.JOB_STATE_PENDING
            job.create_time = job.update_time = _now()
            self._jobs[job.name] = job
            self._order[job.name] = len(self._order)
            return CustomJob(job)

    def _add_trial(self, name: str, trial) -> None:
        with self._lock:
            job = self._tuning[name]
            kept = [t for t in job.trials if t.id != trial.id]
            del job.trials[:]
            job.trials.extend([*kept, trial])
            job.update_time = _now()

    def _finish_tuning(self, name: str, state: JobState, message: str | None = None) -> None:
        with self._lock:
            job = self._tuning.get(name)
            if job is None or (job.state in (JobState.JOB_STATE_CANCELLING, JobState.JOB_STATE_CANCELLED)
                               and state != JobState.JOB_STATE_CANCELLED):
                return
            self._apply(job, state, message)

    def _on_tuning_cancel(self, name: str) -> None:
        run = self.tuning_runs.get(name)
        if run is None:
            return super()._on_tuning_cancel(name)
        run.cancelled.set()
        if run.current is not None:
            run.current.cancel()

    def wait_tuning(self, name: str, timeout: float = 600.0):
        deadline = time.monotonic() + timeout
        final = {JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED}
        while time.monotonic() < deadline:
            job = self.tuning_jobs[name]
            if job.state in final:
                return job
            time.sleep(0.2)
        raise TimeoutError(f"{name} still running after {timeout} s")

    def _cancel(self, request, context):
        out = super()._cancel(request, context)
        run = self.runs.get(self._resolve(request.name))
        if run is not None:
            run.cancel()
        return out

    def release(self, name: str) -> None:
        """A job held QUEUED (`hold`) leaves the queue: it gets its machines and runs."""
        self.runs[self._resolve(name)].released.set()

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
        for run in self.runs.values():  # each job's venv and files (they once piled up in /tmp, 2.3 GB here)
            for r in run.replicas:
                if r.proc is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        r.proc.wait(timeout=10)
            shutil.rmtree(run.workdir, ignore_errors=True)
