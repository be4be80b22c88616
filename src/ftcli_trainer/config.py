"""Trainer options: one declarative list, parsed and validated with every problem reported at once.

The list is plain data (no torch import) so that the launcher builds its `ftcli local` / `ftcli train`
options from the same source and validates them before anything is uploaded.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import math
import os
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ftcli_trainer.tasks import BUNDLED_SAMPLE, TASKS

if TYPE_CHECKING:
    from pathlib import Path

SECRET_NAME = re.compile(r"projects/[^/\s]+/secrets/[A-Za-z0-9_-]+(/versions/(latest|[1-9][0-9]*))?")
# The options that name a Secret Manager secret: (what it holds, that thing in one word, the variable it is usually in).
SECRET_OPTIONS = {"wandb_secret": ("the W&B key", "key", "WANDB_API_KEY"),
                  "hf_secret": ("the Hugging Face token", "token", "HF_TOKEN")}


def _bare_secret_id(value: str) -> bool:
    """`value` reads as a secret's short name (hf-token, wandb_key), not as the key or token itself (an hf_... token,
    a 40-hex-digit W&B key, anything long): only then is it repeated in the line that asks for the full name."""
    return (len(value) <= 30 and re.fullmatch(r"[A-Za-z0-9_-]+", value) is not None
            and not value.lower().startswith("hf_") and re.fullmatch(r"[0-9a-fA-F]{24,}", value) is None)


class Problem(str):
    """One problem with the options whose fix is not in its line: `hint` says it. A str (the line) wherever a
    problem is one; the trainer prints the hint under the problem's `error:` line, ftcli on its own `hint:` line
    where the problem is alone, after a ";" in a list of several (which keeps no hint)."""

    hint: str | None

    def __new__(cls, line: str, hint: str | None = None) -> Problem:
        self = super().__new__(cls, line)
        self.hint = hint
        return self


def hint_of(problem: str) -> str | None:
    """A problem's fix where its line does not say it (Problem), else None."""
    return getattr(problem, "hint", None)


def with_fix(problem: str) -> str:
    """A problem as one line of a list: its fix (a Problem's hint) after a ";"."""
    return f"{problem}; {hint}" if (hint := hint_of(problem)) else str(problem)


class ConfigError(Exception):
    """Bad options. `problems` lists every one of them (a Problem where its fix is a hint); the message is one line
    per problem."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(map(with_fix, problems)))


@dataclass(frozen=True)
class Option:
    name: str  # the dataclass field; the flag is --name-with-dashes
    type: type  # str, int, float or bool
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


PRECISIONS = ("auto", "fp32", "bf16", "fp16")
MAX_SEED = 2**32 - 1  # numpy's legacy seeding (transformers' set_seed) takes no more
CUDA_GRAPH_MODES = ("auto", "on", "off")

# None as a default means "the task decides" (model, epochs, max length, learning rate) or "not set".
OPTIONS: tuple[Option, ...] = (
    Option("task", str, BUNDLED_SAMPLE, "Task name.", tuple(TASKS)),
    Option("model", str, None, "Hugging Face model id or local model folder [default: the task's].",
           metavar="ID|DIR"),
    Option("epochs", int, None, "Training epochs [default: the task's].", metavar="N"),
    Option("batch_size", int, 32, "Examples per device per micro-batch.", metavar="N"),
    Option("learning_rate", float, None, "Peak AdamW learning rate [default: the task's].", metavar="LR"),
    Option("weight_decay", float, 0.01, "AdamW weight decay (not applied to biases and LayerNorm).",
           metavar="W"),
    Option("warmup_ratio", float, 0.06, "Share of the optimizer steps spent warming the LR up linearly.",
           metavar="R"),
    Option("max_length", int, None, "Truncate inputs to this many tokens [default: the task's].",
           metavar="N"),
    Option("gradient_accumulation_steps", int, 1, "Micro-batches per optimizer step.", metavar="N"),
    Option("max_grad_norm", float, 1.0, "Clip the gradient norm to this (0: no clipping).", metavar="X"),
    Option("max_train_samples", int, None, "Train on a seeded subset of this many examples (each label its share).",
           metavar="N"),
    Option("fraction_of_train_data", float, None,
           "Train on a seeded share (0-1] of the examples (each label its share).", metavar="F"),
    Option("max_eval_samples", int, None, "Evaluate on a seeded subset of this many examples (each label its share).",
           metavar="N"),
    Option("seed", int, 42, "Random seed (data order, subsets, initialisation, dropout).", metavar="N"),
    Option("precision", str, "auto", "auto: bf16 on GPUs of compute capability 8.0 or newer (A100, L4, H100), "
           "fp16 with a loss scaler on older ones (T4, V100); fp32 on CPU.",
           PRECISIONS),
    Option("eval_every", int, 0, "Also evaluate every N optimizer steps (0: at each epoch end only).",
           metavar="N"),
    Option("save_every", int, 0, "Also checkpoint every N optimizer steps (0: at each epoch end only).",
           metavar="N"),
    Option("keep_best", bool, False, "Export the weights of the evaluation with the best headline metric (the "
           "task's own: accuracy, GLUE's Matthews, F1 or Pearson; micro-F1 for multi-label), not the last step's, as "
           "the HF Trainer's load_best_model_at_end; candidates are every evaluation (--eval-every), else each "
           "epoch's end. metrics.json names the step kept, and the last step's metrics beside it."),
    Option("early_stopping", int, 0, "Stop after N evaluations in a row that do not improve the headline metric "
           "(the HF Trainer's EarlyStoppingCallback patience); implies --keep-best. 0: off.", metavar="N"),
    Option("early_stopping_threshold", float, 0.0, "With --early-stopping: an evaluation counts as an improvement "
           "only when it beats the best by more than this (HF's early_stopping_threshold); the best weights are "
           "kept on any improvement.", metavar="X"),
    Option("log_every", int, 0, "Log a line every N optimizer steps (0: about 20 lines a run).",
           metavar="N"),
    Option("output_dir", str, None, "Base output folder, like Vertex's base_output_dir: model/, "
           "checkpoints/, logs/ [default: AIP_* variables, else ./ftcli-runs/RUN_ID].", metavar="DIR"),
    # Data (csv / jsonl, or to give a named task local files)
    Option("train_file", str, None, "Training data: CSV or JSON Lines, local path or gs:// URI.",
           metavar="PATH"),
    Option("eval_file", str, None, "Evaluation data [default: a seeded share of the training data].",
           metavar="PATH"),
    Option("eval_fraction", float, 0.1,
           "Share of the training data held out when there is no eval set (each label its share).", metavar="F"),
    Option("text_column", str, None, "Column with the text [default: text].", metavar="NAME"),
    Option("text_pair_column", str, None, "Column with the second text of a pair (e.g. hypothesis).",
           metavar="NAME"),
    Option("label_column", str, None, "Column with one label per row (single-label) [default: label].",
           metavar="NAME"),
    Option("label_columns", str, None, "Multi-label: 0/1 columns, comma-separated names or a glob "
           "(e.g. 'toxic,insult' or '*'), or a JSON list for names with a comma "
           "('[\"toxic, severe\", \"insult\"]').", metavar="A,B|GLOB"),
    Option("label_names", str, None, "Label names in id order, comma-separated, or a JSON list for names with a "
           "comma ('[\"no\", \"yes, definitely\"]') [default: the task's, or sorted values seen in the training "
           "data].", metavar="A,B,C"),
    Option("regression", bool, False, "One number per row in the label column (a score such as STS-B's 0-5 "
           "similarity) instead of a class: one output, MSE loss, Pearson/Spearman [default: on for stsb]."),
    Option("threshold", float, 0.5, "Multi-label: a label is predicted when its probability >= this.",
           metavar="P"),
    Option("dataset_config", str, None, "Hub dataset configuration, e.g. sentences_50agree for financial.",
           metavar="NAME"),
    Option("wandb_project", str, None, "Log metrics to this Weights & Biases project (the job installs wandb only "
           "then).", metavar="NAME"),
    Option("wandb_secret", str, None, "Secret Manager secret that holds the W&B API key: projects/P/secrets/NAME"
           "[/versions/V] (the key itself never travels in the job's arguments or environment).", metavar="SECRET"),
    Option("hf_secret", str, None, "Secret Manager secret that holds a Hugging Face token, for a gated or private "
           "model or dataset: projects/P/secrets/NAME[/versions/V]. Read where the trainer runs, before any Hub "
           "download; the token itself never travels in the job's arguments or environment.", metavar="SECRET"),
    Option("gpu_warmup", bool, True, "With CUDA graphs on: pay the GPU's first-use costs before the training "
           "clock (forward/backward passes while a worker thread tokenizes, then every step width and the update "
           "warmed up on filler rows and captured ahead), so the first steps replay. Same math; on an H100 the "
           "first 60 steps went from 7.6x to 1.0x the steady step, and runs ended 1.06-1.17x sooner."),
    Option("hypertune_metric", str, None, "Report this eval metric (e.g. eval_accuracy) to Vertex AI's "
           "hyperparameter tuning service after each evaluation (ftcli tune sets it).", metavar="NAME"),
    Option("weight_copies", bool, True, "With CUDA graphs on and bf16 or fp16: the forward reads a bf16 (fp16) copy "
           "of each nn.Linear weight, refreshed by one fused copy after each update, instead of casting every weight "
           "(and its gradient back) at every step. Bit-identical results (checked in bf16 on an H100, where steady "
           "steps got 3-4.5 percent faster); one micro-batch a step only."),
    Option("fused_projections", bool, True, "With CUDA graphs on and --weight-copies: each attention's query, key "
           "and value projections run as one GEMM over one low-precision copy of their three weights, one GEMM "
           "where there were three, forward and backward; the fp32 weights, the optimizer and the exported model "
           "keep the three Linears. The same dot products: a GPU test with real captures trained as the three "
           "Linears, and on an H100 steps at 512 tokens got 7 percent shorter (44.8 to 41.7 ms)."),
    Option("unmask_full_batches", bool, False, "With CUDA graphs on: a batch whose rows all fill its width (every "
           "row cut at --max-length) runs without the attention mask, in a graph of its own, as HF's eager path "
           "drops an all-ones mask: attention on the faster kernels without a mask. Off by default: on an H100 only "
           "batches of full rows gained (steps 5.6 percent shorter), each such width one more capture."),
    Option("shared_casts", bool, False, "With CUDA graphs on and bf16: an fp32 activation that several Linear "
           "layers read in turn (BERT's query, key and value read the same LayerNorm output) is cast to bf16 once, "
           "not once per layer; each layer's gradient still goes back to fp32 on its own. Bit-identical results "
           "(checked on CPU); off by default: on an H100 within one run's noise (1.6 percent shorter steps at 512 "
           "tokens). Gives way to --fused-projections (on by default), which cast that input once themselves."),
    Option("varlen_attention", bool, False, "On a CUDA GPU (compute capability 8.0+) in bf16 or fp16: attention "
           "runs torch's flash kernel over each row's own tokens (variable-length, dropout included) instead of "
           "SDPA with a padding mask, which takes cuDNN's slower padded-mask kernels; no padding is moved. The "
           "same math; off by default: on an H100 steps were 3.3 percent shorter on full 512-token rows but 1-4 "
           "percent longer on mixed lengths."),
    Option("compile", bool, False, "torch.compile the model's layers (one compile serves them all); with CUDA "
           "graphs on, inside the captured step (on an H100, 34.2 against 41.7 ms a step at 512 tokens with "
           "--unmask-full-batches). Skipped, with a line, where it "
           "cannot pay off: a CPU, runs under ~5,000 steps, or with the graphs under ~126M tokens."),
    Option("cuda_graphs", str, "auto", "GPU steps padded to a few fixed widths and replayed as CUDA graphs "
           "(on an H200, 2.8-3.1x eager's samples/s on short texts, same loss curve). auto/on: where possible "
           "(one CUDA GPU, in bf16, fp16 or fp32), else eager with "
           "a line saying why; off: always eager.", CUDA_GRAPH_MODES),
)

OPTIONS_BY_NAME = {o.name: o for o in OPTIONS}


@dataclass(frozen=True)
class TrainConfig:
    task: str = BUNDLED_SAMPLE
    model: str = ""
    epochs: int = 1
    batch_size: int = 32
    learning_rate: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.06
    max_length: int = 128
    gradient_accumulation_steps: int = 1
    max_grad_norm: float = 1.0
    max_train_samples: int | None = None
    fraction_of_train_data: float | None = None
    max_eval_samples: int | None = None
    seed: int = 42
    precision: str = "auto"
    eval_every: int = 0
    save_every: int = 0
    keep_best: bool = False
    early_stopping: int = 0
    early_stopping_threshold: float = 0.0
    log_every: int = 0
    output_dir: str | None = None
    train_file: str | None = None
    eval_file: str | None = None
    eval_fraction: float = 0.1
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    label_columns: str | None = None
    label_names: tuple[str, ...] = ()
    regression: bool = False
    threshold: float = 0.5
    dataset_config: str | None = None
    wandb_project: str | None = None
    wandb_secret: str | None = None
    hf_secret: str | None = None
    gpu_warmup: bool = True
    hypertune_metric: str | None = None
    weight_copies: bool = True
    fused_projections: bool = True
    unmask_full_batches: bool = False
    shared_casts: bool = False
    varlen_attention: bool = False
    compile: bool = False
    cuda_graphs: str = "auto"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def multi_label(self) -> bool:
        return self.label_columns is not None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)


def _convert(opt: Option, raw: str, problems: list[str]) -> Any:
    try:
        if opt.type is int:
            try:
                return int(raw)
            except ValueError:
                # The tuning service passes a discrete value as a double ("16.0"): a whole one is that integer.
                value = float(raw)
                if not value.is_integer():
                    raise
                return int(value)
        if opt.type is float:
            value = float(raw)
            if not math.isfinite(value):
                raise ValueError
            return value
    except ValueError:
        kind = "a whole number" if opt.type is int else "a number"
        problems.append(f"{opt.flag} must be {kind}, got {raw!r}")
        return None
    if opt.name == "task" and raw not in TASKS:
        problems.append(unknown_task(raw))
        return None
    if opt.choices and raw not in opt.choices:
        problems.append(choice_problem(opt, raw))
        return None
    return raw


DATA_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".ndjson", ".gz")


def unknown_task(value: str) -> str:
    """The problem with a --task that names no task, saying what to give instead: for a data file given as the task
    (one that exists, or a value shaped like a path), --task csv/jsonl --train-file; for a near miss, the closest
    names; else every name."""
    folded = value.casefold()
    local = os.path.expanduser(value)
    if os.path.isdir(local):
        return (f"--task {value!r} is a folder, not a task: train on a CSV or JSON Lines file in it with --task csv "
                f"--train-file {shlex.quote(os.path.join(value, 'FILE.csv'))}")
    if os.path.isfile(local) or folded.endswith(DATA_SUFFIXES) or "/" in value or "\\" in value:
        kind = "jsonl" if folded.removesuffix(".gz").endswith((".jsonl", ".json", ".ndjson")) else "csv"
        what = "is a file" if os.path.isfile(local) else "looks like a file"
        return (f"--task {value!r} {what}, not a task: train on your own data with --task {kind} --train-file "
                f"{shlex.quote(value)}")
    if near := did_you_mean(value, TASKS):
        return f"unknown task {value!r}; {near} (tasks: {', '.join(TASKS)})"
    return f"unknown task {value!r}; choose one of {', '.join(TASKS)}"


class NameListError(ValueError):
    """A list option's value that is no list of names: `problem` says what is wrong, its hint how to write it."""

    def __init__(self, problem: Problem):
        super().__init__(problem)
        self.problem = problem


# The fix of a list of names given as a broken JSON list: the two ways to write one
NAME_LIST_FORMS = "write it as '[\"a\", \"b, c\"]' or comma-separated a,b"


def name_list(raw: str, flag: str) -> tuple[str, ...]:
    """A list option's names: comma-separated (`neg,pos`), or a JSON list for names that hold a comma
    (`'["no", "yes, definitely"]'`, the form a multi-label row's labels take in a JSON Lines file); a name with a
    comma could not be given at all. NameListError (a ValueError): what is wrong with a JSON list, with its fix."""
    if not raw.lstrip().startswith("["):
        return tuple(x.strip() for x in raw.split(",") if x.strip())
    try:
        names = json.loads(raw)
    except ValueError as e:
        raise NameListError(Problem(f"{flag} {raw!r} is not a valid JSON list ({e})", hint=NAME_LIST_FORMS)) from None
    if not isinstance(names, list) or not names or not all(isinstance(x, str) and x.strip() for x in names):
        raise NameListError(Problem(f"{flag} {raw!r} must be a JSON list of non-empty strings",
                                    hint=NAME_LIST_FORMS))
    return tuple(names)


def label_names(raw: str | None, problems: list[str]) -> tuple[str, ...]:
    """--label-names as a tuple (see name_list)."""
    if not raw:
        return ()
    try:
        return name_list(raw, "--label-names")
    except NameListError as e:
        problems.append(e.problem)
        return ()


def choice_problem(opt: Option, value: str) -> str:
    return choice_line(opt.flag, value, opt.choices or ())


def choice_line(flag: str, value: str, choices: Iterable[str]) -> str:
    """The one wording of a closed choice given wrong, the launcher's flags' too: `FLAG must be one of a, b, c; got
    'x'`, then what it most likely meant. (--severity said "..., ERROR, CRITICAL, got 'warn'", which reads as one
    more choice; tune's --search said "choose from", --dataset-config "is one of" with no word of what was given.)"""
    choices = list(choices)
    near = did_you_mean(value, choices)
    return f"{flag} must be one of {', '.join(choices)}; got {value!r}" + (f": {near}" if near else "")


def did_you_mean(value: str, choices: Iterable[str]) -> str | None:
    """"did you mean X?" (or "X, Y or Z?") for a value that is not one of a closed list of choices: the choice it
    names in another case, else the closest ones; None when none is close. One wording for every closed choice (the
    launcher's too): --precision and --cuda-graphs were refused by Typer as "'fp61' is not one of ..." with no way
    on, while --task said what was meant."""
    by_folded = {c.casefold(): c for c in choices}
    folded = value.strip().casefold()
    if folded in by_folded:
        close = [by_folded[folded]]
    else:
        close = [by_folded[c] for c in difflib.get_close_matches(folded, list(by_folded), n=3, cutoff=0.6)]
    if not close:
        return None
    return f"did you mean {' or '.join([', '.join(close[:-1]), close[-1]] if len(close) > 1 else close)}?"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ftcli_trainer.task",
        description="Fine-tune a transformer text classifier (the trainer ftcli runs locally and on Vertex).",
        epilog="Example: python -m ftcli_trainer.task --task csv --train-file train.csv "
        "--label-column label --epochs 2",
        allow_abbrev=False,
    )
    for opt in OPTIONS:
        if opt.type is bool:
            # On by default: --no-NAME turns it off (None when neither is given: the default).
            action = argparse.BooleanOptionalAction if opt.default else "store_true"
            parser.add_argument(opt.flag, dest=opt.name, action=action, default=None, help=opt.help)
            continue
        help_text = opt.help
        if opt.default is not None and "[default" not in help_text:
            help_text += f" [default: {opt.default}]"
        if opt.choices:
            help_text += f" {{{','.join(opt.choices)}}}"
        # Parsed as strings and converted below, so that every bad value is reported, not just the first.
        parser.add_argument(opt.flag, dest=opt.name, default=None, metavar=opt.metavar or opt.name.upper(),
                            help=help_text)
    for opt in OPTIONS:
        # Vertex's tuning service passes a trial's values as `--PARAMETER_ID VALUE` (its documented example:
        # `--learning_rate`), and a parameter id is the option's field name: accept that spelling too, unlisted.
        if "_" in opt.name:
            kwargs = dict(action="store_true", default=None) if opt.type is bool else dict(default=None)
            parser.add_argument(f"--{opt.name}", dest=opt.name, help=argparse.SUPPRESS, **kwargs)
    return parser


def parse_args(argv: list[str]) -> TrainConfig:
    """Parse and validate trainer arguments; raise ConfigError listing every problem."""
    parser = _parser()
    problems: list[str] = []
    namespace, unknown = parser.parse_known_args(argv)
    after_unknown_option = False
    for arg in unknown:
        if arg.startswith("-"):
            problems.append(f"unknown option {arg.split('=')[0]} (see --help)")
            after_unknown_option = "=" not in arg
        elif after_unknown_option:  # the unknown option's value: already reported with it
            after_unknown_option = False
        else:
            problems.append(f"unexpected argument {arg!r}")
    values: dict[str, Any] = {}
    for opt in OPTIONS:
        raw = getattr(namespace, opt.name)
        if opt.type is bool:
            values[opt.name] = opt.default if raw is None else bool(raw)
        elif raw is not None:
            values[opt.name] = _convert(opt, raw, problems)
    return resolve(values, problems)


def resolve(values: dict[str, Any], problems: list[str] | None = None) -> TrainConfig:
    """Fill task defaults into explicitly given values and check them together."""
    problems = list(problems or [])
    given = {k: v for k, v in values.items() if v is not None}
    task_name = given.get("task", BUNDLED_SAMPLE)
    task = TASKS.get(task_name)
    if task is None:
        problems.append(unknown_task(str(task_name)))
        task = TASKS[BUNDLED_SAMPLE]

    cfg: dict[str, Any] = {o.name: o.default for o in OPTIONS}
    cfg.update(
        model=task.default_model,
        epochs=task.default_epochs,
        learning_rate=task.default_learning_rate,
        max_length=task.default_max_length,
        text_column=task.text_column,
        text_pair_column=task.text_pair_column,
        label_column=task.label_column,
    )
    cfg.update(given)
    for name in ("output_dir", "train_file", "eval_file"):
        # `--output-dir=~/x` reaches here unexpanded (a shell expands ~ only at a word's start): one meaning
        # everywhere, not a check of $HOME/x and a write to ./~/x
        if isinstance(cfg[name], str) and cfg[name].startswith("~"):
            cfg[name] = os.path.expanduser(cfg[name])
    for opt in OPTIONS:
        # The launcher hands over closed choices as strings (Typer's own refusal said nothing of what was meant)
        if opt.choices and opt.name != "task" and opt.name in given and given[opt.name] not in opt.choices:
            problems.append(choice_problem(opt, str(given[opt.name])))
            cfg[opt.name] = opt.default
    cfg["label_names"] = label_names(cfg.pop("label_names"), problems)

    for opt in OPTIONS:
        v = cfg[opt.name]
        # The launcher hands over typed values: typer parses "nan" and "inf" into floats that every `<` passes.
        if opt.type is float and isinstance(v, float) and not math.isfinite(v):
            problems.append(f"{opt.flag} must be a finite number, got {v}")
            cfg[opt.name] = None
    if isinstance(cfg["seed"], int) and cfg["seed"] > MAX_SEED:
        problems.append(f"--seed must be at most {MAX_SEED}, got {cfg['seed']}")
    if cfg["output_dir"]:
        problems += output_dir_problems(cfg["output_dir"])

    def positive(name: str) -> None:
        v = cfg[name]
        if v is not None and v <= 0:
            problems.append(f"{OPTIONS_BY_NAME[name].flag} must be positive, got {v}")

    def non_negative(name: str) -> None:
        v = cfg[name]
        if v is not None and v < 0:
            problems.append(f"{OPTIONS_BY_NAME[name].flag} must be 0 or more, got {v}")

    def in_unit(name: str, *, zero_ok: bool) -> None:
        v = cfg[name]
        if v is None:
            return
        low_ok = v >= 0 if zero_ok else v > 0
        if not (low_ok and v <= 1):
            problems.append(f"{OPTIONS_BY_NAME[name].flag} must be in {'[0' if zero_ok else '(0'}, 1], got {v}")

    for name in ("epochs", "batch_size", "learning_rate", "max_length", "gradient_accumulation_steps",
                 "max_train_samples", "max_eval_samples"):
        positive(name)
    for name in ("weight_decay", "max_grad_norm", "eval_every", "save_every", "log_every", "seed", "early_stopping",
                 "early_stopping_threshold"):
        non_negative(name)
    in_unit("warmup_ratio", zero_ok=True)
    in_unit("fraction_of_train_data", zero_ok=False)
    in_unit("threshold", zero_ok=False)
    v = cfg["eval_fraction"]
    if v is not None and not 0 < v < 1:
        problems.append(f"--eval-fraction must be between 0 and 1 (exclusive), got {v}")
    if cfg["max_length"] is not None and cfg["max_length"] > 8192:
        problems.append(f"--max-length {cfg['max_length']} is larger than any supported model (8192)")

    problems += early_stopping_problems(cfg, given)
    if isinstance(cfg["early_stopping"], int) and cfg["early_stopping"] > 0:
        cfg["keep_best"] = True  # stopping early keeps the best evaluation, as HF requires load_best_model_at_end

    if given.get("max_train_samples") is not None and given.get("fraction_of_train_data") is not None:
        problems.append(Problem("--max-train-samples and --fraction-of-train-data both pick a subset",
                                 hint="give one of them"))
    if task.user_files and not cfg["train_file"]:
        problems.append(f"--task {task.name} needs --train-file PATH (CSV or JSON Lines, local or gs://)")
    if cfg["eval_file"] and not cfg["train_file"]:
        problems.append("--eval-file needs --train-file too")
    if given.get("eval_fraction") is not None and (cfg["eval_file"] or (not cfg["train_file"] and task.eval_splits)):
        # it was ignored: the share is held out only when there is no eval set
        where = "--eval-file" if cfg["eval_file"] else f"--task {task.name}'s own evaluation split"
        problems.append(Problem(f"--eval-fraction holds out training data when there is no eval set, but the eval "
                                f"set is {where}", hint="drop --eval-fraction"))
    if cfg["label_columns"] is not None:
        try:  # the names are matched against the data's columns later; a broken JSON list is refused here
            name_list(cfg["label_columns"], "--label-columns")
        except NameListError as e:
            problems.append(e.problem)
        if "label_column" in given:
            problems.append("--label-column (single-label) and --label-columns (multi-label) exclude each other")
        if task.labels and not task.user_files:
            problems.append(f"--label-columns is for multi-label csv/jsonl data, not --task {task.name}")
        if cfg["label_names"]:
            problems.append("--label-names is for single-label data; multi-label names come from --label-columns")
    if task.labels and cfg["label_names"] and not task.user_files:
        problems.append(Problem(f"--task {task.name} has fixed labels ({', '.join(task.labels)})",
                                hint="drop --label-names"))
    if task.regression:
        cfg["regression"] = True  # STS-B: the task decides, as it fixes the label set of the others
    elif cfg["regression"] and not task.user_files:
        problems.append(f"--regression is for csv/jsonl data; --task {task.name} has classes "
                        f"({', '.join(task.labels) or 'inferred'}), and stsb is regression already")
    if cfg["regression"]:
        if cfg["label_columns"] is not None:
            problems.append("--regression takes one number per row (--label-column), not --label-columns")
        if cfg["label_names"]:
            problems.append("--label-names names classes; a --regression target has none")
    # One column in two roles trains on the answer (the label read as text: accuracy 1.0 that predicts nothing) or
    # pairs a text with itself; the data would be read without a complaint.
    if cfg["text_pair_column"] and cfg["text_pair_column"] == cfg["text_column"]:
        problems.append(f"--text-pair-column {cfg['text_pair_column']!r} is the --text-column too: a pair needs "
                        "its second text from another column")
    if cfg["label_columns"] is None:
        for flag, col in (("--text-column", cfg["text_column"]), ("--text-pair-column", cfg["text_pair_column"])):
            if col and col == cfg["label_column"]:
                problems.append(Problem(f"{flag} {col!r} is the label column too: the model would read its label "
                                        "as text", hint=f"pass {flag} with the text's column (or --label-column "
                                                        "with the label's)"))
    if cfg["label_names"] and len(set(cfg["label_names"])) != len(cfg["label_names"]):
        problems.append("--label-names has duplicates")
    for name, (holds, noun, variable) in SECRET_OPTIONS.items():
        flag, value = OPTIONS_BY_NAME[name].flag, cfg.get(name)
        if not value or SECRET_NAME.fullmatch(value):
            continue
        if "/" in value:
            problems.append(Problem(f"{flag} {value!r} is not a Secret Manager secret's name",
                                    hint=f"give {flag} projects/PROJECT/secrets/NAME (optionally /versions/N)"))
        elif _bare_secret_id(value):
            problems.append(Problem(f"{flag} {value!r} is a secret's short name; the trainer reads a secret by its "
                                    "full name", hint=f"give {flag} projects/PROJECT/secrets/{value} (optionally "
                                                      "/versions/N)"))
        else:  # most likely the key or token itself: not repeated here, in a line that CI logs and issues keep
            problems.append(Problem(f"{flag} takes the name of the Secret Manager secret that holds {holds}, not "
                                    f"the {noun}",
                                    hint=f"store it there first (printf %s \"${variable}\" | gcloud secrets create "
                                         f"NAME --data-file=-), then give {flag} projects/PROJECT/secrets/NAME"))
    if cfg.get("wandb_secret") and not cfg.get("wandb_project"):
        problems.append(Problem("--wandb-secret is the key for --wandb-project, and no --wandb-project is given",
                                hint="add --wandb-project NAME"))
    metric = cfg.get("hypertune_metric")
    if metric is not None and not (metric.startswith("eval_") and metric[5:].replace("_", "").isalnum()):
        problems.append(f"--hypertune-metric {metric!r} is not an eval metric: name one of metrics.json's eval_* "
                        "keys, e.g. eval_accuracy or eval_macro_f1")
    agree = ("sentences_allagree", "sentences_75agree", "sentences_66agree", "sentences_50agree")
    if task.name == "financial" and cfg["dataset_config"] is not None and cfg["dataset_config"] not in agree:
        problems.append(choice_line("--dataset-config for financial", cfg["dataset_config"], agree))
    if cfg["dataset_config"] and task.hf_dataset is None:
        problems.append(f"--dataset-config applies to Hub datasets, not --task {task.name}")

    if problems:
        raise ConfigError(problems)
    return TrainConfig(**cfg)


def early_stopping_problems(cfg: dict[str, Any], given: dict[str, Any]) -> list[str]:
    """--early-stopping N that could never stop a run: with no --eval-every the run evaluates once per epoch, and a
    stop needs N + 1 evaluations (the best, then N without improvement) before the last one. (With --eval-every the
    count depends on the data's size: the trainer says so in a line.)"""
    patience, epochs, every = cfg.get("early_stopping"), cfg.get("epochs"), cfg.get("eval_every")
    if given.get("early_stopping_threshold") is not None and not patience:
        return ["--early-stopping-threshold applies to --early-stopping N: add it, or drop the threshold"]
    if not isinstance(patience, int) or patience <= 0 or not isinstance(epochs, int) or epochs <= 0 or every:
        return []
    if epochs >= patience + 2:
        return []
    plural = "s" if patience != 1 else ""
    times = "once" if epochs == 1 else f"{epochs} times"
    return [f"--early-stopping {patience} stops after {patience} evaluation{plural} in a row without improvement, "
            f"but --epochs {epochs} with no --eval-every evaluates {times} (at each epoch's end): it could never stop "
            f"the run early; add --eval-every N (optimizer steps), give --epochs {patience + 2} or more, or use "
            "--keep-best alone"]


def kept_train_rows(n: int, max_train_samples: int | None, fraction_of_train_data: float | None) -> int:
    """How many of `n` rows left to train on are trained on: --max-train-samples, or --fraction-of-train-data (not
    both); `n` when neither is given or the option asks for as many rows as there are (data.load_task_data then takes
    them all, in their order, as without it). Also what checkpoint.claim compares a resumed run's option by."""
    if max_train_samples is not None:
        return min(n, max_train_samples)
    if fraction_of_train_data is not None:
        return min(n, max(1, round(n * fraction_of_train_data)))
    return n


def steps_per_epoch(train_rows: int, batch_size: int, gradient_accumulation_steps: int, processes: int = 1) -> int:
    """The optimizer steps an epoch of `train_rows` examples takes, as the trainer plans them (data.plan_batches: a
    batch of batch_size x processes rows, the last one shorter; distributed.shard_batches drops a last one too small
    to give each process a row)."""
    rows_per_batch = batch_size * processes
    batches = -(-train_rows // rows_per_batch)
    if processes > 1 and 0 < train_rows % rows_per_batch < processes:
        batches -= 1
    return -(-batches // gradient_accumulation_steps)


def evaluation_count(steps: int, epochs: int, eval_every: int) -> int:
    """The evaluations of a run of `steps` optimizer steps an epoch: every `eval_every` steps and at each epoch's end,
    once where both fall on one step."""
    if not eval_every or steps <= 0:
        return epochs
    total = steps * epochs
    return total // eval_every + epochs - total // math.lcm(eval_every, steps)


def early_stopping_data_problem(cfg: TrainConfig, train_rows: int, processes: int | None = None) -> str:
    """--early-stopping N with --eval-every that this data can never stop early ("" when it can): a stop needs N + 1
    evaluations before the last. `processes` None: not known yet (`ftcli train`: more GPUs or machines make fewer,
    larger steps), so only what no number of them changes is refused: the count with one process, and every
    --eval-every multiple counted apart from the epoch ends, is at most that."""
    patience, every = cfg.early_stopping, cfg.eval_every
    if not patience or not every or train_rows <= 0:
        return ""  # (no --eval-every: early_stopping_problems, with no data)
    steps = steps_per_epoch(train_rows, cfg.batch_size, cfg.gradient_accumulation_steps, processes or 1)
    if processes is None:
        count, how = steps * cfg.epochs // every + cfg.epochs, "at most"
        per = f"{steps} step(s) an epoch with one GPU, fewer with more"
    else:
        count, how = evaluation_count(steps, cfg.epochs, every), "only"
        per = f"{steps} step(s) an epoch"
    if count >= patience + 2:
        return ""
    return (f"--early-stopping {patience} needs {patience + 1} evaluations before the last one, but this run "
            f"evaluates {how} {count} time(s) ({train_rows} training rows at --batch-size {cfg.batch_size}: {per}; "
            f"--eval-every {every}, --epochs {cfg.epochs}): it could never stop the run early; give a smaller "
            "--eval-every or more --epochs, or use --keep-best alone")


def output_dir_problems(output_dir: str) -> list[str]:
    """A local --output-dir must be a folder that can be written, or one that can be created: found now, not
    after the data and the model are loaded. Nothing is created here (a probe file is removed at once)."""
    from pathlib import Path

    if output_dir.startswith("gs://"):
        return []
    shown = f"--output-dir {output_dir}"
    path = Path(output_dir).expanduser()
    if path.exists() and not path.is_dir():
        return [f"{shown} is a file, not a folder"]
    # A file where the run writes a folder failed after the model had loaded (logs/), and --restart would have moved
    # the user's file aside with the run's folders.
    for sub in ("model", "checkpoints", "logs"):
        if (path / sub).exists() and not (path / sub).is_dir():
            return [f"{shown}: {path / sub} is a file, where the run writes its {sub}/ folder; "
                    "move the file away, or pick another --output-dir"]
    if (problem := cannot_write_in(path)) is not None:
        return [f"{shown}: {problem}" + ("; pick another folder" if problem.startswith("cannot write") else "")]
    return []


def cannot_write_in(path: Path) -> str | None:
    """Why the folder `path` (made where it is missing) cannot be written: its nearest existing ancestor is a file, or
    takes no new file (a probe file, removed at once); None where it can. Nothing is created."""
    import os
    import tempfile

    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        reason = os.strerror(e.errno) if e.errno else type(e).__name__
        return f"cannot write in {existing} ({reason})"
    return None


def to_argv(values: dict[str, Any]) -> list[str]:
    """The command line that makes `parse_args` see `values` (None, and a switch at its default, are left out)."""
    argv: list[str] = []
    for opt in OPTIONS:
        v = values.get(opt.name)
        if v is None:
            continue
        if opt.type is bool:
            if bool(v) != bool(opt.default):
                argv.append(opt.flag if v else "--no-" + opt.flag[2:])
        elif str(v).startswith("-"):
            # argparse reads a separate word that starts with '-' (a column '-score', --label-names -1,0,1) as an
            # option, and the job stopped with "expected one argument": the value rides in the flag's own word.
            argv.append(f"{opt.flag}={v}")
        else:
            argv += [opt.flag, str(v)]
    return argv
