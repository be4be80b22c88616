"""Classification and regression metrics with numpy, keyed like the Hugging Face Trainer's (`eval_accuracy`,
...) and, for GLUE's own metrics, like `run_glue.py` (`eval_matthews_correlation`, `eval_f1`, `eval_pearson`,
`eval_spearmanr`). No scipy or scikit-learn in the job: the tests cross-check these against both."""

from __future__ import annotations

import numpy as np


def _prf(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1), 0.0)
        recall = np.where(tp + fn > 0, tp / np.maximum(tp + fn, 1), 0.0)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
    return precision, recall, f1


def _per_label(names: list[str], p: np.ndarray, r: np.ndarray, f: np.ndarray,
               support: np.ndarray) -> dict[str, dict[str, float]]:
    return {n: {"precision": float(p[i]), "recall": float(r[i]), "f1": float(f[i]), "support": int(support[i])}
            for i, n in enumerate(names)}


def confusion_matrix(labels: np.ndarray, predicted: np.ndarray, k: int) -> np.ndarray:
    """Counts, rows true and columns predicted (also what `ftcli report` draws from eval_predictions.npz)."""
    return np.bincount(labels.astype(np.int64) * k + predicted, minlength=k * k).reshape(k, k)


def matthews(cm: np.ndarray) -> float:
    """Matthews correlation of a confusion matrix (rows true, columns predicted), K classes (Gorodkin's R_K;
    for two classes the familiar (TP*TN - FP*FN) / sqrt(...)). 0 when a side has a single class, as
    scikit-learn returns (the correlation is undefined there, and NaN is not JSON)."""
    cm = cm.astype(np.float64)
    true, pred, s = cm.sum(axis=1), cm.sum(axis=0), cm.sum()
    cov_tp = np.trace(cm) * s - true @ pred
    cov_pp = s * s - pred @ pred
    cov_tt = s * s - true @ true
    denominator = np.sqrt(cov_tt * cov_pp)
    return float(cov_tp / denominator) if denominator > 0 else 0.0


def single_label(logits: np.ndarray, labels: np.ndarray, names: list[str], extra: tuple[str, ...] = ()) -> dict:
    """Accuracy, macro-F1, per-label scores and the confusion matrix; `extra` adds GLUE's metrics by name:
    `matthews_correlation`, and `f1` (binary F1 of id 1, the positive class of MRPC and QQP)."""
    k = len(names)
    pred = logits.argmax(axis=-1)
    cm = confusion_matrix(labels, pred, k)
    tp = np.diag(cm).astype(np.float64)
    fp = cm.sum(axis=0) - tp
    fn = cm.sum(axis=1) - tp
    p, r, f = _prf(tp, fp, fn)
    support = cm.sum(axis=1)
    # Macro-F1 over the labels that occur in the eval set or in its predictions, as scikit-learn's f1_score
    # (average="macro") and so the HF Trainer's usual compute_metrics count it: a label with neither has no F1,
    # and counting it as 0 held a 3-label run whose rare label missed the held-out rows to at most 0.667.
    seen = (support + cm.sum(axis=0)) > 0
    out = {
        "accuracy": float((pred == labels).mean()),
        "macro_f1": float(f[seen].mean()) if seen.any() else 0.0,
        "per_label": _per_label(names, p, r, f, support),
        "confusion_matrix": cm.tolist(),
    }
    if "matthews_correlation" in extra:
        out["matthews_correlation"] = matthews(cm)
    if "f1" in extra:
        if k != 2:
            raise ValueError(f"binary F1 needs 2 labels, not {k}")
        out["f1"] = float(f[1])
    return out


def _ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties given the mean of the ranks they span (scipy.stats.rankdata's "average")."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    new = np.r_[True, xs[1:] != xs[:-1]]
    starts = np.flatnonzero(new)
    ends = np.r_[starts[1:], len(x)]
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = ((starts + ends + 1) / 2)[np.cumsum(new) - 1]
    return ranks


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation; NaN when either side is constant, where it is undefined (scipy.stats.pearsonr's NaN, and
    so run_glue's for STS-B). It read 0 there, a number: a diverged model predicting one value for every row was kept
    by --keep-best over an earlier one with a real, negative correlation. (A NaN is written as JSON's NaN, as a NaN
    loss is; ftcli report, jobs and Python's json read it.)"""
    a = a.astype(np.float64) - a.mean(dtype=np.float64)
    b = b.astype(np.float64) - b.mean(dtype=np.float64)
    denominator = np.sqrt((a @ a) * (b @ b))
    return float(np.clip((a @ b) / denominator, -1.0, 1.0)) if denominator > 0 else float("nan")


def regression(predicted: np.ndarray, targets: np.ndarray) -> dict:
    """GLUE's STS-B metrics: Pearson and Spearman correlation (Spearman = Pearson of the ranks), and the MSE."""
    predicted = predicted.reshape(-1).astype(np.float64)
    targets = targets.reshape(-1).astype(np.float64)
    return {
        "pearson": pearson(predicted, targets),
        "spearmanr": pearson(_ranks(predicted), _ranks(targets)),
        "mse": float(np.mean((predicted - targets) ** 2)),
    }


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """A multi-label model's probabilities, in float64: the ones its threshold is applied to, here and in ftcli
    predict (which applied it to float32 ones, and could keep a label this evaluation left out)."""
    return 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))


def softmax(logits: np.ndarray) -> np.ndarray:
    """A single-label model's probabilities (rows x labels), in float64: the scores ftcli predict prints and the
    export's eval_predictions.npz holds."""
    x = logits.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def multi_label(logits: np.ndarray, labels: np.ndarray, names: list[str], threshold: float) -> dict:
    pred = sigmoid(logits) >= threshold
    truth = labels >= 0.5
    tp = (pred & truth).sum(axis=0).astype(np.float64)
    fp = (pred & ~truth).sum(axis=0).astype(np.float64)
    fn = (~pred & truth).sum(axis=0).astype(np.float64)
    p, r, f = _prf(tp, fp, fn)
    mp, mr, mf = _prf(tp.sum(keepdims=True), fp.sum(keepdims=True), fn.sum(keepdims=True))
    return {
        "micro_f1": float(mf[0]),
        "macro_f1": float(f.mean()),
        "micro_precision": float(mp[0]),
        "micro_recall": float(mr[0]),
        "subset_accuracy": float((pred == truth).all(axis=1).mean()),
        "per_label": _per_label(names, p, r, f, truth.sum(axis=0)),
    }


def eval_loss(logits: np.ndarray, labels: np.ndarray, multi_label: bool, regression: bool = False) -> float:
    x = logits.astype(np.float64)
    if regression:
        return float(np.mean((x[:, 0] - labels) ** 2))
    if multi_label:
        # mean over labels of log(1 + e^-x) for positives, log(1 + e^x) for negatives
        return float(np.mean(np.logaddexp(0, x) - x * labels))
    lse = np.logaddexp.reduce(x, axis=1)
    return float(np.mean(lse - x[np.arange(len(x)), labels]))


def of_logits(logits: np.ndarray, labels: np.ndarray, names: list[str], task_metrics: tuple[str, ...] = (), *,
              is_multi_label: bool, is_regression: bool, threshold: float) -> dict:
    """An evaluation's metrics from the model's outputs (rows x labels) and the truth: a regression's, a multi-label
    model's at `threshold`, or a single-label model's with the task's own (`task_metrics`); and the loss. The
    trainer's evaluation and `ftcli evaluate` both."""
    if is_regression:
        m = regression(logits[:, 0], labels)
    elif is_multi_label:
        m = multi_label(logits, labels, names, threshold)
    else:
        m = single_label(logits, labels, names, task_metrics)
    m["loss"] = eval_loss(logits, labels, is_multi_label, is_regression)
    return m


def prefixed(metrics: dict, eval_name: str, primary: bool) -> dict:
    """`eval_accuracy` for the primary eval set, `eval_<name>_accuracy` for the others."""
    prefix = "eval_" if primary else f"eval_{eval_name}_"
    return {prefix + k: v for k, v in metrics.items()}


# How each metric is written in log lines; the keys are metrics.json's (without `eval_`).
SHOWN = {"accuracy": "accuracy", "macro_f1": "macro-F1", "micro_f1": "micro-F1", "f1": "F1",
         "matthews_correlation": "Matthews", "pearson": "Pearson", "spearmanr": "Spearman", "mse": "MSE",
         "loss": "loss"}


def scalar_names(task_metrics: tuple[str, ...], multi_label: bool, regression: bool) -> tuple[str, ...]:
    """Every single number an evaluation reports (metrics.json's keys without `eval_`), for a metric to tune."""
    if regression:
        return ("pearson", "spearmanr", "mse", "loss")
    if multi_label:
        return ("micro_f1", "macro_f1", "micro_precision", "micro_recall", "subset_accuracy", "loss")
    return (*dict.fromkeys((*task_metrics, "accuracy", "macro_f1")), "loss")


def headline(task_metrics: tuple[str, ...], multi_label: bool, regression: bool) -> tuple[str, ...]:
    """The metrics a log line shows and a report plots, most important first: the task's own (GLUE's), then
    what every run of its kind has."""
    if regression:
        return tuple(dict.fromkeys((*task_metrics, "pearson", "spearmanr", "mse")))
    if multi_label:
        return ("micro_f1", "macro_f1")
    return tuple(dict.fromkeys((*task_metrics, "accuracy", "macro_f1")))


LOWER_IS_BETTER = ("mse", "loss")


def best_metric(task_metrics: tuple[str, ...], multi_label: bool, regression: bool) -> tuple[str, bool]:
    """(metrics.json key, greater is better) of the metric that --keep-best and --early-stopping judge evaluations by:
    the headline's first (the task's own, as `ftcli tune` tunes by default), on the primary eval set."""
    key = headline(task_metrics, multi_label, regression)[0]
    return f"eval_{key}", key not in LOWER_IS_BETTER
