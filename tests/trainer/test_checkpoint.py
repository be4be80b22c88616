"""Which run a checkpoint folder belongs to: claim() takes an empty folder, resumes the same run, refuses
another (local folders and gs://, against the GCS emulator)."""

import json

import pytest

from ftcli_trainer import checkpoint, storage
from ftcli_trainer.config import parse_args
from tests.conftest import write_csv


@pytest.fixture(params=["local", "gcs"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "checkpoints")
    gcs = request.getfixturevalue("gcs")
    gcs.create_bucket("b")
    return "gs://b/run/checkpoints"


def fake_checkpoint(root: str, step: int) -> None:
    """What checkpoint.save leaves (its contents do not matter to claim)."""
    import tempfile
    from pathlib import Path

    staged = Path(tempfile.mkdtemp())
    (staged / "trainer_state.pt").write_bytes(b"state")
    storage.publish_dir(staged, storage.join(root, f"step-{step:08d}"))


def test_fingerprint_follows_the_data_and_the_math_options(tmp_path):
    a = write_csv(tmp_path / "a.csv", ["text", "label"], [("x", "p"), ("y", "n")])
    b = write_csv(tmp_path / "b.csv", ["text", "label"], [("x", "p"), ("z", "n")])
    fp = checkpoint.run_fingerprint(parse_args(["--task", "csv", "--train-file", str(a)]))
    assert fp == checkpoint.run_fingerprint(parse_args(["--task", "csv", "--train-file", str(a), "--log-every", "3",
                                                        "--save-every", "9", "--eval-every", "4"]))
    other_data = checkpoint.run_fingerprint(parse_args(["--task", "csv", "--train-file", str(b)]))
    other_lr = checkpoint.run_fingerprint(parse_args(["--task", "csv", "--train-file", str(a), "--learning-rate",
                                                      "1e-3"]))
    other_labels = checkpoint.run_fingerprint(parse_args(["--task", "csv", "--train-file", str(a), "--label-names",
                                                          "n,p"]))
    assert {k for k in fp if fp[k] != other_data[k]} == {"train_data"}
    assert {k for k in fp if fp[k] != other_lr[k]} == {"learning_rate"}
    assert {k for k in fp if fp[k] != other_labels[k]} == {"label_names"}
    # regression changes the math (one output, MSE); a classification run's fingerprint does not carry the key,
    # so checkpoints from before the option existed still resume
    regression = checkpoint.run_fingerprint(parse_args(["--task", "csv", "--train-file", str(a), "--regression"]))
    plain = {k: v for k, v in fp.items() if k != "held_out_by_label"}  # regression's held-out rows: a random share
    assert "regression" not in fp and regression == {**plain, "regression": True}


def test_fingerprint_says_when_the_held_out_rows_are_split_by_label(tmp_path, root):
    # Earlier trainers held out a random share; this one splits single-label classes by label (data._hold_out). A run
    # one of them started, resumed here, would train on some of its held-out rows: refused like other data
    a = write_csv(tmp_path / "a.csv", ["text", "label"], [("x", "p"), ("y", "n")])

    def fp(*args):
        return checkpoint.run_fingerprint(parse_args(["--task", "csv", "--train-file", str(a), *args]))

    assert fp()["held_out_by_label"] is True
    assert checkpoint.run_fingerprint(parse_args(["--task", "financial"]))["held_out_by_label"] is True  # one split
    # where the rows held out are what they were (a plain seeded permutation), or there are none: as before
    for same in (fp("--eval-file", str(a)), fp("--regression"), fp("--label-columns", "label"),
                 checkpoint.run_fingerprint(parse_args([]))):
        assert "held_out_by_label" not in same
    older = {k: v for k, v in fp().items() if k != "held_out_by_label"}
    checkpoint.claim(root, older)
    fake_checkpoint(root, 5)
    with pytest.raises(checkpoint.RunMismatch, match=r"a different run \(held-out-by-label differs\): resuming"):
        checkpoint.claim(root, fp())



def test_fingerprint_says_when_the_training_subset_is_drawn_by_label(tmp_path, root):
    # Earlier trainers drew --max-train-samples / --fraction-of-train-data at random; this one draws single-label
    # classes label by label (data._subset_idx). A run one of them started, resumed here, would go on with other rows
    a = write_csv(tmp_path / "a.csv", ["text", "label"], [("x", "p"), ("y", "n")])

    def fp(*args):
        return checkpoint.run_fingerprint(parse_args(["--task", "csv", "--train-file", str(a), *args]))

    for subset in (("--max-train-samples", "40"), ("--fraction-of-train-data", "0.5")):
        assert fp(*subset)["train_subset_by_label"] is True
        assert fp(*subset, "--eval-file", str(a))["train_subset_by_label"] is True  # with or without a hold-out
        # where the rows are what they were (a plain seeded permutation): as before
        for same in (fp(*subset, "--regression"), fp(*subset, "--label-columns", "label")):
            assert "train_subset_by_label" not in same
    assert "train_subset_by_label" not in fp() and "train_subset_by_label" not in fp("--max-eval-samples", "9")
    new = fp("--max-train-samples", "40")
    older = {k: v for k, v in new.items() if k != "train_subset_by_label"}
    checkpoint.claim(root, older)
    fake_checkpoint(root, 5)
    with pytest.raises(checkpoint.RunMismatch, match=r"a different run \(train-subset-by-label differs\): resuming"):
        checkpoint.claim(root, new)
    fresh = root + "-new"
    assert checkpoint.claim(fresh, new) is True
    fake_checkpoint(fresh, 5)
    assert checkpoint.claim(fresh, new) is False  # a run this trainer started resumes

def test_a_subset_option_that_keeps_every_row_is_the_same_run_once_the_rows_are_known(tmp_path, root):
    # --max-train-samples 100000 on 8,000 rows trains on every row, as a run without it does; a resume that dropped
    # the option (or gave another that keeps them all) was refused as "a different run (max-train-samples ...)"
    a = write_csv(tmp_path / "a.csv", ["text", "label"], [("x", "p"), ("y", "n")])

    def fp(*args):
        return checkpoint.run_fingerprint(parse_args(["--task", "csv", "--train-file", str(a), *args]))

    started = fp("--max-train-samples", "100000")
    checkpoint.claim(root, started)
    fake_checkpoint(root, 5)
    # Until its data is loaded, the folder does not say how many rows there are (a fingerprint written before the
    # count was kept, or by a run that failed before loading its data). A run that may keep the same rows was refused
    # as "a different run" there, an older ftcli's finished run resumed without its --max-train-samples 100000: it
    # is taken, and the rows, once counted, decide (record_train_rows), refused in the line that names the option
    assert checkpoint.claim(root, fp()) is False
    assert checkpoint.claim(root, fp("--fraction-of-train-data", "1")) is False
    assert checkpoint.rows_to_check(root, fp()) and not checkpoint.rows_to_check(root, started)
    with pytest.raises(checkpoint.RunMismatch, match=r"\(max-train-samples, seed and train-subset-by-label differ\)"):
        checkpoint.claim(root, fp("--seed", "1"))  # (other math is refused at once, as it was)
    with pytest.raises(checkpoint.RunMismatch) as refused:
        checkpoint.record_train_rows(root, fp(), 200_000)  # (--max-train-samples 100000 kept half of them)
    assert (str(refused.value), refused.value.hint) == (
        f"{root} holds checkpoints of a different run (max-train-samples and train-subset-by-label differ, on the "
        "200,000 rows there are to train on now): resuming them would mix two runs",
        "to resume it, give --max-train-samples 100000 as it was started; or start fresh with a new --output-dir, or "
        "move that folder away")
    assert "train_rows" not in json.loads(storage.read_text(storage.join(root, checkpoint.FINGERPRINT)))
    assert checkpoint.claim(root, started) is False  # the same command resumes, as it did
    checkpoint.record_train_rows(root, started, 8000)  # (the trainer, once the data is loaded)
    for same in ((), ("--max-train-samples", "8000"), ("--fraction-of-train-data", "1"),
                 ("--fraction-of-train-data", "0.99995")):  # (7,999.6 rows: 8,000)
        assert checkpoint.claim(root, fp(*same)) is False, same
    for other, differ in ((("--max-train-samples", "7999"), "max-train-samples differs"),
                          (("--fraction-of-train-data", "0.5"), "fraction-of-train-data and max-train-samples differ"),
                          (("--max-train-samples", "100000", "--seed", "1"), "seed differs")):
        with pytest.raises(checkpoint.RunMismatch, match=rf"a different run \({differ}\): resuming"):
            checkpoint.claim(root, fp(*other))
    stored = json.loads(storage.read_text(storage.join(root, checkpoint.FINGERPRINT)))
    assert stored == {**started, "train_rows": 8000}  # the options it was started with, and the count

    # A subset: two options that keep as many rows draw the same ones (data._subset_idx), whether by label is held
    half = root + "-half"
    checkpoint.claim(half, fp("--max-train-samples", "4000"))
    fake_checkpoint(half, 5)
    checkpoint.record_train_rows(half, fp("--max-train-samples", "4000"), 8000)
    assert checkpoint.claim(half, fp("--fraction-of-train-data", "0.5")) is False
    for other in ((), ("--max-train-samples", "4001")):
        with pytest.raises(checkpoint.RunMismatch, match="a different run"):
            checkpoint.claim(half, fp(*other))
    older = {k: v for k, v in fp("--fraction-of-train-data", "0.5").items() if k != "train_subset_by_label"}
    with pytest.raises(checkpoint.RunMismatch, match=r"\(fraction-of-train-data, max-train-samples and "
                                                     r"train-subset-by-label differ\)"):
        checkpoint.claim(half, older)  # (drawn at random by an older trainer: other rows)

    # The rows found once the data is loaded are not those counted before (a Hub dataset of the same name changed):
    # what was taken for the same rows is checked again, on the rows there are now
    with pytest.raises(checkpoint.RunMismatch, match=r"a different run \(max-train-samples and train-subset-by-label "
                                                     r"differ, on the 200,000 rows there are to train on now\)"):
        checkpoint.record_train_rows(root, fp(), 200_000)
    checkpoint.record_train_rows(root, started, 200_000)  # the options it was started with: the count follows
    assert json.loads(storage.read_text(storage.join(root, checkpoint.FINGERPRINT)))["train_rows"] == (
        200_000)


def test_fingerprint_holds_the_eval_subset_when_evaluations_decide_the_model(tmp_path, root):
    # --keep-best keeps the best evaluation's weights and --early-stopping ends the run on them: resumed with another
    # --max-eval-samples, the run compared evaluations of two different subsets (refused now, naming the option)
    a = write_csv(tmp_path / "a.csv", ["text", "label"], [("x", "p"), ("y", "n")])

    def fp(*args):
        return checkpoint.run_fingerprint(parse_args(["--task", "csv", "--train-file", str(a), "--eval-every", "5",
                                                      *args]))

    for deciding in (("--keep-best",), ("--early-stopping", "2")):
        assert fp(*deciding, "--max-eval-samples", "40")["max_eval_samples"] == 40
        assert "max_eval_samples" not in fp(*deciding)
    # no evaluation decides anything: the subset changes no weight, and the run resumes as before
    assert fp("--max-eval-samples", "40") == fp() == fp("--max-eval-samples", "9")
    checkpoint.claim(root, fp("--keep-best", "--max-eval-samples", "40"))
    fake_checkpoint(root, 5)
    assert checkpoint.claim(root, fp("--keep-best", "--max-eval-samples", "40")) is False  # the same run resumes
    for other in (("--max-eval-samples", "80"), ()):
        with pytest.raises(checkpoint.RunMismatch, match=r"a different run \(max-eval-samples differs\): resuming"):
            checkpoint.claim(root, fp("--keep-best", *other))


def test_claim_takes_an_empty_folder_and_resumes_the_same_run(root):
    # Whether the fingerprint was written now: `ftcli local` undoes only a claim of its own when the run fails, and
    # says a run is finished only where it claimed nothing (its finished model there, its checkpoints removed since).
    fp = {"task": "csv", "train_data": "sha256:aa"}
    assert checkpoint.claim(root, fp) is True
    assert checkpoint.claim(root, fp) is False  # the same run again before its first checkpoint
    fake_checkpoint(root, 5)
    assert checkpoint.claim(root, fp) is False  # a restarted worker: same run


def test_claim_refuses_another_runs_checkpoints(root):
    checkpoint.claim(root, {"task": "csv", "train_data": "sha256:aa", "seed": 1})
    fake_checkpoint(root, 5)
    with pytest.raises(checkpoint.RunMismatch) as e:
        checkpoint.claim(root, {"task": "csv", "train_data": "sha256:bb", "seed": 2})
    assert "holds checkpoints of a different run (seed and train-data differ)" in str(e.value)
    assert "new --output-dir" in e.value.hint and "\n" not in str(e.value)
    with pytest.raises(checkpoint.RunMismatch, match=r"a different run \(seed differs\): resuming"):
        checkpoint.claim(root, {"task": "csv", "train_data": "sha256:aa", "seed": 2})
    with pytest.raises(checkpoint.RunMismatch, match=r"\(seed, task and train-data differ\)"):
        checkpoint.claim(root, {"task": "glue", "train_data": "sha256:bb", "seed": 2})
    many = {f"option_{i}": i for i in range(7)}
    with pytest.raises(checkpoint.RunMismatch, match=r"\(option-0, option-1, option-2, option-3, option-4 and 5 more "
                                                     r"differ\)"):
        checkpoint.claim(root, many)


def test_claim_refuses_checkpoints_that_carry_no_fingerprint(root):
    fake_checkpoint(root, 5)
    with pytest.raises(checkpoint.RunMismatch, match="do not say which run"):
        checkpoint.claim(root, {"task": "csv"})


def test_a_folder_without_checkpoints_is_taken_whatever_its_old_fingerprint(root):
    checkpoint.claim(root, {"train_data": "sha256:aa"})  # that run failed before its first checkpoint
    checkpoint.claim(root, {"train_data": "sha256:bb"})
    fake_checkpoint(root, 1)
    checkpoint.claim(root, {"train_data": "sha256:bb"})


def test_without_checkpoints_a_folder_whose_outputs_are_not_this_runs_is_refused(tmp_path):
    root, model, metrics = (str(tmp_path / d) for d in ("checkpoints", "model", "logs/metrics.jsonl"))
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "metrics.jsonl").write_text("")  # empty: nothing of anyone's
    (tmp_path / "model").mkdir()  # empty too
    checkpoint.claim(root, {"seed": 1}, model, metrics)
    (tmp_path / "logs" / "metrics.jsonl").write_text('{"step": 1}\n')  # run 1 logged, then failed
    checkpoint.claim(root, {"seed": 1}, model, metrics)  # the same run goes on in its folder
    with pytest.raises(checkpoint.RunMismatch, match=r"metrics.jsonl holds a different run's \(seed differs\) "
                                                     r"output: this run would replace or mix with it"):
        checkpoint.claim(root, {"seed": 2}, model, metrics)
    (tmp_path / "checkpoints" / checkpoint.FINGERPRINT).unlink()  # the checkpoints folder deleted
    with pytest.raises(checkpoint.RunMismatch, match="an earlier run's, and no checkpoints say which run it was"):
        checkpoint.claim(root, {"seed": 1}, model, metrics)
    assert (tmp_path / "logs" / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert checkpoint.claim(root, {"seed": 1})  # no outputs named: taken, as before


def test_without_checkpoints_behind_a_dead_link_the_refusal_names_the_link(tmp_path):
    # checkpoints/ a link to a folder not there (the run folder moved without it), the earlier run's model and metrics
    # in the run folder: dead_links warned that the run starts from step 0, then claim refused it, "no checkpoints say
    # which run it was", naming neither the link nor how to get the earlier run back.
    import os

    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "metrics.jsonl").write_text('{"step": 1}\n')
    (run / "model").mkdir()
    (run / "model" / storage.COMPLETE_MARKER).touch()
    (run / "checkpoints").symlink_to(tmp_path / "big" / "ckpt")
    root, logs, model = (str(run / d) for d in ("checkpoints", "logs", "model"))
    gone = checkpoint.gone_links(root + "/", logs + "/")
    assert gone == [root]
    (tmp_path / "big" / "ckpt").mkdir(parents=True)  # (the trainer's lock, before its claim, makes it)
    with pytest.raises(checkpoint.RunMismatch) as refused:
        checkpoint.claim(root + "/", {"seed": 1}, model, str(run / "logs" / "metrics.jsonl"), gone)
    assert (str(refused.value), refused.value.hint) == (
        f"{root} links to {tmp_path / 'big' / 'ckpt'}, which is not there (the run folder moved without it, or a disk "
        f"not mounted?): the earlier run's checkpoints, which say whose output {model} and "
        f"{run / 'logs'}/metrics.jsonl hold, are not found, and this run would replace or mix with it",
        "to resume the earlier run, make the link point at its checkpoints again (move them back, or mount the disk); "
        "or start fresh with a new --output-dir, or move that folder away")
    assert not os.path.exists(tmp_path / "big" / "ckpt" / checkpoint.FINGERPRINT)  # nothing claimed


def test_a_model_folder_of_the_users_is_refused_with_the_dead_links_of_an_earlier_run(tmp_path):
    # Said after the model's refusal only, once model/ was fixed (ftcli local's test: one refusal says both)
    run, big = tmp_path / "run", tmp_path / "big"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "events.out.tfevents.1.host.1.0").write_bytes(b"x")  # an earlier run's
    (run / "logs" / "metrics.jsonl").symlink_to(big / "curves.jsonl")
    (run / "model").mkdir()
    (run / "model" / "notes.txt").write_text("mine")
    (run / "checkpoints").symlink_to(big / "ckpt")
    root, model, metrics = str(run / "checkpoints"), str(run / "model"), str(run / "logs" / "metrics.jsonl")
    gone = checkpoint.gone_links(root, str(run / "logs"))
    with pytest.raises(checkpoint.RunMismatch) as refused:
        checkpoint.claim(root, {"seed": 1}, model, metrics, gone)
    assert refused.value.detail == (
        f"{model} is not a model ftcli exported (it has neither _COMPLETE nor ftcli_files.json) and holds notes.txt, "
        f"which ftcli did not write: this run's export would leave it as it is and put the new model beside it, in "
        f"{model}-TIME; and {root} links to {big / 'ckpt'}, which is not there (the run folder moved without it, or a "
        f"disk not mounted?) ({metrics} links to {big / 'curves.jsonl'}, not there either): fix those links too (move "
        "what they pointed at back, or mount the disk)")
    (run / "logs" / "events.out.tfevents.1.host.1.0").unlink()  # set up ahead: links to places not made yet
    with pytest.raises(checkpoint.RunMismatch) as refused:
        checkpoint.claim(root, {"seed": 1}, model, metrics, gone)
    assert refused.value.detail.endswith(f"put the new model beside it, in {model}-TIME")


def test_links_to_things_not_made_yet_warn_only_in_a_run_folder_an_earlier_run_wrote_into(tmp_path):
    # A run folder set up ahead on a bigger disk: checkpoints/ and logs/metrics.jsonl links to places not made yet.
    # The logs/ that holds the metrics.jsonl link was taken for an earlier run's logs, and the checkpoints/ link was
    # said to have lost "the earlier run's checkpoints"; a dead logs/metrics.jsonl link was never said at all (its
    # run's metrics went to a new file, apart from the earlier ones, without a word).
    run, big = tmp_path / "run", tmp_path / "big"
    (run / "logs").mkdir(parents=True)
    (run / "checkpoints").symlink_to(big / "ckpt")
    (run / "logs" / "metrics.jsonl").symlink_to(big / "curves" / "run.jsonl")
    ckpt, logs, model = str(run / "checkpoints"), str(run / "logs") + "/", str(run / "model")
    gone = checkpoint.gone_links(ckpt, logs)
    assert gone == [ckpt, f"{run / 'logs'}/metrics.jsonl"]
    assert checkpoint.dead_links(ckpt, logs, model, gone) == []  # set up ahead: nothing said

    (run / "logs" / "events.out.tfevents.1.host.1.0").write_bytes(b"x")  # an earlier run wrote there
    assert checkpoint.dead_links(ckpt, logs, model, gone) == [
        f"{ckpt} links to {big / 'ckpt'}, which is not there (the run folder moved without it, or a disk not "
        "mounted?): the earlier run's checkpoints are not found, and none is resumed (a run starts from step 0, in a "
        "new folder made there); to resume them, stop and fix the link",
        f"{run / 'logs' / 'metrics.jsonl'} links to {big / 'curves' / 'run.jsonl'}, which is not there (the run folder "
        "moved without it, or a disk not mounted?): this run's metrics go to a new file made there, apart from the "
        "earlier run's; to keep them together, stop it and fix the link"]


def test_links_that_all_point_to_nothing_warn_where_the_run_folder_records_a_run_wrote_through_them(tmp_path):
    # A run folder whose checkpoints/ and logs/ are both links, both gone (a disk not mounted): it holds nothing but
    # them, as a run folder set up ahead does, and the run started from step 0 without a word of the earlier run.
    # What the links said when a run wrote through them is in the run folder (LINKS_RECORD): said as any dead link
    run, big = tmp_path / "run", tmp_path / "big"
    run.mkdir()
    (run / "checkpoints").symlink_to(big / "ckpt")
    (run / "logs").symlink_to(big / "logs")
    ckpt, logs, model = str(run / "checkpoints"), str(run / "logs"), str(run / "model")
    gone = checkpoint.gone_links(ckpt, logs)
    assert gone == [ckpt, logs]
    assert checkpoint.dead_links(ckpt, logs, model, gone, str(run)) == []  # set up ahead: nothing said
    checkpoint.record_links(str(run))  # (the trainer, once its claim has taken the folder)
    assert json.loads((run / checkpoint.LINKS_RECORD).read_text()) == {"checkpoints": str(big / "ckpt"),
                                                                       "logs": str(big / "logs")}
    assert checkpoint.dead_links(ckpt, logs, model, gone, str(run)) == [
        f"{ckpt} links to {big / 'ckpt'}, which is not there (the run folder moved without it, or a disk not "
        "mounted?): the earlier run's checkpoints are not found, and none is resumed (a run starts from step 0, in a "
        "new folder made there); to resume them, stop and fix the link",
        f"{logs} links to {big / 'logs'}, which is not there (the run folder moved without it, or a disk not "
        "mounted?): this run's logs go to a new folder made there, apart from the earlier run's; to keep them "
        "together, stop it and fix the link"]
    assert checkpoint.dead_links(ckpt, logs, model, gone) == []  # (no run folder: the layout of AIP_* variables)
    # Set up again elsewhere (links that say something else): a run folder set up ahead, nothing said
    for name in ("checkpoints", "logs"):
        (run / name).unlink()
        (run / name).symlink_to(big / "new" / name)
    assert checkpoint.dead_links(ckpt, logs, model, checkpoint.gone_links(ckpt, logs), str(run)) == []


def test_a_model_folder_the_trainer_did_not_export_is_refused_whatever_the_checkpoints(tmp_path):
    root, model = str(tmp_path / "checkpoints"), str(tmp_path / "model")
    checkpoint.claim(root, {"seed": 1}, model)
    fake_checkpoint(root, 5)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "notes.txt").write_text("mine")
    with pytest.raises(checkpoint.RunMismatch, match="is not a model ftcli exported"):
        checkpoint.claim(root, {"seed": 1}, model)
    (tmp_path / "model" / storage.COMPLETE_MARKER).touch()  # an earlier export of this run: replaced at the end
    assert checkpoint.claim(root, {"seed": 1}, model) is False


def test_the_start_says_of_a_model_folder_of_the_users_what_the_export_would_do(root):
    # The refusal said "is there and is not a model this trainer exported (it has no _COMPLETE): the export would
    # replace it", and in a bucket "gs://.../model holds an earlier run's, and no checkpoints say which run it was,
    # output: this run would replace or mix with it"; the export leaves such a folder as it is and puts the model
    # beside it (storage._beside), and says so in the same words.
    from pathlib import Path

    model = storage.join(root.rsplit("/", 1)[0], "model")
    for name in ("README.md", "notes/a.txt"):
        if storage.is_gcs(model):
            storage.write_text(storage.join(model, name), "mine")
        else:
            Path(model, name).parent.mkdir(parents=True, exist_ok=True)
            Path(model, name).write_text("mine")
    with pytest.raises(checkpoint.RunMismatch) as refused:
        checkpoint.claim(root, {"seed": 1}, model)
    assert refused.value.detail == (
        f"{model} is not a model ftcli exported (it has neither _COMPLETE nor ftcli_files.json) and holds README.md "
        f"(and 1 more), which ftcli did not write: this run's export would leave it as it is and put the new model "
        f"beside it, in {model}-TIME")
    assert storage.read_text(storage.join(model, "README.md")) == "mine"
    assert storage.read_text(storage.join(root, checkpoint.FINGERPRINT)) is None  # nothing claimed


def test_a_folder_held_by_a_live_run_is_refused_to_a_second_one(tmp_path):
    # Two runs in one folder: the second resumed the first one's checkpoints while it was still writing them.
    import subprocess
    import sys

    root = tmp_path / "checkpoints"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from ftcli_trainer import checkpoint; "
                               f"checkpoint.lock({str(root)!r}); print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        assert checkpoint.in_use(str(root)) == (f"{root} is in use by another run (process {holder.pid}): wait for "
                                                "it to end, or give another --output-dir")
        probe = subprocess.run([sys.executable, "-c", f"from ftcli_trainer import checkpoint; "
                                f"checkpoint.lock({str(root)!r})"], capture_output=True, text=True)
        assert probe.returncode != 0 and f"in use by another run (process {holder.pid})" in probe.stderr
    finally:
        holder.kill()
        holder.wait()
    assert checkpoint.in_use(str(root)) is None  # a dead run holds nothing
    assert checkpoint.in_use(str(tmp_path / "none")) is None


def test_a_torn_checkpoint_of_the_same_step_is_replaced(tmp_path, tiny_model):
    # Only a model folder is protected from being replaced: in the checkpoint folder every step-N is the trainer's.
    from transformers import AutoModelForSequenceClassification

    root = tmp_path / "checkpoints"
    torn = root / "step-00000003"
    torn.mkdir(parents=True)
    (torn / "trainer_state.pt").write_bytes(b"half")
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model)
    checkpoint.save(str(root), 3, model, {"global_step": 3})
    assert (torn / storage.COMPLETE_MARKER).is_file() and (torn / "model.safetensors").is_file()
    assert [p.name for p in root.iterdir()] == ["step-00000003"]  # the torn one gone, not set aside for good


def test_the_checkpoint_just_written_is_kept_whatever_newer_ones_are_there(root, tiny_model, caplog):
    # The resume could not read steps 30 and 40 (marked complete, weights damaged) and went on from step 10; at
    # step 20 the two newer ones held both places kept, and the checkpoint just written was deleted.
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(tiny_model)
    for step in (30, 40):
        fake_checkpoint(root, step)
    checkpoint.save(root, 20, model, {"global_step": 20})
    assert [name for _, name in checkpoint._list(root)] == ["step-00000020", "step-00000030", "step-00000040"]
    with caplog.at_level("WARNING", logger="ftcli_trainer"):
        state = checkpoint.load_latest(root, model)
    assert state is not None and state["global_step"] == 20
    # the warning names the damaged checkpoint where it is, not a temporary copy of a gs:// one
    damaged = [r.getMessage() for r in caplog.records if "ignoring checkpoint" in r.getMessage()]
    assert len(damaged) == 2 and all("ftcli-resume" not in m for m in damaged), damaged


def test_a_save_keeps_the_newest_two_complete_checkpoints_and_removes_older_and_torn_ones(root, tiny_model):
    # What a resume needs, and no more: the newest complete checkpoint and the one before it (in case the newest is
    # found damaged); older ones and a torn one (no completion marker: a crash during its upload) go.
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(tiny_model)
    for step in (10, 20, 30):
        fake_checkpoint(root, step)
    storage.write_text(storage.join(root, "step-00000035", "trainer_state.pt"), "half")  # no marker: torn
    checkpoint.save(root, 40, model, {"global_step": 40})
    assert [name for _, name in checkpoint._list(root)] == ["step-00000030", "step-00000040"]
    assert checkpoint.newest_complete_step(root) == 40
    assert checkpoint.load_latest(root, model)["global_step"] == 40


def test_a_lock_file_a_dead_run_left_names_only_the_live_holder(tmp_path):
    # The lock file stays after its run (a flock ends with the process, the file does not): the next holder's pid
    # replaces the dead one's, so a second run is told which process to wait for, not "process 999999\n<pid>".
    import subprocess
    import sys

    root = tmp_path / "checkpoints"
    root.mkdir()
    (root / checkpoint.LOCK).write_text("999999\n")
    holder = subprocess.Popen([sys.executable, "-c", "import time; from ftcli_trainer import checkpoint; "
                               f"checkpoint.lock({str(root)!r}); print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        assert (root / checkpoint.LOCK).read_text() == f"{holder.pid}\n"
        assert checkpoint.in_use(str(root)) == (f"{root} is in use by another run (process {holder.pid}): wait for "
                                                "it to end, or give another --output-dir")
    finally:
        holder.kill()
        holder.wait()


def test_a_checkpoint_folder_under_a_file_is_one_line_and_writes_nothing(tmp_path, tiny_model):
    # (the staging folder could not be made, and the cleanup, given no folder, must not end the run in a traceback
    # of its own in place of the error line)
    from transformers import AutoModelForSequenceClassification

    from ftcli_trainer.errors import TrainerError

    (tmp_path / "notes").write_text("mine")
    root = tmp_path / "notes" / "checkpoints"
    with pytest.raises(TrainerError) as failed:
        checkpoint.save(str(root), 3, AutoModelForSequenceClassification.from_pretrained(tiny_model),
                        {"global_step": 3})
    assert str(failed.value).startswith(f"cannot write the step 3 checkpoint to {root}: ")
    assert (tmp_path / "notes").read_text() == "mine" and [p.name for p in tmp_path.iterdir()] == ["notes"]


def test_a_checkpoint_whose_weights_lack_a_tensor_is_skipped_not_half_loaded(tmp_path, tiny_model, caplog):
    # (marked complete, its weights file rewritten without one tensor: a resume from it would have trained on with
    # that tensor as the model was built, not as the run had learnt it)
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForSequenceClassification

    root = str(tmp_path / "checkpoints")
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model)
    checkpoint.save(root, 10, model, {"global_step": 10})
    checkpoint.save(root, 20, model, {"global_step": 20})
    weights = tmp_path / "checkpoints" / "step-00000020" / "model.safetensors"
    tensors = load_file(weights)
    dropped = sorted(tensors)[-1]
    weights.unlink()  # (a second name of it, with --keep-best, stays as it was)
    save_file({k: v for k, v in tensors.items() if k != dropped}, weights)
    with caplog.at_level("WARNING", logger="ftcli_trainer"):
        state = checkpoint.load_latest(root, model)
    assert state is not None and state["global_step"] == 10
    (warned,) = [r.getMessage() for r in caplog.records if "ignoring checkpoint" in r.getMessage()]
    assert warned.startswith(f"ignoring checkpoint {tmp_path / 'checkpoints' / 'step-00000020'}: "), warned


def test_a_resume_from_a_bucket_leaves_no_copy_of_the_checkpoint_in_the_temp_folder(gcs, tiny_model, tmp_path,
                                                                                      monkeypatch):
    # A gs:// checkpoint is staged in the system temp folder to be uploaded, and downloaded there to be resumed:
    # each copy goes once done with (the optimizer's state is twice the weights: GBs of the VM's disk a resume).
    import tempfile

    from transformers import AutoModelForSequenceClassification

    gcs.create_bucket("b")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model)
    checkpoint.save("gs://b/run/checkpoints", 10, model, {"global_step": 10})
    assert list((tmp_path / "tmp").iterdir()) == []
    assert checkpoint.load_latest("gs://b/run/checkpoints", model)["global_step"] == 10
    assert list((tmp_path / "tmp").iterdir()) == []
