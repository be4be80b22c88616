"""`ftcli tune` against the emulators: the tuning job is train's job with a study around it; its trials really
run (the emulated tuning service appends each trial's values), and jobs/logs/download name its trials."""

from __future__ import annotations

import json

import grpc
import pytest

from tests.cli.helpers import run_cli
from tests.conftest import T4_RATES, fifo_read_at_most_for, sentiment_rows, use_price_file, write_csv

pytest.importorskip("torch")


def test_dry_run_is_the_train_job_inside_a_study(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    r = run_cli(capsys, "tune", "--task", "mnli", "--gpu", "L4", "--trials", "16", "--parallel", "4",
                "--search", "learning_rate=loguniform(1e-5,1e-4)", "--search", "batch_size=choice(16,32)",
                "--project", "my-project", "--bucket", "gs://my-bucket/x", "--dry-run")
    assert r.code == 0, r.err
    job = json.loads(r.out)
    assert job["maxTrialCount"] == 16 and job["parallelTrialCount"] == 4
    assert job["studySpec"]["metrics"] == [{"metricId": "eval_accuracy", "goal": "MAXIMIZE"}]
    pool = job["trialJobSpec"]["workerPoolSpecs"][0]
    args = pool["containerSpec"]["args"]
    assert args[args.index("--hypertune-metric") + 1] == "eval_accuracy"  # the trainer reports the study's metric
    assert pool["machineSpec"]["acceleratorType"] == "NVIDIA_L4"
    assert job["labels"]["ftcli_kind"] == "tune" and job["labels"]["created_by"] == "ftcli"
    assert "study: 16 trials, 4 at a time, maximize eval_accuracy over learning_rate, batch_size" in r.err


def test_the_cost_counts_every_trial_and_the_ones_at_once(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    args = ("tune", "--task", "mnli", "--gpu", "T4", "--trials", "6", "--parallel", "4", "--timeout", "2h",
            "--project", "my-project", "--bucket", "gs://my-bucket/x", "--dry-run")
    r = run_cli(capsys, *args)
    assert r.code == 0, r.err
    assert ("cost: each trial 1 x T4 on n1-standard-8, 4 at a time, 6 trials of at most 2h (--timeout): up to 12 "
            "GPU-hours") in r.err
    assert "no dollar amounts: no price file" in r.err and "$" not in r.err
    use_price_file(tmp_path, monkeypatch)
    r = run_cli(capsys, *args)
    # 0.75 an hour a trial: 4 at once is 3.00 an hour; 6 trials of 2 h at most 9.00
    assert ("about $3.00 an hour with 4 running, at most $9.00 for 6 trials (on-demand rates: us-central1 rates from "
            "my contract, read 2026-11-02)") in r.err


def test_a_study_file_with_flags_over_it(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    study = tmp_path / "study.toml"
    study.write_text('metric = "eval_loss"\ntrials = 12\nparallel = 3\n\n[search]\n'
                     'learning_rate = "loguniform(1e-5,1e-4)"\nbatch_size = [16, 32]\nepochs = "int(1,3)"\n')
    r = run_cli(capsys, "tune", "--task", "mnli", "--search-file", str(study), "--trials", "4",
                "--search", "epochs=choice(2,4)", "--project", "my-project", "--bucket", "gs://b-1/x", "--dry-run")
    assert r.code == 0, r.err
    job = json.loads(r.out)
    assert job["maxTrialCount"] == 4 and job["parallelTrialCount"] == 3  # --trials wins; parallel from the file
    assert job["studySpec"]["metrics"] == [{"metricId": "eval_loss", "goal": "MINIMIZE"}]
    params = {p["parameterId"]: p for p in job["studySpec"]["parameters"]}
    assert params["batch_size"]["discreteValueSpec"] == {"values": [16.0, 32.0]}
    assert params["epochs"]["discreteValueSpec"] == {"values": [2.0, 4.0]}  # --search epochs replaced the file's
    assert list(params) == ["learning_rate", "batch_size", "epochs"]


def test_one_trial_needs_no_parallel_flag(capsys, monkeypatch, tmp_path):
    # the default of 2 trials at a time refused `--trials 1` ("--parallel must be between 1 and --trials (1), got 2")
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    r = run_cli(capsys, "tune", "--task", "mnli", "--trials", "1", "--project", "my-project", "--bucket",
                "gs://b-1/x", "--dry-run")
    assert r.code == 0, r.err
    job = json.loads(r.out)
    assert job["maxTrialCount"] == 1 and job["parallelTrialCount"] == 1
    assert "study: 1 trial, 1 at a time" in r.err
    # the cost line counts it as the study line does ("1 trials of at most 24h")
    assert "1 at a time, 1 trial of at most 24h (--timeout)" in r.err, r.err
    use_price_file(tmp_path, monkeypatch)
    r = run_cli(capsys, "tune", "--task", "mnli", "--trials", "1", "--timeout", "2h", "--project", "my-project",
                "--bucket", "gs://b-1/x", "--dry-run")
    assert "about $0.75 an hour with 1 running, at most $1.50 for 1 trial (on-demand" in r.err, r.err
    r = run_cli(capsys, "tune", "--task", "mnli", "--trials", "0", "--project", "my-project", "--bucket",
                "gs://b-1/x", "--dry-run")  # one problem, the one typed: not also the --parallel left out
    assert r.code == 2 and r.err.splitlines()[0] == "error: --trials must be between 1 and 1000 (got 0)"
    assert "--parallel" not in r.err


def test_an_option_given_as_a_flag_is_not_searched_behind_its_back(capsys, monkeypatch, tmp_path):
    """`ftcli tune --learning-rate 3e-5` searched the learning rate anyway (the default search's): each trial's value
    is appended after the job's own arguments, so it won, and the rate typed was dropped without a word. The default
    search leaves an option fixed by its flag out; a --search that varies one is refused."""
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    common = ("tune", "--task", "mnli", "--project", "my-project", "--bucket", "gs://b-1/x", "--dry-run")
    r = run_cli(capsys, *common, "--learning-rate", "3e-5")
    assert r.code == 0, r.err
    job = json.loads(r.out)
    assert [p["parameterId"] for p in job["studySpec"]["parameters"]] == ["batch_size"]
    args = job["trialJobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"]
    assert args[args.index("--learning-rate") + 1] == "3e-05"
    assert "over batch_size" in r.err
    r = run_cli(capsys, *common, "--batch-size", "8", "--search", "batch-size=choice(16,32)",
                "--search", "learning_rate=loguniform(1e-5,1e-4)")
    assert r.code == 2 and r.out == "" and "Traceback" not in r.err
    assert r.err.splitlines()[0] == "error: --search batch_size varies what --batch-size 8 fixes: drop one of them"
    r = run_cli(capsys, *common, "--learning-rate", "3e-5", "--batch-size", "16")
    assert r.code == 2 and r.out == ""
    assert r.err.startswith("error: --learning-rate 3e-05 and --batch-size 16 fix every option the default search "
                            "varies: nothing is left to tune; give --search NAME=...")


def test_a_trial_that_keeps_its_best_evaluation_is_judged_by_it(capsys, monkeypatch, tmp_path):
    """With --keep-best (or --early-stopping, which keeps the best) each trial exports its best evaluation's weights,
    but the study judged it by its last evaluation (Vertex's default, LAST_MEASUREMENT): the best trial named, and
    downloaded, by metrics that were not its model's. BEST_MEASUREMENT when the study's metric is the one kept by."""
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    common = ("tune", "--task", "mnli", "--project", "my-project", "--bucket", "gs://b-1/x", "--dry-run")
    for extra, selection in (((), None), (("--keep-best",), "BEST_MEASUREMENT"),
                             (("--early-stopping", "2", "--eval-every", "100"), "BEST_MEASUREMENT"),
                             (("--keep-best", "--metric", "eval_loss"), None)):  # kept by accuracy, not the loss
        r = run_cli(capsys, *common, *extra)
        assert r.code == 0, r.err
        assert json.loads(r.out)["studySpec"].get("measurementSelectionType") == selection, extra


def test_a_study_file_that_cannot_be_read_says_what_to_do(capsys, monkeypatch, tmp_path):
    # Each was the error line alone: nothing said what a study file holds or where one is shown.
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    shown = "README's 'ftcli tune' section shows a study file"
    (tmp_path / "bad.toml").write_text("trials = \n")
    (tmp_path / "latin.toml").write_bytes('metric = "é"\n'.encode("latin-1"))
    for name, says, hint in (
            ("none.toml", "no such file", f"check the path; {shown}"),
            ("", "is a folder", f"give the study file in it; {shown}"),
            ("bad.toml", "not valid TOML (Invalid value (at line 1, column 10))", f"fix the line it names; {shown}"),
            ("latin.toml", "is not UTF-8 text (byte 10: invalid continuation byte)", "save it as UTF-8")):
        study = tmp_path / name if name else tmp_path
        r = run_cli(capsys, "tune", "--task", "mnli", "--search-file", str(study), "--project", "my-project",
                    "--bucket", "gs://b-1/x", "--dry-run")
        assert (r.code, r.out, r.err.splitlines()) == (2, "", [f"error: --search-file {study}: {says}",
                                                               f"hint: {hint}"])


def test_a_study_file_that_is_a_named_pipe_is_refused_and_one_the_shell_hands_over_is_read(capsys, monkeypatch,
                                                                                            tmp_path):
    # A named pipe nothing writes into was read as the study: `ftcli tune` waited for ever, saying nothing.
    import os

    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    pipe = tmp_path / "study.toml"
    argv = ["--task", "mnli", "--project", "my-project", "--bucket", "gs://b-1/x", "--dry-run"]
    with fifo_read_at_most_for(pipe):
        r = run_cli(capsys, "tune", "--search-file", str(pipe), *argv)
    assert (r.code, r.out, r.err.splitlines()) == (2, "", [
        f"error: --search-file {pipe}: is a named pipe, not a regular file",
        "hint: give the study file itself; README's 'ftcli tune' section shows a study file"])
    # `--search-file <(...)`: the pipe the shell hands over, /dev/fd/N, has its writer, and is read as before
    read, write = os.pipe()
    try:
        os.write(write, b"trials = 3\n")
        os.close(write)
        r = run_cli(capsys, "tune", "--search-file", f"/dev/fd/{read}", *argv)
    finally:
        os.close(read)
    assert r.code == 0, r.err
    assert json.loads(r.out)["maxTrialCount"] == 3


@pytest.mark.parametrize(("text", "needle"), [
    (None, "no such file"),
    ("trials = \n", "not valid TOML"),
    ("trails = 4\n", "unknown key trails"),
    ("trials = \"4\"\n", "trials must be a whole number"),
    ("[search]\nbatch_size = 16\n", "batch_size must be a string"),
    ("[search]\ntrain_file = \"choice(a,b)\"\n", "--search NAME must be one of learning_rate, "),
])
def test_a_bad_study_file_is_one_line(capsys, monkeypatch, tmp_path, text, needle):
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    study = tmp_path / "study.toml"
    if text is not None:
        study.write_text(text)
    r = run_cli(capsys, "tune", "--task", "mnli", "--search-file", str(study), "--project", "my-project",
                "--bucket", "gs://b-1/x", "--dry-run")
    assert r.code == 2 and needle in r.err and "Traceback" not in r.err and r.out == ""


def test_the_task_decides_the_default_metric(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    for task, metric in (("cola", "eval_matthews_correlation"), ("stsb", "eval_pearson"), ("mrpc", "eval_f1")):
        r = run_cli(capsys, "tune", "--task", task, "--project", "my-project", "--bucket", "gs://b-1/x", "--dry-run")
        assert r.code == 0, r.err
        assert json.loads(r.out)["studySpec"]["metrics"][0]["metricId"] == metric
    r = run_cli(capsys, "tune", "--task", "mnli", "--metric", "eval_loss", "--project", "my-project",
                "--bucket", "gs://b-1/x", "--dry-run")
    assert json.loads(r.out)["studySpec"]["metrics"][0]["goal"] == "MINIMIZE"
    # a regression's MSE is minimised too (the README and --metric's help said only *_loss)
    r = run_cli(capsys, "tune", "--task", "stsb", "--metric", "eval_mse", "--project", "my-project",
                "--bucket", "gs://b-1/x", "--dry-run")
    assert json.loads(r.out)["studySpec"]["metrics"][0] == {"metricId": "eval_mse", "goal": "MINIMIZE"}
    r = run_cli(capsys, "tune", "--task", "mnli", "--metric", "eval_mismatched_accuracy", "--project",
                "my-project", "--bucket", "gs://b-1/x", "--dry-run")  # the second eval set's
    assert r.code == 0, r.err
    r = run_cli(capsys, "tune", "--task", "stsb", "--metric", "eval_accuracy", "--project", "my-project",
                "--bucket", "gs://b-1/x", "--dry-run")  # a regression has no accuracy
    assert r.code == 2 and "--metric must be one of eval_pearson, eval_spearmanr, eval_mse, eval_loss; got " in r.err


@pytest.mark.parametrize(("args", "needle"), [
    # every closed choice says it one way ("--search train_file: ... choose from ..." was another)
    (["--search", "train_file=choice(a,b)"], "--search NAME must be one of learning_rate, batch_size, weight_decay, "
     "warmup_ratio, epochs, max_length, gradient_accumulation_steps, max_grad_norm, seed, model; got 'train_file'"),
    (["--search", "learning-rat=choice(1e-5,1e-4)"], "; got 'learning-rat': did you mean learning_rate?"),
    (["--search", "learning_rate=loguniform(0,1)"], "loguniform needs LOW > 0"),
    (["--search", "warmup_ratio=uniform(0,2)"], "--search warmup_ratio reaches 2.0"),
    (["--trials", "2", "--parallel", "3"], "--parallel must be between 1 and --trials (2), got 3"),
    (["--metric", "accuracy"], "--metric 'accuracy': name one of metrics.json's eval_* keys"),
    # every trial trained to the end and the study failed: metrics the run never reports
    (["--metric", "eval_nope"], "--metric must be one of eval_accuracy, eval_macro_f1, eval_loss; got 'eval_nope'"),
    (["--metric", "eval_acuracy"], "--metric must be one of eval_accuracy, eval_macro_f1, eval_loss; got "
     "'eval_acuracy': did you mean eval_accuracy or eval_macro_f1?"),
    (["--metric", "eval_pearson"], "--metric must be one of eval_accuracy, eval_macro_f1, eval_loss; got "
     "'eval_pearson'"),
    (["--gpu", "T4x3"], "T4 comes in counts"),
    # two names of MiniLM: every trial of one choice trained the same model as the other's (a wasted dimension)
    (["--detach", "--search", "model=choice(minilm,all-MiniLM-L6-v2)"],
     "--search model: minilm, all-MiniLM-L6-v2 holds the same model twice; give each model once"),
])
def test_bad_tuning_input_sends_nothing(capsys, cloud_env, args, needle):
    gcs, vertex = cloud_env
    r = run_cli(capsys, "tune", "--task", "imdb", *args)
    assert r.code == 2 and needle in r.err and "Traceback" not in r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_the_secrets_a_trial_reads_are_checked_before_any_upload(capsys, cloud_env, secret_manager):
    # Every trial reads --hf-secret at its start: a missing one failed each of them, after the upload and the create.
    gcs, vertex = cloud_env
    r = run_cli(capsys, "tune", "--task", "imdb", "--detach", "--hf-secret", "projects/test-project/secrets/hf-token")
    assert r.code == 1 and r.err.splitlines()[-2:] == [
        "error: secret projects/test-project/secrets/hf-token does not exist",
        'hint: create it: printf %s "$HF_TOKEN" | gcloud secrets create hf-token --data-file=-']
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_a_problem_of_the_options_themselves_is_said_once_not_again_for_a_searched_value(capsys, cloud_env):
    # `--task csv` without --train-file was listed twice: as itself and as "--search batch_size reaches 16: --task
    # csv needs --train-file", though no searched value has anything to do with it.
    gcs, vertex = cloud_env
    r = run_cli(capsys, "tune", "--task", "csv")
    assert r.code == 2 and "Traceback" not in r.err
    assert r.err.splitlines() == ["error: --task csv needs --train-file PATH (CSV or JSON Lines, local or gs://)",
                                  "hint: see --help for the trainer options"]
    # a searched value's own problem is still named with it, once, beside the options' own
    r = run_cli(capsys, "tune", "--task", "csv", "--search", "batch_size=choice(0,16)")
    assert r.code == 2 and r.err.splitlines() == [
        "error: 2 problems with the options:",
        "  - --search batch_size reaches 0: --batch-size must be positive, got 0",
        "  - --task csv needs --train-file PATH (CSV or JSON Lines, local or gs://)",
        "hint: see --help for the trainer options"]
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_a_searched_max_length_beside_a_wrong_option_says_the_option_alone(capsys, cloud_env):
    # The check of a searched --max-length against a model folder's positions needs the options to be valid; with
    # one wrong it must step aside for the line that names it (its answer was added to the problems as it was).
    gcs, vertex = cloud_env
    for search in ("max_length=int(64,128)", "model=choice(bert-base-uncased,distilbert-base-uncased)"):
        r = run_cli(capsys, "tune", "--task", "csv", "--search", search)
        assert r.code == 2 and r.err.splitlines() == [
            "error: --task csv needs --train-file PATH (CSV or JSON Lines, local or gs://)",
            "hint: see --help for the trainer options"], r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_a_study_files_count_is_named_as_the_file_gives_it(capsys, cloud_env, tmp_path):
    # `parallel = 3` in the file with `trials = 2` blamed --parallel, a flag never given
    gcs, vertex = cloud_env
    study = tmp_path / "study.toml"
    study.write_text("trials = 2\nparallel = 3\n")
    for flags, said in (((), f"error: parallel in {study} must be between 1 and trials in {study} (2), got 3"),
                        (("--trials", "1"), f"error: parallel in {study} must be between 1 and --trials (1), got 3"),
                        (("--parallel", "5"), f"error: --parallel must be between 1 and trials in {study} (2), got 5")):
        r = run_cli(capsys, "tune", "--task", "imdb", "--search-file", str(study), *flags)
        assert r.code == 2 and r.err.strip().splitlines()[0] == said, r.err
    study.write_text("trials = 0\n")
    r = run_cli(capsys, "tune", "--task", "imdb", "--search-file", str(study))
    assert r.code == 2 and f"error: trials in {study} must be between 1 and 1000 (got 0)" in r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_brackets_in_the_display_name_and_the_bucket_are_shown_as_written(capsys, cloud_env, monkeypatch):
    # Rich read them as markup: "[/]" crashed with a traceback after the tuning job was created
    _, vertex = cloud_env
    monkeypatch.setenv("FTCLI_BUCKET", "gs://ftcli-test/team [a]")
    name = "study [/] [b]"
    r = run_cli(capsys, "tune", "--task", "imdb", "--gpu", "L4", "--display-name", name, "--trials", "2", "--detach")
    assert r.code == 0, r.err
    (tj,) = vertex.tuning_jobs.values()
    assert tj.display_name == name
    lines = r.out.splitlines()
    assert lines[0] == f"submitted tuning job #1 {name}"
    assert lines[3].startswith("  trials   gs://ftcli-test/team [a]/ftcli/runs/study------b-") and lines[3].endswith(
        "/TRIAL_ID/model/")
    r = run_cli(capsys, "tune", "--task", "imdb", "--gpu", "L4", "--dry-run", "--bucket", "gs://ftcli-test/x[/]")
    assert r.code == 0, r.err
    assert "Package: gs://ftcli-test/x[/]/ftcli/packages/ftcli_trainer-" in r.err


def test_following_says_why_a_trial_failed_and_exits_with_the_studys_state(capsys, cloud_env, monkeypatch):
    # A failed trial was "trial 2 INFEASIBLE · ..." with no word of why (Vertex's Trial.infeasible_reason), and a study
    # cancelled while followed (the console, another terminal) ended "CANCELLED: CANCELED", exit 3: a failure.
    from tests.emulators.vertex import add_trial

    gcs, vertex = cloud_env
    monkeypatch.setenv("FTCLI_LOGS_INTERVAL", "0.01")
    why = "The replica workerpool0-0 exited with a non-zero status of 137.\nTraceback (most recent call last):"
    lr = {"learning_rate": 3e-05}
    # (one read of the study fails on the way: a 500 ended the following of a study that ran on)
    vertex.next_tuning_scripts = [
        ["RUNNING", add_trial("1", "ACTIVE", lr),
         lambda job: vertex.fail_next("GetHyperparameterTuningJob", grpc.StatusCode.INTERNAL, message="Internal error"),
         add_trial("1", "SUCCEEDED", lr, 0.91),
         add_trial("2", "REQUESTED", {}), add_trial("2", "ACTIVE", lr), add_trial("2", "INFEASIBLE", lr, reason=why),
         "SUCCEEDED"],
        ["RUNNING", add_trial("1", "ACTIVE", lr), "CANCELLED"]]
    r = run_cli(capsys, "tune", "--task", "imdb", "--gpu", "T4", "--trials", "2", "--search",
                "learning_rate=loguniform(1e-5,1e-4)")
    assert r.code == 0, r.err
    assert "trial 2 INFEASIBLE · learning_rate=3e-05 · The replica workerpool0-0 exited with a non-zero status of " \
           "137.\n" in r.out and "Traceback" not in r.out
    assert "tuning job #1 SUCCEEDED · best trial 1: eval_accuracy 0.9100" in r.out
    assert "\ntrial 2 REQUESTED\n" in r.out  # no values yet: nothing after it (it ended on " · ")
    assert r.err.count("warning: cannot read tuning job 1's state now (") == 1 and "still following it" in r.err, r.err
    r = run_cli(capsys, "jobs", "describe", "1")
    assert "trial 2: The replica workerpool0-0 exited with a non-zero status of 137.\n" in r.out, r.out
    r = run_cli(capsys, "jobs", "describe", "1", "--json")
    assert {t["id"]: t["error"] for t in json.loads(r.out)["trials"]} == {"1": None, "2": why}

    r = run_cli(capsys, "tune", "--task", "imdb", "--gpu", "T4", "--trials", "2", "--search",
                "learning_rate=loguniform(1e-5,1e-4)")
    assert r.code == 4, r.err  # as `ftcli logs` of a cancelled job (README: 4 the followed job was cancelled)
    assert r.err.splitlines()[-1] == "tuning job #2 CANCELLED", r.err


def test_a_searched_local_model_is_uploaded_and_a_mistyped_one_refused(capsys, cloud_env, tmp_path, tiny_model):
    # `--search model=choice(./mine,...)` reached the trials as "./mine", which no trial container has; and a
    # mistyped folder went out as a Hub id. A searched model is checked and uploaded as `--model DIR` is.
    import shutil

    gcs, vertex = cloud_env
    data = write_csv(tmp_path / "train.csv", ["text", "label"], sentiment_rows(40, seed=1))
    other = tmp_path / "other model"
    shutil.copytree(tiny_model, other)
    (other / "config.json").write_text((other / "config.json").read_text().replace("{", '{"note": "other",', 1))
    common = ("tune", "--task", "csv", "--train-file", str(data), "--model", str(tiny_model), "--gpu", "none",
              "--trials", "2", "--detach")
    r = run_cli(capsys, *common, "--search", f"model=choice({tmp_path / 'nope'},bert-base-uncased)")
    assert r.code == 2 and f"--search model {tmp_path / 'nope'}: no such folder" in r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []
    linked = tmp_path / "linked model"  # it was refused as "--model DIR: ...", the flag that named the other model
    shutil.copytree(tiny_model, linked)
    (linked / "notes.txt").symlink_to(tmp_path / "gone")
    r = run_cli(capsys, *common, "--search", f"model=choice({linked},bert-base-uncased)")
    said = (f"error: --search model {linked}: notes.txt is a symbolic link to {tmp_path / 'gone'}, which does not "
            "exist: fetch the missing file again (a Hugging Face cache: download the model again) or remove the link")
    assert r.code == 2 and r.err.strip().splitlines()[-1] == said, r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []

    deep = tmp_path / "deep model"  # a file whose object name Cloud Storage refuses for its length (1024 bytes)
    shutil.copytree(tiny_model, deep)
    nested = deep / ("d" * 250) / ("e" * 250) / ("f" * 250) / ("g" * 250)
    nested.mkdir(parents=True)
    (nested / "notes.txt").write_text("x")
    r = run_cli(capsys, *common, "--search", f"model=choice({deep},bert-base-uncased)")
    assert r.code == 2 and r.err.splitlines() == [
        f"error: --search model {deep}: the file {nested.relative_to(deep).as_posix()}/notes.txt: its object name in "
        "the bucket has 1048 bytes, and Cloud Storage takes at most 1024: shorten its path in the folder, or the "
        "bucket's prefix",
        "hint: ftcli names what it uploads PREFIX/ftcli/packages|data|models/...: the bucket's prefix counts towards "
        "every name"], r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []

    r = run_cli(capsys, *common, "--search", f"model=choice({other},{tiny_model},bert-base-uncased)")
    assert r.code == 0, r.err
    (tj,) = vertex.tuning_jobs.values()
    (spec,) = [p for p in tj.study_spec.parameters if p.parameter_id == "model"]
    mine, theirs, hub = spec.categorical_value_spec.values
    assert hub == "bert-base-uncased"
    args = list(tj.trial_job_spec.worker_pool_specs[0].container_spec.args)
    assert theirs == args[args.index("--model") + 1]  # --model DIR's own upload, the same folder
    for value, folder in ((mine, other), (theirs, tiny_model)):
        assert value.startswith("/gcs/ftcli-test/team/ftcli/models/")
        prefix = value.removeprefix("/gcs/ftcli-test/") + "/"
        for f in folder.iterdir():
            assert gcs.read("ftcli-test", prefix + f.name) == f.read_bytes()
    assert mine != theirs


def test_a_searched_model_path_that_vertex_would_expand_is_refused(capsys, cloud_env, monkeypatch, tmp_path,
                                                                      tiny_model):
    # Found by hand: with a bucket prefix holding `$(`, a searched model folder's /gcs/ path went into the study's
    # categorical values as it was, while the trial job's own args double every $ (spec.container_text). Vertex
    # appends a trial's values to the container's args, where $(AIP_MODEL_DIR) was expanded (runner.expand, as the
    # emulated trials do) and the trial read the model from a path that does not exist; a trial's values are the
    # study's, shown as they are, so they cannot be escaped: refused before anything is uploaded.
    gcs, vertex = cloud_env
    monkeypatch.setenv("FTCLI_BUCKET", "gs://ftcli-test/team$(AIP_MODEL_DIR)")
    data = write_csv(tmp_path / "train.csv", ["text", "label"], sentiment_rows(40, seed=1))
    r = run_cli(capsys, "tune", "--task", "csv", "--train-file", str(data), "--gpu", "none", "--trials", "2",
                "--detach", "--search", f"model=choice({tiny_model},bert-base-uncased)")
    assert r.code == 2 and not r.out and "Traceback" not in r.err
    line = r.err.strip().splitlines()[-1]
    assert line.startswith(f"error: --search model {tiny_model}: a trial would get it as /gcs/ftcli-test/"
                           "team$(AIP_MODEL_DIR)/ftcli/models/"), r.err
    assert line.endswith("which Vertex expands in a trial's arguments ($(NAME), $$), and a searched value cannot be "
                         "escaped as the job's own arguments are: use a --bucket prefix without '$'")
    assert gcs.list("ftcli-test") == [] and vertex.requests == []
    # a lone $ is left as it is by the expansion: carried
    monkeypatch.setenv("FTCLI_BUCKET", "gs://ftcli-test/team$1")
    r = run_cli(capsys, "tune", "--task", "csv", "--train-file", str(data), "--gpu", "none", "--trials", "2",
                "--detach", "--search", f"model=choice({tiny_model},bert-base-uncased)")
    assert r.code == 0, r.err
    (tj,) = vertex.tuning_jobs.values()
    (spec,) = [p for p in tj.study_spec.parameters if p.parameter_id == "model"]
    assert spec.categorical_value_spec.values[0].startswith("/gcs/ftcli-test/team$1/ftcli/models/")


@pytest.fixture
def tuned(cloud_env, running_vertex, cloud_logging, monkeypatch, capsys, tmp_path, tiny_model):
    gcs, _ = cloud_env
    monkeypatch.setenv("FTCLI_VERTEX_ENDPOINT", running_vertex.endpoint)
    monkeypatch.setenv("FTCLI_LOGGING_ENDPOINT", cloud_logging.endpoint)
    monkeypatch.setenv("FTCLI_LOGS_INTERVAL", "0.1")
    monkeypatch.setattr(cloud_logging, "project", "test-project")
    data = write_csv(tmp_path / "train.csv", ["text", "label"], sentiment_rows(120, seed=5))
    use_price_file(tmp_path, monkeypatch, T4_RATES.replace("n1-standard-8 = 0.5", "n1-standard-8 = 3.6"))  # 0.1 c/s
    r = run_cli(capsys, "tune", "--task", "csv", "--train-file", str(data), "--model", str(tiny_model),
                "--gpu", "none", "--epochs", "1", "--trials", "2", "--parallel", "1",
                "--search", "learning_rate=loguniform(1e-4,1e-3)", "--label-names", "negative,positive")
    return r, gcs, running_vertex


def test_tuning_runs_trials_and_names_the_best(tuned, capsys, tmp_path, monkeypatch):
    r, gcs, vertex = tuned
    assert r.code == 0, r.err + r.out
    tune_err = r.err
    assert "submitted tuning job #1" in r.out
    assert r.out.count("trial 1 SUCCEEDED") == 1 and "trial 2 SUCCEEDED" in r.out
    assert "tuning job #1 SUCCEEDED · best trial" in r.out and "next: ftcli download 1" in r.out
    (tj,) = vertex.tuning_jobs.values()
    best = max(tj.trials, key=lambda t: t.final_measurement.metrics[0].value)
    assert f"best trial {best.id}:" in r.out

    r = run_cli(capsys, "jobs", "list", "--json")
    rows = [json.loads(line) for line in r.out.splitlines()]
    tuning_rows = [x for x in rows if x.get("kind") == "tune"]
    assert len(tuning_rows) == 1 and tuning_rows[0]["short_id"] == 1 and tuning_rows[0]["state"] == "SUCCEEDED"
    assert tuning_rows[0]["metric"]["value"] == pytest.approx(best.final_measurement.metrics[0].value)
    # the study's metric id, as the trainer writes it and a training job's row names it (it said "acc")
    assert tuning_rows[0]["metric"]["name"] == "eval_accuracy"
    r = run_cli(capsys, "jobs", "list")
    assert "tune:csv" in r.out and f"acc {tuning_rows[0]['metric']['value']:.3f}" in r.out

    r = run_cli(capsys, "jobs", "describe", "1")
    assert r.code == 0 and "maximize eval_accuracy · 2/2 trials, 1 at a time" in r.out
    lines = [ln for ln in r.out.splitlines() if ln.strip()[:1].isdigit()]
    assert lines[0].split()[0] == best.id  # best first
    assert next(ln for ln in r.out.splitlines() if ln.lstrip().startswith("TRIAL")).split()[:3] == [
        "TRIAL", "STATE", "ACC"]
    # what the trials cost at the user's rates: each trial's run time (from Vertex's trial times) at 3.60 an hour
    assert "trials ran " in tune_err and " in all: about $" in tune_err
    assert "(on-demand; $3.60 an hour a trial)" in tune_err
    ran = sum((t.end_time - t.start_time).total_seconds() for t in tj.trials)
    assert "at $3.60 an hour, on-demand; us-central1 rates from my contract, read 2026-11-02)" in r.out
    with monkeypatch.context() as m:  # another machine: no history; `jobs list` shows the numeric id
        m.setenv("FTCLI_STATE_DIR", str(tmp_path / "another-machine"))
        numeric = tj.name.rsplit("/", 1)[-1]
        r = run_cli(capsys, "jobs", "describe", numeric)  # it was looked up as a CustomJob only: "not found"
        assert r.code == 0 and "maximize eval_accuracy · 2/2 trials" in r.out, r.err
    with monkeypatch.context() as m:  # a narrow terminal cut the trials' metric ("0.8…"): a number is never cut
        m.setenv("COLUMNS", "24")
        r = run_cli(capsys, "jobs", "describe", "1")
        trial_lines = [ln.split() for ln in r.out.splitlines() if ln.split()[:1] in ([t.id] for t in tj.trials)]
        assert sorted(ln[2] for ln in trial_lines) == sorted(
            f"{t.final_measurement.metrics[0].value:.4f}" for t in tj.trials), r.out
    r = run_cli(capsys, "jobs", "describe", "1", "--json")
    assert [t["id"] for t in json.loads(r.out)["trials"]][0] == best.id
    assert json.loads(r.out)["cost_usd"] == pytest.approx(3.6 * ran / 3600, abs=1e-3)

    other = next(t.id for t in tj.trials if t.id != best.id)
    r = run_cli(capsys, "logs", "1", "--trial", other, "--no-follow")
    assert r.code == 0 and "ftcli trainer" in r.out
    other_job = next(t.custom_job for t in tj.trials if t.id == other).rsplit("/", 1)[-1]
    assert f"tuning job 1: trial {other}, acc " in r.err and f", job {other_job}\n" in r.err, r.err

    r = run_cli(capsys, "download", "1", str(tmp_path / "best"))
    assert r.code == 0, r.err
    # which trial's model this is (it said only "from job 71000...", the trial's own job id)
    value = best.final_measurement.metrics[0].value
    assert f"tuning job 1: trial {best.id} (the best so far), acc {value:.4g}, job " in r.err, r.err
    assert (tmp_path / "best" / "model.safetensors").exists()
    assert "runs/" in json.dumps(vertex.job(best.custom_job).job_spec.base_output_directory.output_uri_prefix)
    # a trial whose model lost its completion marker: the hint names that trial, not the tuning job's best
    base = vertex.job(next(t.custom_job for t in tj.trials if t.id == other)).job_spec.base_output_directory
    bucket, _, prefix = base.output_uri_prefix.removeprefix("gs://").partition("/")
    gcs.client().bucket(bucket).blob(f"{prefix}/model/_COMPLETE").delete()
    r = run_cli(capsys, "download", "1", str(tmp_path / "other"), "--trial", other)
    assert r.code == 1 and f"ftcli logs 1 --trial {other}" in r.err, r.err
    r = run_cli(capsys, "download", "1", str(tmp_path / "t9"), "--trial", "9")
    assert r.code == 2 and "has no trial 9 (trials: 1, 2)" in r.err
    r = run_cli(capsys, "jobs", "cancel", "1", "--yes")
    assert r.code == 1 and "has already ended (SUCCEEDED)" in r.err

    # report of a tuning job: its best trial's run, as download takes it (a ValueError traceback: the short id was
    # resolved as a CustomJob's only); --trial picks another; --trial with a folder is refused, not ignored
    pytest.importorskip("matplotlib")
    best_job = best.custom_job.rsplit("/", 1)[-1]
    r = run_cli(capsys, "report", "1", "--out", str(tmp_path / "rep-best"))
    assert r.code == 0, r.err
    assert f"tuning job 1: trial {best.id} (the best so far)" in r.err and "Traceback" not in r.err
    assert (tmp_path / "rep-best" / "report.md").read_text().startswith(f"# ftcli report: job {best_job}\n")
    r = run_cli(capsys, "report", tj.name, "--trial", other, "--out", str(tmp_path / "rep-other"))
    assert r.code == 0, r.err
    assert (tmp_path / "rep-other" / "report.md").read_text().startswith(f"# ftcli report: job {other_job}\n")
    r = run_cli(capsys, "report", str(tmp_path / "rep-best"), "--trial", other)
    assert r.code == 2 and r.err.splitlines() == [
        f"error: --trial is for tuning jobs; {tmp_path / 'rep-best'} is a folder", "hint: run it again without --trial"]


def test_a_queued_study_says_what_it_waits_for_when_followed_and_described(capsys, cloud_env, monkeypatch):
    # Vertex keeps "a CustomJob or HyperparameterTuningJob" QUEUED while the project lacks custom-training quota: a
    # followed study said only "tuning job 1: QUEUED", and `jobs describe` the state in its title
    gcs, vertex = cloud_env
    monkeypatch.setenv("FTCLI_LOGS_INTERVAL", "0.01")
    vertex.next_tuning_scripts = [["QUEUED", "QUEUED", "CANCELLED"]]
    r = run_cli(capsys, "tune", "--task", "imdb", "--gpu", "T4", "--trials", "2", "--search",
                "learning_rate=loguniform(1e-5,1e-4)")
    assert r.code == 4, r.err
    quota = ("tuning job 1: QUEUED (queued by Vertex, not started: a long wait means the project lacks custom-training "
             "quota for it; request more at https://console.cloud.google.com/iam-admin/quotas?project=test-project, "
             "or cancel it and pick another --gpu or --region; Ctrl-C detaches, ftcli jobs cancel 1 cancels it)")
    assert quota in r.err.splitlines(), r.err
    vertex.next_tuning_scripts = [["QUEUED"]]
    assert run_cli(capsys, "tune", "--task", "imdb", "--gpu", "T4", "--trials", "2", "--detach").code == 0
    r = run_cli(capsys, "jobs", "describe", "2")
    assert r.code == 0 and "a long wait means the project lacks custom-training quota" in r.out, r.out


def test_p100_warns_of_its_end_of_support(capsys, monkeypatch, tmp_path):
    # configure-compute (read 2026-11-27): "NVIDIA P100 GPUs reach end of support on September 15, 2026".
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("FTCLI_CONFIG", str(tmp_path / "config.toml"))
    r = run_cli(capsys, "tune", "--task", "imdb", "--gpu", "P100", "--search", "learning_rate=loguniform(1e-5,1e-4)",
                "--project", "my-project", "--bucket", "gs://my-bucket/x", "--dry-run")
    assert r.code == 0, r.err
    assert [line for line in r.err.splitlines() if "end of support" in line] == [
        "note: NVIDIA P100 GPUs reached end of support on Vertex AI on September 15, 2026: jobs may be refused "
        "or lose capacity; use --gpu T4 or --gpu L4 instead"]


def test_a_failed_study_says_which_log_tells_why(cloud_env, running_vertex, cloud_logging, monkeypatch, capsys,
                                                  tmp_path, tiny_model):
    # it ended with "tuning job #1 FAILED: All trials failed." and nothing on where the reason is
    monkeypatch.setenv("FTCLI_VERTEX_ENDPOINT", running_vertex.endpoint)
    monkeypatch.setenv("FTCLI_LOGGING_ENDPOINT", cloud_logging.endpoint)
    monkeypatch.setenv("FTCLI_LOGS_INTERVAL", "0.1")
    monkeypatch.setattr(cloud_logging, "project", "test-project")
    # A row past the header of a big gs:// file (the launcher reads its first HEAD_BYTES only; 4 KiB here): the
    # trial fails at start, in its own reading of the whole file.
    monkeypatch.setattr("ftcli_trainer.data.HEAD_BYTES", 4096)
    data = write_csv(tmp_path / "train.csv", ["text", "label"], sentiment_rows(400, seed=5) + [(" ", "positive")])
    gcs, _ = cloud_env
    gcs.write("ftcli-test", "in/train.csv", data.read_bytes())
    r = run_cli(capsys, "tune", "--task", "csv", "--train-file", "gs://ftcli-test/in/train.csv", "--model",
                str(tiny_model), "--gpu", "none", "--epochs", "1", "--trials", "1",
                "--search", "max_length=int(32,64)")
    assert r.code == 3, r.err
    assert "tuning job #1 FAILED" in r.err
    assert "hint: ftcli logs 1 --trial 1 shows why trial 1 failed" in r.err
    # the trial's own error as Vertex gives it (Trial.infeasible_reason); the study's says "All trials failed"
    assert "trial 1 INFEASIBLE · max_length=" in r.out and (
        " · The replica workerpool0-0 exited with a non-zero status of 2. Termination reason: Error.\n") in r.out, r.out
    logs = run_cli(capsys, "logs", "1", "--trial", "1", "--no-follow")
    assert "gs://ftcli-test/in/train.csv line 402: empty text in column 'text'" in logs.out + logs.err


def test_a_searched_max_length_past_a_model_folders_positions_creates_nothing(cloud_env, capsys, tmp_path,
                                                                              tiny_model):
    # Found by hand: `--search max_length=int(200,300)` with a 128-position model folder was submitted, and every
    # trial stopped at start once its machine was up (this file's failed-study test was built on it).
    gcs, vertex = cloud_env
    data = write_csv(tmp_path / "train.csv", ["text", "label"], sentiment_rows(40, seed=5))
    common = ("tune", "--detach", "--task", "csv", "--train-file", str(data), "--gpu", "none", "--trials", "2")
    r = run_cli(capsys, *common, "--model", str(tiny_model), "--search", "max_length=int(64,300)")
    assert r.code == 2 and "Traceback" not in r.err, r.err
    assert (f"error: --search max_length reaches 300: --max-length 300 is longer than {tiny_model} takes (128 "
            "tokens): give --max-length 128 or less") in r.err
    r = run_cli(capsys, *common, "--max-length", "256", "--search", f"model=choice(bert-base-uncased,{tiny_model})")
    assert r.code == 2 and (f"error: --search model reaches {tiny_model}: --max-length 256 is longer than "
                            f"{tiny_model} takes (128 tokens)") in r.err, r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_reading_big_local_data_is_said_before_it_starts(capsys, monkeypatch, tmp_path):
    # As in `ftcli train`: the pre-flight read a big --train-file for a minute without a word.
    from ftcli_trainer import data

    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    train = write_csv(tmp_path / "train.csv", ["text", "label"], sentiment_rows(60))
    monkeypatch.setattr(data, "SAY_READING_BYTES", train.stat().st_size)  # the trainer's threshold
    r = run_cli(capsys, "tune", "--task", "csv", "--train-file", str(train), "--gpu", "T4", "--search",
                "learning_rate=loguniform(1e-5,1e-4)", "--project", "my-project", "--bucket", "gs://my-bucket/x",
                "--dry-run")
    assert r.code == 0, r.err
    assert r.err.startswith(f"reading train.csv ({train.stat().st_size / 1e3:.1f} kB) with the trainer's readers, to "
                            "check it before anything is uploaded\n"), r.err


def test_a_bucket_of_another_project_is_named_with_the_grant_the_trials_need(capsys, cloud_env, monkeypatch):
    # a tuning job's trials run as the project's Custom Code Service Agent too, reading /gcs/BUCKET
    gcs, vertex = cloud_env
    gcs.create_bucket("other-team", project="5678")
    monkeypatch.setenv("FTCLI_BUCKET", "gs://other-team")
    r = run_cli(capsys, "tune", "--task", "imdb", "--gpu", "L4", "--trials", "2", "--detach")
    assert r.code == 0 and len(vertex.tuning_jobs) == 1, r.err
    grant = ("gcloud storage buckets add-iam-policy-binding gs://other-team --member=serviceAccount:"
             "service-1234@gcp-sa-aiplatform-cc.iam.gserviceaccount.com --role=roles/storage.objectAdmin")
    (line,) = [x for x in r.err.splitlines() if x.startswith("warning: gs://other-team belongs to project number 5678")]
    assert grant in line


def test_a_study_unreadable_past_the_patience_says_it_was_not_stopped(capsys, cloud_env, monkeypatch):
    # A study whose state could not be read for longer than ftcli waits ended `ftcli tune` with that error alone: no
    # word that the study (its trials billed by the hour) ran on, nor how to see or cancel it.
    from ftcli import follow

    gcs, vertex = cloud_env
    monkeypatch.setenv("FTCLI_LOGS_INTERVAL", "0.01")
    monkeypatch.setattr(follow, "STATE_PATIENCE", 1.0)
    vertex.next_tuning_scripts = [[
        "RUNNING", lambda job: vertex.fail_next("GetHyperparameterTuningJob", grpc.StatusCode.INTERNAL, times=10_000,
                                                message="Internal error")]]
    r = run_cli(capsys, "tune", "--task", "imdb", "--gpu", "T4", "--trials", "2", "--search",
                "learning_rate=loguniform(1e-5,1e-4)")
    assert r.code == 1 and "Traceback" not in r.err
    assert r.err.splitlines()[-2:] == [
        "error: Vertex AI failed on Google's side (INTERNAL): Internal error (1 s of failed reads: ftcli stopped "
        "following the tuning job, which may still be running)",
        "hint: nothing in your request caused it: try again in a few minutes; https://status.cloud.google.com lists "
        "Google Cloud incidents; then its trials: ftcli jobs describe 1   cancel it: ftcli jobs cancel 1"]
