import pytest

from ftcli_trainer.config import OPTIONS, ConfigError, hint_of, parse_args, to_argv
from ftcli_trainer.tasks import BUNDLED_SAMPLE, MINILM, TASKS


def problems(argv):
    """The problems the options give, each with its hint on a line of its own ("\nhint: ...") where it has one, as
    the trainer prints them."""
    with pytest.raises(ConfigError) as e:
        parse_args(argv)
    return [p + (f"\nhint: {hint}" if (hint := hint_of(p)) else "") for p in e.value.problems]


def test_defaults_come_from_the_task():
    cfg = parse_args([])
    assert cfg.task == BUNDLED_SAMPLE and cfg.model == MINILM and cfg.epochs == 1
    imdb = parse_args(["--task", "imdb"])
    assert (imdb.model, imdb.max_length) == ("bert-base-cased", 512)
    mnli = parse_args(["--task", "mnli", "--epochs", "5"])
    assert (mnli.text_column, mnli.text_pair_column, mnli.epochs) == ("premise", "hypothesis", 5)


def test_every_problem_is_listed_at_once():
    got = problems(["--epochs", "0", "--batch-size", "x", "--learning-rate", "-1", "--warmup-ratio", "2",
                    "--precision", "fp8", "--bogus", "1", "--max-train-samples", "10",
                    "--fraction-of-train-data", "0.5"])
    text = "\n".join(got)
    assert len(got) == 7, got
    for needle in ("--epochs must be positive", "--batch-size must be a whole number", "--learning-rate must be",
                   "--warmup-ratio", "--precision must be one of", "unknown option --bogus",
                   "both pick a subset"):
        assert needle in text


def test_inconsistent_data_options():
    assert problems(["--task", "csv"]) == [
        "--task csv needs --train-file PATH (CSV or JSON Lines, local or gs://)"]
    got = problems(["--task", "csv", "--train-file", "a.csv", "--label-column", "y", "--label-columns", "a,b"])
    assert any("exclude each other" in p for p in got)
    assert any("fixed labels" in p for p in problems(["--task", "imdb", "--label-names", "a,b"]))
    assert any("--eval-file needs --train-file" in p for p in problems(["--eval-file", "x.csv"]))


def test_unknown_task_lists_choices():
    (p,) = problems(["--task", "nope"])
    assert "nope" in p and all(name in p for name in TASKS)


def test_to_argv_round_trips():
    values = {"task": "csv", "train_file": "t.csv", "epochs": 2, "learning_rate": 3e-5, "compile": True,
              "label_names": "a,b"}
    cfg = parse_args(to_argv(values))
    assert (cfg.task, cfg.train_file, cfg.epochs, cfg.learning_rate, cfg.compile, cfg.label_names) == (
        "csv", "t.csv", 2, 3e-5, True, ("a", "b"))


def test_label_names_take_a_json_list_for_names_with_a_comma():
    csv = ["--task", "csv", "--train-file", "a.csv"]
    assert parse_args([*csv, "--label-names", '["no", "yes, definitely"]']).label_names == ("no", "yes, definitely")
    assert parse_args(to_argv({"label_names": '[" a ", "b"]', "task": "csv", "train_file": "a.csv"})).label_names \
        == (" a ", "b")  # as written
    assert problems([*csv, "--label-names", "[1, 2]"]) == [
        "--label-names '[1, 2]' must be a JSON list of non-empty strings\nhint: write it as '[\"a\", \"b, c\"]' or "
        "comma-separated a,b"]


def test_to_argv_round_trips_values_that_start_with_a_dash():
    # `--label-column -score` as two words: argparse took '-score' for an option, and the job failed with
    # "expected one argument" after ftcli's pre-flight (which checks the values, not the argv) had passed them
    values = {"task": "csv", "train_file": "-t.csv", "text_column": "-text", "label_column": "--label",
              "label_names": "-1,0,1", "output_dir": "-runs"}
    cfg = parse_args(to_argv(values))
    assert (cfg.train_file, cfg.text_column, cfg.label_column, cfg.label_names, cfg.output_dir) == (
        "-t.csv", "-text", "--label", ("-1", "0", "1"), "-runs")
    assert to_argv({"text_column": "-text", "label_column": "y"}) == ["--text-column=-text", "--label-column", "y"]


def test_gpu_warmup_is_on_unless_turned_off():
    # on by default since the H100 run of bench/gpu_next.sh (bench/README.md): first 60 steps 1.0x the steady step
    assert parse_args([]).gpu_warmup is True
    assert parse_args(["--no-gpu-warmup"]).gpu_warmup is False
    assert parse_args(["--gpu-warmup"]).gpu_warmup is True
    assert to_argv({"gpu_warmup": True}) == [] and to_argv({"gpu_warmup": False}) == ["--no-gpu-warmup"]
    assert parse_args(to_argv({"gpu_warmup": False})).gpu_warmup is False
    assert to_argv({"compile": True}) == ["--compile"] and to_argv({"compile": False}) == []


def test_options_cover_the_config():
    from dataclasses import fields

    from ftcli_trainer.config import TrainConfig

    assert {o.name for o in OPTIONS} == {f.name for f in fields(TrainConfig)} - {"extra"}


def test_the_trainers_own_task_check_says_what_to_give(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.csv").write_text("text,label\n")
    (tmp_path / "data").mkdir()
    assert problems(["--task", "train.csv"]) == [
        "--task 'train.csv' is a file, not a task: train on your own data with --task csv --train-file train.csv"]
    assert problems(["--task", "data"]) == [
        "--task 'data' is a folder, not a task: train on a CSV or JSON Lines file in it with --task csv --train-file "
        "data/FILE.csv"]
    assert problems(["--task", "gs://b/rows.ndjson"]) == [
        "--task 'gs://b/rows.ndjson' looks like a file, not a task: train on your own data with --task jsonl "
        "--train-file gs://b/rows.ndjson"]
    assert problems(["--task", "sst"])[0].startswith("unknown task 'sst'; did you mean sst2? (tasks: sst2-sample, ")
    assert problems(["--task", "nli"])[0].startswith("unknown task 'nli'; did you mean wnli, qnli or mnli? (tasks: ")


def test_cuda_graphs_is_on_where_it_works_unless_turned_off():
    # auto by default since the H200 run of bench/gpu.py (bench/README.md): equal loss curves, 2.9-3.5x faster
    assert parse_args([]).cuda_graphs == "auto"
    assert parse_args(["--cuda-graphs", "off"]).cuda_graphs == "off"
    assert parse_args(to_argv({"cuda_graphs": "on"})).cuda_graphs == "on"
    assert problems(["--cuda-graphs", "yes"]) == ["--cuda-graphs must be one of auto, on, off; got 'yes'"]
    assert problems(["--cuda-graphs", "Off"]) == [
        "--cuda-graphs must be one of auto, on, off; got 'Off': did you mean off?"]


@pytest.mark.parametrize("values,needle", [
    ({"learning_rate": float("nan")}, "--learning-rate must be a finite number, got nan"),
    ({"weight_decay": float("inf")}, "--weight-decay must be a finite number, got inf"),
    ({"max_grad_norm": float("-inf")}, "--max-grad-norm must be a finite number, got -inf"),
    ({"threshold": float("nan")}, "--threshold must be a finite number"),
    ({"seed": 2**32}, f"--seed must be at most {2**32 - 1}"),
    ({"seed": -1}, "--seed must be 0 or more"),
])
def test_the_shared_validator_refuses_what_would_crash_inside_the_job(values, needle):
    # The launcher validates typed values (typer already parsed "nan" into a float) with the same resolve().
    from ftcli_trainer.config import resolve

    with pytest.raises(ConfigError) as e:
        resolve(values)
    assert needle in "\n".join(e.value.problems)


def test_seed_limit_on_the_trainer_command_line():
    assert parse_args(["--seed", str(2**32 - 1)]).seed == 2**32 - 1
    assert any("--seed must be at most" in p for p in problems(["--seed", str(2**32)]))


def test_output_dir_that_is_a_file_or_under_a_file(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("mine")
    assert problems(["--output-dir", str(f)]) == [f"--output-dir {f} is a file, not a folder"]
    assert problems(["--output-dir", str(f / "run")]) == [f"--output-dir {f / 'run'}: {f} is a file, not a folder"]
    assert f.read_text() == "mine"


@pytest.mark.parametrize("sub", ["model", "checkpoints", "logs"])
def test_a_file_where_the_run_writes_a_folder_is_refused_up_front(tmp_path, sub):
    # a file named logs failed after the model had loaded, and --restart would have moved it aside
    (tmp_path / sub).write_text("mine")
    assert problems(["--output-dir", str(tmp_path)]) == [
        f"--output-dir {tmp_path}: {tmp_path / sub} is a file, where the run writes its {sub}/ folder; move the file "
        "away, or pick another --output-dir"]
    assert (tmp_path / sub).read_text() == "mine"


def test_output_dir_that_cannot_be_written(tmp_path):
    got = problems(["--output-dir", "/sys/ftcli-run"])  # refused even to root
    assert len(got) == 1 and got[0].startswith("--output-dir /sys/ftcli-run: cannot write in /sys")


def test_good_output_dirs_are_not_created_by_validation(tmp_path):
    assert parse_args(["--output-dir", str(tmp_path / "new" / "run")]).output_dir == str(tmp_path / "new" / "run")
    assert parse_args(["--output-dir", "gs://bucket/run"]).output_dir == "gs://bucket/run"
    assert list(tmp_path.iterdir()) == []


def test_regression_excludes_classes():
    got = problems(["--task", "csv", "--train-file", "a.csv", "--regression", "--label-columns", "a,b"])
    assert "--regression takes one number per row (--label-column), not --label-columns" in got
    got = problems(["--task", "csv", "--train-file", "a.csv", "--regression", "--label-names", "lo,hi"])
    assert got == ["--label-names names classes; a --regression target has none"]
    assert any("--regression is for csv/jsonl data" in p for p in problems(["--regression"]))
    assert parse_args(["--task", "jsonl", "--train-file", "a.jsonl", "--regression"]).regression


def test_a_tilde_the_shell_left_is_expanded_everywhere(tmp_path, monkeypatch):
    # `--output-dir=~/x` (no shell expands ~ after '='): checked as $HOME/x, then written to ./~/x
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "train.csv").write_text("text,label\na,b\n")
    cfg = parse_args(["--task", "csv", "--train-file=~/train.csv", "--output-dir=~/out"])
    assert cfg.output_dir == str(tmp_path / "out") and cfg.train_file == str(tmp_path / "train.csv")


def test_one_column_in_two_roles_is_refused():
    # `--text-column label` trained on the labels themselves (eval accuracy 1.0, a model that predicts nothing)
    base = ["--task", "csv", "--train-file", "a.csv"]
    assert problems(base + ["--text-column", "label"]) == [
        "--text-column 'label' is the label column too: the model would read its label as text\nhint: pass "
        "--text-column with the text's column (or --label-column with the label's)"]
    assert problems(base + ["--text-pair-column", "y", "--label-column", "y"]) == [
        "--text-pair-column 'y' is the label column too: the model would read its label as text\nhint: pass "
        "--text-pair-column with the text's column (or --label-column with the label's)"]
    assert problems(base + ["--text-pair-column", "text"]) == [
        "--text-pair-column 'text' is the --text-column too: a pair needs its second text from another column"]
    assert problems(["--task", "mnli", "--text-column", "hypothesis"]) == [
        "--text-pair-column 'hypothesis' is the --text-column too: a pair needs its second text from another "
        "column"]
    # multi-label: --label-column is not used, so a text column named "label" is fine
    assert parse_args(base + ["--text-column", "label", "--label-columns", "a,b"]).text_column == "label"


def test_financial_dataset_config_is_refused_as_every_closed_choice_is():
    # "--dataset-config for financial is one of ..." said neither what was given nor what it most likely meant
    assert problems(["--task", "financial", "--dataset-config", "sentences_50agre"]) == [
        "--dataset-config for financial must be one of sentences_allagree, sentences_75agree, sentences_66agree, "
        "sentences_50agree; got 'sentences_50agre': did you mean sentences_50agree, sentences_75agree or "
        "sentences_66agree?"]
    assert parse_args(["--task", "financial", "--dataset-config", "sentences_50agree"]).dataset_config == (
        "sentences_50agree")


def test_eval_fraction_with_an_eval_set_is_refused_not_ignored():
    assert problems(["--task", "csv", "--train-file", "a.csv", "--eval-file", "b.csv", "--eval-fraction", "0.5"]) == [
        "--eval-fraction holds out training data when there is no eval set, but the eval set is --eval-file\nhint: "
        "drop --eval-fraction"]
    assert problems(["--eval-fraction", "0.2"]) == [
        "--eval-fraction holds out training data when there is no eval set, but the eval set is --task "
        "sst2-sample's own evaluation split\nhint: drop --eval-fraction"]
    assert parse_args(["--task", "csv", "--train-file", "a.csv", "--eval-fraction", "0.2"]).eval_fraction == 0.2
    assert parse_args(["--task", "financial", "--eval-fraction", "0.2"]).eval_fraction == 0.2  # one split only
    assert parse_args(["--task", "imdb", "--train-file", "a.csv", "--eval-fraction", "0.2"]).eval_fraction == 0.2
