"""A local gRPC ``google.cloud.aiplatform.v1.JobService`` (CustomJobs only) that records what clients send.

    with VertexEmulator() as vertex:
        client = vertex.client()   # JobServiceClient over grpc.insecure_channel(vertex.address)
        job = client.create_custom_job(parent="projects/p/locations/us-central1", custom_job={...})
        vertex.set_state(job.name, "JOB_STATE_RUNNING")
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import itertools
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc
from google.cloud.aiplatform_v1.types import custom_job, hyperparameter_tuning_job, job_service
from google.cloud.aiplatform_v1.types.job_state import JobState
from google.protobuf import empty_pb2
from google.rpc import code_pb2, status_pb2

from . import _filters, vertex_rules
from ._grpc import GrpcEmulator

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1.services.job_service import JobServiceClient

CustomJob = custom_job.CustomJob
TuningJob = hyperparameter_tuning_job.HyperparameterTuningJob
PARENT = re.compile(r"^projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)$")
JOB_NAME = re.compile(r"^projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/customJobs/(?P<id>[^/]+)$")
HP_NAME = re.compile(
    r"^projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/hyperparameterTuningJobs/(?P<id>[^/]+)$")
TERMINAL = {JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED,
            JobState.JOB_STATE_EXPIRED, JobState.JOB_STATE_PARTIALLY_SUCCEEDED}
STARTED = {JobState.JOB_STATE_RUNNING, JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED,
           JobState.JOB_STATE_PARTIALLY_SUCCEEDED}
# What a failed Vertex CustomJob usually carries when the trainer exits non-zero.
DEFAULT_FAILURE = "The replica workerpool0-0 exited with a non-zero status of 1."
DEFAULT_PAGE_SIZE = 100
FIRST_ID = 7_100_000_000_000_000_001  # 19 digits, like real CustomJob ids

StateLike = JobState | str | int
ScriptStep = StateLike | tuple[StateLike, str]
# A tuning job's step: a state (or (state, message)), or a change to the stored job (e.g. add_trial(...)).
TuningStep = ScriptStep | Callable[[TuningJob], None]


def job_state(state: StateLike) -> JobState:
    """JobState from an enum, its number, its full name or its short name ("RUNNING")."""
    if isinstance(state, JobState):
        return state
    if isinstance(state, int):
        return JobState(state)
    name = state.upper()
    return JobState[name if name.startswith("JOB_STATE_") else f"JOB_STATE_{name}"]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class VertexEmulator(GrpcEmulator):
    """JobService's CustomJob methods: Create, Get, List (filter + paging, newest first), Cancel. Create refuses
    what the real service refuses (`vertex_rules`): a retired prebuilt image, a GPU the region does not train on,
    a boot disk the machine cannot take, an on-demand ask for machines sold only as Spot/Flex-start/reserved.

    ``project_number``: when set, returned job names use it in place of the project id, as real Vertex does
    (``projects/my-proj/...`` in the request, ``projects/123456789012/...`` in the response).
    ``script``: states that every new job walks through, one step per GetCustomJob; with ["RUNNING", "SUCCEEDED"]
    Create returns PENDING, the first Get RUNNING, every later Get SUCCEEDED. A step may be ``(state, message)``.
    ``next_tuning_scripts``: the same for the next HyperparameterTuningJobs created (their trials do not run here), one
    step per GetHyperparameterTuningJob; a step may also change the job, as ``add_trial(...)`` does.
    ``reset()`` forgets jobs, requests, faults and the script.
    """

    SERVICE = "google.cloud.aiplatform.v1.JobService"
    METHODS = ("CreateCustomJob", "GetCustomJob", "ListCustomJobs", "CancelCustomJob",
               "CreateHyperparameterTuningJob", "GetHyperparameterTuningJob", "ListHyperparameterTuningJobs",
               "CancelHyperparameterTuningJob")

    def __init__(self, project_number: str | None = None, script: list[ScriptStep] | None = None,
                 max_workers: int = 16) -> None:
        super().__init__(max_workers)
        self.project_number = project_number
        self.script: list[ScriptStep] = list(script or [])
        self.next_scripts: list[list[ScriptStep]] = []  # scripts for the next jobs created, first job first
        self._jobs: dict[str, CustomJob] = {}
        self._order: dict[str, int] = {}
        self._scripts: dict[str, list[ScriptStep]] = {}
        self._ids = itertools.count(FIRST_ID)
        self._aliases: dict[str, str] = {}  # project id -> number, learnt at create time
        self._tuning: dict[str, TuningJob] = {}
        self.next_tuning_scripts: list[list[TuningStep]] = []
        self._tuning_scripts: dict[str, list[TuningStep]] = {}

    def _on_reset(self) -> None:
        self._tuning.clear()
        self._tuning_scripts.clear()
        self.next_tuning_scripts = []
        self._jobs.clear()
        self._order.clear()
        self._scripts.clear()
        self._aliases.clear()
        self.script = []
        self.next_scripts = []

    def _handlers(self) -> dict[str, grpc.RpcMethodHandler]:
        js = job_service
        return {
            "CreateCustomJob": self._unary("CreateCustomJob", self._create, js.CreateCustomJobRequest.deserialize,
                                           CustomJob.serialize),
            "GetCustomJob": self._unary("GetCustomJob", self._get, js.GetCustomJobRequest.deserialize,
                                        CustomJob.serialize),
            "ListCustomJobs": self._unary("ListCustomJobs", self._list, js.ListCustomJobsRequest.deserialize,
                                          js.ListCustomJobsResponse.serialize),
            "CancelCustomJob": self._unary("CancelCustomJob", self._cancel, js.CancelCustomJobRequest.deserialize,
                                           empty_pb2.Empty.SerializeToString),
            "CreateHyperparameterTuningJob": self._unary(
                "CreateHyperparameterTuningJob", self._create_tuning,
                js.CreateHyperparameterTuningJobRequest.deserialize, TuningJob.serialize),
            "GetHyperparameterTuningJob": self._unary(
                "GetHyperparameterTuningJob", self._get_tuning, js.GetHyperparameterTuningJobRequest.deserialize,
                TuningJob.serialize),
            "ListHyperparameterTuningJobs": self._unary(
                "ListHyperparameterTuningJobs", self._list_tuning, js.ListHyperparameterTuningJobsRequest.deserialize,
                js.ListHyperparameterTuningJobsResponse.serialize),
            "CancelHyperparameterTuningJob": self._unary(
                "CancelHyperparameterTuningJob", self._cancel_tuning,
                js.CancelHyperparameterTuningJobRequest.deserialize, empty_pb2.Empty.SerializeToString),
        }

    def client(self) -> JobServiceClient:
        """A JobServiceClient on a plaintext channel to this server (close it, or use it as a context manager)."""
        from google.cloud.aiplatform_v1.services.job_service import JobServiceClient
        from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

        return JobServiceClient(transport=JobServiceGrpcTransport(channel=self.channel()))

    # -- test hooks ------------------------------------------------------------------------------------------------

    @property
    def jobs(self) -> dict[str, CustomJob]:
        """A snapshot: job name -> a copy of the stored CustomJob (reading it does not advance scripts)."""
        with self._lock:
            return {name: CustomJob(job) for name, job in self._jobs.items()}

    @property
    def tuning_jobs(self) -> dict[str, TuningJob]:
        """A snapshot: tuning job name -> a copy of the stored HyperparameterTuningJob."""
        with self._lock:
            return {name: TuningJob(job) for name, job in self._tuning.items()}

    def job(self, name_or_id: str) -> CustomJob:
        """One stored job (a copy) by full name or numeric id; KeyError if absent."""
        with self._lock:
            return CustomJob(self._jobs[self._resolve(name_or_id)])

    def set_state(self, name: str, state: StateLike, error_message: str | None = None) -> None:
        """Put a job in ``state`` now (times and error filled in as Vertex would); clears its remaining script."""
        with self._lock:
            key = self._resolve(name)
            self._scripts.pop(key, None)
            self._apply(self._jobs[key], job_state(state), error_message)

    def set_script(self, name: str, steps: list[ScriptStep]) -> None:
        """States that successive GetCustomJob calls on ``name`` walk through; the last one sticks."""
        with self._lock:
            self._scripts[self._resolve(name)] = list(steps)

    # -- internals -------------------------------------------------------------------------------------------------

    def _resolve(self, name: str) -> str:
        """Canonical stored name for a full name (project id or number) or a bare numeric id."""
        if name in self._jobs:
            return name
        m = JOB_NAME.match(name)
        if m:
            project = self._aliases.get(m["project"], m["project"])
            key = f"projects/{project}/locations/{m['location']}/customJobs/{m['id']}"
            if key in self._jobs:
                return key
            raise KeyError(name)
        for key in self._jobs:
            if key.rsplit("/", 1)[-1] == name:
                return key
        raise KeyError(name)

    def _apply(self, job: CustomJob, state: JobState, error_message: str | None = None) -> None:
        now = _now()
        job.state = state
        job.update_time = now
        if state in STARTED and not job.start_time:
            job.start_time = now
        if state in TERMINAL and not job.end_time:
            job.end_time = now
        if state == JobState.JOB_STATE_FAILED:
            job.error = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=error_message or DEFAULT_FAILURE)
        elif state == JobState.JOB_STATE_CANCELLED:
            # "an error value with a google.rpc.Status.code of 1, corresponding to Code.CANCELLED" (CancelCustomJob in
            # google-cloud-aiplatform 2.7.0's aiplatform_v1, read 2026-11-28), message "CANCELED" (what prefect-gcp's
            # Vertex worker finds in a cancelled job's error: PrefectHQ/prefect-gcp PR #213, read 2026-11-28)
            job.error = status_pb2.Status(code=code_pb2.CANCELLED, message=error_message or "CANCELED")
        elif error_message:
            job.error = status_pb2.Status(code=code_pb2.UNKNOWN, message=error_message)

    def _step(self, key: str) -> None:
        """Advance a job one Get: a pending cancel completes, else the next script step applies."""
        job = self._jobs[key]
        if job.state == JobState.JOB_STATE_CANCELLING:
            self._apply(job, JobState.JOB_STATE_CANCELLED)
            return
        steps = self._scripts.get(key)
        if steps:
            step = steps.pop(0)
            state, message = step if isinstance(step, tuple) else (step, None)
            self._apply(job, job_state(state), message)

    def _lookup(self, name: str, context: grpc.ServicerContext) -> str:
        if not JOB_NAME.match(name):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid CustomJob resource name: {name!r}")
        try:
            return self._resolve(name)
        except KeyError:
            context.abort(grpc.StatusCode.NOT_FOUND, f'The CustomJob "{name}" does not exist.')
            raise  # unreachable: abort raises

    def _create(self, request: job_service.CreateCustomJobRequest, context: grpc.ServicerContext) -> CustomJob:
        m = PARENT.match(request.parent)
        if not m:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid parent: {request.parent!r}")
        job = CustomJob(request.custom_job)
        # CustomJob.display_name and CustomJobSpec.worker_pool_specs: "Required." (aiplatform_v1 types/custom_job.py,
        # google-cloud-aiplatform 2.7.0, read 2026-11-28).
        if not job.display_name:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "CustomJob.display_name is required.")
        if not job.job_spec.worker_pool_specs:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "CustomJob.job_spec.worker_pool_specs is required.")
        problem = vertex_rules.refusal(job, m["location"])
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        with self._lock:
            name = self._new(job, m, "customJobs")
            self._jobs[name] = job
            self._order[name] = len(self._order)
            if self.next_scripts:  # one script per new job, in creation order
                self._scripts[name] = list(self.next_scripts.pop(0))
            elif self.script:
                self._scripts[name] = list(self.script)
            return CustomJob(job)

    def _new(self, job, m, collection: str) -> str:
        """Name a created job (under the project's number when the emulator has one, as Vertex does) and stamp it
        PENDING now; the caller holds the lock and stores it."""
        project = m["project"]
        if self.project_number:
            self._aliases[project] = self.project_number
            project = self.project_number
        job.name = f"projects/{project}/locations/{m['location']}/{collection}/{next(self._ids)}"
        job.state = JobState.JOB_STATE_PENDING
        job.create_time = job.update_time = _now()
        return job.name

    def _get(self, request: job_service.GetCustomJobRequest, context: grpc.ServicerContext) -> CustomJob:
        with self._lock:
            key = self._lookup(request.name, context)
            self._step(key)
            return CustomJob(self._jobs[key])

    def _list(self, request: job_service.ListCustomJobsRequest,
              context: grpc.ServicerContext) -> job_service.ListCustomJobsResponse:
        m = PARENT.match(request.parent)
        if not m:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid parent: {request.parent!r}")
        if request.page_size < 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "page_size must not be negative")
        try:
            match = _job_matcher(request.filter)
        except _filters.FilterError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        try:
            offset = int(request.page_token or 0)
        except ValueError:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid page_token: {request.page_token!r}")
        size = request.page_size or DEFAULT_PAGE_SIZE
        with self._lock:
            project = self._aliases.get(m["project"], m["project"])
            prefix = f"projects/{project}/locations/{m['location']}/customJobs/"
            names = sorted((n for n in self._jobs if n.startswith(prefix)), key=lambda n: (
                self._jobs[n].create_time, self._order[n]), reverse=True)
            hits = [CustomJob(self._jobs[n]) for n in names if match(self._jobs[n])]
        page = hits[offset:offset + size]
        token = str(offset + size) if offset + size < len(hits) else ""
        return job_service.ListCustomJobsResponse(custom_jobs=page, next_page_token=token)

    def _cancel(self, request: job_service.CancelCustomJobRequest, context: grpc.ServicerContext) -> empty_pb2.Empty:
        with self._lock:
            key = self._lookup(request.name, context)
            job = self._jobs[key]
            # Documented as ambiguous: CancelCustomJob says only "The server makes a best effort to cancel the job, but
            # success is not guaranteed" (aiplatform_v1 JobServiceClient.cancel_custom_job, google-cloud-aiplatform
            # 2.7.0, read 2026-11-28), nothing about a finished job. FAILED_PRECONDITION is gRPC's code for "the system
            # is not in a state required for the operation's execution" (google/rpc/code.proto), which Vertex answers
            # for other operations that are no longer cancellable (GoogleCloudPlatform/vertex-ai-samples#18, "is not
            # cancellable.", read 2026-11-28); ftcli reads the job before and after the call (jobs._cancel), so a
            # silent no-op shows the finished state too.
            if job.state in TERMINAL:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                              f"Cannot cancel CustomJob {job.name} in state {job.state.name}.")
            if job.state != JobState.JOB_STATE_CANCELLING:
                self._scripts.pop(key, None)
                self._apply(job, JobState.JOB_STATE_CANCELLING)
        return empty_pb2.Empty()


    # -- hyperparameter tuning jobs --------------------------------------------------------------------------------

    def _create_tuning(self, request: job_service.CreateHyperparameterTuningJobRequest,
                       context: grpc.ServicerContext) -> TuningJob:
        m = PARENT.match(request.parent)
        if not m:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid parent: {request.parent!r}")
        job = TuningJob(request.hyperparameter_tuning_job)
        # "Required." on each of these (docstrings of the installed google-cloud-aiplatform 2.7.0's aiplatform_v1
        # types/hyperparameter_tuning_job.py, study.py and custom_job.py, read 2026-11-28).
        required = {"display_name": job.display_name, "study_spec.metrics": job.study_spec.metrics,
                    "study_spec.parameters": job.study_spec.parameters, "max_trial_count": job.max_trial_count,
                    "parallel_trial_count": job.parallel_trial_count,
                    "trial_job_spec.worker_pool_specs": job.trial_job_spec.worker_pool_specs}
        for field, value in required.items():
            if not value:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"HyperparameterTuningJob.{field} is required.")
        # Documented as ambiguous: no Google page read (HyperparameterTuningJob reference, the REST
        # HyperparameterTuningJobSpec, read 2026-11-28) says a parallel count above the total is refused; it only
        # describes "The desired number of Trials to run in parallel". The emulator refuses it, as ftcli does before
        # any upload (tune.count_problems), so no ftcli path depends on which way Vertex goes.
        if job.parallel_trial_count > job.max_trial_count:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "parallel_trial_count exceeds max_trial_count.")
        problem = vertex_rules.tuning_refusal(job, m["location"])
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        with self._lock:
            name = self._new(job, m, "hyperparameterTuningJobs")
            self._tuning[name] = job
            if self.next_tuning_scripts:
                self._tuning_scripts[name] = list(self.next_tuning_scripts.pop(0))
            return TuningJob(job)

    def _tuning_key(self, name: str, context: grpc.ServicerContext) -> str:
        m = HP_NAME.match(name)
        if not m:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid HyperparameterTuningJob name: {name!r}")
        project = self._aliases.get(m["project"], m["project"])
        for key in (name, f"projects/{project}/locations/{m['location']}/hyperparameterTuningJobs/{m['id']}"):
            if key in self._tuning:
                return key
        context.abort(grpc.StatusCode.NOT_FOUND, f'The HyperparameterTuningJob "{name}" does not exist.')
        raise KeyError(name)  # unreachable: abort raises

    def _get_tuning(self, request, context) -> TuningJob:
        with self._lock:
            key = self._tuning_key(request.name, context)
            job, steps = self._tuning[key], self._tuning_scripts.get(key)
            if steps and job.state not in TERMINAL:  # (a cancel ends the script)
                step = steps.pop(0)
                if callable(step):
                    step(job)
                else:
                    state, message = step if isinstance(step, tuple) else (step, None)
                    self._apply(job, job_state(state), message)
            return TuningJob(job)

    def _list_tuning(self, request, context):
        m = PARENT.match(request.parent)
        if not m:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid parent: {request.parent!r}")
        try:
            match = _job_matcher(request.filter)
        except _filters.FilterError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        with self._lock:
            project = self._aliases.get(m["project"], m["project"])
            prefix = f"projects/{project}/locations/{m['location']}/hyperparameterTuningJobs/"
            hits = sorted((TuningJob(j) for n, j in self._tuning.items() if n.startswith(prefix) and match(j)),
                          key=lambda j: j.create_time, reverse=True)
        size = request.page_size or DEFAULT_PAGE_SIZE
        return job_service.ListHyperparameterTuningJobsResponse(hyperparameter_tuning_jobs=hits[:size])

    def _cancel_tuning(self, request, context) -> empty_pb2.Empty:
        with self._lock:
            job = self._tuning[self._tuning_key(request.name, context)]
            if job.state in TERMINAL:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                              f"Cannot cancel HyperparameterTuningJob {job.name} in state {job.state.name}.")
            self._apply(job, JobState.JOB_STATE_CANCELLING)
            self._on_tuning_cancel(job.name)
        return empty_pb2.Empty()

    def _on_tuning_cancel(self, name: str) -> None:
        """The running emulator stops the trials; here the cancel simply completes."""
        self._apply(self._tuning[name], JobState.JOB_STATE_CANCELLED)


def _job_matcher(text: str) -> Any:
    """A predicate over CustomJob for the documented ListCustomJobs filter fields (AND only)."""
    tests = []
    for field, op, value in _filters.parse(text):
        if field == "display_name" and op in ("=", "!="):
            tests.append(lambda j, op=op, v=value: _filters.compare(j.display_name, op, v))
        elif field == "display_name" and op == ":":
            tests.append(lambda j, v=value: fnmatch.fnmatchcase(j.display_name, v if "*" in v else f"*{v}*"))
        elif field == "state" and op in ("=", "!="):
            want = job_state(value)
            tests.append(lambda j, op=op, w=want: _filters.compare(j.state, op, w))
        elif field.startswith("labels.") and op in ("=", "!="):
            key = field[len("labels."):]
            tests.append(lambda j, op=op, k=key, v=value: _filters.compare(j.labels.get(k), op, v))
        elif field.startswith("labels.") and op == ":" and value == "*":
            key = field[len("labels."):]
            tests.append(lambda j, k=key: k in j.labels)
        elif field in ("create_time", "update_time", "start_time", "end_time") and op != ":":
            at = _filters.rfc3339_ns(value)
            tests.append(lambda j, f=field, op=op, at=at: bool(getattr(j, f)) and _filters.compare(
                _filters.datetime_ns(getattr(j, f)), op, at))
        else:
            raise _filters.FilterError(f"the emulator does not support {field}{op}{value!r} in ListCustomJobs filters")
    return lambda job: all(t(job) for t in tests)


def add_trial(trial_id: str, state: str, params: dict[str, float | str], value: float | None = None,
              reason: str = "") -> Callable[[TuningJob], None]:
    """A tuning script's step: trial `trial_id` (added, or replacing the one of that id) now in `state` (ACTIVE,
    SUCCEEDED, INFEASIBLE), with its parameter values, its final measurement of the study's metric and, when
    INFEASIBLE, its infeasible_reason; times as Vertex stamps them."""
    from google.cloud.aiplatform_v1.types import study
    from google.protobuf import struct_pb2

    def step(job: TuningJob) -> None:
        old = next((t for t in job.trials if t.id == trial_id), None)
        trial = study.Trial(id=trial_id, state=study.Trial.State[state], infeasible_reason=reason,
                            start_time=old.start_time if old else _now())
        for pid, v in params.items():
            trial.parameters.append(study.Trial.Parameter(parameter_id=pid, value=struct_pb2.Value(
                string_value=v) if isinstance(v, str) else struct_pb2.Value(number_value=v)))
        if value is not None:
            trial.final_measurement = study.Measurement(metrics=[study.Measurement.Metric(
                metric_id=job.study_spec.metrics[0].metric_id, value=value)])
        if state in ("SUCCEEDED", "INFEASIBLE"):
            trial.end_time = _now()
        kept = [t for t in job.trials if t.id != trial_id]
        del job.trials[:]
        job.trials.extend([*kept, trial])

    return step
