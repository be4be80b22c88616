"""ftcli's own small values: what the gateways return and the core and commands work with.

Google's types stop at `ftcli.gcp`: a gateway turns a CustomJob proto into a `Job`, a log entry into a
`LogEntry`, a resource name into a `JobName`. Plain frozen dataclasses, no imports beyond the standard library,
so the core can be tested with a fake gateway that returns these.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Self

# Vertex's JobState names without the JOB_STATE_ prefix.
# JobState (https://cloud.google.com/vertex-ai/docs/reference/rest/v1/JobState, read 2026-11-27): a job ends in
# SUCCEEDED, FAILED, CANCELLED ("The job has been cancelled"), EXPIRED ("The job has expired") or
# PARTIALLY_SUCCEEDED; it has no machine yet while QUEUED ("The job has been just created or resumed and processing
# has not yet begun") or PENDING ("The service is preparing to run the job").
FINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED", "PARTIALLY_SUCCEEDED"})
# Not running yet: QUEUED has no machine; PENDING is starting them, and a job of several machines may already log
# from the first (cli/watch.py: waiting_for).
WAITING_STATES = frozenset({"QUEUED", "PENDING"})

@dataclass(frozen=True, order=True)
class _ResourceName:
    """projects/PROJECT/locations/REGION/COLLECTION/ID, split once (a subclass names its COLLECTION)."""

    project: str
    region: str
    id: str

    COLLECTION: ClassVar[str] = ""
    KIND: ClassVar[str] = ""
    CONSOLE_PAGE: ClassVar[str] = ""  # the page after the id in the console address earlier ftcli's printed

    @classmethod
    def _pattern(cls) -> re.Pattern:
        return re.compile(rf"^projects/(?P<project>[^/]+)/locations/(?P<region>[^/]+)/{cls.COLLECTION}/(?P<id>\d+)$")

    @classmethod
    def parse(cls, text: str) -> Self:
        m = cls._pattern().match(text.strip())
        if not m:
            raise ValueError(f"not a {cls.KIND} resource name: {text!r}")
        return cls(m["project"], m["region"], m["id"])

    @classmethod
    def is_full(cls, text: str) -> bool:
        return bool(cls._pattern().match(text.strip()))

    @property
    def full(self) -> str:
        return f"projects/{self.project}/locations/{self.region}/{self.COLLECTION}/{self.id}"

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.region}"

    @property
    def console_url(self) -> str:
        # The address Google's own SDK prints for a job of either kind ("View Custom Job:", "View
        # HyperparameterTuningJob:": google-cloud-aiplatform 2.7.0, google/cloud/aiplatform/jobs.py
        # _Job._dashboard_uri, read 2026-11-29), under the console's name since Vertex AI became Gemini Enterprise
        # Agent Platform (its documentation's links are console.cloud.google.com/agent-platform/..., read 2026-11-29).
        # ftcli printed /vertex-ai/locations/R/training/ID/cpu (or /hyperparameter-tuning-trials), the console's
        # address before the rename, with a page whose name no Google source gives; those still resolve.
        return (f"https://console.cloud.google.com/agent-platform/locations/{self.region}/training/{self.id}"
                f"?project={self.project}")

    def __str__(self) -> str:
        return self.full


# The console's address of a job, under each name the console has had: ftcli printed /vertex-ai/ (with a page after
# the id, which says the job's kind); Google's own SDK, and ftcli now (console_url), print /agent-platform/ ("View
# Custom Job:", "View HyperparameterTuningJob:": google-cloud-aiplatform 2.7.0, google/cloud/aiplatform/jobs.py
# _Job._dashboard_uri and utils/console_utils.py custom_job_console_uri, read 2026-11-29), and its releases before
# that /ai/platform/ (the same functions in googleapis/python-aiplatform's history, read 2026-11-29). A job's address
# copied from the SDK's output, or from an older notebook, was "not a job reference". Both kinds of job are at
# training/ID; only the page after it (earlier ftcli's) says which.
_CONSOLE_PATHS = r"(?:vertex-ai|agent-platform|ai/platform)"
_CONSOLE_URL = re.compile(rf"^https://console\.cloud\.google\.com/{_CONSOLE_PATHS}/locations/(?P<region>[a-z0-9-]+)/"
                          r"training/(?P<id>\d+)(?:/(?P<page>[a-z-]+))?/?\?(?:[^#]*&)?project=(?P<project>[^&#]+)")


def from_console_url(url: str) -> JobName | TuningName | None:
    """The job a console URL (`console_url`, as ftcli prints it) shows, or None for any other text: a training job,
    or a tuning job by its page (an address with no page, as Google's SDK prints, is read as a training job's; see
    `console_url_says_kind`)."""
    m = _CONSOLE_URL.match(url.strip())
    if m is None:
        return None
    kind = TuningName if m["page"] == TuningName.CONSOLE_PAGE else JobName
    return kind(m["project"], m["region"], m["id"])


def console_url_says_kind(url: str) -> bool:
    """Whether a console URL's page says which kind of job it shows (ftcli's do); one without (Google's SDK prints
    training/ID?project=P for a tuning job too) needs Vertex asked, as a numeric id does."""
    m = _CONSOLE_URL.match(url.strip())
    return m is not None and m["page"] in (JobName.CONSOLE_PAGE, TuningName.CONSOLE_PAGE)


_CONSOLE_ADDRESS = re.compile(r"^(?:(?P<scheme>[A-Za-z]+)://)?console\.cloud\.google\.com(?P<path>/[^?#]*)?"
                              r"(?:\?(?P<query>[^#]*))?", re.IGNORECASE)


def console_url_problem(text: str) -> str | None:
    """What keeps `text`, an address in the Cloud console, from naming a job ("it has no project (?project=...)"),
    for the error that says so; None for text that is no console address, or one that names a job. A pasted address
    that misses one part was called "not a job reference", as if console URLs were not taken at all."""
    m = _CONSOLE_ADDRESS.match(text.strip())
    if m is None or from_console_url(text) is not None:
        return None
    path, query = m["path"] or "", m["query"] or ""
    lacks = [what for what, found in (
        ("https:// at its start", (m["scheme"] or "").lower() == "https"),
        ("region (/locations/REGION/)", re.search(rf"/{_CONSOLE_PATHS}/locations/[a-z0-9-]+/", path, re.IGNORECASE)),
        ("job id (/training/ID/, all digits)", re.search(r"/training/\d+(?:/|$)", path)),
        ("project (?project=PROJECT)", re.search(r"(?:^|&)project=[^&]", query))) if not found]
    if not lacks:
        return f"it is not in the form {JobName('PROJECT', 'REGION', 'ID').console_url}"
    return "it has no " + (", no ".join(lacks[:-1]) + " and no " if len(lacks) > 1 else "") + lacks[-1]


def resource_name_problem(text: str) -> str:
    """Why `text`, which starts as a resource name does (projects/...), names no job that ftcli takes."""
    parts = text.strip().split("/")
    if len(parts) != 6 or parts[0] != "projects" or parts[2] != "locations" or not all(parts):
        return "it is not projects/PROJECT/locations/REGION/COLLECTION/ID"
    if parts[4] not in (JobName.COLLECTION, TuningName.COLLECTION):
        return f"{parts[4]!r} is not {JobName.COLLECTION} or {TuningName.COLLECTION}"
    return f"its ID {parts[5]!r} is not all digits"


@dataclass(frozen=True, order=True)
class JobName(_ResourceName):
    """projects/PROJECT/locations/REGION/customJobs/ID."""

    COLLECTION: ClassVar[str] = "customJobs"
    KIND: ClassVar[str] = "CustomJob"
    CONSOLE_PAGE: ClassVar[str] = "cpu"


@dataclass(frozen=True, order=True)
class TuningName(_ResourceName):
    """projects/PROJECT/locations/REGION/hyperparameterTuningJobs/ID."""

    COLLECTION: ClassVar[str] = "hyperparameterTuningJobs"
    KIND: ClassVar[str] = "HyperparameterTuningJob"
    CONSOLE_PAGE: ClassVar[str] = "hyperparameter-tuning-trials"


# Every form history.resolve takes a job in, said once: the help of every command that takes a job (cli/options.py)
# and resolve's own errors. The errors kept a second list, which had no console URL: a user who pasted a slightly
# wrong URL was told the forms without it. (Here, not in cli/options.py: history is core code, and the CLI imports
# this module already for `ftcli --help`.) A tuning job's resource name, which every command that takes a job takes
# (jobs.resolve_any: describe and cancel the tuning job, the others its best trial or --trial's), was in neither.
JOB_FORMS = (f"short id (3), last, numeric id, {JobName('P', 'R', 'ID')} or {TuningName('P', 'R', 'ID')}, its "
             "console URL (as ftcli train or tune prints it), or the display name of a job submitted from this machine")


def run_seconds(started: dt.datetime | None, ended: dt.datetime | None, now: dt.datetime | None = None
                ) -> float | None:
    """Seconds from `started` to `ended` (to `now`, default the clock, while it runs); None before it starts."""
    if started is None:
        return None
    return max(0.0, ((ended or now or dt.datetime.now(dt.UTC)) - started).total_seconds())


@dataclass(frozen=True)
class Pool:
    """One worker pool: `replicas` machines of `machine_type`, each with `accelerator_count` x `accelerator`
    (the Vertex AcceleratorType name, None for a CPU machine), running `image` with `args`."""

    machine_type: str
    accelerator: str | None = None
    accelerator_count: int = 0
    replicas: int = 1
    image: str = ""
    args: tuple[str, ...] = ()  # the container's (or Python package's) arguments: the trainer's options
    command: tuple[str, ...] = ()  # the container's command (ftcli's: bash -c SCRIPT, which runs ftcli_trainer.task)

    @property
    def runs_ftcli_trainer(self) -> bool:
        """Whether the pool's container runs ftcli's trainer (`python -m ftcli_trainer.task`), so that its args are
        the trainer's options: a tuning trial's CustomJob, which Vertex creates without the tuning job's labels,
        says its task and model only there."""
        return any("ftcli_trainer.task" in part for part in self.command)

    def trainer_option(self, name: str) -> str | None:
        """The value the pool passes for the trainer option `name` (field spelling, e.g. text_pair_column):
        `--name-with-dashes VALUE`, `--name_with_underscores VALUE` or `--flag=VALUE`. The last one wins, as in the
        trainer's argparse: a tuning trial's own value is appended after the job's ("--model X ... --model Y")."""
        flags = {"--" + name.replace("_", "-"), "--" + name}
        found = None
        for i, arg in enumerate(self.args):
            flag, eq, value = arg.partition("=")
            if flag in flags:
                found = value if eq else (self.args[i + 1] if i + 1 < len(self.args) else None)
        return found


@dataclass(frozen=True)
class Job:
    """A CustomJob as ftcli sees it. `state` is the JobState name without JOB_STATE_ (RUNNING, SUCCEEDED, ...);
    `resource` is the job's REST JSON (camelCase), for `--json` readers who want every field."""

    name: JobName
    display_name: str
    state: str
    error: str | None = None
    created: dt.datetime | None = None
    started: dt.datetime | None = None
    ended: dt.datetime | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    pools: tuple[Pool, ...] = ()
    output_dir: str | None = None  # baseOutputDirectory: the model is in OUTPUT_DIR/model/
    timeout_s: int | None = None
    resource: Mapping[str, object] = field(default_factory=dict, compare=False, repr=False)
    provisioning: str | None = None  # "Spot" or "Flex-start" (scheduling.strategy); None: on-demand

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def model_dir(self) -> str | None:
        return self.output_dir.rstrip("/") + "/model/" if self.output_dir else None

    def trainer_option(self, name: str) -> str | None:
        """The value the job's first pool passes for the trainer option `name` (`Pool.trainer_option`)."""
        return self.pools[0].trainer_option(name) if self.pools else None

    @property
    def replica_names(self) -> list[str]:
        """workerpool{i}-{j} for every replica of every pool: the task_name Vertex logs each one under."""
        return [f"workerpool{i}-{j}" for i, pool in enumerate(self.pools) if pool.machine_type
                for j in range(pool.replicas)]

    def duration_s(self, now: dt.datetime | None = None) -> float | None:
        """Seconds from start to end (to now while it runs); None before it starts."""
        return run_seconds(self.started, self.ended, now)


@dataclass(frozen=True, order=True)
class LogEntry:
    """One log line of a job's replica, as Cloud Logging stored it. `severity` is the entry's own (Vertex files
    every stderr line as ERROR); `received` is when Cloud Logging got it (late lines carry old timestamps)."""

    timestamp: dt.datetime
    replica: str = field(compare=False)
    severity: str = field(compare=False)
    text: str = field(compare=False)
    insert_id: str = field(compare=False)
    received: dt.datetime | None = field(default=None, compare=False)


class TailBatch(list):
    """The `LogEntry` values of one live-tail response. `suppressed`: how many matching entries Cloud Logging left
    out of the stream since the previous response (more than the session's rate limit, or a slow reader); they can
    still be listed."""

    suppressed: int = 0


@dataclass(frozen=True)
class Trial:
    """One trial of a tuning job: its values, its state (REQUESTED, ACTIVE, SUCCEEDED, INFEASIBLE, ...), the
    study metric's final value, the CustomJob it ran as, and why it is INFEASIBLE (Vertex's `infeasible_reason`)."""

    id: str
    state: str
    params: Mapping[str, object] = field(default_factory=dict)
    value: float | None = None
    job: JobName | None = None
    started: dt.datetime | None = None
    ended: dt.datetime | None = None
    error: str | None = None

    def duration_s(self, now: dt.datetime | None = None) -> float | None:
        """Seconds from start to end (to now while it runs); None before it starts."""
        return run_seconds(self.started, self.ended, now)


@dataclass(frozen=True)
class TuningJob:
    """A HyperparameterTuningJob as ftcli sees it: the study's metric and goal, the trials so far, and the shape
    of the trial job (`pools`, `output_dir`: each trial writes under OUTPUT_DIR/TRIAL_ID/)."""

    name: TuningName
    display_name: str
    state: str
    metric: str
    goal: str  # MAXIMIZE or MINIMIZE
    max_trials: int
    parallel: int
    trials: tuple[Trial, ...] = ()
    error: str | None = None
    created: dt.datetime | None = None
    started: dt.datetime | None = None
    ended: dt.datetime | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    pools: tuple[Pool, ...] = ()
    output_dir: str | None = None
    resource: Mapping[str, object] = field(default_factory=dict, compare=False, repr=False)
    provisioning: str | None = None  # each trial's, as a Job's
    searched: tuple[str, ...] = ()  # the study's parameter ids: the trainer options its trials vary

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    def ranked(self) -> list[Trial]:
        """Trials best first (by the study's goal); trials without a value last, in id order."""
        scored = sorted(((t.value, t) for t in self.trials if t.value is not None), key=lambda vt: vt[0],
                        reverse=self.goal != "MINIMIZE")
        return [t for _, t in scored] + sorted((t for t in self.trials if t.value is None), key=lambda t: int(t.id))

    @property
    def best(self) -> Trial | None:
        ranked = self.ranked()
        return ranked[0] if ranked and ranked[0].value is not None else None

    def duration_s(self, now: dt.datetime | None = None) -> float | None:
        if self.started is None:
            return None
        end = self.ended or now or dt.datetime.now(dt.UTC)
        return max(0.0, (end - self.started).total_seconds())
