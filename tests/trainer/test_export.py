"""What the export adds for `ftcli report`: the last evaluation's outputs, small plain arrays in the model folder."""

import json

import numpy as np
import pytest

from ftcli_trainer.export import prediction_arrays


def test_single_label_predictions_are_ids_and_softmax_scores():
    logits = np.array([[2.0, 0.0, -1.0], [0.0, 3.0, 0.0]], np.float32)
    out = prediction_arrays({"matched": (np.array([0, 2]), logits), "mismatched": (np.array([1]), logits[:1])},
                            ["e", "n", "c"], False, False, 0.5)
    assert str(out["kind"]) == "single_label" and list(out["eval_sets"]) == ["matched", "mismatched"]
    assert list(out["label_names"]) == ["e", "n", "c"]
    assert out["matched/predicted"].tolist() == [0, 1] and out["matched/labels"].tolist() == [0, 2]
    np.testing.assert_allclose(out["matched/scores"].sum(axis=1), 1.0, rtol=1e-6)
    assert out["matched/scores"].dtype == np.float32 and out["mismatched/scores"].shape == (1, 3)


def test_multi_label_predictions_follow_the_threshold():
    logits = np.array([[2.0, -2.0], [0.1, 0.3]], np.float32)
    out = prediction_arrays({"eval": (np.array([[1.0, 0.0], [0.0, 1.0]], np.float32), logits)}, ["a", "b"], True,
                            False, threshold=0.56)
    assert out["eval/predicted"].tolist() == [[1, 0], [0, 1]]  # sigmoid(0.1) = 0.525 < 0.56 <= sigmoid(0.3)
    assert out["eval/labels"].dtype == np.uint8


def test_regression_predictions_are_the_numbers():
    logits = np.array([[3.25], [-0.5]], np.float32)
    out = prediction_arrays({"validation": (np.array([3.0, 0.0], np.float32), logits)}, ["label"], False, True, 0.5)
    assert str(out["kind"]) == "regression"
    assert out["validation/predicted"].tolist() == [3.25, -0.5] == out["validation/scores"].tolist()


def test_saved_and_loaded_without_pickles(tmp_path):
    out = prediction_arrays({"eval": (np.array([1, 0]), np.zeros((2, 2), np.float32))}, ["x", "y"], False, False, 0.5)
    np.savez_compressed(tmp_path / "p.npz", **out)
    with np.load(tmp_path / "p.npz", allow_pickle=False) as z:
        assert set(z.files) == {"kind", "label_names", "eval_sets", "eval/labels", "eval/predicted", "eval/scores"}
        assert list(z["label_names"]) == ["x", "y"]
    with pytest.raises(KeyError):
        out["validation/labels"]


def test_metrics_json_writes_a_confusion_matrix_one_row_a_line(tmp_path, tiny_model):
    # json.dumps(indent=2) put each count of the K x K matrix on a line of its own: a 1,000-label run's
    # metrics.json was 9.2 MB (7 MB of it the matrix), a 3,000-label one's 82 MB, unreadable in an editor.
    import json

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from ftcli_trainer.export import export_model
    from ftcli_trainer.metrics import prefixed, single_label

    k = 300
    labels = np.arange(3 * k) % k
    logits = np.eye(k, dtype=np.float32)[(labels * 7) % k]
    metrics = {**prefixed(single_label(logits, labels, [f"l{i}" for i in range(k)]), "eval", True), "train_loss": 0.5}
    export_model(AutoModelForSequenceClassification.from_pretrained(tiny_model),
                 AutoTokenizer.from_pretrained(tiny_model), str(tmp_path / "model"), metrics, {})
    text = (tmp_path / "model" / "metrics.json").read_text()
    assert json.loads(text) == json.loads(json.dumps(metrics))  # the same values, read back
    matrix = text.splitlines()[text.splitlines().index('  "eval_confusion_matrix": [') + 1:][:k + 1]
    assert matrix[0] == "    " + json.dumps(metrics["eval_confusion_matrix"][0], separators=(",", ":")) + ","
    assert matrix[k] == "  ],"
    assert len(text.splitlines()) < 20 * k  # per-label scores a few lines each; the matrix k lines, not k * k


def test_the_padding_side_is_written_even_where_the_tokenizer_class_pads_left_by_default(tiny_model, tmp_path):
    # Llama's and Gemma's tokenizer classes pad on the left unless tokenizer_config.json says otherwise, and
    # save_pretrained writes only what the tokenizer was made with: setting padding_side alone did not reach the file.
    import json

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from ftcli_trainer.export import export_model

    tok = AutoTokenizer.from_pretrained(tiny_model)
    tok.init_kwargs.pop("padding_side", None)  # as a class that pads left by default is made
    tok.padding_side = "left"
    export_model(AutoModelForSequenceClassification.from_pretrained(tiny_model), tok, str(tmp_path / "model"),
                 {}, {})
    assert json.loads((tmp_path / "model" / "tokenizer_config.json").read_text())["padding_side"] == "right"
    assert tok.padding_side == "left" and "padding_side" not in tok.init_kwargs  # the run's tokenizer as it was


@pytest.mark.parametrize("there", [True, False], ids=["a-folder", "nothing-yet"])
def test_a_model_folder_that_is_a_link_gets_the_model_where_it_points(tiny_model, tmp_path, there):
    # run/model linked to a folder on a bigger disk: the link was renamed away and deleted, and the model put in its
    # place on the run's disk (the folder it pointed at left empty); a link to a folder not made yet failed the export
    # at the end of the run ("Not a directory").
    import os

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from ftcli_trainer.export import export_model

    (tmp_path / "run").mkdir()
    big = tmp_path / "big" / "model"
    if there:
        big.mkdir(parents=True)
    (tmp_path / "run" / "model").symlink_to(os.path.join("..", "big", "model"))
    for _ in range(2):  # a new export, then one over it
        export_model(AutoModelForSequenceClassification.from_pretrained(tiny_model),
                     AutoTokenizer.from_pretrained(tiny_model), str(tmp_path / "run" / "model"), {}, {})
        assert os.readlink(tmp_path / "run" / "model") == os.path.join("..", "big", "model")
        assert (big / "_COMPLETE").is_file() and (big / "model.safetensors").is_file()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["big", "run"]
        assert [p.name for p in big.parent.iterdir()] == ["model"]  # no staging left beside it


def test_a_run_resumed_after_its_export_keeps_what_the_user_added_to_its_model_folder(tiny_model, sentiment_csv,
                                                                                    tmp_path):
    # The same trainer command again (a restarted Vertex worker, python -m ftcli_trainer.task by hand) evaluates and
    # exports once more: the export replaced the whole model/ folder, and the README.md the user had written there went.
    from ftcli_trainer import storage
    from ftcli_trainer.task import main

    train, test = sentiment_csv
    out = tmp_path / "run"
    argv = ["--task", "csv", "--train-file", str(train), "--eval-file", str(test), "--model", str(tiny_model),
            "--epochs", "1", "--batch-size", "16", "--output-dir", str(out)]
    assert main(argv) == 0
    model = out / "model"
    (model / "README.md").write_text("# my sentiment model\n")
    assert main(argv) == 0
    assert (model / "README.md").read_text() == "# my sentiment model\n"
    assert (model / storage.COMPLETE_MARKER).is_file() and (model / "model.safetensors").is_file()
    assert sorted(p.name for p in out.iterdir()) == ["checkpoints", "logs", "model"]
    # the export's list of its files: every file it wrote, and not the user's
    wrote = set(json.loads((model / storage.EXPORT_MANIFEST).read_text())["files"])
    assert {"config.json", "model.safetensors", "metrics.json", "ftcli_run.json"} <= wrote
    assert wrote == {p.relative_to(model).as_posix() for p in model.rglob("*") if p.is_file()} - {
        storage.COMPLETE_MARKER, storage.EXPORT_MANIFEST, "README.md"}


def test_the_last_checkpoints_weights_are_written_once_and_exported_again_after_a_stop_during_the_export(
        tiny_model, sentiment_csv, tmp_path):
    # The last epoch's checkpoint and the export wrote the same tensors twice (BERT-base: 440 MB more written, and
    # uploaded from a job, at the end of every run). The export now takes the checkpoint's file (written as
    # save_pretrained writes it): one file, two names. A run stopped during its export exports it again from there.
    import os
    import shutil

    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file
    from transformers import AutoModelForSequenceClassification

    from ftcli_trainer import checkpoint
    from ftcli_trainer.task import main

    train, test = sentiment_csv
    out = tmp_path / "run"
    argv = ["--task", "csv", "--train-file", str(train), "--eval-file", str(test), "--model", str(tiny_model),
            "--epochs", "2", "--batch-size", "16", "--output-dir", str(out)]
    assert main(argv) == 0
    first, last = sorted((out / "checkpoints").glob("step-*"))
    exported = out / "model" / "model.safetensors"
    assert os.path.samefile(exported, last / "model.safetensors")
    assert not os.path.samefile(exported, first / "model.safetensors")  # (that one is the first epoch's)
    assert sorted(p.name for p in last.iterdir()) == ["_COMPLETE", "model.safetensors", "trainer_state.pt"]
    with safe_open(str(exported), "pt") as f:
        assert f.metadata() == {"format": "pt"}  # what from_pretrained requires of a safetensors file
    weights = load_file(exported)

    shutil.rmtree(out / "model")  # stopped during the export
    assert main(argv) == 0
    assert os.path.samefile(exported, last / "model.safetensors")
    again = load_file(exported)
    assert again.keys() == weights.keys() and all(torch.equal(again[k], weights[k]) for k in weights)

    # a last checkpoint written as any other (an earlier trainer's): the export writes the weights itself
    state = torch.load(last / "trainer_state.pt", weights_only=True)
    torch.save({k: v for k, v in state.items() if k != checkpoint.AS_EXPORTED}, last / "trainer_state.pt")
    shutil.rmtree(out / "model")
    assert main(argv) == 0
    assert not os.path.samefile(exported, last / "model.safetensors")
    again = load_file(exported)
    assert again.keys() == weights.keys() and all(torch.equal(again[k], weights[k]) for k in weights)

    shutil.rmtree(out / "checkpoints")  # removed to make room: the model is whole without them
    loaded = AutoModelForSequenceClassification.from_pretrained(out / "model")
    assert all(torch.equal(loaded.state_dict()[k], weights[k]) for k in weights)


def test_an_export_whose_checkpoint_weights_are_gone_writes_them_itself(tiny_model, tmp_path):
    # (the final checkpoint's file removed before the export took it: the export failed on a missing file of a folder
    # it never named)
    from safetensors.torch import load_file
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from ftcli_trainer.export import export_model

    model = AutoModelForSequenceClassification.from_pretrained(tiny_model)
    (tmp_path / "checkpoints" / "step-00000030").mkdir(parents=True)
    export_model(model, AutoTokenizer.from_pretrained(tiny_model), str(tmp_path / "model"), {}, {},
                 weights_from=str(tmp_path / "checkpoints" / "step-00000030"))
    assert load_file(tmp_path / "model" / "model.safetensors").keys() == model.state_dict().keys()


def test_a_model_folder_under_a_file_is_one_line_and_writes_nothing(tiny_model, tmp_path):
    # (--output-dir under a file: the export's staging folder could not be made, and its cleanup, given no folder,
    # must not end the run in a traceback of its own in place of the error line)
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from ftcli_trainer.errors import TrainerError
    from ftcli_trainer.export import export_model

    (tmp_path / "notes").write_text("mine")
    with pytest.raises(TrainerError) as failed:
        export_model(AutoModelForSequenceClassification.from_pretrained(tiny_model),
                     AutoTokenizer.from_pretrained(tiny_model), str(tmp_path / "notes" / "model"), {}, {})
    assert str(failed.value).startswith(f"cannot write the model to {tmp_path / 'notes' / 'model'}: ")
    assert (tmp_path / "notes").read_text() == "mine" and [p.name for p in tmp_path.iterdir()] == ["notes"]


def test_an_export_to_a_bucket_leaves_no_copy_of_the_model_in_the_temp_folder(gcs, tiny_model, tmp_path, monkeypatch):
    # A gs:// model is staged in the system temp folder, then uploaded: the local copy goes once it is there (a model's
    # worth of the VM's disk, or of a laptop's /tmp with `ftcli local --output-dir gs://...`, each run).
    import tempfile

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from ftcli_trainer import storage
    from ftcli_trainer.export import export_model

    gcs.create_bucket("b")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    export_model(AutoModelForSequenceClassification.from_pretrained(tiny_model),
                 AutoTokenizer.from_pretrained(tiny_model), "gs://b/run/model", {}, {})
    assert {"run/model/model.safetensors", "run/model/_COMPLETE"} <= set(gcs.list("b", "run/model/"))
    assert storage.exists("gs://b/run/model/config.json")
    assert list((tmp_path / "tmp").iterdir()) == []
