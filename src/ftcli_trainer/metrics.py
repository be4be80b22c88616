"""Classification metrics with numpy, keyed like the Hugging Face Trainer's (`eval_accuracy`, ...)."""

from __future__ import annotations

import numpy as np


def _prf(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1), 0.0)
        recall = np.where(tp + fn > 0, tp / np.maximum(tp + fn, 1), 0.0)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
    return precision, recall, f1


def _per_label(names: list[str], p, r, f, support) -> dict[str, dict[str, float]]:
    return {n: {"precision": float(p[i]), "recall": float(r[i]), "f1": float(f[i]), "support": int(support[i])}
            for i, n in enumerate(names)}


def single_label(logits: np.ndarray, labels: np.ndarray, names: list[str]) -> dict:
    k = len(names)
    pred = logits.argmax(axis=-1)
    cm = np.bincount(labels * k + pred, minlength=k * k).reshape(k, k)  # rows: true, cols: predicted
    tp = np.diag(cm).astype(np.float64)
    fp = cm.sum(axis=0) - tp
    fn = cm.sum(axis=1) - tp
    p, r, f = _prf(tp, fp, fn)
    support = cm.sum(axis=1)
    return {
        "accuracy": float((pred == labels).mean()),
        "macro_f1": float(f.mean()),
        "per_label": _per_label(names, p, r, f, support),
        "confusion_matrix": cm.tolist(),
    }


def multi_label(logits: np.ndarray, labels: np.ndarray, names: list[str], threshold: float) -> dict:
    probs = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    pred = probs >= threshold
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


def prefixed(metrics: dict, eval_name: str, primary: bool) -> dict:
    """`eval_accuracy` for the primary eval set, `eval_<name>_accuracy` for the others."""
    prefix = "eval_" if primary else f"eval_{eval_name}_"
    return {prefix + k: v for k, v in metrics.items()}
