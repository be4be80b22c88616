"""GPU benchmark (issue #13): ftcli's trainer, eager, with CUDA graphs, and with CUDA graphs and --gpu-warmup,
against the tuned Hugging Face Trainer, side by side on the GPU this machine has. Offline: model folders and data
come from local paths.

  python bench/gpu.py --assets .gpu --out OUT                  # a GPU machine; bench/gpu_device.sh wraps it
  python bench/gpu.py --assets .gpu --out /tmp/o --device cpu --rows 96 --tiny-bert   # CPU dry run of every path
  python bench/gpu.py ... --cases minilm_sst2_128 --contenders ftcli_graphs,ftcli_warm,hf --repeat 2 --skip-profile

`--assets` is what bench/prepare_gpu_assets.py builds: minilm/ (fp16 weights, loaded as float32 by both
contenders), bert-base/config.json (BERT-base is built here with a seeded random init, for speed only, with
MiniLM's tokenizer: the same uncased 30,522-token WordPiece vocabulary), data/*.csv.xz.

Sections run one after another, each in its own child process with its own time limit, so that one failure
or hang never loses the others; sections that no longer fit `--budget` seconds are skipped, and the table is
printed last whatever happened:
  env      GPU name, compute capability, memory, peak bf16 FLOP/s, versions
  setup    BERT-base with a seeded random init (when a selected case or the profile needs it), saved once for
           both contenders; parameter counts
  check    graph path vs eager over the same steps with dropout off (fp32 without TF32: tight; bf16: as
           trained), the same after `StaticSteps.prepare` (--gpu-warmup's warm-up and captures ahead, on filler
           rows that must change nothing; reported apart, where the trainer has it), the capture of the HF model
           with padded masks (no fallback), dropout masks that change at every replay with the eager keep rate
           (plain dropout and SDPA's attention dropout), and mean losses with dropout on (`--skip-check`: none)
  runs     per case, the contenders (`--contenders`, in that order), interleaved `--repeat` times:
             ftcli_graphs  ftcli --cuda-graphs on --no-gpu-warmup --no-weight-copies
             ftcli_warm    ftcli --cuda-graphs on --gpu-warmup --no-weight-copies (by default in the MiniLM case only)
             ftcli_copies  ftcli --cuda-graphs on --gpu-warmup --weight-copies: the trainer's defaults, the fused
                           projections included since 2026-11-28 (only when named in --contenders)
             ftcli_nofused  ftcli_copies with --no-fused-projections (the defaults before; only when named)
             ftcli_unmasked  ftcli_copies with --unmask-full-batches (only when named)
             ftcli_varlen  ftcli_copies with --varlen-attention (only when named)
             ftcli_shared  ftcli_copies with --shared-casts (only when named)
             ftcli_fp16    ftcli_copies in fp16 (--precision fp16: the loss scaler inside the graphs, what T4 and V100
                           would run; only when named)
             ftcli_fp16_eager  ftcli_eager in fp16 (only when named)
             hf            the HF Trainer tuned (bf16 or fp16 below compute capability 8.0, tf32, fused AdamW,
                           DataCollatorWithPadding(pad_to_multiple_of=8), 2 loader workers, random order)
             ftcli_eager   ftcli --cuda-graphs off
           same rows, model, batch 32, lr schedule (6 % warmup, linear decay), weight decay 0.01, clipping 1.0,
           1 epoch, seed; each run its own child
  profile  torch.profiler over BERT-base steps of 32 x 512 tokens (--profile-length), each mode in a child of its
           own (--profile-modes: eager, graphs, copies = graphs
           with --weight-copies, and copies with --unmask-full-batches, --varlen-attention, --shared-casts or the
           last two together, or with the model's layers torch.compile'd inside the captured step: compiled,
           compiled+varlen and compiled+unmasked; +eagerattn: their attention modules left out of the trace;
           +fusedqkv: query, key and value as one GEMM): top kernels, time by kind, GPU busy share, MFU of that fixed
           shape, and the warm-up steps' seconds (a compile included)

Reported per run: train samples/s (rows / train runtime, as each trainer reports it: ftcli from its loop's start
to its end less eval and checkpoints, HF from just before on_train_begin), start to fit (child start, imports
included, to ftcli's `Trainer.fit` or HF's `trainer.train()`), the warm-up seconds (`gpu_warmup` in ftcli's
results: prewarm while tokenizing + prepare in `fit`), fit to the first step (ms), the first 60 steps' mean step
time against the steady one (the second half of the run), end to end (child start to exported model and eval),
eval accuracy, and MFU = (6 x non-embedding parameters x real tokens + 12 x layers x hidden x sum of squared real
lengths) per second / peak bf16. All step marks are CUDA-synchronised (see StepTimer).

The first-60 mean is measured from the FIRST step's start, not from `fit`: ftcli_warm does its warm-up and
captures in `fit` before the first step, and counting them in the steps would mix two questions. That is honest
only because the warm-up seconds, fit-to-first-step and the end-to-end time stand beside it in the table: a
warm-up that only moves time out of the first steps shows there. HF's first step starts at its first
on_epoch_begin (its loader workers' start and first batch are in its first step, as ftcli's collation is in its).

With --repeat N the results keep every run (`sections["case/contender#k"]`, k = 1..N; one run: `case/contender`)
and the table shows medians (the range in brackets), with ratios to HF paired within a repetition (the median of
the paired ratios), and a line per case comparing ftcli_warm with ftcli_graphs the same way.
OUT gets results.json (everything), children.log (every child's output), table.md and profile.txt.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import lzma
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

T_START = time.perf_counter()
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # the trainer from this checkout, installed or not
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

CASES = {  # name -> model, data, rows, max length, learning rate
    "minilm_sst2_128": dict(model="minilm", data="sst2", rows=20000, max_length=128, lr=1e-4),
    "bert_sst2_128": dict(model="bert-base", data="sst2", rows=10000, max_length=128, lr=5e-5),
    "bert_imdb_512": dict(model="bert-base", data="imdb", rows=7500, max_length=512, lr=5e-5),
}
# In the order they run within a repetition: the graph path first (the headline), the HF Trainer, eager last
# (the slowest, known from the issue). ftcli_graphs is the graph path alone, ftcli_warm adds --gpu-warmup,
# ftcli_copies --weight-copies too (both the trainer's defaults since the H100 runs, and with them the fused
# projections since 2026-11-28), ftcli_nofused the copies without the fused projections, ftcli_unmasked adds
# --unmask-full-batches, ftcli_varlen --varlen-attention, ftcli_shared --shared-casts.
CONTENDERS = ("ftcli_graphs", "ftcli_warm", "ftcli_copies", "ftcli_nofused", "ftcli_unmasked", "ftcli_varlen",
              "ftcli_shared", "hf", "ftcli_eager", "ftcli_fp16", "ftcli_fp16_eager")
# Each contender against the one it adds a switch to: the paired notes under the table
PAIRED = (("ftcli_graphs", "ftcli_warm"), ("ftcli_warm", "ftcli_copies"), ("ftcli_nofused", "ftcli_copies"),
          ("ftcli_copies", "ftcli_unmasked"),
          ("ftcli_copies", "ftcli_varlen"), ("ftcli_copies", "ftcli_shared"), ("ftcli_fp16_eager", "ftcli_fp16"))
NAMED_ONLY = ("ftcli_copies", "ftcli_nofused", "ftcli_unmasked", "ftcli_varlen", "ftcli_shared", "ftcli_fp16",
              "ftcli_fp16_eager")  # run only when named
# Without --contenders: ftcli_warm only where its question is open (the MiniLM case: short steps, where the
# first-use costs weigh most), so that the default full run keeps to its budget.
DEFAULT_CONTENDERS = {"minilm_sst2_128": tuple(c for c in CONTENDERS if c not in NAMED_ONLY)}
BATCH = 32
# The profile's modes: name -> (--cuda-graphs, more trainer flags)
PROFILE_MODES = {"eager": ("off", []), "graphs": ("on", ["--no-weight-copies"]), "copies": ("on", ["--weight-copies"]),
                 "nofused": ("on", ["--weight-copies", "--no-fused-projections"]),
                 "unmasked": ("on", ["--weight-copies", "--unmask-full-batches"]),
                 "varlen": ("on", ["--weight-copies", "--varlen-attention"]),
                 "shared": ("on", ["--weight-copies", "--shared-casts"]),
                 "varlen+shared": ("on", ["--weight-copies", "--varlen-attention", "--shared-casts"]),
                 # the layers torch.compile'd inside the captured step (Trainer.compile_in_graphs: one dynamic-shape
                 # compile of one layer's code serves all twelve and every width), alone and with varlen attention
                 # (the layers break at the attention: SDPA, or varlen's flash call, runs as it is, untraced)
                 "compiled": ("on", ["--weight-copies"]),
                 "compiled+varlen": ("on", ["--weight-copies", "--varlen-attention"]),
                 "compiled+unmasked": ("on", ["--weight-copies", "--unmask-full-batches"]),
                 # and the whole self-attention module (projections, attention, heads merged) left out of the trace
                 "compiled+varlen+eagerattn": ("on", ["--weight-copies", "--varlen-attention"]),
                 "compiled+unmasked+eagerattn": ("on", ["--weight-copies", "--unmask-full-batches"]),
                 # query, key and value as one GEMM on the weight copies (WeightCopies.fuse_projections; in the
                 # profile only with +fusedqkv, while a run takes them by default); compiled, they leave the
                 # attention modules out of the trace themselves (+eagerattn implied)
                 "copies+fusedqkv": ("on", ["--weight-copies"]),
                 "compiled+fusedqkv": ("on", ["--weight-copies"]),
                 "compiled+unmasked+fusedqkv": ("on", ["--weight-copies", "--unmask-full-batches"]),
                 "compiled+varlen+fusedqkv": ("on", ["--weight-copies", "--varlen-attention"]),
                 "compiled+unmasked+eagerattn+fusedqkv": ("on", ["--weight-copies", "--unmask-full-batches"])}
FIRST = 60
SEED = 42
IMDB_EVAL = 500
# Dense bf16 tensor-core peaks (NVIDIA data sheets), by the first name fragment that matches.
PEAK_TFLOPS = (("H200", 989.4), ("GH200", 989.4), ("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.4),
               ("H800", 989.4), ("B200", 2250.0), ("A100", 312.0), ("A800", 312.0), ("L40S", 362.1),
               ("L4", 121.0), ("A10G", 70.0), ("T4", 65.0), ("V100", 125.0))
TINY_BERT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)


# ----------------------------------------------------------------------------------------------------------
# helpers shared by children


def emit(result: dict) -> None:
    print("RESULT " + json.dumps(result, default=str), flush=True)


def work_dir(args) -> Path:
    return Path(args.work)


def read_csv(path: Path) -> tuple[list[str], list[int]]:
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    with opener(path, "rt", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [r["text"] for r in rows], [int(r["label"]) for r in rows]


def model_dir(args, name: str) -> Path:
    return Path(args.assets) / "minilm" if name == "minilm" else work_dir(args) / "bert-base"


def sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


class StepTimer:
    """CUDA-synchronised marks (five syncs a run, none inside the steady steps): `begin` where training is
    entered (ftcli: `Trainer.fit` is called; HF: just before `trainer.train()`), `first_step` where the first
    step starts, then after step FIRST, after the middle step and after the last (`tick`). So

      fit_to_first_ms  = begin -> first step's start: ftcli's resume check, static buffers and, with
                         --gpu-warmup, `StaticSteps.prepare` (every width's warm-up and capture); HF's
                         dataloader, optimizer and accelerate set-up;
      first_ms         = the first step's start -> the end of step FIRST, over FIRST steps;
      steady_ms        = the end of the middle step -> the end of the last, over the second half.

    first_ms starts at the first step, not at `fit`, so that a warm-up run before the training clock is not
    counted in the steps' mean; the seconds it took are reported beside it (`fit_to_first_ms`, and the
    results' `gpu_warmup` seconds) and are in the end-to-end time, so nothing is hidden."""

    def __init__(self, device: str):
        self.device = device
        self.n = 0
        self.total = 0
        self.first = 0
        self.mid = 0
        self.marks: dict = {}

    def begin(self, total: int) -> None:
        sync(self.device)
        self.marks = {"begin": time.perf_counter()}
        self.set_total(total)

    def set_total(self, total: int) -> None:
        self.total = total
        self.first = min(FIRST, total)
        self.mid = max(self.first, total // 2)

    def first_step(self) -> None:
        """Called before every step; marks (after a sync) only the first."""
        if 0 not in self.marks:
            sync(self.device)
            self.marks[0] = time.perf_counter()

    def tick(self) -> None:
        self.n += 1
        if self.n in (self.first, self.mid, self.total):
            sync(self.device)
            self.marks[self.n] = time.perf_counter()

    def report(self) -> dict:
        m = self.marks
        out: dict = {"steps": self.n}
        if "begin" in m:
            out["start_to_fit_s"] = m["begin"] - T_START
            if 0 in m:
                out["fit_to_first_ms"] = 1000 * (m[0] - m["begin"])
        if self.first in m and 0 in m and self.first:
            out["first_steps"] = self.first
            out["first_ms"] = 1000 * (m[self.first] - m[0]) / self.first
        if self.total in m and self.mid in m and self.total > self.mid:
            out["steady_ms"] = 1000 * (m[self.total] - m[self.mid]) / (self.total - self.mid)
        if "first_ms" in out and "steady_ms" in out:
            out["first_over_steady"] = out["first_ms"] / out["steady_ms"]
        return out


def flops_of(lengths, n_nonembed: int, layers: int, hidden: int) -> float:
    import numpy as np

    lengths = np.asarray(lengths, dtype=np.float64)
    return 6.0 * n_nonembed * lengths.sum() + 12.0 * layers * hidden * (lengths ** 2).sum()


# ----------------------------------------------------------------------------------------------------------
# children


def child_env(args) -> dict:
    import platform

    import torch
    import transformers

    out = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
           "transformers_path": str(Path(transformers.__file__).parent), "cuda": torch.version.cuda,
           "cpus": os.cpu_count()}
    if args.device == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        name = torch.cuda.get_device_name(0)
        out.update(gpu=name, capability=list(torch.cuda.get_device_capability(0)),
                   memory_gib=round(props.total_memory / 2**30, 1), sms=props.multi_processor_count)
        peak = args.peak_tflops or next((p for frag, p in PEAK_TFLOPS if frag in name), None)
        out["peak_tflops"] = peak
    else:
        out.update(gpu="cpu", capability=None, peak_tflops=args.peak_tflops)
    try:
        import tokenizers

        out["tokenizers"] = tokenizers.__version__
    except ImportError:
        pass
    return out


def selected_cases(args) -> list[str]:
    return [c for c in CASES if not args.cases or c in args.cases.split(",")]


def needs_bert(args) -> bool:
    return not args.skip_profile or any(CASES[c]["model"] == "bert-base" for c in selected_cases(args))


def child_setup(args) -> dict:
    """BERT-base with a seeded random init, saved once (fp32) with MiniLM's tokenizer, when a selected case or
    the profile needs it; parameter counts."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    out = work_dir(args) / "bert-base"
    model = None
    if needs_bert(args):
        cfg = AutoConfig.from_pretrained(Path(args.assets) / "bert-base", num_labels=2)
        if args.tiny_bert:
            for k, v in TINY_BERT.items():
                setattr(cfg, k, v)
        torch.manual_seed(SEED)
        model = AutoModelForSequenceClassification.from_config(cfg)
        model.save_pretrained(out)
        AutoTokenizer.from_pretrained(Path(args.assets) / "minilm").save_pretrained(out)
    counts = {}
    for name in ("minilm", "bert-base"):
        if name == "bert-base" and model is None:
            continue
        c = AutoConfig.from_pretrained(model_dir(args, name))
        m = model if name == "bert-base" else AutoModelForSequenceClassification.from_pretrained(
            model_dir(args, name), dtype=torch.float32)
        n_all = sum(p.numel() for p in m.parameters())
        n_emb = sum(p.numel() for n, p in m.named_parameters() if ".embeddings." in f".{n}")
        counts[name] = {"params": n_all, "nonembed": n_all - n_emb, "layers": c.num_hidden_layers,
                        "hidden": c.hidden_size}
    return {"models": counts, "bert_dir": str(out) if model is not None else None}


def _case_files(args, case: str) -> tuple[Path, Path]:
    d = work_dir(args) / case
    return d / "train.csv", d / "eval.csv"


def child_ftcli(args, case: str, contender: str) -> dict:
    """ftcli_eager: --cuda-graphs off; ftcli_graphs: on, --no-gpu-warmup; ftcli_warm: on with --gpu-warmup (the
    first-use costs paid while the CPU tokenizes, every width warmed up and captured in `fit` before the training
    clock); ftcli_copies: ftcli_warm reading bf16 copies of the Linear weights (--weight-copies), the fused
    projections with them; ftcli_nofused: without those."""
    import ftcli_trainer.loop as loop
    from ftcli_trainer import task
    from ftcli_trainer.config import parse_args

    spec = CASES[case]
    train, evalf = _case_files(args, case)
    out = work_dir(args) / case / contender
    shutil.rmtree(out, ignore_errors=True)
    timer = StepTimer(args.device)
    seen: dict = {}
    orig_fit, orig_step = loop.Trainer.fit, loop.Trainer.train_step

    def fit(self):
        seen["trainer"] = self
        timer.begin(self.total_steps)
        return orig_fit(self)

    def train_step(self, group, global_group=None):
        timer.first_step()
        orig_step(self, group, global_group)
        timer.tick()

    loop.Trainer.fit, loop.Trainer.train_step = fit, train_step
    eager = contender in ("ftcli_eager", "ftcli_fp16_eager")
    argv = [
        "--task", "csv", "--train-file", str(train), "--eval-file", str(evalf),
        "--model", str(model_dir(args, spec["model"])),
        "--epochs", "1", "--batch-size", str(BATCH), "--learning-rate", str(spec["lr"]), "--warmup-ratio", "0.06",
        "--weight-decay", "0.01", "--max-grad-norm", "1.0", "--max-length", str(spec["max_length"]),
        "--seed", str(SEED), "--output-dir", str(out), "--label-names", "0,1", "--log-every", "1000000",
        "--cuda-graphs", "off" if eager else "on", *(["--precision", "fp16"] if "fp16" in contender else []),
    ]
    if not eager:  # the graph path with --gpu-warmup (ftcli_graphs: without) and its mode's flags
        mode = ("graphs" if contender in ("ftcli_graphs", "ftcli_warm") else
                "copies" if contender == "ftcli_fp16" else contender.removeprefix("ftcli_"))
        argv += ["--no-gpu-warmup" if contender == "ftcli_graphs" else "--gpu-warmup", *PROFILE_MODES[mode][1]]
    cfg = parse_args(argv)
    task._setup_logging()
    r = task.run(cfg)
    t = seen["trainer"]
    lengths = t.train_enc.lengths
    res = {
        "train_samples_per_second": r["train_samples"] / r["train_runtime"],
        "train_runtime": r["train_runtime"], "rows": r["train_samples"], "eval_accuracy": r["eval_accuracy"],
        "train_loss": r.get("train_loss"), "eval_loss": r.get("eval_loss"),
        "attention": r.get("attention"),  # (from the run's metrics.json: what ran)
        "eval_seconds": r["eval_runtime"], "pad_fraction": r["train_pad_fraction"], "precision": r["precision"],
        "sum_len": int(lengths.sum()), "sum_len2": int((lengths.astype("int64") ** 2).sum()), **timer.report(),
    }
    warm = r.get("gpu_warmup")  # only where the warm-up ran (a CUDA GPU with the graph path)
    if warm:
        res["gpu_warmup"] = warm
    ss = t.static_steps
    if ss is not None:
        res["graphs"] = ss.report()
        if ss.shared_casts is not None:
            res["shared_casts"] = {"made": ss.shared_casts.made, "reused": ss.shared_casts.reused}
    shutil.rmtree(out, ignore_errors=True)  # BERT-base: 0.4 GB model + 1.3 GB checkpoint per run
    return res


def child_hf(args, case: str) -> dict:
    import numpy as np
    import torch
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    spec = CASES[case]
    train_path, eval_path = _case_files(args, case)
    texts, labels = read_csv(train_path)
    eval_texts, eval_labels = read_csv(eval_path)
    mdir = model_dir(args, spec["model"])
    tok = AutoTokenizer.from_pretrained(mdir)

    def dataset(t, y):
        enc = tok(t, truncation=True, max_length=spec["max_length"])
        keys = list(enc.keys())
        return [{**{k: enc[k][i] for k in keys}, "labels": y[i]} for i in range(len(t))]

    train = dataset(texts, labels)
    evald = dataset(eval_texts, eval_labels)
    torch.manual_seed(SEED)
    # dtype explicit: transformers 5 would otherwise train the fp16 checkpoint in fp16.
    model = AutoModelForSequenceClassification.from_pretrained(mdir, num_labels=2, dtype=torch.float32,
                                                               attn_implementation="sdpa")
    cuda = args.device == "cuda" and torch.cuda.is_available()
    cc = torch.cuda.get_device_capability(0) if cuda else (0, 0)
    timer = StepTimer(args.device)

    class Timing(TrainerCallback):
        """on_epoch_begin (the first) comes just before HF creates the dataloader iterator and fetches the first
        batch: the loader workers' start and that batch's collation are part of HF's first step, as ftcli's
        collation is of its (on_step_begin would come after them). `first_batch_ms` keeps that share."""

        def on_train_begin(self, targs, state, control, **kw):
            timer.set_total(state.max_steps)

        def on_epoch_begin(self, targs, state, control, **kw):
            timer.first_step()

        def on_step_begin(self, targs, state, control, **kw):
            if "first_batch" not in timer.marks:
                sync(args.device)
                timer.marks["first_batch"] = time.perf_counter()

        def on_step_end(self, targs, state, control, **kw):
            timer.tick()

    steps = math.ceil(len(train) / BATCH)
    out = work_dir(args) / case / "hf"
    shutil.rmtree(out, ignore_errors=True)
    targs = TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=BATCH, per_device_eval_batch_size=BATCH * 2,
        learning_rate=spec["lr"], weight_decay=0.01, warmup_steps=math.ceil(steps * 0.06), num_train_epochs=1,
        lr_scheduler_type="linear", optim="adamw_torch_fused", max_grad_norm=1.0, seed=SEED, save_strategy="no",
        eval_strategy="no", report_to="none", logging_steps=10**9, disable_tqdm=True, use_cpu=not cuda,
        bf16=cuda and cc >= (8, 0), fp16=cuda and cc < (8, 0), tf32=True if cuda and cc >= (8, 0) else None,
        dataloader_num_workers=2, train_sampling_strategy="random",
    )
    trainer = Trainer(model=model, args=targs, train_dataset=train,
                      data_collator=DataCollatorWithPadding(tok, pad_to_multiple_of=8), callbacks=[Timing()])
    timer.begin(steps)
    r = trainer.train()
    trainer.save_model(str(out / "model"))
    t = time.perf_counter()
    pred = trainer.predict(evald)
    acc = float((np.argmax(pred.predictions, axis=-1) == np.array(eval_labels)).mean())
    lengths = np.array([len(x["input_ids"]) for x in train], dtype=np.int64)
    runtime = r.metrics["train_runtime"]
    shutil.rmtree(out, ignore_errors=True)
    m = timer.marks
    first_batch = {"first_batch_ms": 1000 * (m["first_batch"] - m[0])} if "first_batch" in m and 0 in m else {}
    return {"train_samples_per_second": len(train) / runtime, "train_runtime": runtime, "rows": len(train),
            "eval_accuracy": acc, "eval_seconds": time.perf_counter() - t,
            "precision": "bf16" if targs.bf16 else ("fp16" if targs.fp16 else "fp32"),
            "sum_len": int(lengths.sum()), "sum_len2": int((lengths ** 2).sum()), **timer.report(), **first_batch}


def _check_trainers(args, enc, groups, precision: str, dropout: bool, prepared: bool = False,
                    copies: bool = False) -> dict:
    """The same steps, eager and through the graph path, from the same weights; per-step mean losses. With
    `prepared`, a third copy runs the graph path after `StaticSteps.prepare(widths)` (what `--gpu-warmup` does
    in `fit`: every width warmed up on filler rows and captured, the optimizer update too) and must make the
    same steps as eager: the filler rows must change nothing. With `copies`, another runs the graph path with
    --weight-copies, whose weights must be those of the graph path's bit for bit (the same bf16 operands)."""
    import copy

    import torch

    from ftcli_trainer import cuda_graphs
    from ftcli_trainer.config import parse_args
    from ftcli_trainer.loop import Paths, Trainer
    from ftcli_trainer.model import load_model

    dev = torch.device(args.device)
    torch.manual_seed(SEED)
    base = load_model(str(model_dir(args, "minilm")), ["0", "1"], False, 0.5)
    if not dropout:
        base.config.hidden_dropout_prob = base.config.attention_probs_dropout_prob = 0.0
        for m in base.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
    base.to(dev)
    out: dict = {}
    models = {}

    def steps(mode: str):
        cfg = parse_args(["--task", "csv", "--train-file", "unused.csv", "--batch-size", str(BATCH),
                          "--learning-rate", "1e-4", "--warmup-ratio", "0.06",
                          "--cuda-graphs", "off" if mode == "off" else "on", "--precision", precision,
                          "--weight-copies" if mode == "copies" else "--no-weight-copies"])
        model = copy.deepcopy(base)
        tmp = work_dir(args) / "check" / f"{precision}-{mode}"
        t = Trainer(cfg, model, enc, {}, ["0", "1"], False, dev, precision, Paths("m", "c", "l", tmp), 0)
        t._loss_total, t._loss_count, t._loss_acc_n = 0.0, 0, 0
        t._loss_acc = torch.zeros((), device=dev)
        if mode != "off" and not t.use_graphs:  # a CPU dry run: the same fixed-shape steps, run eagerly
            t._setup_static_steps(capture=False)
        else:
            t._setup_static_steps()
        model.train()
        info: dict = {}
        if mode == "prepared":
            ss = t.static_steps
            widths = sorted({cuda_graphs.bucket_for(int(max(enc.lengths[idx].max() for idx in g)), ss.widths)
                             for g in groups})
            sync(args.device)
            t0 = time.perf_counter()
            ss.prepare(widths)
            sync(args.device)
            info = {"widths": widths, "prepare_seconds": time.perf_counter() - t0,
                    "counts_after_prepare": dict(ss.counts)}
            model.train()
        losses = []
        torch.manual_seed(SEED + 1)  # all paths start their dropout streams from the same state
        for g in groups:
            t.train_step(g)
            losses.append(t._loss_acc.item() / sum(len(b) for b in g))
            t._loss_acc.zero_()
        if t.static_steps is not None:
            info["graphs"] = t.static_steps.report()
        return model, losses, info

    for mode in ("off", "on"):
        models[mode], out[mode], info = steps(mode)
        if "graphs" in info:
            out["graphs"] = info["graphs"]
    if prepared:  # its failure is reported on its own and never hides the graph-vs-eager result
        try:
            models["prepared"], losses, info = steps("prepared")
            before, after = info["counts_after_prepare"], info["graphs"]
            info.update(losses=losses, steps_all_replays=after["captured"] == before["captured"]
                        and after["eager"] == before["eager"])
            out["prepared"] = info
        except Exception as e:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            out["prepared"] = {"error": f"{type(e).__name__}: {str(e).strip()[:300]}"}

    if copies:
        try:
            models["copies"], losses, info = steps("copies")
            info.update(losses=losses, identical_weights=all(
                torch.equal(p, q) for p, q in zip(models["on"].parameters(), models["copies"].parameters(),
                                                  strict=True)),
                identical_losses=losses == out["on"])
            out["copies"] = info
        except Exception as e:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            out["copies"] = {"error": f"{type(e).__name__}: {str(e).strip()[:300]}"}

    def l2(a, b) -> float:
        # L2 over all weights: Adam turns the rounding noise of gradients that are 0 in exact arithmetic
        # (attention key biases: softmax ignores a shift shared by all keys) into lr-sized steps of either
        # sign, so an elementwise maximum would measure that noise, not the paths.
        return sum(float((p.detach() - q.detach()).double().pow(2).sum())
                   for p, q in zip(a.parameters(), b.parameters(), strict=True)) ** 0.5

    def rel(x: list[float], y: list[float]) -> float:
        return max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(x, y, strict=True))

    moved = l2(models["off"], base)
    out["max_rel_loss_diff"] = rel(out["off"], out["on"])
    out["param_gap_over_update"] = l2(models["off"], models["on"]) / max(moved, 1e-30)
    if "prepared" in models:
        out["prepared"]["max_rel_loss_diff"] = rel(out["off"], out["prepared"]["losses"])
        out["prepared"]["param_gap_over_update"] = l2(models["off"], models["prepared"]) / max(moved, 1e-30)
    out["mean_loss_eager"] = sum(out["off"]) / len(groups)
    out["mean_loss_graphs"] = sum(out["on"]) / len(groups)
    return out


def _dropout_replays() -> dict:
    """Plain dropout and SDPA attention dropout captured in a graph: fresh masks at each replay, keep rate 0.9."""
    import torch
    import torch.nn.functional as F

    x = torch.ones(1 << 22, device="cuda")
    out = torch.empty_like(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            out.copy_(F.dropout(x, 0.1))
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out.copy_(F.dropout(x, 0.1))
    masks = []
    for _ in range(3):
        g.replay()
        masks.append(out != 0)
    keep = [m.float().mean().item() for m in masks]
    differ = (masks[0] != masks[1]).float().mean().item()
    q, k, v = (torch.randn(32, 12, 128, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mask = torch.ones(32, 1, 128, 128, dtype=torch.bool, device="cuda")
    mask[:, :, :, 100:] = False
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    att = torch.empty_like(ref)
    with torch.cuda.stream(s):
        for _ in range(2):
            att.copy_(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1))
    torch.cuda.current_stream().wait_stream(s)
    g2 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g2):
        att.copy_(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1))
    g2.replay()
    a1 = att.clone()
    g2.replay()
    a2 = att.clone()
    return {"keep_rates": keep, "masks_differ": differ, "attention_replays_differ": (a1 != a2).float().mean().item(),
            "attention_mean_ratio": (a1.float().mean() / ref.float().mean()).item(),
            "ok": all(abs(r - 0.9) < 0.002 for r in keep) and abs(differ - 0.18) < 0.004
            and (a1 != a2).float().mean().item() > 0.05}


def child_check(args) -> dict:
    import numpy as np

    from ftcli_trainer.data import Examples, encode, plan_batches
    from ftcli_trainer.model import load_tokenizer

    texts, labels = read_csv(_case_files(args, "minilm_sst2_128")[0])
    n = min(len(texts), BATCH * args.check_steps)
    tok = load_tokenizer(str(model_dir(args, "minilm")))
    enc = encode(tok, Examples(texts[:n], None, np.array(labels[:n])), 128)
    groups = [[b] for b in plan_batches(enc.lengths, BATCH, SEED, 0)]
    import torch

    out: dict = {}

    def part(name, fn):  # one failing part never hides the others
        try:
            out[name] = fn()
        except Exception as e:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            out[name] = {"error": f"{type(e).__name__}: {str(e).strip()[:300]}"}

    cuda = args.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 compared tightly: no TF32 on either side
    part("fp32", lambda: _check_trainers(args, enc, groups, "fp32", dropout=False, prepared=True))
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
    if not cuda or torch.cuda.get_device_capability(0) >= (8, 0):  # (a CPU dry run: bf16 autocast on the CPU)
        part("bf16", lambda: _check_trainers(args, enc, groups, "bf16", dropout=False, prepared=True, copies=True))
        part("bf16_dropout", lambda: _check_trainers(args, enc, groups, "bf16", dropout=True, copies=True))
    if cuda:
        part("dropout_replays", _dropout_replays)
    fp32 = out["fp32"]
    ok = "error" not in fp32 and fp32["max_rel_loss_diff"] < 1e-4 and fp32["param_gap_over_update"] < 1e-2
    if "bf16" in out:
        ok = ok and "error" not in out["bf16"] and out["bf16"]["max_rel_loss_diff"] < 3e-2
    if "dropout_replays" in out:
        ok = ok and out["dropout_replays"].get("ok", False)
    graphs = fp32.get("graphs", {})
    if args.device == "cuda":
        ok = ok and graphs.get("captured", 0) >= 2 and graphs.get("replays", 0) > 0 and graphs.get("still_capturing")
    out["ok"] = bool(ok)
    # --gpu-warmup's StaticSteps.prepare: the same steps as eager after it (None where no check part ran it)
    prep = [(k, out[k].get("prepared")) for k in ("fp32", "bf16") if isinstance(out.get(k), dict)]
    prep = [(k, v) for k, v in prep if v]
    if prep:
        limits = {"fp32": (1e-4, 1e-2), "bf16": (3e-2, float("inf"))}
        out["prepared_ok"] = all("error" not in v and v["max_rel_loss_diff"] < limits[k][0]
                                 and v["param_gap_over_update"] < limits[k][1] for k, v in prep)
    else:
        out["prepared_ok"] = None
    # --weight-copies: bit-identical to the graph path's casts (None where no bf16 part ran it)
    cop = [out[k].get("copies") for k in ("bf16", "bf16_dropout") if isinstance(out.get(k), dict)]
    cop = [v for v in cop if v]
    out["copies_ok"] = all(v.get("identical_weights") and v.get("identical_losses") for v in cop) if cop else None
    return out


# First match wins: attention before GEMM, whose "sm90_" would also match cuDNN's SDPA kernels
# (cudnn_generated_fort_native_sdpa_sm90_flash_...), which the H200 profile above counted as GEMMs. Inductor's
# kernels before both: a fused one is named after everything in it (triton_per_fused_add_..._layer_norm).
_KINDS = (("fused (inductor)", ("triton_per_", "triton_poi_", "triton_red_")),
          ("attention", ("fmha", "flash", "attention", "efficient", "cudnn_generated", "sdpa")),
          ("GEMM", ("gemm", "cutlass", "xmma", "sm90_", "sm80_", "gemv", "cublas", "matmul", "nvjet", "triton_tem_")),
          ("optimizer", ("adam", "multi_tensor")),
          ("layernorm", ("layer_norm", "layernorm")),
          ("dropout", ("dropout", "philox", "bernoulli")),
          ("gelu/softmax/loss", ("gelu", "softmax", "cross_entropy", "nll_loss", "log_softmax")),
          ("copies/fills", ("memcpy", "memset", "copy_", "fill")),
          ("reductions", ("reduce", "norm")),
          ("elementwise", ("elementwise", "vectorized", "unrolled")))


def _kind(name: str) -> str:
    low = name.lower()
    return next((kind for kind, keys in _KINDS if any(k in low for k in keys)), "other")


def child_profile(args, setup: dict) -> dict:
    """BERT-base steps over 32 full rows of --profile-length tokens (512: the widest shape), in each of
    --profile-modes (the rows are IMDB reviews cut at that length)."""
    import numpy as np
    import torch

    from ftcli_trainer.data import Examples, encode
    from ftcli_trainer.model import load_tokenizer

    texts, labels = read_csv(Path(args.assets) / "data" / "imdb_8k.csv.xz")
    tok = load_tokenizer(str(model_dir(args, "bert-base")))
    max_len = min(args.profile_length, 128) if args.tiny_bert else args.profile_length
    enc = encode(tok, Examples(texts[:3000], None, np.array(labels[:3000])), max_len)  # ~14 % fill 512 tokens
    rows = np.flatnonzero(enc.lengths == max_len)[: BATCH * 12]
    if len(rows) < BATCH * 6:
        return {"skipped": f"only {len(rows)} rows of {max_len} tokens"}
    groups = [[rows[i:i + BATCH]] for i in range(0, len(rows) - BATCH + 1, BATCH)]
    cuda = args.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
    m = setup["models"]["bert-base"]
    ctx = dict(enc=enc, groups=groups, max_len=max_len, lines=[],
               step_flops=flops_of([max_len] * BATCH, m["nonembed"], m["layers"], m["hidden"]))
    out: dict = {"shape": f"{BATCH} x {max_len}", "rows": len(rows)}
    parts = Path(args.out) / "profile"
    parts.mkdir(parents=True, exist_ok=True)
    for name in args.profile_modes.split(","):
        first_line = len(ctx["lines"])
        try:
            out[name] = _profile_one(args, name, ctx)
        except Exception as e:  # noqa: BLE001 - the other mode may still work
            import traceback

            traceback.print_exc()
            out[name] = {"error": f"{type(e).__name__}: {str(e).strip()[:300]}"}
        if cuda:
            torch.cuda.empty_cache()
        # after each mode: a child stopped at its time limit still leaves the modes it finished
        (parts / f"{name}.txt").write_text("\n".join(ctx["lines"][first_line:]) + "\n")
    return out


UNTRACED_ROUNDS = 4  # the profiled steps run again untraced, this many times over


def _untraced_step_ms(args, t, active: list) -> float:
    """The step time without the profiler: the profiled wall above also holds what tracing every kernel costs
    (CUPTI) and the first step's start, when the GPU waits for the host to fill and copy its batch, spread over only
    five steps. Here the steps run UNTRACED_ROUNDS times over; on a GPU, CUDA events after the first of them and
    after the last time the steps in between as the GPU ran them, its queue already fed (the steady state MFU is
    quoted at: inter-kernel gaps and any wait on the host are in, the start is not)."""
    import torch

    if args.device != "cuda":  # (a CPU dry run: once over, inside the child's time limit)
        steps = list(active)
        started = time.perf_counter()
        for g in steps:
            t.train_step(g)
        return 1000 * (time.perf_counter() - started) / len(steps)
    steps = [g for _ in range(UNTRACED_ROUNDS) for g in active]
    sync(args.device)
    t.train_step(steps[0])
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for g in steps[1:]:
        t.train_step(g)
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / (len(steps) - 1)


def _profile_one(args, name: str, ctx: dict) -> dict:
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from ftcli_trainer.config import parse_args
    from ftcli_trainer.loop import Paths, Trainer
    from ftcli_trainer.model import attention_in_use, load_model, use_varlen_attention

    cuda = args.device == "cuda"
    dev = torch.device(args.device)
    precision = "bf16" if cuda and torch.cuda.get_device_capability(0) >= (8, 0) else "fp32"
    mode, extra = PROFILE_MODES[name]
    cfg = parse_args(["--task", "csv", "--train-file", "unused.csv", "--batch-size", str(BATCH),
                      "--learning-rate", "5e-5", "--cuda-graphs", mode, "--precision", precision, *extra])
    torch.manual_seed(SEED)
    model = load_model(str(model_dir(args, "bert-base")), ["0", "1"], False, 0.5).to(dev)
    if cfg.varlen_attention:  # as task.run switches it
        why_not = use_varlen_attention(model, dev, precision)
        if why_not:
            ctx["lines"].append(f"-- {name}: --varlen-attention left off: {why_not}")
    t = Trainer(cfg, model, ctx["enc"], {}, ["0", "1"], False, dev, precision,
                Paths("m", "c", "l", work_dir(args) / "profile" / name), 0)
    t._loss_total, t._loss_count, t._loss_acc_n = 0.0, 0, 0
    t._loss_acc = torch.zeros((), device=dev)
    t.compile_in_graphs = name.startswith("compiled")
    t.compile_eager_attention = "+eagerattn" in name
    t.fused_projections = "+fusedqkv" in name
    if t.compile_in_graphs:  # each compiled mode pays its own compile (its warm-up seconds say how long)
        import torch._dynamo

        torch._dynamo.reset()
    # (a CPU dry run: the graph path's static steps, run eagerly, so that its switches and the compile still act)
    t._setup_static_steps(capture=False if mode == "on" and not cuda else None)
    model.train()
    warm, active = ctx["groups"][:-5], ctx["groups"][-5:]
    started = time.perf_counter()
    for g in warm:  # graphs: two eager steps (three compiled), the capture, then replays
        t.train_step(g)
    sync(args.device)
    warm_s = time.perf_counter() - started
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        for g in active:
            t.train_step(g)
        sync(args.device)
        wall = time.perf_counter() - t0
    step_ms = 1000 * wall / len(active)
    untraced_ms = _untraced_step_ms(args, t, active)
    averages = prof.key_averages()
    kernels = [e for e in averages if getattr(e, "device_type", None) == DeviceType.CUDA] if cuda else []
    busy = sum(e.self_device_time_total for e in kernels) / 1e3  # ms
    by_kind: dict[str, float] = {}
    for e in kernels:
        by_kind[_kind(e.key)] = by_kind.get(_kind(e.key), 0.0) + e.self_device_time_total / 1e3
    peak = args.peak_tflops_resolved
    # kernels launched a step: inside a CUDA graph each still costs a gap of a microsecond or so, which is where the
    # step's idle share (GPU busy < 100 %) goes when nothing else waits
    launches = sum(e.count for e in kernels) / len(active)
    res = {"step_ms": step_ms, "gpu_busy": busy / (wall * 1000) if wall else 0.0,
           "kernel_ms_per_step": busy / len(active), "kernels_per_step": launches,
           "by_kind_share": {k: v / busy for k, v in sorted(by_kind.items(), key=lambda x: -x[1])} if busy else {},
           "mfu": ctx["step_flops"] / (step_ms / 1000) / (peak * 1e12) if peak else None,
           "untraced_step_ms": untraced_ms,
           "untraced_mfu": ctx["step_flops"] / (untraced_ms / 1000) / (peak * 1e12) if peak else None,
           "graphs": t.static_steps.report() if t.static_steps is not None else None,
           "warm_seconds": round(warm_s, 1), "attention": attention_in_use(model)}
    sort = "self_device_time_total" if cuda else "self_cpu_time_total"
    try:
        table = averages.table(sort_by=sort, row_limit=18, max_name_column_width=60)
    except (KeyError, AttributeError, ValueError):
        table = averages.table(sort_by="self_cuda_time_total" if cuda else sort, row_limit=18)
    what = "a 2-layer BERT" if args.tiny_bert else "BERT-base"
    ctx["lines"].append(
        f"== {name}: {what}, {BATCH} x {ctx['max_len']}, {precision}, {len(active)} steps profiled: "
        f"{step_ms:.1f} ms/step, kernels {busy / len(active):.1f} ms/step (GPU busy {100 * res['gpu_busy']:.0f} %, "
        f"{launches:.0f} kernels a step)"
        + (f", MFU {100 * res['mfu']:.1f} %" if res["mfu"] else "")
        + f"; untraced {untraced_ms:.1f} ms/step" + (f", MFU {100 * res['untraced_mfu']:.1f} %" if peak else "")
        + f"; {len(warm)} warm-up steps {warm_s:.1f} s"
        + (f" ({res['graphs']['compiled_blocks']} layers compiled, the compile included)"
           if res["graphs"] and res["graphs"]["compiled_blocks"] else "") + f"; attention {res['attention']}"
        + (f"; query, key and value fused in {res['graphs'].get('fused_projections', 0)} layers"
           if t.fused_projections and res["graphs"] else ""))
    ctx["lines"].append("time by kind: " + ", ".join(f"{k} {100 * v:.0f} %" for k, v in res["by_kind_share"].items()))
    ctx["lines"].append(table)
    return res


def child(args) -> None:
    setup = json.loads(args.setup_json) if args.setup_json else {}
    try:
        if args.one == "env":
            r = child_env(args)
        elif args.one == "setup":
            r = child_setup(args)
        elif args.one == "check":
            r = child_check(args)
        elif args.one == "profile":
            r = child_profile(args, setup)
        elif args.contender == "hf":
            r = child_hf(args, args.case)
        else:
            r = child_ftcli(args, args.case, args.contender)
    except Exception:
        import traceback

        traceback.print_exc()
        sys.exit(1)
    r["end_to_end_seconds"] = time.perf_counter() - T_START
    emit(r)


# ----------------------------------------------------------------------------------------------------------
# the parent: prepares the data, runs the children within the budget, prints the table last


class Parent:
    def __init__(self, args):
        self.args = args
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.log = open(self.out / "children.log", "w")  # noqa: SIM115
        self.results: dict = {"args": {k: v for k, v in vars(args).items() if k != "setup_json"}, "sections": {}}
        self.proc = None

    def elapsed(self) -> float:
        return time.perf_counter() - T_START

    def say(self, msg: str) -> None:
        print(f"[{self.elapsed():5.0f}s] {msg}", flush=True)

    def save(self) -> None:
        (self.out / "results.json").write_text(json.dumps(self.results, indent=2, default=str))

    def run(self, key: str, argv: list[str], limit: float, need: float) -> dict | None:
        left = self.args.budget - self.elapsed() - 10  # keep 10 s to print the table
        if left < need:
            self.results["sections"][key] = {"skipped": f"budget: {left:.0f} s left, needs ~{need:.0f} s"}
            self.say(f"{key}: skipped ({left:.0f} s of budget left)")
            return None
        limit = min(limit, left)
        setup = self.results["sections"].get("setup") or {}
        env = self.results["sections"].get("env") or {}
        extra = ["--setup-json", json.dumps({"models": setup.get("models", {})})] if setup.get("models") else []
        if env.get("peak_tflops"):
            extra += ["--peak-tflops-resolved", str(env["peak_tflops"])]
        cmd = [sys.executable, __file__, *self.passthrough(), *argv, *extra]
        started = time.perf_counter()
        self.log.write(f"\n===== {key}: {' '.join(cmd)}\n")
        self.log.flush()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            text, _ = self.proc.communicate(timeout=limit)
            rc = self.proc.returncode
        except subprocess.TimeoutExpired:
            self.proc.kill()
            text, _ = self.proc.communicate()
            rc = "timeout"
        self.proc = None
        secs = time.perf_counter() - started
        self.log.write(text or "")
        self.log.write(f"===== {key}: rc={rc} in {secs:.1f} s\n")
        self.log.flush()
        line = next((x for x in reversed((text or "").splitlines()) if x.startswith("RESULT ")), None)
        if rc != 0 or line is None:
            tail = [x for x in (text or "").strip().splitlines() if x.strip()][-3:]
            err = f"rc={rc} after {secs:.0f} s: " + " | ".join(x.strip()[:200] for x in tail)
            self.results["sections"][key] = {"error": err}
            self.say(f"{key}: FAILED {err}")
            self.save()
            return None
        r = json.loads(line[len("RESULT "):])
        r["child_seconds"] = secs
        self.results["sections"][key] = r
        self.save()
        self.say(f"{key}: done in {secs:.0f} s")
        return r

    def passthrough(self) -> list[str]:
        a = self.args
        out = ["--assets", a.assets, "--out", a.out, "--work", a.work, "--device", a.device,
               "--check-steps", str(a.check_steps)]
        if a.tiny_bert:
            out.append("--tiny-bert")
        if a.cases:
            out += ["--cases", a.cases]
        if a.skip_profile:
            out.append("--skip-profile")
        out += ["--profile-modes", a.profile_modes, "--profile-length", str(a.profile_length)]
        if a.peak_tflops:
            out += ["--peak-tflops", str(a.peak_tflops)]
        return out

    def prepare_data(self) -> None:
        """The same rows for every contender: plain CSV files per case (the parent needs no torch)."""
        data = Path(self.args.assets) / "data"
        sst2, sst2_y = read_csv(data / "sst2_train.csv.xz")
        val, val_y = read_csv(data / "sst2_validation.csv.xz")
        imdb, imdb_y = read_csv(data / "imdb_8k.csv.xz")
        for case, spec in CASES.items():
            rows = min(spec["rows"], self.args.rows or spec["rows"])
            if spec["data"] == "sst2":
                tr, ev = (sst2[:rows], sst2_y[:rows]), (val, val_y)
            else:
                n_eval = min(IMDB_EVAL, len(imdb) // 10) if not self.args.rows else max(32, self.args.rows // 4)
                tr = (imdb[:min(rows, len(imdb) - n_eval)], imdb_y[:min(rows, len(imdb) - n_eval)])
                ev = (imdb[-n_eval:], imdb_y[-n_eval:])
            d = Path(self.args.work) / case
            d.mkdir(parents=True, exist_ok=True)
            for name, (t, y) in (("train.csv", tr), ("eval.csv", ev)):
                with open(d / name, "w", newline="", encoding="utf-8") as f:
                    w = csv.writer(f)
                    w.writerow(["text", "label"])
                    w.writerows(zip(t, y, strict=True))
            self.results.setdefault("cases", {})[case] = dict(spec, rows_used=len(tr[0]), eval_rows=len(ev[0]))

    def contenders(self, case: str) -> list[str]:
        if self.args.contenders:
            return [c.strip() for c in self.args.contenders.split(",") if c.strip()]
        return list(DEFAULT_CONTENDERS.get(case, [c for c in CONTENDERS if c != "ftcli_warm" and c not in NAMED_ONLY]))

    def main(self) -> None:
        a = self.args
        self.prepare_data()
        self.run("env", ["--one", "env"], 60, 15)
        self.run("setup", ["--one", "setup"], 120, 20)
        if self.results["sections"].get("setup", {}).get("models") is None:
            self.say("setup failed: the runs need its model folder; stopping")
            return
        if a.skip_check:
            self.results["sections"]["check"] = {"skipped": "--skip-check"}
        else:
            self.run("check", ["--one", "check"], 150, 40)
        # Per case, the contenders interleaved --repeat times (A B C, A B C, ...): a machine that drifts
        # between runs then moves every contender alike, and the ratios are paired within a repetition.
        runs = [(case, contender, rep) for case in ([] if a.skip_cases else selected_cases(a))
                for rep in range(1, a.repeat + 1) for contender in self.contenders(case)]
        # What matters most first: should the budget run out, the last eager run at 512 (known from the
        # issue) goes before the profile does.
        if runs and runs[-1][:2] == ("bert_imdb_512", "ftcli_eager") and not a.skip_profile:
            runs.insert(len(runs) - 1, ("profile", None, 0))
        elif not a.skip_profile:
            runs.append(("profile", None, 0))
        for case, contender, rep in runs:
            if case == "profile":
                self.profile()
            else:
                key = f"{case}/{contender}" + (f"#{rep}" if a.repeat > 1 else "")
                self.run(key, ["--one", "run", "--case", case, "--contender", contender], a.run_limit, 25)

    def profile(self) -> None:
        """Each mode in a child of its own (~20 s, a compiled one ~60 s more): a CUDA graph capture that fails
        inside one mode leaves the process's CUDA generator marked as capturing, and every later mode in that
        process would then fail at its first dropout ("Offset increment outside graph capture encountered
        unexpectedly", H100, 2026-11-26), so one process can no longer spoil the others."""
        modes = self.args.profile_modes.split(",")
        merged: dict = {}
        shutil.rmtree(self.out / "profile", ignore_errors=True)  # no part left from an earlier run in this folder
        for name in modes:
            key = f"profile:{name}"
            r = self.run(key, ["--one", "profile", "--profile-modes", name],
                         45 + 90 * name.startswith("compiled"), 30)
            got = self.results["sections"].pop(key, None) or {}
            if r is not None and name in r:
                merged[name] = r[name]
                merged.update(shape=r["shape"], rows=r["rows"])
            elif r is not None and "skipped" in r:  # no full-length rows: the same for every mode
                merged = {"skipped": r["skipped"]}
                break
            else:
                merged[name] = {"error": got.get("error") or got.get("skipped") or "no result"}
            self.results["sections"]["profile"] = merged
            parts = self.out / "profile"
            text = "".join((parts / f"{m}.txt").read_text() for m in modes if (parts / f"{m}.txt").exists())
            (self.out / "profile.txt").write_text(text)
        self.results["sections"]["profile"] = merged
        self.save()

    def table(self) -> str:
        s = self.results["sections"]
        env = s.get("env") or {}
        setup = s.get("setup") or {}
        peak = env.get("peak_tflops")
        lines = [f"## ftcli vs HF Trainer: {env.get('gpu', '?')} (cc {env.get('capability')}, peak bf16 "
                 f"{peak} TFLOP/s), torch {env.get('torch')}, CUDA {env.get('cuda')}, transformers "
                 f"{env.get('transformers')}, {env.get('cpus')} CPUs; batch {BATCH}, 1 epoch"]
        lines += check_lines(s.get("check") or {}, env)
        lines.append("")
        lines.append("| case | contender | rows | samples/s | x HF | start→fit s | warm-up s | fit→1st step ms "
                     f"| first-{FIRST} ms/step | steady ms/step | first/steady | e2e s | e2e x HF | acc "
                     "| MFU (steady) | graphs |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        models = setup.get("models", {})
        notes: list[str] = []
        for case in CASES:
            hf = {rep: r for rep, r in runs_of(s, case, "hf") if ok_run(r)}
            for contender in CONTENDERS:
                all_runs = runs_of(s, case, contender)
                if not all_runs:
                    continue
                good = [(rep, r) for rep, r in all_runs if ok_run(r)]
                if good:
                    lines.append(self.row(case, contender, good, hf, models.get(CASES[case]["model"]), peak))
                for rep, r in all_runs:  # each failed or skipped run on a line of its own
                    if not ok_run(r):
                        why = (r.get("error") or r.get("skipped") or "no result")[:150]
                        lines.append(f"| {case} | {contender}{'' if len(all_runs) == 1 else f' #{rep}'} | {why} |")
            for a, b in PAIRED:
                notes += warm_vs_graphs(case, runs_of(s, case, a), runs_of(s, case, b), (a, b),
                                        (a.removeprefix("ftcli_"), b.removeprefix("ftcli_")))
        lines += notes
        prof = s.get("profile") or {}
        if any(name in prof for name in PROFILE_MODES):
            for name in (n for n in PROFILE_MODES if n in prof):
                p = prof.get(name)
                if not p or "error" in p:
                    lines.append(f"profile {name}: {(p or {}).get('error', 'missing')}")
                    continue
                kinds = ", ".join(f"{k} {100 * v:.0f}%" for k, v in list(p["by_kind_share"].items())[:6])
                mfu = f", MFU {100 * p['mfu']:.1f} %" if p.get("mfu") else ""
                launches = f" ({p['kernels_per_step']:.0f} kernels)" if p.get("kernels_per_step") else ""
                if p.get("untraced_step_ms"):
                    mfu += (f"; untraced {p['untraced_step_ms']:.1f} ms/step"
                            + (f", MFU {100 * p['untraced_mfu']:.1f} %" if p.get("untraced_mfu") else ""))
                lines.append(f"profile {prof['shape']} {name}: {p['step_ms']:.1f} ms/step{mfu}, GPU busy "
                             f"{100 * p['gpu_busy']:.0f} %{launches}, warm-up {p.get('warm_seconds', '-')} s: {kinds}")
        elif prof:
            lines.append(f"profile: {prof.get('error') or prof.get('skipped')}")
        lines.append("BERT-base: random init (speed only), MiniLM's uncased 30,522-token WordPiece tokenizer. "
                     "MFU: 6 x non-embedding params x real tokens + attention, per second / peak bf16; in "
                     "brackets over the steady second half of the run.")
        lines.append(f"Timing: start→fit = child start (imports included) to `fit`/`train()`; warm-up = "
                     f"--gpu-warmup's prewarm (while tokenizing) + prepare (in `fit`, before the clock); fit→1st "
                     f"step includes prepare; first-{FIRST} counts from the first step's start, so the warm-up "
                     f"is not in it but is in e2e. With --repeat: medians (range in brackets), x HF = median of "
                     f"the ratios paired within a repetition.")
        lines.append(f"total {self.elapsed():.0f} s; full results: {self.out / 'results.json'}")
        return "\n".join(lines)

    @staticmethod
    def row(case: str, contender: str, good: list, hf: dict, m: dict | None, peak) -> str:
        rs = [r for _, r in good]

        def med_of(key):
            return median([r[key] for r in rs if r.get(key) is not None])

        sps = med_of("train_samples_per_second")
        e2e = med_of("end_to_end_seconds")
        x_hf = median([r["train_samples_per_second"] / hf[rep]["train_samples_per_second"]
                       for rep, r in good if rep in hf])
        e2e_x = median([hf[rep]["end_to_end_seconds"] / r["end_to_end_seconds"] for rep, r in good if rep in hf])
        mfu = "-"
        if peak and m and rs[0].get("sum_len"):
            flops = [6.0 * m["nonembed"] * r["sum_len"] + 12.0 * m["layers"] * m["hidden"] * r["sum_len2"]
                     for r in rs]
            overall = median([f / r["train_runtime"] for f, r in zip(flops, rs, strict=True)])
            mfu = f"{100 * overall / (peak * 1e12):.1f} %"
            steady = [f / r["steps"] / (r["steady_ms"] / 1000) for f, r in zip(flops, rs, strict=True)
                      if r.get("steady_ms") and r.get("steps")]
            if steady:
                mfu += f" ({100 * median(steady) / (peak * 1e12):.1f} %)"
        warm = [r["gpu_warmup"] for r in rs if isinstance(r.get("gpu_warmup"), dict)]
        wtxt = "-"
        if warm:
            pre = median([w.get("prewarm_seconds") for w in warm if w.get("prewarm_seconds") is not None])
            prep = median([w.get("prepare_seconds") for w in warm if w.get("prepare_seconds") is not None])
            wtxt = f"{fmt(pre, '.2f')}+{fmt(prep, '.2f')}"
        g = rs[-1].get("graphs")
        gtxt = ""
        if g:
            fell = any(r.get("graphs") and r["graphs"].get("still_capturing") is False for r in rs)
            gtxt = (f"{g.get('captured')} cap {g.get('capture_seconds', 0):.1f}s, {g.get('eager')} eager"
                    + (", FELL BACK" if fell else ""))
        att = rs[-1].get("attention")  # "flash, variable-length" with --varlen-attention, or why not
        shared = rs[-1].get("shared_casts")
        gtxt = "; ".join(t for t in (
            gtxt, att and att != "sdpa" and f"attention {att}",
            shared and f"shared casts {shared['made']} made, {shared['reused']} reused") if t)
        acc = fmt(med_of("eval_accuracy"), ".3f") if CASES[case]["model"] == "minilm" else "(rand)"
        name = contender if len(rs) == 1 else f"{contender} (n={len(rs)})"
        return (f"| {case} | {name} | {rs[0]['rows']} | {spread([r['train_samples_per_second'] for r in rs], '.0f')} "
                f"| {fmt(x_hf, '.2f')} | {fmt(med_of('start_to_fit_s'), '.1f')} | {wtxt} "
                f"| {fmt(med_of('fit_to_first_ms'), '.0f')} | {fmt(med_of('first_ms'), '.1f')} "
                f"| {fmt(med_of('steady_ms'), '.2f')} | {fmt(med_of('first_over_steady'), '.2f')} "
                f"| {spread([r['end_to_end_seconds'] for r in rs], '.1f')} | {fmt(e2e_x, '.2f')} | {acc} | {mfu} "
                f"| {gtxt} |") if sps is not None and e2e is not None else f"| {case} | {name} | (no numbers) |"


def runs_of(sections: dict, case: str, contender: str) -> list[tuple[int, dict]]:
    """A contender's runs of a case as (repetition, result): `case/contender` (one run) or `case/contender#k`."""
    out = []
    for key, r in sections.items():
        if key == f"{case}/{contender}":
            out.append((1, r))
        elif key.startswith(f"{case}/{contender}#") and key.rsplit("#", 1)[1].isdigit():
            out.append((int(key.rsplit("#", 1)[1]), r))
    return sorted(out, key=lambda x: x[0])


def ok_run(r: dict) -> bool:
    return isinstance(r, dict) and "train_samples_per_second" in r and "end_to_end_seconds" in r


def median(values: list) -> float | None:
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def spread(values: list, spec: str) -> str:
    """The median, and the range in brackets when there is more than one value."""
    m = median(values)
    if len(values) < 2:
        return fmt(m, spec)
    return f"{fmt(m, spec)} ({fmt(min(values), spec)}-{fmt(max(values), spec)})"


def warm_vs_graphs(case: str, graphs: list, warm: list, names: tuple[str, str] = ("ftcli_graphs", "ftcli_warm"),
                   short: tuple[str, str] = ("graphs", "warm")) -> list[str]:
    """Paired within a repetition: is the second contender (ftcli_warm: --gpu-warmup) faster end to end than the
    first (ftcli_graphs: the graph path without it), and where does the time move (start to fit, fit to the first
    step, the first steps, the steady step)? Also ftcli_copies against ftcli_warm."""
    g = {rep: r for rep, r in graphs if ok_run(r)}
    pairs = [(g[rep], r) for rep, r in warm if ok_run(r) and rep in g]
    if not pairs:
        return []

    def both(key):
        return (median([a.get(key) for a, _ in pairs]), median([b.get(key) for _, b in pairs]))

    def to_first(r):
        if r.get("start_to_fit_s") is None or r.get("fit_to_first_ms") is None:
            return None
        return r["start_to_fit_s"] + r["fit_to_first_ms"] / 1000

    e2e = median([a["end_to_end_seconds"] / b["end_to_end_seconds"] for a, b in pairs])
    sps = median([b["train_samples_per_second"] / a["train_samples_per_second"] for a, b in pairs])
    diff = median([b["end_to_end_seconds"] - a["end_to_end_seconds"] for a, b in pairs])
    tf = (median([to_first(a) for a, _ in pairs]), median([to_first(b) for _, b in pairs]))
    first = both("first_ms")
    steady = both("steady_ms")
    return [f"{case}: {names[1]} vs {names[0]}, {len(pairs)} paired run(s), medians: end to end "
            f"{fmt(e2e, '.3f')}x ({short[1]} {fmt(diff, '+.2f')} s; >1x: {short[1]} is faster), train samples/s "
            f"{fmt(sps, '.3f')}x, start to the first step {fmt(tf[1], '.2f')} s vs {fmt(tf[0], '.2f')} s, "
            f"first-{FIRST} {fmt(first[1], '.1f')} vs {fmt(first[0], '.1f')} ms/step, steady "
            f"{fmt(steady[1], '.2f')} vs {fmt(steady[0], '.2f')} ms/step, train loss "
            f"{fmt(both('train_loss')[1], '.4f')} vs {fmt(both('train_loss')[0], '.4f')}, eval loss "
            f"{fmt(both('eval_loss')[1], '.4f')} vs {fmt(both('eval_loss')[0], '.4f')}, accuracy "
            f"{fmt(both('eval_accuracy')[1], '.4f')} vs {fmt(both('eval_accuracy')[0], '.4f')} "
            f"({short[1]} vs {short[0]})"]


def check_lines(chk: dict, env: dict) -> list[str]:
    if not chk:
        return []
    if "ok" not in chk:
        return [f"check: {chk.get('error') or chk.get('skipped')}"]
    parts = [f"check {'PASS' if chk['ok'] else 'FAIL'}"]
    parts += [f"{k}: {v['error']}" for k, v in chk.items() if isinstance(v, dict) and "error" in v]
    for k in ("fp32", "bf16"):
        if k in chk and "error" not in chk[k]:
            parts.append(f"{k} graph-vs-eager max rel loss diff {chk[k]['max_rel_loss_diff']:.1e}, weight gap "
                         f"{chk[k]['param_gap_over_update']:.1e} of the update (L2)")
    if "mean_loss_eager" in chk.get("bf16_dropout", {}):
        d = chk["bf16_dropout"]
        parts.append(f"dropout on: mean loss eager {d['mean_loss_eager']:.4f} vs graphs {d['mean_loss_graphs']:.4f}")
    if "keep_rates" in chk.get("dropout_replays", {}):
        d = chk["dropout_replays"]
        parts.append(f"replayed dropout keep {min(d['keep_rates']):.4f}-{max(d['keep_rates']):.4f}, masks "
                     f"differ {d['masks_differ']:.3f} (0.18 expected), attention {d['attention_replays_differ']:.2f}")
    g = chk.get("fp32", {}).get("graphs")
    if g and env.get("gpu") != "cpu":
        parts.append(f"captures {g.get('captured')}, replays {g.get('replays')}, eager {g.get('eager')}, "
                     f"fallback {'no' if g.get('still_capturing') else 'YES'}")
    lines = ["; ".join(parts)]
    prep = []
    for k in ("fp32", "bf16"):
        v = (chk.get(k) or {}).get("prepared")
        if not v:
            continue
        if "error" in v:
            prep.append(f"{k}: {v['error']}")
        else:
            c, a = v.get("graphs", {}), v.get("counts_after_prepare", {})
            prep.append(f"{k} widths {v['widths']} in {v['prepare_seconds']:.2f} s, then max rel loss diff "
                        f"{v['max_rel_loss_diff']:.1e}, weight gap {v['param_gap_over_update']:.1e}; after it "
                        f"captures {a.get('captured')}, eager {a.get('eager')}; the steps then "
                        f"{'all replays' if v.get('steps_all_replays') else 'NOT all replays'} (captures "
                        f"{c.get('captured')}, eager {c.get('eager')}, replays {c.get('replays')})")
    if prep:
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[chk.get("prepared_ok")]
        lines.append(f"--gpu-warmup's StaticSteps.prepare vs eager: {verdict}; " + "; ".join(prep))
    cop = []
    for k in ("bf16", "bf16_dropout"):
        v = (chk.get(k) or {}).get("copies")
        if v:
            cop.append(f"{k}: {v['error']}" if "error" in v else
                       f"{k} weights {'identical' if v['identical_weights'] else 'DIFFER'}, losses "
                       f"{'identical' if v['identical_losses'] else 'DIFFER'} (graphs {v['graphs']})")
    if cop:
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[chk.get("copies_ok")]
        lines.append(f"--weight-copies vs the graph path's casts: {verdict}; " + "; ".join(cop))
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--assets", default=str(ROOT / ".gpu"))
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/ftcli-gpu-out"))
    p.add_argument("--work", default="/tmp/ftcli-gpu-bench", help="scratch folder (data slices, BERT-base, runs)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--rows", type=int, default=0, help="cap every case's training rows (dry runs)")
    p.add_argument("--cases", default="", help="comma-separated subset of: " + ", ".join(CASES))
    p.add_argument("--budget", type=float, default=360, help="seconds for everything; later sections are skipped")
    p.add_argument("--run-limit", type=float, default=100, help="seconds per timed run")
    p.add_argument("--check-steps", type=int, default=30)
    p.add_argument("--tiny-bert", action="store_true", help="a 2-layer BERT instead of BERT-base (dry runs)")
    p.add_argument("--skip-profile", action="store_true")
    p.add_argument("--skip-cases", action="store_true", help="no timed runs: the profile (and check) alone")
    p.add_argument("--profile-modes", default="eager,graphs,copies",
                   help="comma-separated, in this order: " + ", ".join(PROFILE_MODES))
    p.add_argument("--profile-length", type=int, default=512,
                   help="the profile's rows: IMDB reviews cut at this many tokens, all of them full")
    p.add_argument("--skip-check", action="store_true", help="no graph-vs-eager check (another call has it)")
    p.add_argument("--contenders", default="",
                   help="comma-separated, run in this order, for every case: " + ", ".join(CONTENDERS) + " (default: "
                   "all four for the MiniLM case, all but ftcli_warm for the others)")
    p.add_argument("--repeat", type=int, default=1,
                   help="run each case's contenders N times interleaved; the table shows medians and paired ratios")
    p.add_argument("--peak-tflops", type=float, default=None, help="the card's dense bf16 peak, if not in the table")
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--case", help=argparse.SUPPRESS)
    p.add_argument("--contender", help=argparse.SUPPRESS)
    p.add_argument("--setup-json", help=argparse.SUPPRESS)
    p.add_argument("--peak-tflops-resolved", type=float, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    unknown = [c for c in args.contenders.split(",") if c.strip() and c.strip() not in CONTENDERS]
    bad_cases = [c for c in args.cases.split(",") if c.strip() and c.strip() not in CASES]
    unknown += [m for m in args.profile_modes.split(",") if m not in PROFILE_MODES]
    if unknown or bad_cases or args.repeat < 1:
        p.error(f"unknown contenders or profile modes {unknown} or cases {bad_cases}, or --repeat < 1")
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if args.one:
        child(args)
        return
    Path(args.work).mkdir(parents=True, exist_ok=True)
    parent = Parent(args)

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        parent.main()
    except KeyboardInterrupt:
        if parent.proc is not None:
            parent.proc.kill()
        parent.say("interrupted: printing what there is")
    finally:
        parent.save()
        try:
            text = parent.table()
        except Exception as e:  # noqa: BLE001 - never lose the numbers to a formatting bug
            dump = json.dumps(parent.results["sections"], default=str)
            text = f"(table failed: {type(e).__name__}: {e})\n{dump[-9000:]}"
        (parent.out / "table.md").write_text(text + "\n")
        print("\n" + text, flush=True)


if __name__ == "__main__":
    main()
