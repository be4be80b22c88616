"""Vertex AI JobService gateway (the low-level aiplatform_v1 client: 1.3 s to import, not 3 s).

It takes the CustomJob as REST JSON (what `ftcli.spec` builds) and `JobName`s, and returns `Job` values.
"""

from __future__ import annotations

import builtins
import datetime as dt
import json
import os
from collections.abc import Callable
from typing import Any, TypeVar

from ftcli.gcp import Notify, call_retry, credentials, guard, plaintext_endpoint
from ftcli.spec import SUBMISSION_LABEL, from_container_text
from ftcli.values import Job, JobName, Pool, Trial, TuningJob, TuningName

ENDPOINT_VAR = "FTCLI_VERTEX_ENDPOINT"
T = TypeVar("T")


def to_proto(job: dict[str, Any]) -> Any:
    """The `aiplatform_v1.CustomJob` message for a REST JSON dict. Unknown field names raise, so a dict that
    converts has only real CustomJob fields."""
    from google.cloud import aiplatform_v1

    return aiplatform_v1.CustomJob.from_json(json.dumps(job))


def tuning_to_proto(job: dict[str, Any]) -> Any:
    """The `aiplatform_v1.HyperparameterTuningJob` for a REST JSON dict (what `ftcli.tune` builds)."""
    from google.cloud import aiplatform_v1

    return aiplatform_v1.HyperparameterTuningJob.from_json(json.dumps(job))


def _time(ts: dt.datetime | None) -> dt.datetime | None:
    """A proto-plus timestamp field (a DatetimeWithNanoseconds, or None/epoch when unset) as an aware datetime."""
    if not ts:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=dt.UTC)


def _pools(spec: Any) -> tuple[Pool, ...]:  # a CustomJobSpec (proto-plus)
    pools = []
    for p in spec.worker_pool_specs:
        m = p.machine_spec
        accelerator = m.accelerator_type.name if m.accelerator_count else None
        image = p.container_spec.image_uri or p.python_package_spec.executor_image_uri
        # as the trainer sees them (spec.container_text): `jobs describe` and `predict` read its options from them
        args = tuple(from_container_text(a) for a in (p.container_spec.args or p.python_package_spec.args))
        pools.append(Pool(m.machine_type, accelerator, int(m.accelerator_count or 0) if accelerator else 0,
                          int(p.replica_count or 0), image, args, tuple(p.container_spec.command)))
    return tuple(pools)


# scheduling.strategy -> how ftcli names it (prices.py: these are billed at their own prices, not on-demand ones)
# LOW_COST (a job made by another tool; ftcli never sends it): "Deprecated. Low cost by making potential use of spot
# resources" (Scheduling.Strategy, aiplatform_v1 types/custom_job.py in google-cloud-aiplatform 2.7.0, read
# 2026-11-27): it may be billed at Spot prices, so its on-demand amount is a ceiling too, never an "about"
# (prices.billed_note words it).
PROVISIONING = {"SPOT": "Spot", "FLEX_START": "Flex-start", "LOW_COST": "Low-cost"}


# A job that consumes a reservation (--reservation: reservationAffinity ANY_RESERVATION or SPECIFIC_RESERVATION on its
# machines) is billed by Compute Engine for the reservation's life, not at Vertex's on-demand rates ("Use reservations
# with training", Billing, read 2026-11-28: prices.billed_note); `jobs list` and `describe` took it for on-demand.
RESERVED = ("ANY_RESERVATION", "SPECIFIC_RESERVATION")


def _provisioning(spec: Any) -> str | None:  # a CustomJobSpec (proto-plus)
    named = PROVISIONING.get(spec.scheduling.strategy.name)
    if named is None and any(p.machine_spec.reservation_affinity.reservation_affinity_type.name in RESERVED
                             for p in spec.worker_pool_specs):
        return "Reservation"
    return named


def to_tuning(proto: Any) -> TuningJob:
    """ftcli's `TuningJob` from an aiplatform_v1.HyperparameterTuningJob."""
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    metric = proto.study_spec.metrics[0] if proto.study_spec.metrics else None
    trials = []
    for t in proto.trials:
        params = {p.parameter_id: json_format.MessageToDict(p._pb.value) for p in t.parameters}
        value = next((m.value for m in t.final_measurement.metrics if metric and m.metric_id == metric.metric_id),
                     None)
        # "A human readable string describing why the Trial is infeasible. This is set only if Trial state is
        # INFEASIBLE" (Trial.infeasible_reason, google-cloud-aiplatform 2.7.0's aiplatform_v1/types/study.py, read
        # 2026-11-28): a failed trial's own error, which the study's ("All trials failed.") does not give
        trials.append(Trial(t.id, t.state.name, params, value, JobName.parse(t.custom_job) if t.custom_job else None,
                            started=_time(t.start_time), ended=_time(t.end_time),
                            error=t.infeasible_reason.strip() or None))
    spec = proto.trial_job_spec
    return TuningJob(
        name=TuningName.parse(proto.name), display_name=proto.display_name,
        state=proto.state.name.removeprefix("JOB_STATE_"),
        metric=metric.metric_id if metric else "", goal=metric.goal.name if metric else "MAXIMIZE",
        max_trials=int(proto.max_trial_count), parallel=int(proto.parallel_trial_count), trials=tuple(trials),
        error=proto.error.message or None,
        created=_time(proto.create_time), started=_time(proto.start_time), ended=_time(proto.end_time),
        labels=dict(proto.labels), pools=_pools(spec), output_dir=spec.base_output_directory.output_uri_prefix or None,
        resource=json.loads(aiplatform_v1.HyperparameterTuningJob.to_json(proto, use_integers_for_enums=False)),
        provisioning=_provisioning(spec), searched=tuple(p.parameter_id for p in proto.study_spec.parameters),
    )


def to_job(proto: Any) -> Job:
    """ftcli's `Job` from an aiplatform_v1.CustomJob."""
    from google.cloud import aiplatform_v1

    spec = proto.job_spec
    pools = _pools(spec)
    timeout = spec.scheduling.timeout
    return Job(
        name=JobName.parse(proto.name),
        display_name=proto.display_name,
        state=proto.state.name.removeprefix("JOB_STATE_"),
        error=proto.error.message or None,
        created=_time(proto.create_time), started=_time(proto.start_time), ended=_time(proto.end_time),
        labels=dict(proto.labels),
        pools=pools,
        output_dir=spec.base_output_directory.output_uri_prefix or None,
        timeout_s=int(timeout.total_seconds()) if timeout else None,
        # enum names, not numbers: the same JSON the REST API and --dry-run show
        resource=json.loads(aiplatform_v1.CustomJob.to_json(proto, use_integers_for_enums=False)),
        provisioning=_provisioning(spec),
    )


class VertexGateway:
    def __init__(self, project: str, region: str, notify: Notify | None = None) -> None:
        from google.cloud.aiplatform_v1.services.job_service import JobServiceClient

        self.project = project
        self.region = region
        self.parent = f"projects/{project}/locations/{region}"
        self.notify = notify
        addr = plaintext_endpoint(ENDPOINT_VAR)
        if addr:
            import grpc
            from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

            self.endpoint = addr
            self.client = JobServiceClient(transport=JobServiceGrpcTransport(channel=grpc.insecure_channel(addr)))
        else:
            self.endpoint = os.environ.get(ENDPOINT_VAR) or f"{region}-aiplatform.googleapis.com"
            self.client = JobServiceClient(client_options={"api_endpoint": self.endpoint}, credentials=credentials())

    def _call(self, what: str, method: str, fn: Callable[[], T], *, creates_job: bool = False) -> T:
        """Run `fn` with retries on UNAVAILABLE / DEADLINE_EXCEEDED and a per-minute rate limit (each one reported),
        errors translated (`creates_job`: a used-up quota is the machines', see `translate`)."""
        retry = call_retry("vertex", method, self.notify)
        with guard(service="vertex", project=self.project, what=what, region=self.region, endpoint=self.endpoint,
                   endpoint_var=ENDPOINT_VAR, creates_job=creates_job):
            return retry(fn)()

    def _named_call(self, what: str, method: str, fn: Callable[[], T]) -> T:
        """`_call` for one job by name: NOT_FOUND says where the job was looked for and how to look elsewhere."""
        from ftcli.errors import NotFound

        try:
            return self._call(what, method, fn)
        except NotFound as e:
            if not e.of_project:
                e.hint = (f"it was looked for in project {self.project}, region {self.region}: check the id, "
                          f"--project and --region (`ftcli jobs list --all --project {self.project} --region "
                          f"{self.region}` lists the jobs there)")
            raise

    def _create_once(self, what: str, method: str, create: Callable[[], T], find: Callable[[], T | None]) -> T:
        """Create once, even when a response is lost: the create calls have no request id, so a retry first looks
        (`find`) for what carries this submission's label."""
        attempts = 0

        def once() -> T:
            nonlocal attempts
            attempts += 1
            if attempts > 1:
                found = find()
                if found is not None:
                    return found
            return create()

        return self._call(what, method, once, creates_job=True)

    def _mine(self, submission_id: str) -> dict:
        return {"parent": self.parent, "filter": f'labels.{SUBMISSION_LABEL}="{submission_id}"'}

    def create_custom_job(self, job: dict, submission_id: str) -> Job:
        proto = to_proto(job)
        return to_job(self._create_once(
            "the CustomJob", "CreateCustomJob",
            lambda: self.client.create_custom_job(parent=self.parent, custom_job=proto, retry=None, timeout=60),
            lambda: self._find(submission_id)))

    def _find(self, submission_id: str, tuning: bool = False) -> Any:  # the job's proto, or None
        lister = self.client.list_hyperparameter_tuning_jobs if tuning else self.client.list_custom_jobs
        return next(iter(lister(request=self._mine(submission_id), retry=None, timeout=60)), None)

    def find_by_submission(self, submission_id: str, *, tuning: bool = False) -> Job | TuningJob | None:
        """The job (`tuning`: the tuning job) a submission created, if any (one try: a Ctrl-C is waiting on it)."""
        with guard(service="vertex", project=self.project, region=self.region, endpoint=self.endpoint,
                   endpoint_var=ENDPOINT_VAR):
            found = self._find(submission_id, tuning)
        return None if found is None else to_tuning(found) if tuning else to_job(found)

    def get(self, name: JobName) -> Job:
        return to_job(self._named_call(f"job {name.id}", "GetCustomJob",
                                       lambda: self.client.get_custom_job(name=name.full, retry=None, timeout=60)))

    def list(self, *, filter: str = "", limit: int = 20) -> list[Job]:
        def fetch() -> builtins.list[Any]:  # the jobs' protos
            out = []
            request = {"parent": self.parent, "filter": filter, "page_size": min(limit, 100)}
            for job in self.client.list_custom_jobs(request=request, retry=None, timeout=60):
                out.append(job)
                if len(out) >= limit:
                    break
            return out

        return [to_job(j) for j in self._call(f"jobs in {self.parent}", "ListCustomJobs", fetch)]

    def cancel(self, name: JobName) -> None:
        self._named_call(f"job {name.id}", "CancelCustomJob",
                         lambda: self.client.cancel_custom_job(name=name.full, retry=None, timeout=60))

    # -- hyperparameter tuning jobs -------------------------------------------------------------------------------

    def create_tuning_job(self, job: dict, submission_id: str) -> TuningJob:
        proto = tuning_to_proto(job)
        return to_tuning(self._create_once(
            "the HyperparameterTuningJob", "CreateHyperparameterTuningJob",
            lambda: self.client.create_hyperparameter_tuning_job(parent=self.parent, hyperparameter_tuning_job=proto,
                                                                 retry=None, timeout=60),
            lambda: self._find(submission_id, tuning=True)))

    def get_tuning(self, name: TuningName) -> TuningJob:
        return to_tuning(self._named_call(f"tuning job {name.id}", "GetHyperparameterTuningJob",
                                          lambda: self.client.get_hyperparameter_tuning_job(name=name.full, retry=None,
                                                                                            timeout=60)))

    def list_tuning(self, *, filter: str = "", limit: int = 20) -> builtins.list[TuningJob]:
        def fetch() -> builtins.list[Any]:  # the tuning jobs' protos
            request = {"parent": self.parent, "filter": filter, "page_size": min(limit, 100)}
            pager = self.client.list_hyperparameter_tuning_jobs(request=request, retry=None, timeout=60)
            return [j for _, j in zip(range(limit), pager, strict=False)]

        return [to_tuning(j) for j in self._call(f"tuning jobs in {self.parent}", "ListHyperparameterTuningJobs",
                                                 fetch)]

    def cancel_tuning(self, name: TuningName) -> None:
        self._named_call(f"tuning job {name.id}", "CancelHyperparameterTuningJob",
                         lambda: self.client.cancel_hyperparameter_tuning_job(name=name.full, retry=None, timeout=60))


def get_vertex(project: str, region: str, notify: Notify | None = None) -> VertexGateway:
    return VertexGateway(project, region, notify)
