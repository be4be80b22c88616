"""The GLUE family: the registry says what the Hub's nyu-mll/glue holds, the launcher validates every task without
torch, and each task trains offline from local files in its GLUE column layout with GLUE's metrics."""

import csv
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ftcli_trainer.config import ConfigError, parse_args, resolve
from ftcli_trainer.tasks import GLUE_TASKS, TASKS
from tests.conftest import FILLER, NEGATIVE, POSITIVE, shared_data, write_csv

# From the dataset card of huggingface.co/datasets/nyu-mll/glue (dataset_info: features, class_label names) and
# huggingface/datasets' datasets/glue/glue.py: (text column, pair column, labels in id order, eval splits).
CARD = {
    "cola": ("sentence", None, ("unacceptable", "acceptable"), {"validation": "validation"}),
    "sst2": ("sentence", None, ("negative", "positive"), {"validation": "validation"}),
    "mrpc": ("sentence1", "sentence2", ("not_equivalent", "equivalent"), {"validation": "validation"}),
    "qqp": ("question1", "question2", ("not_duplicate", "duplicate"), {"validation": "validation"}),
    "stsb": ("sentence1", "sentence2", (), {"validation": "validation"}),
    "mnli": ("premise", "hypothesis", ("entailment", "neutral", "contradiction"),
             {"matched": "validation_matched", "mismatched": "validation_mismatched"}),
    "qnli": ("question", "sentence", ("entailment", "not_entailment"), {"validation": "validation"}),
    "rte": ("sentence1", "sentence2", ("entailment", "not_entailment"), {"validation": "validation"}),
    "wnli": ("sentence1", "sentence2", ("not_entailment", "entailment"), {"validation": "validation"}),
}
GLUE_METRICS = {"cola": {"matthews_correlation"}, "mrpc": {"f1", "accuracy"}, "qqp": {"f1", "accuracy"},
                "stsb": {"pearson", "spearmanr"}}


def test_the_nine_glue_tasks_are_the_hubs():
    assert set(GLUE_TASKS) == set(CARD)
    for name, (text, pair, labels, evals) in CARD.items():
        t = TASKS[name]
        assert (t.hf_dataset, t.hf_config, t.train_split) == ("nyu-mll/glue", name, "train"), name
        assert (t.text_column, t.text_pair_column, t.label_column, t.labels) == (text, pair, "label", labels), name
        assert t.eval_splits == evals, name
        assert t.regression == (name == "stsb"), name
        assert set(GLUE_METRICS.get(name, {"accuracy"})) == set(t.metrics), name


def test_the_registry_is_plain_data_the_launcher_validates_without_torch():
    code = ("import sys\nfrom ftcli_trainer.config import resolve\n"
            f"for t in {GLUE_TASKS!r}:\n    resolve({{'task': t}})\n"
            "bad = [m for m in ('torch', 'transformers', 'datasets') if m in sys.modules]\nassert not bad, bad\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with pytest.raises(ConfigError) as e:
        resolve({"task": "glue-sst2"})
    assert "cola" in str(e.value) and "wnli" in str(e.value)  # the choices it lists


def test_stsb_is_regression_by_itself_and_regression_is_refused_on_classes():
    assert parse_args(["--task", "stsb"]).regression
    assert not parse_args(["--task", "rte"]).regression
    with pytest.raises(ConfigError) as e:
        parse_args(["--task", "mrpc", "--regression"])
    assert e.value.problems == ["--regression is for csv/jsonl data; --task mrpc has classes (not_equivalent, "
                                "equivalent), and stsb is regression already"]


@pytest.mark.parametrize("task", ["cola", "stsb"])
def test_glue_from_the_hub_offline_is_one_line(task, tmp_path, capsys):
    pytest.importorskip("datasets")
    from ftcli_trainer.task import main

    assert main(["--task", task, "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: could not load the {task} dataset (nyu-mll/glue/{task}, split train)")
    assert "Offline? Pass the data as files" in err and "\n" not in err


# -- each task from local files in its GLUE layout ------------------------------------------------------------


def _sentence(rng, k: int) -> str:
    """Filler with k positive and 3-k negative words: the signal a tiny model can find."""
    words = rng.sample(FILLER, 4) + rng.sample(POSITIVE, k) + rng.sample(NEGATIVE, 3 - k)
    rng.shuffle(words)
    return " ".join(words)


def glue_rows(task: str, n: int, seed: int) -> tuple[list[str], list[tuple]]:
    """Synthetic rows with the task's columns (and GLUE's idx); labels are ids as the Hub stores them."""
    text, pair, labels, _ = CARD[task]
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        k = rng.randint(0, 3)
        label = k * 5 / 3 if task == "stsb" else int(k >= 2)  # stsb: a 0-5 score that follows the words
        row = (i, _sentence(rng, k)) + ((" ".join(rng.sample(FILLER, 4)),) if pair else ()) + (label,)
        rows.append(row)
    return ["idx", text, *([pair] if pair else []), "label"], rows


def _sst2_slice(tmp_path, start: int, n: int, name: str):
    """SST-2 rows from ../shared/data in GLUE's layout (its file says `text` where GLUE says `sentence`)."""
    with open(shared_data("sst2", "train.csv"), newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[start:start + n]
    return write_csv(tmp_path / name, ["idx", "sentence", "label"], [(r["idx"], r["text"], r["label"]) for r in rows])


def task_files(task: str, tmp_path):
    if task == "sst2":
        return _sst2_slice(tmp_path, 0, 200, "train.csv"), _sst2_slice(tmp_path, 1000, 60, "dev.csv")
    if task == "mnli":  # the shared slice of dev-matched already has GLUE's columns (plus label_name)
        with open(shared_data("mnli", "validation_matched_shared.csv"), newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader)
            rows = list(reader)
        return write_csv(tmp_path / "train.csv", header, rows[:240]), write_csv(tmp_path / "dev.csv", header,
                                                                              rows[240:300])
    header, rows = glue_rows(task, 200, seed=1)
    _, dev = glue_rows(task, 60, seed=2)
    return write_csv(tmp_path / "train.csv", header, rows), write_csv(tmp_path / "dev.csv", header, dev)


@pytest.mark.parametrize("task", GLUE_TASKS)
def test_each_glue_task_trains_from_local_files_with_glues_metrics(task, tmp_path, tiny_model):
    from ftcli_trainer.task import main

    train, dev = task_files(task, tmp_path)
    out = tmp_path / "run"
    assert main(["--task", task, "--train-file", str(train), "--eval-file", str(dev), "--model", str(tiny_model),
                 "--epochs", "1", "--batch-size", "16", "--learning-rate", "3e-3", "--max-length", "64",
                 "--output-dir", str(out)]) == 0
    model = out / "model"
    m = json.loads((model / "metrics.json").read_text())
    config = json.loads((model / "config.json").read_text())
    preds = np.load(model / "eval_predictions.npz")
    labels, predicted = preds["eval/labels"], preds["eval/predicted"]
    assert len(labels) == 60
    for key in GLUE_METRICS.get(task, {"accuracy"}):
        assert isinstance(m[f"eval_{key}"], float), key
    if task == "stsb":
        assert config["problem_type"] == "regression" and len(config["id2label"]) == 1  # one output
        assert str(preds["kind"]) == "regression"
        assert m["eval_mse"] == pytest.approx(float(np.mean((predicted.astype(np.float64) - labels) ** 2)), rel=1e-5)
        return
    assert config["problem_type"] == "single_label_classification"
    assert [config["id2label"][str(i)] for i in range(len(CARD[task][2]))] == list(CARD[task][2])
    # the metrics follow from the exported predictions (GLUE's positive class for F1 is id 1)
    assert m["eval_accuracy"] == pytest.approx(float((predicted == labels).mean()))
    if task in ("mrpc", "qqp"):
        tp = int(((predicted == 1) & (labels == 1)).sum())
        precision, recall = tp / max(1, (predicted == 1).sum()), tp / max(1, (labels == 1).sum())
        f1 = 2 * precision * recall / (precision + recall) if tp else 0.0
        assert m["eval_f1"] == pytest.approx(f1)
    if task == "cola":
        sk = pytest.importorskip("sklearn.metrics")
        assert m["eval_matthews_correlation"] == pytest.approx(sk.matthews_corrcoef(labels, predicted), abs=1e-12)


def test_a_glue_task_from_json_lines_with_label_names(tmp_path, tiny_model):
    """The Hub's ids or the label names, CSV or JSON Lines: the same classes."""
    from ftcli_trainer.task import main

    header, rows = glue_rows("rte", 120, seed=3)
    names = CARD["rte"][2]
    path = tmp_path / "rte.jsonl"
    path.write_text("".join(json.dumps({**dict(zip(header, r, strict=True)), "label": names[r[-1]]}) + "\n"
                            for r in rows))
    out = tmp_path / "run"
    assert main(["--task", "rte", "--train-file", str(path), "--model", str(tiny_model), "--epochs", "1",
                 "--output-dir", str(out)]) == 0
    preds = np.load(out / "model" / "eval_predictions.npz")
    assert list(preds["label_names"]) == list(names) and list(preds["eval_sets"]) == ["eval"]  # 10 % held out
    assert len(preds["eval/labels"]) == 12


def regression_rows(n: int, seed: int) -> list[tuple]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        k = rng.randint(0, 3)
        rows.append((_sentence(rng, k), " ".join(rng.sample(FILLER, 3)), f"{k * 5 / 3:.3f}"))
    return rows


def train_stsb(tmp_path, tiny_model) -> tuple[Path, dict]:
    """STS-B's shape (a 0-5 score per sentence pair) on rows whose score is carried by sentiment words: the run
    folder and its metrics.json."""
    from ftcli_trainer.task import main

    header = ["sentence1", "sentence2", "label"]
    train = write_csv(tmp_path / "train.csv", header, regression_rows(400, 1))
    dev = write_csv(tmp_path / "dev.csv", header, regression_rows(100, 2))
    out = tmp_path / "run"
    assert main(["--task", "stsb", "--train-file", str(train), "--eval-file", str(dev), "--model", str(tiny_model),
                 "--epochs", "6", "--batch-size", "16", "--learning-rate", "3e-3", "--output-dir", str(out)]) == 0
    return out, json.loads((out / "model" / "metrics.json").read_text())


def test_regression_learns_a_score_that_depends_on_words(tmp_path, tiny_model):
    """The tiny model's Pearson and Spearman on unseen rows are far above 0, and MSE is below the variance's."""
    out, m = train_stsb(tmp_path, tiny_model)
    targets = np.array([float(r[2]) for r in regression_rows(100, 2)])
    assert m["eval_pearson"] > 0.8 and m["eval_spearmanr"] > 0.8, m
    assert m["eval_mse"] < 0.5 * targets.var(), m
    assert m["eval_loss"] == pytest.approx(m["eval_mse"])
    assert m["label_names"] == ["label"]
    run = json.loads((out / "model" / "ftcli_run.json").read_text())
    assert run["regression"] is True

    from transformers import pipeline

    scorer = pipeline("text-classification", model=str(out / "model"), function_to_apply="none")
    high, low = scorer([{"text": "superb wonderful great film", "text_pair": "the plot"},
                        {"text": "awful dull terrible film", "text_pair": "the plot"}])
    assert high["score"] > low["score"] + 1.0  # a score, not a probability


def test_csv_regression_with_the_option(tmp_path, tiny_model):
    from ftcli_trainer.task import main

    rows = [(t, s) for t, _, s in regression_rows(80, 4)]
    train = write_csv(tmp_path / "scores.csv", ["review", "stars"], rows)
    out = tmp_path / "run"
    assert main(["--task", "csv", "--train-file", str(train), "--text-column", "review", "--label-column", "stars",
                 "--regression", "--model", str(tiny_model), "--output-dir", str(out)]) == 0
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["problem_type"] == "regression" and config["id2label"] == {"0": "stars"}


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_stsb_regression_trains_through_cuda_graphs_on_a_gpu(tmp_path, tiny_model, capsys):
    """On a GPU the default step path is the captured one: regression targets go through its buffers and learn
    as on the CPU."""
    _, m = train_stsb(tmp_path, tiny_model)
    log = capsys.readouterr().out
    assert "CUDA graphs on" in log and " graphs captured" in log and "capturing" not in log, log[-2000:]
    assert m["eval_pearson"] > 0.8 and m["eval_spearmanr"] > 0.8, m
