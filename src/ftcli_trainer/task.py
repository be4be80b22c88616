"""Entry point: `python -m ftcli_trainer.task ARGS` (what Vertex runs, and what `ftcli local` runs).

A recipe of small set-up steps; every option problem is reported before any data is loaded.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import errno
import logging
import os
import secrets
import shlex
import shutil
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from ftcli_trainer import __version__, storage
from ftcli_trainer.config import ConfigError, Problem, TrainConfig, early_stopping_data_problem, hint_of, parse_args
from ftcli_trainer.errors import TrainerError, first_line

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from ftcli_trainer.data import Encoded, TaskData
    from ftcli_trainer.distributed import Dist
    from ftcli_trainer.loop import Paths, Trainer

log = logging.getLogger("ftcli_trainer")


def new_run_id() -> str:
    return dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


class _LevelFormatter(logging.Formatter):
    """A line as it is; a warning as `warning: ...`: among the run's lines it reads as one (it was a bare line
    beside ftcli's own `warning:` and `error:` lines), and `ftcli logs` shows it at WARNING (Vertex files the job's
    stdout as INFO)."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        return f"warning: {line}" if logging.WARNING <= record.levelno < logging.ERROR else line


def _setup_logging() -> None:
    if sys.stdout is not None and hasattr(sys.stdout, "reconfigure"):
        # Under PYTHONIOENCODING=ascii, a Latin-1 locale or a Windows code page, stdout's encoder was strict: the
        # 'done: ... · ...' line and every line naming a folder with an é in it became a '--- Logging error ---'
        # traceback, the line lost. Shown escaped instead, as Python writes stderr and as the launcher does.
        sys.stdout.reconfigure(errors="backslashreplace")
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(_LevelFormatter("%(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False
    # Keep library chatter (datasets, tokenizers, hub) out of the job's log unless it is a warning.
    for name in ("datasets", "huggingface_hub", "transformers"):
        logging.getLogger(name).setLevel(logging.ERROR)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")


def _setup_paths(cfg: TrainConfig, env: Mapping[str, str] = os.environ) -> Paths:
    """--output-dir DIR plays Vertex's base_output_dir; otherwise Vertex's AIP_* variables; otherwise a
    fresh ./ftcli-runs/RUN_ID."""
    from ftcli_trainer.loop import Paths

    if cfg.output_dir:
        base = cfg.output_dir
        model, ckpt, logs = (storage.join(base, d) for d in ("model", "checkpoints", "logs"))
    elif env.get("AIP_MODEL_DIR"):
        model = env["AIP_MODEL_DIR"].rstrip("/")
        parent = model.rsplit("/", 1)[0] if "/" in model else "."
        ckpt = (env.get("AIP_CHECKPOINT_DIR") or storage.join(parent, "checkpoints")).rstrip("/")
        logs = (env.get("AIP_TENSORBOARD_LOG_DIR") or storage.join(parent, "logs")).rstrip("/")
    else:
        base = str(Path("ftcli-runs") / new_run_id())
        model, ckpt, logs = (storage.join(base, d) for d in ("model", "checkpoints", "logs"))
    local_logs = storage.local_tmp("logs") if storage.is_gcs(logs) else Path(logs)
    return Paths(model_dir=model, checkpoint_dir=ckpt, logs_dir=logs, local_logs_dir=local_logs)


def resolve_precision(requested: str, device_type: str, capability: tuple[int, int] | None) -> str:
    """auto: bf16 where the GPU computes in it natively (compute capability 8.0+: A100, L4, H100), fp16 with
    a loss scaler on older GPUs, fp32 on a CPU. torch.cuda.is_bf16_supported() is no guide: it is True
    on a T4 or V100 too, where bf16 is emulated and slow. An explicit --precision is kept."""
    if requested != "auto":
        return requested
    if device_type != "cuda":
        return "fp32"
    return "bf16" if capability is not None and tuple(capability) >= (8, 0) else "fp16"


def precision_problem(precision: str, device_type: str) -> Problem | None:
    """Why a resolved precision cannot run on the device, with its fix as the hint (the launcher asks this of a CPU
    job before submitting it)."""
    if precision == "fp16" and device_type != "cuda":
        return Problem("--precision fp16 needs a CUDA GPU", hint="use --precision bf16 or fp32 on a CPU")
    return None


def _setup_device(cfg: TrainConfig) -> tuple[torch.device, str]:
    import torch

    capability: tuple[int, int] | None = None  # (major, minor) of a CUDA device
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        capability = torch.cuda.get_device_capability(device)
        # TF32 matmuls: ~same accuracy for fine-tuning, several times the fp32 throughput on Ampere+.
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        device = torch.device("cpu")
    precision = resolve_precision(cfg.precision, device.type, capability)
    if problem := precision_problem(precision, device.type):
        raise TrainerError(str(problem), hint=problem.hint)
    if precision == "bf16" and capability is not None:  # on a CUDA device
        if not torch.cuda.is_bf16_supported():
            raise TrainerError(f"{torch.cuda.get_device_name(device)} has no bf16", hint="use --precision fp16")
        if capability < (8, 0):
            log.warning("%s (compute capability %d.%d) emulates bf16: slow; --precision auto picks fp16",
                        torch.cuda.get_device_name(device), *capability)
    return device, precision


def parameter_count(n: int) -> str:
    """"22.7 M parameters", "1.3 B parameters", "48.3 k parameters": a small model read "0.0 M parameters"."""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= scale * 0.9995:  # 999,960 reads "1.0 M", not "1000.0 k"
            return f"{n / scale:.1f} {unit} parameters"
    return f"{n} parameter{'s' if n != 1 else ''}"


def _head_line(model: torch.nn.Module, head: str) -> str:
    """What the run starts from: a new head, the model's own (trained for these labels), or a new one in place of
    the model's own (trained for others: load_model)."""
    how = getattr(model, "ftcli_head", "new")
    if how == "kept":
        return f"its own head, trained for these labels: {head}"
    before = how.removeprefix("replaced: ")
    return f"new head: {head}" + (f"; the model's own head, for {before}, is not reused" if before != how else "")


def _summary(cfg: TrainConfig, data: TaskData, train_enc: Encoded, evals_enc: dict[str, Encoded],
             model: PreTrainedModel, device: torch.device, precision: str, paths: Paths, trainer: Trainer,
             dist: Dist) -> None:
    import torch

    from ftcli_trainer.data import describe_source
    from ftcli_trainer.model import attention_in_use

    n_params = sum(p.numel() for p in model.parameters())
    lengths = train_enc.lengths
    where = f"{device}" + (f" ({torch.get_num_threads()} threads)" if device.type == "cpu"
                           else f" ({torch.cuda.get_device_name(device)})")
    evals = " · ".join(f"{name} {len(e):,}" for name, e in evals_enc.items())
    if data.regression:
        head = "1 output, regression (MSE)"
    else:
        head = f"{len(data.label_names)} labels, {'multi-label' if data.multi_label else 'single-label'}"
    lines = [
        f"ftcli trainer {__version__}",
        f"  task        {cfg.task} ({describe_source(cfg)})",
        f"  model       {cfg.model} ({parameter_count(n_params)}, {_head_line(model, head)})",
        f"  examples    train {len(train_enc):,} · {evals}",
        f"  tokens      mean {lengths.mean():.1f}, max {lengths.max()} (truncated at {cfg.max_length}); "
        f"batches padded to their own longest",
        f"  batch       {cfg.batch_size} × {cfg.gradient_accumulation_steps} accumulation × {dist.world_size} "
        f"process(es) = {cfg.batch_size * cfg.gradient_accumulation_steps * dist.world_size} examples per step",
        f"  steps       {trainer.total_steps} ({cfg.epochs} epoch(s) × {trainer.steps_per_epoch}), "
        f"warmup {trainer.warmup}, peak lr {cfg.learning_rate:g}",
        f"  device      {where}, precision {precision}, attention {attention_in_use(model)}",
        f"  output      {storage.join(paths.model_dir)}",
    ]
    log.info("\n".join(lines))


def run(cfg: TrainConfig) -> dict:
    paths = _setup_paths(cfg)
    device, precision = _setup_device(cfg)

    import torch
    from transformers import set_seed

    from ftcli_trainer import checkpoint, distributed
    from ftcli_trainer.cpu import keep_freed_memory
    from ftcli_trainer.data import load_task_data
    from ftcli_trainer.export import export_model, prediction_arrays
    from ftcli_trainer.loop import Trainer
    from ftcli_trainer.model import (
        align_padding,
        attention_in_use,
        load_model,
        load_tokenizer,
        max_length_problem,
        restore_attention,
        use_fast_attention_dropout,
        use_fast_dropout,
        use_varlen_attention,
    )

    dist = distributed.setup(device.type)
    if not dist.is_main:
        log.setLevel(logging.WARNING)  # one voice in the job's log: rank 0's
    if dist.is_main:
        # (before lock and claim make the folders the links point to; said once claim has taken the folder: refused,
        # its error names them)
        gone = checkpoint.gone_links(paths.checkpoint_dir, paths.logs_dir, paths.model_dir)
        dead = ([] if os.environ.get(LINKS_SAID_BY_VAR) == "1" else
                checkpoint.dead_links(paths.checkpoint_dir, paths.logs_dir, paths.model_dir, gone, cfg.output_dir))
        # Resume only this run: another run's checkpoints in the same folder (other data, labels, model or math)
        # are refused in one line before any work, never silently resumed.
        fingerprint = checkpoint.run_fingerprint(cfg)
        checkpoint.lock_and_claim(paths.checkpoint_dir, fingerprint, paths.model_dir,
                                  storage.join(paths.logs_dir, "metrics.jsonl"), gone)
        if cfg.output_dir:  # (what its links say, for a later run that finds them all pointing to nothing)
            checkpoint.record_links(cfg.output_dir)
        for line in dead:
            log.warning("%s", line)
    set_seed(cfg.seed)
    # (progress bars by the rule of the loop's own: on a terminal, from the main process)
    data = load_task_data(cfg, bars=sys.stderr.isatty() and dist.is_main)
    if dist.is_main:  # (whether --max-train-samples or --fraction-of-train-data keeps every row: a resume's claim)
        checkpoint.record_train_rows(paths.checkpoint_dir, fingerprint, data.rows_before_subset, data.hub_rows)
    if not os.environ.get("CLOUD_ML_JOB_ID"):
        # Outside a Vertex job (ftcli local, or by hand) an --early-stopping that this data can never stop is refused
        # before the model loads; a job, whose machines are up already, says so in a warning and keeps the best.
        # (CLOUD_ML_JOB_ID: set by Vertex in a custom job's containers; see lease.py.)
        if never_stops := early_stopping_data_problem(cfg, len(data.train), dist.world_size):
            raise TrainerError(never_stops)
    tokenizer = load_tokenizer(cfg.model)
    torch.manual_seed(cfg.seed)  # the new head's initialisation does not depend on data loading
    # (a false error: transformers 5.24 wraps PreTrainedModel.to in functools.wraps, whose _Wrapped, as typeshed
    # types it, does not bind self)
    model = load_model(cfg.model, data.label_names, data.multi_label, cfg.threshold,
                       data.regression).to(device)  # type: ignore[arg-type]
    if problem := max_length_problem(model, tokenizer, cfg.max_length, cfg.model):
        raise TrainerError(problem)
    if padding := align_padding(model, tokenizer, cfg.model):
        log.info("%s", padding)
    varlen_left_off = ""
    if cfg.varlen_attention:  # before the warm-up, which then warms the flash kernels up
        varlen_left_off = use_varlen_attention(model, device, precision)
        if varlen_left_off:
            log.info("--varlen-attention left off: %s", varlen_left_off)
    train_enc, evals_enc, prewarm_seconds = _encode_while_warming(model, tokenizer, data, cfg, device, precision,
                                                                  dist)
    if device.type == "cpu":  # the same math, cheaper on a CPU (CUDA's dropout and SDPA are fused already)
        use_fast_dropout(model)
        use_fast_attention_dropout(model)
        keep_freed_memory()
    pad_id = int(tokenizer.pad_token_id)  # (align_padding gave it one)
    trainer = Trainer(cfg, model, train_enc, evals_enc, data.label_names, data.multi_label, device, precision,
                      paths, pad_id, dist)
    if prewarm_seconds is not None:
        trainer.gpu_warmup["prewarm_seconds"] = prewarm_seconds
    if cfg.hypertune_metric:
        from ftcli_trainer.hypertune import Reporter

        trainer.eval_callbacks.append(Reporter(cfg.hypertune_metric))
    tracker = None
    if cfg.wandb_project and dist.is_main:
        from ftcli_trainer.tracking import WandbTracker, run_id

        tracker = WandbTracker(cfg, run_id(paths.checkpoint_dir))
        tracker.start({"label_names": data.label_names, "train_examples": len(train_enc), "precision": precision})
        trainer.record_callbacks.append(tracker.record)
    if dist.is_main:
        _summary(cfg, data, train_enc, evals_enc, model, device, precision, paths, trainer, dist)
    try:
        results = trainer.fit()
    except BaseException:
        if tracker is not None:
            tracker.finish(failed=True)
        trainer.sync_logs()  # a failed, interrupted or preempted run keeps its curve (a warning if it cannot)
        raise
    if not dist.is_main:
        distributed.barrier(dist)  # wait for rank 0's export, then leave together
        distributed.cleanup(dist)
        return results
    results["label_names"] = data.label_names
    results["precision"] = precision
    results["device"] = str(device)
    run_config = shareable({"ftcli_trainer_version": __version__, **asdict(cfg), "resolved_precision": precision})
    run_config.pop("extra", None)
    results["attention"] = attention_in_use(model, varlen_left_off)
    restore_attention(model)
    predictions = prediction_arrays(trainer.predictions, data.label_names, data.multi_label, data.regression,
                                    cfg.threshold)
    checkpoint.still_held(paths.checkpoint_dir)  # the export never replaces another run's
    export_model(model, tokenizer, paths.model_dir, results, run_config, predictions, trainer.weights_from)
    if storage.is_gcs(paths.logs_dir):
        trainer.sync_logs(final=True)
        shutil.rmtree(paths.local_logs_dir, ignore_errors=True)
    if tracker is not None:
        tracker.finish(results)
    _final_lines(results, paths, data, cfg.task)
    distributed.barrier(dist)
    distributed.cleanup(dist)
    return results


PATH_OPTIONS = ("model", "train_file", "eval_file", "output_dir")


def shareable(run_config: dict) -> dict:
    """The run's options as the exported model carries them (ftcli_run.json): a local path becomes its file or folder
    name. The model folder travels (`ftcli train --model` uploads it to the bucket, people publish it), and
    /home/alice/... said who ran it and how their disk is laid out; what reads the file (report, predict) needs no
    path. gs:// URIs, a job's /gcs/ mount and Hub ids are kept as they are."""
    out = dict(run_config)
    for key in PATH_OPTIONS:
        value = out.get(key)
        if not isinstance(value, str) or not value or storage.is_gcs(value) or value.startswith("/gcs/"):
            continue
        path = Path(value).expanduser()
        if path.is_absolute() or value.startswith((".", "~")) or path.exists():
            out[key] = path.resolve().name if path.exists() else path.name
    return out


def _encode_while_warming(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, data: TaskData, cfg: TrainConfig,
                          device: torch.device, precision: str,
                          dist: Dist) -> tuple[Encoded, dict[str, Encoded], float | None]:
    """The train and eval sets tokenized; with --gpu-warmup ahead of the graph path (one CUDA GPU, bf16 or fp32), in
    a worker thread while this thread pays the GPU's first-use costs (cuda_graphs.prewarm). This thread, because it
    is the one that trains: torch keeps cuDNN's attention plans and cuBLAS handles per thread, so a warm-up in
    another thread leaves the training thread to pay them again. Returns (train, evals, seconds of warm-up or
    None)."""
    from ftcli_trainer import cuda_graphs
    from ftcli_trainer.data import encode

    def encode_all() -> tuple[Encoded, dict[str, Encoded]]:
        return (encode(tokenizer, data.train, cfg.max_length),
                {name: encode(tokenizer, ex, cfg.max_length) for name, ex in data.evals.items()})

    # Only ahead of the graph path (one CUDA GPU, what --gpu-warmup was measured with): eager runs stay as they were.
    if not cfg.gpu_warmup or not cuda_graphs.decide(cfg.cuda_graphs, device.type, dist.world_size)[0]:
        return (*encode_all(), None)
    import torch

    widths = cuda_graphs.bucket_widths(cfg.max_length, getattr(model.config, "max_position_embeddings", None))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    encoded: list = []  # encode_all's result, or what it raised

    def encode_into() -> None:
        try:
            encoded.append(encode_all())
        except BaseException as e:  # noqa: BLE001 - raised again in this thread
            encoded.append(e)

    # A daemon thread, not a ThreadPoolExecutor: a SIGTERM here (Terminated) waited for the whole tokenization, in the
    # executor's exit and then in Python's (which joins its thread; _exit leaves at once when only daemons are left)
    worker = threading.Thread(target=encode_into, name="ftcli-tokenize", daemon=True)
    worker.start()
    seconds = None
    try:
        # Until the tokens are ready: the widths a run's batches use are known only then (fit warms those).
        seconds = cuda_graphs.prewarm(model, widths, cfg.batch_size, device, dtype,
                                      stop=lambda: not worker.is_alive())
        log.debug("GPU warmed up in %.2f s", seconds)
    except Exception as e:  # noqa: BLE001 - only a head start: the run pays the costs itself then
        log.warning("GPU warm-up skipped (%s: %s)", type(e).__name__, first_line(e))
    worker.join()
    if isinstance(encoded[0], BaseException):
        raise encoded[0]
    train_enc, evals_enc = encoded[0]
    return train_enc, evals_enc, seconds


def _final_lines(results: dict, paths: Paths, data: TaskData, task: str) -> None:
    from ftcli_trainer.metrics import SHOWN, headline
    from ftcli_trainer.tasks import TASKS

    shown = " · ".join(f"{SHOWN[k]} {results['eval_' + k]:.4f}"
                       for k in headline(TASKS[task].metrics, data.multi_label, data.regression))
    log.info("done: %s · %.1f train samples/s · %.0f real tokens/s · %.0f s training", shown,
             results["train_samples_per_second"], results["train_tokens_per_second"], results["train_runtime"])
    log.info("model:   %s", paths.model_dir)
    log.info("metrics: %s", storage.join(paths.model_dir, "metrics.json"))
    log.info("logs:    %s (tensorboard --logdir %s)", paths.logs_dir, shlex.quote(str(paths.logs_dir)))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _setup_logging()
    try:
        cfg = parse_args(argv)
    except ConfigError as e:
        for problem in e.problems:  # (a problem's hint under its own line, as TrainerError.lines says one)
            print(f"error: {problem}" + (f"\nhint: {hint}" if (hint := hint_of(problem)) else ""), file=sys.stderr)
        return 2
    from ftcli_trainer.cpu import wait_passively_if_busy

    if (said := wait_passively_if_busy(os.environ)) is not None:  # before torch (and torchrun's workers) start
        log.info("%s", said)
    if cfg.hf_secret:
        # Before any Hub download (data, tokenizer, model) and before torchrun's re-launch: its workers inherit it.
        from ftcli_trainer.secret_manager import use_hub_token

        try:
            use_hub_token(cfg.hf_secret)
        except TrainerError as e:
            print(e.lines(), file=sys.stderr)
            return e.exit_code
    relaunch = _relaunch_argv(argv)
    if relaunch:
        log.info("launching %s", " ".join(relaunch[1:]))
        sys.stdout.flush()
        os.execv(relaunch[0], relaunch)  # torchrun takes over this process: signals reach it directly
    previous = _stop_outside_training()
    try:
        return _run(cfg)
    finally:
        from ftcli_trainer import checkpoint

        if previous is not None:  # (first: a SIGTERM now is no Terminated raised out of main)
            signal.signal(signal.SIGTERM, previous)
        checkpoint.unlock()  # a gs:// folder's lease: the next run there need not wait for it to expire


class Terminated(BaseException):
    """SIGTERM outside the training loop (which checkpoints and stops: loop.Trainer.install_stop_handlers): while the
    data, tokenizer or model load, or after the last checkpoint (the export). A BaseException, as KeyboardInterrupt is,
    so that no `except Exception` on the way takes it for a failure to carry on from."""


def _stop_outside_training() -> Callable[[int, FrameType | None], Any] | int | None:
    """SIGTERM, outside the training loop, leaves at once as it did, but through _run: one line, exit status 143, and
    the gs:// folder's lease given back (main's finally). Killed by the signal, the run said nothing and left its
    lease, and the same command (ftcli local --output-dir gs://...) was refused for up to lease.TTL_S as "in use by
    another run". A second SIGTERM kills at once. Returns the handler it replaces (None: not the main thread)."""
    def on_sigterm(signum: int, frame: FrameType | None) -> NoReturn:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Terminated

    try:
        return signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread
        return None


def _run(cfg: TrainConfig) -> int:
    """run(cfg), its failures as one line and an exit status."""
    try:
        run(cfg)
    except TrainerError as e:
        _failing()
        say_once(e.lines())
        return e.exit_code
    except KeyboardInterrupt:
        _say_stop("interrupted")
        return 130
    except Terminated:
        # A worker that another one's failure stopped (torchrun sends the others SIGTERM once one has left non-zero)
        # said "stopped: SIGTERM; ... goes on from the newest complete checkpoint" under the failing worker's error,
        # as if the run could just be run again; the launcher's last line names it ("rank 0 with 143").
        if not _a_worker_failed():
            _say_stop("stopped: SIGTERM; a restarted worker, or the same command, goes on from the newest complete "
                      "checkpoint (from the start if there is none)")
        return 143
    except Exception as e:  # noqa: BLE001
        from ftcli_trainer.loop import Preempted

        if isinstance(e, Preempted):
            _say_stop(f"stopped: {e}")
            return e.exit_code
        if _is_oom(e):
            _failing()
            say_once(oom_line(cfg))
            return 1
        from ftcli_trainer.distributed import shm_problem

        if line := shm_problem(e):  # NCCL's set-up, in a container with too small a /dev/shm
            _failing()
            say_once(line)
            return 1
        if os.environ.get("FTCLI_DEBUG") == "1":
            raise
        failed = storage.os_error_of(e)
        if failed is not None and failed.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
            # a full or read-only disk anywhere else under the run (the logs, checkpoints and model name their
            # file themselves): the user's to fix, one line, the exit status of every other such error
            where = " -> ".join(str(f) for f in (failed.filename, failed.filename2) if f) or "the output folder"
            _failing()
            say_once(f"error: {storage.write_error(failed, 'the run', where)}")
            return TrainerError.exit_code
        # Not the user's input: a bug or an environment failure. Keep the traceback in the job's log (a failed
        # upload's session left out of its URLs: storage.redact_urls).
        _failing()
        print(storage.redact_urls(traceback.format_exc()), end="", file=sys.stderr)
        return 1
    return 0


SAID_DIR_VAR = "FTCLI_SAID_DIR"  # set by ftcli_trainer.launcher for its workers
# Set by `ftcli local`, which says itself how a stopped run goes on, in its user's terms (its own command, the run
# folder it chose): the trainer's line said it a second time, as "the same command" (python -m ftcli_trainer.task ...,
# which the user never typed), under ftcli's.
STOPS_SAID_BY_VAR = "FTCLI_STOPS_SAID_BY_LAUNCHER"
# Set by `ftcli local`, which looks for checkpoint.dead_links' warnings before its own claim makes the folder a dead
# checkpoints/ link points to, and says them: the trainer, looking after that, took a run set up on a bigger disk
# (both links to folders not made yet) for an earlier run's folder, its fingerprint just written there.
LINKS_SAID_BY_VAR = "FTCLI_LINKS_SAID_BY_LAUNCHER"


def _say_stop(line: str) -> None:
    """The line of a run stopped by a signal (Ctrl-C, SIGTERM), unless the program that started the trainer says it."""
    if os.environ.get(STOPS_SAID_BY_VAR) != "1":
        say_once(line)



# In the launcher's SAID_DIR_VAR folder: a worker has failed (said its error), and the others' SIGTERM is torchrun's
FAILED_MARK = "a-worker-failed"


def _failing() -> None:
    """Mark, for the other workers under the same launcher, that this one is failing (before it says why and leaves)."""
    if said := os.environ.get(SAID_DIR_VAR):
        with contextlib.suppress(OSError):
            Path(said, FAILED_MARK).touch()


def _a_worker_failed() -> bool:
    said = os.environ.get(SAID_DIR_VAR)
    return said is not None and os.path.exists(os.path.join(said, FAILED_MARK))


def say_once(line: str) -> None:
    """Print a worker's one-line ending to stderr, unless another worker on this machine has printed the very same
    line: every rank failing on the same bad row (or stopping at the same checkpoint) printed it once per GPU, 8 equal
    ERROR lines in `ftcli logs` for an A100x8. A line that differs is always printed; the launcher's last line still
    names every rank that left and its status. The launcher gives its workers a folder of its own (SAID_DIR_VAR);
    creating a file named after the line there is atomic, so exactly one of the ranks with the same line prints it."""
    said = os.environ.get(SAID_DIR_VAR)
    if said:
        import hashlib

        try:
            os.close(os.open(os.path.join(said, hashlib.sha256(line.encode()).hexdigest()),
                             os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        except OSError:
            pass  # the folder is gone or full: say it, twice rather than never
    print(line, file=sys.stderr)


def _relaunch_argv(argv: list[str]) -> list[str] | None:
    """One process per GPU (and per Vertex machine) under torchrun, when there is more than one."""
    if "LOCAL_RANK" in os.environ:
        return None
    from ftcli_trainer.distributed import relaunch_argv

    gpus = 0
    if os.environ.get("WORLD_SIZE", "1") != "1" or os.environ.get("CLUSTER_SPEC") or _may_have_gpus():
        import torch

        gpus = torch.cuda.device_count()
    return relaunch_argv(argv, gpus)


def _may_have_gpus() -> bool:
    # Cheap check before importing torch (seconds): no NVIDIA driver, no GPUs.
    return os.path.exists("/proc/driver/nvidia") or bool(os.environ.get("CUDA_VISIBLE_DEVICES"))


def oom_line(cfg: TrainConfig) -> str:
    """Out of memory, in one line that says at what and gives the options to run again with: half the batch, twice
    the accumulation, so that a step still trains on as many examples (the same math, but for the weight copies'
    casts, which go off with several micro-batches a step)."""
    where = ""
    try:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            where = f" on {props.name} ({props.total_memory / 2**30:.0f} GiB)"
    except Exception:  # noqa: BLE001 - only the line's detail
        pass
    line = f"error: out of memory at --batch-size {cfg.batch_size} and --max-length {cfg.max_length}{where}"
    if cfg.batch_size < 2:
        return f"{line}; lower --max-length"
    smaller, steps = cfg.batch_size // 2, cfg.gradient_accumulation_steps * 2
    now = cfg.batch_size * cfg.gradient_accumulation_steps
    then = (f"still trains on {now} examples a step" if smaller * steps == now else
            f"trains on {smaller * steps} examples a step ({now} now)")
    return f"{line}; lower either: --batch-size {smaller} --gradient-accumulation-steps {steps} {then}"


def _is_oom(e: BaseException) -> bool:
    return type(e).__name__ == "OutOfMemoryError" or "out of memory" in str(e).lower()


def _exit(status: int) -> None:
    """Leave with `status`. A torchrun worker (one of several) leaves without Python's shutdown: gloo's worker threads
    outlive destroy_process_group while DDP holds the group, and one that drops the last collective's tensors after
    the shutdown has begun dies asking for the GIL, taking the process down with SIGABRT ("terminate called without an
    active exception"; about one failed 2-process run in ten on 2 CPUs, right after the collective that found the
    failure). torchrun then named that abort, not the run's error or its SIGTERM stop, as the job's root cause. The
    same abort is an open PyTorch issue (https://github.com/pytorch/pytorch/issues/190489, read 2026-11-27); with torch
    2.13 here, destroy_process_group (and the group's shutdown or abort) left gloo's threads running while a DDP model
    held the group. Everything the run wrote is closed by now; the streams are flushed here."""
    if "LOCAL_RANK" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        _leave_now(status, logging.shutdown)
    if all(t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        # Nothing left that Python's own shutdown would wait for: leave without it. Its teardown of the ~2,900
        # modules that torch and transformers bring took 1.2-1.4 s of CPU after the run's last line, every run
        # (MiniLM-L6 on the 2-core VM, 2026-11-27; 0.07 s this way: bench/README.md). What that shutdown does that
        # matters still happens: the atexit hooks (logging's flush, W&B's, temporary folders' clean-up) and the
        # streams flushed. Files the run wrote are closed by now.
        _leave_now(status, atexit._run_exitfuncs)
    sys.exit(status)


def _leave_now(status: int, first: Callable[[], object]) -> NoReturn:
    """Leave without Python's shutdown: what of it still matters (`first`), the streams flushed, then os._exit."""
    first()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


if __name__ == "__main__":
    _exit(main())



