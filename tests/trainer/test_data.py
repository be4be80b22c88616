import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from ftcli_trainer.data import Encoded, bundled_sample_available, collate, plan_batches
from tests.conftest import write_csv
from tests.trainer.helpers import error_of, load


def test_csv_single_label_names_inferred_and_eval_held_out(tmp_path):
    rows = [(f"text {i}", ["neg", "pos"][i % 2]) for i in range(50)]
    path = write_csv(tmp_path / "t.csv", ["review", "y"], rows)
    data = load("--task", "csv", "--train-file", str(path), "--text-column", "review", "--label-column", "y")
    assert data.label_names == ["neg", "pos"]
    assert len(data.train) == 45 and len(data.evals["eval"]) == 5
    assert not set(data.train.texts) & set(data.evals["eval"].texts)
    assert [data.label_names[i] for i in data.train.labels[:2]] == [
        dict(rows)[data.train.texts[0]], dict(rows)[data.train.texts[1]]]


def test_integer_labels_and_label_names(tmp_path):
    path = write_csv(tmp_path / "t.csv", ["text", "label"], [(f"t{i}", i % 3) for i in range(30)])
    data = load("--task", "csv", "--train-file", str(path), "--label-names", "neg,neu,pos")
    assert data.label_names == ["neg", "neu", "pos"]
    assert sorted(set(data.train.labels.tolist())) == [0, 1, 2]


def test_jsonl_with_text_pairs(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(f'{{"p": "premise {i}", "h": "hyp {i}", "label": "{"ab"[i % 2]}"}}' for i in range(20)))
    data = load("--task", "jsonl", "--train-file", str(path), "--text-column", "p", "--text-pair-column", "h")
    assert data.train.pairs is not None and data.train.pairs[0].startswith("hyp")


def test_gzip_csv(tmp_path):
    path = tmp_path / "t.csv.gz"
    with gzip.open(path, "wt", newline="") as f:
        f.write("text,label\n" + "".join(f"row {i},{i % 2}\n" for i in range(20)))
    assert len(load("--task", "csv", "--train-file", str(path)).train) == 18


def test_multi_label_columns_by_glob(tmp_path):
    rows = [(i, f"comment {i}", i % 2, (i // 2) % 2, 0) for i in range(40)]
    path = write_csv(tmp_path / "m.csv", ["id", "text", "toxic", "insult", "threat"], rows)
    data = load("--task", "csv", "--train-file", str(path), "--label-columns", "*")
    assert data.multi_label and data.label_names == ["toxic", "insult", "threat"]
    assert data.train.labels.shape == (36, 3) and data.train.labels.dtype == np.float32


def test_multi_label_columns_named_with_glob_characters(tmp_path):
    # 'toxic[1]' was read as a glob only (matching a column 'toxic1'): a column's own name was refused
    rows = [(f"comment {i}", i % 2, (i // 2) % 2, 1 - i % 2) for i in range(40)]
    path = write_csv(tmp_path / "m.csv", ["text", "toxic[1]", "spam?", "spamX"], rows)
    data = load("--task", "csv", "--train-file", str(path), "--label-columns", "toxic[1],spam?")
    assert data.label_names == ["toxic[1]", "spam?"]
    globbed = load("--task", "csv", "--train-file", str(path), "--label-columns", "spam*")
    assert globbed.label_names == ["spam?", "spamX"]


def test_multi_label_columns_with_a_comma_in_a_json_list(tmp_path):
    # comma-separated only, 'toxic, severe' was split in two and could not be named at all
    rows = [(f"comment {i}", i % 2, (i // 2) % 2) for i in range(40)]
    path = write_csv(tmp_path / "m.csv", ["text", "toxic, severe", "insult"], rows)
    data = load("--task", "csv", "--train-file", str(path), "--label-columns", '["toxic, severe", "insult"]')
    assert data.label_names == ["toxic, severe", "insult"]
    assert data.train.labels.shape == (36, 2)
    assert load("--task", "csv", "--train-file", str(path), "--label-columns", "insult").label_names == ["insult"]


@pytest.mark.parametrize("content,needle", [
    ("text,label\n\"unclosed,1\n", "is not valid CSV"),
    ("text,label\nfine,1\n,0\n", "line 3: empty text in column 'text'"),
    ("text,label\nfine,1\nok,1,extra\n", "more fields than the header"),
    ("sentence,label\nfine,1\n", "has no column 'text' (columns: sentence, label)\nhint: pass --text-column NAME"),
    # the hints pointed the wrong way: "no column 'text' (columns: text;label)", "quote text that contains commas"
    ("text;label\nfine;1\n", "looks semicolon-separated (its header is one column, 'text;label'), and ftcli reads "
     "comma-separated CSV\nhint: save it with commas, or as JSON Lines"),
    ("text\tlabel\nfine\t1\n", "looks tab-separated"),
    ("text, label\nfine,1\n", "has no column 'label' (columns: text, ' label')\nhint: column names must not start or "
     "end with spaces: remove the spaces around the commas in the header"),
    ("", "is empty"),
    ("text,label\n", "has only its header line (columns: text, label) and no data rows\nhint: add one row per "
     "example below the header line, one field per column"),
])
def test_bad_csv_gives_one_line(tmp_path, content, needle):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    assert needle in error_of("--task", "csv", "--train-file", str(path))


def test_non_utf8_file(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes("text,label\ncafé crème,1\n".encode("latin-1"))
    msg = error_of("--task", "csv", "--train-file", str(path))
    assert "is not UTF-8" in msg and "line 2" in msg


def test_label_not_in_label_set(tmp_path):
    train = write_csv(tmp_path / "train.csv", ["text", "label"], [("a", "pos"), ("b", "neg")] * 5)
    ev = write_csv(tmp_path / "eval.csv", ["text", "label"], [("c", "pos"), ("d", "meh")])
    msg = error_of("--task", "csv", "--train-file", str(train), "--eval-file", str(ev))
    assert "line 3: label 'meh' is not in the label set (neg, pos)" in msg


def test_missing_file_and_bad_multilabel_value(tmp_path):
    assert "does not exist" in error_of("--task", "csv", "--train-file", str(tmp_path / "nope.csv"))
    path = write_csv(tmp_path / "m.csv", ["text", "a", "b"], [("x", 1, 0), ("y", 2, 1)])
    assert "must be 0 or 1" in error_of("--task", "csv", "--train-file", str(path), "--label-columns", "a,b")


def test_named_task_offline_says_what_to_do(monkeypatch):
    msg = error_of("--task", "ag_news")
    assert "--train-file" in msg and "bundled sample" in msg


def test_subsets_are_seeded_random_not_the_head(tmp_path):
    # sorted by label, like IMDB: the head would be one class only
    rows = [(f"neg {i}", 0) for i in range(100)] + [(f"pos {i}", 1) for i in range(100)]
    path = write_csv(tmp_path / "sorted.csv", ["text", "label"], rows)
    a = load("--task", "csv", "--train-file", str(path), "--max-train-samples", "40")
    b = load("--task", "csv", "--train-file", str(path), "--max-train-samples", "40")
    assert len(a.train) == 40 and a.train.texts == b.train.texts
    assert 10 < int(a.train.labels.sum()) < 30


def _parts(data, rows):
    """The held-out texts and the training texts, each checked to keep the file's order, and both the whole file."""
    held, kept = data.evals["eval"].texts, data.train.texts
    order = {text: i for i, (text, *_) in enumerate(rows)}
    assert [order[t] for t in held] == sorted(order[t] for t in held)
    assert [order[t] for t in kept] == sorted(order[t] for t in kept)
    assert sorted(held + kept) == sorted(order) and not set(held) & set(kept)
    return held, kept


def test_held_out_rows_follow_each_labels_share_whatever_the_seed(tmp_path):
    # A seeded permutation held out 0 to 3 of a 5 % label's 10 rows (of 20): its scores swung from seed to seed
    rows = [(f"common {i}", "common") for i in range(190)] + [(f"rare {i}", "rare") for i in range(10)]
    path = write_csv(tmp_path / "t.csv", ["text", "label"], rows)
    chosen = set()
    for seed in range(30):
        data = load("--task", "csv", "--train-file", str(path), "--eval-fraction", "0.1", "--seed", str(seed))
        held, _ = _parts(data, rows)
        assert dict(zip(data.label_names, np.bincount(data.evals["eval"].labels, minlength=2).tolist(),
                        strict=True)) == {"common": 19, "rare": 1}
        chosen.add(tuple(held))
    assert len(chosen) > 25  # still a random draw within each label


def test_held_out_rows_of_many_uneven_labels_and_one_row_labels(tmp_path):
    sizes = [400, 120, 60, 20, 20, 15, 12, 9, 7, 5, 5, 3, 2, 1, 1]
    rows = [(f"label{k} row {i}", f"label{k}") for k, size in enumerate(sizes) for i in range(size)]
    rows = [rows[i] for i in np.random.default_rng(7).permutation(len(rows))]  # labels interleaved, as in a file
    path = write_csv(tmp_path / "t.csv", ["text", "label"], rows)
    for seed in range(10):
        data = load("--task", "csv", "--train-file", str(path), "--eval-fraction", "0.2", "--seed", str(seed))
        _parts(data, rows)
        k = len(data.label_names)
        held = np.bincount(data.evals["eval"].labels, minlength=k)
        kept = np.bincount(data.train.labels, minlength=k)
        assert held.sum() == round(len(rows) * 0.2)  # the same total as before, which `ftcli train` counts
        for name, h, t in zip(data.label_names, held, kept, strict=True):
            size = sizes[int(name.removeprefix("label"))]
            assert h + t == size
            assert abs(h - size * held.sum() / len(rows)) < 1, (name, h)  # largest remainder: within one row
            assert t >= 1  # every label keeps a training row; a one-row label is not held out
    again = load("--task", "csv", "--train-file", str(path), "--eval-fraction", "0.2", "--seed", str(seed))
    assert again.evals["eval"].texts == data.evals["eval"].texts and again.train.texts == data.train.texts
    other = load("--task", "csv", "--train-file", str(path), "--eval-fraction", "0.2", "--seed", str(seed + 1))
    assert other.evals["eval"].texts != data.evals["eval"].texts


def _rows_of_no_one_label(tmp_path, kind: str, n: int) -> tuple[Path, list[str]]:
    """`n` rows t0..t{n-1} with no one label to split by (multi-label, as label columns or JSON lists) or none at all
    (regression), and the trainer's options that read them."""
    if kind == "label-columns":
        return (write_csv(tmp_path / "m.csv", ["text", "a", "b"], [(f"t{i}", int(i < 5), i % 2) for i in range(n)]),
                ["--task", "csv", "--label-columns", "a,b"])
    if kind == "json-lists":
        path = tmp_path / "m.jsonl"
        path.write_text("".join(json.dumps({"text": f"t{i}", "label": ["a"] if i < 5 else ["b"]}) + "\n"
                                for i in range(n)))
        return path, ["--task", "jsonl"]
    return (write_csv(tmp_path / "r.csv", ["text", "label"], [(f"t{i}", 9.5 if i < 5 else i / 7) for i in range(n)]),
            ["--task", "csv", "--regression"])


@pytest.mark.parametrize("kind", ["label-columns", "json-lists", "regression"])
def test_multi_label_and_regression_hold_out_the_rows_they_did(tmp_path, kind):
    # No one label to split by (multi-label) or none at all (regression): the plain seeded permutation of earlier
    # trainers, so a run they started and this one resumes holds out the rows it held out before
    n, seed = 60, 4
    path, args = _rows_of_no_one_label(tmp_path, kind, n)
    data = load(*args, "--train-file", str(path), "--eval-fraction", "0.25", "--seed", str(seed))
    perm = np.random.default_rng(seed + 1).permutation(n)
    assert data.evals["eval"].texts == [f"t{i}" for i in sorted(perm[:15])]
    assert data.train.texts == [f"t{i}" for i in sorted(perm[15:])]


@pytest.mark.skipif(not bundled_sample_available(), reason="bundled sample not installed")
def test_bundled_sample():
    data = load()
    assert len(data.train) == 8000 and len(data.evals["validation"]) == 872
    assert data.label_names == ["negative", "positive"]
    assert not set(data.train.texts) & set(data.evals["validation"].texts)


def _encoded(lengths):
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    ids = np.concatenate([np.arange(1, n + 1) for n in lengths]).astype(np.int32)
    return Encoded(ids=ids, offsets=offsets, type_ids=None, labels=np.arange(len(lengths)))


def test_plan_batches_covers_every_example_once_with_similar_lengths():
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 200, 5000)
    batches = plan_batches(lengths, 32, seed=1, epoch=0)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(5000))
    bucketed = sum(int(lengths[b].max()) * len(b) for b in batches)
    random_order = sum(int(lengths[b].max()) * len(b) for b in np.array_split(rng.permutation(5000), len(batches)))
    assert bucketed < 0.7 * random_order  # far less padding than random batches
    again = plan_batches(lengths, 32, seed=1, epoch=0)
    assert all((a == b).all() for a, b in zip(batches, again, strict=True))
    other = plan_batches(lengths, 32, seed=1, epoch=1)
    assert any(len(a) != len(b) or (a != b).any() for a, b in zip(batches, other, strict=True))


def test_collate_pads_to_the_batch_longest_not_max_length():
    enc = _encoded([3, 7, 5])
    batch = collate(enc, np.array([0, 2]), pad_id=0)
    assert batch["input_ids"].shape == (2, 5)
    assert batch["input_ids"][0].tolist() == [1, 2, 3, 0, 0]
    assert batch["attention_mask"].sum() == 8
    assert collate(enc, np.array([0, 2]), pad_id=0, multiple_of=8)["input_ids"].shape == (2, 8)


def _largest_remainder(counts: list[int], k: int) -> list[int]:
    """Each label's rows in a subset of `k`, by the rule worked out by hand (Hamilton's method): floor(k * c / n)
    each, and one more row to each of the largest remainders until there are `k` (the data chosen so none tie)."""
    n = sum(counts)
    shares = [k * c // n for c in counts]
    remainders = [k * c % n for c in counts]
    assert len({r for r in remainders if r}) == sum(1 for r in remainders if r), remainders  # one answer
    for i in sorted(range(len(counts)), key=lambda i: -remainders[i])[:k - sum(shares)]:
        shares[i] += 1
    return shares


def _in_order(texts: list[str], rows) -> None:
    order = {text: i for i, (text, *_) in enumerate(rows)}
    assert [order[t] for t in texts] == sorted(order[t] for t in texts)


@pytest.mark.parametrize("option,value", [("--max-train-samples", "100"), ("--fraction-of-train-data", "0.15")])
def test_train_subsets_keep_each_labels_share_and_no_held_out_row(tmp_path, option, value):
    # A seeded permutation of the training rows gave a quick run a label's rows by chance (a 2 % label: 0 to 5 of
    # 100); each label now gets its share, after the hold-out and of the rows it left
    sizes = [400, 130, 70, 37, 23, 11]
    rows = [(f"label{k} row {i}", f"label{k}") for k, size in enumerate(sizes) for i in range(size)]
    rows = [rows[i] for i in np.random.default_rng(3).permutation(len(rows))]
    path = write_csv(tmp_path / "t.csv", ["text", "label"], rows)
    picked = set()
    for seed in (5, 6):
        whole = load("--task", "csv", "--train-file", str(path), "--seed", str(seed))
        data = load("--task", "csv", "--train-file", str(path), option, value, "--seed", str(seed))
        held = data.evals["eval"]
        assert held.texts == whole.evals["eval"].texts  # the held-out rows are what they are without a subset
        before = np.bincount(whole.train.labels, minlength=len(sizes)).tolist()
        n = int(value) if option == "--max-train-samples" else max(1, round(sum(before) * float(value)))
        assert np.bincount(data.train.labels, minlength=len(sizes)).tolist() == _largest_remainder(before, n)
        assert not set(data.train.texts) & set(held.texts) and set(data.train.texts) <= set(whole.train.texts)
        _in_order(data.train.texts, rows)
        again = load("--task", "csv", "--train-file", str(path), option, value, "--seed", str(seed))
        assert again.train.texts == data.train.texts and again.evals["eval"].texts == held.texts
        picked.add(tuple(data.train.texts))
    assert len(picked) == 2  # still a random draw within each label: another seed, other rows


def test_eval_subsets_keep_each_labels_share(tmp_path):
    sizes = [300, 90, 41, 17]
    train = write_csv(tmp_path / "train.csv", ["text", "label"],
                      [(f"train {k} {i}", f"label{k}") for k in range(4) for i in range(20)])
    rows = [(f"eval {k} {i}", f"label{k}") for k, size in enumerate(sizes) for i in range(size)]
    evals = write_csv(tmp_path / "eval.csv", ["text", "label"], rows)
    data = load("--task", "csv", "--train-file", str(train), "--eval-file", str(evals), "--max-eval-samples", "60")
    assert np.bincount(data.evals["eval"].labels, minlength=4).tolist() == _largest_remainder(sizes, 60)
    _in_order(data.evals["eval"].texts, rows)
    assert len(data.train) == 80  # (the training rows are all kept)


def test_a_rare_label_keeps_a_row_in_every_small_subset(tmp_path):
    # 1 % of the rows: a random 50 of the 900 training rows had none of it for 58 % of seeds (of 200), so a quick
    # run never saw it, and a random 20 of the eval file's 200 rows left it unscored for 82 %
    rows = [(f"common {i}", "common") for i in range(990)] + [(f"rare {i}", "rare") for i in range(10)]
    path = write_csv(tmp_path / "t.csv", ["text", "label"], rows)
    evals = write_csv(tmp_path / "e.csv", ["text", "label"],
                      [(f"e common {i}", "common") for i in range(198)] + [("e rare 0", "rare"), ("e rare 1", "rare")])
    for seed in range(20):
        data = load("--task", "csv", "--train-file", str(path), "--max-train-samples", "50", "--seed", str(seed))
        rare = data.label_names.index("rare")
        assert len(data.train) == 50 and int((data.train.labels == rare).sum()) == 1, seed  # its share, 0.5, is 1
        data = load("--task", "csv", "--train-file", str(path), "--eval-file", str(evals), "--max-eval-samples", "20",
                    "--seed", str(seed))
        assert len(data.evals["eval"]) == 20 and int((data.evals["eval"].labels == rare).sum()) == 1, seed


def test_a_subset_smaller_than_the_label_set_takes_one_row_of_as_many_labels(tmp_path, caplog):
    path = write_csv(tmp_path / "t.csv", ["text", "label"],
                     [(f"t{k} {i}", f"l{k}") for k in range(5) for i in range(20)])
    evals = write_csv(tmp_path / "e.csv", ["text", "label"], [(f"e{k}", f"l{k}") for k in range(5)])
    for seed in range(5):
        caplog.clear()
        with caplog.at_level("WARNING", logger="ftcli_trainer"):
            data = load("--task", "csv", "--train-file", str(path), "--eval-file", str(evals), "--max-train-samples",
                        "3", "--max-eval-samples", "4", "--seed", str(seed))
        assert sorted(np.bincount(data.train.labels, minlength=5).tolist()) == [0, 0, 1, 1, 1]
        # which labels the run goes without is said (the warnings on thin labels judged the data as given)
        said = [r.getMessage() for r in caplog.records]
        untrained = ", ".join(repr(data.label_names[i]) for i in range(5) if i not in set(data.train.labels))
        unscored = ", ".join(repr(data.label_names[i]) for i in range(5) if i not in set(data.evals["eval"].labels))
        assert f"--max-train-samples 3 keeps 3 rows, fewer than the 5 labels: the run trains on 3 of them, without " \
               f"{untrained}; give at least 5" in said, said
        assert f"--max-eval-samples 4 keeps 4 rows, fewer than the 5 labels: the run scores its eval set on 4 of " \
               f"them, without {unscored}; give at least 5" in said, said
    caplog.clear()
    with caplog.at_level("WARNING", logger="ftcli_trainer"):
        load("--task", "csv", "--train-file", str(path), "--eval-file", str(evals), "--max-train-samples", "5",
             "--max-eval-samples", "5")
    assert not [r for r in caplog.records if "fewer than the" in r.getMessage()]  # each label has its row


@pytest.mark.parametrize("kind", ["label-columns", "json-lists", "regression"])
def test_multi_label_and_regression_subsets_are_the_rows_they_were(tmp_path, kind):
    # No one label to split by (multi-label) or none at all (regression): the plain seeded permutation of earlier
    # trainers, so a run they started and this one resumes trains and is scored on the same rows
    n, seed = 60, 4
    path, args = _rows_of_no_one_label(tmp_path, kind, n)
    data = load(*args, "--train-file", str(path), "--eval-file", str(path), "--max-train-samples", "15",
                "--max-eval-samples", "12", "--seed", str(seed))
    perm = np.random.default_rng(seed).permutation(n)
    assert data.train.texts == [f"t{i}" for i in sorted(perm[:15])]
    assert data.evals["eval"].texts == [f"t{i}" for i in sorted(perm[:12])]


def test_a_numeric_label_set_takes_no_number_outside_it_as_a_class_id(tmp_path):
    # Found by mutation testing: with --label-names that are numbers (ratings 1 to 5), a 0 in the data is no class;
    # read as the id 0 it was trained as rating "1". Nothing failed when the check that the names are numbers was
    # dropped.
    path = write_csv(tmp_path / "t.csv", ["text", "label"], [(f"t{i}", 1 + i % 5) for i in range(20)] + [("z", 0)])
    msg = error_of("--task", "csv", "--train-file", str(path), "--label-names", "1,2,3,4,5")
    assert "line 22: label '0' is not in the label set (1, 2, 3, 4, 5)" in msg
    data = load("--task", "csv", "--train-file", str(write_csv(tmp_path / "ok.csv", ["text", "label"],
                [(f"t{i}", 1 + i % 5) for i in range(20)])), "--label-names", "1,2,3,4,5", "--eval-fraction", "0.5")
    rows = {f"t{i}": 1 + i % 5 for i in range(20)}
    for ex in (data.train, data.evals["eval"]):  # rating r is the class at id r - 1, the name's place in the list
        assert [data.label_names[i] for i in ex.labels] == [str(rows[t]) for t in ex.texts]


def test_a_tiny_share_still_holds_out_and_trains_on_one_row(tmp_path):
    # Found by mutation testing: 8 rows at --eval-fraction 0.05 is 0.4 of a row, and 40 rows at
    # --fraction-of-train-data 0.01 is 0.4 too: each rounds to 0, and at least one row is taken (an empty eval set
    # scores nothing, an empty training set trains nothing). No test had a share under a row.
    path = write_csv(tmp_path / "t.csv", ["text", "label"], [(f"t{i}", "ab"[i % 2]) for i in range(8)])
    data = load("--task", "csv", "--train-file", str(path), "--eval-fraction", "0.05")
    assert (len(data.train), len(data.evals["eval"])) == (7, 1)
    path = write_csv(tmp_path / "u.csv", ["text", "label"], [(f"t{i}", "ab"[i % 2]) for i in range(44)])
    data = load("--task", "csv", "--train-file", str(path), "--fraction-of-train-data", "0.01")
    assert (len(data.train), len(data.evals["eval"])) == (1, 4)


def test_a_hold_out_leaves_at_least_one_row_to_train_on_and_no_fewer(tmp_path):
    # Found by mutation testing: the "too few to hold out" check could refuse 2 rows, or let 1 through (to train on
    # nothing), and no test failed. 10 rows at 0.9 hold out 9 and train on 1; at 0.96, 9.6 rounds to all 10.
    path = write_csv(tmp_path / "t.csv", ["text", "label"], [(f"t{i}", "ab"[i % 2]) for i in range(10)])
    data = load("--task", "csv", "--train-file", str(path), "--eval-fraction", "0.9")
    assert (len(data.train), len(data.evals["eval"])) == (1, 9)
    assert error_of("--task", "csv", "--train-file", str(path), "--eval-fraction", "0.96") == (
        "only 10 training example(s): too few to hold out an eval set\n"
        "hint: pass --eval-file with examples to score, or add training examples")


def test_training_data_of_one_label_is_refused(tmp_path):
    # Found by mutation testing: the trainer's own check (the launcher's check_files has another) was untested
    path = write_csv(tmp_path / "t.csv", ["text", "label"], [(f"t{i}", "pos") for i in range(20)])
    assert error_of("--task", "csv", "--train-file", str(path)) == (
        "the training data has only one label ('pos'); a classifier needs at least two\n"
        "hint: add examples of the other labels, or pass --label-column with the column that holds the labels (read "
        "from 'label')")


def test_collate_keeps_a_pairs_token_types():
    # Found by mutation testing: token_type_ids left all 0 (the second text read as the first's) passed every test
    enc = Encoded(ids=np.arange(1, 9, dtype=np.int32), offsets=np.array([0, 5, 8]),
                  type_ids=np.array([0, 0, 0, 1, 1, 0, 1, 1], dtype=np.int8), labels=np.array([1, 0]))
    batch = collate(enc, np.array([1, 0]), pad_id=0)
    assert batch["input_ids"].tolist() == [[6, 7, 8, 0, 0], [1, 2, 3, 4, 5]]
    assert batch["token_type_ids"].tolist() == [[0, 1, 1, 0, 0], [0, 0, 0, 1, 1]]
    assert batch["labels"].tolist() == [0, 1]
    assert "token_type_ids" not in collate(_encoded([3, 2]), np.array([0, 1]), pad_id=0)


def test_label_column_globs_leave_out_the_text_pair_column(tmp_path):
    # Found by mutation testing: '*' matched the second text's column too when the exclusion of it was dropped
    rows = [(f"premise {i}", f"hypothesis {i}", i % 2, (i // 2) % 2) for i in range(20)]
    path = write_csv(tmp_path / "m.csv", ["text", "hyp", "a", "b"], rows)
    data = load("--task", "csv", "--train-file", str(path), "--text-pair-column", "hyp", "--label-columns", "*")
    assert data.label_names == ["a", "b"]
    assert data.train.pairs == [f"hypothesis {t.split()[1]}" for t in data.train.texts]


def test_a_hub_task_trains_on_its_train_split_and_scores_its_eval_splits_in_order(monkeypatch):
    # Found by mutation testing: the Hub loader had no test that ran it (the Hub is not reached from tests), so
    # --dataset-config ignored, or the dataset and configuration passed the wrong way round, failed nothing. The
    # Hub's load_dataset is replaced by one that serves each split's rows from memory.
    datasets = pytest.importorskip("datasets")
    calls = []

    def load_dataset(path, name, split):
        calls.append((path, name, split))
        return datasets.Dataset.from_list([{"premise": f"{split} {i}", "hypothesis": f"h {i}", "label": i % 3,
                                            "idx": i} for i in range(6)])

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    data = load("--task", "mnli")
    assert calls == [("nyu-mll/glue", "mnli", "train"), ("nyu-mll/glue", "mnli", "validation_matched"),
                     ("nyu-mll/glue", "mnli", "validation_mismatched")]
    assert data.label_names == ["entailment", "neutral", "contradiction"]
    assert data.train.texts == [f"train {i}" for i in range(6)] and data.train.pairs == [f"h {i}" for i in range(6)]
    assert data.train.labels.tolist() == [0, 1, 2, 0, 1, 2]
    assert list(data.evals) == ["matched", "mismatched"]  # the first is the primary eval set
    assert data.evals["mismatched"].texts == [f"validation_mismatched {i}" for i in range(6)]
    calls.clear()
    load("--task", "mnli", "--dataset-config", "ax")
    assert {c[:2] for c in calls} == {("nyu-mll/glue", "ax")}


def test_a_trainer_without_the_bundled_sample_says_what_to_train_on_instead_on_a_hint_line(monkeypatch):
    # (the package uploaded to Vertex leaves the sample out) "...; pass --task with a Hub dataset or --train-file"
    from ftcli_trainer import data

    monkeypatch.setattr(data, "bundled_sample_available", lambda: False)
    assert error_of() == ("the bundled sample is not in this install (it is left out of the package uploaded to "
                          "Vertex)\nhint: pass --task with a Hub dataset, or --train-file")
