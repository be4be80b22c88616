"""`ftcli report` on real runs: `ftcli local` with the tiny model, then the report of its folder (single-label,
multi-label, regression), and of a job against the GCS and JobService emulators."""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.cli.helpers import run_cli
from tests.conftest import sentiment_rows, shared_data, write_csv

pytest.importorskip("matplotlib")
pytest.importorskip("torch")

FTCLI = [sys.executable, "-c", "from ftcli.cli.app import main; main()"]
BUCKET = "ftcli-test"


def ftcli_local(cwd: Path, *args: str) -> Path:
    r = subprocess.run([*FTCLI, "local", *args, "--output-dir", "run"], capture_output=True, text=True, cwd=cwd,
                       timeout=600, env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr + r.stdout
    return cwd / "run"


@pytest.fixture(scope="module")
def single_run(tmp_path_factory, tiny_model) -> Path:
    d = tmp_path_factory.mktemp("single")
    write_csv(d / "train.csv", ["text", "label"], sentiment_rows(240, seed=1))
    write_csv(d / "test.csv", ["text", "label"], sentiment_rows(60, seed=2))
    return ftcli_local(d, "--task", "csv", "--train-file", "train.csv", "--eval-file", "test.csv", "--model",
                       str(tiny_model), "--epochs", "3", "--learning-rate", "3e-3", "--log-every", "2")


@pytest.fixture(scope="module")
def multi_label_run(tmp_path_factory, tiny_model) -> Path:
    d = tmp_path_factory.mktemp("multi")
    return ftcli_local(d, "--task", "csv", "--train-file", str(shared_data("jigsaw_toxic_sample", "train.csv")),
                       "--label-columns", "toxic,severe_toxic,obscene,threat,insult,identity_hate", "--model",
                       str(tiny_model), "--epochs", "1", "--max-length", "64")


@pytest.fixture(scope="module")
def regression_run(tmp_path_factory, tiny_model) -> Path:
    from tests.trainer.test_tasks import regression_rows

    d = tmp_path_factory.mktemp("regression")
    write_csv(d / "train.csv", ["sentence1", "sentence2", "label"], regression_rows(300, 1))
    write_csv(d / "dev.csv", ["sentence1", "sentence2", "label"], regression_rows(80, 2))
    return ftcli_local(d, "--task", "stsb", "--train-file", "train.csv", "--eval-file", "dev.csv", "--model",
                       str(tiny_model), "--epochs", "4", "--batch-size", "16", "--learning-rate", "3e-3")


def png_size(path: Path) -> tuple[int, int]:
    """A valid PNG's width and height (its signature, then the IHDR chunk)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR" and data[-8:-4] == b"IEND"
    return struct.unpack(">II", data[16:24])


def table(markdown: str, heading: str) -> dict[str, list[str]]:
    """The rows of the Markdown table under `## heading`: first cell -> the other cells."""
    section = markdown.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("|")][2:]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows}


def copy_run(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "run", ignore=shutil.ignore_patterns("report", "checkpoints")))


def test_report_of_a_local_single_label_run(capsys, single_run, tmp_path):
    from ftcli.report import fmt

    run = copy_run(single_run, tmp_path)
    r = run_cli(capsys, "report", str(run))
    assert r.code == 0, r.err
    report = run / "report"
    names = ["report.md", "learning_curves.png", "confusion_matrix.png"]
    assert r.out.splitlines() == [str(report / n) for n in names]  # the paths written, on stdout
    assert sorted(p.name for p in report.iterdir()) == sorted([*names, "ftcli-report.json"])
    w, h = png_size(report / "learning_curves.png")
    assert w >= 1000 and 250 <= h <= 700
    w, h = png_size(report / "confusion_matrix.png")
    assert 300 <= w <= 1200 and 300 <= h <= 1200
    assert (report / "learning_curves.png").stat().st_size > 10_000

    m = json.loads((run / "model" / "metrics.json").read_text())
    md = (report / "report.md").read_text()
    metrics = table(md, "Metrics")
    assert list(metrics)[:2] == ["accuracy", "macro_f1"] and "loss" in metrics
    for key, (cell,) in metrics.items():
        assert cell == fmt(m["eval_" + key]), key
        assert float(cell) == pytest.approx(m["eval_" + key], abs=5e-5)
    training = table(md, "Training")
    assert training["optimizer steps"] == [str(m["global_step"])]
    assert float(training["train loss"][0]) == pytest.approx(m["train_loss"], abs=5e-5)
    per_label = table(md, "Per label (eval)")
    assert per_label["positive"][-1] == str(m["eval_per_label"]["positive"]["support"])
    # the picture's counts come from the exported predictions, which agree with metrics.json
    with np.load(run / "model" / "eval_predictions.npz") as z:
        from ftcli_trainer.metrics import confusion_matrix

        assert confusion_matrix(z["eval/labels"], z["eval/predicted"], 2).tolist() == m["eval_confusion_matrix"]


def test_report_again_replaces_its_own_files_only(capsys, single_run, tmp_path):
    run = copy_run(single_run, tmp_path)
    assert run_cli(capsys, "report", str(run)).code == 0
    notes = run / "report" / "notes.txt"
    notes.write_text("mine")
    stale = run / "report" / "confusion_matrix-old.png"
    stale.write_bytes(b"x")
    manifest = json.loads((run / "report" / "ftcli-report.json").read_text())
    manifest["files"].append(stale.name)  # as if an earlier report had drawn another eval set
    (run / "report" / "ftcli-report.json").write_text(json.dumps(manifest))
    r = run_cli(capsys, "report", str(run), "--json")
    assert r.code == 0, r.err
    got = json.loads(r.out)
    assert got["report"] == str(run / "report") and [Path(f).name for f in got["files"]] == [
        "report.md", "learning_curves.png", "confusion_matrix.png"]
    assert notes.read_text() == "mine" and not stale.exists()


def test_a_folder_that_is_not_a_report_is_refused(capsys, single_run, tmp_path):
    run = copy_run(single_run, tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "learning_curves.png").write_bytes(b"my picture")
    r = run_cli(capsys, "report", str(run), "--out", str(mine))
    assert r.code == 2
    assert f"error: {mine} is not empty and holds no earlier ftcli report" in r.err and "Traceback" not in r.err
    assert sorted(p.name for p in mine.iterdir()) == ["learning_curves.png"]
    assert (mine / "learning_curves.png").read_bytes() == b"my picture"
    # an earlier report's folder where a user put a file with one of the report's names: refused too
    (mine / "ftcli-report.json").write_text(json.dumps({"ftcli_report": 1, "files": ["report.md"]}))
    r = run_cli(capsys, "report", str(run), "--out", str(mine))
    assert r.code == 2 and "learning_curves.png is not from the earlier report" in r.err
    assert (mine / "learning_curves.png").read_bytes() == b"my picture" and not (mine / "report.md").exists()


def test_report_of_a_multi_label_run_draws_f1_bars(capsys, multi_label_run, tmp_path):
    from ftcli.report import fmt

    run = copy_run(multi_label_run, tmp_path)
    out = tmp_path / "elsewhere" / "report"
    r = run_cli(capsys, "report", str(run), "--out", str(out))
    assert r.code == 0, r.err
    assert sorted(p.name for p in out.iterdir()) == ["ftcli-report.json", "learning_curves.png", "per_label_f1.png",
                                                      "report.md"]
    w, h = png_size(out / "per_label_f1.png")
    assert w >= 500 and h >= 250
    m = json.loads((run / "model" / "metrics.json").read_text())
    md = (out / "report.md").read_text()
    assert list(table(md, "Metrics"))[:2] == ["micro_f1", "macro_f1"]
    per_label = table(md, "Per label (eval)")
    assert set(per_label) == set(m["eval_per_label"])
    assert per_label["toxic"] == [fmt(m["eval_per_label"]["toxic"][k]) for k in ("precision", "recall", "f1",
                                                                               "support")]


def test_report_of_a_regression_run_draws_predicted_against_true(capsys, regression_run, tmp_path):
    from ftcli.report import fmt

    run = copy_run(regression_run, tmp_path)
    r = run_cli(capsys, "report", str(run))
    assert r.code == 0, r.err
    names = sorted(p.name for p in (run / "report").iterdir())
    assert names == ["ftcli-report.json", "learning_curves.png", "predicted_vs_true.png", "report.md"]
    w, h = png_size(run / "report" / "predicted_vs_true.png")
    assert 400 <= w <= 900 and 400 <= h <= 900
    m = json.loads((run / "model" / "metrics.json").read_text())
    metrics = table((run / "report" / "report.md").read_text(), "Metrics")
    assert list(metrics)[:3] == ["pearson", "spearmanr", "mse"]
    for key in ("pearson", "spearmanr", "mse", "loss"):
        assert metrics[key] == [fmt(m["eval_" + key])]
    assert m["eval_pearson"] > 0.5  # it learnt something the picture shows


def test_a_model_folder_alone_gives_the_pictures_it_can(capsys, single_run, tmp_path):
    model = Path(shutil.copytree(single_run / "model", tmp_path / "downloaded"))
    r = run_cli(capsys, "report", str(model))
    assert r.code == 0, r.err
    assert sorted(p.name for p in (tmp_path / "downloaded-report").iterdir()) == [
        "confusion_matrix.png", "ftcli-report.json", "report.md"]  # beside the model folder, never inside it


@pytest.mark.parametrize("setup,needle", [
    (lambda p: p.mkdir(), "is not an ftcli run folder"),
    (lambda p: (p / "logs").mkdir(parents=True), "holds no metrics yet"),
])
def test_not_a_run_is_one_line(capsys, tmp_path, setup, needle):
    setup(tmp_path / "x")
    r = run_cli(capsys, "report", str(tmp_path / "x"))
    assert r.code == 2 and needle in r.err and "Traceback" not in r.err
    assert not (tmp_path / "x" / "report").exists()


def test_without_matplotlib_one_line_names_the_install(capsys, single_run, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    run = copy_run(single_run, tmp_path)
    r = run_cli(capsys, "report", str(run))
    assert r.code == 1
    assert r.err.strip() == ("error: ftcli report draws with matplotlib, which is not installed: "
                             "pip install 'ftcli[report]'")
    assert not (run / "report").exists()


def test_open_shows_the_pictures_where_a_viewer_exists(capsys, single_run, tmp_path, monkeypatch):
    run = copy_run(single_run, tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "opened.txt"
    viewer = bin_dir / "xdg-open"
    viewer.write_text(f"#!/bin/sh\necho \"$1\" >> {seen}\n")
    viewer.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setattr(sys, "platform", "linux")
    r = run_cli(capsys, "report", str(run), "--open")
    assert r.code == 0, r.err
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(seen.read_text().splitlines() if seen.exists() else []) < 2:
        time.sleep(0.05)
    assert sorted(seen.read_text().splitlines()) == sorted(str(run / "report" / n) for n in
                                                           ("learning_curves.png", "confusion_matrix.png"))
    monkeypatch.delenv("DISPLAY")
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    r = run_cli(capsys, "report", str(run), "--open")
    assert r.code == 0
    assert f"--open: no display here (DISPLAY is not set); the files are in {run / 'report'}" in r.err


def test_help_does_not_import_matplotlib():
    code = ("import sys\nfrom ftcli.cli.app import app\n"
            "for argv in (['--help'], ['report', '--help']):\n"
            "    try:\n        app(argv)\n    except SystemExit:\n        pass\n"
            "heavy = [m for m in ('matplotlib', 'torch') if m in sys.modules]\nassert not heavy, heavy\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "report" in r.stdout


# -- a job's run, from the emulated Vertex and Cloud Storage ---------------------------------------------------


def seed_run(gcs, prefix: str, run: Path) -> None:
    """What a finished job leaves under its base output directory (the trainer's model/ and logs/ files)."""
    bucket = gcs.client().bucket(BUCKET)
    for rel in ("model/metrics.json", "model/eval_predictions.npz", "model/config.json", "model/ftcli_run.json",
                "model/model.safetensors", "model/_COMPLETE", "logs/metrics.jsonl"):
        bucket.blob(f"{prefix}{rel}").upload_from_string((run / rel).read_bytes())


def test_report_of_a_job(capsys, cloud_env, single_run, tmp_path, monkeypatch):
    from tests.cli.test_models import make_job

    gcs, vertex = cloud_env
    monkeypatch.chdir(tmp_path)
    name = make_job(vertex, "sst2", f"gs://{BUCKET}/team/ftcli/runs/sst2-1/")
    seed_run(gcs, "team/ftcli/runs/sst2-1/", single_run)
    job_id = name.rsplit("/", 1)[-1]
    r = run_cli(capsys, "report", name)
    assert r.code == 0, r.err
    out = Path("ftcli-reports") / job_id
    assert r.out.splitlines() == [str(out / n) for n in ("report.md", "learning_curves.png", "confusion_matrix.png")]
    png_size(out / "confusion_matrix.png")
    md = (out / "report.md").read_text()
    assert md.startswith(f"# ftcli report: job {name} ({job_id})")
    m = json.loads((single_run / "model" / "metrics.json").read_text())
    assert table(md, "Metrics")["accuracy"] == [f"{m['eval_accuracy']:.4f}"]
    assert not list(tmp_path.glob("ftcli-report-*"))  # the downloaded files were temporary


def test_report_of_a_running_job_draws_the_curve_so_far(capsys, cloud_env, single_run, tmp_path, monkeypatch):
    """A running job has no model yet, only the logs the trainer copies to the bucket as it goes."""
    from tests.cli.test_models import make_job

    gcs, vertex = cloud_env
    monkeypatch.chdir(tmp_path)
    name = make_job(vertex, "running", f"gs://{BUCKET}/team/ftcli/runs/running-2/")
    rows = (single_run / "logs" / "metrics.jsonl").read_text().splitlines()
    half = "".join(r + "\n" for r in rows[: len(rows) // 2])
    gcs.client().bucket(BUCKET).blob("team/ftcli/runs/running-2/logs/metrics.jsonl").upload_from_string(half)
    r = run_cli(capsys, "report", name, "--out", "rep")
    assert r.code == 0, r.err
    assert "rep/learning_curves.png" in r.out.splitlines()
    png_size(Path("rep") / "learning_curves.png")


def test_a_job_without_metrics_yet_says_so(capsys, cloud_env, tmp_path, monkeypatch):
    from tests.cli.test_models import make_job

    gcs, vertex = cloud_env
    monkeypatch.chdir(tmp_path)
    name = make_job(vertex, "running", f"gs://{BUCKET}/team/ftcli/runs/running-1/")
    r = run_cli(capsys, "report", name, "--out", "rep")
    assert r.code == 1
    assert re.search(r"error: gs://ftcli-test/team/ftcli/runs/running-1/ holds no metrics yet; the job is \w+", r.err)
    assert "ftcli logs" in r.err and not Path("rep").exists()


def test_predict_on_a_multi_label_model_follows_the_threshold(capsys, multi_label_run):
    model = str(multi_label_run / "model")
    everything = run_cli(capsys, "predict", model, "you are toxic", "--threshold", "0.000001", "--json")
    assert everything.code == 0, everything.err
    assert len(json.loads(everything.out)["labels"]) == 6
    nothing = run_cli(capsys, "predict", model, "you are toxic", "--threshold", "1", "--json")
    assert nothing.code == 0 and json.loads(nothing.out)["labels"] == []


def test_a_model_folders_report_is_written_beside_it_never_inside(capsys, single_run, tmp_path):
    # `ftcli report RUN/model` wrote into RUN/model/report, which the next export replaced whole.
    run = copy_run(single_run, tmp_path)
    r = run_cli(capsys, "report", str(run / "model"), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["report"] == str(run / "report") and not (run / "model" / "report").exists()
    alone = Path(shutil.copytree(run / "model", tmp_path / "downloaded"))  # ftcli download's folder: no run
    r = run_cli(capsys, "report", str(alone), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["report"] == str(tmp_path / "downloaded-report")
    assert sorted(p.name for p in alone.iterdir()) == sorted(p.name for p in (run / "model").iterdir())
