"""A full disk under the trainer's own files (metrics.jsonl, TensorBoard, the checkpoint folder): one line naming
the file and what to do, a non-zero exit, no traceback. /dev/full gives a real ENOSPC on every write, as root too,
without a tmpfs mount."""

import errno
import os

import pytest

pytest.importorskip("torch")

from ftcli_trainer.task import main  # noqa: E402

needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")


def _argv(train, tiny_model, out, *extra):
    return ["--task", "csv", "--train-file", str(train), "--model", str(tiny_model), "--epochs", "1",
            "--batch-size", "16", "--log-every", "1", "--output-dir", str(out), *extra]


@needs_dev_full
def test_a_full_disk_under_metrics_jsonl_is_one_line(tmp_path, tiny_model, sentiment_csv, capsys):
    train, _ = sentiment_csv
    out = tmp_path / "run"
    (out / "logs").mkdir(parents=True)
    metrics = out / "logs" / "metrics.jsonl"
    metrics.symlink_to("/dev/full")  # every write to it fails with ENOSPC, as on a full disk
    code = main(_argv(train, tiny_model, out))
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert code == 2, err
    (line,) = err.strip().splitlines()
    assert line.startswith("error: no space left on the device while writing the metrics to "), line
    assert str(metrics) in line and "free some space" in line
    assert not (out / "model").exists()


@pytest.mark.parametrize("code,says", [
    (errno.ENOSPC, "no space left on the device while writing the metrics to /out/logs/metrics.jsonl; free some space"),
    (errno.EDQUOT, "no space left on the device while writing the metrics to /out/logs/metrics.jsonl; free some space"),
    (errno.EROFS, "cannot write the metrics to /out/logs/metrics.jsonl: Read-only file system; point --output-dir at "
                  "a writable disk"),
    (errno.EACCES, "cannot write the metrics to /out/logs/metrics.jsonl: Permission denied; fix its permissions or "
                   "point --output-dir at a folder you may write to"),
])
def test_each_disk_error_says_what_to_do(code, says):
    from ftcli_trainer.storage import write_error

    e = OSError(code, os.strerror(code), "/out/logs/metrics.jsonl")
    line = write_error(e, "the metrics", "/out/logs/metrics.jsonl")
    assert line.startswith(says) and line.endswith("then run again") and line.count("metrics.jsonl") == 1
