"""`ftcli tune` as pure code: the search space, the metric, and the HyperparameterTuningJob around the very job
`ftcli train` would build (REST JSON, like `spec.build_custom_job`).

Vertex runs each trial as that CustomJob with the trial's values appended as `--PARAMETER_ID VALUE` ("Create a
hyperparameter tuning job", https://docs.cloud.google.com/vertex-ai/docs/training/using-hyperparameter-tuning,
read 2026-11-26), so a parameter id is a trainer option's field name (`learning_rate`), which the trainer
accepts next to `--learning-rate`; the trainer reports the study's metric after each evaluation
(`--hypertune-metric`, ftcli_trainer.hypertune). Each trial writes under BASE/TRIAL_ID/ (AIP_MODEL_DIR).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ftcli.errors import UsageError

SEARCH_RE = re.compile(r"^\s*([A-Za-z_][\w-]*)\s*=\s*([a-z]+)\s*\((.*)\)\s*$")
# What a search may vary: the options that change how well a model trains, not what it trains on.
TUNABLE = ("learning_rate", "batch_size", "weight_decay", "warmup_ratio", "epochs", "max_length",
           "gradient_accumulation_steps", "max_grad_norm", "seed", "model")
DEFAULT_SEARCH = ("learning_rate=loguniform(1e-5,1e-4)", "batch_size=choice(16,32)")
MAX_TRIALS = 1000  # far past any budget this tool should start without a second look
# A numeric choice is a DiscreteValueSpec: "The list should be in increasing order and at least 1e-10 apart ... This
# list should not contain more than 1,000 values" (StudySpec.ParameterSpec.DiscreteValueSpec.values, the docstring of
# google-cloud-aiplatform 2.7.0's aiplatform_v1/types/study.py and the aiplatform v1 Java reference,
# https://cloud.google.com/java/docs/reference/google-cloud-aiplatform/latest/
# com.google.cloud.aiplatform.v1beta1.StudySpec.ParameterSpec.DiscreteValueSpec.Builder; read 2026-11-27).
DISCRETE_MIN_GAP = 1e-10
MAX_DISCRETE_VALUES = 1000


@dataclass(frozen=True)
class Param:
    name: str
    spec: dict[str, Any]  # StudySpec.ParameterSpec as REST JSON
    extremes: tuple[Any, ...]  # values the trainer must accept (checked before anything is sent)


def _numbers(text: str, kind: type, what: str) -> list[float]:
    return [_number(p, kind, what) for p in text.split(",") if p.strip()]


def _number(text: str, kind: type, what: str) -> float:
    try:
        return kind(text.strip())
    except ValueError:
        raise UsageError(f"{what}: expected {kind.__name__} values, got {text.strip()!r}") from None


def parse_one(item: str, option_types: dict[str, type]) -> Param:
    """`learning_rate=loguniform(1e-5,1e-4)`, `uniform(a,b)`, `int(a,b)` or `choice(v1,v2,...)`."""
    m = SEARCH_RE.match(item)
    if not m:
        raise UsageError(f"--search {item!r}: write NAME=loguniform(LOW,HIGH), uniform(LOW,HIGH), int(LOW,HIGH) "
                         "or choice(A,B,...)")
    name, dist, body = m.group(1).replace("-", "_"), m.group(2), m.group(3)
    what = f"--search {name}"
    if name not in TUNABLE:
        from ftcli_trainer.config import choice_line

        raise UsageError(choice_line("--search NAME", m.group(1), TUNABLE))
    kind = option_types[name]
    if dist in ("loguniform", "uniform"):
        if kind is not float:
            raise UsageError(f"{what} takes whole numbers: use int(LOW,HIGH) or choice(...)")
        low, high = _pair(_numbers(body, float, what), what)
        if dist == "loguniform" and low <= 0:
            raise UsageError(f"{what}: loguniform needs LOW > 0 (got {low:g})")
        scale = "UNIT_LOG_SCALE" if dist == "loguniform" else "UNIT_LINEAR_SCALE"
        return Param(name, {"parameterId": name, "doubleValueSpec": {"minValue": low, "maxValue": high},
                            "scaleType": scale}, (low, high))
    if dist == "int":
        if kind is not int:
            raise UsageError(f"{what} is not a whole number: use uniform/loguniform or choice(...)")
        low, high = _pair(_numbers(body, int, what), what)
        # int64 values are strings in proto JSON
        return Param(name, {"parameterId": name, "integerValueSpec": {"minValue": str(low), "maxValue": str(high)},
                            "scaleType": "UNIT_LINEAR_SCALE"}, (low, high))
    if dist == "choice":
        values: list[str] | list[float] | list[int]
        items = _choice_items(body, what)
        if kind is str:
            values = items
            spec = {"parameterId": name, "categoricalValueSpec": {"values": values}}
        else:
            # each value alone: a JSON list's "1,000" is one value (refused), not 1 and 0
            numbers = sorted({_number(v, kind, what) for v in items})
            spec = {"parameterId": name, "discreteValueSpec": {"values": [float(v) for v in numbers]}}
            if len(numbers) > MAX_DISCRETE_VALUES:
                raise UsageError(f"{what}: choice takes at most {MAX_DISCRETE_VALUES} numbers (Vertex's limit), got "
                                 f"{len(numbers)}")
            close = [(a, b) for a, b in zip(numbers, numbers[1:], strict=False) if b - a < DISCRETE_MIN_GAP]
            if close:
                a, b = close[0]
                raise UsageError(f"{what}: choice values {a!r} and {b!r} are less than {DISCRETE_MIN_GAP:g} apart, "
                                 "which Vertex refuses: keep one of them")
            values = numbers
        if len(values) < 2:
            raise UsageError(f"{what}: choice needs at least two values")
        return Param(name, spec, tuple(values))
    raise UsageError(f"--search {item!r}: unknown distribution {dist!r}; use loguniform, uniform, int or choice")


def _choice_items(body: str, what: str) -> list[str]:
    """choice(A,B,...)'s values, or choice(["A", "B"]), a JSON list, for values that hold a comma (a model folder
    `runs/a,b`), which the plain form splits; a study file's list is written so."""
    if not body.lstrip().startswith("["):
        return [v.strip() for v in body.split(",") if v.strip()]
    try:
        items = json.loads(body)
    except ValueError as e:
        raise UsageError(f"{what}: choice({body}) is not a valid JSON list ({e}); write choice(A,B) or "
                         "choice([\"A\", \"B, C\"])") from None
    if not isinstance(items, list) or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                              and str(v).strip() for v in items):
        raise UsageError(f"{what}: choice({body}) must be a JSON list of values, e.g. choice([\"A\", \"B, C\"])")
    return [str(v).strip() for v in items]


def _pair(values: list, what: str) -> tuple:
    if len(values) != 2 or not values[0] < values[1]:
        raise UsageError(f"{what}: give LOW,HIGH with LOW < HIGH (got {', '.join(map(str, values))})")
    return values[0], values[1]


def parse_search(items: list[str], option_types: dict[str, type]) -> list[Param]:
    """Every --search (the task's default search when none), all problems at once."""
    problems, params = [], []
    for item in items or DEFAULT_SEARCH:
        try:
            params.append(parse_one(item, option_types))
        except UsageError as e:
            problems.append(e.message)
    names = [p.name for p in params]
    problems += [f"--search {n} is given more than once" for n in sorted({n for n in names if names.count(n) > 1})]
    if problems:
        raise UsageError(problems[0] if len(problems) == 1 else f"{len(problems)} problems with --search:",
                         problems=problems if len(problems) > 1 else None)
    return params


STUDY_KEYS = ("metric", "trials", "parallel", "search")


@dataclass(frozen=True)
class StudyFile:
    """What a --search-file holds; flags given on the command line win over it."""

    search: tuple[str, ...] = ()
    metric: str | None = None
    trials: int | None = None
    parallel: int | None = None


def _as_item(name: str, value: Any, where: str) -> str:
    if isinstance(value, str):
        return f"{name}={value}"
    if isinstance(value, list) and value and all(isinstance(v, (int, float, str)) and not isinstance(v, bool)
                                                 for v in value):
        if any("," in str(v) for v in value):  # the plain form would split it
            return f"{name}=choice({json.dumps(value)})"
        return f"{name}=choice({','.join(str(v) for v in value)})"
    raise UsageError(f"{where}: {name} must be a string like \"loguniform(1e-5,1e-4)\" or a list of values "
                     f"(a choice), got {value!r}")


def load_study_file(path: str) -> StudyFile:
    """A TOML study: `metric`, `trials`, `parallel` and a [search] table of NAME = "loguniform(LOW,HIGH)" (the
    --search forms) or NAME = [A, B] (a choice). Unknown keys and wrong types are errors, not ignored."""
    import tomllib
    from pathlib import Path

    from ftcli.settings import special_file

    where = f"--search-file {path}"
    # (each was the one line alone: nothing said what a study file is, or where one is shown)
    shown = "README's 'ftcli tune' section shows a study file"
    try:
        # A named pipe nothing writes into (or a device) was read as the study: `ftcli tune` waited for ever, before
        # anything was said. `<(...)`, a pipe the shell hands over with its writer, is read (special_file).
        if special := special_file(Path(path)):
            raise UsageError(f"{where}: is {special}, not a regular file", hint=f"give the study file itself; {shown}")
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{where}: no such file", hint=f"check the path; {shown}") from None
    except IsADirectoryError:
        raise UsageError(f"{where}: is a folder", hint=f"give the study file in it; {shown}") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"{where}: is not UTF-8 text (byte {e.start}: {e.reason})",
                         hint="save it as UTF-8") from None
    except OSError as e:
        raise UsageError(f"{where}: cannot read it ({e.strerror or e})") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{where}: not valid TOML ({e})", hint=f"fix the line it names; {shown}") from None
    unknown = sorted(set(data) - set(STUDY_KEYS))
    if unknown:
        raise UsageError(f"{where}: unknown key {', '.join(unknown)}; a study file holds {', '.join(STUDY_KEYS)}")
    search = data.get("search", {})
    if not isinstance(search, dict):
        raise UsageError(f"{where}: search must be a table ([search] with NAME = \"loguniform(1e-5,1e-4)\")")
    for key, kind in (("trials", int), ("parallel", int), ("metric", str)):
        if key in data and (not isinstance(data[key], kind) or isinstance(data[key], bool)):
            raise UsageError(f"{where}: {key} must be {'a whole number' if kind is int else 'a string'}, "
                             f"got {data[key]!r}")
    return StudyFile(tuple(_as_item(n, v, where) for n, v in search.items()), data.get("metric"),
                     data.get("trials"), data.get("parallel"))


def search_name(item: str) -> str:
    """The option a --search item varies (`batch-size=choice(16,32)`: batch_size)."""
    return item.split("=", 1)[0].strip().replace("-", "_")


def merge_search(from_file: tuple[str, ...] | list[str], flags: list[str]) -> list[str]:
    """The file's search, with a --search for the same option replacing the file's."""
    given = {search_name(i) for i in flags}
    return [i for i in from_file if search_name(i) not in given] + list(flags)


def without_fixed(search: list[str], fixed: dict[str, str]) -> tuple[list[str], list[str]]:
    """(the search to run, problems), given the options fixed by their own flags (`fixed`: name → the flag and its
    value, "--learning-rate 3e-05"). A trial's value is appended after the job's arguments, so it wins: a fixed value
    was dropped without a word. The default search leaves a fixed option out; a search the user wrote that varies
    one is refused."""
    if not search:
        left = [item for item in DEFAULT_SEARCH if search_name(item) not in fixed]
        if not left:
            flags = " and ".join(fixed[search_name(item)] for item in DEFAULT_SEARCH)
            return [], [f"{flags} fix every option the default search varies: nothing is left to tune; give "
                        "--search NAME=... for what to tune (e.g. --search 'weight_decay=uniform(0,0.1)')"]
        return left, []
    return search, [f"--search {search_name(item)} varies what {fixed[search_name(item)]} fixes: drop one of them"
                    for item in search if search_name(item) in fixed]


def default_metric(multi_label: bool) -> str:
    return "eval_micro_f1" if multi_label else "eval_accuracy"


def goal(metric: str) -> str:
    return "MINIMIZE" if metric.endswith(("_loss", "_mse")) else "MAXIMIZE"


def count_problems(trials: int, parallel: int, trials_from: str = "--trials",
                   parallel_from: str = "--parallel") -> list[str]:
    """`trials_from`/`parallel_from` name where each number was given (a flag, or a --search-file's key)."""
    problems = []
    if not 1 <= trials <= MAX_TRIALS:
        problems.append(f"{trials_from} must be between 1 and {MAX_TRIALS} (got {trials})")
    if parallel < 1 or parallel > max(1, trials):
        problems.append(f"{parallel_from} must be between 1 and {trials_from} ({trials}), got {parallel}")
    return problems


def build_tuning_job(custom_job: dict[str, Any], params: list[Param], metric: str, trials: int,
                     parallel: int, best_measurement: bool = False) -> dict[str, Any]:
    """The HyperparameterTuningJob whose trials run `custom_job` (from `spec.build_custom_job`). `best_measurement`:
    each trial is judged by its best evaluation, not its last (a trial that exports the best evaluation's weights).
    Unset, Vertex takes the last: "MEASUREMENT_SELECTION_TYPE_UNSPECIFIED: Will be treated as LAST_MEASUREMENT"
    (StudySpec.MeasurementSelectionType, the installed google-cloud-aiplatform 2.7.0's aiplatform_v1/types/study.py,
    read 2026-11-28)."""
    study: dict[str, Any] = {"metrics": [{"metricId": metric, "goal": goal(metric)}],
                             "parameters": [p.spec for p in params]}
    if best_measurement:
        study["measurementSelectionType"] = "BEST_MEASUREMENT"
    job: dict[str, Any] = {
        "displayName": custom_job["displayName"],
        "studySpec": study,
        "maxTrialCount": trials,
        "parallelTrialCount": parallel,
        "trialJobSpec": custom_job["jobSpec"],
    }
    if custom_job.get("labels"):
        job["labels"] = dict(custom_job["labels"])
    return job

