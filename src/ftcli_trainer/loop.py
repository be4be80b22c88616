"""The training loop: bucketed batches, AMP, fused AdamW, warmup + linear decay, accumulation, clipping,
evaluation, checkpoints and SIGTERM-safe stops. No per-step host syncs: losses stay on the device and are
read only when a line is logged."""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import sys
import time
from contextlib import nullcontext, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TextIO

import numpy as np

from ftcli_trainer import checkpoint, metrics, storage
from ftcli_trainer.config import TrainConfig, evaluation_count
from ftcli_trainer.data import Encoded, collate, plan_batches
from ftcli_trainer.distributed import Dist, add_up, any_rank, gather_rows, gather_to_main, shard_batches, spread
from ftcli_trainer.errors import TrainerError

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager
    from types import FrameType, ModuleType

    import torch
    from torch.optim.lr_scheduler import LRScheduler
    from torch.utils.tensorboard import SummaryWriter
    from tqdm.auto import tqdm
    from transformers import PreTrainedModel

    from ftcli_trainer.cuda_graphs import StaticSteps, StepKey

log = logging.getLogger("ftcli_trainer")


EVAL_STOP_EVERY = 8  # with several ranks: evaluation batches between two looks for a stop (a collective)


class EvalCut(Exception):
    """SIGTERM (or a first Ctrl-C) arrived during an evaluation: it stops there, every rank at the same batch, so that
    the checkpoint fits in the seconds a preempted VM has left (an epoch's evaluation can take minutes: the whole
    epoch was lost with it). The checkpoint says the evaluation is still to do, and the restart does it first."""


class Preempted(Exception):
    """SIGTERM (or a first Ctrl-C) arrived; a checkpoint was written. Exiting non-zero lets Vertex restart the
    worker; the exit status is the signal's (143, 130)."""

    def __init__(self, message: str, exit_code: int = 143) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def lr_factor(step: int, warmup: int, total: int) -> float:
    """Linear warmup then linear decay to 0: the same curve as transformers' linear schedule."""
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


def warmup_steps(total: int, ratio: float) -> int:
    return math.ceil(total * ratio)


class SkippedStepsSchedule:
    """fp16's learning-rate schedule, moved on only by the updates the loss scaler let through, with no host sync.

    An update that GradScaler skips (inf/NaN gradients: the first steps at its initial scale of 2^16, and now and then
    after the scale grows) trained nothing, and the schedule stays where it was, as the HF Trainer means it to
    (transformers 5.24 Trainer._inner_training_loop: `if not self.accelerator.optimizer_step_was_skipped:
    self.lr_scheduler.step()`; DeepSpeed and the HF Trainer before accelerate did the same). Stepping it anyway shifted
    every later step's rate by the skipped ones, a warmup cut short among them. (With a fused AdamW, HF's own default
    on torch >= 2.8, accelerate 1.15 misses the skip, the kernel skipping inside a step() it calls, and the Trainer does
    step the schedule: huggingface/accelerate#4242, open, with its fix #4243.)

    fused AdamW skips on the device (GradScaler hands it found_inf), so the schedule's position is a device tensor
    too, advanced by 1 - found_inf, and the learning rates are device tensors filled from it (the same linear curve as
    lr_factor): nothing here waits for the GPU, on the eager path or inside a captured update. `scheduler` (the
    trainer's LambdaLR, not stepped in fp16) carries the position in checkpoints: its last_epoch is the updates
    made."""

    def __init__(self, torch: ModuleType, optimizer: torch.optim.Optimizer, scheduler: LRScheduler, warmup: int,
                 total: int) -> None:
        self.torch = torch
        self.warmup, self.total = warmup, total
        device = optimizer.param_groups[0]["params"][0].device
        self.lrs = []
        for group in optimizer.param_groups:
            if not isinstance(group["lr"], torch.Tensor):
                group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
            self.lrs.append(group["lr"])
        self.base = [float(b) for b in scheduler.base_lrs]
        self.position = torch.tensor(float(scheduler.last_epoch), dtype=torch.float32, device=device)
        self.used = self.position.clone()  # the position the last update trained at (its logged rate)
        self.fill()

    def fill(self) -> None:
        t = self.position
        warming = t / max(1, self.warmup)
        decaying = ((self.total - t) / max(1, self.total - self.warmup)).clamp(min=0.0)
        factor = self.torch.where(t < self.warmup, warming, decaying)
        for lr, base in zip(self.lrs, self.base, strict=True):
            lr.copy_(factor * base)

    def advance(self, scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer) -> None:
        """After scaler.step(optimizer), before scaler.update() (which forgets found_inf)."""
        # (private, long-standing: torch 2.13's GradScaler.step reads the same record)
        found = scaler._found_inf_per_device(optimizer)
        skipped = sum(v.to(self.position.device, non_blocking=True) for v in found.values()).clamp(max=1.0)
        self.used.copy_(self.position)
        self.position.add_(1.0 - skipped)
        self.fill()

    def to_scheduler(self, scheduler: LRScheduler) -> None:
        """The position into the LambdaLR's state, for a checkpoint (a host sync: at checkpoints only)."""
        scheduler.last_epoch = int(self.position.item())
        scheduler._last_lr = [float(lr) for lr in self.lrs]


# torch.compile measured on an H200 (shared notes, gpu-facts.md): 34-44 s to compile a BERT-base step, then
# at most ~7 ms a step saved (32 x 128) and none at 512 tokens; a dynamic-shape compile recompiles on top.
# Below this many steps it cannot pay for itself (a 250-step run at 512 ran at 0.2x of eager). That was the whole
# model; --compile now compiles one layer's code for all of them (23 s against 108 s for BERT-base on the 2-core
# CPU machine), so this bound is conservative until a GPU run measures the regional compile.
COMPILE_MIN_STEPS = 5000
# A second SIGINT sooner than this after the first is the same Ctrl-C delivered twice (to the process group and
# passed on by ftcli), not the user's "Ctrl-C again, stop at once".
SAME_CTRL_C_S = 1.0


# On a CPU (bench/cpu_compile.py, MiniLM-L6, 32 rows, fp32, 2 cores, 2026-11-26): the compiled layers' steps were
# no faster (0.95x, 1.06x and 1.44x the plain step's time at 32, 64 and 128 tokens) after a 68 s cold compile.


# --compile on the CUDA-graph path compiles the model's layers inside the captured step (cuda_graphs.CompiledBlocks).
# Measured on an H100 (bench/README.md, 2026-11-26: bench/gpu.py's profile, BERT-base, 32 full 512-token rows, bf16,
# weight copies): with --varlen-attention 37.3 ms a step against 43.3 ms for the same path uncompiled (25.3 % MFU
# against 21.8 %), after 23.4 s of warm-up against 0.8 s (a cold compile of one layer's code, its captures). On
# 2026-11-28 (bench/README.md, the H100 again), with the attention left out of the trace: SDPA 39.4 against 44.8 ms
# (5.4 ms saved), with --unmask-full-batches and the fused projections 34.2 against 41.7 (7.5 ms); at 128 tokens,
# with --varlen-attention, 12.5 against 14.4 ms (1.9 ms a step of 4,096 tokens: 7.6 ms per 16,384, more than in
# proportion). The saving is taken as proportional to the tokens trained on, counted without their padding, at
# 6.0 ms per 32 x 512, and must repay the compile twice over, so the rule errs towards not compiling.
COMPILED_GRAPHS_COST_S = 23.0
COMPILED_GRAPHS_SAVED_S_PER_TOKEN = 6.0e-3 / (32 * 512)
COMPILED_GRAPHS_MARGIN = 2.0


def compiled_graphs_min_tokens() -> int:
    """The tokens a run must train on for --compile to compile its layers inside the CUDA graphs."""
    return math.ceil(COMPILED_GRAPHS_MARGIN * COMPILED_GRAPHS_COST_S / COMPILED_GRAPHS_SAVED_S_PER_TOKEN)


def compile_skip_reason(total_steps: int, cuda_graphs: bool, device_type: str = "cuda", tokens: int = 0) -> str:
    """Why --compile would make this run slower end to end ("" when it may pay off). With `cuda_graphs`, the
    compile is of the layers inside the captured step: `tokens` the tokens the run trains on (every epoch's,
    without padding)."""
    if device_type == "cpu":
        return ("on a CPU the compiled steps measured no faster than plain ones (0.95-1.44x their time, "
                "bench/cpu_compile.py), after about a minute of compiling")
    if cuda_graphs:
        need = compiled_graphs_min_tokens()
        if tokens < need:
            return (f"{tokens / 1e6:,.1f}M tokens to train on would save about "
                    f"{tokens * COMPILED_GRAPHS_SAVED_S_PER_TOKEN:.0f} s against {COMPILED_GRAPHS_COST_S:.0f} s of "
                    f"compiling (it pays off from about {need / 1e6:,.0f}M tokens)")
        return ""
    if total_steps < COMPILE_MIN_STEPS:
        return (f"{total_steps} steps are too few to repay compiling (~40 s a shape; it pays off from about "
                f"{COMPILE_MIN_STEPS:,} steps)")
    return ""


# Switches a user turns on that act on the CUDA-graph path only (--weight-copies, on by default, goes unsaid)
GRAPH_PATH_ONLY = ("unmask_full_batches", "shared_casts")


# The parameters the HF Trainer gives no weight decay, by name (transformers 5.24, Trainer.get_decay_parameter_names):
# biases and norm weights, and everything inside an nn.LayerNorm. By name, not by shape: "every 1-D parameter" decayed
# 2-D biases the Trainer exempts (MPNet's and T5's relative_attention_bias, XLNet's r_w_bias, ConvBERT's conv bias).
NO_DECAY_NAMES = [r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """No weight decay on biases and norm weights, chosen as the HF Trainer chooses them (NO_DECAY_NAMES)."""
    from torch import nn
    from transformers.trainer_pt_utils import get_parameter_names

    decay_names = set(get_parameter_names(model, [nn.LayerNorm], NO_DECAY_NAMES))
    decay: list = []
    no_decay: list = []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (decay if name in decay_names else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    import torch

    groups = param_groups(model, weight_decay)
    try:
        # Fused AdamW: one kernel for all parameters (on CPU too: ~5x faster than foreach here).
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8)


def loss_sum(logits: torch.Tensor, labels: torch.Tensor, multi_label: bool, regression: bool = False) -> torch.Tensor:
    """Sum of per-example losses (mean over labels for multi-label, squared error for regression); the caller
    divides by the examples of the whole accumulation group, so N micro-batches make exactly the update of one
    N-times batch (for regression: the MSE over the whole batch, transformers' MSELoss)."""
    import torch.nn.functional as F

    logits = logits.float()
    if regression:
        return F.mse_loss(logits.squeeze(-1), labels.float(), reduction="sum")
    if multi_label:
        return F.binary_cross_entropy_with_logits(logits, labels, reduction="sum") / logits.shape[-1]
    return F.cross_entropy(logits, labels, reduction="sum")


@dataclass
class Paths:
    model_dir: str
    checkpoint_dir: str
    logs_dir: str
    local_logs_dir: Path  # where logs are written; synced to logs_dir when that is gs://


@dataclass
class RunStats:
    samples: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0
    pad_known: bool = True  # False: resumed from a checkpoint that did not keep padded_tokens
    train_seconds: float = 0.0
    history: list[dict] = field(default_factory=list)


class Trainer:
    # set by fit(): micro-batches in the loss sum since the last train line, and when the training clock started
    _loss_acc_n: int
    _t0: float

    def __init__(self, cfg: TrainConfig, model: PreTrainedModel, train: Encoded, evals: dict[str, Encoded],
                 label_names: list[str], multi_label: bool, device: torch.device, precision: str, paths: Paths,
                 pad_id: int, dist: Dist | None = None) -> None:
        import torch

        self.torch = torch
        self.cfg = cfg
        self.dist = dist or Dist()
        self.model = model
        self.train_enc = train
        self._train_lengths = train.lengths
        self.evals = evals
        self.label_names = label_names
        self.multi_label = multi_label
        self.regression = cfg.regression
        from ftcli_trainer.tasks import TASKS

        self.task_metrics = TASKS[cfg.task].metrics
        # The last evaluation's outputs per eval set, for the export's eval_predictions.npz.
        self.predictions: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.device = device
        self.precision = precision
        self.paths = paths
        self.pad_id = pad_id
        self.multiple_of = 8 if device.type == "cuda" else 1  # tensor-core friendly shapes on GPUs

        self.global_batch = cfg.batch_size * self.dist.world_size
        n_batches = len(shard_batches(plan_batches(train.lengths, self.global_batch, cfg.seed, 0), self.dist))
        self.steps_per_epoch = math.ceil(n_batches / cfg.gradient_accumulation_steps)
        self.total_steps = self.steps_per_epoch * cfg.epochs
        self.warmup = warmup_steps(self.total_steps, cfg.warmup_ratio)
        from ftcli_trainer import cuda_graphs

        self.use_graphs, self.graphs_reason = cuda_graphs.decide(cfg.cuda_graphs, device.type, self.dist.world_size)
        self.static_steps: StaticSteps | None = None  # built in fit(), after a resume, around the on-device loss sum
        # --compile with the graphs on: the model's layers torch.compile'd inside the forward the graphs capture
        # (cuda_graphs.CompiledBlocks: one dynamic-shape compile for every layer and width), where the run is long
        # enough (compile_skip_reason); bench/gpu.py's profile sets it itself.
        self.compile_in_graphs = False
        # and with it, the self-attention modules left out of the trace (bench/gpu.py's profile; the fused
        # projections leave them out themselves, StaticSteps)
        self.compile_eager_attention = False
        self.fused_projections = cfg.fused_projections  # query, key and value as one GEMM on the weight copies
        self.gpu_warmup: dict = {}  # what --gpu-warmup did (task.run's prewarm, fit's prepare), when it ran
        train_model: torch.nn.Module = model
        if self.dist.enabled:
            from torch.nn.parallel import DistributedDataParallel

            train_model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        skip_compile = ""
        blocks: list = []
        if cfg.compile:
            tokens = int(train.lengths.sum()) * cfg.epochs // self.dist.world_size
            skip_compile = compile_skip_reason(self.total_steps, self.use_graphs, device.type, tokens)
            blocks = cuda_graphs.repeated_blocks(model)
            if not skip_compile and self.use_graphs and not blocks:
                skip_compile = ("the model has no list of repeated layers, and only those were measured compiled "
                                "inside the CUDA graphs")
        if skip_compile:
            log.info("--compile skipped: %s", skip_compile)
        # --compile: the model's layers (cuda_graphs.CompiledBlocks: one compile serves them all, and evaluation
        # runs them plain), or, for a model without repeated blocks, the whole model; with the graphs on, the
        # layers inside the captured step
        self.compiled_blocks = None
        if cfg.compile and not skip_compile and self.use_graphs:
            self.compile_in_graphs = True
            log.info("--compile: the model's layers torch.compile'd inside the CUDA graphs (%.0fM tokens to train on; "
                     "about %.0f s of compiling before the first step)", tokens / 1e6, COMPILED_GRAPHS_COST_S)
        elif cfg.compile and not skip_compile:
            if blocks:
                self.compiled_blocks = cuda_graphs.CompiledBlocks(torch, blocks)
                log.info("--compile: the model's %d %s layers torch.compile'd (one compile serves them all)",
                         len(blocks), type(blocks[0]).__name__)
            else:
                # (a Module given, torch.compile returns an OptimizedModule, a Module; its stubs say only a Callable)
                train_model = torch.compile(train_model, dynamic=True)  # type: ignore[assignment]
        self.train_model = train_model
        self.optimizer = make_optimizer(model, cfg.learning_rate, cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_factor(s, self.warmup, self.total_steps))
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        self.skip_schedule: SkippedStepsSchedule | None = None  # fp16's (_skipped_steps_schedule), from the first step
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        self.log_every = cfg.log_every or max(1, self.total_steps // 20)
        self.global_step = 0
        self.epoch = 0
        self.stats = RunStats()
        self._stop_requested: signal.Signals | None = None  # the signal that asked for a stop (install_stop_handlers)
        self._eval_pending = False  # resumed from a checkpoint whose evaluation a stop cut short (EvalCut)
        self._evaluating = False  # inside evaluate(): a first Ctrl-C says it stops at the next batch
        # called as f(global_step, eval results) after each evaluation
        self.eval_callbacks: list[Callable[[int, dict], None]] = []
        # --keep-best / --early-stopping: the best evaluation so far ({"step", "epoch", "value"}, its weights in the
        # checkpoint folder's best-<step>), the evaluations since that did not improve (HF's patience counter), and
        # the best steps the kept checkpoints name (their best-<step> folders stay while a resume may need them)
        self.keep_best = cfg.keep_best or cfg.early_stopping > 0
        self.best_key, self.best_greater = metrics.best_metric(self.task_metrics, multi_label, self.regression)
        self.best: dict | None = None
        self.bad_evals = 0
        self.early_stopped = False
        self._stop_said = False  # a restart of a run that stopped early: its stop was said then
        self._lost_best: int | None = None  # the step of a best whose weights were gone at the resume
        self._best_refs: list[int | None] = []
        # The step whose best-<step> this process wrote as the export writes its weights (save_best's answer): a
        # checkpoint of that very step holds the same weights, and takes that file (save_checkpoint)
        self._best_as_exported: int | None = None
        self.last_eval: dict = {}
        # The checkpoint folder whose weights file holds the model's weights as the export writes them (a final
        # checkpoint's: checkpoint.save), for the export to take instead of writing them again; None: it writes them
        self.weights_from: str | None = None
        # called as f(kind, global_step, values) for each metrics.jsonl row
        self.record_callbacks: list[Callable[[str, int, dict], None]] = []
        self._tb: SummaryWriter | Literal[False] | None = None  # None: not opened yet; False: none (or failed)
        self._jsonl: TextIO | None = None  # metrics.jsonl, on the main process
        self._logs_synced = time.monotonic()
        if self.dist.is_main:  # one writer for logs, checkpoints and the export
            try:
                storage.make_dirs(self.paths.local_logs_dir)
                if self._metrics_file.is_symlink():  # (to a file in a folder not made yet: that folder)
                    storage.make_dirs(Path(os.path.realpath(self._metrics_file)).parent)
                self._continue_metrics()
                self._jsonl = open(self._metrics_file, "a")  # noqa: SIM115
            except OSError as e:
                raise self._log_write_error(e, "the metrics", self._metrics_file) from None

    # -- set-up ------------------------------------------------------------------------------------

    @property
    def _metrics_file(self) -> Path:
        return self.paths.local_logs_dir / "metrics.jsonl"

    def _continue_metrics(self) -> None:
        """With gs:// logs, a restarted worker (a Spot VM preempted, a Vertex restart) goes on with the metrics.jsonl
        that the earlier attempt synced there, as a local run appends to its own: the upload would otherwise replace
        the run's curve with the rows since the restart."""
        if storage.is_gcs(self.paths.logs_dir) and not self._metrics_file.exists():
            earlier = storage.read_text(storage.join(self.paths.logs_dir, "metrics.jsonl"))
            if earlier:
                self._metrics_file.write_text(earlier if earlier.endswith("\n") else earlier + "\n", encoding="utf-8")

    def sync_logs(self, final: bool = False) -> None:
        """metrics.jsonl and the TensorBoard files so far into the gs:// logs folder (Vertex's
        AIP_TENSORBOARD_LOG_DIR), so that TensorBoard and `ftcli report` see a running job, and a failed or
        preempted one keeps its curve. Each object is replaced whole, never half-written. A failed sync before the
        end is a warning (the next one catches up); at the end (`final`) it raises."""
        if not self.dist.is_main or not storage.is_gcs(self.paths.logs_dir):
            return
        checkpoint.still_held(self.paths.checkpoint_dir)  # never over another run's curve
        if self._tb:
            with suppress(Exception):
                self._tb.flush()
        try:
            storage.upload_dir(self.paths.local_logs_dir, self.paths.logs_dir, marker=False)
        except Exception as e:
            if final:
                raise
            log.warning("could not copy the logs to %s (%s); trying again at the next evaluation or checkpoint",
                        self.paths.logs_dir, storage.error_line(e))
        self._logs_synced = time.monotonic()

    def _log_write_error(self, e: OSError, what: str, path: Path) -> TrainerError:
        """A full or read-only disk under the logs: one line naming the file (TrainerError). The log files are
        closed quietly, so that closing them again (their unwritten buffer) cannot replace this error."""
        for f in (self._jsonl, self._tb):
            if f:
                with suppress(Exception):
                    f.close()
        self._jsonl = None
        self._tb = False
        where = f"{path} (staged for {self.paths.logs_dir})" if storage.is_gcs(self.paths.logs_dir) else str(path)
        return TrainerError(storage.write_error(e, what, where))

    def tensorboard(self) -> SummaryWriter | None:
        if self._tb is None:
            try:
                from torch.utils.tensorboard import SummaryWriter

                # A restart after a crash or a kill trains the steps after its checkpoint again, and the earlier
                # attempt's event files still hold them. purge_step writes a SessionLog.START at the first step
                # this attempt logs: TensorBoard's Python loader hides the earlier values from there on, but only
                # at a START that is not the run's first, so every attempt writes one (RustBoard keeps each
                # step's last value by itself).
                self._tb = SummaryWriter(str(self.paths.local_logs_dir), purge_step=self.global_step + 1)
            except OSError as e:
                raise self._log_write_error(e, "the TensorBoard logs", self.paths.local_logs_dir) from None
            except ImportError:
                log.warning("tensorboard is not installed: no TensorBoard event files (metrics.jsonl still)")
                self._tb = False
        return self._tb or None

    def install_stop_handlers(self) -> dict:
        """SIGTERM and a first Ctrl-C finish the step, checkpoint and stop; a second Ctrl-C stops at once. Returns
        the handlers they replace, for restore_stop_handlers."""
        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            # Vertex sends SIGTERM before preempting a spot VM or for maintenance: finish the step,
            # checkpoint, exit non-zero so the worker is restarted and resumes.
            self._stop_requested = signal.SIGTERM

        first_sigint: list[float] = []

        def on_sigint(signum: int, frame: FrameType | None) -> None:
            # Ctrl-C lost up to a whole epoch (no checkpoint until its end by default): keep the work done so far.
            now = time.monotonic()
            if first_sigint and now - first_sigint[0] < SAME_CTRL_C_S:
                # The same Ctrl-C again: a SIGINT to the whole process group reaches the trainer and ftcli, which
                # passes its copy on; taken for "Ctrl-C again", it cut the checkpoint short.
                return
            if self._stop_requested:
                raise KeyboardInterrupt
            first_sigint.append(now)
            self._stop_requested = signal.SIGINT
            what = b"evaluation batch" if getattr(self, "_evaluating", False) else b"step"  # (EvalCut)
            os.write(2, b"\nCtrl-C: finishing this " + what + b" and writing a checkpoint (Ctrl-C again stops at "
                        b"once)\n")

        previous = {}
        try:
            for signum, handler in ((signal.SIGTERM, on_sigterm), (signal.SIGINT, on_sigint)):
                previous[signum] = signal.signal(signum, handler)
        except ValueError:  # not the main thread (e.g. called from a test's thread)
            pass
        return previous

    @staticmethod
    def restore_stop_handlers(previous: dict) -> None:
        for signum, handler in previous.items():
            try:
                signal.signal(signum, handler)
            except (ValueError, TypeError):
                pass

    def resume(self) -> None:
        state = checkpoint.load_latest(self.paths.checkpoint_dir, self.model)
        lowest, highest = spread(int(state["global_step"]) if state else 0, self.dist, self.device)
        if lowest != highest:
            # Each rank takes the newest checkpoint it can read: one that a rank could not read (a passing read
            # error) left the ranks at different steps with different weights, to hang in the next collective or
            # train diverging copies.
            raise TrainerError(f"the workers resumed from different checkpoints (steps {lowest} and {highest}): one "
                               f"could not read the newest in {self.paths.checkpoint_dir} (its warning above says "
                               "why)", hint="run the job again, or remove the unreadable checkpoint folder")
        if state is None:
            # No complete checkpoint (a crash, or a VM gone during the first one's upload): the run starts over, and
            # the rows an earlier attempt logged are logged again
            self._resume_best(None)
            self._forget_rows_after(0)
            return
        self.global_step = int(state["global_step"])
        self.epoch = int(state["epoch"])
        if state.get(checkpoint.AS_EXPORTED):  # (a final checkpoint: the export takes its weights file)
            self.weights_from = storage.join(self.paths.checkpoint_dir, f"step-{self.global_step:08d}")
        self._eval_pending = bool(state.get("eval_pending", False))
        if "optimizer" in state:
            written_by = int(state.get("world_size", self.dist.world_size))  # (absent: written before it was kept)
            if written_by != self.dist.world_size:
                # Each process trains on its own share of every global batch (batch size x processes): with another
                # number of them the steps, the schedule and the place in the data would not be the same run's.
                raise TrainerError(
                    f"the step {self.global_step} checkpoint in {self.paths.checkpoint_dir} was written by "
                    f"{written_by} process(es) and this run has {self.dist.world_size}: a step would train on "
                    f"{self.global_batch * self.cfg.gradient_accumulation_steps} examples instead of "
                    f"{self.cfg.batch_size * self.cfg.gradient_accumulation_steps * written_by}; resume with as many "
                    "GPUs and machines as before, or start over with another --output-dir")
            saved = [len(g["params"]) for g in state["optimizer"]["param_groups"]]
            here = [len(g["params"]) for g in self.optimizer.param_groups]
            if saved != here:
                # The weight-decay groups changed once (by shape until 2026-11-27, by name since, as the HF Trainer
                # chooses them: MPNet, T5, XLNet and ConvBERT differ): a checkpoint of the older trainer was torch's
                # ValueError traceback here.
                raise TrainerError(
                    f"the step {self.global_step} checkpoint in {self.paths.checkpoint_dir} was written by a trainer "
                    f"that grouped the weights for weight decay differently ({saved} weights per group, {here} now): "
                    "finish the run with the ftcli version that started it, or start over with another --output-dir")
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.scaler.load_state_dict(state["scaler"])
            self._set_rng_state(state)
        elif self.epoch < self.cfg.epochs and not state.get("early_stopped"):
            # Only the last epoch's checkpoint (or an early stop's) goes without them (save_checkpoint), and the run's
            # fingerprint fixes the number of epochs: this one was altered.
            raise TrainerError(f"the step {self.global_step} checkpoint in {self.paths.checkpoint_dir} has no "
                               f"optimizer state but the run is at epoch {self.epoch} of {self.cfg.epochs}: remove "
                               "that folder, or give another --output-dir")
        self.stats.samples = int(state["samples"])
        self.stats.real_tokens = int(state["real_tokens"])
        # A checkpoint written before it was kept leaves the run's pad fraction unknown (left out, not made up).
        self.stats.padded_tokens = int(state.get("padded_tokens", 0))
        self.stats.pad_known = "padded_tokens" in state
        self.stats.train_seconds = float(state["train_seconds"])
        self._loss_total = float(state["loss_total"])
        self._loss_count = int(state["loss_count"])
        self.early_stopped = bool(state.get("early_stopped", False))
        stopped_by = state.get("stopped_by")
        if self.early_stopped and isinstance(stopped_by, dict) and stopped_by != self._stopped_by():
            # Other options would export the stopped run and say they stopped it (metrics.json, ftcli report)
            options = " ".join(f"--{k.replace('_', '-')} {v:g}" for k, v in stopped_by.items() if v)
            raise TrainerError(f"the run in {self.paths.checkpoint_dir} stopped early at step {self.global_step} "
                               f"with {options}, and trains no further: give the same options to export it again, "
                               "or start over with another --output-dir")
        self._resume_best(state)
        self._forget_rows_after(self.global_step, eval_too=self._eval_pending)
        if self.early_stopped:
            # (its stop was said by the run that stopped: said again, it read as a second stop at the same step)
            self._stop_said = True
            if self.dist.is_main:
                log.info("the run had already stopped early at step %d of %d (--early-stopping %d): nothing to "
                         "train; exporting it again", self.global_step, self.total_steps,
                         self.cfg.early_stopping)

    def _resume_best(self, state: dict | None) -> None:
        """The best evaluation and the patience counter as the checkpoint recorded them. A best-<step> folder after the
        checkpoint is an earlier attempt's, from steps trained again: removed (rank 0), as are all of them when the run
        starts over."""
        if not self.keep_best:
            return
        root = self.paths.checkpoint_dir
        step = int(state["global_step"]) if state else 0
        best = state.get("best") if state else None
        ended = bool(state and (self.epoch >= self.cfg.epochs or state.get("early_stopped")))  # nothing to train
        if isinstance(best, dict) and not checkpoint.has_best(root, int(best["step"])) and int(best["step"]) == step:
            # The checkpoint just loaded is of the best's very step (a curve still improving at the run's end, or a
            # checkpoint at a new best's step): the model holds the best's weights (the evaluation comes before its
            # step's checkpoint, no optimizer step between). A finished run was refused ("put that folder back"), and
            # one with steps left looked for another best, exporting another model than the uninterrupted run's. The
            # best stays; with steps left, its folder is written again from these weights (a later export or resume
            # loads it from there).
            if self.dist.is_main:
                if ended:
                    log.info("the best evaluation's weights (step %d) are not in %s: the step %d checkpoint holds "
                             "them", step, root, step)
                else:
                    written = checkpoint.save_best(root, step, self.model, {
                        "step": step, "epoch": float(best["epoch"]), "value": float(best["value"]),
                        "metric": self.best_key})
                    self._best_as_exported = step if written else None
                    log.info("the best evaluation's weights (step %d) were not in %s: written again from the step %d "
                             "checkpoint, which holds them", step, root, step)
        elif isinstance(best, dict) and not checkpoint.has_best(root, int(best["step"])):
            if ended:
                # Nothing left to train, so no evaluation to find a best in: the last step's weights would be exported
                # (over a kept model/) under a warning that no evaluation gave a finite metric.
                kept = int(best["step"])
                where = storage.join(root, f"best-{kept:08d}")
                raise TrainerError(
                    f"the best evaluation's weights (step {kept}, {self.best_key} "
                    f"{float(best['value']):.4f}) are not in {where}, "
                    f"and the run ended at step {step}: nothing is left to train to find another best, and the last "
                    "step's weights are not the model --keep-best asked for",
                    hint="put that folder back to export it, or train again with another --output-dir (ftcli local: "
                         "--restart)")
            log.warning("the best evaluation's weights (step %d) are not in %s: the best is looked for from step %d on",
                        int(best["step"]), root, step)
            self._lost_best = int(best["step"])
            best = None
        if isinstance(best, dict):
            self.best = {"step": int(best["step"]), "epoch": float(best["epoch"]), "value": float(best["value"])}
        if state and (best is not None or "best" not in state):  # (a best whose weights are gone: counted anew)
            self.bad_evals = int(state.get("bad_evals", 0))
        self._best_refs = [self.best["step"] if self.best else None]
        if self.dist.is_main:
            checkpoint.prune_best(root, {self.best["step"]} if self.best else set(), above=step)

    def _rng_state(self) -> dict:
        """This process's own random-number generators: the CPU's (dropout on a CPU) and its GPU's (dropout on a
        GPU). Nothing else draws while training: the batch order comes from (seed, epoch) alone (plan_batches), and
        Python's and NumPy's global generators are used only before the first step (set_seed, the data's split)."""
        torch = self.torch
        own = {"cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            own["cuda"] = torch.cuda.get_rng_state(self.device)
        return own

    def _set_rng_state(self, state: dict) -> None:
        """Each process goes on with its own generators' state (`rng`, one per rank): every rank draws its own dropout
        masks on batches of its own sizes, so rank 0's state given to every rank made a resumed multi-process run
        differ from the uninterrupted one."""
        torch = self.torch
        per_rank = state.get("rng")
        if per_rank is not None:
            own = per_rank[self.dist.rank]
            torch.set_rng_state(own["cpu"])
            if "cuda" in own and self.device.type == "cuda":
                torch.cuda.set_rng_state(own["cuda"], self.device)
            return
        # A checkpoint written before each rank's state was kept: rank 0's, as it was
        torch.set_rng_state(state["rng_cpu"])
        if "rng_cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng_cuda"])

    def _forget_rows_after(self, step: int, eval_too: bool = False) -> None:
        """metrics.jsonl without the rows an earlier attempt logged after the checkpoint this run resumes from: they
        are trained again (the same math) and logged again, so the file had them twice and out of order (t20 t22
        t24 t22 t24 ...). A line cut off by the kill is dropped too. Written whole (storage.write_text). `eval_too`:
        the checkpoint's evaluation is done again first (EvalCut), so an evaluation row at its step goes as well."""
        if self._jsonl is None or not self._metrics_file.is_file():
            return  # (a device or pipe is not an earlier attempt's rows: /dev/full read on without end)
        lines = self._metrics_file.read_text(encoding="utf-8").splitlines()
        kept = []
        for i, line in enumerate(lines):
            try:
                row = json.loads(line)
                row_step, row_type = row.get("step"), row.get("type")
            except (ValueError, AttributeError):
                if i < len(lines) - 1:
                    kept.append(line)  # not ours to judge; only a last line cut short is dropped
                continue
            if not isinstance(row_step, int) or row_step < step or (
                    row_step == step and not (eval_too and row_type == "eval")):
                kept.append(line)
        if len(kept) == len(lines):
            return
        try:
            self._jsonl.close()
            storage.write_text(str(self._metrics_file), "".join(line + "\n" for line in kept))
            self._jsonl = open(self._metrics_file, "a")  # noqa: SIM115
        except OSError as e:
            raise self._log_write_error(e, "the metrics", self._metrics_file) from None
        dropped = len(lines) - len(kept)
        if step:
            log.info("resuming at step %d: %d metrics.jsonl row(s) logged after it by the earlier attempt are "
                     "logged again", step, dropped)
        else:
            log.info("no complete checkpoint: starting over; the %d metrics.jsonl row(s) of the earlier attempt are "
                     "logged again", dropped)

    def save_checkpoint(self, final: bool = False, eval_pending: bool = False) -> None:
        """`final`: after the last epoch, where a restart only evaluates and exports: the weights and the run's
        position, without the optimizer state (twice the weights' size) that no step will use again. For
        BERT-base 0.44 GB written (or uploaded) instead of 1.3 GB, just before the export writes the model.
        `eval_pending`: a stop cut this step's evaluation short (EvalCut): the restart evaluates it first."""
        pending_sum, pending_n = self._loss_window()  # a collective: before the ranks part
        rng = None if final else gather_to_main(self._rng_state(), self.dist)  # every rank's, a collective too
        if not self.dist.is_main:
            return
        # The logs first: a preempted Spot VM has 30 s after its SIGTERM ("120 seconds between GCE ACPI G2 Soft Off and
        # ACPI G3 Mechanical Off for Standard VMs and 30 seconds for Spot VMs", Compute Engine API
        # Scheduling.skipGuestOsShutdown, https://pub.dev/documentation/googleapis/latest/compute_v1/Scheduling/
        # skipGuestOsShutdown.html, read 2026-11-27), mostly taken by the checkpoint's upload; a VM switched off
        # between the checkpoint and the logs lost the rows up to it for good (the restart resumes after them). Rows
        # past a checkpoint that does not complete are dropped on resume (_forget_rows_after).
        self.sync_logs()
        from ftcli_trainer.cuda_graphs import plain_optimizer_state, plain_scheduler_state

        if self.skip_schedule is not None and not final:
            self.skip_schedule.to_scheduler(self.scheduler)  # (fp16: the updates made, skipped ones not counted)

        state: dict[str, Any] = {} if final else {
            # As the eager path writes them (float learning rates): a checkpoint resumes on either path.
            "optimizer": plain_optimizer_state(self.optimizer.state_dict()),
            "scheduler": plain_scheduler_state(self.scheduler.state_dict()),
            "scaler": self.scaler.state_dict(),
            "rng": rng,  # one per rank, in rank order
            "world_size": self.dist.world_size,
        }
        state |= {
            "global_step": self.global_step,
            "epoch": self.epoch,
            "samples": self.stats.samples,
            "real_tokens": self.stats.real_tokens,
            "padded_tokens": self.stats.padded_tokens,
            "train_seconds": self.stats.train_seconds,
            "loss_total": self._loss_total + pending_sum,
            "loss_count": self._loss_count + pending_n,
        }
        if eval_pending:
            state["eval_pending"] = True
        if self.early_stopped:
            state["early_stopped"] = True  # a restart exports, it does not train on
            state["stopped_by"] = self._stopped_by()
        if self.keep_best:
            if self.best is not None:
                state["best"] = dict(self.best)
            state["bad_evals"] = self.bad_evals  # (NaN evaluations count before any best too)
        root = self.paths.checkpoint_dir
        # The best evaluation's weights written at this very step (no optimizer step since: global_step counts them),
        # as the export writes them: the same tensors, taken from best-<step> (at the end of a run whose curve still
        # improves, the final checkpoint's; at an epoch's end, a best there)
        same = (self.keep_best and self.best is not None and self.best["step"] == self.global_step
                and self._best_as_exported == self.global_step)
        as_exported = checkpoint.save(root, self.global_step, self.model, state, final=final,
                                      weights_from=storage.join(root, f"best-{self.global_step:08d}") if same else None)
        self.weights_from = storage.join(root, f"step-{self.global_step:08d}") if as_exported else None
        if self.keep_best:
            # The kept checkpoints' best weights stay (a resume from either needs its own); older ones go
            self._best_refs = [*self._best_refs, self.best["step"] if self.best else None][-checkpoint.KEEP:]
            checkpoint.prune_best(self.paths.checkpoint_dir, self._kept_best_steps())

    def _stopped_by(self) -> dict:
        return {"early_stopping": self.cfg.early_stopping,
                "early_stopping_threshold": self.cfg.early_stopping_threshold}

    def _kept_best_steps(self) -> set[int]:
        return {s for s in self._best_refs if s is not None} | ({self.best["step"]} if self.best else set())

    # -- steps -------------------------------------------------------------------------------------

    def _to_device(self, batch: dict[str, np.ndarray]) -> dict:
        non_blocking = self.device.type == "cuda"
        return {k: self.torch.from_numpy(v).to(self.device, non_blocking=non_blocking) for k, v in batch.items()}

    def _autocast(self) -> AbstractContextManager[object]:
        if self.autocast_dtype is None:
            return nullcontext()
        return self.torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def train_step(self, group: list[np.ndarray], global_group: list[np.ndarray] | None = None) -> None:
        """One optimizer step over a group of micro-batches (this rank's shards of `global_group`)."""
        global_group = global_group if global_group is not None else group
        n_global = sum(len(b) for b in global_group)
        self._skipped_steps_schedule()
        # DDP averages gradients over ranks; scaling by world/n_global makes the result the mean over the
        # whole global batch, whatever each rank's share.
        scale = self.dist.world_size / n_global
        if self.static_steps is not None:
            computed = self.static_steps.run(group, scale)
            self.stats.real_tokens += sum(int(self._train_lengths[idx].sum()) for idx in group)
            self.stats.padded_tokens += computed
            self._loss_acc_n += sum(len(b) for b in group)
            self.stats.samples += n_global
            if self.skip_schedule is None:  # (fp16: moved on inside the update, _clip_and_step)
                self.scheduler.step()  # fills the optimizer's on-device learning rates in place
                self.static_steps.keep_lr_on_device()
            return
        for i, idx in enumerate(group):
            batch = self._to_device(collate(self.train_enc, idx, self.pad_id, self.multiple_of))
            labels = batch.pop("labels")
            last = i == len(group) - 1
            # (with several ranks train_model is a DistributedDataParallel, whose no_sync nn.Module's __getattr__
            # types as a Tensor or a Module)
            sync = (self.train_model.no_sync() if self.dist.enabled and not last  # type: ignore[operator]
                    else nullcontext())
            compiled = self.compiled_blocks.active() if self.compiled_blocks is not None else nullcontext()
            with sync:
                with self._autocast(), compiled:
                    logits = self.train_model(**batch).logits
                loss = loss_sum(logits, labels, self.multi_label, self.regression)
                self.scaler.scale(loss * scale).backward()
            self._loss_acc += loss.detach()
        for idx in global_group:
            lengths = self.train_enc.lengths[idx]
            self.stats.real_tokens += int(lengths.sum())
            self.stats.padded_tokens += int(lengths.max()) * len(idx)
        self._loss_acc_n += sum(len(b) for b in group)
        self.stats.samples += n_global
        self._clip_and_step()
        if self.skip_schedule is None:  # (fp16: moved on in _clip_and_step)
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)

    def _clip_and_step(self) -> None:
        torch = self.torch
        max_norm = self.cfg.max_grad_norm
        if max_norm > 0 and not self.scaler.is_enabled() and self.optimizer.defaults.get("fused"):
            # Clipping folded into the update: the fused AdamW divides each gradient by `grad_scale` inside
            # its kernel, which saves clip_grad_norm_'s separate pass multiplying every gradient by the same
            # factor (~2 % of a MiniLM step on CPU). Same factor, same update.
            grads = [p.grad for p in self.model.parameters() if p.grad is not None]
            norm = torch.nn.utils.get_total_norm(grads, foreach=True)
            # (an attribute torch does not declare: Adam.step reads it as getattr(self, "grad_scale", None), and
            # torch's own GradScaler.step sets and deletes it under the same type: ignore; torch 2.13)
            self.optimizer.grad_scale = (norm + 1e-6).div(max_norm).clamp_(min=1.0)  # type: ignore[attr-defined]
            try:
                self.optimizer.step()
            finally:
                del self.optimizer.grad_scale  # type: ignore[attr-defined]
            return
        if max_norm > 0:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm, foreach=True)
        self.scaler.step(self.optimizer)
        if self.skip_schedule is not None:
            self.skip_schedule.advance(self.scaler, self.optimizer)
        self.scaler.update()

    def _skipped_steps_schedule(self) -> SkippedStepsSchedule | None:
        """fp16: the schedule that a skipped update leaves where it was (SkippedStepsSchedule), set up once, after a
        resume (its position is the checkpoint's) and before the graph path arms the optimizer (it keeps these
        learning-rate tensors). Outside any capture: it makes tensors."""
        if self.skip_schedule is None and self.scaler.is_enabled():
            self.skip_schedule = SkippedStepsSchedule(self.torch, self.optimizer, self.scheduler, self.warmup,
                                                      self.total_steps)
        return self.skip_schedule

    def evaluate(self) -> dict:
        torch = self.torch
        out: dict = {}
        self.model.eval()
        started = time.perf_counter()
        n_total = 0
        # A stop asked for (SIGTERM, Ctrl-C) is looked for before every batch; with several ranks every
        # EVAL_STOP_EVERY batches, in a collective, at batches that every rank has (their shares differ by a row)
        every = EVAL_STOP_EVERY if self.dist.enabled else 1
        self._evaluating = True
        try:
            with torch.inference_mode():
                for i, (name, enc) in enumerate(self.evals.items()):
                    logits = np.zeros((len(enc), len(self.label_names)), dtype=np.float32)
                    order = np.argsort(-enc.lengths, kind="stable")[self.dist.rank::self.dist.world_size]
                    bs = self.cfg.batch_size * 2
                    common = -(-(len(enc) // self.dist.world_size) // bs)
                    for j, start in enumerate(range(0, len(order), bs)):
                        if j < common and j % every == 0 and self._stop_wanted():
                            raise EvalCut
                        idx = order[start:start + bs]
                        batch = self._to_device(collate(enc, idx, self.pad_id, self.multiple_of))
                        batch.pop("labels")
                        with self._autocast():
                            logits[idx] = self.model(**batch).logits.float().cpu().numpy()
                    if self.dist.enabled:  # every prediction gathered exactly once (small: rows x labels floats)
                        logits = gather_rows(logits[order], order, len(enc), self.dist)
                    m = metrics.of_logits(logits, enc.labels, self.label_names, self.task_metrics,
                                          is_multi_label=self.multi_label, is_regression=self.regression,
                                          threshold=self.cfg.threshold)
                    out.update(metrics.prefixed(m, name, primary=i == 0))
                    self.predictions[name] = (enc.labels, logits)
                    n_total += len(enc)
        finally:
            self._evaluating = False
            self.model.train()
        seconds = time.perf_counter() - started
        out["eval_runtime"] = seconds
        out["eval_samples_per_second"] = n_total / seconds if seconds > 0 else 0.0
        return out

    # -- reporting ---------------------------------------------------------------------------------

    def _record(self, kind: str, values: dict) -> None:
        if not self.dist.is_main:
            return
        row = {"type": kind, "step": self.global_step, "epoch": round(self._epoch_float(), 4), **values}
        for callback in self.record_callbacks:  # e.g. Weights & Biases
            callback(kind, self.global_step, values)
        jsonl = self._jsonl
        assert jsonl is not None  # opened in __init__ on the main process; a write error ends the run
        try:
            jsonl.write(json.dumps(row) + "\n")
            jsonl.flush()
        except OSError as e:
            raise self._log_write_error(e, "the metrics", self._metrics_file) from None
        self.stats.history.append(row)
        tb = self.tensorboard()
        if tb is not None:
            try:
                for k, v in values.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        tb.add_scalar(f"{kind}/{k.removeprefix('eval_')}", v, self.global_step)
                tb.flush()
            except OSError as e:  # raised from TensorBoard's writer thread
                raise self._log_write_error(e, "the TensorBoard logs", self.paths.local_logs_dir) from None

    def _loss_window(self) -> tuple[float, int]:
        """(loss sum, examples) since the last train line, over every rank: rank 0's own half alone was shown as the
        run's loss (and kept as its train_loss). A collective: every rank calls it at the same step."""
        loss_sum, n = add_up([float(self._loss_acc.item()), float(self._loss_acc_n)], self.dist, self.device)
        return loss_sum, int(n)

    def _epoch_float(self) -> float:
        return self.global_step / self.steps_per_epoch if self.steps_per_epoch else 0.0

    def _log_train(self, bar: tqdm | None) -> None:
        loss_sum, n = self._loss_window()
        loss = loss_sum / max(1, n)
        self._loss_total += loss_sum
        self._loss_count += n
        self._loss_acc.zero_()
        self._loss_acc_n = 0
        secs = self.stats.train_seconds + (time.perf_counter() - self._t0)
        sps = self.stats.samples / secs if secs else 0.0
        tps = self.stats.real_tokens / secs if secs else 0.0
        # The rate the step just taken used, as the HF Trainer logs it: get_last_lr() after scheduler.step() is the
        # next step's (the curve showed each step one step ahead: 0.0 for the last one, never warmup's first 0)
        # (fp16: the position that step trained at, skipped updates not counted; read with the loss, no extra wait)
        used = int(self.skip_schedule.used.item()) if self.skip_schedule is not None else self.global_step - 1
        lr = float(self.scheduler.base_lrs[0]) * lr_factor(used, self.warmup, self.total_steps)
        self._record("train", {"loss": loss, "learning_rate": lr, "samples_per_second": sps,
                               "tokens_per_second": tps})
        if not self.dist.is_main:
            return
        if bar is not None:
            bar.set_postfix_str(f"loss {loss:.4f} · lr {lr:.2e} · {sps:.1f} samples/s", refresh=False)
        else:
            log.info("step %d/%d | epoch %.2f | loss %.4f | lr %.3e | %.1f samples/s | %.0f tokens/s",
                     self.global_step, self.total_steps, self._epoch_float(), loss, lr, sps, tps)

    def _evaluated(self, results: dict) -> None:
        """After each evaluation, on every rank: the best kept (--keep-best), an early stop decided, the line logged."""
        self.last_eval = results
        note = self._keep_if_best(results)
        self._log_eval(results, note)

    def _keep_if_best(self, results: dict) -> str:
        """--keep-best: keep this evaluation's weights when it is the best so far; --early-stopping: count it against
        the patience. HF's rules (transformers 5.24): the patience counter compares with the best before this
        evaluation, and only a strict improvement by more than the threshold resets it
        (EarlyStoppingCallback.check_metric_value); the best weights are replaced on any strict improvement
        (Trainer._determine_best_metric). Every rank decides alike (each holds the whole evaluation's metrics); rank 0
        writes. Returns what the eval line adds.

        A value that is not a number (a NaN loss, an undefined Pearson) is never kept and always counts against the
        patience, as in HF (np.greater with NaN is False) except at the first evaluation, where HF's counter stays 0
        (its best is still None there) and ours counts it: a NaN sets no best."""
        if not self.keep_best:
            return ""
        cfg = self.cfg
        value = results.get(self.best_key)
        value = float(value) if isinstance(value, (int, float)) and math.isfinite(value) else math.nan
        best = self.best["value"] if self.best is not None else None

        def better(a: float, b: float) -> bool:
            return a > b if self.best_greater else a < b

        if not math.isnan(value) and (best is None or (better(value, best)
                                                       and abs(value - best) > cfg.early_stopping_threshold)):
            self.bad_evals = 0
        else:
            self.bad_evals += 1
        note = ""
        if math.isnan(value):
            note = f" | {self.best_key} is not a number: not kept"
            if self.best is not None:
                note += f" (best {self.best['value']:.4f} at step {self.best['step']})"
            if cfg.early_stopping:
                note += f", {self.bad_evals}/{cfg.early_stopping} without improvement"
        elif best is None or better(value, best):
            previous = self.best
            self.best = {"step": self.global_step, "epoch": round(self._epoch_float(), 4), "value": value}
            note = " | best so far"
            if cfg.early_stopping and self.bad_evals:  # kept, but it counts against the patience (HF's rules)
                note += (f", but within --early-stopping-threshold {cfg.early_stopping_threshold:g} of the previous "
                         f"best: {self.bad_evals}/{cfg.early_stopping} without improvement")
            if self.dist.is_main:
                root = self.paths.checkpoint_dir
                written = checkpoint.save_best(root, self.global_step, self.model,
                                               {**self.best, "metric": self.best_key})
                self._best_as_exported = self.global_step if written else None
                if previous is not None and previous["step"] not in self._best_refs:
                    checkpoint.prune_best(root, self._kept_best_steps())  # superseded before any checkpoint named it
        elif self.best is not None:
            note = f" | best {self.best['value']:.4f} at step {self.best['step']}"
            if cfg.early_stopping:
                note += f", {self.bad_evals}/{cfg.early_stopping} without improvement"
        # A collective after rank 0's write: no rank reads the best weights before they are there
        stop = any_rank(bool(cfg.early_stopping) and self.bad_evals >= cfg.early_stopping, self.dist, self.device)
        if stop and not self.early_stopped and self.global_step < self.total_steps:  # (the last ends the run anyway)
            self.early_stopped = True
            note += "; stopping early"
        return note

    def _log_eval(self, results: dict, note: str = "") -> None:
        if not self.dist.is_main:
            return
        self._record("eval", {k: v for k, v in results.items() if isinstance(v, (int, float))})
        for callback in self.eval_callbacks:  # e.g. the tuning service's metric report
            callback(self.global_step, results)
        parts = []
        shown = metrics.headline(self.task_metrics, self.multi_label, self.regression)
        for name in self.evals:
            prefix = "eval_" if name == next(iter(self.evals)) else f"eval_{name}_"
            values = " · ".join(f"{metrics.SHOWN[k]} {results[prefix + k]:.4f}" for k in (*shown, "loss")
                                if k != "mse")  # the loss is the MSE
            parts.append(f"{name}: {values}")
        log.info("eval @ step %d (epoch %.2f) | %s%s", self.global_step, self._epoch_float(), " | ".join(parts), note)

    # -- the loop ----------------------------------------------------------------------------------

    def fit(self) -> dict:
        torch = self.torch
        cfg = self.cfg
        self._loss_total = 0.0
        self._loss_count = 0
        self.resume()
        self._loss_acc = torch.zeros((), device=self.device)
        self._loss_acc_n = 0
        self._skipped_steps_schedule()
        self._setup_static_steps()
        self._prepare_static_steps()
        stop_handlers = self.install_stop_handlers()
        self.model.train()
        if self.dist.is_main:
            self.tensorboard()  # its import (~0.2-1 s) happens before the clock, not in the first steps
        use_bar = sys.stderr.isatty() and self.dist.is_main
        bar = None
        if use_bar:
            from tqdm.auto import tqdm

            bar = tqdm(total=self.total_steps, initial=self.global_step, unit="step", dynamic_ncols=True,
                       file=sys.stderr)
        self.last_eval = {}
        if self.dist.is_main and (why := self._early_stopping_idle()):
            log.warning("--early-stopping %d: %s", cfg.early_stopping, why)
        self._t0 = time.perf_counter()
        try:
            if self._eval_pending:  # the evaluation a stop cut short, before anything else
                self._eval_pending = False
                if self.dist.is_main:
                    log.info("evaluating step %d first: a stop cut its evaluation short", self.global_step)
                # (cut short again: the checkpoint it resumed from still says so)
                self._pause(lambda: self._evaluated(self._evaluate_or_stop()))
                if self.early_stopped:  # the run ends here: its checkpoint says so, for a restart
                    self._pause(lambda: self.save_checkpoint(final=True), sync=False)
            while self.epoch < cfg.epochs and not self.early_stopped:
                self.weights_from = None  # (steps to train: no checkpoint holds the weights the export will have)
                global_batches = [b for b in plan_batches(self.train_enc.lengths, self.global_batch, cfg.seed,
                                                          self.epoch) if len(b) >= self.dist.world_size]
                batches = shard_batches(global_batches, self.dist)
                gas = cfg.gradient_accumulation_steps
                groups = [(batches[i:i + gas], global_batches[i:i + gas]) for i in range(0, len(batches), gas)]
                done_in_epoch = self.global_step - self.epoch * self.steps_per_epoch
                for group, global_group in groups[done_in_epoch:]:
                    self.train_step(group, global_group)
                    self.global_step += 1
                    if bar is not None:
                        bar.update(1)
                    at_epoch_end = self.global_step % self.steps_per_epoch == 0
                    # every epoch's last step is logged, bar or not: the curve (and metrics.jsonl) ran short of
                    # the epoch's end on a terminal
                    if self.global_step % self.log_every == 0 or at_epoch_end:
                        self._log_train(bar)
                        if time.monotonic() - self._logs_synced > storage.LOGS_SYNC_S:  # live TensorBoard between evals
                            self._pause(lambda: None)
                    if cfg.eval_every and self.global_step % cfg.eval_every == 0 and not at_epoch_end:
                        self._pause(lambda: self._evaluated(self._evaluate_or_stop(checkpoint=True)))
                        if self.early_stopped:  # the run ends here: its checkpoint says so, for a restart
                            self._pause(lambda: self.save_checkpoint(final=True), sync=False)
                            break
                    saved = bool(cfg.save_every and self.global_step % cfg.save_every == 0 and not at_epoch_end)
                    if saved:
                        self._pause(self.save_checkpoint, sync=False)
                    # After the save: a stop asked for while it ran stops with it, not one step and checkpoint later
                    # (Vertex gives a preempted worker seconds, not two uploads)
                    if self._stop_wanted():
                        if not saved:
                            self._pause(self.save_checkpoint, sync=False)
                        self._stop()
                if self.early_stopped:
                    break
                self.epoch += 1
                self.last_eval = {}

                def epoch_end() -> None:
                    last = self.epoch >= cfg.epochs
                    self._evaluated(self._evaluate_or_stop(checkpoint=True, final=last))
                    self.save_checkpoint(final=last or self.early_stopped)

                self._pause(epoch_end, sync=False)  # its checkpoint copies the logs, its evaluation's row too
                if self.early_stopped:
                    break
                if self.epoch < cfg.epochs and self._stop_wanted():
                    self._stop()  # asked for during the evaluation or checkpoint: that checkpoint is the one
        finally:
            self.restore_stop_handlers(stop_handlers)
            if bar is not None:
                bar.close()
            if self.static_steps is not None and self.dist.is_main:
                log.info("CUDA graphs: %s", self.static_steps.summary())
            self.stats.train_seconds += time.perf_counter() - self._t0
            self._t0 = time.perf_counter()
            if self._jsonl:
                self._jsonl.close()
            if self._tb:
                self._tb.close()
        last_eval = self.last_eval
        if not last_eval:  # resumed after the last epoch's (or the early stop's) checkpoint: evaluate what we have
            # (cut short by a stop asked for while the loop's handlers were on: that checkpoint is the one)
            last_eval = self._evaluate_or_stop()
        if self.dist.is_main and self.early_stopped and not self._stop_said:
            if self.best is not None:
                log.info("early stopping: %d evaluation%s in a row did not improve %s on %.4f (step %d); stopped at "
                         "step %d of %d", self.bad_evals, "" if self.bad_evals == 1 else "s", self.best_key,
                         self.best["value"], self.best["step"], self.global_step, self.total_steps)
            else:
                log.info("early stopping: %d evaluation%s in a row gave no number for %s; stopped at step %d of %d",
                         self.bad_evals, "" if self.bad_evals == 1 else "s", self.best_key, self.global_step,
                         self.total_steps)
        loss_sum, n = self._loss_window()
        self._loss_total += loss_sum
        self._loss_count += n
        secs = self.stats.train_seconds
        summary: dict[str, Any] = {
            "epoch": round(self._epoch_float(), 4) if self.early_stopped else float(cfg.epochs),
            "global_step": self.global_step,
            "train_loss": self._loss_total / max(1, self._loss_count),
            "train_runtime": secs,
            "train_samples": len(self.train_enc),
            "train_samples_per_second": self.stats.samples / secs if secs else 0.0,
            "train_steps_per_second": self.global_step / secs if secs else 0.0,
            "train_tokens_per_second": self.stats.real_tokens / secs if secs else 0.0,
        }
        if self.stats.pad_known:
            summary["train_pad_fraction"] = 1 - self.stats.real_tokens / max(1, self.stats.padded_tokens)
        if self.gpu_warmup:
            summary["gpu_warmup"] = dict(self.gpu_warmup)
        summary["cuda_graphs"] = (self.static_steps.report() if self.static_steps is not None
                                  else {"off": self.graphs_reason or ("--cuda-graphs off" if cfg.cuda_graphs == "off"
                                                                      else "no CUDA GPU")})
        summary.update(self._kept(last_eval))
        return summary

    def _kept(self, last_eval: dict) -> dict:
        """The exported weights' evaluation: with --keep-best, the best evaluation's weights loaded back from their
        folder (on every rank: the evaluation is a collective) and evaluated again, so that metrics.json, the
        predictions and the exported model are the same model's; the last step's evaluation goes beside them."""
        if not self.keep_best:
            return last_eval
        out: dict[str, Any] = {"metric_for_best_model": self.best_key}
        if self.cfg.early_stopping:
            out["early_stopping"] = {"patience": self.cfg.early_stopping,
                                     "threshold": self.cfg.early_stopping_threshold, "stopped": self.early_stopped,
                                     "evaluations_without_improvement": self.bad_evals}
        if self.best is None:
            if self._lost_best is not None:
                log.warning("--keep-best: the best evaluation's weights (step %d) were gone at the resume, and no "
                            "evaluation since gave a finite %s; the last step's weights are exported",
                            self._lost_best, self.best_key)
            else:
                log.warning("--keep-best: no evaluation gave a finite %s; the last step's weights are exported",
                            self.best_key)
            return {**last_eval, **out}
        kept = last_eval
        if self.best["step"] != self.global_step:
            root = self.paths.checkpoint_dir
            as_exported = checkpoint.load_best(root, self.best["step"], self.model)
            # The best weights, not the final checkpoint's: their own file when it is written as the export writes it
            self.weights_from = storage.join(root, f"best-{self.best['step']:08d}") if as_exported else None
            # (cut short by a stop asked for during the last, or the early stop's, checkpoint: written, it is the one
            # to resume from, and the restart evaluates the best weights again; this evaluation can take minutes)
            kept = self._evaluate_or_stop()
            if self.dist.is_main:
                log.info("kept the weights of step %d (epoch %.2f): %s %.4f, against %.4f at the last step %d",
                         self.best["step"], self.best["epoch"], self.best_key, kept.get(self.best_key, math.nan),
                         last_eval.get(self.best_key, math.nan), self.global_step)
                # The tuning service's last report: the exported model's value. A trial completed without a final
                # measurement gets "a previously reported measurement" ("Otherwise, the service will auto-select a
                # previously reported measurement as the final-measurement", CompleteTrialRequest.final_measurement,
                # https://cloud.google.com/java/docs/reference/google-cloud-aiplatform/2.5.3/
                # com.google.cloud.aiplatform.v1.CompleteTrialRequest, read 2026-11-27): which one is not said, and the
                # collapsed last evaluation's must not be the one that stands for the trial.
                for callback in self.eval_callbacks:
                    callback(self.global_step, kept)
        last = {k: v for k, v in last_eval.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        out |= {"best_global_step": self.best["step"], "best_epoch": self.best["epoch"],
                "best_metric": self.best["value"],
                "last_eval": {"global_step": self.global_step, "epoch": round(self._epoch_float(), 4), **last}}
        return {**kept, **out}

    def _early_stopping_idle(self) -> str:
        """Why --early-stopping N can never stop this run ("" when it can): it needs N + 1 evaluations before the last
        one (the best, then N without improvement). (With no --eval-every, config refuses it before any work.)"""
        cfg = self.cfg
        if not cfg.early_stopping or not self.steps_per_epoch:
            return ""
        every = cfg.eval_every
        count = evaluation_count(self.steps_per_epoch, cfg.epochs, every)  # (as a run outside Vertex is refused)
        if count >= cfg.early_stopping + 2:
            return ""
        return (f"this run evaluates {count} time(s) ({self.total_steps} steps, --eval-every {every}, "
                f"{cfg.epochs} epoch(s)), and a stop needs {cfg.early_stopping + 1} before the last: it cannot stop "
                "early (a smaller --eval-every gives it more evaluations); the best evaluation is still kept")

    def _evaluate_or_stop(self, checkpoint: bool = False, final: bool = False) -> dict:
        """evaluate(), or, when a stop asked for cuts it short (EvalCut), the run's stop (Preempted): with
        `checkpoint`, after a checkpoint of this step (`final` as save_checkpoint's) that says the evaluation is
        still to do; without, from the checkpoint already written."""
        try:
            return self.evaluate()
        except EvalCut:
            if checkpoint:
                self.save_checkpoint(final=final, eval_pending=True)
            self._stop()

    def _stop_wanted(self) -> bool:
        """A stop asked for (SIGTERM, a first Ctrl-C) on any rank: a collective with several."""
        return any_rank(bool(self._stop_requested), self.dist, self.device)

    def _stop(self) -> NoReturn:
        """Raise Preempted for the stop asked for (a checkpoint of this step is written)."""
        if self._stop_requested == signal.SIGINT:
            raise Preempted(f"Ctrl-C: checkpoint written at step {self.global_step}; the same command resumes from "
                            "it", exit_code=130)
        # (here a restarted Vertex worker resumes; run by hand, the same command does)
        raise Preempted(f"SIGTERM: checkpoint written at step {self.global_step}; a restarted worker, or the same "
                        "command, resumes from it")

    def _setup_static_steps(self, capture: bool | None = None) -> None:
        """The CUDA-graph path (`--cuda-graphs`), or eager steps with one line saying why not. `capture`
        False runs the same fixed-shape steps eagerly (how the CPU tests check their math)."""
        if capture is None:
            if not self.use_graphs:
                if self.graphs_reason and self.dist.is_main:
                    only = [f"--{name.replace('_', '-')}" for name in GRAPH_PATH_ONLY if getattr(self.cfg, name)]
                    log.info("CUDA graphs off: %s; eager steps%s", self.graphs_reason,
                             f" ({' and '.join(only)} left off: the graph path's only)" if only else "")
                return
            capture = True
        from ftcli_trainer.cuda_graphs import StaticSteps

        copies = self.cfg.weight_copies and self.autocast_dtype is not None  # (fp32 training casts nothing)
        if copies and self.cfg.gradient_accumulation_steps > 1:
            copies = False
            if self.dist.is_main:
                # (fp16 on T4 and V100 takes the graph path too; the fused projections, on by default, need the copies)
                log.info("--weight-copies off%s: with several micro-batches a step, %s gradients would not add up "
                         "as fp32 ones do", " (and with them --fused-projections)" if self.fused_projections else "",
                         self.precision)

        self.static_steps = StaticSteps(
            model=self.model, optimizer=self.optimizer, clip_and_step=self._clip_and_step, enc=self.train_enc,
            pad_id=self.pad_id, rows=self.cfg.batch_size, max_length=int(max(self._train_lengths.max(), 1)),
            multi_label=self.multi_label, n_labels=len(self.label_names), device=self.device,
            regression=self.regression,
            autocast_dtype=self.autocast_dtype, loss_acc=self._loss_acc, capture=capture, weight_copies=copies,
            unmask_full=self.cfg.unmask_full_batches, shared_casts=self.cfg.shared_casts,
            compile_model=self.compile_in_graphs, eager_attention=self.compile_eager_attention,
            fused_projections=self.fused_projections, scaler=self.scaler)
        ss = self.static_steps
        if self.cfg.shared_casts and ss.shared_casts is None and ss.fused and not ss.compile_model \
                and self.dist.is_main:
            log.info("--shared-casts left off: the fused projections cast the input they share once already")
        if capture and self.dist.is_main:
            log.info("CUDA graphs on: each step padded to one of widths %s and replayed as a graph%s%s%s",
                     ",".join(map(str, ss.widths)),
                     f"; the forward reads {self.precision} copies of {len(ss.copies)} weights"
                     if ss.copies is not None else "",
                     # (no count: a cross-attention among them is found out, and left unfused, at the first forward)
                     "; query, key and value as one GEMM in each self-attention" if ss.fused else "",
                     "; a Linear input read by several layers is cast once" if ss.shared_casts is not None else "")

    def _prepare_static_steps(self) -> None:
        """--gpu-warmup: every width this run's batches use, and the update, warmed up on filler rows and captured
        before the training clock starts (cuda_graphs.StaticSteps.prepare), so the first steps replay."""
        if self.static_steps is None or not self.cfg.gpu_warmup or self.early_stopped:
            return
        from ftcli_trainer.cuda_graphs import key_name, key_order

        keys = sorted(self.step_widths(), key=key_order)
        if not keys:  # resumed after the last epoch: nothing left to train
            return
        schedule = self.skip_schedule
        position = schedule.position.clone() if schedule is not None else None
        seconds = self.static_steps.prepare(keys)
        if schedule is not None and position is not None:
            # (fp16: its warm update at learning rate 0 counted as an update made; prepare puts the rates back)
            schedule.position.copy_(position)
            schedule.used.copy_(position)
            schedule.fill()
        widths = [key_name(k) if isinstance(k, tuple) else k for k in keys]  # 512 unmasked: a string in the results
        self.gpu_warmup |= {"prepare_seconds": seconds, "widths": widths}
        if self.dist.is_main and self.static_steps.capture:
            log.info("CUDA graphs: widths %s%s warmed up and captured ahead in %.2f s, before the training clock",
                     ",".join(map(str, widths)), " and the update" if "update" in self.static_steps.graphs else "",
                     seconds)

    def step_widths(self) -> set[StepKey]:
        """The step keys of the micro-batches left in this run: the graph path's padded widths, and (width, FULL)
        for batches run unmasked (cuda_graphs.step_key)."""
        from ftcli_trainer.cuda_graphs import step_key

        ss = self.static_steps
        assert ss is not None  # called with the graph path on (its widths)
        lengths = self.train_enc.lengths
        out: set[StepKey] = set()
        for epoch in range(self.epoch, self.cfg.epochs):
            for idx in plan_batches(lengths, self.global_batch, self.cfg.seed, epoch):
                if len(idx):
                    out.add(step_key(lengths[idx], ss.rows, ss.widths, ss.unmask_full))
        return out

    def _pause(self, fn: Callable[[], None], sync: bool = True) -> None:
        """Run `fn` (eval, checkpoint) outside the training clock, then copy the logs to gs:// (`sync_logs`) unless
        `fn` saves a checkpoint, which copies them itself, first."""
        self.stats.train_seconds += time.perf_counter() - self._t0
        try:
            fn()
            if sync:
                self.sync_logs()
        finally:
            self._t0 = time.perf_counter()
