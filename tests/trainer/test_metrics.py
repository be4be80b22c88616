import numpy as np
import pytest

from ftcli_trainer import metrics

sk = pytest.importorskip("sklearn.metrics")


def test_single_label_matches_scikit_learn():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 200)
    logits = rng.normal(size=(200, 3)) + np.eye(3)[labels] * 1.2
    m = metrics.single_label(logits, labels, ["a", "b", "c"])
    pred = logits.argmax(1)
    assert m["accuracy"] == pytest.approx(sk.accuracy_score(labels, pred))
    assert m["macro_f1"] == pytest.approx(sk.f1_score(labels, pred, average="macro"))
    assert m["confusion_matrix"] == sk.confusion_matrix(labels, pred).tolist()
    p, r, f, s = sk.precision_recall_fscore_support(labels, pred)
    assert [m["per_label"][n]["recall"] for n in "abc"] == pytest.approx(r)
    assert [m["per_label"][n]["support"] for n in "abc"] == list(s)


def test_multi_label_matches_scikit_learn():
    rng = np.random.default_rng(1)
    labels = (rng.random((300, 4)) < 0.3).astype(np.float32)
    logits = rng.normal(size=(300, 4)) + (labels * 2 - 1) * 0.8
    m = metrics.multi_label(logits, labels, list("wxyz"), threshold=0.5)
    pred = (logits >= 0).astype(int)
    assert m["micro_f1"] == pytest.approx(sk.f1_score(labels, pred, average="micro"))
    assert m["macro_f1"] == pytest.approx(sk.f1_score(labels, pred, average="macro", zero_division=0))
    assert m["subset_accuracy"] == pytest.approx(sk.accuracy_score(labels, pred))
    assert m["per_label"]["x"]["f1"] == pytest.approx(sk.f1_score(labels[:, 1], pred[:, 1]))


def test_prefixes_follow_the_hf_trainer():
    assert metrics.prefixed({"accuracy": 1.0}, "matched", primary=True) == {"eval_accuracy": 1.0}
    assert metrics.prefixed({"accuracy": 1.0}, "mismatched", primary=False) == {"eval_mismatched_accuracy": 1.0}
