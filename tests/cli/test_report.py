"""`ftcli report` on real runs: `ftcli local` with the tiny model, then the report of its folder (single-label,
multi-label, regression), and of a job against the GCS and JobService emulators."""

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.cli.helpers import run_cli
from tests.conftest import files_of_at_most, sentiment_rows, shared_data, write_csv

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




def test_a_report_folder_that_is_a_link_to_a_folder_is_written_there(capsys, single_run, tmp_path):
    # It was refused as "not a folder" (run/report linked to a shared folder, or --out such a link)
    run = copy_run(single_run, tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    (run / "report").symlink_to(shared)
    r = run_cli(capsys, "report", str(run))
    assert r.code == 0, r.err
    assert (run / "report").is_symlink() and sorted(p.name for p in shared.iterdir()) == [
        "confusion_matrix.png", "ftcli-report.json", "learning_curves.png", "report.md"]
    assert run_cli(capsys, "report", str(run)).code == 0  # an earlier report's, there: replaced
    assert len(list(shared.iterdir())) == 4

    (tmp_path / "nowhere").symlink_to(tmp_path / "gone")
    r = run_cli(capsys, "report", str(run), "--out", str(tmp_path / "nowhere"))
    assert r.code == 2 and "Traceback" not in r.err
    assert r.err.startswith(f"error: {tmp_path / 'nowhere'} is a link to {tmp_path / 'gone'}, which does not exist")
    assert not (tmp_path / "gone").exists() and os.readlink(tmp_path / "nowhere") == str(tmp_path / "gone")
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]

def test_a_full_disk_names_the_report_folder_and_keeps_the_earlier_report(capsys, single_run, tmp_path):
    # A failed write names no file: "error: No space left on device; free some space on that disk" named no disk.
    run = copy_run(single_run, tmp_path)
    assert run_cli(capsys, "report", str(run)).code == 0
    earlier = {p.name: p.read_bytes() for p in (run / "report").iterdir()}
    with files_of_at_most(5000):  # the pictures are larger
        r = run_cli(capsys, "report", str(run))
    assert r.code == 1 and "Traceback" not in r.err
    assert r.err.splitlines()[0] == (f"error: cannot use {run / 'report'}: File too large; the file is larger than "
                                     "that file system or `ulimit -f` allows: use another disk, then run again")
    assert {p.name: p.read_bytes() for p in (run / "report").iterdir()} == earlier  # no staging folder left either

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
    # in the data's (the model's) order, table and bars: metrics.json's sorted keys listed them alphabetically
    columns = ["toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate"]
    assert list(m["eval_per_label"]) == sorted(columns) and list(per_label) == columns
    from ftcli.report import _plan, load_run

    (bars,) = [p for p in _plan(load_run(run)) if p.name == "per_label_f1.png"]
    assert bars.draw.args[-1] == columns  # the labels drawn, top to bottom
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
    # a plain save_pretrained folder (another tool's model) was said to hold "no metrics yet", as a run not yet begun
    (lambda p: (p.mkdir(), (p / "config.json").write_text('{"model_type": "bert"}')),
     "is a model folder without ftcli's metrics (no metrics.json, no ftcli_run.json)"),
])
def test_not_a_run_is_one_line(capsys, tmp_path, setup, needle):
    setup(tmp_path / "x")
    r = run_cli(capsys, "report", str(tmp_path / "x"))
    assert r.code == 2 and needle in r.err and "Traceback" not in r.err
    assert not (tmp_path / "x" / "report").exists()


@pytest.mark.parametrize("command", ["report", "predict"])
def test_a_name_that_is_neither_a_folder_nor_a_job_is_said_so(capsys, tmp_path, monkeypatch, command):
    # `ftcli report TYPO` said only "not a job reference", and a file given for the folder "no such folder"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("x")
    for given, said in (("TYPO", "'TYPO': no such folder"), ("notes.txt", "'notes.txt' is a file, not a folder")):
        r = run_cli(capsys, command, given, *(["a text"] if command == "predict" else []))
        assert r.code == 2 and r.err.startswith(f"error: {said}, and not a job reference\n"), r.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_folder_named_like_a_job_reference_is_used_and_said_to_be(capsys, single_run, tmp_path, monkeypatch):
    # `ftcli download 4 ./last`, then `ftcli predict last ...` answered from that folder, not the last job, silently
    import shutil

    monkeypatch.chdir(tmp_path)
    shutil.copytree(single_run, tmp_path / "last")
    r = run_cli(capsys, "report", "last")
    assert r.code == 0, r.err
    said = "'last' is a folder here, so that folder is used; for a job, give its numeric id or resource name"
    assert said in r.err.replace("\n", " ")
    r = run_cli(capsys, "predict", "last/model", "a good film")
    assert r.code == 0 and "is a folder here" not in r.err  # no job reference looks like that
    shutil.copytree(single_run / "model", tmp_path / "3")
    r = run_cli(capsys, "predict", "3", "a good film")
    assert r.code == 0 and "'3' is a folder here, so that folder is used" in r.err.replace("\n", " ")


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


def test_a_home_that_cannot_be_written_gets_no_matplotlib_warnings(single_run, tmp_path):
    # A container's user with no writable home: matplotlib printed "mkdir -p failed for path ..." and "Matplotlib
    # created a temporary cache directory ..." among ftcli's lines.
    run = copy_run(single_run, tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME")}
    (tmp_path / "tmp").mkdir()
    env.update(HOME="/proc/nohome", FTCLI_STATE_DIR=str(tmp_path / "state"), TMPDIR=str(tmp_path / "tmp"))
    r = subprocess.run([sys.executable, "-m", "ftcli.cli", "report", str(run), "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "matplotlib" not in r.stderr.lower(), r.stderr
    assert (tmp_path / "out" / "report.md").exists()
    assert list((tmp_path / "tmp").iterdir()) == []  # the folder given to matplotlib went at exit


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
    assert md.startswith(f"# ftcli report: job {job_id}\n")
    m = json.loads((single_run / "model" / "metrics.json").read_text())
    assert table(md, "Metrics")["accuracy"] == [f"{m['eval_accuracy']:.4f}"]
    assert not list(tmp_path.glob("ftcli-report-*"))  # the downloaded files were temporary



def test_a_full_disk_under_a_jobs_files_names_the_temporary_folder(capsys, cloud_env, single_run, tmp_path,
                                                                   monkeypatch):
    # A job's files are read into a temporary folder first; a full disk there said only "No space left on device"
    from tests.cli.test_models import make_job

    gcs, vertex = cloud_env
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again
    (tmp_path / "tmp").mkdir()
    name = make_job(vertex, "sst2", f"gs://{BUCKET}/team/ftcli/runs/sst2-1/")
    seed_run(gcs, "team/ftcli/runs/sst2-1/", single_run)
    with files_of_at_most(100):  # metrics.jsonl is larger
        r = run_cli(capsys, "report", name)
    assert r.code == 1 and "Traceback" not in r.err
    assert r.err.splitlines()[0] == (f"error: cannot use {tmp_path / 'tmp'}: File too large; the file is larger than "
                                     "that file system or `ulimit -f` allows: use another disk, then run again")
    assert list((tmp_path / "tmp").iterdir()) == [] and not Path("ftcli-reports").exists()

def test_a_job_report_names_the_job_by_its_short_id_not_by_the_reference_given(capsys, cloud_env, single_run, tmp_path,
                                                                                monkeypatch):
    # `ftcli report last` wrote "# ftcli report: job last (ID)" into report.md: a title that names another job as
    # soon as the next one is submitted.
    from ftcli import history
    from tests.cli.test_models import make_job

    gcs, vertex = cloud_env
    monkeypatch.chdir(tmp_path)
    name = make_job(vertex, "sst2", f"gs://{BUCKET}/team/ftcli/runs/sst2-2/")
    seed_run(gcs, "team/ftcli/runs/sst2-2/", single_run)
    n = history.record(name, "sst2", project="test-project", region="us-central1")
    job_id = name.rsplit("/", 1)[-1]
    r = run_cli(capsys, "report", "last")
    assert r.code == 0, r.err
    md = (Path("ftcli-reports") / job_id / "report.md").read_text()
    assert md.splitlines()[0] == f"# ftcli report: job {n} ({job_id})"


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


@pytest.mark.parametrize("state", ["FAILED", "CANCELLED", "SUCCEEDED"])
def test_an_ended_job_without_metrics_is_not_said_to_have_none_yet(capsys, cloud_env, tmp_path, monkeypatch, state):
    # A job that failed before its first evaluation was reported as "holds no metrics yet", with a hint to wait for
    # the learning curve to reach the bucket in 2 minutes: it never will.
    from tests.cli.test_models import make_job

    gcs, vertex = cloud_env
    monkeypatch.chdir(tmp_path)
    name = make_job(vertex, "failed", f"gs://{BUCKET}/team/ftcli/runs/failed-1/")
    vertex.set_state(name, state)
    r = run_cli(capsys, "report", name, "--out", "rep")
    assert r.code == 1
    assert r.err.splitlines() == [
        f"error: gs://ftcli-test/team/ftcli/runs/failed-1/ holds no metrics, and the job has ended ({state}): nothing "
        "more will come",
        f"hint: its logs say why: ftcli logs {name}"]
    assert not Path("rep").exists()


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


def test_a_model_folder_beside_another_runs_logs_is_reported_without_that_curve(capsys, single_run, tiny_model,
                                                                                tmp_path):
    # A model folder copied into another run's folder (the same command again with another seed: as many steps)
    # was reported with that run's learning curves as its own, and its report written over that run's report/.
    data = single_run.parent
    other = ftcli_local(tmp_path, "--task", "csv", "--train-file", str(data / "train.csv"), "--eval-file",
                        str(data / "test.csv"), "--model", str(tiny_model), "--epochs", "3", "--learning-rate",
                        "3e-3", "--log-every", "2", "--seed", "7")
    assert run_cli(capsys, "report", str(other)).code == 0
    theirs = (other / "report" / "report.md").read_text()
    mine = Path(shutil.copytree(single_run / "model", other / "mine"))
    r = run_cli(capsys, "report", str(mine), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["report"] == str(other / "mine-report")
    step = json.loads((mine / "metrics.json").read_text())["global_step"]
    assert json.loads((other / "model" / "metrics.json").read_text())["global_step"] == step
    said = " ".join(r.err.split())
    assert (f"the learning curves are left out: {other / 'logs' / 'metrics.jsonl'} is another run's (its "
            f"evaluation at step {step} is not the one in this model's metrics.json)") in said
    assert sorted(p.name for p in (other / "mine-report").iterdir()) == [
        "confusion_matrix.png", "ftcli-report.json", "report.md"]
    assert (other / "report" / "report.md").read_text() == theirs  # that run's report, as it was
    # in its own run folder, the model folder's curve is drawn
    run = copy_run(single_run, tmp_path / "own")
    r = run_cli(capsys, "report", str(run / "model"))
    assert r.code == 0 and "left out" not in r.err
    assert (run / "report" / "learning_curves.png").is_file()


def test_a_model_folder_given_as_dot_from_inside_it_is_reported_beside_it_too(capsys, single_run, tmp_path,
                                                                            monkeypatch):
    # `cd RUN/model && ftcli report .` wrote ./model-report, inside the model folder the next export replaces whole
    # (Path(".").parent is "."); a downloaded model folder the same: its report landed inside it.
    run = copy_run(single_run, tmp_path)
    monkeypatch.chdir(run / "model")
    r = run_cli(capsys, "report", ".", "--json")
    assert r.code == 0, r.err
    assert Path(json.loads(r.out)["report"]).resolve() == run / "report" and not list(Path().glob("*report*"))
    alone = Path(shutil.copytree(single_run / "model", tmp_path / "downloaded"))
    monkeypatch.chdir(alone)
    r = run_cli(capsys, "report", ".", "--json")
    assert r.code == 0, r.err
    assert Path(json.loads(r.out)["report"]).resolve() == tmp_path / "downloaded-report"
    assert sorted(p.name for p in alone.iterdir()) == sorted(p.name for p in (single_run / "model").iterdir())


# -- many labels: a bounded picture, every label in the tables -------------------------------------------------

# The child's own peak is VmHWM (its address space's high-water mark). getrusage's ru_maxrss is not: Linux carries
# the parent's peak into a child started by vfork/posix_spawn + exec, so under a full pytest run (torch loaded,
# ~1 GB) it read 1000.9 MiB for a report that peaks near 380 MiB.
REPORT_WITH_PEAK_RSS = ("import sys\nfrom ftcli.cli.app import main\ntry:\n    main()\nfinally:\n"
                        "    hwm = next(x for x in open('/proc/self/status') if x.startswith('VmHWM:'))\n"
                        "    print('peak_rss_kib', hwm.split()[1], file=sys.stderr)")


def many_labels_run(root: Path, k: int, multi_label: bool = False, n: int = 4000, threshold: float | None = None,
                    label_names: list[str] | None = None) -> tuple[Path, list[str]]:
    """A finished run with `k` labels as the trainer leaves it (its own metrics and prediction arrays), written
    directly (training a 1000-label model would take minutes); return it and the labels, most support first. A
    multi-label run's `threshold`, when given, is its F1s' and its config.json's (ftcli_threshold), as the trainer
    saves it."""
    from ftcli_trainer.export import prediction_arrays
    from ftcli_trainer.metrics import multi_label as multi_label_metrics
    from ftcli_trainer.metrics import single_label

    rng = np.random.default_rng(7)
    names = [f"label-{i:04d}" for i in range(k)]
    weight = np.empty(k)
    weight[rng.permutation(k)] = 1.0 / np.arange(1, k + 1)  # Zipf: a few frequent labels, a long tail
    names[int(weight.argmax())] = "a label whose name is far too long for the axis of a picture"  # shortened there
    names = label_names or names
    if multi_label:
        truth = (rng.random((n, k)) < np.clip(weight * 3, 0, 0.9)).astype(np.float32)
        logits = np.where(rng.random((n, k)) < 0.8, truth * 4 - 2, 2 - truth * 4).astype(np.float32)
        metrics = multi_label_metrics(logits, truth, names, 0.5 if threshold is None else threshold)
        support = truth.sum(axis=0)
    else:
        truth = rng.choice(k, size=n, p=weight / weight.sum())
        predicted = np.where(rng.random(n) < 0.7, truth, rng.integers(0, k, n))
        logits = np.zeros((n, k), dtype=np.float32)
        logits[np.arange(n), predicted] = 1.0
        metrics = single_label(logits, truth, names)
        support = np.bincount(truth, minlength=k)
    model, logs = root / "model", root / "logs"
    model.mkdir(parents=True)
    logs.mkdir()
    final = {f"eval_{key}": v for key, v in metrics.items()} | {"eval_loss": 1.5, "global_step": 40, "epoch": 2.0,
                                                                  "train_loss": 2.0, "device": "cpu"}
    (model / "metrics.json").write_text(json.dumps(final))
    problem = "multi_label_classification" if multi_label else "single_label_classification"
    saved = {"ftcli_threshold": threshold} if multi_label and threshold is not None else {}
    (model / "config.json").write_text(json.dumps({"problem_type": problem, **saved,
                                                   "id2label": {str(i): x for i, x in enumerate(names)}}))
    (model / "ftcli_run.json").write_text(json.dumps({"task": "csv", "model": "tiny"}))
    np.savez_compressed(model / "eval_predictions.npz", **prediction_arrays(
        {"eval": (truth, logits)}, names, multi_label, False, 0.5 if threshold is None else threshold))
    rows = [{"type": "train", "step": s, "epoch": s / 20, "loss": 3 - s / 20, "learning_rate": 1e-4} for s in
            range(1, 41)] + [{"type": "eval", "step": s, "epoch": s / 20, "eval_loss": 2 - s / 40} for s in (20, 40)]
    (logs / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    top = [names[i] for i in np.argsort(-support, kind="stable")]
    return root, top


def test_the_peak_memory_probe_measures_the_child_not_the_process_that_started_it():
    # ru_maxrss read 1000.9 MiB in CI for a ~380 MiB report: the pytest process's own peak, carried through exec.
    held = np.ones(700 * 2**20, dtype=np.uint8)  # this process now peaks above 700 MiB
    r = subprocess.run([sys.executable, "-c", REPORT_WITH_PEAK_RSS, "--version"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    peak_mib = int(re.search(r"peak_rss_kib (\d+)", r.stderr).group(1)) / 1024
    assert 5 < peak_mib < 300 and held.sum() == held.size, peak_mib


@pytest.mark.parametrize("multi_label", [False, True], ids=["confusion_matrix", "per_label_f1"])
def test_a_run_with_1000_labels_draws_the_most_frequent_in_bounded_memory(tmp_path, multi_label):
    # 1000 labels asked for a 55,000-pixel square confusion matrix: 24 GB, killed by the OOM killer (200: 3.5 GB
    # and an unreadable 8946x8165 picture); the F1 bars grew the same way.
    from ftcli.report import MAX_DRAWN

    run, top = many_labels_run(tmp_path / "run", 1000, multi_label)
    picture = "per_label_f1.png" if multi_label else "confusion_matrix.png"
    started = time.monotonic()
    r = subprocess.run([sys.executable, "-c", REPORT_WITH_PEAK_RSS, "report", str(run)], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "COLUMNS": "300"})
    took = time.monotonic() - started
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [str(run / "report" / n) for n in ("report.md", "learning_curves.png", picture)]
    peak_mib = int(re.search(r"peak_rss_kib (\d+)", r.stderr).group(1)) / 1024
    assert peak_mib < 1000 and took < 90, (peak_mib, took)
    w, h = png_size(run / "report" / picture)
    assert 500 <= w <= 2600 and 300 <= h <= 2600, (w, h)
    # what the picture leaves out: said on stderr, and report.md names the labels drawn, most support first
    drawn = top[:MAX_DRAWN]
    if multi_label:
        said = f"{picture} draws the {MAX_DRAWN} labels with the most support of 1,000"
    else:
        # the list of the labels drawn followed 'the other 970 are pooled in its last row and column, "other":',
        # where it read as the pooled labels
        said = (f'{picture} pools the 970 least frequent of 1,000 true labels in its last row and column, "other", '
                f"and draws the {MAX_DRAWN} most frequent (by support)")
    assert said in " ".join(r.stderr.split()) and "report.md lists them" in " ".join(r.stderr.split())
    md = (run / "report" / "report.md").read_text()
    note = md.split(f"![{picture[:-4].replace('_', ' ')}]({picture})\n\n", 1)[1].split("\n", 1)[0]
    assert note.startswith(said) and note.endswith('Every label is in "Per label (eval)" above.')
    assert re.findall(r"`([^`]+)`", note) == drawn
    # the tables keep every label, one line each
    m = json.loads((run / "model" / "metrics.json").read_text())
    per_label = table(md, "Per label (eval)")
    assert list(per_label) == list(m["eval_per_label"]) and len(per_label) == 1000
    assert len(md.splitlines()) < 1100


def test_report_json_gives_a_multi_label_runs_threshold_and_null_for_others(capsys, tmp_path):
    # report.md said a multi-label run's threshold beside its F1s; --json listed the files alone, so a script read
    # the F1s without knowing which threshold they were at
    run, _ = many_labels_run(tmp_path / "multi", 4, multi_label=True, n=200, threshold=0.3)
    r = run_cli(capsys, "report", str(run), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out) == {"report": str(run / "report"), "threshold": 0.3, "files": [
        str(run / "report" / n) for n in ("report.md", "learning_curves.png", "per_label_f1.png")]}
    assert "| threshold | 0.3000 |" in (run / "report" / "report.md").read_text()  # the same number
    run, _ = many_labels_run(tmp_path / "single", 4, n=200)
    r = run_cli(capsys, "report", str(run), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["threshold"] is None


def test_a_run_at_the_limit_draws_every_label(capsys, tmp_path):
    from ftcli.report import MAX_DRAWN

    run, _ = many_labels_run(tmp_path / "run", MAX_DRAWN, n=600)
    r = run_cli(capsys, "report", str(run))
    assert r.code == 0, r.err
    assert "draws the" not in r.err and "draws the" not in (run / "report" / "report.md").read_text()
    w, h = png_size(run / "report" / "confusion_matrix.png")
    assert w <= 2600 and h <= 2600


def test_labels_the_font_cannot_draw_are_one_line_not_a_warning_per_character(tmp_path):
    # A multilingual classifier's labels in Japanese: matplotlib's font (DejaVu Sans) has no CJK characters, and
    # the report printed one raw 'UserWarning: Glyph 12509 (\\N{KATAKANA LETTER PO}) missing from font(s) DejaVu
    # Sans.' per character among ftcli's lines, each with the line of ftcli's source that saved the picture.
    from matplotlib import font_manager, ft2font

    font = ft2font.FT2Font(font_manager.findfont(font_manager.FontProperties(family=["sans-serif"])))
    if all(ord(c) in font.get_charmap() for c in "ポジネガ"):
        pytest.skip("this machine's font draws them")
    run, _ = many_labels_run(tmp_path / "run", 2, n=200, label_names=["ポジ", "ネガ"])
    r = subprocess.run([*FTCLI, "report", str(run)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Warning" not in r.stderr and "savefig" not in r.stderr
    assert "confusion_matrix.png draws ガ, ジ, ネ, ポ as empty boxes: matplotlib's font (DejaVu Sans) has no such " \
        "characters; report.md has the names as they are" in r.stderr.splitlines()
    assert "| ポジ |" in (run / "report" / "report.md").read_text()


def test_a_default_report_folder_that_cannot_be_written_says_how_to_name_another(tmp_path):
    # A run folder on a read-only share: `ftcli report RUN` said 'error: cannot use RUN/report: Permission denied;
    # check the permissions of that file and of its folder', exit 1, with no word of --out.
    from tests.cli.helpers import as_a_user

    run, _ = many_labels_run(tmp_path / "run", 2, n=200)
    run.chmod(0o555)
    r = subprocess.run([*as_a_user(), *FTCLI, "report", str(run)], capture_output=True, text=True, timeout=300)
    run.chmod(0o755)
    assert (r.returncode, r.stdout) == (2, ""), r.stderr
    assert r.stderr.splitlines() == [
        f"error: the default report folder {run / 'report'}: cannot write in {run} (Permission denied)",
        "hint: give a folder you can write in: --out DIR"]
    assert not (run / "report").exists()


def test_the_drawn_matrix_pools_the_labels_left_out():
    """Counted from the predictions (never K x K) or folded from metrics.json's matrix: the same numbers, each
    drawn label's row whole, and the totals of the full matrix."""
    from ftcli.report import confusion
    from ftcli_trainer.metrics import confusion_matrix

    rng = np.random.default_rng(3)
    k, n = 50, 3000
    names = [f"l{i}" for i in range(k)]
    truth = rng.choice(k, size=n, p=np.arange(1, k + 1) / np.arange(1, k + 1).sum())
    predicted = np.where(rng.random(n) < 0.6, truth, rng.integers(0, k, n))
    full = confusion_matrix(truth, predicted, k)
    drawn = confusion(names, truth, predicted, limit=10)
    folded = confusion(names, cm=full.tolist(), limit=10)
    assert drawn.counts.tolist() == folded.counts.tolist() and drawn.counts.shape == (11, 11)
    assert drawn.names[:10] == folded.names[:10] == [names[i] for i in np.argsort(-full.sum(axis=1),
                                                                                   kind="stable")[:10]]
    assert drawn.names[10] == "other (40 labels)" and drawn.pooled
    assert (drawn.total, drawn.correct) == (folded.total, folded.correct) == (n, int(np.trace(full)))
    top = names.index(drawn.names[0])
    assert drawn.counts[0].sum() == full[top].sum() and drawn.counts[0, 0] == full[top, top]
    assert drawn.counts.sum() == n
    small = confusion(names[:3], truth % 3, predicted % 3)
    assert not small.pooled and small.counts.tolist() == confusion_matrix(truth % 3, predicted % 3, 3).tolist()


# -- a report cut off midway ------------------------------------------------------------------------------------


SLOW_REPORT = """
import pathlib, sys, time
import ftcli.report

READY = pathlib.Path(sys.argv[1])

def slow(*args):  # the confusion matrix, after the learning curves: the signal lands while the report is drawn
    READY.touch()
    time.sleep(60)

ftcli.report._confusion = slow
sys.argv = ["ftcli", "report", *sys.argv[2:]]
from ftcli.cli.app import main
main()
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_a_sigterm_while_a_report_is_drawn_says_what_the_folder_holds_and_leaves_no_staging(single_run, tmp_path,
                                                                                              sig):
    # SIGTERM (a CI step's timeout, `docker stop`) killed `ftcli report` without a word (exit 143), its staging folder
    # left in the run folder (or in the earlier report's) for the next report to clean; Ctrl-C said only "interrupted".
    from tests.cli.helpers import wait_for_child

    def drawing(path: Path) -> None:
        deadline = time.monotonic() + 120
        while not path.exists():
            assert time.monotonic() < deadline, "the report was never drawn"
            time.sleep(0.05)

    run = copy_run(single_run, tmp_path)
    for earlier in (False, True):
        if earlier:
            assert run_cli_process(run).returncode == 0
            (run / "report" / "notes.txt").write_text("mine")
        before = {p.name: p.read_bytes() for p in (run / "report").iterdir()} if earlier else None
        ready = tmp_path / f"drawing-{earlier}"
        proc = subprocess.Popen([sys.executable, "-c", SLOW_REPORT, str(ready), "run"], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for_child(proc, lambda ready=ready: drawing(ready))
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        kept = " (its files are as they were)" if earlier else ""
        assert proc.returncode == 128 + sig, err
        assert err.strip().splitlines()[-1] == f"interrupted; nothing was written to {Path('run', 'report')}{kept}"
        assert "Traceback" not in err and out == ""
        if earlier:
            assert {p.name: p.read_bytes() for p in (run / "report").iterdir()} == before
        else:
            assert not (run / "report").exists()
        assert not [p for p in run.rglob("*") if ".tmp-" in p.name]  # no staging left, beside it or in it


def test_a_ctrl_c_while_a_report_moves_in_says_how_far_it_got(capsys, single_run, tmp_path, monkeypatch):
    import ftcli.report

    run = copy_run(single_run, tmp_path)
    assert run_cli(capsys, "report", str(run)).code == 0
    (run / "report" / "notes.txt").write_text("mine")
    moved, real_replace = [], os.replace

    def ctrl_c_on_the_second_file(src, dst):
        moved.append(dst)
        if len(moved) == 3:  # the list of both reports' files, one file, then Ctrl-C
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(ftcli.report.os, "replace", ctrl_c_on_the_second_file)
    r = run_cli(capsys, "report", str(run))
    monkeypatch.setattr(ftcli.report.os, "replace", real_replace)
    assert r.code == 130 and r.err.strip().splitlines()[-1] == (
        f"interrupted; {run / 'report'} holds part of the report's files; the same command again replaces them")
    assert not [p for p in run.rglob("*") if ".tmp-" in p.name]
    r = run_cli(capsys, "report", str(run))
    assert r.code == 0, r.err
    assert (run / "report" / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("json_out", [False, True], ids=["lines", "json"])
def test_a_sigterm_once_the_report_is_written_while_its_files_are_printed_says_interrupted(single_run, tmp_path,
                                                                                          json_out):
    # `ftcli report RUN | reader` whose reader had stopped reading, then SIGTERM (a CI step's timeout) once the report
    # was written, while its files were printed (after the command's own handling of signals): ftcli was killed
    # without a word, exit -15. Now it says the report is whole and exits 128 + the signal.
    from ftcli.output import LAST_WRITE_PATIENCE
    from tests.cli.helpers import signal_behind_a_full_pipe

    run = copy_run(single_run, tmp_path)
    code, took, _, err = signal_behind_a_full_pipe([*FTCLI, "report", "run", *(["--json"] if json_out else [])],
                                                   {**os.environ}, tmp_path, signal.SIGTERM)
    assert code == 143 and took < LAST_WRITE_PATIENCE + 5, (code, took, err)
    assert "Traceback" not in err and err.strip().splitlines()[-1] == (
        f"interrupted; the report is written, whole, in {Path('run', 'report')}"), err
    assert (run / "report" / "report.md").is_file() and not [p for p in run.rglob("*") if ".tmp-" in p.name]


def test_a_sigterm_while_a_written_reports_notes_are_said_says_it_is_whole(tmp_path):
    # A report whose picture leaves labels out says so once it is written ("... draws the N labels with the most
    # support ...; report.md lists them"): a SIGTERM while that was said (on a stderr nobody reads) reached `ftcli
    # report` as a bare interruption, which it said as "interrupted; nothing was written" of a report that was whole.
    from ftcli.report import MAX_DRAWN
    from tests.cli.helpers import signal_when_held

    run, _ = many_labels_run(tmp_path / "run", MAX_DRAWN + 10, n=600)
    code, printed, err = signal_when_held("ftcli.output:note", 1, ["report", "run"], signal.SIGTERM, tmp_path / "held",
                                          tmp_path)
    assert code == 143 and printed == "" and "Traceback" not in err, (code, err)
    assert err.strip().splitlines()[-1] == (
        f"interrupted; the report had arrived: {Path('run', 'report')} holds it, complete"), err
    assert (run / "report" / "report.md").is_file() and not [p for p in run.rglob("*") if ".tmp-" in p.name]


def run_cli_process(run: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*FTCLI, "report", str(run)], capture_output=True, text=True, timeout=300)


def test_a_report_cut_off_midway_never_blocks_the_next(capsys, single_run, tmp_path, monkeypatch):
    # Killed while drawing the confusion matrix, a report left report/ holding learning_curves.png alone, and
    # every later report refused that folder ("is not empty and holds no earlier ftcli report").
    import ftcli.report

    run = copy_run(single_run, tmp_path)
    real = ftcli.report._confusion

    def out_of_memory(*args):
        raise MemoryError

    monkeypatch.setattr(ftcli.report, "_confusion", out_of_memory)  # after the learning curves are drawn
    with pytest.raises(MemoryError):
        run_cli(capsys, "report", str(run))
    assert not (run / "report").exists() and not [p for p in run.iterdir() if ".tmp-" in p.name]
    # a writer killed outright (kill -9, the OOM killer) leaves its staging folder: the next report removes it
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = run / f".report.tmp-{int(dead.stdout)}-0123abcd"
    left.mkdir()
    (left / "learning_curves.png").write_bytes(b"half")
    monkeypatch.setattr(ftcli.report, "_confusion", real)
    r = run_cli(capsys, "report", str(run))
    assert r.code == 0, r.err
    assert sorted(p.name for p in (run / "report").iterdir()) == [
        "confusion_matrix.png", "ftcli-report.json", "learning_curves.png", "report.md"]
    assert not left.exists()

    # over an earlier report with the user's own file in it: cut off while drawing, the folder is as it was
    notes = run / "report" / "notes.txt"
    notes.write_text("mine")
    before = {p.name: p.read_bytes() for p in (run / "report").iterdir()}
    monkeypatch.setattr(ftcli.report, "_confusion", out_of_memory)
    with pytest.raises(MemoryError):
        run_cli(capsys, "report", str(run))
    assert {p.name: p.read_bytes() for p in (run / "report").iterdir()} == before
    monkeypatch.setattr(ftcli.report, "_confusion", real)

    # cut off while the new files move in (the disk full after the first): still a report the next run replaces
    moved = []
    real_replace = os.replace

    def replace_then_fail(src, dst, *a, **kw):
        if Path(dst).parent == run / "report" and Path(dst).name != "ftcli-report.json":
            moved.append(Path(dst).name)
            if len(moved) == 2:
                raise OSError(28, "No space left on device")
        return real_replace(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", replace_then_fail)
    r = run_cli(capsys, "report", str(run))
    monkeypatch.setattr(os, "replace", real_replace)
    assert r.code != 0 and "No space left on device" in r.err and moved == ["report.md", "learning_curves.png"]
    r = run_cli(capsys, "report", str(run))
    assert r.code == 0, r.err
    assert notes.read_text() == "mine"
    assert sorted(p.name for p in (run / "report").iterdir()) == [
        "confusion_matrix.png", "ftcli-report.json", "learning_curves.png", "notes.txt", "report.md"]
    assert json.loads((run / "report" / "ftcli-report.json").read_text())["files"] == [
        "report.md", "learning_curves.png", "confusion_matrix.png"]
    assert not [p for p in run.iterdir() if ".tmp-" in p.name]


def test_an_existing_out_folder_is_staged_inside_itself_not_beside_it(capsys, single_run, tmp_path, monkeypatch):
    # Staged beside it, an --out that is a mount point (a Docker volume, a mounted disk) had every picture drawn on
    # the parent's filesystem, and then every move in failed: "Invalid cross-device link". Moves across the folder's
    # edge fail here as they would across filesystems.
    run = copy_run(single_run, tmp_path)
    out = tmp_path / "volume"
    out.mkdir()
    real_replace = os.replace

    def same_filesystem_only(src, dst, *a, **kw):
        if Path(src).resolve().is_relative_to(out) != Path(dst).resolve().is_relative_to(out):
            raise OSError(18, "Invalid cross-device link")
        return real_replace(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", same_filesystem_only)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = out / f".ftcli-report.tmp-{int(dead.stdout)}-0123abcd"  # a killed report's, inside: cleared first
    left.mkdir()
    r = run_cli(capsys, "report", str(run), "--out", str(out))
    assert r.code == 0, r.err
    assert sorted(p.name for p in out.iterdir()) == [
        "confusion_matrix.png", "ftcli-report.json", "learning_curves.png", "report.md"]
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    r = run_cli(capsys, "report", str(run), "--out", str(out))  # again, over its own earlier report
    assert r.code == 0, r.err
    assert sorted(p.name for p in out.iterdir()) == [
        "confusion_matrix.png", "ftcli-report.json", "learning_curves.png", "report.md"]
