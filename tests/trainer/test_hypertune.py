"""The tuning metric report: cloudml-hypertune's file format, written at each evaluation of a real run."""

import json
import os

import pytest

from ftcli_trainer.config import ConfigError, parse_args
from ftcli_trainer.hypertune import Reporter


def test_reporter_writes_cloudml_hypertunes_format(tmp_path):
    path = tmp_path / "hypertune" / "output.metrics"
    report = Reporter("eval_accuracy", env={"CLOUD_ML_HP_METRIC_FILE": str(path), "CLOUD_ML_TRIAL_ID": "7"})
    report(10, {"eval_accuracy": 0.75, "eval_loss": 0.5})
    report(20, {"eval_accuracy": 0.8125})
    report(30, {"eval_accuracy": float("nan")})  # not reported: a NaN cannot be ranked
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(e["trial"], e["eval_accuracy"], e["global_step"]) for e in lines] == [("7", "0.75", "10"),
                                                                                    ("7", "0.8125", "20")]
    assert all(isinstance(e["timestamp"], float) for e in lines)


def test_reporter_keeps_the_last_hundred(tmp_path):
    report = Reporter("eval_loss", env={"CLOUD_ML_HP_METRIC_FILE": str(tmp_path / "m")})
    for step in range(150):
        report(step, {"eval_loss": 1.0 / (step + 1)})
    lines = (tmp_path / "m").read_text().splitlines()
    assert len(lines) == 100 and json.loads(lines[0])["global_step"] == "50"
    assert json.loads(lines[-1])["trial"] == "0"


def test_the_tuning_services_spelling_of_options_is_accepted():
    # Vertex appends a trial's values as `--PARAMETER_ID VALUE`; the last value wins over the job's own
    cfg = parse_args(["--learning-rate", "2e-5", "--batch-size", "16", "--learning_rate", "3e-5", "--batch_size=32"])
    assert cfg.learning_rate == 3e-5 and cfg.batch_size == 32


def test_hypertune_metric_must_name_an_eval_metric():
    assert parse_args(["--hypertune-metric", "eval_macro_f1"]).hypertune_metric == "eval_macro_f1"
    with pytest.raises(ConfigError) as info:
        parse_args(["--hypertune-metric", "accuracy"])
    assert "is not an eval metric" in info.value.problems[0]


def test_a_local_run_reports_at_each_evaluation(tmp_path, monkeypatch, sentiment_csv, tiny_model):
    from ftcli_trainer.task import main

    metrics = tmp_path / "hp" / "output.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(metrics))
    monkeypatch.setenv("CLOUD_ML_TRIAL_ID", "3")
    train, test = sentiment_csv
    code = main(["--task", "csv", "--train-file", str(train), "--eval-file", str(test), "--model", str(tiny_model),
                 "--epochs", "2", "--batch-size", "16", "--output-dir", str(tmp_path / "run"),
                 "--hypertune-metric", "eval_accuracy"])
    assert code == 0
    lines = [json.loads(x) for x in metrics.read_text().splitlines()]
    assert len(lines) == 2 and {e["trial"] for e in lines} == {"3"}  # one report per epoch's evaluation
    final = json.loads((tmp_path / "run" / "model" / "metrics.json").read_text())
    assert float(lines[-1]["eval_accuracy"]) == pytest.approx(final["eval_accuracy"])


def test_whole_doubles_are_accepted_for_whole_number_options():
    # a discrete value reaches the trial as a double: "16.0" is 16; "16.5" is still refused
    assert parse_args(["--batch_size", "16.0"]).batch_size == 16
    with pytest.raises(ConfigError) as info:
        parse_args(["--batch-size", "16.5"])
    assert "--batch-size must be a whole number, got '16.5'" in info.value.problems


def test_the_report_follows_no_link_another_user_put_in_its_folder(tmp_path):
    # The default folder, /tmp/hypertune, is shared: its fixed temporary name (output.tmp) was written
    # through a link that anyone could place there first, overwriting the file it pointed at.
    folder = tmp_path / "hypertune"
    folder.mkdir()
    mine = tmp_path / "bashrc"
    mine.write_text("export PATH=$HOME/bin:$PATH\n")
    (folder / "output.tmp").symlink_to(mine)
    report = Reporter("eval_accuracy", env={"CLOUD_ML_HP_METRIC_FILE": str(folder / "output.metrics")})
    report(10, {"eval_accuracy": 0.75})
    assert mine.read_text() == "export PATH=$HOME/bin:$PATH\n"
    assert not (folder / "output.metrics").is_symlink()
    assert json.loads((folder / "output.metrics").read_text())["eval_accuracy"] == "0.75"
    assert sorted(p.name for p in folder.iterdir()) == ["output.metrics", "output.tmp"]  # no temp left
    mask = os.umask(0)
    os.umask(mask)
    assert (folder / "output.metrics").stat().st_mode & 0o777 == 0o666 & ~mask  # as open() makes it, not 0600
