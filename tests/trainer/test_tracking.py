"""Weights & Biases for real (offline mode): the run's lines reach a W&B run, the key comes from Secret Manager
(the emulator, over its gRPC protocol) and is written nowhere."""

from __future__ import annotations

import json
import struct

import pytest

from ftcli_trainer.task import main

pytest.importorskip("wandb")
KEY = "wandb-key-0123456789abcdef0123456789abcdef01234567"  # 40+ characters, like a real one


def wandb_records(path):
    """The Record protos of a .wandb file: a 7-byte header (":W&B", magic, version), then LevelDB-log records in
    32 KiB blocks (crc32c, length, type FULL/FIRST/MIDDLE/LAST)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, out, pending = 7, 32768, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            break
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            out.append(record)
            pending = b""
    return out


def test_a_run_logs_to_wandb_with_the_key_from_secret_manager(tmp_path, monkeypatch, secret_manager, sentiment_csv,
                                                              tiny_model):
    secret_manager.put("projects/p/secrets/wandb", KEY.encode())
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    (tmp_path / "wb").mkdir()
    train, test = sentiment_csv
    code = main(["--task", "csv", "--train-file", str(train), "--eval-file", str(test), "--model", str(tiny_model),
                 "--epochs", "2", "--batch-size", "16", "--log-every", "2", "--output-dir", str(tmp_path / "run"),
                 "--wandb-project", "ftcli-test", "--wandb-secret", "projects/p/secrets/wandb"])
    assert code == 0
    (run_file,) = (tmp_path / "wb").rglob("run-*.wandb")
    records = wandb_records(run_file)
    history = [{(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item}
               for r in records if r.WhichOneof("record_type") == "history"]
    assert any("train/loss" in h for h in history)
    evals = [h for h in history if "eval/eval_accuracy" in h]
    assert len(evals) == 2  # one per epoch
    final = json.loads((tmp_path / "run" / "model" / "metrics.json").read_text())
    assert evals[-1]["eval/eval_accuracy"] == pytest.approx(final["eval_accuracy"])
    configs = {i.key: i.value_json for r in records for i in
               (r.run.config.update if r.WhichOneof("record_type") == "run" else
                r.config.update if r.WhichOneof("record_type") == "config" else [])}
    assert json.loads(configs["wandb_project"]) == "ftcli-test" and "wandb_secret" not in configs
    # the key is used, and written nowhere: not in W&B's files, not in the run folder
    for path in [*(tmp_path / "wb").rglob("*"), *(tmp_path / "run").rglob("*")]:
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_a_missing_secret_is_one_line(tmp_path, monkeypatch, secret_manager, sentiment_csv, tiny_model, capsys):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    train, _ = sentiment_csv
    code = main(["--task", "csv", "--train-file", str(train), "--model", str(tiny_model), "--epochs", "1",
                 "--output-dir", str(tmp_path / "run"), "--wandb-project", "p",
                 "--wandb-secret", "projects/p/secrets/missing"])
    err = capsys.readouterr().err
    assert code == 2
    assert "cannot read the W&B key from projects/p/secrets/missing/versions/latest" in err
    assert "roles/secretmanager.secretAccessor" in err and "Traceback" not in err


def test_a_restarted_worker_goes_on_with_the_same_wandb_run(tmp_path, monkeypatch, sentiment_csv, tiny_model):
    """One W&B run per training run, not per attempt: a worker that dies after a checkpoint comes back to the W&B run
    of its id (kept beside the checkpoints, resumed with resume="allow"); one that died before any checkpoint starts
    again from step 0, under a new id. A failed attempt's W&B run ends as failed."""
    from ftcli_trainer.checkpoint import WANDB_RUN_ID
    from ftcli_trainer.loop import Trainer

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    train, test = sentiment_csv
    out = tmp_path / "run"
    argv = ["--task", "csv", "--train-file", str(train), "--eval-file", str(test), "--model", str(tiny_model),
            "--epochs", "1", "--batch-size", "8", "--log-every", "1", "--save-every", "4", "--output-dir", str(out),
            "--wandb-project", "ftcli-test"]
    record = Trainer._record

    def attempt(dies_at: int | None) -> tuple[str, bool, int]:
        """Run the trainer once (dying at step `dies_at`); its W&B run's id, resume flag and exit code."""
        wb = tmp_path / f"wb{len(list(tmp_path.glob('wb*')))}"
        wb.mkdir()
        monkeypatch.setenv("WANDB_DIR", str(wb))

        def dies(self, kind, values):
            if self.global_step == dies_at:
                raise RuntimeError("the worker died")
            record(self, kind, values)

        monkeypatch.setattr(Trainer, "_record", dies)
        assert main(argv) == (1 if dies_at else 0)
        (run_file,) = wb.rglob("run-*.wandb")
        records = wandb_records(run_file)
        (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
        (end,) = [r.exit for r in records if r.WhichOneof("record_type") == "exit"]
        assert run.run_id == (out / "checkpoints" / WANDB_RUN_ID).read_text().strip()
        return run.run_id, run.resume, end.exit_code

    first, _, failed = attempt(dies_at=2)  # before the step-4 checkpoint
    second, resume, _ = attempt(dies_at=7)  # after it
    third, _, code = attempt(dies_at=None)
    assert failed == 1 and code == 0
    assert second != first  # started again from step 0: a new W&B run
    assert third == second and resume  # resumed from step 4: the same W&B run
