"""Run the real `ftcli` entry point in-process (same code path as the console script) and capture it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_cli(capsys: pytest.CaptureFixture, *args: str) -> Result:
    from ftcli import output
    from ftcli.cli.app import main

    # Each call a fresh invocation: the consoles (cached for the process) take COLUMNS when made, and a console that
    # an earlier call made at another width made a width test pass or fail by the tests run before it
    # (a test that put its own console in their place keeps it)
    for made in (output.out, output.err):
        if hasattr(made, "cache_clear"):
            made.cache_clear()
    capsys.readouterr()
    old = sys.argv
    sys.argv = ["ftcli", *args]
    try:
        main(in_process=True)  # (the console script's main leaves the process after a command that loaded torch)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def wait_for_child(proc: subprocess.Popen, ready: Callable[[], object],
                   state: Callable[[], str] = lambda: "") -> None:
    """Run `ready()` (it asserts, or fails the test) while `proc` runs; should it fail, stop the child and fail
    with what the child printed and `state()` (the emulators' state then): a wait that timed out once said only
    `assert False`, and the child's own error went with it."""
    try:
        ready()
    except KeyboardInterrupt:
        # A Ctrl-C to pytest stops the test, not only the wait: it was turned into this test's AssertionError, and
        # pytest went on with the next test.
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        raise
    except BaseException as e:
        what = state()
        if proc.poll() is None:
            proc.kill()
        out, err = proc.communicate(timeout=10)
        raise AssertionError(f"{e}\n{what}\nthe child (exit status {proc.returncode}) printed:\n"
                             f"--- stdout\n{out}\n--- stderr\n{err}") from e


def read_until(proc: subprocess.Popen, wanted: str, timeout: float = 60) -> str:
    """What `proc` (its stdout a pipe, not yet read) has written to stdout, whole lines read as they come until one
    holds `wanted`; it fails, with what was read, when none has within `timeout` s. The rest is
    `proc.communicate()`'s: the two together are all the child wrote. For a test that acts once the child has printed
    a line: a sleep that was long enough for it on a quiet machine was not on a busy one."""
    import os
    import select
    import time

    assert proc.stdout is not None
    fd, read, deadline = proc.stdout.fileno(), b"", time.monotonic() + timeout
    # (the raw file descriptor: what the text wrapper buffered would be out of select's sight, and communicate()
    # reads the rest through that wrapper, whose buffer is then empty)
    while not (wanted.encode() in read and read.endswith(b"\n")):  # (whole lines: a character is never cut in two)
        left = deadline - time.monotonic()
        assert left > 0, f"no line with {wanted!r} in {timeout:g} s; stdout so far: {read.decode(errors='replace')!r}"
        if select.select([fd], [], [], left)[0]:
            got = os.read(fd, 65536)
            assert got, f"stdout ended without a line with {wanted!r}: {read.decode(errors='replace')!r}"
            read += got
    return read.decode()


# `ftcli ARGS` with one function held: its AT-th call touches READY, then sleeps a minute before it runs, so that a
# signal sent once READY exists lands in that call (the phase a test means), not wherever a sleep happened to end.
HELD = """
import importlib, pathlib, sys, time

ready, where, at = pathlib.Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
module, _, name = where.partition(":")
owner = importlib.import_module(module)
*path, attr = name.split(".")
for part in path:
    owner = getattr(owner, part)
real, calls = getattr(owner, attr), []

def held(*args, **kwargs):
    calls.append(None)
    if len(calls) == at:
        ready.touch()
        time.sleep(60)
    return real(*args, **kwargs)

setattr(owner, attr, held)
sys.argv = ["ftcli", *sys.argv[4:]]
from ftcli.cli.app import main
main()
"""


def signal_when_held(where: str, at: int, args: list[str], sig: int, ready: Path, cwd: Path,
                     env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run `ftcli ARGS` with `where` ("module:Class.function") held at its `at`-th call (HELD), send `sig` once it
    is held, and return (exit status, stdout, stderr); the process never outlives the test."""
    import time

    def holding() -> None:
        deadline = time.monotonic() + 120  # (torch's import on a busy machine)
        while not ready.exists():
            assert time.monotonic() < deadline, f"{where} was never called {at} time(s)"
            time.sleep(0.05)

    return signal_child([sys.executable, "-c", HELD, str(ready), where, str(at), *args], env, cwd, holding, sig)


def signal_child(argv: list[str], env: dict[str, str] | None, cwd: Path | str | None, ready: Callable[[], object],
                 sig: int) -> tuple[int, str, str]:
    """Start `argv`, send `sig` once `ready()` holds (it asserts, or fails the test), and return (exit status, stdout,
    stderr); the process never outlives the test."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    try:
        wait_for_child(proc, ready)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err


# `ftcli ARGS` whose downloads say when they have been told to stop: TOOK is touched once a download batch's stop is
# set (storage._run_batch's; a signal sets it, through _signals_deferred's handler), so that a download held until
# then is let go only once the signal has been taken, and its next chunk is where it ends.
STOPPING = """
import pathlib, sys, threading
from ftcli.gcp import storage

took, real = pathlib.Path(sys.argv[1]), storage._StoppableWriter.__init__

def watched(self, f, stop, moved):
    real(self, f, stop, moved)
    threading.Thread(target=lambda: stop.wait() and took.touch(), daemon=True).start()

storage._StoppableWriter.__init__ = watched
sys.argv = ["ftcli", *sys.argv[2:]]
from ftcli.cli.app import main
main()
"""


def signal_during_download(gcs_url: str, wanted: str, command: str, args: list[str], cwd: Path | str, sig: int,
                           env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run `ftcli COMMAND ARGS` through a proxy in front of the GCS emulator that holds the download of the object
    whose name holds `wanted`, send `sig` once that download has been asked for (its bytes are awaited), and return
    (exit status, stdout, stderr). The download is held until ftcli has taken the signal (STOPPING), or has ended
    (a read in the main thread, which the signal interrupts), or for a minute: it was held 2 s and the signal sent
    0.2 s into them, and on a busy machine the download could end before the signal was taken."""
    import os
    import tempfile
    import threading
    import time

    from tests.emulators.gcs import FaultyProxy

    seen, ended = threading.Event(), threading.Event()
    took = Path(tempfile.mkdtemp(prefix="ftcli-took-")) / "took"

    def hold(method: str, target: str, n: int) -> float:
        if wanted in target and "alt=media" in target:
            seen.set()
            deadline = time.monotonic() + 60
            while not (took.exists() or ended.is_set()) and time.monotonic() < deadline:
                time.sleep(0.01)
        return 0

    def ready() -> None:
        assert seen.wait(60), f"{wanted} was never requested"

    ftcli = [sys.executable, "-c", STOPPING, str(took), command, *args]
    with FaultyProxy(gcs_url, hold_when=hold) as proxy:
        try:
            return signal_child(ftcli, {**(env if env is not None else os.environ), **proxy.env()}, cwd, ready, sig)
        finally:
            ended.set()  # (before the proxy stops: it waits for the request it holds)
            took.unlink(missing_ok=True)
            took.parent.rmdir()


class GrpcProxy:
    """A gRPC proxy in front of an emulator (raw bytes both ways) whose `before(method)` and `after(method)` run around
    each call it forwards: a test holds a call there (sleeps) to open the window a signal must land in. A failed call
    is answered with the upstream's status, and `after` does not run."""

    def __init__(self, upstream: str, before: Callable[[str], object] | None = None,
                 after: Callable[[str], object] | None = None):
        from concurrent.futures import ThreadPoolExecutor

        import grpc

        self.upstream = grpc.insecure_channel(upstream)
        self.server = grpc.server(ThreadPoolExecutor(8))
        proxy = self

        class Forward(grpc.GenericRpcHandler):
            def service(self, details):
                method = details.method
                call = proxy.upstream.unary_unary(method)

                def forward(request: bytes, context):
                    if before is not None:
                        before(method)
                    try:
                        response = call(request, timeout=30)
                    except grpc.RpcError as e:
                        context.abort(e.code(), e.details())
                    if after is not None:
                        after(method)
                    return response

                return grpc.unary_unary_rpc_method_handler(forward)

        self.server.add_generic_rpc_handlers((Forward(),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    def __enter__(self):
        self.server.start()
        return self

    def __exit__(self, *exc):
        self.server.stop(grace=0)
        self.upstream.close()


def full_pipe() -> tuple[int, int]:
    """A pipe whose buffer is already full: (read end, write end). A child given the write end as its stdout waits in
    its first write to it, as ftcli does behind a reader that stopped reading (`ftcli ... | reader`, a stopped pager,
    a hung script)."""
    import os

    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        while True:
            os.write(w, b"\n" * 4096)
    except BlockingIOError:
        pass
    os.set_blocking(w, True)
    return r, w


def waits_in_a_pipe_write(pid: int, fds: tuple[int, ...] = (1,)) -> bool:
    """True when process `pid`'s main thread waits in a write to a pipe (Linux's /proc/PID/wchan: pipe_write, or
    anon_pipe_write in newer kernels) on one of file descriptors `fds` (/proc/PID/syscall's first argument, where it
    can be read): not in a write to the stderr pipe the test reads, which a signal there would not be meant for."""
    try:
        with open(f"/proc/{pid}/wchan") as f:
            if "pipe_write" not in f.read():
                return False
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/syscall") as f:
            fields = f.read().split()
        return int(fields[1], 16) in fds
    except (OSError, IndexError, ValueError):
        return True


def signal_behind_a_full_pipe(argv: list[str], env: dict[str, str], cwd: Path | str | None, sig: int,
                              ready: Callable[[], object] | None = None, timeout: float = 60,
                              stderr_too: bool = False) -> tuple[int, float, str, str]:
    """Run `argv` with its stdout (and its stderr, with `stderr_too`: `2>&1`) a pipe that is full and that nobody reads,
    wait until `ready()` holds (default: the child waits in a write to that pipe), send `sig`, and return (exit status,
    seconds from the signal to the exit, what the pipe held past the filling, stderr: empty with `stderr_too`).
    Without PYTHONUNBUFFERED, as a user's shell runs it: with it, the line a signal cuts short is not held for the
    exit. The process never outlives the test."""
    import os
    import threading
    import time

    env = {k: v for k, v in env.items() if k != "PYTHONUNBUFFERED"}
    r, w = full_pipe()
    proc = subprocess.Popen(argv, env=env, stdout=w, stderr=w if stderr_too else subprocess.PIPE, cwd=cwd)
    os.close(w)
    err: list[bytes] = []
    reading = threading.Thread(target=lambda: err.append(proc.stderr.read() if proc.stderr else b""), daemon=True)
    reading.start()
    try:
        if ready is not None:
            wait_for_child(proc, ready)
        else:
            deadline = time.monotonic() + timeout
            while not waits_in_a_pipe_write(proc.pid, (1, 2) if stderr_too else (1,)):
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    proc.wait()
                    reading.join(10)
                    raise AssertionError(f"the child never waited in a write to stdout (exit status "
                                         f"{proc.returncode}); it printed on stderr:\n{b''.join(err).decode()}")
                time.sleep(0.05)
        proc.send_signal(sig)
        signalled = time.monotonic()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reading.join(10)
    os.set_blocking(r, False)
    chunks = []
    try:
        while chunk := os.read(r, 65536):
            chunks.append(chunk)
    except BlockingIOError:
        pass
    os.close(r)
    out = b"".join(chunks).decode(errors="replace").lstrip("\n")
    return proc.returncode, took, out, b"".join(err).decode(errors="replace")


def as_a_user() -> list[str]:
    """The command prefix under which a child process is refused by a folder's mode as any user is: none for a
    user; for root, which writes anywhere, setpriv without capabilities (skips the test where there is no setpriv)."""
    import shutil

    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("root, and no setpriv to drop the capabilities that let root write anywhere")
    return ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]

