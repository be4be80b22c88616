"""The trainer reading and writing gs:// (as inside Vertex), against the GCS emulator."""

import json

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
    argv = ["--task", "csv", "--train-file", "gs://vertex-out/data/train.csv", "--eval-file",
            "gs://vertex-out/data/test.csv", "--model", str(tiny_model), "--epochs", "2", "--batch-size", "16",
            "--learning-rate", "3e-3"]
    assert main(argv) == 0
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

    # A restarted worker (same AIP_* dirs) resumes from the bucket's newest checkpoint and finishes at once.
    assert main(argv) == 0
    again = json.loads(gcs.read("vertex-out", "runs/job-1/model/metrics.json"))
    assert again["global_step"] == metrics["global_step"]
    assert again["eval_accuracy"] == metrics["eval_accuracy"]
