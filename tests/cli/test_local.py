"""`ftcli local` through the real console entry point (a child process, as a user runs it)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FTCLI = [sys.executable, "-c", "from ftcli.cli.app import main; main()"]


def ftcli(*args, cwd=None, env=None):
    return subprocess.run([*FTCLI, *args], capture_output=True, text=True, cwd=cwd, timeout=600,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def test_bad_options_listed_at_once_no_traceback(tmp_path):
    r = ftcli("local", "--epochs", "0", "--batch-size", "-1", "--task", "csv", cwd=tmp_path)
    assert r.returncode == 2
    assert "3 problems with the trainer options" in r.stderr
    for needle in ("--epochs must be positive", "--batch-size must be positive", "needs --train-file"):
        assert needle in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "ftcli-runs").exists()


def test_closed_choices_are_checked(tmp_path):
    r = ftcli("local", "--precision", "fp8", cwd=tmp_path)
    assert r.returncode == 2 and "fp8" in r.stderr and "Traceback" not in r.stderr


def test_local_run_uses_vertex_layout(tmp_path, tiny_model, sentiment_csv):
    train, test = sentiment_csv
    r = ftcli("local", "--task", "csv", "--train-file", str(train), "--eval-file", str(test),
              "--model", str(tiny_model), "--epochs", "2", "--learning-rate", "3e-3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr + r.stdout
    runs = list((tmp_path / "ftcli-runs").iterdir())
    assert len(runs) == 1
    run = runs[0]
    assert f"run folder: {Path('ftcli-runs') / run.name}" in r.stdout
    assert (run / "model" / "_COMPLETE").exists() and (run / "logs" / "metrics.jsonl").exists()
    assert list((run / "checkpoints").glob("step-*"))
    metrics = json.loads((run / "model" / "metrics.json").read_text())
    assert metrics["eval_accuracy"] > 0.6
    # the summary block and per-step lines come from the trainer, unchanged
    assert "ftcli trainer" in r.stdout and "examples    train 240" in r.stdout


def test_trainer_failure_is_reported_with_exit_code(tmp_path, tiny_model):
    bad = tmp_path / "bad.csv"
    bad.write_text("sentence,label\nx,1\n")
    r = ftcli("local", "--task", "csv", "--train-file", str(bad), "--model", str(tiny_model), cwd=tmp_path)
    assert r.returncode == 2
    assert "has no column 'text'" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("argv", [["--help"], ["local", "--help"]])
def test_help_is_light(argv):
    code = ("import sys\nfrom ftcli.cli.app import app\n"
            f"try:\n    app({argv!r})\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'transformers', 'google.cloud.aiplatform', 'google.cloud.storage') "
            "if m in sys.modules]\nassert not heavy, heavy\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Usage" in r.stdout
