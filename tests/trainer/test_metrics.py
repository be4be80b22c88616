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


def test_multi_label_scores_at_a_threshold_other_than_one_half_by_the_sigmoid():
    # Found by mutation testing: 1 / (1 - e^-x) in place of the sigmoid passed every test, as all of them scored at
    # 0.5, where only the logit's sign counts. At --threshold 0.3 a logit of -0.5 (sigmoid 0.378) is a positive
    # prediction, one of -1.0 (0.269) is not: the cut is at ln(0.3 / 0.7) = -0.847.
    logits = np.array([[-0.5, 2.0], [-1.0, -0.5], [-0.8, -3.0], [1.0, -0.9]])
    truth = np.array([[1, 1], [1, 0], [0, 0], [1, 1]], dtype=np.float32)
    m = metrics.multi_label(logits, truth, ["a", "b"], threshold=0.3)
    # predicted: [1, 1], [0, 1], [1, 0], [1, 0] -> a: tp 2 fp 1 fn 1; b: tp 1 fp 1 fn 1; micro: tp 3 fp 2 fn 2
    assert m["per_label"]["a"] == {"precision": 2 / 3, "recall": 2 / 3, "f1": pytest.approx(2 / 3), "support": 3}
    assert m["per_label"]["b"]["f1"] == pytest.approx(0.5)
    assert (m["micro_precision"], m["micro_recall"]) == (pytest.approx(0.6), pytest.approx(0.6))
    assert m["micro_f1"] == pytest.approx(0.6) and m["macro_f1"] == pytest.approx((2 / 3 + 0.5) / 2)
    assert m["subset_accuracy"] == 0.25  # only the first row is right on both labels
    pred = logits >= np.log(0.3 / 0.7)
    assert m["micro_f1"] == pytest.approx(sk.f1_score(truth, pred, average="micro"))


def test_the_loss_is_the_mean_per_example_loss_the_model_trains_on():
    # Found by mutation testing: eval_loss's sums in place of means, or a sign flipped, passed every test (the loss
    # was checked only against itself, between runs). Hand-worked: logits (0, ln 3) are the softmax (1/4, 3/4) and
    # the sigmoids (1/2, 3/4).
    logits = np.array([[0.0, np.log(3)], [0.0, np.log(3)], [np.log(3), 0.0]])
    labels = np.array([1, 0, 0])
    # cross entropy: -ln(3/4), -ln(1/4), -ln(3/4), averaged over the examples
    expected = -(2 * np.log(0.75) + np.log(0.25)) / 3
    m = metrics.of_logits(logits, labels, ["a", "b"], is_multi_label=False, is_regression=False, threshold=0.5)
    assert m["loss"] == pytest.approx(expected)
    # binary cross entropy per label, averaged over examples and labels: row 1 (1, 0): -ln(1/2) - ln(1 - 3/4)
    multi = np.array([[1, 0], [0, 1]], dtype=np.float32)
    expected = (np.log(2) + np.log(4) + np.log(2) + -np.log(0.75)) / 4
    m = metrics.of_logits(logits[:2], multi, ["a", "b"], is_multi_label=True, is_regression=False, threshold=0.5)
    assert m["loss"] == pytest.approx(expected)
    # regression: the mean squared error of the one output
    m = metrics.of_logits(np.array([[1.0], [3.0], [2.5]]), np.array([2.0, 2.0, 0.5], dtype=np.float32), ["score"],
                          is_multi_label=False, is_regression=True, threshold=0.5)
    assert m["loss"] == pytest.approx((1 + 1 + 4) / 3) == m["mse"]


@pytest.mark.parametrize("task_metrics,multi,regression,expected", [
    ((), False, False, ("accuracy", "macro_f1", "loss")),
    (("matthews_correlation",), False, False, ("matthews_correlation", "accuracy", "macro_f1", "loss")),
    (("f1", "accuracy"), False, False, ("f1", "accuracy", "macro_f1", "loss")),
    ((), True, False, ("micro_f1", "macro_f1", "micro_precision", "micro_recall", "subset_accuracy", "loss")),
    (("pearson", "spearmanr"), False, True, ("pearson", "spearmanr", "mse", "loss")),
])
def test_scalar_names_are_every_number_an_evaluation_reports(task_metrics, multi, regression, expected):
    # Found by mutation testing: the multi-label list (what `ftcli evaluate` shows and `ftcli tune --metric` takes)
    # could be None and no test failed. Checked against what an evaluation of that kind writes, every float in it.
    assert metrics.scalar_names(task_metrics, multi, regression) == expected
    labels = np.array([0, 1, 1, 0])
    logits = np.eye(2)[[0, 1, 0, 0]]
    if multi:
        labels, logits = np.eye(2, dtype=np.float32)[labels], logits * 4 - 2
    elif regression:
        labels, logits = np.array([1.0, 2.0, 3.0, 5.0]), np.array([[1.5], [2.0], [2.5], [4.0]])
    m = metrics.of_logits(logits, labels, ["a", "b"], task_metrics, is_multi_label=multi, is_regression=regression,
                          threshold=0.5)
    assert sorted(k for k, v in m.items() if isinstance(v, float)) == sorted(expected)


def test_keep_best_judges_by_the_headlines_first_metric():
    assert metrics.best_metric((), False, False) == ("eval_accuracy", True)
    assert metrics.best_metric(("matthews_correlation",), False, False) == ("eval_matthews_correlation", True)
    assert metrics.best_metric((), True, False) == ("eval_micro_f1", True)
    assert metrics.best_metric((), False, True) == ("eval_pearson", True)


def test_a_perfect_correlation_is_1_not_a_rounding_error_past_it():
    # Found by mutation testing: the clip to [-1, 1] could be loosened and no test failed. Unclipped, these
    # predictions (exactly 3 x the targets) correlate 1.0000000000000002 in float64, a score past the maximum in
    # metrics.json, and the opposite ones -1.0000000000000002.
    truth = np.array([0.8, 0.3, -1.3, 0.9, 0.4, -0.5, 0.6, 0.4, 0.3, 0.0])
    assert metrics.regression(3 * truth, truth)["pearson"] == 1.0
    assert metrics.regression(-3 * truth, truth)["pearson"] == -1.0
