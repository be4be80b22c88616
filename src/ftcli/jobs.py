"""Jobs as core code: what the user typed -> a `JobName`; listing jobs with their headline metric; one job with
its metrics; cancelling. Commands render what these return (`record` is the JSON shape of a job, and the rows of
`ftcli jobs list` are drawn from it); the gateways come from their factories, so tests swap endpoints, not code.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ftcli.errors import Conflict, FtcliError, UsageError
from ftcli.gcp import Notify
from ftcli.spec import CREATED_BY_LABEL, MODEL_LABEL, TASK_LABEL
from ftcli.values import Job, JobName, Pool, TuningJob, TuningName, console_url_says_kind, from_console_url

if TYPE_CHECKING:
    from ftcli.gcp.storage import StorageGateway
    from ftcli.gcp.vertex import VertexGateway

J = TypeVar("J", Job, TuningJob)

METRICS_FILE = "metrics.json"  # written by the trainer's export next to the model
METRIC_READERS = 8
# --trial given with a training job or a run folder (logs, download, predict, evaluate, report): one run, no trials.
NO_TRIAL = "run it again without --trial"
# The headline of a finished job, first found wins: the trainer's own choice when it names one, then the metric
# each kind of task is judged by (GLUE's: Matthews for CoLA, Pearson for STS-B, F1 for MRPC/QQP), then accuracy,
# micro-F1 (multi-label), and what every run has. Keys as the trainer's metrics.json writes them.
HEADLINES = (("eval_matthews_correlation", "MCC"), ("eval_pearson", "pearson"), ("eval_spearmanr", "spearman"),
             ("eval_f1", "F1"), ("eval_accuracy", "acc"), ("eval_micro_f1", "micro-F1"), ("eval_macro_f1", "macro-F1"),
             ("eval_mse", "MSE"), ("eval_loss", "loss"))


def resolve(ref: str, project: str | None = None, region: str | None = None, *, folder_too: bool = False) -> JobName:
    """A job reference (any of JOB_FORMS, as `history.resolve` takes them) -> the training job's name. Settings are
    read only for a numeric id (it needs a project and a region). `folder_too`: as in `history.resolve`."""
    from ftcli import history
    from ftcli.settings import resolve as resolve_settings

    ref = ref.strip()
    if not history.is_job_id(ref):
        return JobName.parse(history.resolve(ref, folder_too=folder_too))
    s = resolve_settings(project=project, region=region, need_bucket=False)
    return JobName.parse(history.resolve(ref, s.project, s.region))


def resolve_any(ref: str, project: str | None = None, region: str | None = None, *,
                folder_too: bool = False) -> JobName | TuningName:
    """As `resolve`, but a short id or name may also be a tuning job's (ftcli tune)."""
    from ftcli import history

    ref = ref.strip()
    if TuningName.is_full(ref):
        return TuningName.parse(ref)
    def named(full: str) -> JobName | TuningName:
        return TuningName.parse(full) if TuningName.is_full(full) else JobName.parse(full)

    if history.is_job_id(ref):
        name = resolve(ref, project, region)
    elif (shown := from_console_url(ref)) is not None and not console_url_says_kind(ref):
        name = JobName(shown.project, shown.region, shown.id)
    else:
        return named(history.resolve(ref, folder_too=folder_too))
    # A numeric id, or a console URL without ftcli's page after the id, names a training job or a tuning job (one id
    # space; `jobs list` shows both): this machine's history knows which for the ones it submitted; otherwise Vertex
    # is asked, training job first.
    if (n := history.short_id(name)) is not None:
        return named(history.resolve(str(n)))
    tuning = TuningName(name.project, name.region, name.id)
    from ftcli.errors import NotFound

    try:
        vertex_for(name).get(name)
    except NotFound as missing:
        try:
            vertex_for(tuning).get_tuning(tuning)
        except NotFound:
            raise missing from None
        return tuning
    return name


def resolve_job(ref: str, project: str | None = None, region: str | None = None, *, trial: str | None = None,
                notify: Notify | None = None, folder_too: bool = False) -> JobName:
    """The CustomJob a reference means: the job itself, or for a tuning job one of its trials' jobs (`trial`, else
    the best one so far, else the latest)."""
    from ftcli import tuning

    name = resolve_any(ref, project, region, folder_too=folder_too)
    if isinstance(name, JobName):
        if trial is not None:
            raise UsageError(f"--trial is for tuning jobs; {ref} is a training job", hint=NO_TRIAL)
        return name
    study = tuning.get(name, notify)
    t = tuning.trial(study, trial)
    chosen = tuning.trial_job(study, t)
    if notify is not None:  # which trial's job this is (it is named by its own job id from here on)
        why = "" if trial is not None else " (the best so far)" if t is study.best else " (the latest: none has a " \
            "value yet)"
        value = f", {metric_label(study.metric)} {t.value:.4g}" if t.value is not None else ""
        notify(f"tuning job {label(name, short_id(name))}: trial {t.id}{why}{value}, job {chosen.id}")
    return chosen


def vertex_for(name: JobName | TuningName, notify: Notify | None = None) -> VertexGateway:
    """The JobService gateway of the job's own project and region."""
    from ftcli.gcp.vertex import get_vertex

    return get_vertex(name.project, name.region, notify)


def short_id(name: JobName | TuningName) -> int | None:
    """The job's short id in this machine's history, if it was submitted from here."""
    from ftcli import history

    return history.short_id(name)


def label(name: JobName | TuningName, n: int | None) -> str:
    """How to refer to a job in messages and next commands: its short id when it has one, else its numeric id."""
    return str(n) if n else name.id


def metric_label(key: str) -> str:
    """A metric's short name wherever a job's metric is shown (acc, MCC, macro-F1), the same for a training job's
    headline, the metric it names itself and a tuning study's: one spelling in one column."""
    short = dict(HEADLINES)
    full = key if key.startswith("eval_") else f"eval_{key}"
    return short.get(full) or full.removeprefix("eval_").replace("_", "-")


def headline(metrics: Mapping | None) -> tuple[str, float] | None:
    """(metrics.json key, value) of the metric that says how a finished job did, or None. The key as the trainer
    wrote it (eval_accuracy): `--json` readers match it against metrics.json; tables show `metric_label(key)`."""
    if not metrics:
        return None
    named = metrics.get("primary_metric")
    if isinstance(named, str) and isinstance(metrics.get(named), int | float):
        return named, float(metrics[named])
    for key, _ in HEADLINES:
        value = metrics.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return key, float(value)
    return None


def scalar_metrics(metrics: Mapping | None) -> dict[str, float]:
    """The numbers of a metrics.json (no per-label tables or confusion matrices), in its order."""
    return {k: v for k, v in (metrics or {}).items() if isinstance(v, int | float) and not isinstance(v, bool)}


def kept_step(metrics: Mapping | None) -> str | None:
    """With --keep-best, which step's weights the job exported (its metrics.json's eval_* are theirs, not the last
    step's): "kept step 21 of 60 (best acc=1.0000)", and where an early stop ended the run; None without."""
    m = metrics or {}
    step, total, key = m.get("best_global_step"), m.get("global_step"), m.get("metric_for_best_model")
    if not isinstance(step, int) or isinstance(step, bool) or not isinstance(key, str):
        return None
    best = m.get("best_metric")
    value = f"={best:.4f}" if isinstance(best, int | float) and not isinstance(best, bool) else ""
    text = f"kept step {step}" + (f" of {total}" if isinstance(total, int) else "") + \
        f" (best {metric_label(key)}{value}); the metrics are its own"
    stopped = m.get("early_stopping")
    if isinstance(stopped, dict) and stopped.get("stopped"):
        text += f"; stopped early (--early-stopping {stopped.get('patience')})"
    return text


def read_metrics(storage: StorageGateway, job: Job) -> dict | None:
    """The job's exported metrics.json, or None (not finished, not from ftcli, or no such file)."""
    if job.state != "SUCCEEDED" or not job.model_dir:
        return None
    data = storage.read_bytes(job.model_dir + METRICS_FILE)
    if data is None:
        return None
    try:
        metrics = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return metrics if isinstance(metrics, dict) else None


@dataclass
class Listing:
    """Jobs (newest first) with their short ids and metrics; `problems` says what could not be read (once)."""

    jobs: list[Job]
    short_ids: dict[JobName, int | None]
    metrics: dict[JobName, dict | None]
    problems: list[str] = field(default_factory=list)
    tuning: list = field(default_factory=list)  # TuningJobs (ftcli tune), with their short ids
    tuning_ids: dict = field(default_factory=dict)


def list_jobs(project: str, region: str, *, all_jobs: bool = False, limit: int = 20, with_metrics: bool = True,
              notify: Notify | None = None) -> Listing:
    """The project's jobs in `region` (only ftcli's unless `all_jobs`), and each finished one's metrics, read in
    parallel from its output folder. A metrics file that cannot be read leaves a gap and one problem line, never
    an error: the list is still worth showing."""
    from ftcli import history
    from ftcli.gcp.vertex import get_vertex

    mine = f'labels.{CREATED_BY_LABEL}="ftcli"'  # what `ftcli train` and `ftcli tune` put on every job
    vertex = get_vertex(project, region, notify)
    jobs = vertex.list(filter="" if all_jobs else mine, limit=limit)
    tuning = vertex.list_tuning(filter="" if all_jobs else mine, limit=limit)
    known = history.short_ids() if jobs or tuning else {}
    listing = Listing(jobs, {j.name: known.get((j.name.region, j.name.id)) for j in jobs}, {}, tuning=tuning,
                      tuning_ids={t.name: known.get((t.name.region, t.name.id)) for t in tuning})
    finished = [j for j in jobs if j.state == "SUCCEEDED" and j.model_dir]
    if with_metrics and finished:
        from ftcli.gcp.storage import get_storage

        storage = get_storage(project, notify)

        def one(job: Job) -> dict | None:
            try:
                return read_metrics(storage, job)
            except FtcliError as e:
                if not listing.problems:
                    listing.problems.append(f"metrics not shown: {e.message}" + (f" ({e.hint})" if e.hint else ""))
                return None

        with ThreadPoolExecutor(min(METRIC_READERS, len(finished))) as pool:
            listing.metrics = dict(zip((j.name for j in finished), pool.map(one, finished), strict=True))
    return listing


def describe(name: JobName, notify: Notify | None = None) -> tuple[Job, dict | None]:
    """The job and, once it succeeded, its metrics."""
    from ftcli.gcp.storage import get_storage

    job = vertex_for(name, notify).get(name)
    metrics = read_metrics(get_storage(name.project, notify), job) if job.state == "SUCCEEDED" else None
    return job, metrics


def check_cancellable(job: Job | TuningJob, shown: str) -> None:
    if job.final:
        kind = "tuning job" if isinstance(job, TuningJob) else "job"
        raise FtcliError(f"{kind} {shown} has already ended ({job.state}): there is nothing to cancel")


def _cancel(job: J, shown: str, cancel: Callable[[Any], None], get: Callable[[Any], J],
            sent: Callable[[], None] | None = None) -> J:
    # cancel and get take job.name: a JobName for a Job, a TuningName for a TuningJob
    """Cancel through `cancel(name)`; `get(name)` reads the job (a CustomJob's or a tuning job's calls). `sent()` is
    called once Vertex has taken the request, before the job is read again."""
    check_cancellable(job, shown)
    try:
        cancel(job.name)
    except Conflict:
        # It ended between our read and the cancel: say so as above, not as Vertex's FAILED_PRECONDITION.
        check_cancellable(get(job.name), shown)
        raise
    if sent is not None:
        sent()
    return get(job.name)


def cancel(gateway: VertexGateway, job: Job, shown: str, sent: Callable[[], None] | None = None) -> Job:
    """Ask Vertex to cancel the job; return it as it is then (CANCELLING, usually). `sent()`: the request was taken."""
    return _cancel(job, shown, gateway.cancel, gateway.get, sent)


def cancel_tuning(job: TuningJob, shown: str, notify: Notify | None = None,
                  sent: Callable[[], None] | None = None) -> TuningJob:
    """Ask Vertex to cancel the tuning job (its running trials stop with it); return it as it is then. `sent()`: the
    request was taken."""
    gateway = vertex_for(job.name, notify)
    return _cancel(job, shown, gateway.cancel_tuning, gateway.get_tuning, sent)


def task_and_model(labels: Mapping[str, str], pools: Sequence[Pool]) -> tuple[str | None, str | None]:
    """The task and the model a job's row shows. ftcli's labels say them on the jobs ftcli creates; a job that runs
    ftcli's trainer without them says them in the trainer's options. That is a tuning trial's CustomJob: Vertex makes
    it from the tuning job's trialJobSpec, which holds no labels ("The spec of a trial job. The same spec applies to
    the CustomJobs created in all the trials", HyperparameterTuningJob.trialJobSpec,
    https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.hyperparameterTuningJobs, read
    2026-11-29), with the trial's own values appended to its args (a searched `--model` last, which the trainer's
    argparse takes). An option left out is the trainer's default: the bundled sample task, the task's model."""
    task, model = labels.get(TASK_LABEL), labels.get(MODEL_LABEL)
    chief = pools[0] if pools else None
    if (task and model) or chief is None or not chief.runs_ftcli_trainer:
        return task, model
    from ftcli.spec import label_value, model_label
    from ftcli_trainer.tasks import BUNDLED_SAMPLE, TASKS

    given = chief.trainer_option("task") or BUNDLED_SAMPLE
    task = task or label_value(given)
    if not model and (name := chief.trainer_option("model") or (TASKS[given].default_model if given in TASKS
                                                                 else None)):
        model = model_label(name)
    return task, model


def _iso(t: dt.datetime | None) -> str | None:
    return t.isoformat(timespec="seconds") if t else None


def record(job: Job, short_id: int | None = None, metrics: Mapping | None = None,
           now: dt.datetime | None = None) -> dict:
    """The JSON shape of a job (`--json` of jobs list, describe, cancel), from which the tables are drawn."""
    from ftcli.catalog import gpu_short_name, machine_label

    chief = job.pools[0] if job.pools else None
    gpu = None
    if chief and chief.accelerator:
        gpu = f"{gpu_short_name(chief.accelerator)}x{chief.accelerator_count}"
    head = headline(metrics)
    return {
        "short_id": short_id,
        "id": job.name.id,
        "name": job.name.full,
        "display_name": job.display_name,
        "state": job.state,
        **dict(zip(("task", "model"), task_and_model(job.labels, job.pools), strict=True)),
        "gpu": gpu,
        "machine_type": chief.machine_type if chief else None,
        "hardware": machine_label(chief.machine_type, chief.accelerator, chief.accelerator_count) if chief else None,
        "machines": sum(p.replicas for p in job.pools[:2]),  # chief + workers (pool 2 is Reduction Server)
        "created": _iso(job.created),
        "started": _iso(job.started),
        "ended": _iso(job.ended),
        "duration_s": None if (d := job.duration_s(now)) is None else round(d),
        "provisioning": job.provisioning,  # Spot, Flex-start, Low-cost, Reservation; None: on-demand
        "metric": {"name": head[0], "value": head[1]} if head else None,
        "output_dir": job.output_dir,
        "error": job.error,
        "console_url": job.name.console_url,
    }
