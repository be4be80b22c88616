"""`ftcli tune` as core code: plan the tuning job around the very job `ftcli train` would build (all checks before
anything is uploaded), stage and create it, and name a tuning job's trials (best first; the one to download).

The pure pieces (search spaces, the study metric, the job's JSON) are in `ftcli.tune`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ftcli import history, tune
from ftcli.errors import UsageError, gather
from ftcli.settings import raise_problems
from ftcli.submit import Submission
from ftcli.values import JobName, Trial, TuningJob, TuningName

if TYPE_CHECKING:
    from ftcli.errors import FtcliError
    from ftcli.gcp import Notify
    from ftcli.submit import Uploading
    from ftcli_trainer.config import TrainConfig

KIND_LABEL = "ftcli_kind"  # "tune" on a tuning job (its trials' CustomJobs are Vertex's own)


@dataclass
class TuningSubmission:
    sub: Submission  # the trial job (checked, staged and uploaded exactly as `ftcli train`'s)
    job: dict  # the HyperparameterTuningJob as REST JSON
    params: list[tune.Param]
    metric: str


def default_metric(cfg: TrainConfig) -> str:
    """The metric a task is judged by (GLUE's for GLUE tasks), as the trainer's metrics.json names it."""
    from ftcli_trainer.metrics import headline
    from ftcli_trainer.tasks import TASKS

    keys = headline(TASKS[cfg.task].metrics, cfg.multi_label, getattr(cfg, "regression", False))
    return f"eval_{keys[0]}" if keys else tune.default_metric(cfg.multi_label)


def metric_names(cfg: TrainConfig) -> list[str]:
    """The eval metrics a trial reports, as metrics.json names them: the first eval set's `eval_KEY`, the others'
    `eval_SET_KEY`. Files whose labels may turn out to be lists (JSON Lines) report either kind's."""
    from ftcli_trainer.metrics import scalar_names
    from ftcli_trainer.tasks import TASKS

    task = TASKS[cfg.task]
    regression = getattr(cfg, "regression", False)
    keys = scalar_names(task.metrics, cfg.multi_label, regression)
    if task.user_files and not cfg.multi_label and not regression:
        keys = tuple(dict.fromkeys((*keys, *scalar_names((), True, False))))
    return [f"eval_{k}" for k in keys] + [f"eval_{s}_{k}" for s in list(task.eval_splits)[1:] for k in keys]


def plan(*, trainer: dict[str, Any], search: list[str], metric: str | None, trials: int, parallel: int,
         trials_from: str = "--trials", parallel_from: str = "--parallel", **train: Any) -> TuningSubmission:
    """Every problem at once, before anything is uploaded: the trial job's (as `ftcli train --dry-run` finds
    them), the search's, and each searched value at both ends of its range checked by the trainer's validator.
    `trials_from`/`parallel_from` name where the two numbers were given."""
    from ftcli import submit
    from ftcli.trainer_options import validate
    from ftcli_trainer.config import OPTIONS, choice_line
    from ftcli_trainer.model import model_problem

    problems = tune.count_problems(trials, parallel, trials_from, parallel_from)
    hints: list[str] = []
    # (--model with a model search is the trial job's own model, checked and uploaded as `ftcli train`'s)
    fixed = {o.name: f"{o.flag} {trainer[o.name]}" for o in OPTIONS
             if o.name in tune.TUNABLE and o.name != "model" and trainer.get(o.name) is not None}
    search, clashes = tune.without_fixed(search, fixed)
    problems += clashes
    params: list[tune.Param] = []
    try:
        params = tune.parse_search(search, {o.name: o.type for o in OPTIONS})
    except UsageError as e:
        gather(e, problems, hints)
    try:
        validate(trainer)
        base: set[str] = set()
    except UsageError as e:
        base = set(e.problems or [e.message])  # said once below, not again for each searched value
    for p in params:
        if p.name == "model":
            # (--model itself is checked by the trial job's plan below; each searched model the same way)
            problems += [f"--search {problem.removeprefix('--')}" for v in p.extremes
                         if (problem := model_problem(str(v)))]
        for value in p.extremes:
            try:
                validate({**trainer, p.name: value})
            except UsageError as e:
                if own := [x for x in e.problems or [e.message] if x not in base]:
                    problems.append(f"--search {p.name} reaches {value}: {own[0]}")
                    break
    problems += _searched_max_length_problems(params, trainer)
    if metric is not None and not metric.startswith("eval_"):
        problems.append(f"--metric {metric!r}: name one of metrics.json's eval_* keys, e.g. eval_accuracy")
    try:
        cfg, _ = validate(trainer)
        # (a --metric refused above is not handed to the trainer too, whose --hypertune-metric would say it again)
        chosen = metric if metric and metric.startswith("eval_") else default_metric(cfg)
        if metric is not None and metric.startswith("eval_") and metric not in (names := metric_names(cfg)):
            # every trial would train to the end and report nothing the study can read
            problems.append(choice_line("--metric", metric, names))
    except UsageError:
        chosen = metric if metric and metric.startswith("eval_") else "eval_accuracy"  # reported below
    checks: dict = {}  # the Hub's answers, shared by the trial job's --model and the searched models
    try:
        sub = submit.plan(trainer={**trainer, "hypertune_metric": chosen}, data_checks=checks,
                          look_up_model=not any(p.name == "model" for p in params),
                          searched={p.name for p in params}, **train)
    except UsageError as e:
        if not problems:
            raise
        gather(e, problems, hints)  # the trial job's problems after the search's, with their hints
        raise_problems(problems, "options", hints)
    if not problems:
        problems += _searched_hub_models(params, trainer, sub, checks)
    if problems:
        raise_problems(problems, "options", hints)
    params = [_upload_local_models(p, sub) if p.name == "model" else p for p in params]
    # A trial that keeps its best evaluation's weights (--keep-best, --early-stopping) is judged by that evaluation,
    # when the study's metric is the one it keeps by: by its last (Vertex's default), the study ranked the trials by
    # evaluations whose weights no trial exported (an early stop's last evaluation is, by its rule, not the best).
    from ftcli_trainer.metrics import best_metric
    from ftcli_trainer.tasks import TASKS

    cfg, _ = validate(trainer)  # (valid by now: the trial job was planned)
    keeps = cfg.keep_best and chosen == best_metric(TASKS[cfg.task].metrics, cfg.multi_label, cfg.regression)[0]
    job = tune.build_tuning_job(sub.job, params, chosen, trials, parallel, best_measurement=keeps)
    job.setdefault("labels", {})[KIND_LABEL] = "tune"
    return TuningSubmission(sub, job, params, chosen)


def _searched_max_length_problems(params: list[tune.Param], trainer: dict[str, Any]) -> list[str]:
    """A searched --max-length, or a searched model folder, past a folder's positions: the trials that drew it
    stopped at start, after their machines were up (`ftcli train` says so of --model and --max-length alone)."""
    import os

    from ftcli.trainer_options import validate
    from ftcli_trainer.model import folder_max_length_problem, resolve_model_path

    searched = {p.name: p.extremes for p in params if p.name in ("model", "max_length")}
    if not searched:
        return []  # (the trial job's plan checks --model and --max-length as given)
    try:
        cfg, _ = validate(trainer)
    except UsageError:
        return []  # said by the trial job's plan
    longest = max(int(v) for v in searched.get("max_length", (cfg.max_length,)))
    problems = []
    for model in dict.fromkeys(str(v) for v in searched.get("model", (cfg.model,))):
        folder = resolve_model_path(model)
        if os.path.isdir(folder) and (problem := folder_max_length_problem(folder, longest, model)):
            name, value = ("max_length", longest) if "max_length" in searched else ("model", model)
            problems.append(f"--search {name} reaches {value}: {problem}")
    return problems


def _searched_hub_models(params: list[tune.Param], trainer: dict[str, Any], sub: Submission,
                         checks: dict) -> list[str]:
    """A model search's Hub models, looked up on the Hub as the trial job's --model is (`submit.hub_model_problem`):
    a trial that drew a mistyped or gated one failed after its machine was paid for."""
    from pathlib import Path

    from ftcli import submit
    from ftcli.trainer_options import validate
    from ftcli_trainer.model import MINILM_ALIASES

    cfg, _ = validate(trainer)
    problems = []
    for p in params:
        if p.name != "model":
            continue
        for value in map(str, p.extremes):
            if value in MINILM_ALIASES or not Path(value).expanduser().is_dir():
                # (the trials get a Hugging Face token only from --hf-secret)
                if problem := submit.hub_model_problem(cfg, sub.notes, checks, job_has_token=bool(cfg.hf_secret),
                                                       model=value, flag="--search model"):
                    problems.append(problem)
    return problems


def _upload_local_models(p: tune.Param, sub: Submission) -> tune.Param:
    """A local model folder among a model search's choices is not there inside the trials (`./my-model` reached
    them as it was, and every trial that drew it failed): it is uploaded as `ftcli train` uploads --model DIR
    (content-addressed, with the trial job's other uploads) and the trials get its /gcs/ path."""
    from pathlib import Path

    from ftcli.submit import model_upload
    from ftcli_trainer.model import MINILM, MINILM_ALIASES

    values = []
    for value in p.spec["categoricalValueSpec"]["values"]:
        folder = Path(value).expanduser()
        if value not in MINILM_ALIASES and folder.is_dir():
            given = value
            value, uploads = model_upload(sub.settings, folder, f"--search model {value}", sub.notes)
            if "$(" in value or "$$" in value:
                # Vertex appends a trial's values to the container's args, where it expands $(NAME) and reads $$ as $
                # (spec.container_text); the trial job's own args are escaped, but a study's values are shown and
                # recorded as they are: a bucket prefix with `$(AIP_MODEL_DIR)` sent the trials to a path that does
                # not exist. (A lone $ is left as it is.)
                raise UsageError(f"--search model {given}: a trial would get it as {value}, which Vertex expands in a "
                                 "trial's arguments ($(NAME), $$), and a searched value cannot be escaped as the "
                                 "job's own arguments are: use a --bucket prefix without '$'")
            sub.uploads += [u for u in uploads if u not in sub.uploads]
        values.append(value)
    # MiniLM's names (minilm, all-MiniLM-L6-v2, its Hub id) are one model: a trial dimension that changes nothing
    if len({MINILM if v in MINILM_ALIASES else v for v in values}) < len(values):
        raise UsageError(f"--search model: {', '.join(map(str, p.extremes))} holds the same model twice; "
                         "give each model once")
    return tune.Param(p.name, {**p.spec, "categoricalValueSpec": {"values": values}}, p.extremes)


def submit(ts: TuningSubmission, *, notify: Notify | None = None,
           uploading: Uploading | None = None) -> tuple[TuningJob, int, int]:
    """Stage as `ftcli train` does, create the tuning job, record a short id. Returns (job, short id, bytes)."""
    from ftcli import submit as train_submit
    from ftcli.gcp.vertex import get_vertex

    sub = ts.sub
    sent = train_submit.stage(sub, notify=notify, uploading=uploading)
    vertex = get_vertex(sub.settings.project, sub.settings.region, notify)
    sub.create_sent = True
    job = vertex.create_tuning_job(ts.job, sub.submission_id)
    n = history.record(job.name.full, sub.display_name, project=sub.settings.project, region=sub.settings.region,
                       created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                       base_output_dir=sub.base_output_dir, kind="tune")
    return job, n, sent


def get(name: TuningName, notify: Notify | None = None) -> TuningJob:
    from ftcli.gcp.vertex import get_vertex

    return get_vertex(name.project, name.region, notify).get_tuning(name)


def trial(job: TuningJob, which: str | None) -> Trial:
    """A trial by id, or (None) the best one that has a value, else the latest."""
    if which:
        found = next((t for t in job.trials if t.id == str(which).strip()), None)
        if found is None:
            ids = ", ".join(t.id for t in job.trials) or "none yet"
            raise UsageError(f"tuning job {job.name.id} has no trial {which} (trials: {ids})")
        return found
    if job.best is not None:
        return job.best
    if not job.trials:
        # The hint said "wait for the first trial, or follow it: ftcli tune ... without --detach" for a job that had
        # ended (cancelled before its first trial) too, and read as "submit a new one".
        from ftcli import history

        ref = f"{n}" if (n := history.short_id(job.name)) is not None else job.name.full
        if job.final:
            raise UsageError(f"tuning job {job.name.id} ended ({job.state}) before any trial started",
                             hint=f"ftcli jobs describe {ref} says why")
        raise UsageError(f"tuning job {job.name.id} has no trials yet ({job.state})",
                         hint=f"wait for its first trial to start; ftcli jobs describe {ref} lists them as they do")
    return max(job.trials, key=lambda t: int(t.id))


def trial_job(job: TuningJob, t: Trial) -> JobName:
    """The CustomJob trial `t` of `job` ran as (for its logs, its model)."""
    if t.job is None:
        # (it said only that, with no word of where the trials' states are or that another trial can be picked)
        from ftcli import history

        ref = f"{n}" if (n := history.short_id(job.name)) is not None else job.name.full
        raise UsageError(f"trial {t.id} of tuning job {job.name.id} has not started a job yet ({t.state})",
                         hint=f"wait for it to start (ftcli jobs describe {ref} lists the trials), or pick one that "
                              "has with --trial N")
    return t.job


def record(job: TuningJob, short_id: int | None = None, now: dt.datetime | None = None) -> dict:
    """The JSON shape of a tuning job (jobs list/describe --json); the table columns read the same keys as a
    CustomJob's record."""
    from ftcli.catalog import gpu_short_name, machine_label
    from ftcli.jobs import task_and_model
    from ftcli.spec import model_label

    chief = job.pools[0] if job.pools else None
    best = job.best
    task, model = task_and_model(job.labels, job.pools)
    if "model" in job.searched:
        # Each trial trains the model it drew: the label's (the trial spec's --model, or the task's default) may be
        # none of them. The row's model is its best trial's, as its metric is; none before a trial has a value.
        model = model_label(str(best.params["model"])) if best is not None and "model" in best.params else None
    gpu = f"{gpu_short_name(chief.accelerator)}x{chief.accelerator_count}" if chief and chief.accelerator else None

    def iso(t: dt.datetime | None) -> str | None:
        return t.isoformat(timespec="seconds") if t else None

    return {
        "kind": "tune",
        "short_id": short_id, "id": job.name.id, "name": job.name.full, "display_name": job.display_name,
        "state": job.state, "task": task, "model": model, "gpu": gpu,
        "machine_type": chief.machine_type if chief else None,
        "hardware": machine_label(chief.machine_type, chief.accelerator, chief.accelerator_count) if chief else None,
        "machines": sum(p.replicas for p in job.pools[:2]),
        "created": iso(job.created), "started": iso(job.started), "ended": iso(job.ended),
        "duration_s": None if (d := job.duration_s(now)) is None else round(d),
        "metric": {"name": job.metric, "value": best.value} if best else None,
        "study": {"metric": job.metric, "goal": job.goal, "max_trials": job.max_trials, "parallel": job.parallel},
        "trials": [{"id": t.id, "state": t.state, "params": dict(t.params), "value": t.value,
                    "job": t.job.full if t.job else None, "error": t.error} for t in job.ranked()],
        "best_trial": best.id if best else None,
        "output_dir": job.output_dir, "error": job.error, "console_url": job.name.console_url,
    }


def follow(get_job: Callable[[], TuningJob], on_update: Callable[[TuningJob, list[Trial]], None], *,
           interval: float = 3.0, sleep: Callable[[float], None] | None = None,
           on_unreadable: Callable[[FtcliError], None] | None = None, patience: float | None = None,
           clock: Callable[[], float] | None = None) -> TuningJob:
    """Read the tuning job until it ends, calling `on_update(job, changed_trials)` whenever its state or a trial
    changed (the first read reports everything). Returns the final job.

    A read that fails once the job has been read (a 500, the per-minute read quota, 90 s of 503s) does not end the
    following of a study that runs on for hours: `on_unreadable(error)` is told the first time, and the job is read
    again; a failure that lasts past `patience` seconds (follow.STATE_PATIENCE, as `ftcli logs` waits), or a job
    that is not found, is raised."""
    import time

    from ftcli.errors import FollowingLost, FtcliError, NotFound
    from ftcli.follow import STATE_PATIENCE

    sleep = sleep or time.sleep
    clock = clock or time.monotonic
    patience = STATE_PATIENCE if patience is None else patience
    seen: dict[str, tuple] = {}
    last_state = None
    unreadable_since: float | None = None
    told = False
    while True:
        try:
            job = get_job()
        except FtcliError as e:
            if last_state is None or isinstance(e, NotFound):
                raise
            now = clock()
            unreadable_since = unreadable_since if unreadable_since is not None else now
            if now - unreadable_since > patience:
                raise FollowingLost(e, "the tuning job", patience) from e
            if not told and on_unreadable is not None:
                on_unreadable(e)
            told = True
            sleep(interval)
            continue
        unreadable_since = None
        changed = [t for t in job.trials if seen.get(t.id) != (t.state, t.value)]
        for t in changed:
            seen[t.id] = (t.state, t.value)
        if changed or job.state != last_state:
            on_update(job, changed)
            last_state = job.state
        if job.final:
            return job
        sleep(interval)
