"""`ftcli evaluate MODEL FILE`: a model scored on labelled rows, with the metrics its own run's evaluation reports."""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path

import pytest

from tests.cli.helpers import run_cli
from tests.conftest import NEGATIVE, POSITIVE, write_csv


def _train(tmp_path: Path, tiny_model: Path, train: Path, dev: Path, *args: str, epochs: int = 6
           ) -> tuple[Path, dict]:
    """A run of the trainer (here, in this process) with `dev` as its eval file: its model folder and metrics."""
    from ftcli_trainer.task import main

    out = tmp_path / "run"
    assert main(["--task", "csv", "--train-file", str(train), "--eval-file", str(dev), "--model", str(tiny_model),
                 "--epochs", str(epochs), "--batch-size", "16", "--learning-rate", "3e-3", "--output-dir", str(out),
                 *args]) == 0
    return out / "model", json.loads((out / "model" / "metrics.json").read_text())


def test_a_model_scored_on_its_own_eval_file_gives_its_runs_metrics(capsys, tmp_path, tiny_model, sentiment_csv):
    # The same rows, labels, columns and length as the run's own evaluation: the same numbers, from a model folder
    train, dev = sentiment_csv
    model, m = _train(tmp_path, tiny_model, train, dev)
    r = run_cli(capsys, "evaluate", str(model), str(dev), "--json")
    assert r.code == 0, r.err
    got = json.loads(r.out)
    assert (got["examples"], got["labels"]) == (60, m["label_names"])
    assert got["accuracy"] == m["eval_accuracy"] and got["macro_f1"] == pytest.approx(m["eval_macro_f1"], abs=1e-12)
    assert got["accuracy"] >= 0.9  # learned: both sides of the matrix are filled, not one constant answer
    assert got["loss"] == pytest.approx(m["eval_loss"], rel=1e-4)
    assert got["confusion_matrix"] == m["eval_confusion_matrix"]
    for name, scores in m["eval_per_label"].items():
        assert got["per_label"][name] == pytest.approx(scores), name

    # The same file as a .tsv with its labels as ids (a Hub dataset's), positive 0 and negative 1: the names were
    # read off the training data, in no id order of theirs, so numbers are refused (MNLI's 0/1/2 were mapped onto
    # the model's sorted names, and scored silently wrong) unless --label-names says what they stand for
    rows = [line.rsplit(",", 1) for line in dev.read_text().splitlines()[1:]]
    ids = tmp_path / "dev_ids.tsv"
    ids.write_text("text\tlabel\n" + "".join(f"{t}\t{['positive', 'negative'].index(y)}\n" for t, y in rows))
    r = run_cli(capsys, "evaluate", str(model), str(ids), "--json")
    assert r.code == 2 and not r.out
    assert f"error: {ids} line 2: label '" in r.err and "' is a number, but the training data's labels are names " \
        "(negative, positive)\nhint: write the names here too, or pass --label-names in id order" in r.err, r.err
    r = run_cli(capsys, "evaluate", str(model), str(ids), "--json", "--label-names", "positive,negative")
    assert r.code == 0, r.err
    assert json.loads(r.out)["confusion_matrix"] == got["confusion_matrix"]
    # a model from elsewhere (no ftcli_run.json): its own id2label is the order, as for a model of a Hub dataset
    import shutil

    elsewhere = Path(shutil.copytree(model, tmp_path / "elsewhere"))
    (elsewhere / "ftcli_run.json").unlink()
    ids.write_text("text\tlabel\n" + "".join(f"{t}\t{m['label_names'].index(y)}\n" for t, y in rows))
    r = run_cli(capsys, "evaluate", str(elsewhere), str(ids), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["confusion_matrix"] == got["confusion_matrix"]
    r = run_cli(capsys, "evaluate", str(model), str(ids), "--label-names", "positive,neutral")
    assert r.code == 2 and r.err.startswith(f"error: --label-names: 'neutral' not among {model}'s labels "
                                            "(negative, positive)")

    r = run_cli(capsys, "evaluate", str(model), str(dev))  # the table: each metric, then each label's scores
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0] == f"{dev}: 60 examples, model {model}"
    assert lines[1].split() == ["accuracy", f"{got['accuracy']:.4f}"]
    assert lines[4].split() == ["LABEL", "PRECISION", "RECALL", "F1", "SUPPORT"]
    negative = got["per_label"]["negative"]
    assert lines[5].split() == ["negative", *(f"{negative[k]:.4f}" for k in ("precision", "recall", "f1")),
                                str(negative["support"])]


def test_rows_the_model_cannot_be_scored_on_are_one_line(capsys, tmp_path, tiny_model, sentiment_csv):
    train, dev = sentiment_csv
    model, _ = _train(tmp_path, tiny_model, train, dev, epochs=1)
    other = write_csv(tmp_path / "other.csv", ["review", "sentiment"], [("a fine film", "neutral")])
    r = run_cli(capsys, "evaluate", str(model), str(other))
    assert r.code == 2 and not r.out and "Traceback" not in r.err
    assert r.err.startswith(f"error: {other} has no column 'text'")
    r = run_cli(capsys, "evaluate", str(model), str(other), "--text-column", "review", "--label-column", "sentiment")
    assert r.code == 2 and not r.out
    assert r.err == f"error: {other} line 2: label 'neutral' is not in the label set (negative, positive)\nhint: " \
        "fix the row or pass --label-column with the column that holds the model's labels\n"  # (not --label-names')
    r = run_cli(capsys, "evaluate", str(model), str(tmp_path / "missing.csv"))
    assert r.code == 2 and r.err.startswith("error: data file") and "does not exist" in r.err
    r = run_cli(capsys, "evaluate", str(model), str(dev), "--threshold", "0.3")
    assert r.code == 2 and "--threshold applies to multi-label models" in r.err
    # --trial with a model folder was dropped without a word (the folder's model scored, not trial 2's), as predict
    for command in (["evaluate", str(model), str(dev)], ["predict", str(model), "a fine film"]):
        r = run_cli(capsys, *command, "--trial", "2")
        assert r.code == 2 and not r.out and r.err.splitlines() == [
            f"error: --trial is for tuning jobs; {model} is a folder", "hint: run it again without --trial"], r.err


def _topics(n: int, seed: int) -> list[tuple[str, int, int]]:
    """Multi-label rows: 'good' words set column `pos`, 'bad' words `neg`, either, both or neither."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        pos, neg = rng.random() < 0.5, rng.random() < 0.5
        words = ["the", "film", "was"] + (rng.sample(POSITIVE, 2) if pos else []) + (rng.sample(NEGATIVE, 2) if neg
                                                                                      else [])
        rng.shuffle(words)
        rows.append((" ".join(words), int(pos), int(neg)))
    return rows


def test_a_multi_label_model_is_scored_as_its_run_scored_it(capsys, tmp_path, tiny_model):
    train = write_csv(tmp_path / "train.csv", ["text", "pos", "neg"], _topics(200, 1))
    dev = write_csv(tmp_path / "dev.csv", ["text", "pos", "neg"], _topics(50, 2))
    model, m = _train(tmp_path, tiny_model, train, dev, "--label-columns", "pos,neg")
    r = run_cli(capsys, "evaluate", str(model), str(dev), "--json")
    assert r.code == 0, r.err
    got = json.loads(r.out)
    assert got["threshold"] == 0.5 and got["labels"] == ["pos", "neg"]
    for key in ("micro_f1", "macro_f1", "subset_accuracy"):
        assert got[key] == pytest.approx(m[f"eval_{key}"], abs=1e-12), key
    assert got["loss"] == pytest.approx(m["eval_loss"], rel=1e-4)
    r = run_cli(capsys, "evaluate", str(model), str(dev), "--json", "--threshold", "0.99")
    assert r.code == 0 and json.loads(r.out)["micro_recall"] <= got["micro_recall"]
    r = run_cli(capsys, "evaluate", str(model), str(dev), "--threshold", "0.99")  # the table says at which threshold
    assert r.code == 0 and r.out.splitlines()[1].split() == ["threshold", "0.99"], r.out


def test_a_regression_model_is_scored_by_its_correlations(capsys, tmp_path, tiny_model):
    from tests.trainer.test_tasks import train_stsb

    out, m = train_stsb(tmp_path, tiny_model)
    r = run_cli(capsys, "evaluate", str(out / "model"), str(tmp_path / "dev.csv"), "--json")
    assert r.code == 0, r.err
    got = json.loads(r.out)
    assert "labels" not in got and "per_label" not in got
    for key in ("pearson", "spearmanr", "mse"):
        assert got[key] == pytest.approx(m[f"eval_{key}"], rel=1e-4), key
    r = run_cli(capsys, "evaluate", str(out / "model"), str(tmp_path / "dev.csv"))
    assert r.code == 0 and [x.split()[0] for x in r.out.splitlines()[1:]] == ["Pearson", "Spearman", "MSE", "loss"]


def test_a_pair_model_from_elsewhere_takes_text_pair_column(capsys, tmp_path, tiny_model):
    # tiny_model: a save_pretrained folder with a head and no ftcli_run.json, so not known to be single-text; its
    # --text-pair-column was refused: "was trained on single texts, not pairs"
    rows = write_csv(tmp_path / "pairs.csv", ["premise", "hypothesis", "label"],
                     [("a man plays", "someone makes music", 0), ("a cat sleeps", "a dog barks", 1)])
    r = run_cli(capsys, "evaluate", str(tiny_model), str(rows), "--text-column", "premise", "--text-pair-column",
                "hypothesis", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["examples"] == 2


def test_a_multi_label_model_from_elsewhere_reads_its_label_columns(capsys, tmp_path, tiny_model):
    # A one-hot file (Jigsaw's shape) for a multi-label save_pretrained folder without ftcli_run.json was refused,
    # "has no column 'label' ...; pass --label-column NAME (or --label-columns for multi-label)": no such flag here
    import shutil

    model = Path(shutil.copytree(tiny_model, tmp_path / "multi"))
    config = json.loads((model / "config.json").read_text())
    config.update(problem_type="multi_label_classification", id2label={"0": "pos", "1": "neg"},
                  label2id={"pos": 0, "neg": 1})
    (model / "config.json").write_text(json.dumps(config))
    rows = write_csv(tmp_path / "topics.csv", ["text", "pos", "neg"], _topics(8, 3))
    r = run_cli(capsys, "evaluate", str(model), str(rows), "--json")
    assert r.code == 0, r.err
    got = json.loads(r.out)
    assert got["examples"] == 8 and [*got["per_label"]] == ["pos", "neg"]
    assert got["per_label"]["pos"]["support"] == sum(p for _, p, _ in _topics(8, 3))
    r = run_cli(capsys, "evaluate", str(model), str(write_csv(tmp_path / "t.csv", ["text", "pos"], [("a", 1)])))
    assert r.code == 2 and "--label-columns" not in r.err
    assert r.err.startswith(f"error: {tmp_path / 't.csv'} has no column 'label' (columns: text, pos)\n"
                            "hint: give each row its labels as a list (in the column --label-column names), or a "
                            "0/1 column per label (pos, neg)"), r.err
    r = run_cli(capsys, "evaluate", str(tiny_model), str(rows))  # single-label: its label column, no other flag
    assert r.code == 2 and r.err.startswith(f"error: {rows} has no column 'label' (columns: text, pos, neg)\n"
                                            "hint: pass --label-column NAME"), r.err


def test_an_id_beyond_label_names_is_refused(capsys, tmp_path, tiny_model):
    # --label-names names id 0 only: the file's 1 was taken as the model's own id 1, scored with no word
    rows = write_csv(tmp_path / "ids.csv", ["text", "label"], [("a fine film", 0), ("a dull film", 1)])
    r = run_cli(capsys, "evaluate", str(tiny_model), str(rows), "--label-names", "LABEL_1")
    assert r.code == 2 and not r.out
    assert r.err.startswith(f"error: {rows} line 3: label '1' is an id, but --label-names names ids 0 to 0 only\n"
                            "hint: give --label-names a name for every id the file uses, in id order"), r.err


def test_a_broken_json_list_of_label_names_says_how_to_write_it_on_a_hint_line(capsys, tmp_path, tiny_model):
    # "error: --label-names '[\"neg\", \"pos\"' is not a valid JSON list (...); write it as ..." and no hint
    rows = write_csv(tmp_path / "ids.csv", ["text", "label"], [("a fine film", 0), ("a dull film", 1)])
    r = run_cli(capsys, "evaluate", str(tiny_model), str(rows), "--label-names", '["neg", "pos"')
    assert r.code == 2 and not r.out
    assert r.err.splitlines() == [
        "error: --label-names '[\"neg\", \"pos\"' is not a valid JSON list (Expecting ',' delimiter: line 1 column "
        "14 (char 13))", "hint: write it as '[\"a\", \"b, c\"]' or comma-separated a,b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ids.csv"]


def test_a_big_file_says_how_far_scoring_has_got(tmp_path, tiny_model):
    # "scoring 25,000 examples", then nothing until the end (an hour for IMDB on a CPU): progress after a few batches
    from ftcli import models

    rows_file = write_csv(tmp_path / "many.csv", ["text", "label"], [("a fine film " * (i % 7 + 1), i % 2)
                                                                       for i in range(300)])
    columns, rows = models.read_table(str(rows_file))
    seen: list[tuple[int, int]] = []
    got = models.evaluate(tiny_model, str(rows_file), columns, rows,
                          progress=lambda done, n: seen.append((done, n))).metrics
    assert got["examples"] == 300 and len(seen) >= 3
    assert seen[-1] == (300, 300) and [d for d, _ in seen] == sorted({d for d, _ in seen})


def test_a_jobs_model_on_a_gcs_file(capsys, cloud_env, monkeypatch, tmp_path, tiny_model):
    import gzip

    from tests.cli.test_models import BUCKET, make_job, seed_model

    gcs, vertex = cloud_env
    monkeypatch.setenv("FTCLI_CACHE_DIR", str(tmp_path / "cache"))
    job = make_job(vertex, "run", f"gs://{BUCKET}/team/runs/run/").rsplit("/", 1)[1]
    seed_model(gcs, "team/runs/run/", {**{p.name: p.read_bytes() for p in tiny_model.iterdir()}, "_COMPLETE": b""})
    body = "".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in [("a fine film", 0), ("a dull film", 1)])
    gcs.client().bucket(BUCKET).blob("data/dev.jsonl.gz").upload_from_string(gzip.compress(body.encode()))
    r = run_cli(capsys, "evaluate", job, f"gs://{BUCKET}/data/dev.jsonl.gz", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["examples"] == 2
    # a missing object: the storage library's 404 GET URL and status tuple, said as a local file's would be
    r = run_cli(capsys, "evaluate", job, f"gs://{BUCKET}/data/test.csv")
    assert r.code == 2 and r.err == f"error: data file gs://{BUCKET}/data/test.csv does not exist\nhint: `gcloud " \
        f"storage ls gs://{BUCKET}/data/` lists what is there\n", r.err


def test_evaluate_on_a_job_without_a_writable_home_names_evaluate_in_its_hint(capsys, cloud_env, monkeypatch,
                                                                              tmp_path):
    # No writable home (a container's user): `ftcli evaluate JOB FILE` said "... or run `ftcli download JOB DIR` and
    # `ftcli predict DIR ...`", the other command; it names evaluate now
    from tests.cli.test_models import BUCKET, make_job

    gcs, vertex = cloud_env
    blocker = tmp_path / "not-a-home"
    blocker.write_text("a file where the home should be")
    monkeypatch.setenv("HOME", str(blocker))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("FTCLI_CACHE_DIR", raising=False)
    job = make_job(vertex, "run", f"gs://{BUCKET}/team/runs/run/").rsplit("/", 1)[1]
    rows = write_csv(tmp_path / "dev.csv", ["text", "label"], [("a fine film", 0)])
    r = run_cli(capsys, "evaluate", job, str(rows))
    assert r.code == 1 and r.out == ""
    assert r.err.splitlines()[-1] == (f"hint: set FTCLI_CACHE_DIR to a writable folder, or run `ftcli download {job} "
                                      "DIR` and `ftcli evaluate DIR ...`")


def test_without_the_trainers_packages_evaluate_says_so_by_its_name(capsys, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    rows = write_csv(tmp_path / "dev.csv", ["text", "label"], [("a fine film", 0)])
    r = run_cli(capsys, "evaluate", str(tmp_path / "model"), str(rows))
    assert r.code == 1 and r.err.splitlines()[-2] == \
        "error: ftcli evaluate needs the trainer's dependencies on this machine (torch missing)", r.err


def test_without_matplotlib_evaluate_report_says_so_by_its_name(capsys, tmp_path, monkeypatch):
    # `ftcli evaluate --report DIR` without matplotlib said "ftcli report draws with matplotlib", a command the user
    # did not run; it names evaluate --report now, before the model or the file is looked at (neither exists here)
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    r = run_cli(capsys, "evaluate", str(tmp_path / "model"), str(tmp_path / "dev.csv"), "--report",
                str(tmp_path / "r"))
    assert (r.code, r.out) == (1, "")
    assert r.err == ("error: ftcli evaluate --report draws with matplotlib, which is not installed: "
                     "pip install 'ftcli[report]'\n")
    assert not (tmp_path / "r").exists()


def test_a_run_that_evaluated_part_of_its_eval_file_says_so(capsys, tmp_path, tiny_model, sentiment_csv):
    # --max-eval-samples: the run's own eval file scored whole gives other numbers than metrics.json, with no word why
    train, dev = sentiment_csv
    model, m = _train(tmp_path, tiny_model, train, dev, "--max-eval-samples", "20", epochs=1)
    r = run_cli(capsys, "evaluate", str(model), str(dev), "--json")
    assert r.code == 0 and json.loads(r.out)["examples"] == 60 and sum(map(sum, m["eval_confusion_matrix"])) == 20
    assert "the run evaluated a seeded 20 of the 60 rows of its eval file test.csv (--max-eval-samples 20): these " \
        "metrics are on all 60, not metrics.json's" in r.err, r.err


def test_a_pair_of_one_column_is_refused(capsys, tmp_path, tiny_model):
    # --text-pair-column naming the text column scored every row as its text paired with itself
    rows = write_csv(tmp_path / "pairs.csv", ["premise", "hypothesis", "label"], [("a man plays", "music", 0)])
    for given in (["--text-column", "premise"], []):
        r = run_cli(capsys, "evaluate", str(tiny_model), str(rows), *given, "--text-pair-column",
                    "premise" if given else "text")
        said = "the --text-column" if given else "the model's text column"
        assert r.code == 2 and not r.out and r.err.startswith(
            f"error: --text-pair-column '{'premise' if given else 'text'}' is {said} too: a pair needs two columns"), \
            r.err


def test_a_label_read_as_text_or_two_ids_with_one_name_are_refused(capsys, tmp_path, tiny_model):
    # both scored with exit 0: each row's label classified as its text; two ids counted as one label
    rows = write_csv(tmp_path / "ids.csv", ["text", "label"], [("a fine film", 0), ("a dull film", 1)])
    r = run_cli(capsys, "evaluate", str(tiny_model), str(rows), "--text-column", "label")
    assert r.code == 2 and r.err.startswith("error: --text-column 'label' is the label column too"), r.err
    r = run_cli(capsys, "evaluate", str(tiny_model), str(rows), "--label-names", "LABEL_0,LABEL_0")
    assert r.code == 2 and r.err.startswith("error: --label-names names 'LABEL_0' twice"), r.err


def _table(report: Path, heading: str) -> list[str]:
    """The rows of report.md's table under the heading that starts with `heading`."""
    lines = report.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("| ") and not line.startswith(("| metric ", "| label ")):
            rows.append(line)
    return rows


def test_report_draws_the_evaluation_as_ftcli_report_draws_the_run(capsys, tmp_path, tiny_model, sentiment_csv):
    # `ftcli evaluate` had no picture: the numbers only. --report draws it as ftcli report draws a run: on the run's
    # own eval file, the same metrics and per-label table as the run's report, and its confusion matrix
    pytest.importorskip("matplotlib")
    train, dev = sentiment_csv
    model, m = _train(tmp_path, tiny_model, train, dev)
    assert m["eval_accuracy"] >= 0.9  # learned: both rows of the matrix are filled
    r = run_cli(capsys, "report", str(model.parent), "--out", str(tmp_path / "run-report"))
    assert r.code == 0, r.err
    out = tmp_path / "eval-report"
    r = run_cli(capsys, "evaluate", str(model), str(dev), "--json", "--report", str(out))
    assert r.code == 0, r.err
    assert json.loads(r.out)["accuracy"] == m["eval_accuracy"]  # stdout is still the one JSON object
    assert f"report in {out}: report.md, confusion_matrix.png\n" in r.err
    assert sorted(p.name for p in out.iterdir()) == ["confusion_matrix.png", "ftcli-report.json", "report.md"]
    assert (out / "confusion_matrix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    mine, runs = out / "report.md", tmp_path / "run-report" / "report.md"
    assert _table(mine, f"## Per label ({dev.name})") == _table(runs, "## Per label (eval)")
    shown = {row.split(" | ")[0] for row in _table(mine, "## Metrics")}
    assert shown == {"| accuracy", "| macro_f1", "| loss"}
    assert [row for row in _table(runs, "## Metrics") if row.split(" | ")[0] in shown] == _table(mine, "## Metrics")
    assert mine.read_text().startswith(f"# ftcli report: {dev}, scored by {model}\n")

    # again into the same folder: an earlier report's, replaced; a folder of the user's files is refused before any
    # scoring, and left as it was
    r = run_cli(capsys, "evaluate", str(model), str(dev), "--report", str(out))
    assert r.code == 0, r.err
    mine_too = tmp_path / "notes"
    mine_too.mkdir()
    (mine_too / "todo.txt").write_text("mine")
    r = run_cli(capsys, "evaluate", str(model), str(dev), "--report", str(mine_too))
    assert r.code == 2 and not r.out and "scoring" not in r.err
    assert r.err.startswith(f"error: {mine_too} is not empty and holds no earlier ftcli report\n")
    assert [p.name for p in mine_too.iterdir()] == ["todo.txt"] and (mine_too / "todo.txt").read_text() == "mine"

    # an earlier report's folder where a picture's name is the user's file: refused after the scoring, when the
    # pictures are known, with the hint naming evaluate's own option (it told the user to give --out, which
    # evaluate does not take)
    (out / "confusion_matrix.png").unlink()
    (out / "ftcli-report.json").write_text(json.dumps({"ftcli_report": 1, "files": ["report.md"]}))
    (out / "confusion_matrix.png").write_text("mine")
    r = run_cli(capsys, "evaluate", str(model), str(dev), "--report", str(out))
    assert r.code == 2
    assert r.err.endswith(f"error: {out / 'confusion_matrix.png'} is not from the earlier report\n"
                          "hint: move it away, or give --report a new folder; nothing was written\n")
    assert (out / "confusion_matrix.png").read_text() == "mine"


@pytest.mark.parametrize("mine", ["a folder of the user's files", "a file"])
def test_a_report_folder_refused_says_to_change_report_not_out(capsys, tmp_path, mine):
    # `ftcli evaluate --report DIR` refused a folder of other files (or a file) with "hint: give --out a new or empty
    # folder", ftcli report's option, which evaluate does not take; it names --report now. Refused before the model
    # or the file is looked at: neither exists here.
    pytest.importorskip("matplotlib")
    target = tmp_path / "notes"
    if mine == "a file":
        target.write_text("mine")
        said = f"error: {target} is not a folder\nhint: give --report a new or empty folder\n"
    else:
        target.mkdir()
        (target / "todo.txt").write_text("mine")
        said = (f"error: {target} is not empty and holds no earlier ftcli report\n"
                "hint: give --report a new or empty folder; nothing was written\n")
    r = run_cli(capsys, "evaluate", str(tmp_path / "model"), str(tmp_path / "dev.csv"), "--report", str(target))
    assert (r.code, r.out, r.err) == (2, "", said)
    assert (target.read_text() if mine == "a file" else (target / "todo.txt").read_text()) == "mine"


def test_report_of_a_multi_label_or_regression_evaluation(capsys, tmp_path, tiny_model):
    pytest.importorskip("matplotlib")
    train = write_csv(tmp_path / "train.csv", ["text", "pos", "neg"], _topics(120, 1))
    dev = write_csv(tmp_path / "dev.csv", ["text", "pos", "neg"], _topics(40, 2))
    model, m = _train(tmp_path, tiny_model, train, dev, "--label-columns", "pos,neg", epochs=1)
    r = run_cli(capsys, "evaluate", str(model), str(dev), "--report", str(tmp_path / "multi"), "--threshold", "0.4")
    assert r.code == 0, r.err
    assert (tmp_path / "multi" / "per_label_f1.png").is_file()
    rows = dict(tuple(c.strip() for c in row.strip("|").split("|")) for row in _table(
        tmp_path / "multi" / "report.md", "## Metrics"))
    assert rows["threshold"] == "0.4000" and "micro_f1" in rows  # the F1s' threshold, said beside them

    from tests.trainer.test_tasks import train_stsb

    (tmp_path / "reg").mkdir()
    run, _ = train_stsb(tmp_path / "reg", tiny_model)
    r = run_cli(capsys, "evaluate", str(run / "model"), str(tmp_path / "reg" / "dev.csv"), "--report",
                str(tmp_path / "reg-report"))
    assert r.code == 0, r.err
    assert (tmp_path / "reg-report" / "predicted_vs_true.png").is_file()


def test_a_multi_label_runs_report_says_its_threshold_as_evaluate_does(capsys, tmp_path, tiny_model):
    # A run trained at --threshold 0.3: ftcli evaluate (and its --report) said "threshold 0.3" beside the F1s, while
    # ftcli report's table of the same run and rows had the same F1s without it (metrics.json does not hold it), so
    # they read as F1s at the usual 0.5
    pytest.importorskip("matplotlib")
    train = write_csv(tmp_path / "train.csv", ["text", "pos", "neg"], _topics(120, 1))
    dev = write_csv(tmp_path / "dev.csv", ["text", "pos", "neg"], _topics(40, 2))
    model, _ = _train(tmp_path, tiny_model, train, dev, "--label-columns", "pos,neg", "--threshold", "0.3", epochs=1)
    r = run_cli(capsys, "report", str(model.parent), "--out", str(tmp_path / "run-report"))
    assert r.code == 0, r.err
    r = run_cli(capsys, "evaluate", str(model), str(dev), "--report", str(tmp_path / "eval-report"))
    assert r.code == 0, r.err
    runs = _table(tmp_path / "run-report" / "report.md", "## Metrics")
    assert "| threshold | 0.3000 |" in runs
    assert _table(tmp_path / "eval-report" / "report.md", "## Metrics") == runs



def test_evaluate_and_predict_take_the_threshold_report_shows(capsys, tmp_path, tiny_model):
    # The threshold was read in two places: ftcli report from config.json's ftcli_threshold, else ftcli_run.json's
    # --threshold; evaluate and predict from config.json alone, else 0.5. A run at --threshold 0.3 whose config.json
    # no longer says it (re-saved by another tool) was reported at 0.3 and evaluated and predicted at 0.5.
    pytest.importorskip("matplotlib")
    train = write_csv(tmp_path / "train.csv", ["text", "pos", "neg"], _topics(120, 1))
    dev = write_csv(tmp_path / "dev.csv", ["text", "pos", "neg"], _topics(40, 2))
    model, _ = _train(tmp_path, tiny_model, train, dev, "--label-columns", "pos,neg", "--threshold", "0.3", epochs=1)
    config = json.loads((model / "config.json").read_text())
    del config["ftcli_threshold"]
    (model / "config.json").write_text(json.dumps(config))
    r = run_cli(capsys, "report", str(model.parent), "--out", str(tmp_path / "run-report"))
    assert r.code == 0, r.err
    assert "| threshold | 0.3000 |" in _table(tmp_path / "run-report" / "report.md", "## Metrics")
    r = run_cli(capsys, "evaluate", str(model), str(dev), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["threshold"] == 0.3  # (predict's model is read by the same code)

# -- cut short: Ctrl-C, SIGTERM (a CI step's timeout, `docker stop`), SIGHUP (a closed terminal) --------------------


def _rows(tmp_path: Path, n: int) -> Path:
    """n labelled rows for the tiny model (its labels are ids: 0, 1)."""
    return write_csv(tmp_path / "rows.csv", ["text", "label"], [(f"a fine film {i}", i % 2) for i in range(n)])


@pytest.mark.parametrize(("sig", "report"), [(signal.SIGTERM, "new"), (signal.SIGINT, None),
                                             (signal.SIGHUP, "earlier")], ids=["sigterm-report", "ctrl-c", "sighup"])
def test_a_signal_while_evaluate_scores_says_how_far_it_got_and_that_dir_is_as_it_was(capsys, tmp_path, tiny_model,
                                                                                       sig, report):
    # An hour of scoring on a CPU: a SIGTERM or SIGHUP killed ftcli without a word (exit -15, -1), and Ctrl-C said
    # only "interrupted", neither how far it had got nor what --report's folder held.
    if report:
        pytest.importorskip("matplotlib")
    from ftcli.models import PREDICT_BATCH
    from tests.cli.helpers import signal_when_held

    rows, out = _rows(tmp_path, 200), tmp_path / "eval-report"
    if report == "earlier":
        assert run_cli(capsys, "evaluate", str(tiny_model), str(rows), "--report", str(out)).code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()} if out.exists() else None
    # the fifth batch of scoring: the first four have been counted
    code, printed, err = signal_when_held("ftcli.models:_Classifier._forward", 5,
                                          ["evaluate", str(tiny_model), "rows.csv",
                                           *(["--report", str(out)] if report else [])], sig, tmp_path / "held",
                                          tmp_path)
    kept = {"new": f"; nothing was written to {out}", "earlier": f"; nothing was written to {out} (its files are as "
            "they were)", None: ""}[report]
    assert code == 128 + sig and err.strip().splitlines()[-1] == (
        f"interrupted; {PREDICT_BATCH * 4} of 200 examples were scored, no metrics printed{kept}"), err
    assert "Traceback" not in err and printed == ""
    if before is None:
        assert not out.exists()
    else:
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]


@pytest.mark.parametrize(("where", "at", "said"), [
    ("ftcli_trainer.data:open_text", 1, "no example was scored (it was reading rows.csv)"),
    ("ftcli.models:_Classifier.__init__", 1, "no example was scored (it was loading the model)"),
    ("ftcli.models:_Classifier._forward", 1, "0 of 20 examples were scored, no metrics printed")],
    ids=["reading", "loading", "scoring"])
def test_a_signal_before_evaluate_has_scored_a_batch_says_what_it_was_doing(tmp_path, tiny_model, where, at, said):
    # Reading a big file, or loading a big model (torch's import with it), takes a while before the first example is
    # scored: a Ctrl-C in either, or in the first batch's scoring, said only "no example was scored".
    from tests.cli.helpers import signal_when_held

    _rows(tmp_path, 20)
    code, printed, err = signal_when_held(where, at, ["evaluate", str(tiny_model), "rows.csv"], signal.SIGINT,
                                          tmp_path / "held", tmp_path)
    assert code == 130 and printed == "" and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == f"interrupted; {said}", err


@pytest.mark.parametrize(("sig", "earlier"), [(signal.SIGINT, False), (signal.SIGTERM, True)],
                         ids=["ctrl-c", "sigterm-earlier-report"])
def test_a_signal_while_evaluate_draws_its_report_keeps_the_metrics_and_says_what_dir_holds(capsys, tmp_path,
                                                                                          tiny_model, sig, earlier):
    # Ctrl-C while `evaluate --report DIR` drew the report said a plain "interrupted" where `ftcli report` says what
    # the folder holds; a SIGTERM killed it without a word, the report's staging left in DIR for the next to clean.
    pytest.importorskip("matplotlib")
    from tests.cli.helpers import signal_when_held

    rows, out = _rows(tmp_path, 40), tmp_path / "eval-report"
    if earlier:
        assert run_cli(capsys, "evaluate", str(tiny_model), str(rows), "--report", str(out)).code == 0
        (out / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in out.iterdir()} if earlier else None
    code, printed, err = signal_when_held("ftcli.report:_confusion", 1,  # the confusion matrix, as it is drawn
                                          ["evaluate", str(tiny_model), "rows.csv", "--report", str(out)], sig,
                                          tmp_path / "held", tmp_path)
    kept = " (its files are as they were)" if earlier else ""
    assert code == 128 + sig and err.strip().splitlines()[-1] == (
        f"interrupted; the metrics are printed above; nothing was written to {out}{kept}"), err
    # the metrics first: they were printed after the report, and a signal while it was drawn lost them
    assert "Traceback" not in err and "accuracy" in printed and "SUPPORT" in printed, printed
    if earlier:
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    else:
        assert not out.exists()
    assert not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]  # no staging, beside DIR or in it


@pytest.mark.parametrize(("where", "said"), [
    ("ftcli.report:_plan", "nothing was written to {out}"),  # the report's plan, before anything is drawn
    ("ftcli.output:note", "the report is written, whole, in {out}"),  # its 2nd: "report in DIR: ..." (1st: "scoring")
], ids=["before-drawing", "report-written"])
def test_a_signal_around_evaluates_report_drawing_says_what_dir_holds(tmp_path, tiny_model, where, said):
    # SIGTERM once the metrics were printed but before the report's drawing had begun (its plan, the checks of DIR),
    # or once the report was written, while "report in DIR" was said: outside the drawing's own handling, it said
    # a plain "interrupted" (exit 130, a SIGTERM reported as a Ctrl-C, before the drawing; 143 after), nothing of
    # what DIR held: nothing in the one case, the whole report in the other.
    pytest.importorskip("matplotlib")
    from tests.cli.helpers import signal_when_held

    rows, out = _rows(tmp_path, 20), tmp_path / "eval-report"
    code, printed, err = signal_when_held(where, 2 if where.endswith("note") else 1,
                                          ["evaluate", str(tiny_model), str(rows), "--report", str(out)],
                                          signal.SIGTERM, tmp_path / "held", tmp_path)
    assert code == 143 and "accuracy" in printed and "Traceback" not in err, (code, err)
    assert err.strip().splitlines()[-1] == (
        f"interrupted; the metrics are printed above; {said.format(out=out)}"), err
    if where.endswith("_plan"):
        assert not out.exists()
    else:
        assert {p.name for p in out.iterdir()} >= {"report.md", "confusion_matrix.png"}
    assert not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]


@pytest.mark.parametrize("report", [False, True], ids=["metrics", "report"])
def test_sigterm_while_evaluate_prints_its_metrics_says_so_and_exits_143(tmp_path, tiny_model, report):
    # `ftcli evaluate M rows.csv | reader` whose reader had stopped reading, then SIGTERM (a CI step's timeout) once
    # every example was scored: the metrics' printing was outside the command's own handling, and it ended with the
    # app's bare "interrupted" and exit 130, as if it were a Ctrl-C, saying nothing of the scoring nor of --report's
    # folder. Now: 143, the scoring done, the metrics cut short, nothing written to DIR.
    import sys

    from ftcli.output import LAST_WRITE_PATIENCE
    from tests.cli.helpers import signal_behind_a_full_pipe

    if report:
        pytest.importorskip("matplotlib")
    _rows(tmp_path, 20)
    out = tmp_path / "eval-report"
    code, took, _, err = signal_behind_a_full_pipe(
        [sys.executable, "-c", "from ftcli.cli.app import main; main()", "evaluate", str(tiny_model), "rows.csv",
         *(["--report", str(out)] if report else [])], {**os.environ}, tmp_path, signal.SIGTERM)
    kept = f"; nothing was written to {out}" if report else ""
    assert code == 143 and took < LAST_WRITE_PATIENCE + 5, (code, took, err)
    assert "Traceback" not in err and err.strip().splitlines()[-1] == (
        f"interrupted; all 20 examples were scored, the metrics were cut short as they were printed{kept}"), err
    assert not out.exists()


@pytest.mark.parametrize("held", ["model", "file"])
def test_a_signal_while_evaluate_downloads_leaves_nothing_behind(cloud_env, monkeypatch, tmp_path, tiny_model, held):
    # `ftcli evaluate JOB gs://FILE` downloads the file into a temporary folder, then the job's model into ftcli's
    # cache: a SIGTERM (or SIGHUP) in either killed ftcli without a word, the file's copy or the model's staging left
    # for the next run to clean.
    pytest.importorskip("matplotlib")  # (--report)
    from tests.cli.helpers import signal_during_download
    from tests.cli.test_models import BUCKET, make_job, seed_model

    gcs, vertex = cloud_env
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FTCLI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    job = make_job(vertex, "run", f"gs://{BUCKET}/team/runs/run/").rsplit("/", 1)[1]
    seed_model(gcs, "team/runs/run/", {**{p.name: p.read_bytes() for p in tiny_model.iterdir()}, "_COMPLETE": b""})
    gcs.client().bucket(BUCKET).blob("data/rows.csv").upload_from_string(_rows(tmp_path, 20).read_bytes())
    sig = signal.SIGTERM if held == "model" else signal.SIGHUP
    # the download takes a while: the signal lands in it
    code, printed, err = signal_during_download(
        gcs.url, "model.safetensors" if held == "model" else "rows.csv", "evaluate",
        [job, f"gs://{BUCKET}/data/rows.csv", "--report", "eval-report"], tmp_path, sig)
    cached = tmp_path / "cache" / "models" / "test-project" / "us-central1" / job
    said = f"nothing was written to {cached}; what had been downloaded was removed" if held == "model" else \
        f"no example was scored (it was reading gs://{BUCKET}/data/rows.csv)"
    assert code == 128 + sig and err.strip().splitlines()[-1] == (
        f"interrupted; {said}; nothing was written to eval-report"), err
    assert "Traceback" not in err and printed == ""
    assert os.listdir(tmp_path / "tmp") == [] and not (tmp_path / "eval-report").exists()
    assert not (tmp_path / "cache").exists() or os.listdir(cached.parent) == []


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="the busy CPUs are measured from /proc/stat")
@pytest.mark.parametrize("size", ["many", "few"])
@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_beside_a_busy_process_scoring_makes_torchs_threads_wait_passively(tmp_path, tiny_model, command, size):
    # ftcli evaluate of the 872 SST-2 dev rows on MiniLM-L6 took 25-28 s of CPU on the busy 2-core VM, where the
    # trainer's own evaluation of the same rows took ~7: torch's threads spun while they waited for each other, on
    # the CPUs the other work needed (the trainer has them wait asleep there, cpu.wait_passively_if_busy). Scoring
    # now makes the same choice, before torch loads, and says so; the results are the same. A few texts are scored
    # without the look (0.15 s, more than spinning could cost them: cpu.WORTH_A_LOOK) and without its line: a
    # one-text `ftcli predict` on a busy machine spent it every time, and said a line about threads besides.
    import subprocess
    import sys
    import time

    from ftcli_trainer.cpu import WORTH_A_LOOK

    # "many": as much work as the look pays for on this tiny model (its weights are ~0.1 MB, MiniLM's 91), half in
    # each of two rows (each cut at the model's 128 tokens)
    need = WORTH_A_LOOK // (tiny_model / "model.safetensors").stat().st_size + 1
    long = ("a fine film " * (need // 24 + 1)).strip()
    texts = [long, long] if size == "many" else ["a fine film", "dull"]
    rows = write_csv(tmp_path / "rows.csv", ["text", "label"], [(texts[0], "LABEL_0"), (texts[1], "LABEL_1")])
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n")
    args = [command, str(tiny_model), str(rows)] if command == "evaluate" else \
        [command, str(tiny_model), "--file", "texts.txt"]
    cpus = len(os.sched_getaffinity(0))
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # running, not starting
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
        # every CPU torch's: any other work beyond half a CPU contends (here the busy process, and whatever else runs)
        env["OMP_NUM_THREADS"] = str(max(2, cpus))
        done = subprocess.run([sys.executable, "-m", "ftcli.cli", *args], env=env, cwd=tmp_path, capture_output=True,
                              text=True)
    finally:
        hog.kill()
        hog.wait()
    assert done.returncode == 0, done.stderr
    if size == "many":
        assert done.stderr.startswith("other work keeps ") and (
            f" of this machine's {cpus} CPUs busy: torch's {max(2, cpus)} threads wait for each other passively "
            "(OMP_WAIT_POLICY=PASSIVE)") in done.stderr.splitlines()[0], done.stderr
    else:
        assert "other work keeps" not in done.stderr and "passively" not in done.stderr, done.stderr
    assert ("2 examples" in done.stdout) if command == "evaluate" else \
        done.stdout.endswith(f"\t{texts[1]}\n"), done.stdout[-200:]


@pytest.mark.parametrize("command", ["evaluate", "train"])
def test_a_data_file_that_is_a_pipe_is_said_to_be_one(tmp_path, tiny_model, command):
    # `zcat rows.csv.gz | ftcli evaluate M /dev/stdin` said 'data file /dev/stdin does not exist', and `ftcli train
    # --train-file /dev/stdin` (and local) '--train-file /dev/stdin: no such file', of a pipe that was there.
    import subprocess
    import sys

    args = {"evaluate": ["evaluate", str(tiny_model), "/dev/stdin"],
            "train": ["train", "--task", "csv", "--train-file", "/dev/stdin", "--gpu", "T4", "--project", "my-project",
                      "--bucket", "gs://my-bucket", "--dry-run"]}[command]
    r = subprocess.run([sys.executable, "-c", "from ftcli.cli.app import main; main()", *args],
                       input="text,label\na fine film,pos\n", capture_output=True, text=True, cwd=tmp_path, timeout=120,
                       env={**os.environ, "FTCLI_CONFIG": str(tmp_path / "config.toml"), "HF_HUB_OFFLINE": "1",
                            "FTCLI_STATE_DIR": str(tmp_path / "state")})
    assert (r.returncode, r.stdout) == (2, ""), r.stderr
    said = "data file /dev/stdin" if command == "evaluate" else "--train-file /dev/stdin"
    assert r.stderr.splitlines() == [
        f"error: {said} is a pipe, not a file",
        "hint: a data file is read more than once (its columns, then its rows): save it to a file and give that"]
