"""--keep-best and --early-stopping: the exported model is the best evaluation's, a run stops after N evaluations
without improvement, and both survive a restart. The run: the tiny BERT on the sentiment csvs with the learning rate
warming up over the whole run to a rate too high for it (3e-2): its accuracy reaches 1.0 at step 21 and falls apart
after step 45 (0.17 at the last step, 60)."""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ftcli_trainer.config import parse_args  # noqa: E402
from ftcli_trainer.task import main  # noqa: E402

RISE_AND_FALL = ("--epochs", "4", "--warmup-ratio", "1", "--batch-size", "16", "--learning-rate", "3e-2",
                 "--eval-every", "3", "--log-every", "100")


@pytest.fixture(autouse=True)
def _one_thread():
    """One CPU thread: these runs are a second each so, where two threads on a shared 2-core machine took 20-30."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _argv(csvs, tiny_model, out: Path, *args: str) -> list[str]:
    train, test = csvs
    return ["--task", "csv", "--train-file", str(train), "--eval-file", str(test), "--model", str(tiny_model),
            "--output-dir", str(out), *RISE_AND_FALL, *args]


def _evals(out: Path) -> list[dict]:
    return [row for row in map(json.loads, (out / "logs" / "metrics.jsonl").open()) if row["type"] == "eval"]


def _metrics(out: Path) -> dict:
    return json.loads((out / "model" / "metrics.json").read_text())


def _weights(path: Path) -> dict:
    from safetensors.numpy import load_file

    return load_file(path)


def _trainer(tmp_path: Path, tiny_model, train: Path, *args: str):
    """A Trainer of the tiny model on `train` (no eval set), its checkpoints in tmp_path/c."""
    from ftcli_trainer.data import encode, load_task_data
    from ftcli_trainer.loop import Paths, Trainer
    from ftcli_trainer.model import load_model, load_tokenizer

    cfg = parse_args(["--task", "csv", "--train-file", str(train), "--model", str(tiny_model), "--batch-size", "16",
                      *args])
    data = load_task_data(cfg)
    tok = load_tokenizer(cfg.model)
    model = load_model(cfg.model, data.label_names, False, cfg.threshold)
    paths = Paths(str(tmp_path / "m"), str(tmp_path / "c"), str(tmp_path / "l"), tmp_path / "l")
    return Trainer(cfg, model, encode(tok, data.train, 64), {}, data.label_names, False, torch.device("cpu"), "fp32",
                   paths, 0)


def _reevaluate(csvs, tiny_model, model_dir: Path) -> dict:
    """The exported model evaluated again, apart from the run: loaded from its folder into a new Trainer."""
    from transformers import AutoModelForSequenceClassification

    from ftcli_trainer.data import encode, load_task_data
    from ftcli_trainer.loop import Paths, Trainer
    from ftcli_trainer.model import load_tokenizer

    train, test = csvs
    cfg = parse_args(["--task", "csv", "--train-file", str(train), "--eval-file", str(test), "--model",
                      str(model_dir), *RISE_AND_FALL])
    data = load_task_data(cfg)
    tok = load_tokenizer(str(model_dir))
    model = AutoModelForSequenceClassification.from_pretrained(model_dir)
    enc = {name: encode(tok, ex, cfg.max_length) for name, ex in data.evals.items()}
    paths = Paths("m", "c", "l", model_dir.parent / "reeval-logs")
    trainer = Trainer(cfg, model, encode(tok, data.train, cfg.max_length), enc, data.label_names, False,
                      torch.device("cpu"), "fp32", paths, int(tok.pad_token_id))
    return trainer.evaluate()


def test_keep_best_exports_the_best_evaluations_weights_not_the_last(tmp_path, tiny_model, sentiment_csv):
    out = tmp_path / "run"
    assert main(_argv(sentiment_csv, tiny_model, out, "--keep-best")) == 0
    evals = _evals(out)
    accuracy = [e["eval_accuracy"] for e in evals]
    best = evals[int(np.argmax(accuracy))]  # the first of the best: a tie is no improvement (HF's np.greater)
    assert (best["step"], best["eval_accuracy"]) == (21, 1.0) and evals[-1]["step"] == 60
    # the run fell apart (below 0.5 on torch 2.13, to the majority class's 0.62 on the job image's 2.7.1): the last
    # step is not the one to export
    assert evals[-1]["eval_accuracy"] <= 0.62

    m = _metrics(out)
    assert (m["best_global_step"], m["best_epoch"], m["metric_for_best_model"]) == (21, 1.4, "eval_accuracy")
    assert m["best_metric"] == 1.0 and m["global_step"] == 60 and m["epoch"] == 4.0
    # the exported model's own evaluation, bit for bit the one logged at step 21; the last step's beside it
    for key in ("eval_accuracy", "eval_loss", "eval_macro_f1"):
        assert m[key] == best[key], key
    assert m["last_eval"] == {"global_step": 60, "epoch": 4.0, **{k: v for k, v in evals[-1].items()
                                                                  if k not in ("type", "step", "epoch")}}
    assert "early_stopping" not in m
    # the exported weights are the best folder's, and evaluated apart from the run they give step 21's loss
    kept = _weights(out / "checkpoints" / "best-00000021" / "model.safetensors")
    exported = _weights(out / "model" / "model.safetensors")
    assert kept.keys() <= exported.keys()
    for name, w in kept.items():
        np.testing.assert_array_equal(exported[name], w, err_msg=name)
    again = _reevaluate(sentiment_csv, tiny_model, out / "model")
    assert (again["eval_accuracy"], again["eval_loss"]) == (best["eval_accuracy"], best["eval_loss"])
    # the predictions ftcli report draws are the exported model's too
    with np.load(out / "model" / "eval_predictions.npz") as npz:
        assert (npz["eval/predicted"] == npz["eval/labels"]).all()
    run = json.loads((out / "model" / "ftcli_run.json").read_text())
    assert run["keep_best"] is True and run["early_stopping"] == 0
    # only the kept best folder is left, beside the last two checkpoints
    assert sorted(p.name for p in (out / "checkpoints").iterdir() if not p.name.startswith((".", "run-"))) == [
        "best-00000021", "step-00000045", "step-00000060"]
    assert json.loads((out / "checkpoints" / "best-00000021" / "best.json").read_text()) == {
        "step": 21, "epoch": 1.4, "value": 1.0, "metric": "eval_accuracy", "weights_as_exported": True}


def test_the_best_weights_are_written_once_and_the_export_takes_them_an_earlier_trainers_best_still_exports(
        tmp_path, tiny_model, sentiment_csv):
    # When the best step was not the last, best-N's weights (safetensors' save_model) and the export's (save_pretrained)
    # were the same tensors written twice at the end of the run. best-N's file is now written as the export writes it
    # and the export takes it; a best-N of an earlier trainer (save_model's file, no flag in best.json) is still
    # loaded back and exported, by writing the weights as before.
    import os

    from safetensors import safe_open
    from safetensors.torch import save_file
    from transformers import AutoModelForSequenceClassification

    from ftcli_trainer import checkpoint

    out = tmp_path / "run"
    argv = _argv(sentiment_csv, tiny_model, out, "--keep-best")
    assert main(argv) == 0
    best, exported = out / "checkpoints" / "best-00000021", out / "model" / "model.safetensors"
    assert _metrics(out)["best_global_step"] == 21
    assert os.path.samefile(exported, best / "model.safetensors")
    with safe_open(str(exported), "pt") as f:
        assert f.metadata() == {"format": "pt"}  # what from_pretrained requires of a safetensors file
    weights = _weights(exported)
    assert json.loads((best / "best.json").read_text())["weights_as_exported"] is True

    # the resume from a best loads it (load_best: strict), stopped during the export: taken again
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model, num_labels=2)
    checkpoint.load_best(str(out / "checkpoints"), 21, model)
    assert all(np.array_equal(model.state_dict()[k].numpy(), w) for k, w in weights.items())
    shutil.rmtree(out / "model")
    assert main(argv) == 0
    assert os.path.samefile(exported, best / "model.safetensors") and _metrics(out)["best_global_step"] == 21

    # an earlier trainer's best-21: save_model's file (a tied weight's second name in its metadata), no flag
    from safetensors.torch import _remove_duplicate_names, load_file

    tensors = load_file(best / "model.safetensors")
    for kept, removed in _remove_duplicate_names(model.state_dict()).items():
        assert all(name not in tensors for name in removed), kept
    (best / "model.safetensors").unlink()
    save_file(tensors, best / "model.safetensors")  # (no "format": from_pretrained would refuse this file)
    (best / "best.json").write_text(json.dumps({"step": 21, "epoch": 1.4, "value": 1.0, "metric": "eval_accuracy"}))
    shutil.rmtree(out / "model")
    assert main(argv) == 0
    assert not os.path.samefile(exported, best / "model.safetensors")
    again = _weights(exported)
    assert again.keys() == weights.keys() and all(np.array_equal(again[k], weights[k]) for k in weights)
    loaded = AutoModelForSequenceClassification.from_pretrained(out / "model")
    assert all(np.array_equal(loaded.state_dict()[k].numpy(), w) for k, w in weights.items())


def test_a_best_at_the_last_step_is_written_once_its_checkpoint_takes_the_best_folders_file(tmp_path, tiny_model,
                                                                                          sentiment_csv):
    # When the best evaluation was the last step's (a curve still improving; here the one evaluation of one epoch),
    # the end of the run wrote the same weights twice: best-15/ at the evaluation, then the final checkpoint step-15/,
    # both with save_pretrained. The checkpoint now takes best-15's file (a hard link): one file, three names with
    # the export's. Each folder still stands alone: the rotation deletes them independently.
    import os

    from transformers import AutoModelForSequenceClassification

    from ftcli_trainer import checkpoint

    train, test = sentiment_csv
    out = tmp_path / "run"
    assert main(["--task", "csv", "--train-file", str(train), "--eval-file", str(test), "--model", str(tiny_model),
                 "--output-dir", str(out), "--epochs", "1", "--batch-size", "16", "--keep-best"]) == 0
    m = _metrics(out)
    assert m["best_global_step"] == m["global_step"] == 15
    ckpts = out / "checkpoints"
    best, final = ckpts / "best-00000015" / "model.safetensors", ckpts / "step-00000015" / "model.safetensors"
    assert os.path.samefile(best, final) and os.path.samefile(final, out / "model" / "model.safetensors")
    assert os.stat(final).st_nlink == 3
    assert json.loads((best.parent / "best.json").read_text())["weights_as_exported"] is True
    state = torch.load(final.parent / "trainer_state.pt", weights_only=True)
    assert state["weights_as_exported"] is True and state["global_step"] == 15
    weights = _weights(final)

    def fresh():
        return AutoModelForSequenceClassification.from_pretrained(tiny_model, num_labels=2)

    def same(model) -> bool:
        return all(np.array_equal(model.state_dict()[k].numpy(), w) for k, w in weights.items())

    # the best folder gone (pruned, removed by hand): the checkpoint still resumes; the checkpoint gone (rotated
    # away), the best still loads; either way the model still loads (a copy of the folder whose files are the same
    # files, hard links, for the first)
    other = tmp_path / "other"
    shutil.copytree(ckpts, other, copy_function=os.link)
    shutil.rmtree(other / "best-00000015")
    model = fresh()
    assert checkpoint.load_latest(str(other), model)["global_step"] == 15 and same(model)
    shutil.rmtree(final.parent)
    model = fresh()
    assert checkpoint.load_best(str(ckpts), 15, model) is True and same(model)
    assert same(AutoModelForSequenceClassification.from_pretrained(out / "model"))


def test_a_checkpoint_at_a_new_bests_step_mid_run_takes_its_file_and_a_later_step_writes_its_own(tmp_path, tiny_model,
                                                                                                  sentiment_csv):
    # The same at an epoch's end (or a --save-every step) where the evaluation just before is a new best: best-5 and
    # step-5 held the same tensors, written twice. step-5 takes best-5's file; it resumes from it (strict), and is not
    # marked for the export to take (training goes on from it). A checkpoint of another step writes its own.
    import os

    train, _ = sentiment_csv
    trainer = _trainer(tmp_path, tiny_model, train, "--keep-best")
    trainer._loss_acc, trainer._loss_acc_n, trainer._loss_total, trainer._loss_count = torch.zeros(()), 0, 0.0, 0
    trainer.global_step = 5
    trainer._keep_if_best({"eval_accuracy": 0.75})
    trainer.save_checkpoint()
    ckpts = tmp_path / "c"
    step5, best5 = ckpts / "step-00000005" / "model.safetensors", ckpts / "best-00000005" / "model.safetensors"
    assert os.path.samefile(step5, best5)
    assert "weights_as_exported" not in torch.load(step5.parent / "trainer_state.pt", weights_only=True)
    trainer.global_step = 6
    trainer._keep_if_best({"eval_accuracy": 0.5})  # (no better: best-5 stays the best)
    trainer.save_checkpoint()
    assert not os.path.samefile(ckpts / "step-00000006" / "model.safetensors", best5)
    shutil.rmtree(ckpts / "step-00000006")
    shutil.rmtree(best5.parent)
    again = _trainer(tmp_path, tiny_model, train, "--keep-best")
    with torch.no_grad():
        for p in again.model.parameters():
            p.zero_()
    again.resume()
    assert again.global_step == 5
    assert all(torch.equal(again.model.state_dict()[k], v) for k, v in trainer.model.state_dict().items())
    trainer.global_step = 7
    trainer._keep_if_best({"eval_accuracy": 0.8})
    (ckpts / "best-00000007" / "model.safetensors").unlink()  # (gone before it was taken: written then)
    trainer.save_checkpoint()
    assert (ckpts / "step-00000007" / "model.safetensors").is_file()
    again.resume()
    assert again.global_step == 7


def test_a_finished_run_run_again_with_keep_best_toggled_is_refused_and_its_model_left_alone(tmp_path, tiny_model,
                                                                                              sentiment_csv, capsys):
    # The same command without --keep-best re-exported the last step's weights (accuracy 0.17) over the kept model
    # (1.0); a plain run's again with --keep-best warned that no evaluation gave a finite accuracy (none was judged)
    for first, second, name in ((("--keep-best",), (), "kept"), ((), ("--keep-best",), "plain")):
        out = tmp_path / name
        assert main(_argv(sentiment_csv, tiny_model, out, *first)) == 0
        exported = (out / "model" / "model.safetensors").read_bytes()
        metrics = (out / "model" / "metrics.json").read_bytes()
        capsys.readouterr()
        assert main(_argv(sentiment_csv, tiny_model, out, *second)) == 2
        said = capsys.readouterr()
        assert f"error: {out / 'checkpoints'} holds checkpoints of a different run (keep-best differs)" in said.err
        assert "Traceback" not in said.err + said.out
        assert (out / "model" / "model.safetensors").read_bytes() == exported
        assert (out / "model" / "metrics.json").read_bytes() == metrics
    # --early-stopping implies --keep-best: the kept run resumes with it (and exports the same model)
    assert main(_argv(sentiment_csv, tiny_model, tmp_path / "kept", "--early-stopping", "13")) == 0


def test_early_stopping_stops_after_patience_evaluations_and_a_restart_exports_the_same(tmp_path, tiny_model,
                                                                                        sentiment_csv, capsys):
    out = tmp_path / "run"
    assert main(_argv(sentiment_csv, tiny_model, out, "--early-stopping", "6")) == 0
    said = capsys.readouterr().out
    evals = _evals(out)
    # 1.0 at step 21, then 6 evaluations that do not beat it (24 ... 39): stopped at step 39 of 60
    assert [e["step"] for e in evals] == list(range(3, 40, 3))
    m = _metrics(out)
    assert m["global_step"] == 39 and m["epoch"] == 2.6
    assert m["best_global_step"] == 21 and m["eval_loss"] == evals[6]["eval_loss"]
    assert m["early_stopping"] == {"patience": 6, "threshold": 0.0, "stopped": True,
                                   "evaluations_without_improvement": 6}
    assert m["last_eval"]["global_step"] == 39 and m["last_eval"]["eval_loss"] == evals[-1]["eval_loss"]
    assert "eval @ step 39 (epoch 2.60) | eval: accuracy 1.0000" in said
    assert "best 1.0000 at step 21, 6/6 without improvement; stopping early" in said
    assert "early stopping: 6 evaluations in a row did not improve eval_accuracy on 1.0000 (step 21); stopped at " \
           "step 39 of 60" in said
    run = json.loads((out / "model" / "ftcli_run.json").read_text())
    assert run["keep_best"] is True and run["early_stopping"] == 6  # --early-stopping implies --keep-best

    # Its last checkpoint says the run ended: the same command again (a worker restarted during the export) trains
    # nothing, and exports the same model
    last = out / "checkpoints" / "step-00000039"
    state = torch.load(last / "trainer_state.pt", weights_only=True)
    assert state["early_stopped"] is True and "optimizer" not in state
    assert state["best"] == {"step": 21, "epoch": 1.4, "value": 1.0} and state["bad_evals"] == 6
    first = _weights(out / "model" / "model.safetensors")
    shutil.rmtree(out / "model")
    assert main(_argv(sentiment_csv, tiny_model, out, "--early-stopping", "6")) == 0
    said = capsys.readouterr().out
    assert f"resuming from {last}" in said and "eval @" not in said
    # said once, as what it is: the earlier run's "early stopping: 6 evaluations in a row ..." line came again, as
    # though this run had stopped
    assert said.count("the run had already stopped early at step 39 of 60 (--early-stopping 6): nothing to train; "
                      "exporting it again") == 1
    assert "early stopping:" not in said and "stopping early" not in said
    assert _evals(out) == evals
    again = _metrics(out)
    for key in ("global_step", "best_global_step", "eval_accuracy", "eval_loss", "early_stopping"):
        assert again[key] == m[key], key
    for name, w in first.items():
        np.testing.assert_array_equal(_weights(out / "model" / "model.safetensors")[name], w, err_msg=name)

    # Another patience (to train on) exported the stopped run again, and metrics.json and ftcli report said
    # "Stopped early (--early-stopping 8) ... after 6 evaluations without improvement": refused, the model left alone
    exported = (out / "model" / "model.safetensors").read_bytes()
    for other in (("--early-stopping", "8"), ("--early-stopping", "6", "--early-stopping-threshold", "0.1"),
                  ("--keep-best",)):
        assert main(_argv(sentiment_csv, tiny_model, out, *other)) == 2
        said = capsys.readouterr()
        assert f"error: the run in {out / 'checkpoints'} stopped early at step 39 with --early-stopping 6, and " \
               "trains no further: give the same options to export it again, or start over with another " \
               "--output-dir" in said.err
        assert "Traceback" not in said.err
        assert (out / "model" / "model.safetensors").read_bytes() == exported


def test_a_sigterm_during_the_evaluation_that_stops_the_run_early_stops_it_after_the_restart(
        tmp_path, tiny_model, sentiment_csv, monkeypatch, capsys):
    """A SIGTERM during the evaluation that runs out the patience (step 39) cuts it short (loop.EvalCut): the
    checkpoint says it is still to do, the restart does it first, stops early there, and exports what the run never
    stopped exports: the same evaluations, the best step's weights."""
    from tests.trainer.helpers import sigterm_when_evaluating

    ref, out = tmp_path / "ref", tmp_path / "run"
    assert main(_argv(sentiment_csv, tiny_model, ref, "--early-stopping", "6")) == 0
    sigterm_when_evaluating(monkeypatch, 39)
    assert main(_argv(sentiment_csv, tiny_model, out, "--early-stopping", "6")) == 143
    monkeypatch.undo()
    state = torch.load(out / "checkpoints" / "step-00000039" / "trainer_state.pt", weights_only=True)
    assert state["eval_pending"] is True and "optimizer" in state and state["bad_evals"] == 5
    assert [e["step"] for e in _evals(out)] == list(range(3, 37, 3))
    capsys.readouterr()

    assert main(_argv(sentiment_csv, tiny_model, out, "--early-stopping", "6")) == 0
    said = capsys.readouterr().out
    assert "evaluating step 39 first: a stop cut its evaluation short" in said
    assert said.count("stopping early") == 1
    state = torch.load(out / "checkpoints" / "step-00000039" / "trainer_state.pt", weights_only=True)
    assert state["early_stopped"] is True and "optimizer" not in state and "eval_pending" not in state
    assert [e["step"] for e in _evals(out)] == [e["step"] for e in _evals(ref)]
    for key in ("global_step", "best_global_step", "eval_accuracy", "early_stopping"):
        assert _metrics(out)[key] == _metrics(ref)[key], key
    kept = _weights(ref / "model" / "model.safetensors")
    for name, w in _weights(out / "model" / "model.safetensors").items():
        np.testing.assert_allclose(w, kept[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("args,stop", [(("--keep-best",), 60), (("--early-stopping", "6"), 39)])
def test_a_sigterm_during_the_last_checkpoint_stops_before_the_best_is_evaluated_again(
        tmp_path, tiny_model, sentiment_csv, monkeypatch, capsys, args, stop):
    """A SIGTERM (a Spot VM's preemption) during the run's last checkpoint: the last epoch's, or the early stop's. The
    best weights' evaluation after it (minutes on a real eval set) met the stop and raised loop.EvalCut: a traceback
    and exit status 1. Now it stops there with the checkpoint just written, and the restart evaluates the best
    weights and exports what the run never stopped exports."""
    import os
    import signal

    from ftcli_trainer import checkpoint

    ref, out = tmp_path / "ref", tmp_path / "run"
    assert main(_argv(sentiment_csv, tiny_model, ref, *args)) == 0
    capsys.readouterr()
    save = checkpoint.save

    def sigterm_while_saving(root, step, model, state, **kw):
        if step == stop:
            os.kill(os.getpid(), signal.SIGTERM)
        return save(root, step, model, state, **kw)

    monkeypatch.setattr(checkpoint, "save", sigterm_while_saving)
    assert main(_argv(sentiment_csv, tiny_model, out, *args)) == 143
    assert capsys.readouterr().err.splitlines() == [
        f"stopped: SIGTERM: checkpoint written at step {stop}; a restarted worker, or the same command, resumes from "
        "it"]
    monkeypatch.undo()
    assert not (out / "model").exists()
    assert (out / "checkpoints" / f"step-{stop:08d}" / "_COMPLETE").exists()

    assert main(_argv(sentiment_csv, tiny_model, out, *args)) == 0
    # each evaluation logged once, in order, with the uninterrupted run's values
    assert [(e["step"], e["eval_accuracy"]) for e in _evals(out)] == [(e["step"], e["eval_accuracy"])
                                                                      for e in _evals(ref)]
    a, b = _metrics(ref), _metrics(out)
    for key in ("global_step", "best_global_step", "eval_accuracy", "eval_loss"):
        assert b[key] == a[key], key
    assert b["last_eval"]["eval_loss"] == a["last_eval"]["eval_loss"]
    kept = _weights(ref / "model" / "model.safetensors")
    for name, w in _weights(out / "model" / "model.safetensors").items():
        np.testing.assert_array_equal(w, kept[name], err_msg=name)


def test_patience_run_out_at_the_last_evaluation_is_no_early_stop(tmp_path, tiny_model, sentiment_csv, capsys):
    # 1.0 at step 21, then 13 evaluations without improvement: the 13th is the last step's (60). It said "stopping
    # early" and "stopped at step 60 of 60", metrics.json "stopped": true and report.md "Stopped early ... at step 60"
    out = tmp_path / "run"
    assert main(_argv(sentiment_csv, tiny_model, out, "--early-stopping", "13")) == 0
    said = capsys.readouterr().out
    m = _metrics(out)
    assert m["global_step"] == 60 and m["epoch"] == 4.0 and m["best_global_step"] == 21
    assert m["early_stopping"] == {"patience": 13, "threshold": 0.0, "stopped": False,
                                   "evaluations_without_improvement": 13}
    assert "best 1.0000 at step 21, 13/13 without improvement\n" in said
    assert "stopping early" not in said and "early stopping:" not in said
    # one evaluation fewer of patience stops at the one before: step 57
    assert main(_argv(sentiment_csv, tiny_model, tmp_path / "stops", "--early-stopping", "12")) == 0
    assert _metrics(tmp_path / "stops")["early_stopping"]["stopped"] is True
    assert _metrics(tmp_path / "stops")["global_step"] == 57


class _Crash(Exception):
    pass


@pytest.mark.parametrize("crash_after", [22, 40])
def test_a_run_killed_mid_way_resumes_to_the_uninterrupted_runs_result(tmp_path, tiny_model, sentiment_csv,
                                                                       monkeypatch, crash_after):
    # 22: killed after step 21's best was written but before any checkpoint named it (the last is step 20's, whose best
    # is step 18): that best-00000021 is from steps trained again, and is written again. 40: killed after the step 40
    # checkpoint, which names step 21's best (written 19 steps earlier) and 2 evaluations without improvement.
    args = ("--early-stopping", "8", "--save-every", "10")
    ref = tmp_path / "ref"
    assert main(_argv(sentiment_csv, tiny_model, ref, *args)) == 0

    from ftcli_trainer.loop import Trainer

    train_step = Trainer.train_step

    def crashing(self, *a, **k):
        if self.global_step == crash_after:
            raise _Crash  # (a kill: no checkpoint of this step)
        return train_step(self, *a, **k)

    out = tmp_path / "out"
    monkeypatch.setattr(Trainer, "train_step", crashing)
    with pytest.raises(_Crash):
        from ftcli_trainer.task import run

        run(parse_args(_argv(sentiment_csv, tiny_model, out, *args)))
    folders = sorted(p.name for p in (out / "checkpoints").glob("[bs]*-0*"))
    if crash_after == 22:
        # each kept checkpoint's best (3 and 18) stays while a resume may take that checkpoint, and the newest
        assert folders == ["best-00000003", "best-00000018", "best-00000021", "step-00000015", "step-00000020"]
        assert torch.load(out / "checkpoints" / "step-00000020" / "trainer_state.pt",
                          weights_only=True)["best"]["step"] == 18
    else:
        assert folders == ["best-00000021", "step-00000030", "step-00000040"]
        state = torch.load(out / "checkpoints" / "step-00000040" / "trainer_state.pt", weights_only=True)
        assert state["best"]["step"] == 21 and state["bad_evals"] == 6
    monkeypatch.setattr(Trainer, "train_step", train_step)
    assert main(_argv(sentiment_csv, tiny_model, out, *args)) == 0

    a, b = _metrics(ref), _metrics(out)
    for key in ("global_step", "epoch", "best_global_step", "best_metric", "eval_accuracy", "eval_loss",
                "early_stopping"):
        assert b[key] == a[key], key
    assert b["last_eval"]["eval_loss"] == a["last_eval"]["eval_loss"]
    assert a["global_step"] == 45 and a["best_global_step"] == 21  # 8 evaluations after step 21: 24 ... 45
    wa, wb = _weights(ref / "model" / "model.safetensors"), _weights(out / "model" / "model.safetensors")
    for name, w in wa.items():
        np.testing.assert_array_equal(wb[name], w, err_msg=name)
    assert [e["step"] for e in _evals(out)] == [e["step"] for e in _evals(ref)]  # each evaluation logged once
    assert sorted(p.name for p in (out / "checkpoints").glob("best-*")) == ["best-00000021"]


def test_the_patience_counter_and_the_best_follow_the_hf_trainers_rules(tmp_path, tiny_model, sentiment_csv):
    """The same sequence of metrics through transformers 5.24's EarlyStoppingCallback (its counter, compared with the
    best before each evaluation) and Trainer._determine_best_metric (the best, on any strict improvement), and through
    ours: the same counter after each evaluation, the same best, the same stop."""
    from transformers.trainer_callback import EarlyStoppingCallback, TrainerControl


    values = [0.5, 0.6, 0.6, 0.62, 0.66, 0.64, 0.7, 0.705, 0.71, 0.69]
    threshold, patience = 0.03, 3
    hf = EarlyStoppingCallback(early_stopping_patience=patience, early_stopping_threshold=threshold)
    args = SimpleNamespace(metric_for_best_model="accuracy", greater_is_better=True)
    state = SimpleNamespace(best_metric=None, best_global_step=None)
    expected = []
    for step, value in enumerate(values, 1):
        control = TrainerControl()
        hf.on_evaluate(args, state, control, metrics={"eval_accuracy": value})  # before the best is updated
        if state.best_metric is None or value > state.best_metric:
            state.best_metric, state.best_global_step = value, step
        expected.append((hf.early_stopping_patience_counter, state.best_global_step, control.should_training_stop))
        if control.should_training_stop:
            break

    train, _ = sentiment_csv
    trainer = _trainer(tmp_path, tiny_model, train, "--eval-every", "1", "--early-stopping", str(patience),
                                          "--early-stopping-threshold", str(threshold))
    got = []
    for step, value in enumerate(values, 1):
        trainer.global_step = step
        trainer._keep_if_best({"eval_accuracy": value})
        got.append((trainer.bad_evals, trainer.best["step"], trainer.early_stopped))
        if trainer.early_stopped:
            break
    assert got == expected
    assert len(got) == 10 and got[-1] == (3, 9, True)  # stopped at the last: 0.705 and 0.71 beat the best by < 0.03
    # each new best was written, and only the current one is left (no checkpoint names another)
    assert sorted(p.name for p in Path(trainer.paths.checkpoint_dir).glob("best-*")) == [
        f"best-{trainer.best['step']:08d}"]


def test_a_nan_metric_is_never_kept_and_never_an_improvement(tmp_path, tiny_model, sentiment_csv):
    """A NaN (a diverged loss, an undefined correlation) through transformers 5.24's own EarlyStoppingCallback and
    Trainer._determine_best_metric, and through ours: never kept, and counted against the patience; the one difference
    is before any number came (HF's counter stays 0 at its first evaluation, where its best is None; ours counts it).
    A run that evaluated NaN from the start never stopped: each NaN reset the counter while no best was set."""
    from transformers import Trainer as HFTrainer
    from transformers.trainer_callback import EarlyStoppingCallback, TrainerControl
    from transformers.trainer_utils import SaveStrategy

    nan = float("nan")
    values = [nan, nan, 0.5, nan, 0.6, nan, nan]
    hf = EarlyStoppingCallback(early_stopping_patience=3)
    hf_trainer = SimpleNamespace(
        args=SimpleNamespace(metric_for_best_model="accuracy", greater_is_better=True,
                             save_strategy=SaveStrategy.STEPS),
        state=SimpleNamespace(best_metric=None, best_global_step=None, global_step=0))
    expected = []
    for step, value in enumerate(values, 1):
        hf_trainer.state.global_step = step
        hf.on_evaluate(hf_trainer.args, hf_trainer.state, TrainerControl(), metrics={"eval_accuracy": value})
        HFTrainer._determine_best_metric(hf_trainer, {"eval_accuracy": value}, None)
        expected.append((hf.early_stopping_patience_counter, hf_trainer.state.best_global_step))
    assert expected == [(0, None), (1, None), (0, 3), (1, 3), (0, 5), (1, 5), (2, 5)]

    train, _ = sentiment_csv
    trainer = _trainer(tmp_path, tiny_model, train, "--eval-every", "1", "--early-stopping", "3")
    got, notes = [], []
    for step, value in enumerate(values, 1):
        trainer.global_step = step
        notes.append(trainer._keep_if_best({"eval_accuracy": value}))
        got.append((trainer.bad_evals, trainer.best["step"] if trainer.best else None))
    assert got[2:] == expected[2:]  # once a number came, as HF
    assert got[:2] == [(1, None), (2, None)]  # before it, each NaN counts
    assert notes[:3] == [" | eval_accuracy is not a number: not kept, 1/3 without improvement",
                         " | eval_accuracy is not a number: not kept, 2/3 without improvement", " | best so far"]
    assert notes[6] == " | eval_accuracy is not a number: not kept (best 0.6000 at step 5), 2/3 without improvement"
    assert not trainer.early_stopped and trainer.best["value"] == 0.6
    assert sorted(p.name for p in Path(trainer.paths.checkpoint_dir).glob("best-*")) == ["best-00000005"]

    # Only NaNs: the patience runs out (it reset at every evaluation, and the run never stopped)
    trainer = _trainer(tmp_path / "nan", tiny_model, train, "--eval-every", "1", "--early-stopping", "2")
    for step in (1, 2):
        trainer.global_step = step
        note = trainer._keep_if_best({"eval_accuracy": nan})
    assert note.endswith("2/2 without improvement; stopping early") and trainer.early_stopped
    assert trainer.best is None and not list(Path(trainer.paths.checkpoint_dir).glob("best-*"))


def test_nan_evaluations_before_any_best_count_across_a_resume(tmp_path, tiny_model, sentiment_csv):
    # the checkpoint kept the count only beside a best: a restart after NaN evaluations counted from 0 again
    train, _ = sentiment_csv
    args = ("--eval-every", "1", "--early-stopping", "3")
    trainer = _trainer(tmp_path, tiny_model, train, *args)
    trainer._loss_acc, trainer._loss_acc_n, trainer._loss_total, trainer._loss_count = torch.zeros(()), 0, 0.0, 0
    for step in (1, 2):
        trainer.global_step = step
        trainer._keep_if_best({"eval_accuracy": float("nan")})
    trainer.save_checkpoint()
    again = _trainer(tmp_path, tiny_model, train, *args)
    again.resume()
    assert (again.global_step, again.best, again.bad_evals) == (2, None, 2)


def test_a_collapsed_regression_models_undefined_pearson_is_not_kept_over_a_real_negative_one(tmp_path, tiny_model):
    # A diverged model that predicts one value for every row has no correlation: its Pearson read 0.0 and was kept
    # over an earlier evaluation's real -0.4
    from ftcli_trainer import metrics
    from ftcli_trainer.data import encode, load_task_data
    from ftcli_trainer.loop import Paths, Trainer
    from ftcli_trainer.model import load_model, load_tokenizer

    rng = np.random.default_rng(0)
    train = tmp_path / "scores.csv"
    train.write_text("text,label\n" + "".join(f"row {i},{v:.2f}\n" for i, v in enumerate(rng.uniform(0, 5, 40))))
    cfg = parse_args(["--task", "csv", "--regression", "--train-file", str(train), "--model", str(tiny_model),
                      "--eval-every", "1", "--early-stopping", "3"])
    data = load_task_data(cfg)
    model = load_model(cfg.model, data.label_names, False, cfg.threshold, True)
    paths = Paths(str(tmp_path / "m"), str(tmp_path / "c"), str(tmp_path / "l"), tmp_path / "l")
    trainer = Trainer(cfg, model, encode(load_tokenizer(cfg.model), data.train, 64), {}, data.label_names, False,
                      torch.device("cpu"), "fp32", paths, 0)
    assert trainer.best_key == "eval_pearson"
    truth = data.evals["eval"].labels.astype(np.float64)
    noise = np.random.default_rng(1).normal(size=len(truth))
    anti = metrics.prefixed(metrics.regression(-truth + noise, truth), "eval", True)
    collapsed = metrics.prefixed(metrics.regression(np.full(len(truth), 2.5), truth), "eval", True)
    assert -1 < anti["eval_pearson"] < 0 and np.isnan(collapsed["eval_pearson"])
    trainer.global_step = 1
    trainer._keep_if_best(anti)
    trainer.global_step = 2
    note = trainer._keep_if_best(collapsed)
    assert trainer.best == {"step": 1, "epoch": trainer.best["epoch"], "value": anti["eval_pearson"]}
    assert trainer.bad_evals == 1 and note.startswith(" | eval_pearson is not a number: not kept (best -0.")


def test_a_new_best_within_the_threshold_says_it_counts_against_the_patience(tmp_path, tiny_model, sentiment_csv):
    # Its line said "best so far" and nothing else: the next evaluation's "2/2 without improvement; stopping early"
    # came one evaluation after the best, with no count said before it
    train, _ = sentiment_csv
    trainer = _trainer(tmp_path, tiny_model, train, "--eval-every", "1", "--early-stopping", "2",
                       "--early-stopping-threshold", "0.05")
    notes = []
    for step, value in enumerate([0.5, 0.52, 0.53], 1):
        trainer.global_step = step
        notes.append(trainer._keep_if_best({"eval_accuracy": value}))
    within = " | best so far, but within --early-stopping-threshold 0.05 of the previous best: "
    assert notes == [" | best so far", within + "1/2 without improvement",
                     within + "2/2 without improvement; stopping early"]
    assert trainer.best["step"] == 3 and trainer.early_stopped


@pytest.mark.parametrize("argv,says", [
    (["--epochs", "1", "--early-stopping", "1"],
     "--early-stopping 1 stops after 1 evaluation in a row without improvement, but --epochs 1 with no --eval-every "
     "evaluates once (at each epoch's end): it could never stop the run early; add --eval-every N (optimizer steps), "
     "give --epochs 3 or more, or use --keep-best alone"),
    (["--epochs", "3", "--early-stopping", "2"],
     "--early-stopping 2 stops after 2 evaluations in a row without improvement, but --epochs 3 with no --eval-every "
     "evaluates 3 times (at each epoch's end): it could never stop the run early; add --eval-every N (optimizer "
     "steps), give --epochs 4 or more, or use --keep-best alone"),
    (["--early-stopping-threshold", "0.01"],
     "--early-stopping-threshold applies to --early-stopping N: add it, or drop the threshold"),
    (["--early-stopping", "-2", "--eval-every", "5"], "--early-stopping must be 0 or more, got -2"),
])
def test_early_stopping_that_could_never_stop_is_refused_in_one_line(argv, says):
    from ftcli_trainer.config import ConfigError

    with pytest.raises(ConfigError) as e:
        parse_args(argv)
    assert e.value.problems == [says]


def test_early_stopping_is_taken_where_it_can_stop():
    assert parse_args(["--epochs", "4", "--early-stopping", "2"]).keep_best is True
    cfg = parse_args(["--epochs", "1", "--eval-every", "50", "--early-stopping", "3"])
    assert (cfg.keep_best, cfg.early_stopping, cfg.early_stopping_threshold) == (True, 3, 0.0)
    assert parse_args([]).keep_best is False and parse_args(["--keep-best"]).keep_best is True


def test_a_run_with_too_few_evaluations_to_stop_says_so(tmp_path, tiny_model, sentiment_csv):
    train, _ = sentiment_csv
    # 216 rows trained on (a tenth held out), batch 16: 14 steps an epoch; evaluated every 10 and at each epoch's end:
    # 10, 14, 20, 28
    trainer = _trainer(tmp_path, tiny_model, train, "--epochs", "2", "--eval-every", "10",
                                 "--early-stopping", "3")
    assert trainer._early_stopping_idle() == (
        "this run evaluates 4 time(s) (28 steps, --eval-every 10, 2 epoch(s)), and a stop needs 4 before the last: it "
        "cannot stop early (a smaller --eval-every gives it more evaluations); the best evaluation is still kept")
    trainer = _trainer(tmp_path, tiny_model, train, "--epochs", "2", "--eval-every", "5",
                                 "--early-stopping", "3")
    assert trainer._early_stopping_idle() == ""  # 5, 10, 14, 15, 20, 25, 28


def test_an_early_stopping_this_data_leaves_no_room_for_is_refused_outside_a_job(tmp_path, tiny_model,
                                                                               sentiment_csv, capsys, monkeypatch):
    # ftcli local (or the trainer by hand) knows the data: it warned, trained to the end and kept the best; refused
    # now in one line before the model loads. A Vertex job (CLOUD_ML_JOB_ID) still warns: its machines are up.
    from ftcli_trainer import config

    monkeypatch.delenv("CLOUD_ML_JOB_ID", raising=False)
    out = tmp_path / "run"
    argv = [*_argv(sentiment_csv, tiny_model, out), "--epochs", "2", "--eval-every", "10", "--early-stopping", "3"]
    assert main(argv) == 2
    said = capsys.readouterr()
    assert said.err.splitlines()[-1] == (
        "error: --early-stopping 3 needs 4 evaluations before the last one, but this run evaluates only 4 time(s) "
        "(240 training rows at --batch-size 16: 15 step(s) an epoch; --eval-every 10, --epochs 2): it could never "
        "stop the run early; give a smaller --eval-every or more --epochs, or use --keep-best alone")
    assert "Traceback" not in said.err and not (out / "model").exists() and not (out / "logs").exists()
    # the count the trainer itself makes (216 rows after the held-out tenth: 14 steps; 10, 14, 20, 28)
    trainer = _trainer(tmp_path, tiny_model, sentiment_csv[0], "--epochs", "2", "--eval-every", "10",
                       "--early-stopping", "3")
    assert config.steps_per_epoch(216, 16, 1) == trainer.steps_per_epoch == 14
    assert config.evaluation_count(14, 2, 10) == 4 and config.evaluation_count(14, 2, 5) == 7
    assert config.steps_per_epoch(216, 16, 2, processes=3) == 3  # 5 batches of 48, the last 24 rows
    assert config.steps_per_epoch(97, 16, 1, processes=2) == 3  # 4 batches of 32: the 97th row alone is dropped
    assert config.early_stopping_data_problem(trainer.cfg, 216) == (
        "--early-stopping 3 needs 4 evaluations before the last one, but this run evaluates at most 4 time(s) (216 "
        "training rows at --batch-size 16: 14 step(s) an epoch with one GPU, fewer with more; --eval-every 10, "
        "--epochs 2): it could never stop the run early; give a smaller --eval-every or more --epochs, or use "
        "--keep-best alone")
    assert config.early_stopping_data_problem(trainer.cfg, 300) == ""  # 19 steps: at most 3 + 2 = 5


def test_the_tuning_services_last_report_is_the_exported_models(tmp_path, tiny_model, sentiment_csv, monkeypatch):
    # A trial's measurement is one it reported ("Otherwise, the service will auto-select a previously reported
    # measurement as the final-measurement"): with the best kept, its last report is the kept model's value, not the
    # collapsed last evaluation's
    report = tmp_path / "hp" / "output.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(report))
    out = tmp_path / "run"
    assert main(_argv(sentiment_csv, tiny_model, out, "--keep-best", "--hypertune-metric", "eval_loss")) == 0
    lines = [json.loads(x) for x in report.read_text().splitlines()]
    evals = _evals(out)
    assert [int(e["global_step"]) for e in lines] == [e["step"] for e in evals] + [60]
    assert float(lines[-2]["eval_loss"]) == evals[-1]["eval_loss"]  # step 60's own evaluation
    assert float(lines[-1]["eval_loss"]) == _metrics(out)["eval_loss"] == evals[6]["eval_loss"]  # step 21's weights


def test_the_best_weights_live_in_the_bucket_beside_a_jobs_checkpoints(gcs, tiny_model, sentiment_csv, monkeypatch,
                                                                        tmp_path):
    # Inside Vertex every folder is gs://: the best weights are uploaded whole (marker last), superseded ones deleted,
    # and a restarted worker downloads them for its export
    train, test = sentiment_csv
    gcs.create_bucket("vertex-out")
    base = "gs://vertex-out/runs/job-1"
    monkeypatch.setenv("AIP_MODEL_DIR", f"{base}/model/")
    monkeypatch.setenv("AIP_CHECKPOINT_DIR", f"{base}/checkpoints/")
    monkeypatch.setenv("AIP_TENSORBOARD_LOG_DIR", f"{base}/logs/")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    argv = ["--task", "csv", "--train-file", str(train), "--eval-file", str(test), "--model", str(tiny_model),
            *RISE_AND_FALL, "--early-stopping", "6"]
    assert main(argv) == 0
    metrics = json.loads(gcs.read("vertex-out", "runs/job-1/model/metrics.json"))
    assert (metrics["global_step"], metrics["best_global_step"]) == (39, 21)
    best = sorted(o for o in gcs.list("vertex-out", "runs/job-1/checkpoints/best-"))
    assert best == [f"runs/job-1/checkpoints/best-00000021/{name}"
                    for name in ("_COMPLETE", "best.json", "model.safetensors")]
    exported = gcs.read("vertex-out", "runs/job-1/model/model.safetensors")
    kept = gcs.read("vertex-out", "runs/job-1/checkpoints/best-00000021/model.safetensors")
    from safetensors.numpy import load

    for name, w in load(kept).items():
        np.testing.assert_array_equal(load(exported)[name], w, err_msg=name)

    # A worker restarted after the run ended (during its export): nothing trained, the same model exported
    assert main(argv) == 0
    again = json.loads(gcs.read("vertex-out", "runs/job-1/model/metrics.json"))
    assert (again["eval_loss"], again["best_global_step"]) == (metrics["eval_loss"], 21)
    assert gcs.read("vertex-out", "runs/job-1/model/model.safetensors") == exported
    assert not list(cwd.iterdir())  # nothing written locally


def test_a_resume_whose_best_weights_are_gone_says_so_and_looks_for_the_best_again(tmp_path, tiny_model,
                                                                                   sentiment_csv, monkeypatch, capsys):
    from ftcli_trainer.loop import Trainer

    train_step = Trainer.train_step

    def crashing(self, *a, **k):
        if self.global_step == 40:
            raise _Crash
        return train_step(self, *a, **k)

    out = tmp_path / "out"
    args = ("--keep-best", "--save-every", "10")
    monkeypatch.setattr(Trainer, "train_step", crashing)
    with pytest.raises(_Crash):
        from ftcli_trainer.task import run

        run(parse_args(_argv(sentiment_csv, tiny_model, out, *args)))
    monkeypatch.setattr(Trainer, "train_step", train_step)
    shutil.rmtree(out / "checkpoints" / "best-00000021")  # removed by hand
    capsys.readouterr()
    assert main(_argv(sentiment_csv, tiny_model, out, *args)) == 0
    said = capsys.readouterr().out
    assert (f"warning: the best evaluation's weights (step 21) are not in {out / 'checkpoints'}: the best is looked "
            "for from step 40 on") in said
    m = _metrics(out)
    assert m["best_global_step"] == 42 and m["eval_accuracy"] == 1.0  # the first evaluation after the resume


def _lose(best, lost: str) -> None:
    """A best-N folder removed by hand ("folder"), or its weights lost from it ("weights")."""
    if lost == "folder":
        shutil.rmtree(best)
    else:
        (best / "model.safetensors").unlink()


@pytest.mark.parametrize("lost", ["folder", "weights"])
def test_a_finished_run_whose_best_weights_are_gone_is_refused_and_its_model_left_alone(tmp_path, tiny_model,
                                                                                        sentiment_csv, capsys, lost):
    # The same command again (a worker restarted during the export) with best-00000021 removed by hand, or its weights
    # lost from the bucket: it warned "the best is looked for from step 60 on" (nothing was left to train) and "no
    # evaluation gave a finite eval_accuracy", and exported the collapsed last step over the kept model (or, with only
    # the weights gone, a FileNotFoundError traceback)
    out = tmp_path / "run"
    assert main(_argv(sentiment_csv, tiny_model, out, "--keep-best")) == 0
    exported = (out / "model" / "model.safetensors").read_bytes()
    best = out / "checkpoints" / "best-00000021"
    _lose(best, lost)
    capsys.readouterr()
    assert main(_argv(sentiment_csv, tiny_model, out, "--keep-best")) == 2
    said = capsys.readouterr()
    assert (f"error: the best evaluation's weights (step 21, eval_accuracy 1.0000) are not in {best}, and the run "
            "ended at step 60: nothing is left to train to find another best, and the last step's weights are not "
            "the model --keep-best asked for\nhint: put that folder back to export it, or train again with another "
            "--output-dir (ftcli local: --restart)\n") in said.err
    assert "Traceback" not in said.err + said.out and "finite" not in said.err + said.out
    assert (out / "model" / "model.safetensors").read_bytes() == exported


@pytest.mark.parametrize("lost", ["folder", "weights"])
def test_a_finished_run_whose_best_is_its_last_step_exports_from_that_checkpoint_without_the_best_folder(
        tmp_path, tiny_model, sentiment_csv, capsys, lost):
    # The best at the last step (a curve still improving; here the one evaluation of one epoch): best-15/ removed by
    # hand (its file is the final checkpoint's too, a hard link: it looks like a copy) and the same command again (a
    # worker restarted during the export) was refused, "put that folder back to export it", though step-15/ holds
    # those very weights. It exports them.
    train, test = sentiment_csv
    out = tmp_path / "run"
    argv = ["--task", "csv", "--train-file", str(train), "--eval-file", str(test), "--model", str(tiny_model),
            "--output-dir", str(out), "--epochs", "1", "--batch-size", "16", "--keep-best"]
    assert main(argv) == 0
    exported, m = (out / "model" / "model.safetensors").read_bytes(), _metrics(out)
    assert m["best_global_step"] == m["global_step"] == 15
    best = out / "checkpoints" / "best-00000015"
    _lose(best, lost)
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    said = capsys.readouterr()
    assert (f"the best evaluation's weights (step 15) are not in {out / 'checkpoints'}: the step 15 checkpoint holds "
            "them") in said.out
    assert "error" not in said.err and "warning" not in said.out + said.err
    assert (out / "model" / "model.safetensors").read_bytes() == exported
    again = _metrics(out)
    assert (again["best_global_step"], again["eval_accuracy"]) == (15, m["eval_accuracy"])


def test_a_resume_from_the_best_steps_checkpoint_keeps_that_best_when_its_folder_is_gone(tmp_path, tiny_model,
                                                                                          sentiment_csv, monkeypatch,
                                                                                          capsys):
    # A checkpoint at the best's very step (21) holds the best's weights; best-21/ removed by hand, the resumed run
    # warned "the best is looked for from step 21 on" and kept a later evaluation as the best, exporting another model
    # than the uninterrupted run's. The best stays, its folder written again from the checkpoint's weights.
    from ftcli_trainer.loop import Trainer
    from ftcli_trainer.task import run

    args = ("--keep-best", "--save-every", "21")
    whole = tmp_path / "whole"
    assert main(_argv(sentiment_csv, tiny_model, whole, *args)) == 0
    assert _metrics(whole)["best_global_step"] == 21

    train_step = Trainer.train_step

    def crashing(self, *a, **k):
        if self.global_step == 25:  # (after step-21/, before the second epoch's end)
            raise _Crash
        return train_step(self, *a, **k)

    out = tmp_path / "out"
    monkeypatch.setattr(Trainer, "train_step", crashing)
    with pytest.raises(_Crash):
        run(parse_args(_argv(sentiment_csv, tiny_model, out, *args)))
    monkeypatch.setattr(Trainer, "train_step", train_step)
    newest = out / "checkpoints" / "step-00000021" / "trainer_state.pt"
    assert torch.load(newest, weights_only=True)["best"]["step"] == 21
    shutil.rmtree(out / "checkpoints" / "best-00000021")  # removed by hand
    capsys.readouterr()
    assert main(_argv(sentiment_csv, tiny_model, out, *args)) == 0
    said = capsys.readouterr().out
    assert (f"the best evaluation's weights (step 21) were not in {out / 'checkpoints'}: written again from the step "
            "21 checkpoint, which holds them") in said and "looked for" not in said
    m, w = _metrics(out), _metrics(whole)
    assert (m["best_global_step"], m["eval_accuracy"], m["eval_loss"]) == (21, w["eval_accuracy"], w["eval_loss"])
    kept, uninterrupted = _weights(out / "model" / "model.safetensors"), _weights(whole / "model" / "model.safetensors")
    assert kept.keys() == uninterrupted.keys() and all(np.array_equal(kept[k], uninterrupted[k]) for k in kept)


def test_no_best_after_a_resume_that_lost_it_says_so_not_only_no_finite_metric(tmp_path, tiny_model, sentiment_csv,
                                                                              caplog):
    train, _ = sentiment_csv
    trainer = _trainer(tmp_path, tiny_model, train, "--keep-best")
    trainer._lost_best = 21  # gone at the resume (the warning then said so), and no number since
    out = trainer._kept({"eval_accuracy": float("nan"), "eval_loss": 0.7})
    assert out["metric_for_best_model"] == "eval_accuracy" and "best_global_step" not in out
    assert [r.getMessage() for r in caplog.records if "--keep-best" in r.getMessage()] == [
        "--keep-best: the best evaluation's weights (step 21) were gone at the resume, and no evaluation since gave a "
        "finite eval_accuracy; the last step's weights are exported"]
