"""The trainer's storage layer: object names never escape, a re-export never looks complete half-way, and
what a crashed run left behind is cleaned at the next start (GCS emulator, real files, real processes)."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path, PurePosixPath

import pytest

from ftcli_trainer import storage
from ftcli_trainer.errors import TrainerError
from ftcli_trainer.storage import COMPLETE_MARKER, UnsafeObjectName, relative_object_path
from tests.conftest import files_of_at_most


def dead_pid() -> int:
    r = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(r.stdout)


@pytest.mark.parametrize("name,rel", [
    ("run/model/config.json", "config.json"),
    ("run/model/sub/dir/x.bin", "sub/dir/x.bin"),
    ("run/model/..weird..name", "..weird..name"),
])
def test_relative_object_path_keeps_ordinary_names(name, rel):
    assert relative_object_path(name, "run/model/") == PurePosixPath(rel)


@pytest.mark.parametrize("name", ["run/model/", "run/model/sub/"])
def test_folder_placeholders_are_skipped(name):
    assert relative_object_path(name, "run/model/") is None


@pytest.mark.parametrize("name", [
    "run/model//abs/path/x",  # an absolute path once the prefix is cut
    "run/model/../b",
    "run/model/a/../../x",
    "run/model/a//b",
    "run/model/./x",
    "run/model/a/..",
    "run/model/a\\..\\..\\x",
    "run/model/a\0b",
    "run/model/..//",
    "elsewhere/x",
])
def test_names_that_could_escape_are_refused(name):
    with pytest.raises(UnsafeObjectName):
        relative_object_path(name, "run/model/")


@pytest.mark.parametrize("name", ["run/model/c:evil/x", "run/model/sub/d:x", "run/model/model.safetensors:stream"])
def test_a_colon_is_refused_where_it_names_a_drive(monkeypatch, name):
    # On Windows staging.joinpath("c:evil", "x") is c:evil\x, on another drive's current folder: `ftcli download`
    # wrote outside its destination. Elsewhere the name is an ordinary file name.
    from pathlib import PureWindowsPath

    rel = PurePosixPath(name.removeprefix("run/model/"))
    assert not PureWindowsPath("D:/dest", *rel.parts).is_relative_to("D:/dest") or ":" in rel.name
    assert relative_object_path(name, "run/model/") == rel
    monkeypatch.setattr(storage, "ON_WINDOWS", True)
    with pytest.raises(UnsafeObjectName, match="':' in its name"):
        relative_object_path(name, "run/model/")


def test_download_dir_refuses_an_escaping_name_before_writing_anything(gcs, tmp_path):
    gcs.create_bucket("b")
    bucket = gcs.client().bucket("b")
    bucket.blob("ckpt/step-1/model.safetensors").upload_from_string(b"w")
    target = tmp_path / "outside" / "x"
    bucket.blob("ckpt/step-1/" + str(target)).upload_from_string(b"pwned")  # step-1//tmp/.../outside/x
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(UnsafeObjectName):
        storage.download_dir("gs://b/ckpt/step-1", dest)
    assert not target.exists() and list(dest.iterdir()) == []


def test_one_storage_client_a_process_and_emulator(gcs, monkeypatch):
    """Shared across calls (and threads); a new one after a fork (the client's docs: make them after os.fork) and
    for another emulator or project, so that a setting changed later is never talked past."""
    monkeypatch.setattr(storage, "_CLIENTS", {})
    first = storage._client()
    assert storage._client() is first
    pid = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: pid + 1)  # a forked child
    child = storage._client()
    assert child is not first and storage._client() is child
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "another")
    assert storage._client() is not child and storage._client().project == "another"
    gcs.create_bucket("b")  # and the shared client works
    storage.write_text("gs://b/x.txt", "hi")
    assert gcs.read("b", "x.txt") == b"hi"


def test_download_dir_and_upload_dir_round_trip(gcs, tmp_path):
    gcs.create_bucket("b")
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    files = {f"f{i}.bin": os.urandom(1000 + i) for i in range(12)} | {"sub/deep.txt": b"deep"}
    for rel, data in files.items():
        (src / rel).write_bytes(data)
    storage.upload_dir(src, "gs://b/x/model")
    assert gcs.list("b", "x/model/") == sorted(f"x/model/{r}" for r in [*files, COMPLETE_MARKER])
    out = storage.download_dir("gs://b/x/model", tmp_path / "out")
    got = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert got == {**files, COMPLETE_MARKER: b""}


def test_a_re_export_that_fails_half_way_does_not_keep_the_old_marker(gcs, tmp_path, monkeypatch):
    from tests.emulators.gcs import FaultyProxy

    gcs.create_bucket("b")
    old = tmp_path / "old"
    old.mkdir()
    (old / "model.safetensors").write_bytes(b"old weights")
    (old / "old-only.txt").write_bytes(b"gone after a good re-export")
    storage.publish_dir(old, "gs://b/run/model")
    assert "run/model/_COMPLETE" in gcs.list("b", "run/model/")

    new = tmp_path / "new"
    new.mkdir()
    (new / "model.safetensors").write_bytes(b"new weights")
    (new / "config.json").write_bytes(b"{}")
    # Every upload fails; the marker's delete goes through first. (403: a 503 ends the same way, after the
    # client's two minutes of retries.)
    with FaultyProxy(gcs.url, status=403,
                     fail_when=lambda method, target, n: method in ("POST", "PUT") and "/upload/" in target) as proxy:
        for k, v in proxy.env().items():
            monkeypatch.setenv(k, v)
        with pytest.raises(Exception):  # noqa: B017 - whatever the client raises for a 503
            storage.publish_dir(new, "gs://b/run/model")
    assert "run/model/_COMPLETE" not in gcs.list("b", "run/model/")

    for k, v in gcs.env().items():
        monkeypatch.setenv(k, v)
    storage.publish_dir(new, "gs://b/run/model")
    assert gcs.list("b", "run/model/") == ["run/model/_COMPLETE", "run/model/config.json",
                                           "run/model/ftcli_files.json", "run/model/model.safetensors"]
    assert gcs.read("b", "run/model/model.safetensors") == b"new weights"


def test_clean_stale_staging_removes_only_dead_writers_exact_folders(tmp_path):
    pid = dead_pid()
    stale = tmp_path / f".model.tmp-{pid}-abcd1234"
    live = tmp_path / f".model.tmp-{os.getpid()}-abcd1234"
    user = [tmp_path / f"model.tmp-{pid}-abcd1234", tmp_path / f".model.tmp-{pid}-short",
            tmp_path / f".other.tmp-{pid}-abcd1234", tmp_path / "notes.txt"]
    for p in (stale, live, *user[:3]):
        p.mkdir()
        (p / "f").write_text("x")
    user[3].write_text("mine")
    assert storage.clean_stale_staging(tmp_path, r"\.model") == [stale]
    assert not stale.exists() and live.exists() and all(p.exists() for p in user)


# A writer of another PID namespace (another container with the same home mounted, another host on NFS): it makes a
# staging folder and writes into it until its stdin closes.
STAGING_WRITER = """import sys
from pathlib import Path
from ftcli_trainer import storage
staged = storage.staging_dir(Path(sys.argv[1]), "model")
(staged / "model.safetensors").write_bytes(b"half written")
print(staged, flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(os.name == "nt", reason="flock: Windows judges a writer by its pid alone")
def test_a_live_writer_whose_pid_looks_dead_from_here_keeps_its_staging_folder(tmp_path):
    # The cleaner decided from the pid in the name alone: a live writer in another container looked dead, and the
    # folder it was writing its model into was removed under it.
    writer = subprocess.Popen([sys.executable, "-c", STAGING_WRITER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        staged = Path(writer.stdout.readline().strip())
        # the same folder as a cleaner in another PID namespace sees it: named with a pid that is no process there
        seen = tmp_path / f".model.tmp-{dead_pid()}-abcd1234"
        staged.rename(seen)
        assert storage.clean_stale_staging(tmp_path, r"\.model") == []
        mine = storage.staging_dir(tmp_path, "model")  # (which cleans first too)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([seen.name, mine.name])
        assert (seen / "model.safetensors").read_bytes() == b"half written"
    finally:
        writer.stdin.close()
        writer.wait(timeout=60)
    assert storage.clean_stale_staging(tmp_path, r"\.model") == [seen]  # its writer gone: its lock with it
    assert mine.exists()  # this process's own, held


@pytest.mark.skipif(os.name == "nt", reason="flock")
def test_a_writer_lets_go_of_its_staging_folders_once_they_are_published(tmp_path):
    # one held descriptor per staging folder: a run writing a checkpoint every few steps must not run out of them
    fds = len(os.listdir("/proc/self/fd"))
    for i in range(50):
        storage.staging_dir(tmp_path, "step").rename(tmp_path / f"step-{i}")  # published
        storage.local_tmp("ckpt").rmdir()  # a gs:// transfer's, removed
    assert len(os.listdir("/proc/self/fd")) <= fds + 1


class FakeKernel32:
    """Windows' OpenProcess / GetExitCodeProcess / CloseHandle as they answer for processes that are gone
    (ERROR_INVALID_PARAMETER), running (STILL_ACTIVE), ended (an exit code), or someone else's (ERROR_ACCESS_DENIED)."""

    def __init__(self, gone, running, ended, denied):
        self.codes = {**{p: 259 for p in running}, **{p: 0 for p in ended}}
        self.errors = {**{p: 87 for p in gone}, **{p: 5 for p in denied}}
        self.error, self.open = 0, set()

    def OpenProcess(self, access, inherit, pid):  # noqa: N802
        assert access == 0x1000 and inherit is False
        if pid in self.errors:
            self.error = self.errors[pid]
            return 0
        self.open.add(pid + 1000)
        return pid + 1000

    def GetExitCodeProcess(self, handle, ref):  # noqa: N802
        ref._obj.value = self.codes[handle - 1000]
        return 1

    def CloseHandle(self, handle):  # noqa: N802
        self.open.remove(handle)
        return 1


def test_stale_staging_is_found_without_os_kill_on_windows(tmp_path, monkeypatch):
    # os.kill(pid, 0) there is GenerateConsoleCtrlEvent(CTRL_C_EVENT, pid), which succeeds for any group: every dead
    # writer looked alive, and its staging folder was never removed (a download folder stayed "not empty").
    import functools

    def no_kill(pid, sig):
        raise AssertionError("os.kill sends a Ctrl-C on Windows")

    kernel32 = FakeKernel32(gone=[101], running=[102], ended=[103], denied=[104])
    monkeypatch.setattr(storage, "ON_WINDOWS", True)
    monkeypatch.setattr(os, "kill", no_kill)
    monkeypatch.setattr(storage, "_alive_on_windows", functools.partial(
        storage._alive_on_windows, kernel32=kernel32, last_error=lambda: kernel32.error))
    folders = {pid: tmp_path / f".model.tmp-{pid}-abcd1234" for pid in (101, 102, 103, 104)}
    for p in folders.values():
        p.mkdir()
    assert sorted(storage.clean_stale_staging(tmp_path, r"\.model")) == [folders[101], folders[103]]
    assert sorted(p.name for p in tmp_path.iterdir()) == [folders[102].name, folders[104].name]
    assert kernel32.open == set()  # every handle opened was closed


def test_checkpoint_start_cleans_a_crashed_runs_staging(tmp_path):
    pytest.importorskip("torch")
    from ftcli_trainer import checkpoint

    pid = dead_pid()
    root = tmp_path / "checkpoints"
    root.mkdir()
    crashed = root / f".step-00000010.tmp-{pid}-abcd1234"
    crashed.mkdir()
    (crashed / "model.safetensors").write_bytes(b"half")
    tmp_left = Path(tempfile.gettempdir()) / f"ftcli-resume.tmp-{pid}-abcd1234"
    tmp_left.mkdir(exist_ok=True)
    (tmp_left / "trainer_state.pt").write_bytes(b"a copy of a gs:// checkpoint")
    assert checkpoint.load_latest(str(root), model=None) is None
    assert not crashed.exists() and not tmp_left.exists()


def _can_mount_tmpfs() -> bool:
    import shutil as sh

    if not sh.which("unshare"):
        return False
    r = subprocess.run(["unshare", "-rm", "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs $d"],
                       capture_output=True)
    return r.returncode == 0


needs_tmpfs = pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs unshare and a private tmpfs mount")


def in_small_disk(mountpoint: Path, *cmd: str, size: str = "64k") -> subprocess.CompletedProcess:
    """Run `cmd` in a private mount namespace where `mountpoint` is a tiny tmpfs: a real ENOSPC."""
    script = f'mkdir -p "{mountpoint}" && mount -t tmpfs -o size={size} tmpfs "{mountpoint}" && exec "$@"'
    return subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", *cmd], capture_output=True, text=True,
                          timeout=300)


@needs_tmpfs
def test_disk_full_while_checkpointing_is_one_line(tmp_path, tiny_model, sentiment_csv):
    train, _ = sentiment_csv
    out = tmp_path / "run"
    r = in_small_disk(out / "checkpoints", sys.executable, "-m", "ftcli_trainer.task", "--task", "csv",
                      "--train-file", str(train), "--model", str(tiny_model), "--epochs", "1",
                      "--output-dir", str(out))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert "no space left on the device while writing the step" in line and str(out / "checkpoints") in line


CHECKPOINT = """
import os, re, sys
# (another library's own mkdtemp folder in TMPDIR, as the job image's torch 2.7.1 leaves one: not ftcli's)
OTHERS = re.compile(r"tmp[a-z0-9_]{8}")
from transformers import AutoModelForSequenceClassification
from ftcli_trainer import checkpoint
from ftcli_trainer.errors import TrainerError
model = AutoModelForSequenceClassification.from_pretrained(sys.argv[1])
try:
    checkpoint.save(sys.argv[2], 3, model, {"global_step": 3})
except TrainerError as e:
    print(e)
    print(sorted(n for n in os.listdir(sys.argv[3]) if not OTHERS.fullmatch(n)))
    sys.exit(3)
"""


@needs_tmpfs
def test_disk_full_while_staging_a_gs_checkpoint_names_the_local_staging_folder(tmp_path, tiny_model):
    # A gs:// checkpoint is staged in the system temp folder first: the line names that disk, not the bucket, and the
    # half-written staging goes. (Nothing reaches the bucket before the staging is whole: no emulator.)
    small = tmp_path / "small"
    r = in_small_disk(small, "env", f"TMPDIR={small}", sys.executable, "-c", CHECKPOINT, str(tiny_model),
                      "gs://b/run/checkpoints", str(small))
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stdout == ("no space left on the device while writing the step 3 checkpoint to the local staging folder "
                        f"{small} (on its way to gs://b/run/checkpoints); free some space or point --output-dir at a "
                        "bigger disk, then run again\n[]\n")


# argv: the model to load, the model folder to export to, the folder whose names are printed after a failure (what
# the export left on the small disk, seen inside its mount namespace)
EXPORT = """
import os, re, sys
OTHERS = re.compile(r"tmp[a-z0-9_]{8}")
from transformers import AutoModelForSequenceClassification, AutoTokenizer
from ftcli_trainer.errors import TrainerError
from ftcli_trainer.export import export_model
model = AutoModelForSequenceClassification.from_pretrained(sys.argv[1], num_labels=2)
tok = AutoTokenizer.from_pretrained(sys.argv[1])
try:
    export_model(model, tok, sys.argv[2], {}, {})
except TrainerError as e:
    print(e)
    print(sorted(n for n in os.listdir(sys.argv[3]) if not OTHERS.fullmatch(n)))
    sys.exit(3)
"""


@needs_tmpfs
def test_disk_full_while_exporting_is_one_line_and_leaves_nothing(tmp_path, tiny_model):
    small = tmp_path / "small"
    r = in_small_disk(small, sys.executable, "-c", EXPORT, str(tiny_model), str(small / "model"), str(small))
    assert r.returncode == 3, r.stdout + r.stderr
    line, left = r.stdout.splitlines()
    assert line.startswith("no space left on the device while writing the model to")
    assert left == "[]"  # (the staging folder beside model/ went with the failure)
    assert "Traceback" not in r.stderr


@needs_tmpfs
def test_disk_full_while_staging_a_gs_export_names_the_local_staging_folder(tmp_path, tiny_model):
    # A model for gs:// is staged in the system temp folder first: a full disk there is that disk's, and the line
    # names it, not the bucket (which has room). Nothing reaches the bucket before the staging is whole, so no
    # emulator: a write to it would fail differently.
    small = tmp_path / "small"
    r = in_small_disk(small, "env", f"TMPDIR={small}", sys.executable, "-c", EXPORT, str(tiny_model), "gs://b/model",
                      str(small))
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stdout == (f"no space left on the device while writing the model to the local staging folder {small} "
                        "(on its way to gs://b/model); free some space or point --output-dir at a bigger disk, then "
                        "run again\n[]\n")  # (and the half-written staging is gone)


def test_a_local_publish_replaces_only_an_earlier_export_and_never_a_fixed_sibling_name(tmp_path):
    # The old export went to model.old, deleting whatever was there; a folder that was not an export was replaced.
    def staged(text: str):
        folder = storage.staging_dir(tmp_path, "model")
        (folder / "config.json").write_text(text)
        return folder

    (tmp_path / "model.old").mkdir()
    (tmp_path / "model.old" / "keep.txt").write_text("keep")
    storage.publish_dir(staged("1"), str(tmp_path / "model"))
    storage.publish_dir(staged("2"), str(tmp_path / "model"))  # a re-export of the same run
    assert (tmp_path / "model" / "config.json").read_text() == "2"
    assert (tmp_path / "model" / COMPLETE_MARKER).is_file()
    assert (tmp_path / "model.old" / "keep.txt").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "model.old"]  # no staging left

    (tmp_path / "model" / COMPLETE_MARKER).unlink()  # now it is not an export (no marker, no list of its files)
    (tmp_path / "model" / storage.EXPORT_MANIFEST).unlink()
    with pytest.raises(TrainerError) as refused:
        storage.publish_dir(staged("3"), str(tmp_path / "model"))
    assert (tmp_path / "model" / "config.json").read_text() == "2"
    (beside,) = tmp_path.glob("model-2*")
    model = tmp_path / "model"
    assert (str(refused.value), refused.value.hint) == (
        f"{model} is not a model ftcli exported (it has neither _COMPLETE nor ftcli_files.json) and holds config.json, "
        f"which ftcli did not write: {model} is left as it is, and the new model is in {beside}",
        f"keep what is yours from {model}, then put {beside} in its place")
    assert (beside / "config.json").read_text() == "3" and (beside / COMPLETE_MARKER).is_file()


def test_a_published_folder_gets_the_modes_the_umask_allows(tmp_path):
    # safetensors' save_file writes 0600: the exported weights were the one file of the model others could not read
    import os

    from ftcli_trainer.storage import publish_dir

    staged = tmp_path / "staged"
    (staged / "sub").mkdir(parents=True)
    weights, config, script = staged / "model.safetensors", staged / "sub" / "config.json", staged / "run.sh"
    for path, mode in ((weights, 0o600), (config, 0o644), (script, 0o700)):
        path.write_text("x")
        path.chmod(mode)
    old = os.umask(0o027)
    try:
        publish_dir(staged, str(tmp_path / "model"))
    finally:
        os.umask(old)
    modes = {p.relative_to(tmp_path / "model").as_posix(): p.stat().st_mode & 0o777
             for p in (tmp_path / "model").rglob("*") if p.is_file()}
    # read for the group as the umask allows, nothing taken away, nothing given to others
    assert modes == {"model.safetensors": 0o640, "sub/config.json": 0o644, "run.sh": 0o740, "_COMPLETE": 0o640,
                     "ftcli_files.json": 0o640}


def test_a_failed_resumable_upload_leaves_its_session_out_of_the_jobs_traceback(gcs, tmp_path, monkeypatch):
    # The trainer prints an unexpected error's traceback into the job's log (task.main); google-cloud-storage's
    # message holds the request's URL, whose upload_id lets whoever reads it upload to that object.
    import re
    import traceback

    from tests.emulators.gcs import FaultyProxy

    gcs.create_bucket("b")
    big = tmp_path / "model"
    big.mkdir()
    (big / "model.safetensors").write_bytes(b"w" * (9 * 1024 * 1024))  # over 8 MiB: a resumable upload
    with FaultyProxy(gcs.url, status=403, fail_when=lambda method, target, n: method == "PUT") as proxy:
        for k, v in proxy.env().items():
            monkeypatch.setenv(k, v)
        with pytest.raises(Exception) as info:  # noqa: B017 - whatever the client raises for a 403
            storage.publish_dir(big, "gs://b/run/model")
    (session,) = {re.search(r"upload_id=([^&]+)", q.target).group(1) for q in proxy.requests if q.method == "PUT"}
    raw = "".join(traceback.format_exception(info.value))
    assert session in raw  # what the traceback held
    shown = storage.redact_urls(raw)
    assert session not in shown and "upload_id=REDACTED: " in shown


def test_a_failed_logs_copy_leaves_the_upload_session_out_of_its_warning(monkeypatch, caplog, tmp_path):
    # The warning quoted google-cloud-storage's "PUT URL: reason", the resumable upload's upload_id with it, into the
    # job's log, which everyone with logs access reads (an upload session needs no credentials)
    from types import SimpleNamespace

    from ftcli_trainer import loop

    def refuse(*args, **kwargs):
        raise RuntimeError("PUT https://storage.googleapis.com/upload/storage/v1/b/bkt/o?uploadType=resumable"
                           "&upload_id=SESSION123: 503 Service Unavailable")

    monkeypatch.setattr(storage, "upload_dir", refuse)
    trainer = SimpleNamespace(dist=SimpleNamespace(is_main=True), _tb=None, _logs_synced=0.0,
                              paths=SimpleNamespace(logs_dir="gs://bkt/run/logs", local_logs_dir=tmp_path,
                                                    checkpoint_dir="gs://bkt/run/checkpoints"))
    with caplog.at_level("WARNING", logger=loop.log.name):
        loop.Trainer.sync_logs(trainer)
    assert "could not copy the logs to gs://bkt/run/logs" in caplog.text
    assert "upload_id=REDACTED" in caplog.text and "SESSION123" not in caplog.text


def test_a_small_file_written_on_a_full_disk_names_it_and_leaves_no_temporary_file(tmp_path):
    # The run's fingerprint, metrics.jsonl cut back at a resume, the W&B run id: a full disk left
    # .run-fingerprint.json.tmp-PID behind (the checkpoints folder of a run that never started stayed for it), and
    # "No space left on device" named no file, so not the disk either.
    target = tmp_path / "checkpoints" / "run-fingerprint.json"
    target.parent.mkdir()
    target.write_text("old\n")
    with files_of_at_most(100), pytest.raises(OSError) as caught:
        storage.write_text(str(target), "x" * 1000)
    assert caught.value.filename == str(target)
    assert target.read_text() == "old\n"  # whole, as it was
    assert [p.name for p in target.parent.iterdir()] == ["run-fingerprint.json"]

    storage.write_text(str(target), "new\n")
    assert target.read_text() == "new\n" and [p.name for p in target.parent.iterdir()] == ["run-fingerprint.json"]



def _export(parent: Path, files: dict[str, bytes]) -> Path:
    folder = storage.staging_dir(parent, "model")
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return folder


def test_a_re_export_keeps_the_files_the_user_put_in_the_model_folder(tmp_path):
    # A re-export (a restarted job, the same trainer command again) replaced the whole folder: a README.md and notes the
    # user had put beside config.json were deleted without a word.
    model = tmp_path / "model"
    storage.publish_dir(_export(tmp_path, {"config.json": b"1", "old-only.bin": b"ftcli's", "sub/x": b"1"}), str(model))
    (model / "README.md").write_text("my notes")
    (model / "notes").mkdir()
    (model / "notes" / "a.txt").write_text("a")
    (model / "data").symlink_to(tmp_path / "elsewhere")
    inode = (model / "README.md").stat().st_ino

    storage.publish_dir(_export(tmp_path, {"config.json": b"2", "sub/x": b"2", "new.bin": b"n"}), str(model))
    got = {p.relative_to(model).as_posix(): p.read_bytes() for p in model.rglob("*") if p.is_file()}
    assert {k: v for k, v in got.items() if k != storage.EXPORT_MANIFEST} == {
        "config.json": b"2", "sub/x": b"2", "new.bin": b"n", COMPLETE_MARKER: b"", "README.md": b"my notes",
        "notes/a.txt": b"a"}  # the earlier export's old-only.bin is gone: that one was ftcli's
    assert (model / "README.md").stat().st_ino == inode  # not even moved
    assert os.readlink(model / "data") == str(tmp_path / "elsewhere")
    assert sorted(storage._export_list((model / storage.EXPORT_MANIFEST).read_text())) == ["config.json", "new.bin",
                                                                                          "sub/x"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no staging left


def test_a_re_export_cut_short_is_finished_by_the_next_one_and_the_users_files_stay(tmp_path, monkeypatch):
    model = tmp_path / "model"
    storage.publish_dir(_export(tmp_path, {"config.json": b"1", "old-only.bin": b"o"}), str(model))
    (model / "README.md").write_text("mine")
    moves, real_replace = [], os.replace

    def crash_on_the_second_file(src, dst):
        moves.append(dst)
        if len(moves) == 3:  # the list of both exports' files, one file, then the crash
            raise OSError(5, "Input/output error")
        real_replace(src, dst)

    monkeypatch.setattr(storage.os, "replace", crash_on_the_second_file)
    with pytest.raises(OSError):
        storage.publish_dir(_export(tmp_path, {"config.json": b"2", "model.bin": b"2"}), str(model))
    monkeypatch.setattr(storage.os, "replace", real_replace)
    assert not (model / COMPLETE_MARKER).exists()  # torn: it does not claim to be complete
    assert storage.replaceable(model)  # but it is ours: the next export finishes it (a run refused it as foreign)

    storage.publish_dir(_export(tmp_path, {"config.json": b"3", "model.bin": b"3"}), str(model))
    assert sorted(p.name for p in model.iterdir()) == ["README.md", COMPLETE_MARKER, "config.json",
                                                       storage.EXPORT_MANIFEST, "model.bin"]
    assert (model / "README.md").read_text() == "mine" and (model / "model.bin").read_bytes() == b"3"


def test_a_user_file_where_the_re_export_writes_one_is_refused_and_nothing_changes(tmp_path):
    model = tmp_path / "model"
    storage.publish_dir(_export(tmp_path, {"config.json": b"1"}), str(model))
    (model / "README.md").write_text("mine")
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    with pytest.raises(TrainerError, match=r"model/README.md is not from the earlier export, and this one has a file "
                                           r"there: .*model is left as it is, and the new model is in .*model-2"):
        storage.publish_dir(_export(tmp_path, {"config.json": b"2", "README.md": b"a model card"}), str(model))
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before
    (beside,) = tmp_path.glob("model-2*")
    assert (beside / "README.md").read_bytes() == b"a model card" and (beside / COMPLETE_MARKER).is_file()


def test_an_earlier_ftclis_export_without_its_list_is_replaced_only_when_no_file_of_it_would_be_left(tmp_path):
    # An export of an ftcli that did not write ftcli_files.json: a re-export replaced the files it writes and left the
    # rest, a stale shard or tokenizer file of that export among them, to be loaded with the new weights (vLLM reads
    # every *.safetensors; a tokenizer.json beside a slow tokenizer's files is the one AutoTokenizer takes).
    model = tmp_path / "model"
    old = {"config.json": b"1", "model-00001-of-00002.safetensors": b"old", "model-00002-of-00002.safetensors": b"old",
           "model.safetensors.index.json": b"{}", "tokenizer.json": b"old"}
    storage.publish_dir(_export(tmp_path, old), str(model))
    (model / storage.EXPORT_MANIFEST).unlink()  # as the earlier ftcli left it
    (model / "README.md").write_text("mine")
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    with pytest.raises(TrainerError) as refused:
        storage.publish_dir(_export(tmp_path, {"config.json": b"2", "model.safetensors": b"new"}), str(model))
    (beside,) = tmp_path.glob("model-2*")
    assert refused.value.lines() == (
        f"error: {model} is an earlier ftcli's export, which does not list its files (ftcli_files.json), and holds "
        "README.md (and 4 more), which this export does not write: left over from that export (loaded with the new "
        f"model) or yours, they cannot be told apart, so {model} is left as it is, and the new model is in {beside}\n"
        f"hint: keep what is yours from {model}, then put {beside} in its place")
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before  # nothing removed, nothing replaced
    assert (beside / "model.safetensors").read_bytes() == b"new" and (beside / COMPLETE_MARKER).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", beside.name]  # no staging left

    # the same earlier export with no file the new one does not write: replaced, and listed from now on
    for name in [*old, "README.md"]:
        if name != "config.json":
            (model / name).unlink()
    storage.publish_dir(_export(tmp_path, {"config.json": b"3"}), str(model))
    assert {p.name: p.read_bytes() for p in model.iterdir()} == {
        "config.json": b"3", COMPLETE_MARKER: b"", storage.EXPORT_MANIFEST: storage._export_list_text(
            {"config.json"}).encode()}


def test_an_earlier_ftclis_export_in_a_bucket_without_its_list_is_left_as_it_is(gcs, tmp_path):
    gcs.create_bucket("b")
    storage.publish_dir(_export(tmp_path, {"config.json": b"1", "tokenizer.json": b"old"}), "gs://b/run/model/")
    storage._client().bucket("b").blob("run/model/ftcli_files.json").delete()  # as the earlier ftcli left it
    with pytest.raises(TrainerError, match=r"gs://b/run/model/ is an earlier ftcli's export, which does not list its "
                                           r"files \(ftcli_files.json\), and holds tokenizer.json, which this export "
                                           r"does not write: .* the new model is in gs://b/run/model-2"):
        storage.publish_dir(_export(tmp_path, {"config.json": b"2", "model.safetensors": b"new"}), "gs://b/run/model/")
    assert gcs.list("b", "run/model/") == ["run/model/_COMPLETE", "run/model/config.json", "run/model/tokenizer.json"]
    assert gcs.read("b", "run/model/config.json") == b"1"
    beside = sorted({o.split("/")[1] for o in gcs.list("b", "run/") if o.startswith("run/model-")})
    assert len(beside) == 1 and gcs.read("b", f"run/{beside[0]}/model.safetensors") == b"new"


def test_a_bucket_folder_with_only_the_users_files_is_not_called_an_earlier_export(gcs, tmp_path):
    # A gs:// model folder with neither _COMPLETE nor ftcli_files.json, only the user's notes: the line that refused it
    # called it "an earlier ftcli's export, which does not list its files"; one with only a config.json of theirs (a
    # name the export writes) was written over. Both are said as what they are, as a local folder is, and left alone.
    gcs.create_bucket("b")
    gcs.write("b", "run/model/README.md", b"my notes")
    gcs.write("b", "run/model/notes/a.txt", b"a")
    with pytest.raises(TrainerError) as refused:
        storage.publish_dir(_export(tmp_path, {"config.json": b"2"}), "gs://b/run/model/")
    (beside,) = sorted({o.split("/")[1] for o in gcs.list("b", "run/") if o.startswith("run/model-")})
    assert (str(refused.value), refused.value.hint) == (
        "gs://b/run/model/ is not a model ftcli exported (it has neither _COMPLETE nor ftcli_files.json) and holds "
        "README.md (and 1 more), which ftcli did not write: gs://b/run/model/ is left as it is, and the new model is "
        f"in gs://b/run/{beside}",
        f"keep what is yours from gs://b/run/model/, then put gs://b/run/{beside} in its place")
    assert gcs.list("b", "run/model/") == ["run/model/README.md", "run/model/notes/a.txt"]
    assert gcs.read("b", f"run/{beside}/config.json") == b"2" and f"run/{beside}/_COMPLETE" in gcs.list("b")

    gcs.reset(keep_buckets=True)
    gcs.write("b", "run/model/config.json", b"theirs")
    with pytest.raises(TrainerError, match=r"^gs://b/run/model/ is not a model ftcli exported .* holds config.json, "):
        storage.publish_dir(_export(tmp_path, {"config.json": b"2"}), "gs://b/run/model/")
    assert gcs.read("b", "run/model/config.json") == b"theirs"


def test_a_copy_whose_object_was_deleted_leaves_no_model_beside_the_refused_folder(gcs, tmp_path):
    # The export's weights, to be copied inside the bucket, deleted since the trainer looked (checkpoint.take_weights):
    # the copy says so (SourceGone, for the trainer to write them instead) where a model goes beside a folder it may
    # not write into, and the folder begun beside it goes too: the export made again begins another.
    gcs.create_bucket("b")
    storage.publish_dir(_export(tmp_path, {"config.json": b"1", "tokenizer.json": b"old"}), "gs://b/run/model/")
    storage._client().bucket("b").blob("run/model/ftcli_files.json").delete()  # an earlier ftcli's: Unlisted
    with pytest.raises(storage.SourceGone) as gone:
        storage.publish_dir(_export(tmp_path, {"config.json": b"2"}), "gs://b/run/model/",
                            copies={"model.safetensors": "gs://b/run/checkpoints/step-1/model.safetensors"})
    assert gone.value.source == "gs://b/run/checkpoints/step-1/model.safetensors"
    assert [o for o in gcs.list("b") if not o.startswith("run/model/")] == []
    assert gcs.list("b", "run/model/") == ["run/model/_COMPLETE", "run/model/config.json", "run/model/tokenizer.json"]


def test_a_re_export_to_a_bucket_keeps_the_objects_the_user_put_there(gcs, tmp_path):
    # publish_dir deleted every object under the prefix that the new export lacked: the user's README.md too
    gcs.create_bucket("b")
    storage.publish_dir(_export(tmp_path, {"config.json": b"1", "old-only.bin": b"o"}), "gs://b/run/model/")
    gcs.write("b", "run/model/README.md", b"my notes")
    gcs.write("b", "run/model/notes/a.txt", b"a")
    storage.publish_dir(_export(tmp_path, {"config.json": b"2", "new.bin": b"n"}), "gs://b/run/model/")
    assert gcs.list("b", "run/model/") == ["run/model/README.md", "run/model/_COMPLETE", "run/model/config.json",
                                           "run/model/ftcli_files.json", "run/model/new.bin",
                                           "run/model/notes/a.txt"]
    assert gcs.read("b", "run/model/README.md") == b"my notes" and gcs.read("b", "run/model/config.json") == b"2"

    # one of theirs where the export writes a file: nothing changes there, the new model goes beside it
    with pytest.raises(TrainerError, match=r"gs://b/run/model/README.md is not from the earlier export.*the new "
                                           r"model is in gs://b/run/model-2"):
        storage.publish_dir(_export(tmp_path, {"config.json": b"3", "README.md": b"card"}), "gs://b/run/model/")
    assert gcs.read("b", "run/model/README.md") == b"my notes" and gcs.read("b", "run/model/config.json") == b"2"
    assert "run/model/_COMPLETE" in gcs.list("b", "run/model/")
    beside = sorted({o.split("/")[1] for o in gcs.list("b", "run/") if o.startswith("run/model-")})
    assert len(beside) == 1 and gcs.read("b", f"run/{beside[0]}/README.md") == b"card"


@pytest.mark.parametrize(("where", "complete"), [("local", True), ("local", False), ("gcs", True), ("gcs", False)])
@pytest.mark.parametrize(("written", "why"), [(b"\xff\xfe{}", "not UTF-8"), (b'{"files": ', "not JSON"),
                                              (b'{"files": "config.json"}', "not the list of files ftcli writes")])
def test_an_unreadable_list_of_the_earlier_exports_files_is_said_so_naming_it(request, tmp_path, where, complete,
                                                                              written, why):
    # An ftcli_files.json that cannot be read (not UTF-8, not JSON, not the list) was taken for no list at all: the
    # refusal said the folder "does not list its files" or "has neither _COMPLETE nor ftcli_files.json", of a folder
    # that has it; in a bucket, one not UTF-8 ended the export with a UnicodeDecodeError traceback.
    if where == "gcs":
        gcs = request.getfixturevalue("gcs")
        gcs.create_bucket("b")
        model = "gs://b/run/model"
    else:
        model = str(tmp_path / "model")
    storage.publish_dir(_export(tmp_path, {"config.json": b"1", "tokenizer.json": b"old"}), model)
    if not complete:  # (an export cut short: the list there, the marker not yet)
        if where == "gcs":
            storage._client().bucket("b").blob("run/model/_COMPLETE").delete()
        else:
            (tmp_path / "model" / COMPLETE_MARKER).unlink()
    manifest = storage.join(model, storage.EXPORT_MANIFEST)
    if where == "gcs":
        storage._client().bucket("b").blob("run/model/ftcli_files.json").upload_from_string(written)
    else:
        Path(manifest).write_bytes(written)
    with pytest.raises(TrainerError) as refused:
        storage.publish_dir(_export(tmp_path, {"config.json": b"2"}), model)
    beside = str(refused.value).split("the new model is in ")[1]
    assert (str(refused.value), refused.value.hint) == (
        f"{manifest} is unreadable ({why}), so which files of {model} an earlier export wrote is not known, and "
        f"{model} holds tokenizer.json, which this export does not write: left over from that export (loaded with the "
        f"new model) or yours, they cannot be told apart, so {model} is left as it is, and the new model is in "
        f"{beside}", f"keep what is yours from {model}, then put {beside} in its place")
    assert storage.read_text(storage.join(model, "config.json")) == "1"
    assert storage.read_text(storage.join(beside, "config.json")) == "2"


def test_clean_stale_staging_leaves_a_link_a_file_and_a_longer_name_of_that_shape(tmp_path):
    # Only a folder named exactly like a dead writer's staging folder is removed: a user's `.model.tmp-PID-XXXXXXXX.bak`
    # folder, a link of that shape to a folder of theirs, or a file, are theirs (and were called removed).
    pid = dead_pid()
    stale = tmp_path / f".model.tmp-{pid}-abcd1234"
    longer = tmp_path / f".model.tmp-{pid}-abcd1234.bak"
    theirs = tmp_path / "theirs"
    for p in (stale, longer, theirs):
        p.mkdir()
        (p / "f").write_text("x")
    link = tmp_path / f".model.tmp-{pid}-linkedto"
    link.symlink_to(theirs)
    file = tmp_path / f".model.tmp-{pid}-afile123"
    file.write_text("mine")
    assert storage.clean_stale_staging(tmp_path, r"\.model") == [stale]
    assert not stale.exists() and (longer / "f").read_text() == "x" and (theirs / "f").read_text() == "x"
    assert link.is_symlink() and file.read_text() == "mine"


def test_a_new_staging_folder_cleans_only_its_own_names_stale_folders(tmp_path):
    # The name is taken literally: `.model` as a pattern also matched a user's `xmodel.tmp-PID-XXXXXXXX` folder.
    pid = dead_pid()
    stale, theirs = tmp_path / f".model.tmp-{pid}-abcd1234", tmp_path / f"xmodel.tmp-{pid}-abcd1234"
    for p in (stale, theirs):
        p.mkdir()
        (p / "f").write_text("x")
    mine = storage.staging_dir(tmp_path, "model")
    assert not stale.exists() and (theirs / "f").read_text() == "x" and mine.is_dir()


def test_a_re_export_to_a_bucket_whose_earlier_file_is_gone_is_published_whole(gcs, tmp_path):
    # An earlier export's file deleted from the bucket since (by hand, a lifecycle rule) is no stale file to delete:
    # deleting it failed with a 404 after every upload, and the new model was left without its marker.
    gcs.create_bucket("b")
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    (old / "model.safetensors").write_bytes(b"old weights")
    (old / "extra.txt").write_bytes(b"gone by hand")
    storage.publish_dir(old, "gs://b/run/model")
    gcs.client().bucket("b").blob("run/model/extra.txt").delete()
    new.mkdir()
    (new / "model.safetensors").write_bytes(b"new weights")
    storage.publish_dir(new, "gs://b/run/model")
    assert gcs.list("b", "run/model/") == ["run/model/_COMPLETE", "run/model/ftcli_files.json",
                                           "run/model/model.safetensors"]
    assert gcs.read("b", "run/model/model.safetensors") == b"new weights"
