"""The report's core on run folders written here: two eval sets (MNLI), runs from before eval predictions were
exported, a resumed run's repeated log lines, and an output folder that is never written through a link."""

import json
from pathlib import Path

import numpy as np
import pytest

from ftcli.errors import UsageError
from ftcli.report import fmt, load_run, set_metrics, write_report

pytest.importorskip("matplotlib")

MNLI = ["entailment", "neutral", "contradiction"]


def mnli_run(root: Path, predictions: bool = True) -> Path:
    """A finished MNLI run as the trainer leaves it: matched is the primary set, mismatched the other."""
    model, logs = root / "model", root / "logs"
    model.mkdir(parents=True)
    logs.mkdir()
    rng = np.random.default_rng(0)
    sets = {}
    metrics = {"global_step": 20, "epoch": 2.0, "train_loss": 0.9, "train_runtime": 12.5, "eval_runtime": 1.0,
               "eval_samples_per_second": 400.0, "label_names": MNLI, "device": "cpu", "precision": "fp32"}
    for name, prefix in (("matched", "eval_"), ("mismatched", "eval_mismatched_")):
        labels = rng.integers(0, 3, 90)
        predicted = np.where(rng.random(90) < 0.6, labels, rng.integers(0, 3, 90))
        cm = np.bincount(labels * 3 + predicted, minlength=9).reshape(3, 3)
        sets[name] = (labels, predicted)
        metrics.update({f"{prefix}accuracy": float((labels == predicted).mean()), f"{prefix}macro_f1": 0.5,
                        f"{prefix}loss": 0.8 if name == "matched" else 0.85,
                        f"{prefix}confusion_matrix": cm.tolist(), f"{prefix}per_label": {}})
    (model / "metrics.json").write_text(json.dumps(metrics))
    (model / "config.json").write_text(json.dumps({"problem_type": "single_label_classification",
                                                   "id2label": {str(i): n for i, n in enumerate(MNLI)}}))
    (model / "ftcli_run.json").write_text(json.dumps({"task": "mnli", "model": "bert-base-uncased"}))
    if predictions:
        arrays = {"kind": np.array("single_label"), "label_names": np.array(MNLI), "eval_sets": np.array(list(sets))}
        for name, (labels, predicted) in sets.items():
            arrays |= {f"{name}/labels": labels, f"{name}/predicted": predicted,
                       f"{name}/scores": np.eye(3, dtype=np.float32)[predicted]}
        np.savez_compressed(model / "eval_predictions.npz", **arrays)
    lines = []
    for step in range(1, 21):
        lines.append({"type": "train", "step": step, "epoch": step / 10, "loss": 1.1 - step / 40,
                      "learning_rate": 2e-5 * (1 - step / 20)})
        if step % 10 == 0:
            lines.append({"type": "eval", "step": step, "epoch": step / 10, "eval_accuracy": 0.4 + step / 100,
                          "eval_loss": 1.0 - step / 100, "eval_mismatched_accuracy": 0.38 + step / 100,
                          "eval_mismatched_loss": 1.02 - step / 100, "eval_runtime": 1.0})
    (logs / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return root


def test_two_eval_sets_each_get_their_column_and_matrix(tmp_path):
    run = load_run(mnli_run(tmp_path / "run"))
    assert run.eval_sets == ["matched", "mismatched"] and run.label_names == MNLI and run.task == "mnli"
    assert set_metrics(run, 0) == {"accuracy": pytest.approx(run.metrics["eval_accuracy"]), "macro_f1": 0.5,
                                   "loss": 0.8}  # not mismatched_accuracy, not the run's eval_runtime
    assert set_metrics(run, 1)["loss"] == 0.85
    files = write_report(run, tmp_path / "out")
    assert [f.name for f in files] == ["report.md", "learning_curves.png", "confusion_matrix.png",
                                       "confusion_matrix-mismatched.png"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| metric | matched | mismatched |" in md
    m = run.metrics
    assert f"| accuracy | {fmt(m['eval_accuracy'])} | {fmt(m['eval_mismatched_accuracy'])} |" in md
    assert "| loss | 0.8000 | 0.8500 |" in md


def test_label_names_never_break_the_markdown_table(tmp_path):
    # a label from a quoted CSV cell can hold "|" or a line break; a lone "\r" (a line end in CommonMark) was kept,
    # which split the table row in two
    from ftcli.report import markdown

    root = mnli_run(tmp_path / "run", predictions=False)
    metrics = json.loads((root / "model" / "metrics.json").read_text())
    names = ["a|b", "two\nlines", "old\rmac", "crlf\r\nend"]
    metrics["eval_per_label"] = {n: {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 3} for n in names}
    (root / "model" / "metrics.json").write_text(json.dumps(metrics))
    md = markdown(load_run(root), [])
    rows = md.split("## Per label (eval)")[1].splitlines()[4:8]
    assert rows == [f"| {n} | 0.5000 | 0.5000 | 0.5000 | 3 |" for n in ("a\\|b", "two lines", "old mac", "crlf end")]


def test_a_run_from_before_eval_predictions_uses_metrics_json(tmp_path):
    run = load_run(mnli_run(tmp_path / "run", predictions=False))
    assert run.predictions is None
    assert run.eval_sets == ["eval", "mismatched"]  # the primary set's name was not recorded
    assert run.label_names == MNLI  # from config.json's id2label
    names = [f.name for f in write_report(run, tmp_path / "out")]
    assert names == ["report.md", "learning_curves.png", "confusion_matrix.png", "confusion_matrix-mismatched.png"]


def test_a_resumed_runs_repeated_lines_count_once_and_a_torn_line_is_skipped(tmp_path):
    root = mnli_run(tmp_path / "run")
    log = root / "logs" / "metrics.jsonl"
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    again = [dict(r, loss=0.123) for r in rows if r["type"] == "train" and r["step"] > 15]  # replayed after resume
    log.write_text(log.read_text() + "".join(json.dumps(x) + "\n" for x in again) + '{"type": "train", "st')
    run = load_run(root)
    train = [r for r in run.history if r["type"] == "train"]
    assert [r["step"] for r in train] == list(range(1, 21))
    assert [r["loss"] for r in train[15:]] == [0.123] * 5  # the resumed run's values
    assert run.skipped_lines == 1


def test_a_run_without_final_metrics_gets_its_curves(tmp_path):
    root = mnli_run(tmp_path / "run")
    (root / "model" / "metrics.json").unlink()
    (root / "model" / "eval_predictions.npz").unlink()
    run = load_run(root)
    names = [f.name for f in write_report(run, tmp_path / "out")]
    assert names == ["report.md", "learning_curves.png"]
    assert "The run has not finished" in (tmp_path / "out" / "report.md").read_text()


def test_a_link_in_an_earlier_report_is_replaced_not_followed(tmp_path):
    run = load_run(mnli_run(tmp_path / "run"))
    out = tmp_path / "out"
    write_report(run, out)
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    (out / "report.md").unlink()
    (out / "report.md").symlink_to(victim)
    write_report(run, out)
    assert victim.read_text() == "keep me"
    assert not (out / "report.md").is_symlink() and (out / "report.md").read_text().startswith("# ftcli report")
    assert not [p for p in out.iterdir() if ".tmp-" in p.name]


def test_out_must_be_a_folder(tmp_path):
    run = load_run(mnli_run(tmp_path / "run"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError) as e:
        write_report(run, tmp_path / "file")
    assert "is not a folder" in e.value.message


def test_numbers_in_the_table():
    assert [fmt(3), fmt(1234567), fmt(2.0), fmt(0.123456), fmt(-0.5), fmt(1.234e-5), fmt(float("nan")), fmt("x")] == [
        "3", "1,234,567", "2", "0.1235", "-0.5000", "1.23e-05", "nan", "x"]


def test_another_report_being_drawn_into_an_empty_folder_does_not_make_it_not_empty(tmp_path):
    # `ftcli report 3 --out r & ftcli report 3 --out r` (r made empty beforehand): the first one stages inside r, and
    # the second refused r as "not empty and holds no earlier ftcli report" while `ls r` showed nothing.
    import subprocess
    import sys

    run = load_run(mnli_run(tmp_path / "run"))
    out = tmp_path / "out"
    out.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import sys; from pathlib import Path; "
                              "from ftcli_trainer.storage import staging_for; "
                              "print(staging_for(Path(sys.argv[1]), 'ftcli-report'), flush=True); sys.stdin.read()",
                              str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        theirs = Path(other.stdout.readline().strip())
        assert theirs.parent == out and theirs.is_dir()  # the other report is drawing
        files = write_report(run, out)
        assert [f.name for f in files][0] == "report.md" and all(f.is_file() for f in files)
        assert theirs.is_dir()  # a live writer's staging is left alone
    finally:
        other.kill()
        other.wait()


def test_a_kept_best_step_is_said_and_drawn(tmp_path):
    # --keep-best: the model (and metrics.json's eval_*) are step 10's; the last step's metrics are beside them
    root = mnli_run(tmp_path / "run")
    metrics = json.loads((root / "model" / "metrics.json").read_text())
    metrics |= {"best_global_step": 10, "best_epoch": 1.0, "metric_for_best_model": "eval_accuracy",
                "best_metric": 0.5, "early_stopping": {"patience": 1, "threshold": 0.0, "stopped": True,
                                                       "evaluations_without_improvement": 1},
                "last_eval": {"global_step": 20, "epoch": 2.0, "eval_accuracy": 0.25, "eval_loss": 1.5,
                              "eval_macro_f1": 0.2}}
    (root / "model" / "metrics.json").write_text(json.dumps(metrics))
    run = load_run(root)
    files = write_report(run, tmp_path / "out")
    assert "learning_curves.png" in [f.name for f in files]
    md = (tmp_path / "out" / "report.md").read_text()
    assert ("The model is the weights of step 10 (epoch 1.00), the evaluation with the best accuracy (--keep-best): "
            "the metrics above are its own. The last step, 20, had accuracy 0.2500 · macro-F1 0.2000 · loss 1.5000. "
            "Stopped early (--early-stopping 1) at step 20, after 1 evaluation without improvement.") in md
    assert "| last_eval |" not in md and "early_stopping" not in md.split("Stopped early")[0]
    from ftcli.report import kept_line

    del metrics["best_global_step"]
    (root / "model" / "metrics.json").write_text(json.dumps(metrics))
    assert kept_line(load_run(root)) is None


def test_the_curve_beside_a_model_folder_is_drawn_only_when_it_is_its_own_runs(tmp_path):
    # A model folder copied beside another run's logs/ was reported with that run's learning curves as its own.
    root = mnli_run(tmp_path / "run")
    model = root / "model"
    rows = [json.loads(x) for x in (root / "logs" / "metrics.jsonl").read_text().splitlines()]
    last = {k: v for k, v in next(r for r in rows if r["type"] == "eval" and r["step"] == 20).items()
            if k.startswith("eval_")}
    own = json.loads((model / "metrics.json").read_text()) | last | {"eval_runtime": 2.5}  # (not compared)

    def loaded(metrics: dict):
        (model / "metrics.json").write_text(json.dumps(metrics))
        return load_run(model)

    run = loaded(own)
    assert run.curve_left_out is None and len(run.history) == 22
    # --keep-best: metrics.json's evaluation is the best step's; the last step's is its last_eval
    kept = own | {"eval_accuracy": 0.99, "eval_loss": 0.01, "best_global_step": 10,
                  "last_eval": {"global_step": 20, "epoch": 2.0, **last}}
    assert loaded(kept).curve_left_out is None
    # another run's curve: the same steps and other numbers, or another length
    run = loaded(own | {"eval_mismatched_loss": last["eval_mismatched_loss"] + 0.001})
    assert run.history == [] and run.curve_left_out == (
        f"the learning curves are left out: {root / 'logs' / 'metrics.jsonl'} is another run's (its evaluation at "
        "step 20 is not the one in this model's metrics.json)")
    names = [f.name for f in write_report(run, tmp_path / "out")]
    assert "learning_curves.png" not in names
    assert "The learning curves are left out: " in (tmp_path / "out" / "report.md").read_text()
    assert loaded(kept | {"last_eval": {**kept["last_eval"], "eval_accuracy": 0.5}}).history == []
    assert loaded(own | {"global_step": 30}).curve_left_out.endswith(
        "(that curve ends at step 20, and this model's run at step 30)")
    # the run folder itself: its logs/ is its own
    assert len(load_run(root).history) == 22
