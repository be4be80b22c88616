"""Preemption: SIGTERM mid-run, restart, and end exactly where an uninterrupted run ends."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
from safetensors.torch import load_file  # noqa: E402

from tests.trainer.helpers import sigterm_when_evaluating  # noqa: E402


def _argv(train, test, tiny_model, out):
    return [sys.executable, "-m", "ftcli_trainer.task", "--task", "csv", "--train-file", str(train),
            "--eval-file", str(test), "--model", str(tiny_model), "--epochs", "2", "--batch-size", "8",
            "--learning-rate", "2e-3", "--log-every", "1", "--output-dir", str(out)]


def test_sigterm_then_restart_matches_an_uninterrupted_run(tmp_path, tiny_model, sentiment_csv):
    train, test = sentiment_csv
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # deterministic CPU kernels for a tight comparison
    ref = tmp_path / "ref"
    subprocess.run(_argv(train, test, tiny_model, ref), check=True, capture_output=True, env=env)

    out = tmp_path / "interrupted"
    proc = subprocess.Popen(_argv(train, test, tiny_model, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    deadline = time.monotonic() + 120
    for line in proc.stdout:  # SIGTERM as soon as step 7 of 60 is logged: mid-epoch
        if line.startswith("step 7/") or time.monotonic() > deadline:
            proc.send_signal(signal.SIGTERM)
            break
    rest, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "SIGTERM: checkpoint written at step" in err
    assert not (out / "model").exists()
    ckpts = sorted((out / "checkpoints").glob("step-*"))
    assert ckpts and (ckpts[-1] / "_COMPLETE").exists()

    # a torn checkpoint newer than the good one must be ignored, not loaded
    torn = out / "checkpoints" / "step-99999999"
    torn.mkdir()
    (torn / "trainer_state.pt").write_bytes(b"garbage")

    r = subprocess.run(_argv(train, test, tiny_model, out), capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "ignoring checkpoint" in r.stdout and "resuming from" in r.stdout
    # said as a warning (it was a bare line, like the step lines around it)
    assert any(line.startswith("warning: ignoring checkpoint ") for line in r.stdout.splitlines()), r.stdout
    assert not torn.exists()  # cleaned up by the next save
    assert len(list((out / "checkpoints").glob("step-*"))) == 2  # the last two are kept

    a, b = load_file(ref / "model" / "model.safetensors"), load_file(out / "model" / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6, msg=k)
    ma = json.loads((ref / "model" / "metrics.json").read_text())
    mb = json.loads((out / "model" / "metrics.json").read_text())
    assert mb["eval_accuracy"] == ma["eval_accuracy"]
    assert mb["eval_loss"] == pytest.approx(ma["eval_loss"], rel=1e-5)
    assert mb["train_loss"] == pytest.approx(ma["train_loss"], rel=1e-5)
    # padded_tokens was not in the checkpoint: a resumed run's pad fraction came out wrong, even negative
    assert mb["train_pad_fraction"] == pytest.approx(ma["train_pad_fraction"], abs=1e-9)


def test_another_runs_checkpoints_in_the_output_folder_are_refused_untouched(tmp_path, tiny_model, sentiment_csv):
    """The Vertex case: a job pointed at a folder that holds another run's checkpoints (here: another seed), by
    --output-dir or by Vertex's AIP_* variables, stops in one line before any work and leaves them as they were."""
    train, test = sentiment_csv
    out = tmp_path / "run"
    argv = [*_argv(train, test, tiny_model, out), "--epochs", "1"]
    first = subprocess.run(argv, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert list((out / "checkpoints").glob("step-*/_COMPLETE"))
    # (the lock file says which live process holds the folder: each run writes its pid there)
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(out.rglob("*")) if p.is_file()
              and p.name != ".run.lock"}

    vertex = argv[:argv.index("--output-dir")] + ["--epochs", "1"]
    aip = {**os.environ, "AIP_MODEL_DIR": str(out / "model"), "AIP_CHECKPOINT_DIR": str(out / "checkpoints"),
           "AIP_TENSORBOARD_LOG_DIR": str(out / "logs")}
    for cmd, env in ((argv, None), (vertex, aip)):
        r = subprocess.run([*cmd, "--seed", "7"], capture_output=True, text=True, env=env)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "Traceback" not in r.stderr
        assert r.stderr.splitlines() == [
            f"error: {out / 'checkpoints'} holds checkpoints of a different run (seed differs): resuming them would "
            "mix two runs", "hint: start fresh with a new --output-dir, or move that folder away"], r.stderr
        assert "step " not in r.stdout and "resuming from" not in r.stdout  # refused before any work
        after = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(out.rglob("*")) if p.is_file()
                 and p.name != ".run.lock"}
        assert after == before


def test_the_last_checkpoint_skips_the_optimizer_and_a_restart_only_evaluates_and_exports(tmp_path, tiny_model,
                                                                                        sentiment_csv):
    """After the last epoch no step will use the optimizer state (twice the weights' size), so that checkpoint goes
    without it; a job restarted between it and the export evaluates and exports the same model without training."""
    train, test = sentiment_csv
    out = tmp_path / "run"
    argv = _argv(train, test, tiny_model, out)
    first = subprocess.run(argv, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    ckpts = sorted((out / "checkpoints").glob("step-*"))
    assert len(ckpts) == 2  # epoch 1 and epoch 2
    states = [torch.load(c / "trainer_state.pt", weights_only=True) for c in ckpts]
    assert "optimizer" in states[0] and "scheduler" in states[0] and states[0]["epoch"] == 1
    assert "optimizer" not in states[1] and "scheduler" not in states[1] and states[1]["epoch"] == 2
    assert (ckpts[1] / "trainer_state.pt").stat().st_size < (ckpts[0] / "trainer_state.pt").stat().st_size / 10
    exported = load_file(out / "model" / "model.safetensors")
    metrics = json.loads((out / "model" / "metrics.json").read_text())

    shutil.rmtree(out / "model")  # the job died before its export
    again = subprocess.run(argv, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert "resuming from" in again.stdout and "\nstep " not in again.stdout  # no training step
    b = load_file(out / "model" / "model.safetensors")
    assert b.keys() == exported.keys() and all(torch.equal(b[k], exported[k]) for k in b)
    m = json.loads((out / "model" / "metrics.json").read_text())
    assert m["eval_accuracy"] == metrics["eval_accuracy"] and m["train_loss"] == pytest.approx(metrics["train_loss"])

    # a checkpoint without optimizer state before the last epoch can only be a damaged one: one line, no training
    states[1]["epoch"] = 1
    torch.save(states[1], ckpts[1] / "trainer_state.pt")
    shutil.rmtree(out / "model")
    bad = subprocess.run(argv, capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "has no optimizer state but the run is at epoch 1 of 2: remove that folder" in bad.stderr
    assert not (out / "model").exists()


def test_a_restart_after_a_crash_shows_each_step_once_in_tensorboard(tmp_path, tiny_model, sentiment_csv,
                                                                       monkeypatch):
    """A worker that dies after its step-4 checkpoint has logged steps 5 and 6, which the restart trains again. The
    earlier attempt's event files stay (nothing is deleted), and TensorBoard's Python loader (`--load_fast=false`,
    the one without the data server) shows each step once with the restart's value, as `ftcli report` does with
    metrics.jsonl. Without purge_step it showed steps 5 and 6 twice."""
    from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator

    from ftcli_trainer.loop import Trainer
    from ftcli_trainer.task import main

    train, test = sentiment_csv
    out = tmp_path / "run"
    argv = [*_argv(train, test, tiny_model, out)[3:], "--epochs", "1", "--save-every", "4"]
    record = Trainer._record

    def dies_at_step_7(self, kind, values):
        if self.global_step == 7:
            raise RuntimeError("the worker died")
        record(self, kind, values)

    monkeypatch.setattr(Trainer, "_record", dies_at_step_7)
    assert main(argv) == 1
    # TensorBoard reads a run's event files in name order: events.out.tfevents.<seconds>.<host>.<pid>.<writer
    # number>. A restart is a new process seconds later; here it is the same process, where the writer number
    # (10 after 9) would sort the restart's file first within one second.
    time.sleep(1.05 - time.time() % 1)
    monkeypatch.setattr(Trainer, "_record", record)
    with open(out / "logs" / "metrics.jsonl", "a") as f:
        f.write('{"type": "train", "step": 7, "lo')  # a row the kill cut short
    assert main(argv) == 0

    rows = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in rows if r["type"] == "train"]
    # Each step once, in order: the rows the first attempt logged after its step-4 checkpoint (5, 6) are logged
    # again by the restart, and the file had them twice (1 2 3 4 5 6 5 6 7 ...); the cut-off line is gone.
    assert train_steps == list(range(1, train_steps[-1] + 1))
    last = {r["step"]: r["loss"] for r in rows if r["type"] == "train"}
    assert len(list((out / "logs").glob("events.out.tfevents.*"))) == 2

    acc = EventAccumulator(str(out / "logs"))
    acc.Reload()
    shown = [(e.step, float(e.tensor_proto.float_val[0])) for e in acc.Tensors("train/loss")]
    assert [s for s, _ in shown] == sorted(last)  # each step once, in order
    assert all(v == pytest.approx(last[s]) for s, v in shown)  # steps 5 and 6: the restart's values


@pytest.mark.parametrize("during", ["the epoch's evaluation", "a --save-every checkpoint"])
def test_a_sigterm_during_a_checkpoint_stops_with_that_checkpoint(tmp_path, tiny_model, sentiment_csv, monkeypatch,
                                                                   capsys, during):
    """Vertex gives a preempted worker ~30 s after its SIGTERM. One that arrived while the epoch's evaluation and
    checkpoint (or a --save-every checkpoint) were running trained one more step and wrote a second checkpoint
    before it stopped: twice the upload in those seconds, and a torn second one if the VM went first."""
    from ftcli_trainer import checkpoint
    from ftcli_trainer.task import main

    train, test = sentiment_csv
    out = tmp_path / "run"
    argv = [*_argv(train, test, tiny_model, out)[3:], "--epochs", "3"]  # 30 steps an epoch
    if during == "the epoch's evaluation":
        sigterm_when_evaluating(monkeypatch, 30)
        stop = 30
    else:
        argv += ["--save-every", "10"]
        save = checkpoint.save

        def sigterm_while_saving(root, step, model, state, **kw):
            if step == 20:
                os.kill(os.getpid(), signal.SIGTERM)
            return save(root, step, model, state, **kw)

        monkeypatch.setattr(checkpoint, "save", sigterm_while_saving)
        stop = 20
    assert main(argv) == 143
    assert f"SIGTERM: checkpoint written at step {stop};" in capsys.readouterr().err
    assert sorted(p.name for p in (out / "checkpoints").glob("step-*"))[-1] == f"step-{stop:08d}"
    rows = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == stop  # no step trained after the SIGTERM's checkpoint


def test_a_checkpoint_whose_weight_decay_groups_differ_is_refused_in_one_line(tmp_path, tiny_model, sentiment_csv):
    """A checkpoint written by a trainer that grouped the weights for decay otherwise (by shape, before the groups
    followed the HF Trainer's names): resuming it was torch's ValueError traceback from optimizer.load_state_dict."""
    train, test = sentiment_csv
    out = tmp_path / "run"
    proc = subprocess.Popen(_argv(train, test, tiny_model, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if line.startswith("step 7/") or time.monotonic() > deadline:
            proc.send_signal(signal.SIGTERM)
            break
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    ckpt = sorted((out / "checkpoints").glob("step-*"))[-1]
    state = torch.load(ckpt / "trainer_state.pt", map_location="cpu", weights_only=True)
    decay, no_decay = state["optimizer"]["param_groups"]
    decay["params"].append(no_decay["params"].pop())  # one weight in the other group, as the older rule put it
    torch.save(state, ckpt / "trainer_state.pt")
    step = int(ckpt.name.split("-")[1])

    r = subprocess.run(_argv(train, test, tiny_model, out), capture_output=True, text=True)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.splitlines() == [
        f"error: the step {step} checkpoint in {out / 'checkpoints'} was written by a trainer that grouped the weights "
        f"for weight decay differently ([{len(decay['params'])}, {len(no_decay['params'])}] weights per group, "
        f"[{len(decay['params']) - 1}, {len(no_decay['params']) + 1}] now): finish the run with the ftcli version "
        "that started it, or start over with another --output-dir"], r.stderr
    assert not (out / "model").exists()


@pytest.mark.parametrize("at,extra,stop", [
    ("an epoch's evaluation", (), 30),
    ("the last epoch's evaluation", (), 60),
    ("an --eval-every evaluation", ("--eval-every", "20"), 20),
])
def test_a_sigterm_during_an_evaluation_cuts_it_short_and_the_restart_evaluates_first(
        tmp_path, tiny_model, sentiment_csv, monkeypatch, capsys, at, extra, stop):
    """A preempted Spot VM has ~30 s after its SIGTERM; an epoch's evaluation can take minutes (IMDB's 25k reviews on
    a T4). The evaluation ran to its end before the checkpoint, the VM went first, and the restart began the epoch
    again. Now the evaluation stops at the next batch, the checkpoint says it is still to do, and the restart does it
    first: the same rows in metrics.jsonl, each once, and the same model as a run never stopped."""
    _cut_an_evaluation_then_restart(tmp_path, tiny_model, sentiment_csv, monkeypatch, capsys, extra, stop)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_an_evaluation_cut_short_on_the_graph_path_is_done_first_by_the_restart(tmp_path, tiny_model, sentiment_csv,
                                                                                  monkeypatch, capsys):
    """The same on a GPU with the defaults (CUDA graphs, weight copies, warm-up): the restart's evaluation runs
    between the captures made before the clock and the first replay. (The weights are not compared: a GPU's
    atomics make two runs differ in the last bits.)"""
    _cut_an_evaluation_then_restart(tmp_path, tiny_model, sentiment_csv, monkeypatch, capsys, (), 30,
                                    same_weights=False)


def _cut_an_evaluation_then_restart(tmp_path, tiny_model, sentiment_csv, monkeypatch, capsys, extra, stop,
                                    same_weights=True):
    from ftcli_trainer import loop
    from ftcli_trainer.task import main

    train, test = sentiment_csv
    argv = [*_argv(train, test, tiny_model, tmp_path / "ref")[3:], *extra]  # 2 epochs of 30 steps, 4 eval batches
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert main(argv) == 0
    out = tmp_path / "run"
    argv[argv.index("--output-dir") + 1] = str(out)

    evaluate, collate = loop.Trainer.evaluate, loop.collate
    eval_batches = []

    def evaluating(self):
        eval_batches.append(self.global_step)
        try:
            return evaluate(self)
        finally:
            eval_batches.append(None)

    def sigterm_at_the_second_batch(enc, idx, *args):
        if eval_batches and eval_batches[-1] is not None:  # (inside evaluate)
            if eval_batches[-1] == stop and eval_batches.count(stop) == 2:
                os.kill(os.getpid(), signal.SIGTERM)
            eval_batches.append(eval_batches[-1])
        return collate(enc, idx, *args)

    monkeypatch.setattr(loop.Trainer, "evaluate", evaluating)
    monkeypatch.setattr(loop, "collate", sigterm_at_the_second_batch)
    assert main(argv) == 143
    assert f"SIGTERM: checkpoint written at step {stop};" in capsys.readouterr().err
    assert eval_batches.count(stop) == 3  # the call, then 2 of its 4 batches: cut at the third
    monkeypatch.undo()

    state = torch.load(out / "checkpoints" / f"step-{stop:08d}" / "trainer_state.pt", weights_only=True)
    assert state["eval_pending"] is True
    assert ("optimizer" in state) == (stop < 60)  # the last epoch's checkpoint has none: nothing left to train
    metrics_file = out / "logs" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    assert rows[-1]["step"] == stop and [r for r in rows if r["type"] == "eval" and r["step"] == stop] == []
    # An attempt before this one that evaluated it and was then stopped (again) left its row: logged once, not twice
    with metrics_file.open("a") as f:
        f.write(json.dumps({"type": "eval", "step": stop, "epoch": 0.0, "eval_accuracy": 0.0}) + "\n")

    assert main(argv) == 0
    assert f"evaluating step {stop} first: a stop cut its evaluation short" in capsys.readouterr().out

    def shown(run):
        return [(r["type"], r["step"]) for r in map(json.loads, (run / "logs" / "metrics.jsonl").read_text()
                                                    .splitlines())]

    assert shown(out) == shown(tmp_path / "ref")
    assert (out / "model" / "model.safetensors").is_file()
    if not same_weights:
        return
    ma = json.loads((tmp_path / "ref" / "model" / "metrics.json").read_text())
    mb = json.loads((out / "model" / "metrics.json").read_text())
    assert mb["eval_accuracy"] == ma["eval_accuracy"]
    assert mb["eval_loss"] == pytest.approx(ma["eval_loss"], rel=1e-5)
    a, b = load_file(tmp_path / "ref" / "model" / "model.safetensors"), load_file(out / "model" / "model.safetensors")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6, msg=k)


def test_a_sigterm_as_a_finished_run_resumes_to_export_stops_in_one_line(tmp_path, tiny_model, sentiment_csv,
                                                                          monkeypatch, capsys):
    """A run resumed after its last checkpoint (the worker restarted during the export) only evaluates and exports;
    a SIGTERM taken by the loop's handler there cut that evaluation short (loop.EvalCut) out of fit: a traceback and
    exit status 1. It stops as any stop: one line, 143, the checkpoint left for the next restart."""
    from ftcli_trainer.loop import Trainer
    from ftcli_trainer.task import main

    train, test = sentiment_csv
    out = tmp_path / "run"
    argv = [*_argv(train, test, tiny_model, out)[3:], "--epochs", "1"]
    assert main(argv) == 0
    shutil.rmtree(out / "model")
    capsys.readouterr()

    def sigterm(self):
        os.kill(os.getpid(), signal.SIGTERM)  # once the loop's handlers are on, before the evaluation
        return None

    monkeypatch.setattr(Trainer, "_early_stopping_idle", sigterm)
    assert main(argv) == 143
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines() == ["stopped: SIGTERM: checkpoint written at step 30; a restarted worker, or the same "
                                "command, resumes from it"]
    monkeypatch.undo()
    assert main(argv) == 0 and (out / "model" / "model.safetensors").is_file()
