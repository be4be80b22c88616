"""The trainer reading and writing gs:// (as inside Vertex), against the GCS emulator."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")

from ftcli_trainer.task import main  # noqa: E402


def test_gs_data_in_gs_outputs_out_then_resume_from_gs(gcs, tiny_model, sentiment_csv, monkeypatch, tmp_path):
    train, test = sentiment_csv
    gcs.create_bucket("vertex-out")
    gcs.write("vertex-out", "data/train.csv", train.read_bytes())
    gcs.write("vertex-out", "data/test.csv", test.read_bytes())
    base = "gs://vertex-out/runs/job-1"
    # what Vertex sets from base_output_dir
    monkeypatch.setenv("AIP_MODEL_DIR", f"{base}/model/")
    monkeypatch.setenv("AIP_CHECKPOINT_DIR", f"{base}/checkpoints/")
    monkeypatch.setenv("AIP_TENSORBOARD_LOG_DIR", f"{base}/logs/")
    monkeypatch.chdir(tmp_path)
    from ftcli_trainer import storage

    made, new_client = [], storage._new_client
    monkeypatch.setattr(storage, "_CLIENTS", {})
    monkeypatch.setattr(storage, "_new_client", lambda: made.append(1) or new_client())
    argv = ["--task", "csv", "--train-file", "gs://vertex-out/data/train.csv", "--eval-file",
            "gs://vertex-out/data/test.csv", "--model", str(tiny_model), "--epochs", "2", "--batch-size", "16",
            "--learning-rate", "3e-3"]
    assert main(argv) == 0
    assert len(made) == 1  # one storage client for the whole run: reading, checkpoints, logs, the export
    objects = gcs.list("vertex-out", "runs/job-1/")
    model = [o for o in objects if o.startswith("runs/job-1/model/")]
    for name in ("config.json", "model.safetensors", "tokenizer.json", "metrics.json", "ftcli_run.json", "_COMPLETE"):
        assert f"runs/job-1/model/{name}" in model
    ckpts = sorted({o.split("/")[3] for o in objects if o.startswith("runs/job-1/checkpoints/step-")})
    assert len(ckpts) == 2 and all(f"runs/job-1/checkpoints/{c}/_COMPLETE" in objects for c in ckpts)
    assert "runs/job-1/logs/metrics.jsonl" in objects
    assert any(o.startswith("runs/job-1/logs/events.out.tfevents") for o in objects)
    metrics = json.loads(gcs.read("vertex-out", "runs/job-1/model/metrics.json"))
    assert metrics["global_step"] == 2 * 15 and 0.0 <= metrics["eval_accuracy"] <= 1.0  # I/O test: the run finished
    assert not (tmp_path / "ftcli-runs").exists()  # nothing written locally

    curve = gcs.read("vertex-out", "runs/job-1/logs/metrics.jsonl")
    assert [json.loads(r)["step"] for r in curve.splitlines() if json.loads(r)["type"] == "eval"] == [15, 30]

    # A restarted worker (same AIP_* dirs) resumes from the bucket's newest checkpoint and finishes at once.
    assert main(argv) == 0
    again = json.loads(gcs.read("vertex-out", "runs/job-1/model/metrics.json"))
    assert again["global_step"] == metrics["global_step"]
    assert again["eval_accuracy"] == metrics["eval_accuracy"]
    # and its logs go on from the run's: its upload once replaced the whole curve with an empty metrics.jsonl
    assert gcs.read("vertex-out", "runs/job-1/logs/metrics.jsonl").startswith(curve)



def job_uploads(gcs, monkeypatch, tmp_path, job: str) -> list[str]:
    """A job's environment (_as_a_vertex_job), and the list that
    the names of the objects the trainer uploads (transfer_manager.upload_many's, not those copied inside the bucket)
    are added to."""
    from google.cloud.storage import transfer_manager

    _as_a_vertex_job(gcs, monkeypatch, tmp_path, job)
    uploaded: list[str] = []
    upload_many = transfer_manager.upload_many
    monkeypatch.setattr(transfer_manager, "upload_many",
                        lambda pairs, **kw: uploaded.extend(b.name for _, b in pairs) or upload_many(pairs, **kw))
    return uploaded


def test_a_jobs_export_copies_the_last_checkpoints_weights_inside_the_bucket(gcs, tiny_model, sentiment_csv,
                                                                             monkeypatch, tmp_path):
    # The job uploaded the last epoch's weights twice, once in its checkpoint and once in the export (BERT-base:
    # 440 MB more from the VM at the end of every job). The export's object is now a copy made by Cloud Storage.
    from safetensors import safe_open

    train, test = sentiment_csv
    uploaded = job_uploads(gcs, monkeypatch, tmp_path, "job-3")
    argv = ["--task", "csv", "--train-file", str(train), "--eval-file", str(test), "--model", str(tiny_model),
            "--epochs", "2", "--batch-size", "16"]
    assert main(argv) == 0
    weights = sorted(n for n in uploaded if n.endswith("model.safetensors"))
    assert weights == ["runs/job-3/checkpoints/step-00000015/model.safetensors",
                       "runs/job-3/checkpoints/step-00000030/model.safetensors"]
    exported = gcs.read("vertex-out", "runs/job-3/model/model.safetensors")
    assert exported == gcs.read("vertex-out", "runs/job-3/checkpoints/step-00000030/model.safetensors")
    (tmp_path / "w.safetensors").write_bytes(exported)
    with safe_open(str(tmp_path / "w.safetensors"), "pt") as f:
        assert f.metadata() == {"format": "pt"}
    assert "model.safetensors" in json.loads(gcs.read("vertex-out", "runs/job-3/model/ftcli_files.json"))["files"]

    # A worker restarted during the export (or after it) resumes from the last checkpoint and copies them again
    uploaded.clear()
    assert main(argv) == 0
    assert not [n for n in uploaded if n.endswith("model.safetensors")]
    assert gcs.read("vertex-out", "runs/job-3/model/model.safetensors") == exported

def test_a_keep_best_jobs_export_copies_the_best_weights_inside_the_bucket(gcs, tiny_model, sentiment_csv,
                                                                          monkeypatch, tmp_path):
    # With --keep-best and a best step before the last, the job uploaded the best weights twice, in best-N/ and in
    # the export. The export's object is now a copy of best-N's made by Cloud Storage.

    train, test = sentiment_csv
    uploaded = job_uploads(gcs, monkeypatch, tmp_path, "job-4")
    # (test_keep_best's run: its accuracy reaches 1.0 at step 21 and falls apart by the last step, 60)
    argv = ["--task", "csv", "--train-file", str(train), "--eval-file", str(test), "--model", str(tiny_model),
            "--epochs", "4", "--warmup-ratio", "1", "--batch-size", "16", "--learning-rate", "3e-2",
            "--eval-every", "3", "--log-every", "100", "--keep-best"]
    assert main(argv) == 0
    assert json.loads(gcs.read("vertex-out", "runs/job-4/model/metrics.json"))["best_global_step"] == 21
    assert not [n for n in uploaded if n.startswith("runs/job-4/model/") and n.endswith("model.safetensors")]
    assert gcs.read("vertex-out", "runs/job-4/model/model.safetensors") == gcs.read(
        "vertex-out", "runs/job-4/checkpoints/best-00000021/model.safetensors")
    assert "model.safetensors" in json.loads(gcs.read("vertex-out", "runs/job-4/model/ftcli_files.json"))["files"]


def test_a_keep_best_job_whose_best_is_its_last_step_uploads_those_weights_once(gcs, tiny_model, sentiment_csv,
                                                                               monkeypatch, tmp_path):
    # With --keep-best and the best evaluation at the last step (here the one evaluation of one epoch), the job
    # uploaded the same weights twice at its end: in best-15/ and in the final checkpoint step-15/. The checkpoint's
    # object is now a copy of best-15's made by Cloud Storage, as is the export's.

    train, test = sentiment_csv
    uploaded = job_uploads(gcs, monkeypatch, tmp_path, "job-5")
    argv = ["--task", "csv", "--train-file", str(train), "--eval-file", str(test), "--model", str(tiny_model),
            "--epochs", "1", "--batch-size", "16", "--keep-best"]
    assert main(argv) == 0
    metrics = json.loads(gcs.read("vertex-out", "runs/job-5/model/metrics.json"))
    assert metrics["best_global_step"] == metrics["global_step"] == 15
    assert [n for n in uploaded if n.endswith("model.safetensors")] == [
        "runs/job-5/checkpoints/best-00000015/model.safetensors"]
    kept = gcs.read("vertex-out", "runs/job-5/checkpoints/best-00000015/model.safetensors")
    assert gcs.read("vertex-out", "runs/job-5/checkpoints/step-00000015/model.safetensors") == kept
    assert gcs.read("vertex-out", "runs/job-5/model/model.safetensors") == kept
    assert "runs/job-5/checkpoints/step-00000015/_COMPLETE" in gcs.list("vertex-out", "runs/job-5/checkpoints/")

    # A worker restarted after the run ended (during its export): it resumes from step-15 and exports the same
    uploaded.clear()
    assert main(argv) == 0
    assert not [n for n in uploaded if n.endswith("model.safetensors")]
    assert gcs.read("vertex-out", "runs/job-5/model/model.safetensors") == kept


@pytest.mark.parametrize("taker", ["the_checkpoint", "the_export"])
def test_weights_deleted_from_the_bucket_before_their_copy_are_written_instead(gcs, tiny_model, sentiment_csv,
                                                                                monkeypatch, tmp_path, taker, capsys):
    # The weights object to copy was there when the trainer looked (storage.exists) and gone when Cloud Storage was
    # asked to copy it (a lifecycle rule, someone cleaning the bucket): the job ended with a NotFound traceback. It
    # now writes the weights itself, as it does when the object is not there at all. the_checkpoint: the final
    # checkpoint's copy of best-15's (--keep-best, the best at the last step); the_export: the export's copy of the
    # final checkpoint's.
    from google.cloud.storage import Blob
    from safetensors import safe_open

    train, test = sentiment_csv
    job = f"job-{taker}"
    uploaded = job_uploads(gcs, monkeypatch, tmp_path, job)
    source = {"the_checkpoint": "checkpoints/best-00000015/", "the_export": "checkpoints/step-00000015/"}[taker]
    source = f"runs/{job}/{source}model.safetensors"
    rewrite, deleted = Blob.rewrite, []

    def deleted_first(self, blob, *args, **kwargs):
        if blob.name == source and not deleted:  # between the trainer's look and Cloud Storage's copy
            blob.delete()
            deleted.append(source)
        return rewrite(self, blob, *args, **kwargs)

    monkeypatch.setattr(Blob, "rewrite", deleted_first)
    argv = ["--task", "csv", "--train-file", str(train), "--eval-file", str(test), "--model", str(tiny_model),
            "--epochs", "1", "--batch-size", "16", *(["--keep-best"] if taker == "the_checkpoint" else [])]
    capsys.readouterr()
    assert main(argv) == 0
    assert deleted == [source]
    # (checkpoint.taking_weights, for both: the object, and the folder it was to be copied into)
    into = {"the_checkpoint": "the step 15 checkpoint", "the_export": "the model"}[taker]
    assert [line for line in capsys.readouterr().out.splitlines() if "deleted before" in line] == [
        f"warning: gs://vertex-out/{source} was deleted before it could be copied into {into}; writing the weights "
        "instead"]
    written = {"the_checkpoint": f"runs/{job}/checkpoints/step-00000015/model.safetensors",
               "the_export": f"runs/{job}/model/model.safetensors"}[taker]
    assert written in uploaded  # written by the trainer, not copied
    objects = gcs.list("vertex-out", f"runs/{job}/")
    assert f"runs/{job}/checkpoints/step-00000015/_COMPLETE" in objects and f"runs/{job}/model/_COMPLETE" in objects
    (tmp_path / "w.safetensors").write_bytes(gcs.read("vertex-out", written))
    with safe_open(str(tmp_path / "w.safetensors"), "pt") as f:
        assert f.metadata() == {"format": "pt"}  # as the export writes them (from_pretrained needs it)
    assert gcs.read("vertex-out", f"runs/{job}/model/model.safetensors") == gcs.read("vertex-out", written)
    assert "model.safetensors" in json.loads(gcs.read("vertex-out", f"runs/{job}/model/ftcli_files.json"))["files"]


def _stdout_until(proc, prefix: str, deadline: float) -> None:
    for line in proc.stdout:
        if line.startswith(prefix):
            return
        assert time.monotonic() < deadline, f"no line {prefix!r} in time"
    raise AssertionError(f"the trainer ended before a line {prefix!r}: {proc.stderr.read()}")


def _rows(gcs, kind: str) -> list[int]:
    text = gcs.read("vertex-out", "runs/job-2/logs/metrics.jsonl").decode()
    return [row["step"] for row in map(json.loads, text.splitlines()) if row["type"] == kind]


def test_a_running_job_shows_its_logs_in_the_bucket_and_a_preempted_one_keeps_them(gcs, tiny_model, sentiment_csv,
                                                                                   tmp_path):
    """TensorBoard and `ftcli report` read a job's logs from the bucket: they are there after each evaluation and
    checkpoint, not only once the run is over, and a preempted attempt's rows are kept by the attempt that resumes."""
    train, test = sentiment_csv
    gcs.create_bucket("vertex-out")
    base = "gs://vertex-out/runs/job-2"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "AIP_MODEL_DIR": f"{base}/model/",
           "AIP_CHECKPOINT_DIR": f"{base}/checkpoints/", "AIP_TENSORBOARD_LOG_DIR": f"{base}/logs/"}
    argv = [sys.executable, "-m", "ftcli_trainer.task", "--task", "csv", "--train-file", str(train), "--eval-file",
            str(test), "--model", str(tiny_model), "--epochs", "2", "--batch-size", "8", "--log-every", "1"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 180
        _stdout_until(proc, "step 33/", deadline)  # epoch 1 (30 steps) evaluated and checkpointed
        proc.send_signal(signal.SIGSTOP)  # held mid-epoch 2 while the bucket is read
        try:
            assert _rows(gcs, "eval") == [30]
            assert _rows(gcs, "train")[:30] == list(range(1, 31))
            assert any(o.startswith("runs/job-2/logs/events.out.tfevents") for o in gcs.list("vertex-out"))
            assert not [o for o in gcs.list("vertex-out", "runs/job-2/model/")]
        finally:
            proc.send_signal(signal.SIGCONT)
        _stdout_until(proc, "step 40/", deadline)
        proc.send_signal(signal.SIGTERM)  # Vertex preempting a Spot VM
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, err
    preempted = gcs.read("vertex-out", "runs/job-2/logs/metrics.jsonl")
    stopped_at = _rows(gcs, "train")[-1]
    assert stopped_at >= 40 and _rows(gcs, "eval") == [30]  # the rows up to the SIGTERM, synced on the way out

    r = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    final = gcs.read("vertex-out", "runs/job-2/logs/metrics.jsonl")
    assert final.startswith(preempted)  # the first attempt's rows, then the second's
    assert sorted(set(_rows(gcs, "train"))) == list(range(1, 61)) and _rows(gcs, "eval") == [30, 60]


def _as_a_vertex_job(gcs, monkeypatch, tmp_path, job: str) -> None:
    """The trainer run in-process as Vertex runs it: AIP_* folders under gs://vertex-out/runs/JOB."""
    gcs.create_bucket("vertex-out")
    base = f"gs://vertex-out/runs/{job}"
    monkeypatch.setenv("AIP_MODEL_DIR", f"{base}/model/")
    monkeypatch.setenv("AIP_CHECKPOINT_DIR", f"{base}/checkpoints/")
    monkeypatch.setenv("AIP_TENSORBOARD_LOG_DIR", f"{base}/logs/")
    monkeypatch.chdir(tmp_path)


def test_between_evaluations_the_logs_reach_the_bucket_every_logs_sync_s(gcs, tiny_model, sentiment_csv, monkeypatch,
                                                                       tmp_path):
    """A long epoch still shows in TensorBoard while it runs: at a train line, once LOGS_SYNC_S have passed since
    the last copy (0 here: at every line)."""
    from ftcli_trainer import storage

    train, test = sentiment_csv
    _as_a_vertex_job(gcs, monkeypatch, tmp_path, "job-3")
    monkeypatch.setattr(storage, "LOGS_SYNC_S", 0.0)
    seen = []  # the bucket's train rows after each copy of the logs
    upload = storage.upload_dir

    def upload_and_look(local, uri, **kwargs):
        upload(local, uri, **kwargs)
        if uri.endswith("/logs"):
            text = gcs.read("vertex-out", "runs/job-3/logs/metrics.jsonl").decode()
            seen.append(sum(json.loads(r)["type"] == "train" for r in text.splitlines()))

    monkeypatch.setattr(storage, "upload_dir", upload_and_look)
    argv = ["--task", "csv", "--train-file", str(train), "--eval-file", str(test), "--model", str(tiny_model),
            "--epochs", "1", "--batch-size", "16", "--log-every", "5"]
    assert main(argv) == 0
    assert seen[:3] == [1, 2, 3]  # steps 5, 10, 15: one copy a train line, before the epoch's evaluation


class VmGone(BaseException):
    """The preempted VM is switched off: nothing is uploaded after this point."""


@pytest.mark.parametrize("switched_off", ["after_the_checkpoint", "during_the_checkpoint"])
def test_a_preempted_vm_switched_off_around_its_checkpoint_leaves_each_step_logged_once(
        gcs, tiny_model, sentiment_csv, monkeypatch, tmp_path, switched_off):
    """Vertex gives a preempted worker 30 s; the checkpoint is the long upload. after_the_checkpoint: the logs were
    copied after it, so a VM switched off between the two lost the rows up to it for good (the restart resumed after
    them); they are copied before it now. during_the_checkpoint (or a worker that crashed before any): the restart
    starts over from step 1, and the earlier attempt's rows, already in the bucket, were kept: steps 1-7 twice."""
    from ftcli_trainer import storage
    from ftcli_trainer.loop import Trainer

    train, test = sentiment_csv
    _as_a_vertex_job(gcs, monkeypatch, tmp_path, "job-4")
    argv = ["--task", "csv", "--train-file", str(train), "--eval-file", str(test), "--model", str(tiny_model),
            "--epochs", "1", "--batch-size", "8", "--log-every", "1"]
    record, upload = Trainer._record, storage.upload_dir
    gone = []

    def sigterm_at_step_7(self, kind, values):
        record(self, kind, values)
        if self.global_step == 7:
            os.kill(os.getpid(), signal.SIGTERM)  # the preemption notice

    def upload_until_switched_off(local, uri, **kwargs):
        checkpoint = "/checkpoints/step-" in uri
        if gone or (checkpoint and switched_off == "during_the_checkpoint"):
            raise VmGone
        upload(local, uri, **kwargs)
        gone.extend(["off"] if checkpoint else [])  # the VM goes right after the checkpoint

    monkeypatch.setattr(Trainer, "_record", sigterm_at_step_7)
    monkeypatch.setattr(storage, "upload_dir", upload_until_switched_off)
    with pytest.raises(VmGone):
        main(argv)
    checkpoints = [o for o in gcs.list("vertex-out") if "/checkpoints/step-" in o]
    if switched_off == "after_the_checkpoint":
        assert "runs/job-4/checkpoints/step-00000007/_COMPLETE" in checkpoints
    else:
        assert checkpoints == []

    monkeypatch.setattr(Trainer, "_record", record)
    monkeypatch.setattr(storage, "upload_dir", upload)
    assert main(argv) == 0  # the restarted worker resumes at step 7, or starts over
    rows = [json.loads(r) for r in gcs.read("vertex-out", "runs/job-4/logs/metrics.jsonl").decode().splitlines()]
    assert [r["step"] for r in rows if r["type"] == "train"] == list(range(1, 31))


SIGTERM_AT = """
import os, signal, sys
from ftcli_trainer import {module}, task
real = {module}.{function}

def preempted(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # the preemption notice
    return real(*args, **kwargs)

{module}.{function} = preempted
task._exit(task.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("module,function", [("data", "load_task_data"), ("export", "export_model")],
                         ids=["while_the_data_loads", "during_the_export"])
def test_a_sigterm_outside_the_training_loop_says_so_and_gives_the_buckets_lock_back(gcs, tiny_model, sentiment_csv,
                                                                                      tmp_path, module, function):
    """Outside the training loop (the data, tokenizer and model loading; the export after the last checkpoint) a
    SIGTERM killed the trainer at once: no line, and its lock on the gs:// checkpoint folder left there, so the same
    command (ftcli local --output-dir gs://..., not a Vertex job's restarted worker) was refused for up to 5 minutes
    as "in use by another run". It still leaves at once, now with one line, 143 and the lock given back."""
    train, test = sentiment_csv
    gcs.create_bucket("b")
    argv = ["--task", "csv", "--train-file", str(train), "--eval-file", str(test), "--model", str(tiny_model),
            "--epochs", "1", "--batch-size", "16", "--output-dir", "gs://b/run"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    code = SIGTERM_AT.format(module=module, function=function)
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=300)
    assert r.returncode == 143, r.stderr
    assert r.stderr.splitlines() == ["stopped: SIGTERM; a restarted worker, or the same command, goes on from the "
                                     "newest complete checkpoint (from the start if there is none)"]
    objects = gcs.list("b", "run/")
    assert "run/checkpoints/.run.lock" not in objects
    assert not [o for o in objects if o.startswith("run/model/")]
    assert ("run/checkpoints/step-00000015/_COMPLETE" in objects) == (module == "export")

    again = subprocess.run([sys.executable, "-m", "ftcli_trainer.task", *argv], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "run/model/_COMPLETE" in gcs.list("b", "run/model/")
