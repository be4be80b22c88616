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


def test_macro_f1_leaves_out_a_label_absent_from_the_eval_set_and_its_predictions_as_scikit_learn():
    # A rare label that missed the held-out rows counted as F1 0: three labels, two predicted perfectly, said 0.667.
    labels = np.array([0, 1, 0, 1, 3, 0])
    logits = np.eye(4)[[0, 1, 0, 1, 3, 2]] * 3.0  # label 2: absent from the truth but predicted once (counts, 0)
    m = metrics.single_label(logits, labels, list("abcd"))
    assert m["macro_f1"] == pytest.approx(sk.f1_score(labels, logits.argmax(1), average="macro"))
    m = metrics.single_label(np.eye(3)[[0, 1, 0, 1]], np.array([0, 1, 0, 1]), ["a", "b", "rare"])
    assert m["macro_f1"] == 1.0 and m["per_label"]["rare"]["support"] == 0


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


@pytest.mark.parametrize("k,seed", [(2, 0), (3, 1), (5, 2)])
def test_matthews_correlation_matches_scikit_learn(k, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, 400)
    logits = rng.normal(size=(400, k)) + np.eye(k)[labels] * 0.7
    m = metrics.single_label(logits, labels, [str(i) for i in range(k)], extra=("matthews_correlation",))
    assert m["matthews_correlation"] == pytest.approx(sk.matthews_corrcoef(labels, logits.argmax(1)), abs=1e-12)


def test_matthews_correlation_is_zero_where_undefined_as_scikit_learn_says():
    labels = np.array([0, 1, 0, 1])
    always_one = np.array([[0.0, 1.0]] * 4)  # one predicted class: the correlation has no denominator
    m = metrics.single_label(always_one, labels, ["a", "b"], extra=("matthews_correlation",))
    assert m["matthews_correlation"] == 0.0 == sk.matthews_corrcoef(labels, np.ones(4, int))
    perfect = metrics.single_label(np.eye(2)[labels], labels, ["a", "b"], extra=("matthews_correlation",))
    assert perfect["matthews_correlation"] == 1.0


def test_binary_f1_is_the_positive_class_as_glue_reports_it():
    rng = np.random.default_rng(3)
    labels = (rng.random(300) < 0.3).astype(int)
    logits = rng.normal(size=(300, 2)) + np.eye(2)[labels] * 0.8
    m = metrics.single_label(logits, labels, ["not_equivalent", "equivalent"], extra=("f1",))
    assert m["f1"] == pytest.approx(sk.f1_score(labels, logits.argmax(1)))
    assert m["f1"] == m["per_label"]["equivalent"]["f1"]
    assert "matthews_correlation" not in m  # only what the task asks for
    with pytest.raises(ValueError):
        metrics.single_label(rng.normal(size=(5, 3)), np.arange(5) % 3, list("abc"), extra=("f1",))


@pytest.mark.parametrize("ties", [False, True])
def test_pearson_and_spearman_match_scipy(ties):
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(4)
    truth = rng.uniform(0, 5, 500)
    if ties:  # STS-B's gold scores repeat (0.0, 2.5, 5.0, ...); predictions can repeat too
        truth = np.round(truth * 2) / 2
    predicted = truth + rng.normal(scale=1.2, size=500)
    if ties:
        predicted = np.round(predicted, 1)
    m = metrics.regression(predicted.astype(np.float32), truth.astype(np.float32))
    # the trainer's outputs are float32; it correlates them in float64 (scipy keeps float32 input in float32)
    p32, t32 = (x.astype(np.float32).astype(np.float64) for x in (predicted, truth))
    assert m["pearson"] == pytest.approx(stats.pearsonr(p32, t32)[0], abs=1e-9)
    assert m["spearmanr"] == pytest.approx(stats.spearmanr(p32, t32)[0], abs=1e-9)
    assert m["mse"] == pytest.approx(sk.mean_squared_error(t32, p32), rel=1e-9)
    np.testing.assert_array_equal(metrics._ranks(p32), stats.rankdata(p32))


def test_correlation_of_a_constant_prediction_is_undefined_nan_as_scipy_says():
    # it read 0.0, a number that --keep-best ranked above a real negative correlation
    m = metrics.regression(np.full(10, 2.5), np.arange(10.0))
    assert np.isnan(m["pearson"]) and np.isnan(m["spearmanr"])
    assert m["mse"] == pytest.approx(np.mean((np.arange(10) - 2.5) ** 2))
    assert np.isnan(metrics.regression(np.arange(10.0), np.full(10, 1.0))["pearson"])  # constant targets too
    stats = pytest.importorskip("scipy.stats")
    with pytest.warns(stats.ConstantInputWarning):
        assert np.isnan(stats.pearsonr(np.full(10, 2.5), np.arange(10.0))[0])


def test_headline_metrics_put_glues_first():
    assert metrics.headline((), False, False) == ("accuracy", "macro_f1")
    assert metrics.headline(("matthews_correlation",), False, False) == ("matthews_correlation", "accuracy", "macro_f1")
    assert metrics.headline(("f1", "accuracy"), False, False) == ("f1", "accuracy", "macro_f1")
    assert metrics.headline(("pearson", "spearmanr"), False, True) == ("pearson", "spearmanr", "mse")
    assert metrics.headline((), True, False) == ("micro_f1", "macro_f1")
