"""Reading users' files: labels that mean the same are one class, labels that cannot be told apart are an
error before any work, and every broken file is one line naming the file, the line and the fix."""

import gzip
import json

import numpy as np
import pytest

from ftcli_trainer.config import parse_args
from ftcli_trainer.errors import DataError
from tests.conftest import write_csv
from tests.trainer.helpers import error_of, load, with_hint


def jsonl(path, objs, blank_first: int = 0):
    path.write_text("\n" * blank_first + "\n".join(o if isinstance(o, str) else json.dumps(o) for o in objs) + "\n")
    return path


def test_mixed_label_kinds_are_an_error_not_extra_classes(tmp_path):
    path = write_csv(tmp_path / "t.csv", ["text", "label"],
                     [("a", "neg"), ("b", "1"), ("c", "0"), ("d", "pos")] * 5)
    msg = error_of("--task", "csv", "--train-file", str(path))
    assert "mix numbers and names" in msg and "line 2: 'neg'" in msg and "line 3: '1'" in msg
    assert "--label-names" in msg


def test_with_label_names_numbers_are_ids_and_names_are_names(tmp_path):
    path = write_csv(tmp_path / "t.csv", ["text", "label"], [("a", "neg"), ("b", "1")] * 5)
    data = load("--task", "csv", "--train-file", str(path), "--label-names", "neg,pos", "--eval-fraction", "0.2")
    assert data.label_names == ["neg", "pos"]
    assert sorted(set(data.train.labels.tolist())) == [0, 1]


def test_labels_differing_only_in_case_are_two_classes_and_said_so(tmp_path, caplog):
    path = write_csv(tmp_path / "t.csv", ["text", "label"],
                     [("a", "Positive"), ("b", "positive"), ("c", "negative"), ("d", "positive")] * 5)
    with caplog.at_level("WARNING", logger="ftcli_trainer"):
        data = load("--task", "csv", "--train-file", str(path))
    assert data.label_names == ["Positive", "negative", "positive"]  # as written: the user decides
    (line,) = [r.getMessage() for r in caplog.records if "differ only in case" in r.getMessage()]
    assert "the labels 'Positive', 'positive' differ only in case, so they are 2 classes" in line


def test_labels_that_differ_otherwise_say_nothing(tmp_path, caplog):
    path = write_csv(tmp_path / "t.csv", ["text", "label"], [("a", "pos"), ("b", "neg")] * 5)
    with caplog.at_level("WARNING", logger="ftcli_trainer"):
        load("--task", "csv", "--train-file", str(path))
    assert not [r for r in caplog.records if "differ only in case" in r.getMessage()]


def test_label_ids_beside_a_column_that_names_them_are_said(tmp_path, caplog):
    # MNLI exported from the Hub: label 0/1/2 and label_name; trained on `label`, the model answered '0', '1', '2'
    rows = [(f"p{i}", f"h{i}", i % 3, ["entailment", "neutral", "contradiction"][i % 3], f"note {i % 2}")
            for i in range(30)]
    path = write_csv(tmp_path / "t.csv", ["premise", "hypothesis", "label", "label_name", "note"], rows)
    argv = ["--task", "csv", "--train-file", str(path), "--text-column", "premise", "--text-pair-column",
            "hypothesis"]
    with caplog.at_level("WARNING", logger="ftcli_trainer"):
        load(*argv)
    (line,) = [r.getMessage() for r in caplog.records if "names each of them" in r.getMessage()]
    assert line == ("the labels in 'label' are numbers (0, 1, 2), and column 'label_name' names each of them (0 = "
                    "'entailment', 1 = 'neutral', 2 = 'contradiction'): the model would answer '0', '1', '2'; to have "
                    "it answer the names, pass --label-column label_name (or --label-names "
                    "entailment,neutral,contradiction)")
    caplog.clear()
    with caplog.at_level("WARNING", logger="ftcli_trainer"):  # what it says to do: the names, nothing said
        data = load(*argv, "--label-names", "entailment,neutral,contradiction")
        assert data.label_names == ["entailment", "neutral", "contradiction"]
        load(*argv, "--label-column", "label_name")
    assert not [r for r in caplog.records if "names each of them" in r.getMessage()]
    # a column that does not name the numbers one to one ('note' names two of three; a name for two numbers)
    rows = [(p, h, y, "same", note) for p, h, y, _, note in rows]
    write_csv(path, ["premise", "hypothesis", "label", "label_name", "note"], rows)
    with caplog.at_level("WARNING", logger="ftcli_trainer"):
        load(*argv)
    assert not [r for r in caplog.records if "names each of them" in r.getMessage()]


def test_labels_with_too_few_examples_to_learn_or_score_are_said_before_training(tmp_path, caplog):
    # A label with one row trained silently, and the held-out split left it out of the eval set.
    rows = [(f"good {i}", "pos") for i in range(40)] + [(f"bad {i}", "neg") for i in range(40)] + [("odd", "rare")]
    rows += [(f"mid {i}", f"m{i % 7}") for i in range(7 * 3)]  # 7 labels of 3 rows: learnable, likely unscored
    path = write_csv(tmp_path / "t.csv", ["text", "label"], rows)
    with caplog.at_level("WARNING", logger="ftcli_trainer"):
        data = load("--task", "csv", "--train-file", str(path), "--eval-fraction", "0.1")
    said = [r.getMessage() for r in caplog.records]
    train = np.bincount(data.train.labels, minlength=10)
    scored = np.bincount(data.evals["eval"].labels, minlength=10)
    thin = [n for i, n in enumerate(data.label_names) if train[i] < 3]
    assert "rare" in thin
    (line,) = [x for x in said if "too few to learn" in x]
    assert line.startswith(f"{len(thin)} of 10 labels have fewer than 3 training examples, too few to learn: ")
    rare = data.label_names.index("rare")
    assert f"'rare' ({train[rare]} train, {scored[rare]} eval)" in line
    unscored = [i for i in range(10) if scored[i] == 0 and train[i] >= 3]
    assert unscored  # 10 labels, 11 held-out rows, most of them pos/neg
    (line,) = [x for x in said if "cannot score" in x]
    assert line.startswith(f"{len(unscored)} of 10 labels have no example in the eval set, so it cannot score them: ")
    assert ("more; give --eval-file" in line) == (len(unscored) > 5)


def test_labels_enough_to_learn_and_score_say_nothing(tmp_path, caplog):
    path = write_csv(tmp_path / "t.csv", ["text", "label"], [(f"w {i}", "abc"[i % 3]) for i in range(90)])
    eval_path = write_csv(tmp_path / "e.csv", ["text", "label"], [("x", "a"), ("y", "b"), ("z", "c")])
    with caplog.at_level("WARNING", logger="ftcli_trainer"):
        load("--task", "csv", "--train-file", str(path), "--eval-file", str(eval_path))
    assert caplog.records == []


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_equal_numbers_are_one_class(tmp_path, fmt):
    values = [1, 1.0, 0, 0.0, "1", "1.0", " 0 "]
    if fmt == "csv":
        path = write_csv(tmp_path / "t.csv", ["text", "label"], [(f"t{i}", v) for i, v in enumerate(values * 3)])
    else:
        path = jsonl(tmp_path / "t.jsonl", [{"text": f"t{i}", "label": v} for i, v in enumerate(values * 3)])
    data = load("--task", fmt, "--train-file", str(path))
    assert data.label_names == ["0", "1"]


def test_jsonl_numbers_and_strings_are_mixed(tmp_path):
    path = jsonl(tmp_path / "t.jsonl", [{"text": "a", "label": "neg"}, {"text": "b", "label": 1}] * 5)
    assert "mix numbers and names" in error_of("--task", "jsonl", "--train-file", str(path))


def test_jsonl_list_labels_are_multi_label(tmp_path):
    rows = [{"text": f"t{i}", "label": [["sports"], ["tech", "sports"], [], ["tech"]][i % 4]} for i in range(40)]
    path = jsonl(tmp_path / "t.jsonl", rows)
    data = load("--task", "jsonl", "--train-file", str(path), "--eval-fraction", "0.25")
    assert data.multi_label and data.label_names == ["sports", "tech"]
    assert data.train.labels.dtype == np.float32 and data.train.labels.shape == (30, 2)
    by_text = {r["text"]: r["label"] for r in rows}
    for text, row in zip(data.train.texts, data.train.labels, strict=True):
        assert [n for n, v in zip(data.label_names, row, strict=True) if v == 1.0] == sorted(by_text[text])


def test_jsonl_list_labels_with_label_names(tmp_path):
    rows = [{"text": f"t{i}", "label": [["b"], ["a", "b"]][i % 2]} for i in range(20)]
    path = jsonl(tmp_path / "t.jsonl", rows)
    data = load("--task", "jsonl", "--train-file", str(path), "--label-names", "b,c,a")
    assert data.multi_label and data.label_names == ["b", "c", "a"]
    assert data.train.labels[:, 1].sum() == 0
    bad = jsonl(tmp_path / "bad.jsonl", rows[:5] + [{"text": "x", "label": ["a", "zzz"]}])
    msg = error_of("--task", "jsonl", "--train-file", str(bad), "--label-names", "a,b")
    assert "line 6" in msg and "'zzz'" in msg and "(a, b)" in msg


def test_jsonl_lists_mixed_with_single_labels(tmp_path):
    path = jsonl(tmp_path / "t.jsonl", [{"text": "a", "label": ["x"]}, {"text": "b", "label": "x"}] * 3)
    msg = error_of("--task", "jsonl", "--train-file", str(path))
    assert msg.endswith("line 2: label 'x' in 'label' is not a list, but other labels are lists\n"
                  "hint: give every example a list of labels ([] for none)")


def test_an_eval_file_whose_labels_are_not_the_training_files_kind_is_refused(tmp_path):
    # Found by mutation testing: an eval file of lists only, for a model of one label per example, was read as
    # multi-label (a 0/1 matrix scored against single-label logits) when the check of the training file's kind was
    # loosened, and no test failed
    train = jsonl(tmp_path / "t.jsonl", [{"text": f"t{i}", "label": [["x"], ["y"]][i % 2]} for i in range(10)])
    ev = jsonl(tmp_path / "e.jsonl", [{"text": "a", "label": "x"}, {"text": "b", "label": "y"}])
    msg = error_of("--task", "jsonl", "--train-file", str(train), "--eval-file", str(ev))
    assert "e.jsonl line 1: label 'x' in 'label' is not a list, but the training data's labels are lists" in msg
    # and the other way round: an eval file of lists only, for a model of one label per example
    train = jsonl(tmp_path / "t1.jsonl", [{"text": f"t{i}", "label": "xy"[i % 2]} for i in range(10)])
    ev = jsonl(tmp_path / "e1.jsonl", [{"text": "a", "label": ["x"]}, {"text": "b", "label": ["y"]}])
    msg = error_of("--task", "jsonl", "--train-file", str(train), "--eval-file", str(ev))
    assert "e1.jsonl line 1: label ['x'] is a list, but the training data has one label per example" in msg


@pytest.mark.parametrize("item,shown", [("true", "True"), ('" "', "' '"), ("null", "None"), ('["x"]', "['x']")])
def test_a_label_list_item_that_is_no_name_is_refused(tmp_path, item, shown):
    # Found by mutation testing: a JSON true in a label list became a class 'true', and a blank one a class '', with
    # either check dropped and no test failing
    path = tmp_path / "t.jsonl"
    path.write_text('{"text": "a", "label": ["x"]}\n' f'{{"text": "b", "label": ["y", {item}]}}\n' * 3)
    assert f"line 2: {shown} in the label list is not a label name" in error_of(
        "--task", "jsonl", "--train-file", str(path))


def test_missing_or_null_jsonl_label_names_the_line(tmp_path):
    objs = [{"text": "a", "label": "pos"}, {"text": "b", "label": "neg"}, {"text": "c"}]
    path = jsonl(tmp_path / "t.jsonl", objs * 3, blank_first=2)
    msg = error_of("--task", "jsonl", "--train-file", str(path))
    assert "line 5: no 'label'" in msg  # two blank lines, then the third object
    path = jsonl(tmp_path / "n.jsonl", [{"text": "a", "label": "pos"}, {"text": "b", "label": None}] * 3)
    assert "line 2: no 'label'" in error_of("--task", "jsonl", "--train-file", str(path))


def test_object_labels_are_refused(tmp_path):
    path = jsonl(tmp_path / "t.jsonl", [{"text": "a", "label": {"x": 1}}, {"text": "b", "label": "y"}] * 3)
    assert "line 1: label {'x': 1} is not a name, a number or a list" in error_of(
        "--task", "jsonl", "--train-file", str(path))


def test_empty_csv_label_is_an_error(tmp_path):
    path = write_csv(tmp_path / "t.csv", ["text", "label"], [("a", "pos"), ("b", ""), ("c", "neg")] * 3)
    assert "line 3: empty label in column 'label'" in error_of("--task", "csv", "--train-file", str(path))


def test_a_csv_error_names_the_line_an_editor_shows(tmp_path):
    # It said "row 3", counting data rows only: the bad row is on line 6 (header, a text over two lines, a blank
    # line), where an editor shows it.
    path = tmp_path / "t.csv"
    path.write_text('text,label\n"a good\nfilm",pos\n\nbad film,neg\nmeh,\nok,pos\n')
    assert error_of("--task", "csv", "--train-file", str(path)) == (
        f"{path} line 6: empty label in column 'label'\nhint: fill it in, or remove the row")
    path.write_text('text,label\n"a good\nfilm",pos\n\nbad film,neg\n"so\r\nso",\n')  # where its record starts
    assert error_of("--task", "csv", "--train-file", str(path)).startswith(f"{path} line 6: empty label")


def test_a_nan_label_is_missing_not_a_class(tmp_path):
    # JSON's NaN became a class named "nan" (and a CSV's "NaN" one named "NaN")
    rows = [{"text": f"t{i}", "label": ["neg", "pos"][i % 2]} for i in range(10)]
    rows[5]["label"] = float("nan")
    path = jsonl(tmp_path / "t.jsonl", rows)
    assert "line 6: label nan in column 'label' is a missing value" in error_of(
        "--task", "jsonl", "--train-file", str(path))
    path = write_csv(tmp_path / "t.csv", ["text", "label"], [("a", "pos"), ("b", "NaN"), ("c", "neg")] * 3)
    assert "line 3: label 'NaN' in column 'label' is a missing value" in error_of(
        "--task", "csv", "--train-file", str(path))


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_blank_multi_label_value_is_an_error_not_a_0(tmp_path, fmt):
    rows = [(f"t{i}", i % 2, int(i % 3 == 0)) for i in range(12)]
    rows[3] = ("t3", "", 1)
    if fmt == "csv":
        path = write_csv(tmp_path / "t.csv", ["text", "toxic", "insult"], rows)
    else:
        path = jsonl(tmp_path / "t.jsonl", [{"text": t, "toxic": None if a == "" else a, "insult": b}
                                             for t, a, b in rows])
    msg = error_of("--task", fmt, "--train-file", str(path), "--label-columns", "toxic,insult")
    assert f"line {5 if fmt == 'csv' else 4}: no value in label column 'toxic'" in msg and "0 or 1" in msg


def test_numbers_in_the_eval_file_are_not_mapped_onto_the_training_files_names(tmp_path):
    # They were taken as ids in the names' alphabetical order, which the user never chose ("1" = neg would be
    # scored as pos without a word).
    train = write_csv(tmp_path / "t.csv", ["text", "label"], [("a", "neg"), ("b", "pos")] * 5)
    ev = write_csv(tmp_path / "e.csv", ["text", "label"], [("c", "0"), ("d", "1")])
    msg = error_of("--task", "csv", "--train-file", str(train), "--eval-file", str(ev))
    assert "line 2: label '0' is a number, but the training data's labels are names (neg, pos)" in msg
    assert "--label-names" in msg
    data = load("--task", "csv", "--train-file", str(train), "--eval-file", str(ev), "--label-names", "neg,pos")
    assert data.evals["eval"].labels.tolist() == [0, 1]  # with the names given in id order, numbers are ids


def test_a_number_past_the_given_label_names_says_ids_start_at_0(tmp_path):
    # 1-5 star ratings with --label-names one,two,...: "3" was refused as "a number, but the training data's labels
    # are names (bad, ok, good); ... or pass --label-names": the data's labels are numbers, and the names were given.
    train = write_csv(tmp_path / "t.csv", ["text", "stars"], [("a", "1"), ("b", "2"), ("c", "3")] * 3)
    msg = error_of("--task", "csv", "--train-file", str(train), "--label-column", "stars", "--label-names",
                   "bad,ok,good")
    assert "line 4: label '3' is a number, so a class id, but the 3 label names (bad, ok, good) have ids 0 to 2" in msg
    assert "training data's labels are names" not in msg and "ids start at 0" in msg


@pytest.mark.parametrize("label", ["-1", "1.5"])
def test_a_number_that_is_no_id_of_the_given_label_names_is_refused(tmp_path, label):
    # Found by mutation testing: with `0 <=` loosened, -1 was taken as the id of the last name (Python's and numpy's
    # index -1), a silent wrong label; without the whole-number check, 1.5 was a ValueError traceback
    train = write_csv(tmp_path / "t.csv", ["text", "label"], [("a", "0"), ("b", "1")] * 3 + [("c", label)])
    msg = error_of("--task", "csv", "--train-file", str(train), "--label-names", "neg,pos")
    assert (f"line 8: label {label!r} is a number, so a class id, but the 2 label names (neg, pos) have ids 0 "
            "to 1") in msg


@pytest.mark.parametrize("indent", [None, 2], ids=["one-line", "pretty"])
def test_a_json_array_file_says_to_write_json_lines(tmp_path, indent):
    # json.dump's / pandas' records array failed on its first line: "line 1 is not valid JSON (Expecting value);
    # expected one object per line" (pretty) or "line 1: expected a JSON object per line, got list".
    path = tmp_path / "data.json"
    path.write_text(json.dumps([{"text": f"t{i}", "label": ["neg", "pos"][i % 2]} for i in range(6)], indent=indent))
    msg = error_of("--task", "jsonl", "--train-file", str(path))
    assert f"{path} is one JSON array, not JSON Lines\nhint: write one object per line" in msg
    assert "orient='records', lines=True" in msg


def test_corrupt_gzip_is_one_line(tmp_path):
    path = tmp_path / "t.csv.gz"
    path.write_bytes(b"\x1f\x8b\x09 a gzip header, then no gzip at all")  # (plain text is read as such: GZIP_MAGIC)
    msg = error_of("--task", "csv", "--train-file", str(path))
    assert "t.csv.gz is not a valid gzip file" in msg


def test_truncated_gzip_is_one_line(tmp_path):
    good = gzip.compress(("text,label\n" + "".join(f"row {i},{i % 2}\n" for i in range(2000))).encode())
    path = tmp_path / "t.csv.gz"
    path.write_bytes(good[: len(good) // 2])
    msg = error_of("--task", "csv", "--train-file", str(path))
    assert "t.csv.gz is not a valid gzip file" in msg and "truncated" in msg


def test_a_5_mb_cell_is_valid_csv(tmp_path):
    big = "word " * 1_000_000
    path = write_csv(tmp_path / "t.csv", ["text", "label"], [(big, "pos"), ("short", "neg")] * 3)
    data = load("--task", "csv", "--train-file", str(path))
    assert max(len(t) for t in data.train.texts + data.evals["eval"].texts) == len(big)


def test_unreadable_data_file_is_one_line(tmp_path):
    folder = tmp_path / "data.csv"
    folder.mkdir()
    assert "is a folder" in error_of("--task", "csv", "--train-file", str(folder))


def test_jsonl_list_labels_train_a_multi_label_model(tmp_path, tiny_model):
    pytest.importorskip("torch")
    from ftcli_trainer.task import main

    rows = [{"text": f"{w} film number {i}", "label": [["good"], ["bad"], ["good", "long"], []][i % 4]}
            for i, w in enumerate(["great", "awful", "superb", "plot"] * 10)]
    path = jsonl(tmp_path / "t.jsonl", rows)
    out = tmp_path / "run"
    assert main(["--task", "jsonl", "--train-file", str(path), "--model", str(tiny_model), "--epochs", "1",
                 "--output-dir", str(out)]) == 0
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification"
    assert sorted(config["id2label"].values()) == ["bad", "good", "long"]
    assert set(json.loads((out / "model" / "metrics.json").read_text())["eval_per_label"]) == {"bad", "good", "long"}


def test_regression_targets_from_csv_and_json_lines(tmp_path):
    """Numbers however written (1, 2.5, " 4 ", "1e0", a JSON number), kept as float32; the name is the column's."""
    rows = [("a", "1"), ("b", " 2.5 "), ("c", "1e0"), ("d", "-0.5")]
    csv_path = write_csv(tmp_path / "s.csv", ["text", "score"], rows)
    data = load("--task", "csv", "--train-file", str(csv_path), "--label-column", "score", "--regression",
                "--eval-file", str(csv_path))
    assert data.regression and not data.multi_label and data.label_names == ["score"]
    assert data.train.labels.dtype == np.float32 and data.train.labels.tolist() == [1.0, 2.5, 1.0, -0.5]
    jsonl = tmp_path / "s.jsonl"
    jsonl.write_text('{"text": "a", "label": 3}\n\n{"text": "b", "label": 4.75}\n{"text": "c", "label": "0"}\n')
    data = load("--task", "jsonl", "--train-file", str(jsonl), "--eval-file", str(jsonl), "--regression")
    assert data.train.labels.tolist() == [3.0, 4.75, 0.0]


@pytest.mark.parametrize("content,needle", [
    ('{"text": "a", "label": 1}\n{"text": "b", "label": "high"}\n',
     "line 2: target 'high' in column 'label' is not a finite number\nhint: a regression needs a number in every "
     "row: fix the row, or drop --regression to learn classes"),
    ('{"text": "a", "label": 1}\n{"text": "b", "label": true}\n', "line 2: target True in column 'label'"),
    ('{"text": "a", "label": 1}\n{"text": "b", "label": "NaN"}\n', "line 2: target 'NaN'"),
    # JSON's NaN and Infinity are floats (json.loads reads them): trained on as targets, the loss is NaN from the first
    # step. Found by mutation testing: no test failed without the finiteness check.
    ('{"text": "a", "label": 1}\n{"text": "b", "label": NaN}\n', "line 2: target nan in column 'label' is not a finite "
     "number"),
    ('{"text": "a", "label": 1}\n{"text": "b", "label": -Infinity}\n', "line 2: target -inf in column 'label' is "
     "not a finite number"),
    ('{"text": "a", "label": 1}\n{"text": "b", "label": [1, 2]}\n', "line 2: target [1, 2]"),
    ('{"text": "a", "label": 1}\n{"text": "b"}\n', "line 2: no 'label' (every example needs a target"),
    ('{"text": "a", "label": 1}\n{"text": "b", "label": " "}\n', "line 2: empty target in column 'label'"),
])
def test_a_bad_regression_target_names_its_line(tmp_path, content, needle):
    path = tmp_path / "s.jsonl"
    path.write_text(content)
    msg = error_of("--task", "jsonl", "--train-file", str(path), "--regression")
    assert needle in msg


def test_regression_targets_that_never_vary_are_refused(tmp_path):
    path = write_csv(tmp_path / "s.csv", ["text", "label"], [(f"t{i}", "2.0") for i in range(20)])
    msg = error_of("--task", "csv", "--train-file", str(path), "--regression")
    assert msg == "the training data: every target is 2; a regression needs targets that vary\nhint: add examples " \
                  "with other targets, or drop --regression to learn classes"
    from ftcli_trainer.data import check_files

    with pytest.raises(DataError) as e:  # the launcher's pre-upload check says the same
        check_files(parse_args(["--task", "csv", "--train-file", str(path), "--regression"]), {"train_file": str(path)})
    assert "every target is 2" in str(e.value)


def test_stsb_targets_hints_do_not_name_a_regression_option_never_given(tmp_path):
    # --task stsb is a regression by itself: "drop --regression to learn classes" sent its user to drop an option they
    # had not given.
    bad = write_csv(tmp_path / "bad.csv", ["sentence1", "sentence2", "label"], [("a", "b", "x"), ("c", "d", "2")])
    assert error_of("--task", "stsb", "--train-file", str(bad)).endswith(
        "line 2: target 'x' in column 'label' is not a finite number\n"
        "hint: a regression needs a number in every row: fix the row (--task stsb is a regression)")
    same = write_csv(tmp_path / "same.csv", ["sentence1", "sentence2", "label"],
                     [(f"a{i}", "b", "2") for i in range(20)])
    assert error_of("--task", "stsb", "--train-file", str(same)) == (
        "the training data: every target is 2; a regression needs targets that vary\n"
        "hint: add examples with other targets (--task stsb is a regression)")


def test_an_eval_set_whose_targets_never_vary_is_said_before_training(tmp_path, caplog):
    # Pearson and Spearman are undefined on constant targets: the run reported "Pearson 0" for every model, silently.
    train = write_csv(tmp_path / "t.csv", ["text", "label"], [(f"t{i}", str(i % 5)) for i in range(20)])
    flat = write_csv(tmp_path / "e.csv", ["text", "label"], [(f"e{i}", "3.5") for i in range(6)])
    args = ["--task", "csv", "--train-file", str(train), "--eval-file", str(flat), "--regression"]
    with caplog.at_level("WARNING", logger="ftcli_trainer"):
        load(*args)
    (line,) = [r.getMessage() for r in caplog.records if "cannot score it" in r.getMessage()]
    assert line.startswith("every target in the eval set is 3.5: Pearson and Spearman cannot score it")
    from ftcli_trainer.data import check_files

    caplog.clear()
    with caplog.at_level("WARNING", logger="ftcli_trainer"):  # the launcher's pre-upload check says the same
        check_files(parse_args(args), {"train_file": str(train), "eval_file": str(flat)})
    assert [r.getMessage() for r in caplog.records if "cannot score it" in r.getMessage()] == [line]
    caplog.clear()
    varied = write_csv(tmp_path / "v.csv", ["text", "label"], [(f"e{i}", str(i)) for i in range(6)])
    with caplog.at_level("WARNING", logger="ftcli_trainer"):
        load(*args[:4], "--eval-file", str(varied), "--regression")
        load(*args[:4], "--regression", "--eval-fraction", "0.25")
    assert not [r for r in caplog.records if "cannot score it" in r.getMessage()]


# ----------------------------------------------------------------------------------------------
# A file in the other format, stray quotes, column typos, labels that differ by case


ROWS = [{"text": "good, really", "label": "pos"}, {"text": "bad", "label": "neg"}] * 3
CSV_TEXT = "text,label\ngood,pos\nbad,neg\ngreat,pos\nawful,neg\n"


@pytest.mark.parametrize("name", ["x.jsonl", "x.txt"])
def test_json_lines_under_task_csv_says_so(tmp_path, name):
    # it said "x.jsonl line 2: fewer fields than the header's 3" (or "more fields ...; quote text that contains commas")
    train = jsonl(tmp_path / name, ROWS)
    assert error_of("--task", "csv", "--train-file", str(train)) == (
        f"{train} looks like JSON Lines, not CSV\nhint: use --task jsonl (the train and eval files take the same "
        "format)")
    csv_train = tmp_path / "t.csv"
    csv_train.write_text(CSV_TEXT)
    assert error_of("--task", "csv", "--train-file", str(csv_train), "--eval-file", str(train)) == (
        f"{train} looks like JSON Lines, not CSV\nhint: use --task jsonl (the train and eval files take the same "
        "format)")


def test_json_lines_named_csv_under_a_named_task_says_to_rename_it(tmp_path):
    path = jsonl(tmp_path / "t.csv", ROWS)
    assert error_of("--task", "imdb", "--train-file", str(path)) == (
        f"{path} looks like JSON Lines, not CSV\nhint: name it .jsonl (without --task csv or --task jsonl, the file's "
        f"extension picks its format)")


def test_broken_json_lines_file_under_task_csv_says_json_lines(tmp_path):
    path = jsonl(tmp_path / "t.jsonl", ['{"text": "a", "label": ', *map(json.dumps, ROWS)])
    assert error_of("--task", "csv", "--train-file", str(path)) == (
        f"{path} looks like JSON Lines, not CSV\nhint: use --task jsonl (the train and eval files take the same "
        "format)")
    # under --task jsonl the broken line itself is the error
    assert error_of("--task", "jsonl", "--train-file", str(path)).startswith(f"{path} line 1 is not valid JSON")


def test_csv_content_in_a_jsonl_named_file_is_read_as_csv_under_task_csv(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(CSV_TEXT)
    assert load("--task", "csv", "--train-file", str(path), "--eval-file", str(path)).label_names == ["neg", "pos"]


@pytest.mark.parametrize("header", ["text,label", '"text","label"'])
def test_csv_under_task_jsonl_says_so(tmp_path, header):
    # it said "t.csv line 1 is not valid JSON (Expecting value); expected one object per line"
    path = tmp_path / "t.csv"
    path.write_text("\n" + CSV_TEXT.replace("text,label", header))
    assert error_of("--task", "jsonl", "--train-file", str(path)) == (
        f"{path} looks like CSV, not JSON Lines (line 2 is {header!r})\nhint: use --task csv (the train and eval files "
        f"take the same format)")
    good = jsonl(tmp_path / "t.jsonl", ROWS)
    assert error_of("--task", "jsonl", "--train-file", str(good), "--eval-file", str(path)) == (
        f"{path} looks like CSV, not JSON Lines (line 2 is {header!r})\nhint: use --task csv (the train and eval files "
        f"take the same format)")
    named = tmp_path / "n.jsonl"
    named.write_text(CSV_TEXT)
    assert error_of("--task", "imdb", "--train-file", str(named)) == (
        f"{named} looks like CSV, not JSON Lines (line 1 is 'text,label')\nhint: name it .csv (without --task csv or "
        f"--task jsonl, the file's extension picks its format)")


QUOTE_FIX = 'put a field that holds quotes in quotes, and double each quote inside it: "say ""hi"" here"'


@pytest.mark.parametrize("line", [2, 10])
def test_a_stray_quote_names_its_own_line_not_the_one_before(tmp_path, line):
    # csv.DictReader's line_num lags a record behind: a stray quote on line 2 was reported on line 1 (the header)
    good = [f"row {i},{i % 2}\n" for i in range(line - 2)]
    path = tmp_path / "q.csv"
    path.write_text("text,label\n" + "".join(good) + '"Great" film,1\nok,0\n')
    assert error_of("--task", "csv", "--train-file", str(path)) == (
        f"{path} is not valid CSV (line {line}: ',' expected after '\"')\nhint: {QUOTE_FIX}")
    path.write_text("text,label\n" + "".join(good) + '"never closed,1\nok,0\nfine,1\n')
    assert error_of("--task", "csv", "--train-file", str(path)) == (
        f"{path} is not valid CSV (line {line}: a quoted field opens here and is never closed)\nhint: {QUOTE_FIX}")
    path.write_text("text,label\n" + "".join(good) + '"stray,1\nok,0\nsay "hi" there,1\nz,0\n')
    assert error_of("--task", "csv", "--train-file", str(path)) == (
        f"{path} is not valid CSV (line {line}: a quoted field opens here and runs on to line {line + 2}, where "
        f"',' expected after '\"')\nhint: {QUOTE_FIX}")


def test_row_errors_after_blank_lines_and_multi_line_fields_name_the_right_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('text,label\n"two\nlines",1\n\nok,0,extra\n')
    assert error_of("--task", "csv", "--train-file", str(path)) == (
        f"{path} line 5: more fields than the header's 2\nhint: quote text that contains commas")
    path.write_text('text,label\n"two\nlines",1\n\n\nshort\n')
    assert error_of("--task", "csv", "--train-file", str(path)) == f"{path} line 6: fewer fields than the header's 2"


@pytest.mark.parametrize("header,args,needle", [
    (["text", "label"], ["--label-column", "lable"],
     "has no column 'lable' (columns: text, label)\nhint: did you mean 'label'? pass --label-column label"),
    (["text", "lable"], [], "has no column 'label' (columns: text, lable)\n"
                            "hint: did you mean 'lable'? pass --label-column lable"),
    (["txt", "label"], [], "has no column 'text' (columns: txt, label)\n"
                           "hint: did you mean 'txt'? pass --text-column txt"),
    (["sentence", "label"], [], "has no column 'text' (columns: sentence, label)\nhint: pass --text-column NAME"),
    # the column to pass, quoted as a shell reads it: unquoted, a name with a space named another column when copied
    (["the text", "label"], [], "has no column 'text' (columns: the text, label)\nhint: did you mean 'the text'? "
                                "pass --text-column 'the text'"),
    (["Text ", "label"], [], "has no column 'text' (columns: 'Text ', label)\n"
                             "hint: did you mean 'Text '? pass --text-column 'Text '"),
    (["text", "label "], [], "has no column 'label' (columns: text, 'label ')\n"
                             "hint: column names must not start or end with spaces: remove the spaces around the "
                             "commas in the header"),
    (["text", "toxic", "insult"], ["--label-columns", "toxic,insul"],
     "has no label column 'insul' (columns: text, toxic, insult)\nhint: did you mean 'insult'?"),
])
def test_column_typos_and_spaces_get_a_suggestion(tmp_path, header, args, needle):
    path = write_csv(tmp_path / "t.csv", header, [("a", 0, 1)[:len(header)], ("b", 1, 0)[:len(header)]] * 3)
    assert error_of("--task", "csv", "--train-file", str(path), *args) == f"{path} {needle}"


def test_a_column_that_another_role_takes_is_never_the_suggestion(tmp_path):
    # `--text-column sentimen` was answered "did you mean 'sentiment'? pass --text-column sentiment": the label
    # column; and an eval file without a training label column 'threat' got "did you mean 'text'?".
    path = write_csv(tmp_path / "t.csv", ["text", "sentiment"], [("a", "pos"), ("b", "neg")] * 3)
    assert error_of("--task", "csv", "--train-file", str(path), "--text-column", "sentimen", "--label-column",
                    "sentiment") == (
        f"{path} has no column 'sentimen' (columns: text, sentiment)\nhint: pass --text-column NAME")
    train = write_csv(tmp_path / "train.csv", ["text", "toxic", "insult", "threat"],
                      [("a", 1, 0, 1), ("b", 0, 1, 0)] * 3)
    ev = write_csv(tmp_path / "eval.csv", ["text", "toxic", "insult"], [("c", 1, 0), ("d", 0, 1)])
    assert error_of("--task", "csv", "--train-file", str(train), "--eval-file", str(ev), "--label-columns",
                    "toxic,insult,threat") == (
        f"{ev} has no column 'threat' (columns: text, toxic, insult)\nhint: every file needs the training data's label "
        "columns (toxic, insult, threat)")
    ev = write_csv(tmp_path / "eval2.csv", ["text", "toxic", "insult", "Threat"], [("c", 1, 0, 0), ("d", 0, 1, 1)])
    assert error_of("--task", "csv", "--train-file", str(train), "--eval-file", str(ev), "--label-columns",
                    "toxic,insult,threat") == (
        f"{ev} has no column 'threat' (columns: text, toxic, insult, Threat)\nhint: did you mean 'Threat'?")


def test_json_keys_with_spaces_say_so(tmp_path):
    path = jsonl(tmp_path / "t.jsonl", [{"text": "a", " label": "x"}, {"text": "b", " label": "y"}])
    assert error_of("--task", "jsonl", "--train-file", str(path)) == (
        f"{path} has no column 'label' (columns: text, ' label')\n"
        "hint: column names must not start or end with spaces: remove them from the keys")


def test_an_eval_label_that_differs_only_by_case_says_labels_are_case_sensitive(tmp_path):
    train = write_csv(tmp_path / "train.csv", ["text", "label"], [("a", "positive"), ("b", "negative")] * 3)
    ev = write_csv(tmp_path / "eval.csv", ["text", "label"], [("c", "negative"), ("d", "Positive")])
    msg = "line 3: label 'Positive' is not in the label set (negative, positive)"
    hint = "\nhint: labels are case-sensitive: write 'positive'"
    assert error_of("--task", "csv", "--train-file", str(train), "--eval-file", str(ev)) == f"{ev} {msg}{hint}"
    from ftcli_trainer.data import check_files

    with pytest.raises(DataError) as e:  # the launcher's pre-upload check says the same
        check_files(parse_args(["--task", "csv", "--train-file", str(train), "--eval-file", str(ev)]),
                    {"train_file": str(train), "eval_file": str(ev)})
    assert f"{e.value}\nhint: {e.value.hint}" == f"{ev} {msg}{hint}"
    # a label that is simply unknown keeps the old advice
    ev = write_csv(tmp_path / "eval2.csv", ["text", "label"], [("c", "neutral")])
    assert error_of("--task", "csv", "--train-file", str(train), "--eval-file", str(ev)) == (
        f"{ev} line 2: label 'neutral' is not in the label set (negative, positive)\nhint: fix the row or pass "
        f"--label-names with every label")


def test_a_list_label_that_differs_only_by_case_says_labels_are_case_sensitive(tmp_path):
    train = jsonl(tmp_path / "t.jsonl", [{"text": "a", "label": ["sports"]}, {"text": "b", "label": ["tech"]}] * 3)
    ev = jsonl(tmp_path / "e.jsonl", [{"text": "c", "label": ["tech"]}, {"text": "d", "label": ["Sports", "tech"]}])
    assert error_of("--task", "jsonl", "--train-file", str(train), "--eval-file", str(ev)) == (
        f"{ev} line 2: label 'Sports' is not in the label set (sports, tech)\nhint: labels are case-sensitive: "
        f"write 'sports'")


def test_a_spreadsheets_empty_unnamed_columns_are_left_out(tmp_path):
    # Excel and LibreOffice end every line with `,,` when cells beyond the data were ever formatted: the header
    # held two columns named '' and the file was refused as "has duplicate column names: " (no name shown)
    rows = [("good film", "pos", "", ""), ("bad film", "neg", "", "")] * 5
    path = write_csv(tmp_path / "t.csv", ["text", "label", "", ""], rows)
    data = load("--task", "csv", "--train-file", str(path), "--eval-file", str(path))
    assert data.train.texts[:2] == ["good film", "bad film"] and data.label_names == ["neg", "pos"]
    ml = write_csv(tmp_path / "ml.csv", ["", "text", "a", "b", ""], [(i, "x", i % 2, 1, "") for i in range(6)])
    data = load("--task", "csv", "--train-file", str(ml), "--label-columns", "*")  # pandas' index is no label
    assert data.label_names == ["a", "b"]
    held = write_csv(tmp_path / "held.csv", ["text", "label", "", ""], [("a", "pos", "1", ""), ("b", "neg", "", "2")])
    assert error_of("--task", "csv", "--train-file", str(held)) == (
        f"{held}: columns 3, 4 have no name in the header line but hold values\nhint: give each a name in the "
        "header line (or delete the columns)")
    blank = tmp_path / "blank.csv"
    blank.write_text(",,\n,,\n")
    assert error_of("--task", "csv", "--train-file", str(blank)) == (
        f"{blank}: its first line names no column\nhint: write a header row naming the columns (e.g. text,label), "
        "then one row per example")
    dupes = write_csv(tmp_path / "d.csv", ["text", "label", "text"], [("a", "pos", "b")])
    assert error_of("--task", "csv", "--train-file", str(dupes)) == f"{dupes} has duplicate column names: text"


@pytest.mark.parametrize("value,kind", [(["a", "good", "film"], "list"), ({"en": "a good film"}, "object")])
def test_a_jsonl_text_that_is_a_list_or_an_object_is_refused(tmp_path, value, kind):
    # It was trained on Python's repr of it ("['a', 'good', 'film']") without a word.
    path = jsonl(tmp_path / "t.jsonl", [{"text": "fine", "label": "pos"}, {"text": value, "label": "neg"}])
    assert error_of("--task", "jsonl", "--train-file", str(path)) == (
        f"{path} line 2: the text in column 'text' is a JSON {kind}, not a string\nhint: write each text as one "
        "string (join a list of tokens with spaces)")
    numbers = jsonl(tmp_path / "n.jsonl", [{"text": 12, "label": "pos"}, {"text": "fine", "label": "neg"}] * 3)
    assert load("--task", "jsonl", "--train-file", str(numbers), "--eval-file", str(numbers)).train.texts[0] == "12"


def test_multi_label_columns_that_are_all_zero_are_refused_like_empty_lists(tmp_path):
    # JSON lists that are all [] were refused ("nothing to learn"); 0/1 columns that are all 0 trained a model that
    # predicts no label, with F1 0, without a word.
    zeros = write_csv(tmp_path / "z.csv", ["text", "a", "b"], [("x", 0, 0), ("y", "0", "0.0")] * 4)
    assert error_of("--task", "csv", "--train-file", str(zeros), "--label-columns", "a,b") == (
        f"{zeros}: every label column (a, b) is 0 in every row; there is nothing to learn\nhint: check that "
        "--label-columns names the columns of the labels")
    some = write_csv(tmp_path / "s.csv", ["text", "a", "b"], [("x", 0, 0), ("y", 0, 1)] * 4)
    data = load("--task", "csv", "--train-file", str(some), "--eval-file", str(zeros), "--label-columns", "a,b")
    assert data.evals["eval"].labels.sum() == 0  # an eval set without positives is still an eval set


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_a_file_is_read_as_it_is_parsed_not_held_whole(tmp_path, suffix):
    # The reader held the whole file as bytes, then as text, then as a StringIO's buffer of 4 bytes a character
    # before the first row was parsed: `ftcli train --dry-run` on a 1 GB CSV peaked at 6.9 GB. 16 MB of lines that
    # are mostly spaces (json.loads skips them) keep 2,000 tiny rows: reading them must not hold the 16 MB.
    import tracemalloc

    from ftcli_trainer.data import read_rows

    pad = " " * 8000
    body = "".join(json.dumps({"text": f"t{i}", "label": ["neg", "pos"][i % 2]}) + pad + "\n" for i in range(2000))
    path = tmp_path / f"t{suffix}"
    path.write_bytes(gzip.compress(body.encode()) if suffix.endswith(".gz") else body.encode())
    tracemalloc.start()
    try:
        _, rows = read_rows(str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(rows) == 2000 and rows[-1] == {"text": "t1999", "label": "pos"} and rows[-1].line == 2000
    assert peak < 4 * 2**20, f"reading a {len(body) >> 20} MB file peaked at {peak >> 20} MB"


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_bad_utf8_far_into_a_file_names_its_line(tmp_path, suffix):
    # Read in blocks now: the line of a bad byte past the first block is still the one an editor shows.
    body = ("text,label\n" + "".join(f"row {i} caf\u00e9,{i % 2}\n" for i in range(5000))).encode()
    body += "row latin caf\u00e9,1\n".encode("latin-1") + b"last,0\n"
    path = tmp_path / f"t{suffix}"
    path.write_bytes(gzip.compress(body) if suffix.endswith(".gz") else body)
    msg = error_of("--task", "csv", "--train-file", str(path))
    assert msg == f"{path} is not UTF-8 (byte 0xe9 on line 5002)\nhint: re-save it as UTF-8"


def test_csv_rows_are_made_as_they_are_read_and_carry_no_per_row_dict(tmp_path):
    # A 2-million-row CSV (128 MB) took 1.7 GB to read: every record was kept as a list until the last one was read,
    # then copied into a row dict, and each row had a __dict__ of its own for its line number.
    import tracemalloc

    from ftcli_trainer.data import read_rows

    path = write_csv(tmp_path / "t.csv", ["text", "label"], [(f"text {i}", f"l{i % 7}") for i in range(20_000)])
    tracemalloc.start()
    try:
        _, rows = read_rows(str(path))
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(rows) == 20_000 and rows[-1] == {"text": "text 19999", "label": "l0"} and rows[-1].line == 20_001
    assert not hasattr(rows[0], "__dict__")
    assert peak - kept < kept // 20, f"read {kept >> 10} KB of rows with a peak of {peak >> 10} KB"


def test_the_trainer_says_when_it_reads_a_big_file(tmp_path, monkeypatch, caplog, gcs):
    # Reading a 1 GB --train-file took 20 s (inside Vertex, downloading it first) with nothing in the log before
    # the summary block: `ftcli local` and the job's log looked stuck.
    import logging

    from ftcli_trainer import data

    train = write_csv(tmp_path / "t.csv", ["text", "label"], [(f"good {i}", "pos") for i in range(30)] +
                      [(f"bad {i}", "neg") for i in range(30)])
    small = write_csv(tmp_path / "e.csv", ["text", "label"], [("fine", "pos"), ("awful", "neg")])
    gcs.create_bucket("data")
    gcs.write("data", "in/t.csv", train.read_bytes())
    monkeypatch.setattr(data, "SAY_READING_BYTES", train.stat().st_size)
    with caplog.at_level(logging.INFO, logger="ftcli_trainer"):
        load("--task", "csv", "--train-file", str(train), "--eval-file", str(small))
        load("--task", "csv", "--train-file", "gs://data/in/t.csv", "--eval-file", str(small))
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("reading ")]
    n = train.stat().st_size
    assert 100 < n < 1000  # (its size in bytes, not "0 MB")
    # (the small eval file: nothing said)
    assert said == [f"reading {train} ({n} bytes)", f"reading gs://data/in/t.csv ({n} bytes)"]


def test_a_files_first_bytes_give_its_columns_as_the_job_reads_them(tmp_path):
    # The launcher checks a big gs:// file's header from its first bytes: the same columns and the same lines as
    # reading the whole file, and nothing refused for where the bytes happen to stop.
    from ftcli_trainer.data import head_columns, read_rows

    rows = [(f"caf\u00e9 number {i}", "pos" if i % 2 else "neg") for i in range(200)]
    whole = write_csv(tmp_path / "t.csv", ["text", "lbl"], rows).read_bytes()
    cut = whole.index("\u00e9".encode()) + 1  # inside the two bytes of an é
    assert head_columns(whole[:cut], "t.csv", "gs://b/t.csv", "csv") == (["text", "lbl"], True)
    assert read_rows(str(tmp_path / "t.csv"))[0] == ["text", "lbl"]
    packed = gzip.compress(whole)
    assert head_columns(packed[:len(packed) // 2], "t.csv.gz", "gs://b/t.csv.gz", "csv") == (["text", "lbl"], True)
    assert head_columns(b"text,la", "t.csv", "t.csv", "csv") is None  # no whole line yet
    assert head_columns(b'"te\nxt",label\n"a', "t.csv", "t.csv", "csv") == (["te\nxt", "label"], True)
    assert head_columns(b'"text\n', "t.csv", "t.csv", "csv") is None  # a quoted name runs past the head
    assert head_columns(b'[{"text": "a",\n', "t.jsonl", "t.jsonl", None) is None  # a JSON array: the whole file says
    assert head_columns(b'\n{"text": "a", "y": 1}\n{"te', "t.jsonl", "t.jsonl", None) == (["text", "y"], False)
    with pytest.raises(DataError, match=r"^t\.csv is not UTF-8 \(byte 0xe9 on line 3\)$") as e:
        head_columns(b"text,label\na,b\ncaf\xe9,x\nmore", "t.csv", "t.csv", "csv")
    assert e.value.hint == "re-save it as UTF-8"
    with pytest.raises(DataError, match=r"^t\.csv\.gz is not a valid gzip file \("):
        head_columns(packed[:3] + whole[:100], "t.csv.gz", "t.csv.gz", "csv")
    with pytest.raises(DataError, match=r"looks tab-separated"):
        head_columns(b"text\tlabel\na\tb\n", "t.csv", "t.csv", "csv")
    with pytest.raises(DataError, match=r"^t\.csv looks like JSON Lines, not CSV"):
        head_columns(b'{"text": "a"}\n', "t.csv", "t.csv", "csv")


def test_a_head_only_file_is_checked_for_its_columns_and_the_label_columns_of_the_training_file(tmp_path):
    from ftcli_trainer.data import check_files

    train = write_csv(tmp_path / "t.csv", ["text", "toxic", "insult"], [("a", 1, 0), ("b", 0, 1)] * 5)
    cfg = parse_args(["--task", "csv", "--train-file", "gs://b/t.csv", "--eval-file", "gs://b/e.csv",
                      "--label-columns", "*"])
    head = b"text,toxic,other\na,1,0\n"
    with pytest.raises(DataError, match=r"^gs://b/e\.csv has no column 'insult' \(columns: text, toxic, other\)$") as e:
        check_files(cfg, {"train_file": str(train)}, {"eval_file": ("gs://b/e.csv", head)},
                    shown={"train_file": "gs://b/t.csv", "eval_file": "gs://b/e.csv"})
    assert e.value.hint == "every file needs the training data's label columns (toxic, insult)"
    # both heads: the training file's columns resolve the glob
    with pytest.raises(DataError, match=r"^gs://b/e\.csv has no column 'insult'"):
        check_files(cfg, {}, {"train_file": ("gs://b/t.csv", train.read_bytes()), "eval_file": ("gs://b/e.csv", head)})
    check_files(cfg, {}, {"train_file": ("gs://b/t.csv", train.read_bytes()),
                          "eval_file": ("gs://b/e.csv", b"text,insult,toxic\n")})


def test_a_gs_file_that_fails_to_download_with_no_message_is_one_line(tmp_path, monkeypatch):
    # A download that failed with an exception saying nothing (TimeoutError(), as a socket timeout raises it) ended
    # the run in an IndexError traceback from the line meant to quote its message.
    from ftcli_trainer import storage

    def times_out(src, dest):
        raise TimeoutError()

    monkeypatch.setattr(storage, "download_file", times_out)
    small = write_csv(tmp_path / "e.csv", ["text", "label"], [("fine", "pos"), ("awful", "neg")])
    msg = error_of("--task", "csv", "--train-file", "gs://data/in/t.csv", "--eval-file", str(small))
    assert msg == "cannot read gs://data/in/t.csv: TimeoutError"


@pytest.mark.parametrize(("name", "packed"), [("t.csv", True), ("t.jsonl", True), ("t.tsv", True),
                                             ("t.csv.gz", False), ("t.jsonl.gz", False), ("t.parquet", False)])
def test_a_file_is_decompressed_by_what_its_bytes_are_not_by_its_name(tmp_path, name, packed):
    # A gzip file named without .gz was "not UTF-8 (byte 0x8b on line 1); re-save it as UTF-8", and a .gz that holds
    # plain text (a browser decompressed the download and kept its name; Cloud Storage serves an object stored
    # gzip-compressed with Content-Encoding: gzip decompressed) "not a valid gzip file (Not a gzipped file (b'te'))":
    # both were refused, by the launcher and by the job, though what they are is unambiguous. They are read as what
    # they are, in the format their name says (under a .gz). A .parquet that holds CSV text is read as that CSV.
    from ftcli_trainer.data import head_columns, read_rows

    rows = [{"text": f"film {i}", "label": "pos" if i % 2 else "neg"} for i in range(40)]
    if ".jsonl" in name:
        text = "".join(json.dumps(r) + "\n" for r in rows)
    else:
        sep = "\t" if ".tsv" in name else ","
        text = f"text{sep}label\n" + "".join(f"{r['text']}{sep}{r['label']}\n" for r in rows)
    path = tmp_path / name
    path.write_bytes(gzip.compress(text.encode()) if packed else text.encode())
    assert read_rows(str(path)) == (["text", "label"], rows)
    assert head_columns(path.read_bytes(), name, f"gs://b/{name}", None) == (["text", "label"], ".jsonl" not in name)
    data = load("--task", "csv" if ".jsonl" not in name else "jsonl", "--train-file", str(path))
    assert sorted(data.train.texts + data.evals["eval"].texts) == sorted(r["text"] for r in rows)


@pytest.mark.parametrize("name", ["t.csv.gz", "t.csv"])
def test_a_file_compressed_twice_is_one_line(tmp_path, name):
    # (its decompressed bytes were "not UTF-8 (byte 0x8b on line 1)")
    from ftcli_trainer.data import head_columns

    path = tmp_path / name
    path.write_bytes(gzip.compress(gzip.compress(b"text,label\na,pos\nb,neg\n")))
    said = "is gzip-compressed twice (a gzip file inside a gzip file)\nhint: decompress it once, and give what that " \
           "leaves"
    assert error_of("--task", "csv", "--train-file", str(path)) == f"{path} {said}"
    with pytest.raises(DataError) as e:
        head_columns(path.read_bytes(), name, f"gs://b/{name}", "csv")
    assert with_hint(e.value) == f"gs://b/{name} {said}"


@pytest.mark.parametrize(("name", "head", "said"), [
    ("t.parquet", b"PAR1\x15\x04\x15\x9a\x01",
     "is a Parquet file, not CSV or JSON Lines\nhint: convert it: pandas.read_parquet("),
    ("t.feather", b"ARROW1\x00\x00\xff\xff", "is an Arrow/Feather file, not CSV or JSON Lines\nhint: convert it: "),
    ("t.xlsx", b"PK\x03\x04\x14\x00\x06\x00\x08\x00\x00\x00!\x00\x9b", "is a zip archive (an Excel .xlsx is one)"),
    ("t.xls", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1\x00\x00\x93", "is an Excel .xls workbook, not CSV or JSON Lines"),
    ("t.csv", "text\tlabel\na\tpos\n".encode("utf-16"), "is UTF-16 text, not UTF-8\nhint: re-save it as UTF-8"),
])
def test_a_file_that_is_no_text_says_what_it_is(tmp_path, name, head, said):
    # A Parquet file (or a workbook) given as --train-file was "not UTF-8 (byte 0x9a on line 1); re-save it as UTF-8":
    # no way out for a file that is not text at all.
    from ftcli_trainer.data import head_columns

    path = tmp_path / name
    path.write_bytes(head + bytes(range(256)) * 4)
    for task in ("csv", "jsonl"):
        msg = error_of("--task", task, "--train-file", str(path))
        assert msg.startswith(f"{path} {said}") and "byte 0x" not in msg
    with pytest.raises(DataError) as e:
        head_columns(path.read_bytes(), name, f"gs://b/{name}", "csv")
    assert with_hint(e.value).startswith(f"gs://b/{name} {said}")


TEXT = "text,label\na fine film,pos\ndull,neg\ngreat,pos\nbad,neg\n"


@pytest.mark.parametrize(("name", "content", "said"), [
    # a small uncompressed Parquet file's bytes can all be ASCII: it was read as CSV text ("no data rows")
    ("t.csv", b"PAR1\x15\x00\x15\x1c\x15\x1c,\x00\x00\x0e\x1c\x0b\x00\x00\x00a fine film\x04\x00\x00\x00dull\n",
     "is a Parquet file, not CSV or JSON Lines\nhint: convert it: pandas.read_parquet(PATH).to_csv('train.csv', "
     "index=False)"),
    ("t.jsonl", b"PK\x03\x04\x14\x00\x06\x00\x08\x00\x00\x00!\x00[Content_Types].xml\n",
     "is a zip archive (an Excel .xlsx is one), not CSV or JSON Lines\nhint: convert it: save the sheet as 'CSV UTF-8' "
     "(pandas: read_excel(PATH).to_csv('train.csv', index=False)), or unzip it and give the CSV inside"),
    # UTF-16 without a byte order mark: "line 6: fewer fields than the header's 2", "line 1 is not valid JSON"
    ("t.csv", TEXT.encode("utf-16-le"), "is UTF-16 text (with no byte order mark), not UTF-8\nhint: re-save it as "
     "UTF-8 (in Excel: Save As 'CSV UTF-8')"),
    ("t.jsonl", '{"text": "dull", "label": "neg"}\n'.encode("utf-16-be"), "is UTF-16 text (with no byte order "
     "mark), not UTF-8\nhint: re-save it as UTF-8 (in an editor: save with the encoding UTF-8; or `iconv -f "
     "UTF-16BE -t UTF-8 FILE > OUT`)"),
    ("t.csv.gz", gzip.compress(b"\x93NUMPY\x01\x00v\x00{'descr': '<f4'}\n", mtime=0), "is not text: its first line "
     "holds the control byte 0x01 (a binary file?)\nhint: give a CSV or JSON Lines file, UTF-8 text"),
], ids=["parquet", "zip", "utf16-le", "utf16-be", "binary-gzipped"])
def test_a_file_that_is_no_text_but_decodes_as_utf8_says_what_it_is(tmp_path, name, content, said):
    # Files that are not text, or not UTF-8, were told by the first byte that is no UTF-8; where there was none, they
    # were read as text, and said something about their rows. Their first line's control bytes tell them now.
    from ftcli_trainer.data import head_columns, read_rows

    path = tmp_path / name
    path.write_bytes(content)
    said = said.replace("PATH", repr(str(path))).replace("FILE", str(path))
    said = said.replace("OUT", str(tmp_path / "t-utf8.jsonl"))
    for task in ("csv", "jsonl"):
        assert error_of("--task", task, "--train-file", str(path)) == f"{path} {said}"
    with pytest.raises(DataError) as e:
        read_rows(str(path), shown="--file t")
    assert with_hint(e.value) == f"--file t {said}"  # (the code that converts it names the file, not how it was shown)
    with pytest.raises(DataError) as e:
        head_columns(path.read_bytes(), str(path), f"gs://b/{name}", None)
    assert with_hint(e.value) == f"gs://b/{name} {said}"


@pytest.mark.parametrize(("name", "fmt", "codec", "fix"), [
    ("t.csv", None, "utf-16", "in Excel: Save As 'CSV UTF-8'"),
    ("t.tsv", None, "utf-16", "in Excel: Save As 'CSV UTF-8', and give that .csv"),  # Excel's "Unicode Text"
    ("t.jsonl", None, "utf-16", "in an editor: save with the encoding UTF-8; or `iconv -f UTF-16 -t UTF-8 FILE > "
     "DIR/t-utf8.jsonl`"),
    ("t.jsonl", "csv", "utf-16", "in an editor: save with the encoding UTF-8; or `iconv -f UTF-16 -t UTF-8 FILE > "
     "DIR/t-utf8.jsonl`"),  # (--task csv: the name says what the file is)
    ("t.json", None, "utf-16-le", "in an editor: save with the encoding UTF-8; or `iconv -f UTF-16LE -t UTF-8 FILE > "
     "DIR/t-utf8.json`"),
    ("t.txt", "jsonl", "utf-16", "in an editor: save with the encoding UTF-8; or `iconv -f UTF-16 -t UTF-8 FILE > "
     "DIR/t-utf8.txt`"),  # (no name says which: the format it is read as)
    ("t.txt", None, "utf-16", "in Excel: Save As 'CSV UTF-8'"),
    ("t.jsonl.gz", None, "utf-16", "in an editor: save with the encoding UTF-8; or with iconv -f UTF-16 -t UTF-8"),
], ids=["csv", "tsv", "jsonl", "jsonl-as-csv", "json-no-mark", "txt-as-jsonl", "txt", "jsonl-gzipped"])
def test_utf16_text_is_told_how_to_resave_it_for_its_kind(tmp_path, name, fmt, codec, fix):
    # A .jsonl in UTF-16 was told "in Excel: Save As 'CSV UTF-8'": no spreadsheet writes JSON Lines.
    from ftcli_trainer.data import head_columns, read_rows

    path = tmp_path / name
    text = '{"text": "dull", "label": "neg"}\n' if "json" in name or fmt else "text\tlabel\ndull\tneg\n"
    content = (text * 3).encode(codec)  # ("utf-16" writes a byte order mark; "utf-16-le" none)
    path.write_bytes(gzip.compress(content, mtime=0) if name.endswith(".gz") else content)
    mark = "" if codec == "utf-16" else " (with no byte order mark)"

    def said(shown: str, fix: str) -> str:
        return f"{shown} is UTF-16 text{mark}, not UTF-8\nhint: re-save it as UTF-8 ({fix})"

    local = said(str(path), fix.replace("FILE", str(path)).replace("DIR", str(tmp_path)))
    with pytest.raises(DataError) as e:
        read_rows(str(path), fmt=fmt)
    assert with_hint(e.value) == local
    if not name.endswith(".gz"):
        with pytest.raises(DataError) as e:
            head_columns(content, str(path), str(path), fmt)
        assert with_hint(e.value) == local
    # in a bucket: how to convert it, with no local path to run it on
    iconv = {"utf-16": "UTF-16", "utf-16-le": "UTF-16LE"}[codec]
    with pytest.raises(DataError) as e:
        head_columns(content, f"gs://b/{name}", f"gs://b/{name}", fmt)
    assert with_hint(e.value) == said(f"gs://b/{name}", fix if "Excel" in fix else
                                f"in an editor: save with the encoding UTF-8; or with iconv -f {iconv} -t UTF-8")


def test_a_csv_whose_first_column_is_named_par1_is_read_as_csv(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("PAR1,text,label\nx,a fine film,pos\ny,dull,neg\n")
    from ftcli_trainer.data import read_rows

    assert read_rows(str(path)) == (["PAR1", "text", "label"], [{"PAR1": "x", "text": "a fine film", "label": "pos"},
                                                                {"PAR1": "y", "text": "dull", "label": "neg"}])


@pytest.mark.parametrize("content", ["", "\n\n  \n"], ids=["empty", "blank-lines"])
def test_an_empty_json_lines_file_says_what_it_should_hold(tmp_path, content):
    # It was "has no data rows", where an empty CSV says what it should hold
    path = tmp_path / "t.jsonl"
    path.write_text(content)
    assert error_of("--task", "jsonl", "--train-file", str(path)) == (
        f"{path} is empty\nhint: write one JSON object per line, one per example (e.g. "
        '{"text": "a fine film", "label": "pos"})')


@pytest.mark.parametrize("task", ["csv", "imdb"])
def test_a_json_array_named_csv_says_it_is_json(tmp_path, task):
    # It was "has duplicate column names:  "label": "pos"}"
    path = tmp_path / "t.csv"
    path.write_text(json.dumps([{"text": f"t{i}", "label": ["neg", "pos"][i % 2]} for i in range(6)], indent=2))
    fix = "use --task jsonl (the train and eval files take the same format)" if task == "csv" else \
        "name it .jsonl (without --task csv or --task jsonl, the file's extension picks its format)"
    assert error_of("--task", task, "--train-file", str(path)) == (
        f"{path} is one JSON array, not CSV\nhint: write it as JSON Lines, one object per line (pandas: "
        f"df.to_json(path, orient='records', lines=True)), and {fix}")


def test_a_label_column_empty_in_every_row_is_said_once_for_the_column(tmp_path):
    # A label column left empty (or the wrong column) was "line 2: empty label in column 'label'; fill it in or remove
    # the row", as if one row were wrong.
    path = write_csv(tmp_path / "t.csv", ["text", "label", "stars"], [("a", "", "5"), ("b", "nan", "1")] * 3)
    assert error_of("--task", "csv", "--train-file", str(path)) == (
        f"{path}: column 'label' is empty in all 6 rows\nhint: pass --label-column with the column that holds the "
        "labels (columns: text, label, stars)")
    assert error_of("--task", "csv", "--train-file", str(path), "--regression") == (
        f"{path}: column 'label' is empty in all 6 rows\nhint: pass --label-column with the column that holds the "
        "targets (columns: text, label, stars)")
    path = jsonl(tmp_path / "t.jsonl", [{"text": "a", "label": None}, {"text": "b", "label": float("nan")}])
    assert error_of("--task", "jsonl", "--train-file", str(path)) == (
        f"{path}: column 'label' is empty in all 2 rows\nhint: fill in the labels")
    # one row empty among labelled ones is still that row's line
    path = write_csv(tmp_path / "u.csv", ["text", "label"], [("a", "pos"), ("b", ""), ("c", "neg")])
    assert error_of("--task", "csv", "--train-file", str(path)) == (
        f"{path} line 3: empty label in column 'label'\nhint: fill it in, or remove the row")


def test_a_tsv_file_is_read_with_tabs(tmp_path):
    # GLUE's files and a spreadsheet's "Tab delimited" export are .tsv: they were refused ("looks tab-separated ...;
    # save it with commas, or as JSON Lines"). A .tsv (.tsv.gz) is read with tabs, quoted as pandas writes it.
    import csv

    import pandas as pd

    from ftcli_trainer.data import head_columns

    rows = [("a\tgood, \"fine\"\nfilm", "positive"), ("bad", "negative"), ("ok, I guess", "positive"),
            ("dull", "negative")] * 3
    path = tmp_path / "t.tsv"
    pd.DataFrame(rows, columns=["text", "label"]).to_csv(path, sep="\t", index=False)
    (tmp_path / "t.tsv.gz").write_bytes(gzip.compress(path.read_bytes()))
    for name in ("t.tsv", "t.tsv.gz"):
        for task in ("csv", "sst2"):  # --task csv, and a named task whose files' format the extension picks
            data = load("--task", task, "--train-file", str(tmp_path / name), "--eval-file", str(path),
                        "--text-column", "text")
            got = sorted(zip(data.train.texts, (data.label_names[i] for i in data.train.labels), strict=True))
            assert got == sorted(rows)
    assert head_columns(path.read_bytes()[:20], "t.tsv", "gs://b/t.tsv", "csv") == (["text", "label"], True)
    # a .tsv whose lines hold commas, not tabs: the other way round
    comma = tmp_path / "c.tsv"
    with open(comma, "w", newline="") as f:
        csv.writer(f).writerows([("text", "label"), ("a", "pos"), ("b", "neg")])
    assert error_of("--task", "csv", "--train-file", str(comma)) == (
        f"{comma} looks comma-separated (its header is one column, 'text,label'), and ftcli reads a .tsv as "
        "tab-separated\nhint: name it .csv, or save it with tabs")
    # and a .csv whose lines hold tabs says to name it .tsv
    tabs = tmp_path / "t.csv"
    tabs.write_bytes(path.read_bytes())
    assert error_of("--task", "csv", "--train-file", str(tabs)) == (
        f"{tabs} looks tab-separated (its header is one column, 'text\\tlabel'), and ftcli reads comma-separated CSV"
        "\nhint: name it .tsv (a .tsv file's fields are separated by tabs), or save it with commas")
    too_many = tmp_path / "m.tsv"
    too_many.write_text("text\tlabel\na\tpos\tx\n")
    assert error_of("--task", "csv", "--train-file", str(too_many)) == (
        f"{too_many} line 2: more fields than the header's 2\nhint: quote text that contains tabs")


def test_a_folder_given_as_a_data_file_names_the_files_in_it(tmp_path):
    # "data file d does not exist (it is a folder)": it exists, and the files to give were not named.
    folder = tmp_path / "sst2"
    folder.mkdir()
    assert error_of("--task", "csv", "--train-file", str(folder)) == (
        f"data file {folder} is a folder, and holds no .csv, .tsv or .jsonl file\nhint: give a data file, CSV or JSON "
        "Lines")
    for name in ("validation.csv", "train.csv", "notes.txt", ".hidden.csv", "extra.jsonl.gz"):
        (folder / name).write_text("text,label\n")
    assert error_of("--task", "csv", "--train-file", str(folder)) == (
        f"data file {folder} is a folder (data files in it: extra.jsonl.gz, train.csv, validation.csv)\n"
        f"hint: give one file in it, e.g. {folder / 'train.csv'}")
    assert error_of("--task", "csv", "--train-file", str(tmp_path / "nope.csv")) == (
        f"data file {tmp_path / 'nope.csv'} does not exist")


def test_an_eval_file_that_is_training_data_is_said(tmp_path, caplog):
    # --eval-file given the training file (or an overlapping split) ran silently, and its scores were on trained text.
    from ftcli_trainer.config import parse_args
    from ftcli_trainer.data import check_files

    rows = [(f"text {i}", "pos" if i % 2 else "neg") for i in range(40)]
    train = write_csv(tmp_path / "train.csv", ["text", "label"], rows)
    other = write_csv(tmp_path / "eval.csv", ["text", "label"], rows[:3] + [(f"new {i}", "neg") for i in range(37)])
    pairs = write_csv(tmp_path / "pairs.csv", ["text", "hyp", "label"], [(t, "same", lab) for t, lab in rows])
    flipped = write_csv(tmp_path / "pairs2.csv", ["text", "hyp", "label"], [(t, "other", lab) for t, lab in rows])

    def said(*argv) -> list[str]:
        caplog.clear()
        with caplog.at_level("WARNING", logger="ftcli_trainer"):
            load("--task", "csv", *argv)
        return [r.getMessage() for r in caplog.records if "also in the training data" in r.getMessage()]

    assert said("--train-file", str(train), "--eval-file", str(train)) == [
        "40 of 40 eval examples (100%) are also in the training data: their scores are on text it trained on, and "
        "overstate the model; give an --eval-file of other examples, or none (a share of the training data is then "
        "held out)"]
    assert said("--train-file", str(train), "--eval-file", str(other)) == []  # 3 of 40: real splits share a few
    assert said("--train-file", str(train)) == []  # the held-out share
    # a pair is the same example only with the same second text
    assert len(said("--train-file", str(pairs), "--eval-file", str(pairs), "--text-pair-column", "hyp")) == 1
    assert said("--train-file", str(pairs), "--eval-file", str(flipped), "--text-pair-column", "hyp") == []
    # and the launcher says it before anything is uploaded
    caplog.clear()
    with caplog.at_level("WARNING", logger="ftcli_trainer"):
        check_files(parse_args(["--task", "csv", "--train-file", str(train), "--eval-file", str(train)]),
                    {"train_file": str(train), "eval_file": str(train)})
    assert any("40 of 40 eval examples (100%)" in r.getMessage() for r in caplog.records)


def test_rows_missing_a_text_or_a_label_are_counted_not_found_one_run_at_a_time(tmp_path):
    # Only the first empty text (or label) was named: a file with many of them took a run for each.
    rows = [("a", "pos"), ("", "neg"), ("c", "pos"), (" ", "neg"), ("e", ""), ("", "pos"), ("g", "neg"), ("", "pos"),
            ("", "neg"), ("j", "pos")]
    path = write_csv(tmp_path / "t.csv", ["text", "label"], rows)
    assert error_of("--task", "csv", "--train-file", str(path)) == (
        f"{path} line 3: empty text in column 'text' (so are 4 more rows: line 5, line 7, line 9, ...)\n"
        "hint: fill them in, or remove those rows")
    path = write_csv(tmp_path / "u.csv", ["text", "label"], [(t.strip() or "x", lab) for t, lab in rows[:5]] +
                     [("y", "nan"), ("z", "")])
    assert error_of("--task", "csv", "--train-file", str(path)) == (
        f"{path} line 6: empty label in column 'label' (so are 2 more rows: line 7, line 8)\n"
        "hint: fill them in, or remove those rows")
    pairs = write_csv(tmp_path / "p.csv", ["text", "hyp", "label"],
                      [("a", "", "pos"), ("b", "", "neg"), ("c", "x", "pos")])
    assert error_of("--task", "csv", "--train-file", str(pairs), "--text-pair-column", "hyp") == (
        f"{pairs} line 2: empty text in column 'hyp' (so is 1 more row: line 3)\n"
        "hint: fill them in, or remove those rows")


def test_a_score_column_without_regression_is_said(tmp_path, caplog):
    # A column of scores (0.31, 2.75, ...) given as the label without --regression trained hundreds of one-row
    # classes, and the only warning was that each had too few examples.
    scores = write_csv(tmp_path / "s.csv", ["text", "score"], [(f"t {i}", f"{i * 0.37:.2f}") for i in range(30)])
    stars = write_csv(tmp_path / "r.csv", ["text", "stars"], [(f"t {i}", str(1 + i % 12)) for i in range(60)])

    def said(path, col) -> list[str]:
        caplog.clear()
        with caplog.at_level("WARNING", logger="ftcli_trainer"):
            load("--task", "csv", "--train-file", str(path), "--label-column", col)
        return [r.getMessage() for r in caplog.records if "--regression" in r.getMessage()]

    assert said(scores, "score") == [
        "the 30 labels are numbers that are not all whole (0, 0.37, 0.74, ...): each value is learned as a class of "
        "its own; to learn a number, pass --regression"]
    assert said(stars, "stars") == []  # whole numbers: star ratings are classes as well as numbers


def test_a_tsv_without_quoting_as_glue_writes_it(tmp_path):
    # GLUE's .tsv files quote nothing: MNLI's `"Hi" is a greeting.` opened a CSV quote that never closed, and the file
    # was "not valid CSV". A .tsv that CSV's quoting rules cannot read is read with no quoting (pandas' QUOTE_NONE).
    rows = [("He said hi.", '"Hi" is a greeting.', "entailment"), ('"No," she said', "She agreed.", "contradiction"),
            ("A cat sat.", "An animal sat.", "entailment"), ("Rain fell.", 'It was "dry".', "contradiction")] * 3
    path = tmp_path / "dev.tsv"
    path.write_text("premise\thypothesis\tlabel\n" + "".join("\t".join(r) + "\n" for r in rows))
    data = load("--task", "csv", "--train-file", str(path), "--eval-file", str(path), "--text-column", "premise",
                "--text-pair-column", "hypothesis")
    assert sorted(zip(data.train.texts, data.train.pairs, strict=True)) == sorted((p, h) for p, h, _ in rows)
    # a .csv is not read so: its broken quote is still the one line that says where
    bad = tmp_path / "dev.csv"
    bad.write_text("text,label\n\"Hi\" is a greeting.,pos\n")
    assert "is not valid CSV (line 2: " in error_of("--task", "csv", "--train-file", str(bad))
