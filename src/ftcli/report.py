"""`ftcli report`: pictures and a Markdown table of a run, from the files its trainer wrote.

A run folder has Vertex's layout: `model/metrics.json` (the final metrics), `model/eval_predictions.npz` (the
last evaluation's truth, predictions and scores per eval set), `model/config.json`, `model/ftcli_run.json` and
`logs/metrics.jsonl` (a train line every few steps, an eval line per evaluation). A model folder alone
(`ftcli download`'s) works too, without learning curves. The report folder gets:

    learning_curves.png         train and eval loss, the task's metrics, the learning rate, by optimizer step
    confusion_matrix[-SET].png  single-label (rows true, columns predicted)
    per_label_f1[-SET].png      multi-label
    predicted_vs_true[-SET].png regression
    report.md                   the metrics as Markdown tables, and the pictures
    ftcli-report.json           what was written: marks the folder as a report that a later one may replace

The primary eval set's pictures have no suffix; others (MNLI's `mismatched`) are named after their set. A picture
draws at most MAX_DRAWN labels in full (a picture a side per label grows with the square of the labels: 1000
labels asked matplotlib for a 55,000-pixel square); above that, the most frequent ones, and report.md says which.
The files are drawn in a staging folder beside the report's and moved in at the end, so a crash midway leaves
no half-written folder that the next report would refuse.
matplotlib is an optional extra, imported only when pictures are drawn, with the Agg backend (no display).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from ftcli.errors import FtcliError, UsageError
from ftcli_trainer.storage import clear_staging_inside, is_staging_inside, names_on_failure, staging_for

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MANIFEST = "ftcli-report.json"
INSIDE_STAGING = "ftcli-report"  # .ftcli-report.tmp-PID-XXXXXXXX, inside an --out folder that exists
# Labels a confusion matrix or F1 bar chart draws in full; above it, this many with the most support (and, in a
# matrix, one row and column pooling the rest), so the picture stays readable and its memory bounded.
MAX_DRAWN = 30
TICK_CHARS = 28  # a label's name on an axis, at most (bbox_inches="tight" would widen the picture to fit it)
REPORT_DIR = "report"
# What a report reads of a run, relative to the run folder (also what is downloaded for a job).
RUN_FILES = ("model/metrics.json", "model/eval_predictions.npz", "model/config.json", "model/ftcli_run.json",
             "logs/metrics.jsonl")
KINDS = {"single_label_classification": "single_label", "multi_label_classification": "multi_label",
         "regression": "regression"}
# Per-run numbers, not a metric of one eval set (the trainer writes them with the `eval_` prefix too).
NOT_PER_SET = ("eval_runtime", "eval_samples_per_second")
TRAINING_ROWS = (("train_loss", "train loss"), ("global_step", "optimizer steps"), ("epoch", "epochs"),
                 ("train_samples", "training examples"), ("train_samples_per_second", "train samples/s"),
                 ("train_tokens_per_second", "train tokens/s (real)"), ("train_pad_fraction", "pad fraction"),
                 ("train_runtime", "train runtime (s)"))


def require_matplotlib(command: str = "ftcli report") -> None:
    """Before any work (or download): the pictures need the `report` extra. `command` is what the user ran, named in
    the error (`ftcli evaluate --report` draws them too)."""
    if importlib.util.find_spec("matplotlib") is None:
        raise FtcliError(f"{command} draws with matplotlib, which is not installed: pip install 'ftcli[report]'")


@dataclass
class Run:
    """What a run folder holds, read once."""

    source: str
    metrics: dict | None
    history: list[dict]
    predictions: dict[str, np.ndarray] | None
    config: dict | None
    run_config: dict | None
    kind: str = "single_label"
    eval_sets: list[str] = field(default_factory=list)
    label_names: list[str] = field(default_factory=list)
    skipped_lines: int = 0
    # Why the metrics.jsonl beside a model folder was not drawn (another run's: _not_its_curve), or None
    curve_left_out: str | None = None

    def prefix(self, i: int) -> str:
        """`eval_` for the primary eval set, `eval_NAME_` for the others (the trainer's keys)."""
        return "eval_" if i == 0 else f"eval_{self.eval_sets[i]}_"

    def suffix(self, i: int) -> str:
        return "" if i == 0 else f"-{self.eval_sets[i]}"

    @property
    def task(self) -> str | None:
        return (self.run_config or {}).get("task")

    @property
    def threshold(self) -> float | None:
        """A multi-label model's threshold, the one its F1s are at (config.json's ftcli_threshold, which ftcli predict
        and ftcli evaluate take by default; else the run's --threshold); None for other models, or when unsaid."""
        from ftcli.models import saved_threshold

        return saved_threshold(self.config, self.run_config) if self.kind == "multi_label" else None

    def headline(self) -> tuple[str, ...]:
        """The metrics the trainer's own log lines show for this run, most important first."""
        from ftcli_trainer.metrics import headline
        from ftcli_trainer.tasks import TASKS

        task = TASKS.get(self.task or "")
        return headline(task.metrics if task else (), self.kind == "multi_label", self.kind == "regression")


def _read_json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FtcliError(f"cannot read {path}: {e}", hint="is the run still being written? run the report "
                         "again when it has finished") from None
    if not isinstance(value, dict):
        raise FtcliError(f"cannot read {path}: expected a JSON object")
    return value


def _read_history(path: Path) -> tuple[list[dict], int]:
    """metrics.jsonl's rows; a row repeated by a resumed run (same kind and step) keeps its last version, and a
    line cut off by a crash is skipped (and counted)."""
    if not path.is_file():
        return [], 0
    rows: dict[tuple[str, int], dict] = {}
    skipped = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            key = (str(row["type"]), int(row["step"]))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            skipped += 1
            continue
        rows.pop(key, None)
        rows[key] = row
    return sorted(rows.values(), key=lambda r: (int(r["step"]), r["type"] != "train")), skipped


def _read_predictions(path: Path) -> dict[str, np.ndarray] | None:
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError) as e:
        raise FtcliError(f"cannot read {path}: {e}", hint="download the run again, or remove the file to "
                         "report without it") from None


def _not_its_curve(metrics: dict, history: list[dict]) -> str | None:
    """Why `history` (the metrics.jsonl beside a model folder) is not the run that exported the model whose
    metrics.json is `metrics`, or None when it is. A model folder says which run it came from by nothing but its
    numbers (ftcli_run.json's paths are names only, there is no run id): the run's curve ends at the model's
    global_step with an evaluation, and that evaluation is the one in metrics.json (--keep-best: its last_eval).
    A model copied beside another run's logs/ (an earlier run of the same command, another seed) was drawn with
    that run's curve and written into its report/. (Close, not equal: a run resumed after its last checkpoint
    evaluates again for its metrics.json without logging it.)"""
    step = metrics.get("global_step")
    if not isinstance(step, int):
        return "this model's metrics.json does not say at which step its run ended"
    last = max(int(r["step"]) for r in history)
    if last != step:
        return f"that curve ends at step {last}, and this model's run at step {step}"
    final: dict = metrics["last_eval"] if isinstance(metrics.get("last_eval"), dict) else metrics
    rows = [r for r in history if r["type"] == "eval" and int(r["step"]) == step]
    keys = [k for k in (rows[0] if rows else {}) if k.startswith("eval_") and k not in NOT_PER_SET]
    if not keys or any(not isinstance(final.get(k), (int, float)) or not isinstance(rows[0][k], (int, float))
                       or not math.isclose(final[k], rows[0][k], rel_tol=1e-6, abs_tol=1e-12) for k in keys):
        return f"its evaluation at step {step} is not the one in this model's metrics.json"
    return None


def load_run(path: Path, source: str | None = None) -> Run:
    """Read a run folder (model/ and logs/) or a model folder (metrics.json, with logs/ beside it if there: drawn
    only when it is the model's own run's, _not_its_curve)."""
    if not path.is_dir():
        raise UsageError(f"{path} is not a folder", hint="give the run folder that ftcli local printed, or a job")
    if (path / "model").is_dir() or (path / "logs").is_dir():
        model, logs = path / "model", path / "logs"
    elif (path / "metrics.json").is_file() or (path / "config.json").is_file():
        model, logs = path, path.parent / "logs"
    else:
        raise UsageError(f"{path} is not an ftcli run folder (no model/ or logs/, no metrics.json)",
                         hint="give the run folder that ftcli local printed (run folder: ...), a model folder, or "
                              "a job")
    history, skipped = _read_history(logs / "metrics.jsonl")
    metrics = _read_json(model / "metrics.json")
    left_out = None
    if model == path and history and metrics is not None and (why := _not_its_curve(metrics, history)):
        left_out = f"the learning curves are left out: {logs / 'metrics.jsonl'} is another run's ({why})"
        history, skipped = [], 0
    run = Run(source=source or str(path), metrics=metrics, history=history,
              predictions=_read_predictions(model / "eval_predictions.npz"), config=_read_json(model / "config.json"),
              run_config=_read_json(model / "ftcli_run.json"), skipped_lines=skipped, curve_left_out=left_out)
    if run.metrics is None and not run.history:
        if model == path and run.run_config is None and not logs.is_dir():
            # a model folder from elsewhere (a plain save_pretrained, a Hub snapshot): no run of ftcli's, no "yet"
            raise UsageError(f"{path} is a model folder without ftcli's metrics (no metrics.json, no ftcli_run.json): "
                             "ftcli report draws what ftcli's trainer logged",
                             hint="give the run folder of the ftcli local run, or the job, that trained it")
        raise UsageError(f"{path} holds no metrics yet (no model/metrics.json, no logs/metrics.jsonl)",
                         hint="run the report once the run has logged its first steps")
    _describe(run)
    return run


def evaluation_run(model: Path, result: dict, labels: np.ndarray, logits: np.ndarray) -> Run:
    """An `ftcli evaluate` result as a Run that write_report draws: its metrics as those of one eval set named after
    the file (the threshold of a multi-label model's F1s among them), its outputs as eval_predictions.npz's arrays,
    the model's config and run config; no history, so no learning curves."""
    from ftcli_trainer.export import prediction_arrays
    from ftcli_trainer.metrics import prefixed

    names, regression, multi = result.get("labels", []), "labels" not in result, "threshold" in result
    set_name = result["file"].rstrip("/").rsplit("/", 1)[-1]  # (its base name: the pictures' titles show it)
    found = {k: v for k, v in result.items() if k not in ("model", "file", "examples", "labels")}
    predictions = prediction_arrays({set_name: (labels, logits)}, names, multi, regression,
                                    result.get("threshold", 0.5))
    run = Run(source=f"{result['file']}, scored by {result['model']}", metrics=prefixed(found, set_name, True),
              history=[], predictions=predictions, config=_read_json(model / "config.json"),
              run_config=_read_json(model / "ftcli_run.json"))
    _describe(run)
    run.kind = str(predictions["kind"])  # evaluate's own reading of the model (a model from elsewhere: no config's)
    return run


def _describe(run: Run) -> None:
    """Kind, eval sets and label names, from the most direct source there is."""
    keys = set(run.metrics or {}) | {k for row in run.history for k in row}
    p = run.predictions
    if run.config and run.config.get("problem_type") in KINDS:
        run.kind = KINDS[run.config["problem_type"]]
    elif p is not None and "kind" in p:
        run.kind = str(p["kind"])
    elif "eval_pearson" in keys:
        run.kind = "regression"
    elif "eval_micro_f1" in keys:
        run.kind = "multi_label"
    if p is not None and "eval_sets" in p:
        run.eval_sets = [str(x) for x in p["eval_sets"]]
        run.label_names = [str(x) for x in p["label_names"]]
    else:
        # the primary set's keys are eval_X; another set's eval_NAME_X (each set has a loss)
        run.eval_sets = ["eval"] + sorted(k[5:-5] for k in keys if k.startswith("eval_") and k.endswith("_loss")
                                          and k != "eval_loss")
        if run.config and isinstance(run.config.get("id2label"), dict):
            id2label = run.config["id2label"]
            run.label_names = [str(id2label[k]) for k in sorted(id2label, key=int)]


def per_label(run: Run, i: int) -> dict | None:
    """metrics.json's per-label scores of eval set i, in the labels' own order (the model's ids: the data's columns)
    where the run names its labels: metrics.json is written with sorted keys, and the table and the bars listed
    GoEmotions' or Jigsaw's labels alphabetically."""
    scores = (run.metrics or {}).get(run.prefix(i) + "per_label")
    if not isinstance(scores, dict) or not scores:
        return None
    if set(run.label_names) == set(scores):
        return {name: scores[name] for name in run.label_names}
    return scores


def set_metrics(run: Run, i: int) -> dict[str, float]:
    """The scalar metrics of eval set i from metrics.json, keyed without the prefix."""
    prefix = run.prefix(i)
    out = {}
    for k, v in (run.metrics or {}).items():
        if not k.startswith(prefix) or k in NOT_PER_SET or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        name = k[len(prefix):]
        if i == 0 and any(name.startswith(f"{s}_") for s in run.eval_sets[1:]):
            continue  # eval_mismatched_accuracy is the other set's, not a primary metric named mismatched_accuracy
        out[name] = v
    return out


# -- the output folder ----------------------------------------------------------------------------------------


def default_out(run_dir: Path, in_its_run: bool = True) -> Path:
    """Where a report goes without --out: RUN/report for a run folder or its model/; beside a model folder of its
    own (DIR-report). Never inside a model folder: an export replaces that folder whole, report and all. (`.` and
    `..` are made absolute first: Path(".").parent is ".", and `ftcli report .` in a model folder wrote into it.)
    `in_its_run` False: the run folder around a model folder is another run's (Run.curve_left_out), whose own
    report/ this one replaced; the report goes beside the model folder."""
    if run_dir.name in ("", ".."):
        run_dir = Path(os.path.abspath(run_dir))
    if (run_dir / "model").is_dir() or (run_dir / "logs").is_dir():
        return run_dir / REPORT_DIR
    if in_its_run and ((run_dir.parent / "logs").is_dir() or (run_dir.parent / "checkpoints").is_dir()):
        return run_dir.parent / REPORT_DIR
    return run_dir.parent / f"{run_dir.resolve().name}-{REPORT_DIR}"


def earlier_report(out: Path, flag: str = "--out") -> list[str]:
    """The files an earlier report wrote into `out` ([] for a new or empty folder). A non-empty folder that is
    not a report is refused, so a user's files are never overwritten. `flag` is the option that named `out`, which the
    hint tells the user to change: `ftcli evaluate` names it --report and has no --out."""
    # A link to a folder is that folder (a report kept in a shared place: it was refused as "not a folder"); one to
    # nothing is refused here, not by the rename onto it after every picture is drawn.
    if out.is_symlink() and not out.exists():
        raise UsageError(f"{out} is a link to {os.readlink(out)}, which does not exist",
                         hint=f"create the folder it points to, or give {flag} another folder")
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is not a folder", hint=f"give {flag} a new or empty folder")
    # Another report being drawn into this folder now stages inside it (a dead one's staging is gone by now:
    # clear_staging_inside): it made an empty folder "not empty" and no report's, while `ls` showed nothing there.
    if not out.is_dir() or all(is_staging_inside(p, INSIDE_STAGING) for p in out.iterdir()):
        return []
    manifest = out / MANIFEST
    try:
        files = json.loads(manifest.read_text(encoding="utf-8"))["files"] if manifest.is_file() else None
    except (OSError, ValueError, KeyError, TypeError):
        files = None
    if not isinstance(files, list) or not all(isinstance(f, str) and "/" not in f for f in files):
        raise UsageError(f"{out} is not empty and holds no earlier ftcli report",
                         hint=f"give {flag} a new or empty folder; nothing was written")
    return files


def _check_names(out: Path, names: list[str], earlier: list[str], flag: str) -> None:
    taken = [n for n in names if (out / n).exists() and n not in earlier and n != MANIFEST]
    if taken:
        raise UsageError(f"{out / taken[0]} is not from the earlier report" + (
            f" (and {len(taken) - 1} more)" if len(taken) > 1 else ""),
            hint=f"move it away, or give {flag} a new folder; nothing was written")


def _write_manifest(path: Path, source: str, files: list[str]) -> None:
    path.write_text(json.dumps({"ftcli_report": 1, "source": source, "files": files}, indent=2) + "\n",
                    encoding="utf-8")


def _publish(staged: Path, out: Path, names: list[str], earlier: list[str], source: str) -> None:
    """Move the finished files from `staged` into `out` (os.replace: a link there is replaced, never followed).
    A new folder appears whole; into an existing one, a manifest naming both reports' files goes first, so a crash
    while the files move leaves a folder the next report recognises as its own."""
    if not out.exists():
        try:
            staged.rename(out)
            return
        except OSError:  # made meanwhile (another report?): move the files one by one
            out.mkdir(exist_ok=True)
    both = staged / f".{MANIFEST}.both"
    _write_manifest(both, source, [*names, *(n for n in earlier if n not in names)])
    os.replace(both, out / MANIFEST)
    for name in names:
        os.replace(staged / name, out / name)
    for stale in set(earlier) - set(names):  # an earlier report's pictures this run does not have
        target = out / stale
        if target.is_file() or target.is_symlink():
            target.unlink()
    os.replace(staged / MANIFEST, out / MANIFEST)


# -- pictures -------------------------------------------------------------------------------------------------


@dataclass
class Picture:
    name: str
    draw: Callable[[Path], None]
    labels: int = 0  # how many labels the run has, where the picture draws only `drawn` of them
    drawn: list[str] = field(default_factory=list)
    table: str | None = None  # report.md's heading of the table that has every label, where there is one

    @property
    def note(self) -> str | None:
        """What the picture leaves out, for report.md and stderr (None when it draws every label)."""
        if not self.drawn:
            return None
        if self.name.startswith("confusion_matrix"):
            # the drawn labels' list follows this (report.md): it must not read as the pooled ones' list
            return (f"{self.name} pools the {self.labels - len(self.drawn):,} least frequent of {self.labels:,} true "
                    f"labels in its last row and column, \"other\", and draws the {len(self.drawn)} most frequent (by "
                    f"support)")
        return f"{self.name} draws the {len(self.drawn)} labels with the most support of {self.labels:,}"


@dataclass
class Matrix:
    """A confusion matrix as drawn: counts (rows true, columns predicted) over `names`, the last of which pools
    the labels not drawn when the run has more than MAX_DRAWN; and the whole matrix's totals."""

    counts: np.ndarray
    names: list[str]
    labels: int
    total: int
    correct: int

    @property
    def pooled(self) -> bool:
        return len(self.names) < self.labels


def top_by_support(support: np.ndarray | list[int], limit: int = MAX_DRAWN) -> np.ndarray:
    """The indices of the `limit` labels with the most support, most first (ties: the first label first)."""
    return np.argsort(-np.asarray(support), kind="stable")[:limit]


def _slots(support: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """The labels drawn (top by support) and each label's row in the drawn matrix; the rest share row `limit`."""
    keep = top_by_support(support, limit)
    slot = np.full(len(support), limit, dtype=np.int64)
    slot[keep] = np.arange(len(keep))
    return keep, slot


def confusion(names: list[str], truth: np.ndarray | None = None, predicted: np.ndarray | None = None,
              cm: list[list[int]] | None = None, limit: int = MAX_DRAWN) -> Matrix:
    """The matrix a picture draws, from the predictions (counted straight into the drawn rows: never K x K for
    many labels) or from metrics.json's full matrix (older runs)."""
    k = len(names)
    if truth is not None:
        truth, predicted = truth.astype(np.int64), np.asarray(predicted).astype(np.int64)
        total, correct = len(truth), int((truth == predicted).sum())
        if k <= limit:
            from ftcli_trainer.metrics import confusion_matrix

            return Matrix(confusion_matrix(truth, predicted, k), list(names), k, total, correct)
        keep, slot = _slots(np.bincount(truth, minlength=k), limit)
        size = limit + 1
        counts = np.bincount(slot[truth] * size + slot[predicted], minlength=size * size).reshape(size, size)
    else:
        full = np.asarray(cm, dtype=np.int64)
        total, correct = int(full.sum()), int(np.trace(full))
        if k <= limit:
            return Matrix(full, list(names), k, total, correct)
        keep, slot = _slots(full.sum(axis=1), limit)
        counts = np.zeros((limit + 1, limit + 1), dtype=np.int64)
        np.add.at(counts, (slot[:, None], slot[None, :]), full)
    return Matrix(counts, [names[j] for j in keep] + [f"other ({k - limit:,} labels)"], k, total, correct)


def _plan(run: Run) -> list[Picture]:
    """Every picture this run can give, with its drawer."""
    plan: list[Picture] = []
    if run.history:
        plan.append(Picture("learning_curves.png", partial(_learning_curves, run)))
    p = run.predictions or {}
    for i, name in enumerate(run.eval_sets):
        truth, predicted = p.get(f"{name}/labels"), p.get(f"{name}/predicted")
        cm = (run.metrics or {}).get(run.prefix(i) + "confusion_matrix")
        scores = per_label(run, i)
        table = f"Per label ({name})" if scores else None
        if run.kind == "regression" and truth is not None and predicted is not None:
            plan.append(Picture(f"predicted_vs_true{run.suffix(i)}.png", partial(_scatter, run, i, truth, predicted)))
        elif run.kind == "single_label" and run.label_names and (truth is not None or cm is not None):
            # from the predictions where the run exported them (older runs: metrics.json's matrix)
            matrix = confusion(run.label_names, truth, predicted) if truth is not None else confusion(
                run.label_names, cm=cm)
            plan.append(Picture(f"confusion_matrix{run.suffix(i)}.png", partial(_confusion, run, i, matrix),
                                matrix.labels, matrix.names[:-1] if matrix.pooled else [], table))
        elif run.kind == "multi_label" and scores:
            names = list(scores)
            if len(names) > MAX_DRAWN:
                names = [names[j] for j in top_by_support([_support(scores[n]) for n in names])]
            plan.append(Picture(f"per_label_f1{run.suffix(i)}.png", partial(_f1_bars, run, i, scores, names),
                                len(scores), names if len(names) < len(scores) else [], table))
    return plan


def _support(scores: Any) -> int:
    value = scores.get("support", 0) if isinstance(scores, dict) else 0
    return int(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0


def _short(name: str) -> str:
    return name if len(name) <= TICK_CHARS else name[:TICK_CHARS - 1] + "…"


def _matplotlib_config_dir() -> None:
    """Give matplotlib a writable config folder where the user's is not (a container's user with no writable home):
    it made one in the temp folder by itself, and printed two unformatted warnings about it among ftcli's lines
    ("mkdir -p failed for path ...", "Matplotlib created a temporary cache directory ..."). Its own rule: MPLCONFIGDIR,
    else $XDG_CONFIG_HOME/matplotlib or ~/.config/matplotlib on Linux (matplotlib's `_get_config_or_cache_dir`)."""
    if os.environ.get("MPLCONFIGDIR") or sys.platform != "linux":
        return
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    try:
        Path(base, "matplotlib").mkdir(parents=True, exist_ok=True)
        if os.access(Path(base, "matplotlib"), os.W_OK):
            return
    except OSError:
        pass
    import atexit
    import tempfile

    tmp = tempfile.mkdtemp(prefix="ftcli-matplotlib-")
    atexit.register(shutil.rmtree, tmp, True)
    os.environ["MPLCONFIGDIR"] = tmp


def _pyplot() -> ModuleType:
    _matplotlib_config_dir()
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, no GUI toolkit
    import matplotlib.pyplot as plt

    return plt


# matplotlib's words for a character its font cannot draw (matplotlib 3.11, _text_helpers.warn_on_missing_glyph,
# from the Agg backend): "Glyph 26085 (\N{CJK UNIFIED IDEOGRAPH-65E5}) missing from font(s) DejaVu
# Sans."
MISSING_GLYPH = re.compile(r"Glyph (\d+) .*missing from font\(s\) (.+?)\.?$")


def _drawn_noting_missing_glyphs(draw: Callable[[Path], None], path: Path, fonts: set[str]) -> str:
    """draw(path); the characters matplotlib drew as empty boxes, in the order met, their fonts added to `fonts`.
    A label, a title's file name in Japanese (a multilingual classifier's labels, 日本.csv) printed one raw Python
    warning per character among ftcli's lines, with the line of ftcli's source that saved the picture; other
    warnings go on as they were."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        draw(path)
    chars = ""
    for w in caught:
        if w.category is UserWarning and (m := MISSING_GLYPH.match(str(w.message))):
            chars += "" if chr(int(m.group(1))) in chars else chr(int(m.group(1)))
            fonts.add(m.group(2))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return chars


def _shown_chars(chars: str, most: int = 10) -> str:
    shown = ", ".join(chars[:most])
    return shown + (f" and {len(chars) - most} more" if len(chars) > most else "")


def _save(fig: Figure, path: Path) -> None:
    plt = _pyplot()
    try:
        fig.savefig(path, format="png", dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)


def _learning_curves(run: Run, path: Path) -> None:
    from ftcli_trainer.metrics import SHOWN

    plt = _pyplot()
    train = [r for r in run.history if r["type"] == "train"]
    evals = [r for r in run.history if r["type"] == "eval"]
    fig, (loss_ax, metric_ax, lr_ax) = plt.subplots(1, 3, figsize=(15, 4))
    if train:
        loss_ax.plot([r["step"] for r in train], [r.get("loss") for r in train], label="train", lw=1.2)
        lr_ax.plot([r["step"] for r in train], [r.get("learning_rate") for r in train], color="tab:gray")
    shown = [k for k in run.headline() if k != "mse"]  # the MSE is the regression's eval loss: left panel
    for i, name in enumerate(run.eval_sets):
        prefix = run.prefix(i)
        rows = [r for r in evals if prefix + "loss" in r]
        steps = [r["step"] for r in rows]
        if rows:
            loss_ax.plot(steps, [r[prefix + "loss"] for r in rows], marker="o",
                         label="eval" if name == "eval" else f"eval ({name})")
        for key in shown:
            values = [r.get(prefix + key) for r in rows]
            if rows and all(isinstance(v, (int, float)) for v in values):
                metric_ax.plot(steps, values, marker="o", label=f"{SHOWN.get(key, key)} ({name})")
    loss_ax.set(title="loss", xlabel="optimizer step")
    loss_ax.legend(fontsize=8)
    metric_ax.set(title=" · ".join(SHOWN.get(k, k) for k in shown) or "metrics", xlabel="optimizer step")
    if metric_ax.lines:
        metric_ax.legend(fontsize=8)
    else:
        metric_ax.text(0.5, 0.5, "no evaluation yet", ha="center", va="center", transform=metric_ax.transAxes)
    kept = (run.metrics or {}).get("best_global_step")
    if isinstance(kept, int) and not isinstance(kept, bool):  # --keep-best: the step whose weights were exported
        for ax in (loss_ax, metric_ax):
            ax.axvline(kept, color="tab:green", ls="--", lw=1, label=f"kept: step {kept}")
        metric_ax.legend(fontsize=8)
    lr_ax.set(title="learning rate", xlabel="optimizer step")
    lr_ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    for ax in (loss_ax, metric_ax, lr_ax):
        ax.grid(alpha=0.3)
    fig.suptitle(f"{run.task or 'run'}: learning curves", fontsize=11, y=1.03)
    _save(fig, path)


def _confusion(run: Run, i: int, matrix: Matrix, path: Path) -> None:
    plt = _pyplot()
    cm = matrix.counts
    k = len(matrix.names)  # at most MAX_DRAWN + 1: the figure's size is bounded
    side = max(4.5, 0.55 * k + 2.5)
    fig, ax = plt.subplots(figsize=(side + 1, side))
    rows = cm.sum(axis=1, keepdims=True)
    share = np.divide(cm, rows, out=np.zeros(cm.shape, dtype=np.float64), where=rows > 0)  # recall per true class
    image = ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="share of the true class")
    if k <= MAX_DRAWN + 1:
        for r in range(k):
            for c in range(k):
                ax.text(c, r, f"{cm[r, c]:,}", ha="center", va="center", fontsize=8,
                        color="white" if share[r, c] > 0.5 else "black")
    ticks = [_short(n) for n in matrix.names]
    ax.set_xticks(range(k), ticks, rotation=45, ha="right")
    ax.set_yticks(range(k), ticks)
    title = (f"{run.eval_sets[i]}: confusion matrix ({matrix.total:,} examples, accuracy "
             f"{matrix.correct / max(1, matrix.total):.4f})")
    if matrix.pooled:
        title += (f"\ntop {k - 1} of {matrix.labels:,} labels by support; the other {matrix.labels - k + 1:,} "
                  f"pooled as \"other\"")
    ax.set(xlabel="predicted", ylabel="true", title=title)
    _save(fig, path)


def _f1_bars(run: Run, i: int, per_label: dict, names: list[str], path: Path) -> None:
    plt = _pyplot()
    f1 = [float(per_label[n].get("f1", 0.0)) for n in names]
    support = [_support(per_label[n]) for n in names]
    fig, ax = plt.subplots(figsize=(8, max(3.0, 0.32 * len(names) + 1.2)))
    y = np.arange(len(names))
    ax.barh(y, f1, color="tab:blue")
    for yi, v in zip(y, f1, strict=True):
        ax.text(min(v + 0.01, 0.93), yi, f"{v:.3f}", va="center", fontsize=8)
    ax.set_yticks(y, [f"{_short(n)} (n={s:,})" for n, s in zip(names, support, strict=True)])
    ax.invert_yaxis()  # first label on top: as in the data, or the most support first when not all are drawn
    micro = (run.metrics or {}).get(run.prefix(i) + "micro_f1")
    title = f"{run.eval_sets[i]}: F1 per label" + (f" (micro-F1 {micro:.4f})" if isinstance(micro, float) else "")
    if len(names) < len(per_label):
        title += f"\ntop {len(names)} of {len(per_label):,} labels by support"
    ax.set(xlim=(0, 1), xlabel="F1", title=title)
    ax.grid(axis="x", alpha=0.3)
    _save(fig, path)


def _scatter(run: Run, i: int, truth: np.ndarray, predicted: np.ndarray, path: Path) -> None:
    from ftcli_trainer.metrics import regression

    plt = _pyplot()
    m = regression(predicted, truth)  # the trainer's own math, on the exported predictions
    fig, ax = plt.subplots(figsize=(5.5, 5.5))
    alpha = 0.6 if len(truth) <= 2000 else 0.25
    ax.scatter(truth, predicted, s=8, alpha=alpha, edgecolors="none")
    lo = float(min(truth.min(), predicted.min()))
    hi = float(max(truth.max(), predicted.max()))
    ax.plot([lo, hi], [lo, hi], color="tab:gray", lw=1, ls="--", label="predicted = true")
    ax.set(xlabel="true", ylabel="predicted",
           title=f"{run.eval_sets[i]}: Pearson {m['pearson']:.4f} · Spearman {m['spearmanr']:.4f} · "
                 f"MSE {m['mse']:.4f}")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    _save(fig, path)


# -- the Markdown -----------------------------------------------------------------------------------------------


def fmt(value: object) -> str:
    """How report.md writes a number: whole numbers as they are, others to 4 decimals (3 significant digits
    below 0.001, where 4 decimals would say 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    if isinstance(value, int) or (float(value).is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    return f"{value:.3g}" if abs(value) < 1e-3 else f"{value:.4f}"


def _one_line(text: str) -> str:
    """Line breaks of every kind as spaces: CommonMark ends a line at \\n, \\r\\n or a lone \\r."""
    return re.sub(r"\r\n|\r|\n", " ", text)


def _cell(text: object) -> str:
    """A label's name in a Markdown table or list: a "|" would end the cell, a line break the row."""
    return _one_line(str(text).replace("\\", "\\\\").replace("|", "\\|"))


def kept_line(run: Run) -> str | None:
    """With --keep-best, which evaluation's weights the model is (the metrics above are theirs), what the last step
    had, and where an early stop ended the run; None for a run that exported its last step."""
    from ftcli_trainer.metrics import SHOWN

    m = run.metrics or {}
    step, key = m.get("best_global_step"), m.get("metric_for_best_model")
    if not isinstance(step, int) or isinstance(step, bool) or not isinstance(key, str):
        return None
    name = key.removeprefix("eval_")
    line = (f"The model is the weights of step {step}" + (f" (epoch {m['best_epoch']:.2f})" if isinstance(
        m.get("best_epoch"), (int, float)) else "") + f", the evaluation with the best {SHOWN.get(name, name)} "
            "(--keep-best): the metrics above are its own.")
    last = m.get("last_eval")
    if isinstance(last, dict) and isinstance(last.get("global_step"), int) and last["global_step"] != step:
        shown = [k for k in (*run.headline(), "loss") if isinstance(last.get(f"eval_{k}"), (int, float))]
        line += (f" The last step, {last['global_step']}, had " +
                 " · ".join(f"{SHOWN.get(k, k)} {fmt(last[f'eval_{k}'])}" for k in dict.fromkeys(shown)) + ".")
    stopped = m.get("early_stopping")
    if isinstance(stopped, dict) and stopped.get("stopped"):
        n = stopped.get("evaluations_without_improvement")
        line += (f" Stopped early (--early-stopping {stopped.get('patience')}) at step {m.get('global_step')}, after "
                 f"{n} evaluation{'' if n == 1 else 's'} without improvement.")
    return line


def markdown(run: Run, pictures: list[str], notes: dict[str, str] | None = None) -> str:
    """report.md; `notes`: for a picture that leaves labels out, what it draws (the tables have every label)."""
    m = run.metrics or {}
    rc = run.run_config or {}
    lines = [f"# ftcli report: {run.source}", ""]
    facts = [f"task `{rc['task']}`" if rc.get("task") else None, f"model `{rc['model']}`" if rc.get("model") else None,
             f"{run.kind.replace('_', '-')}",
             f"device {m['device']} ({m.get('precision', '?')})" if m.get("device") else None]
    lines += [" · ".join(f for f in facts if f), ""]
    if not run.metrics:
        lines += ["The run has not finished: no final metrics yet (the curves are what it has logged).", ""]
    if run.curve_left_out:
        lines += [_one_line(run.curve_left_out[:1].upper() + run.curve_left_out[1:]) + ".", ""]
    per_set = [set_metrics(run, i) for i in range(len(run.eval_sets))]
    if run.threshold is not None:
        # the threshold a multi-label run's F1s are at, beside them, as `ftcli evaluate` (and its --report) shows it:
        # metrics.json does not hold it, and a run at --threshold 0.3 read as one at the usual 0.5
        for found in filter(None, per_set):
            found.setdefault("threshold", run.threshold)
    keys = [k for k in run.headline() if any(k in s for s in per_set)]
    keys += sorted({k for s in per_set for k in s} - set(keys) - {"loss"}) + (
        ["loss"] if any("loss" in s for s in per_set) else [])
    if keys:
        lines += ["## Metrics", "", "| metric | " + " | ".join(run.eval_sets) + " |",
                  "|---|" + "---:|" * len(run.eval_sets)]
        lines += [f"| {k} | " + " | ".join(fmt(s[k]) if k in s else "" for s in per_set) + " |" for k in keys]
        lines.append("")
    if kept := kept_line(run):
        lines += [kept, ""]
    training = [(label, m[key]) for key, label in TRAINING_ROWS if isinstance(m.get(key), (int, float))]
    if training:
        lines += ["## Training", "", "| | |", "|---|---:|"] + [f"| {label} | {fmt(v)} |" for label, v in training]
        lines.append("")
    for i, name in enumerate(run.eval_sets):
        scores = per_label(run, i)
        if scores:  # every label, however many (one line each)
            lines += [f"## Per label ({name})", "", "| label | precision | recall | F1 | support |",
                      "|---|---:|---:|---:|---:|"]
            lines += [f"| {_cell(label)} | {fmt(v.get('precision'))} | {fmt(v.get('recall'))} | {fmt(v.get('f1'))} | "
                      f"{fmt(v.get('support'))} |" for label, v in scores.items() if isinstance(v, dict)]
            lines.append("")
    if pictures:
        lines += ["## Pictures", ""]
        for p in pictures:
            lines.append(f"![{p.removesuffix('.png').replace('_', ' ')}]({p})")
            if note := (notes or {}).get(p):
                lines += ["", note, ""]
        lines.append("")
    return "\n".join(lines)


# -- the whole report -------------------------------------------------------------------------------------------


class ReportInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, SIGHUP: `ftcli report` makes them one) while a report was drawn or moved in; `said`: what
    its folder holds now."""

    def __init__(self, said: str):
        super().__init__(said)
        self.said = said


def nothing_written(out: Path, existed: bool) -> str:
    """What an interrupted report leaves in `out` when none of its files had been moved in (`existed`: `out` was a
    folder already, an earlier report's or an empty one): a command that stops before drawing says the same."""
    return f"nothing was written to {out}" + (" (its files are as they were)" if existed else "")


def write_report(run: Run, out: Path, say: Callable[[str], None] = lambda message: None, flag: str = "--out"
                 ) -> list[Path]:
    """Draw every picture the run allows and the Markdown into `out` (new, empty, or an earlier report's);
    return the files written, the Markdown first. `say` hears what a picture leaves out; `flag`, the option that
    named `out`, is what a refusal's hint tells the user to change (earlier_report).

    Everything is drawn in a staging folder first, beside a new `out`, inside one that exists (a dead writer's is
    removed by the next report), so a crash or a kill midway leaves `out` as it was: never a half-written folder
    the next report refuses.

    An interruption anywhere in it (Ctrl-C; SIGTERM, SIGHUP where the command makes them one) is ReportInterrupted,
    saying what `out` holds: before the drawing (the plan, the checks of `out`) and after the move in (the notes said
    then) too, where it was a bare KeyboardInterrupt, which `ftcli report` took for "nothing was written" of a report
    that was whole, and `ftcli evaluate --report` said as a plain "interrupted"."""
    existed = out.is_dir()  # (nothing below creates it before the move in)
    staged: Path | None = None
    names: list[str] = []
    placing = placed = False
    try:
        plan = _plan(run)
        names = ["report.md", *(p.name for p in plan)]
        clear_staging_inside(out, INSIDE_STAGING)  # a folder that exists is staged in (staging_for)
        earlier = earlier_report(out, flag)
        _check_names(out, names, earlier, flag)
        notes = {}
        for p in plan:
            if p.note:
                drawn = ", ".join("`" + _one_line(n.replace("`", "'")) + "`" for n in p.drawn)
                notes[p.name] = f"{p.note}: {drawn}." + (f" Every label is in \"{p.table}\" above." if p.table
                                                         else "")
        staged = staging_for(out, INSIDE_STAGING)
        missing: dict[str, str] = {}  # a picture's name -> the characters its font could not draw
        fonts: set[str] = set()
        with names_on_failure(out):  # a full disk names no file: "No space left on device" alone said not which
            for p in plan:
                if chars := _drawn_noting_missing_glyphs(p.draw, staged / p.name, fonts):
                    missing[p.name] = chars
            (staged / "report.md").write_text(markdown(run, [p.name for p in plan], notes), encoding="utf-8")
            _write_manifest(staged / MANIFEST, run.source, names)
            placing = True
            _publish(staged, out, names, earlier, run.source)
        placed = True
        for p in plan:
            if p.note:
                say(f"{p.note}; report.md lists them")
        if missing:
            chars = "".join(sorted(set("".join(missing.values()))))
            say(f"{', '.join(missing)} draw{'s' if len(missing) == 1 else ''} {_shown_chars(chars)} as empty "
                f"boxes: matplotlib's font ({', '.join(sorted(fonts))}) has no such characters; report.md has the "
                "names as they are")
    except KeyboardInterrupt:
        # The staging folder goes (below); what `out` holds depends on how far the move in got.
        if placed or (placing and staged is not None and not (
                staged.exists() and any((staged / n).exists() for n in (*names, MANIFEST)))):
            raise ReportInterrupted(f"the report had arrived: {out} holds it, complete") from None
        if placing and existed:
            raise ReportInterrupted(f"{out} holds part of the report's files; the same command again replaces "
                                    "them") from None
        raise ReportInterrupted(nothing_written(out, existed)) from None
    finally:
        if staged is not None and staged.exists():
            shutil.rmtree(staged, ignore_errors=True)
    return [out / n for n in names]


def open_files(paths: list[Path]) -> str | None:
    """Show the pictures with this machine's viewer; return why not when there is none (not an error)."""
    if sys.platform == "darwin":
        opener = shutil.which("open")
    elif sys.platform == "win32":  # pragma: no cover - no Windows in CI
        for p in paths:
            os.startfile(p)  # noqa: S606
        return None
    else:
        opener = shutil.which("xdg-open")
        if opener and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            return "no display here (DISPLAY is not set)"
    if not opener:
        return "no viewer found (xdg-open or open)"
    for p in paths:
        subprocess.Popen([opener, str(p)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    return None
