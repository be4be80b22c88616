"""Shared fixtures: a tiny BERT built offline, small labelled data, the shared real data when present."""

from __future__ import annotations

import contextlib
import csv
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

# Before transformers is imported anywhere: never wait on the Hub from tests.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# Under pytest-xdist (-n auto: a worker per core), each worker's torch, and every trainer it starts, takes its share of
# the cores, not all of them: OpenMP threads of two workers contending for the same two cores made CPU-bound tests up
# to ten times slower (test_minilm_on_real_sst2_beats_chance: 10.6 s alone, 111 s beside another worker). Before
# torch is imported (it reads the variable once); a value set by hand is kept.
if _workers := os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // int(_workers))))

# The trainer makes torch's OpenMP threads wait passively when other work keeps the CPUs busy as it starts, and says
# so in a line (ftcli_trainer.cpu.wait_passively_if_busy): a test's output would depend on what else the machine runs.
# GNU OpenMP's own spin count, given, keeps the default behaviour and leaves the trainer's choice out; the tests of
# that choice take it out of their children's environment.
os.environ.setdefault("GOMP_SPINCOUNT", "300000")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

POSITIVE = ["good", "great", "wonderful", "excellent", "moving", "superb", "lovely", "brilliant"]
NEGATIVE = ["bad", "awful", "dull", "terrible", "boring", "lifeless", "poor", "dreadful"]
FILLER = ["the", "film", "movie", "was", "a", "really", "plot", "story", "acting", "quite", "and", "it", "this"]


def shared_data(*parts: str) -> Path:
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent (real data lives in ../shared/data)")
    return path


def sentiment_rows(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """Synthetic but learnable: the label is carried by sentiment words among filler."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.choice(["positive", "negative"])
        words = rng.sample(FILLER, 5) + rng.sample(POSITIVE if label == "positive" else NEGATIVE, 2)
        rng.shuffle(words)
        rows.append((" ".join(words), label))
    return rows


def write_csv(path: Path, header: list[str], rows: list) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer, hidden-32 BERT with a WordPiece tokenizer trained here: built offline in well under a second."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    out = tmp_path_factory.mktemp("tiny-bert")
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    corpus = [" ".join(POSITIVE + NEGATIVE + FILLER)] * 4 + [t for t, _ in sentiment_rows(200)]
    corpus += ["toxic insult threat obscene hate you are nice thanks for the edit wikipedia article page"]
    trainer = trainers.WordPieceTrainer(vocab_size=400, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tok.train_from_iterator(corpus, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    fast = BertTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                             sep_token="[SEP]", mask_token="[MASK]")
    fast.save_pretrained(out)
    config = BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    import torch

    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(out)
    return out


def build_tiny_decoder(out: Path, model_type: str) -> Path:
    """A 2-layer decoder with a classification-ready config of `model_type` and a byte-level BPE tokenizer, saved as a
    Hub checkpoint would be: GPT-2 and Llama with no padding token (tokenizer or config), Qwen2 with one in the
    tokenizer only (as Qwen2.5's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoConfig, AutoModel, GPT2Tokenizer, LlamaTokenizer, Qwen2Tokenizer

    specials = {"gpt2": ["<|endoftext|>"], "llama": ["<unk>", "<s>", "</s>"], "qwen2": ["<|endoftext|>"]}[model_type]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [" ".join(POSITIVE + NEGATIVE + FILLER)] * 4 + [t for t, _ in sentiment_rows(200)]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if model_type == "gpt2":
        fast = GPT2Tokenizer(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                             unk_token="<|endoftext|>")
        extra: dict = dict(n_embd=32, n_layer=2, n_head=2, n_positions=128, bos_token_id=0, eos_token_id=0)
    elif model_type == "llama":
        fast = LlamaTokenizer(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
        extra = dict(bos_token_id=1, eos_token_id=2)
    else:
        fast = Qwen2Tokenizer(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                              unk_token=None, bos_token=None)
        extra = dict(bos_token_id=0, eos_token_id=0)
    assert (fast.pad_token_id is None) == (model_type != "qwen2")
    fast.save_pretrained(out)
    if model_type != "gpt2":
        extra |= dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                      intermediate_size=64, max_position_embeddings=128)
    config = AutoConfig.for_model(model_type, vocab_size=tok.get_vocab_size(), pad_token_id=None, **extra)
    import torch

    torch.manual_seed(0)
    AutoModel.from_config(config).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_decoders(tmp_path_factory) -> dict[str, Path]:
    """Tiny GPT-2, Llama and Qwen2 base models (build_tiny_decoder), built offline once a session."""
    return {t: build_tiny_decoder(tmp_path_factory.mktemp(f"tiny-{t}"), t) for t in ("gpt2", "llama", "qwen2")}


@pytest.fixture
def sentiment_csv(tmp_path) -> tuple[Path, Path]:
    train = write_csv(tmp_path / "train.csv", ["text", "label"], sentiment_rows(240, seed=1))
    test = write_csv(tmp_path / "test.csv", ["text", "label"], sentiment_rows(60, seed=2))
    return train, test


@contextlib.contextmanager
def files_of_at_most(size: int) -> Iterator[None]:
    """A write that would take a file of this process past `size` bytes fails with EFBIG ("File too large"), as a
    full disk's fails with ENOSPC: like it, a failed write that names no file (RLIMIT_FSIZE, with SIGXFSZ ignored
    so that it is an error and not the end of the process; no tmpfs mount, no root). Skipped without them."""
    resource = pytest.importorskip("resource")
    import signal

    if not hasattr(signal, "SIGXFSZ"):
        pytest.skip("needs SIGXFSZ")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    before = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, before)


# A user's price file as most cost tests need it: on-demand rates for n1-standard-8 and T4 in us-central1.
T4_RATES = ('source = "my contract"\nread = 2026-11-02\n[us-central1.machines]\nn1-standard-8 = 0.5\n'
            '[us-central1.gpus]\nT4 = 0.25\n')


def use_price_file(tmp_path: Path, monkeypatch, text: str = T4_RATES) -> Path:
    """Write `text` as the user's price file (tmp_path/prices.toml) and point FTCLI_PRICES at it."""
    path = tmp_path / "prices.toml"
    path.write_text(text)
    monkeypatch.setenv("FTCLI_PRICES", str(path))
    return path


@contextlib.contextmanager
def fifo_read_at_most_for(path: Path, seconds: float = 5) -> Iterator[None]:
    """A named pipe made at `path` for the block, which a code path that reads it (and would wait for ever for a
    writer) is let go from after `seconds`: opened for writing and closed, so its reader sees the end of the file.
    The test then fails on what it got, rather than hanging the suite."""
    import threading

    os.mkfifo(path)
    done = threading.Event()

    def let_go() -> None:
        while not done.wait(seconds):
            with contextlib.suppress(OSError):  # ENXIO: no reader waits on it
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))

    thread = threading.Thread(target=let_go, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@pytest.fixture(autouse=True)
def _no_user_price_file(tmp_path, monkeypatch):
    """The developer's own config and prices.toml never change what a test sees: tests that want rates write one
    (or point FTCLI_CONFIG elsewhere). Nor does a test write the developer's state folder (the history, the upload
    sessions a big upload keeps)."""
    monkeypatch.delenv("FTCLI_PRICES", raising=False)
    monkeypatch.setenv("FTCLI_CONFIG", str(tmp_path / "user-config" / "config.toml"))
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "user-state"))


@pytest.fixture(autouse=True)
def _trainer_logger_as_it_was():
    """The trainer's main(), run in a test's own process, points the trainer's logger at that test's captured stdout,
    closed after it: a later test's pre-flight warnings went to the closed file ('--- Logging error ---')."""
    import logging

    log = logging.getLogger("ftcli_trainer")
    handlers, level, propagate = log.handlers[:], log.level, log.propagate
    yield
    log.handlers[:], log.level, log.propagate = handlers, level, propagate


# The emulators (real wire protocols): gcs (gcp-storage-emulator over HTTP), vertex (JobService over gRPC),
# cloud_logging (LoggingServiceV2 over gRPC).
from tests.emulators.fixtures import cloud_logging, gcs, hub, running_vertex, secret_manager, vertex  # noqa: E402, F401


@pytest.fixture
def cloud_env(tmp_path, monkeypatch, gcs, vertex):  # noqa: F811 - the fixtures imported above
    """ftcli pointed at the emulators, with its own empty config and history; bucket `ftcli-test` exists."""
    monkeypatch.setenv("FTCLI_VERTEX_ENDPOINT", vertex.endpoint)
    monkeypatch.setenv("FTCLI_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("FTCLI_PROJECT", "test-project")
    monkeypatch.setenv("FTCLI_BUCKET", "gs://ftcli-test/team")
    gcs.create_bucket("ftcli-test")
    return gcs, vertex
