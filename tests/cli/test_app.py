"""The one error handler: whatever goes wrong is one line and a non-zero exit, never a traceback."""

import os

import pytest

from tests.cli.helpers import run_cli


def test_a_config_path_that_is_a_folder_is_one_line(capsys, tmp_path, monkeypatch):
    folder = tmp_path / "config-folder"
    folder.mkdir()
    monkeypatch.setenv("FTCLI_CONFIG", str(folder))
    for args in (["config", "list"], ["config", "set", "project", "my-project"], ["jobs", "list"]):
        r = run_cli(capsys, *args)
        assert r.code == 2, (args, r.err)
        assert r.err.startswith(f"error: the config file {folder} is a folder, not a file"), (args, r.err)
        assert "Traceback" not in r.err
    assert list(folder.iterdir()) == []


def test_a_config_path_that_is_a_device_or_a_pipe_is_not_called_a_folder(capsys, tmp_path, monkeypatch):
    import os

    pipe = tmp_path / "config-pipe"
    os.mkfifo(pipe)
    cases = [(pipe, "a named pipe")]
    if os.path.exists("/dev/full"):
        cases.append(("/dev/full", "a character device"))
    for path, kind in cases:
        monkeypatch.setenv("FTCLI_CONFIG", str(path))
        for args in (["config", "list"], ["config", "set", "project", "my-project"]):
            r = run_cli(capsys, *args)  # never blocks on the pipe, never writes to the device
            assert r.code == 2, (args, r.err)
            assert r.err.startswith(f"error: the config file {path} is {kind}, not a regular file"), (args, r.err)
            assert "folder" not in r.err.splitlines()[0] and "Traceback" not in r.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config-pipe"]


def test_a_full_disk_while_saving_the_config_names_the_file_and_keeps_the_old_one(capsys, tmp_path, monkeypatch):
    import errno
    import os

    config = tmp_path / "config.toml"
    config.write_text('project = "old-project"\n')
    monkeypatch.setenv("FTCLI_CONFIG", str(config))

    def disk_full(fd, data):  # the OS boundary: every write(2) fails as on a full disk
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", disk_full)
    r = run_cli(capsys, "config", "set", "project", "new-project")
    monkeypatch.undo()
    assert r.code == 1, r.err
    (line,) = r.err.strip().splitlines()
    assert line == f"error: cannot use {config}: No space left on device; free some space on that disk, then run again"
    assert config.read_text() == 'project = "old-project"\n'  # nothing lost
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]  # nothing left behind


def test_a_folder_that_takes_no_new_file_names_the_config_file_not_a_temporary_one(capsys, tmp_path, monkeypatch):
    # Found by hand (FTCLI_CONFIG in a read-only folder): "cannot use /sys/kernel/.config.toml.rmz79k7n.tmp: Permission
    # denied", a file the user never made. Root writes anywhere, so the folder's refusal is made at the OS boundary:
    # creating a new file there fails as in a folder the user cannot write.
    import errno
    import os

    config = tmp_path / "config.toml"
    config.write_text('project = "old-project"\n')
    monkeypatch.setenv("FTCLI_CONFIG", str(config))
    real_open = os.open

    def no_new_file(file, flags, *args, **kwargs):
        if flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
        return real_open(file, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_new_file)
    r = run_cli(capsys, "config", "set", "project", "new-project")
    monkeypatch.undo()
    assert r.code == 1, r.err
    # (it said only 'cannot use CONFIG: Permission denied; check the permissions of that file and of its folder',
    # without the ways round it that a missing or read-only home's config folder is told)
    assert r.err.splitlines() == [
        f"error: cannot save the config file {config}: Permission denied ({tmp_path} takes no new file)",
        "hint: point FTCLI_CONFIG at a file in a writable folder, or set the setting's FTCLI_* variable instead "
        "(FTCLI_PROJECT, FTCLI_REGION, FTCLI_BUCKET, FTCLI_SERVICE_ACCOUNT, FTCLI_IMAGE_MIRROR)"]
    assert config.read_text() == 'project = "old-project"\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


@pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="needs Linux's /proc/self/mem, whose read is EIO")
def test_a_config_file_that_cannot_be_read_is_named(capsys, monkeypatch):
    # Reading /proc/self/mem from offset 0 fails with EIO, an error that names no file: it said "error: Input/output
    # error" and nothing about the config file, in every command.
    monkeypatch.setenv("FTCLI_CONFIG", "/proc/self/mem")
    for args in (["config", "get", "region"], ["config", "set", "region", "europe-west4"], ["jobs", "list"]):
        r = run_cli(capsys, *args)
        assert r.code == 1, (args, r.err)
        assert r.err.startswith("error: cannot use /proc/self/mem: Input/output error"), (args, r.err)
        assert "Traceback" not in r.err


def test_a_config_path_under_a_file_says_which_file_is_in_the_way(capsys, tmp_path, monkeypatch):
    import os

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    cases = [(blocker / "config.toml", blocker), (blocker / "sub" / "config.toml", blocker)]
    if os.path.exists("/dev/full"):
        cases.append(("/dev/full/config.toml", "/dev/full"))
    for path, file in cases:
        monkeypatch.setenv("FTCLI_CONFIG", str(path))
        r = run_cli(capsys, "config", "set", "project", "my-project")
        assert r.code == 2, r.err
        assert r.err.startswith(f"error: cannot save the config file {path}: {file} is a file, not a folder"), r.err
        assert "Traceback" not in r.err
    assert blocker.read_text() == "x"


def test_a_file_error_names_both_files_and_what_to_do(tmp_path):
    import os

    from ftcli.cli.app import os_error_line

    src, folder = tmp_path / "a", tmp_path / "b"
    src.write_text("a")
    folder.mkdir()
    (folder / "inside").write_text("b")
    try:
        os.replace(src, folder)  # a real error with filename and filename2
    except OSError as e:
        assert os_error_line(e) == f"cannot use {src} -> {folder}: Is a directory"
    else:
        raise AssertionError("replacing a folder with a file should fail")
    assert os_error_line(PermissionError(13, "Permission denied", "/etc/x")) == (
        "cannot use /etc/x: Permission denied; check the permissions of that file and of its folder")


def test_saving_the_config_leaves_other_files_alone_and_keeps_its_mode(capsys, tmp_path, monkeypatch):
    config, bystander = tmp_path / "config.toml", tmp_path / "config.tmp"
    config.write_text('project = "old-project"\n')
    config.chmod(0o640)
    bystander.write_text("someone else's file")  # where the config was once staged
    monkeypatch.setenv("FTCLI_CONFIG", str(config))
    assert run_cli(capsys, "config", "set", "project", "new-project").code == 0
    assert config.read_text() == 'project = "new-project"\n' and config.stat().st_mode & 0o777 == 0o640
    assert bystander.read_text() == "someone else's file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.tmp", "config.toml"]


def test_ctrl_c_in_any_command_says_interrupted_and_exits_130(capsys, tmp_path, monkeypatch):
    # Typer turned the KeyboardInterrupt into a silent exit 130: main's "interrupted" line never ran.
    import pytest

    import ftcli.settings

    def cut(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ftcli.settings, "effective", cut)
    r = run_cli(capsys, "config", "list")
    assert (r.code, r.err) == (130, "\ninterrupted\n")
    monkeypatch.setenv("FTCLI_DEBUG", "1")  # the interrupt itself, with its traceback
    with pytest.raises(KeyboardInterrupt):
        run_cli(capsys, "config", "list")
    monkeypatch.delenv("FTCLI_DEBUG")
    r = run_cli(capsys, "config", "get", "no-such-key")  # another exit is left as it is
    assert r.code != 130 and "interrupted" not in r.err


@pytest.mark.parametrize("args,says,see", [
    (["train", "--gpuu", "T4"], "no such option: --gpuu (Possible options: --gpu, --gpu-warmup)", "ftcli train"),
    (["local", "--epochs", "x"], "invalid value for '--epochs': Input should be a valid integer, unable to parse "
                                 "string as an integer", "ftcli local"),
    (["lgos"], "no such command 'lgos'. Did you mean 'logs'?", "ftcli"),
    (["jobs", "describe"], "missing argument 'JOB'", "ftcli jobs describe"),
    (["config", "sett"], "no such command 'sett'. Did you mean 'set', 'unset'?", "ftcli config"),
    (["--versio"], "no such option: --versio (Possible options: --version)", "ftcli"),
    # ftcli tune's to set on its trials: train's CustomJob and local's run have no tuning service to report to
    (["local", "--hypertune-metric", "eval_accuracy"], "no such option: --hypertune-metric", "ftcli local"),
    (["train", "--hypertune-metric", "eval_accuracy"], "no such option: --hypertune-metric", "ftcli train"),
])
def test_a_usage_error_is_one_line_and_a_hint(capsys, tmp_path, monkeypatch, args, says, see):
    # Click said these in three lines and a blank one ("Usage: ftcli train [OPTIONS]", "Try 'ftcli train -h' for
    # help.", "", "Error: No such option: --gpuu ..."), unlike every other error of ftcli's.
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    r = run_cli(capsys, *args)
    assert r.code == 2 and not r.out
    error, hint = r.err.splitlines()
    # (under pytest click names the program "python -m pytest.ftcli")
    assert error == f"error: {says}" and hint.startswith("hint: see ") and hint.endswith(f"{see} -h")


@pytest.mark.parametrize("args", [[], ["jobs"], ["config"]])
def test_a_group_alone_still_shows_its_help(capsys, args):
    r = run_cli(capsys, *args)
    assert r.code == 2 and not r.out
    assert r.err.startswith("Usage: ") and f"{' '.join(['ftcli', *args])} [OPTIONS] COMMAND [ARGS]...\n" in r.err
    assert "error:" not in r.err


@pytest.mark.parametrize("args,says,hint", [
    (["--project", "my-project-1", "jobs", "list"], "no such option: --project", "ftcli jobs list --project ..."),
    (["jobs", "--json", "describe", "3"], "no such option: --json", "ftcli jobs describe --json ..."),
    (["--json", "config", "list"], "no such option: --json", "ftcli config list --json ..."),
])
def test_an_option_before_its_command_is_shown_where_it_goes(capsys, tmp_path, monkeypatch, args, says, hint):
    # gcloud takes its flags anywhere: `ftcli --project P jobs list` said "no such option: --project" and "see
    # ftcli -h", whose options have no --project (and `ftcli --json config list` offered "Possible options: --version")
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    r = run_cli(capsys, *args)
    assert (r.code, r.out) == (2, "")
    error, line = r.err.splitlines()
    assert error == f"error: {says}"
    assert line.startswith("hint: options go after the command: ") and line.endswith(hint)


def test_an_option_no_command_takes_keeps_the_usual_hint(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    r = run_cli(capsys, "--gpuu", "train")
    assert r.code == 2 and r.err.splitlines()[1].startswith("hint: see ") and r.err.rstrip().endswith(" -h")


LEAVES = """
import atexit, pathlib, sys, threading
marks = pathlib.Path(sys.argv[1])


class Teardown:  # a module global: deleted by Python's teardown of the modules, never by an exit that skips it
    def __del__(self, _open=open, _path=str(marks)):
        with _open(_path, "a") as f:
            f.write("teardown\\n")


kept = Teardown()
atexit.register(lambda: marks.open("a").write("atexit\\n"))
if sys.argv[2] == "thread":  # a thread still running when the command ends, which Python's shutdown waits for
    threading.Thread(target=lambda: (threading.main_thread().join(), marks.open("a").write("thread\\n"))).start()
sys.argv = ["ftcli", *sys.argv[3:]]
from ftcli.cli.app import main
main()
"""


@pytest.mark.parametrize("case", ["predict", "error", "thread", "no torch"])
def test_a_command_that_loaded_torch_leaves_without_the_teardown_of_its_modules(tmp_path, tiny_model, case):
    # `ftcli predict MODEL TEXT` printed its line, then Python's shutdown tore down the ~2,900 modules torch and
    # transformers bring: 1.0-1.6 s of a 7-9 s command on the 2-core VM. It now leaves once the command has ended, as
    # the trainer does, its atexit hooks run and its output whole, with the command's exit status; a command that
    # loaded no torch, or left a thread to wait for, exits as before.
    import subprocess
    import sys

    marks = tmp_path / "marks"
    args = {"predict": ["predict", str(tiny_model), "a good film"], "thread": ["predict", str(tiny_model), "good"],
            "error": ["predict", str(tiny_model), "good", "--threshold", "0.5"], "no torch": ["--version"]}[case]
    r = subprocess.run([sys.executable, "-c", LEAVES, str(marks), case, *args], capture_output=True, text=True,
                       timeout=300)
    if case == "error":  # (the threshold is refused once the model says it is single-label: torch is loaded)
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith("error: --threshold applies to multi-label models"), r.stderr
    else:
        assert r.returncode == 0, r.stderr
        assert r.stdout.endswith("\ta good film\n" if case == "predict" else "\tgood\n" if case == "thread" else "\n")
    assert marks.read_text() == {"predict": "atexit\n", "error": "atexit\n", "thread": "thread\natexit\nteardown\n",
                                 "no torch": "atexit\nteardown\n"}[case]


def test_wait_for_child_lets_a_ctrl_c_stop_the_tests():
    # The tests' own helper: a Ctrl-C while it waited became the test's AssertionError, and pytest went on with the
    # next test; the child it waited on must still be stopped.
    import subprocess
    import sys

    from tests.cli.helpers import wait_for_child

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        wait_for_child(child, interrupted)
    assert child.returncode is not None


@pytest.mark.parametrize("args", [["predict", "MODEL", "café"], ["train", "--task", "csv", "--train-file", "日本.csv",
                                                                 "--gpu", "T4", "--dry-run"]])
def test_an_argument_an_ascii_locale_cannot_read_is_one_line_and_a_hint(tmp_path, tiny_model, args):
    # LC_ALL=C with PYTHONUTF8=0: LC_ALL turns off Python's coercion of the C locale and PYTHONUTF8=0 its UTF-8 mode,
    # so a non-ASCII argument reached the command as lone surrogates: `predict M café` ended in a TypeError traceback
    # from the tokenizer, `train --train-file 日本.csv --dry-run` in a UnicodeEncodeError one.
    import subprocess
    import sys

    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "FTCLI_CONFIG": str(tmp_path / "config.toml"),
           "FTCLI_STATE_DIR": str(tmp_path / "state"), "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONIOENCODING", None)
    args = [str(tiny_model) if a == "MODEL" else a for a in args]
    r = subprocess.run([sys.executable, "-c", "from ftcli.cli.app import main; main()", *args], capture_output=True,
                       text=True, cwd=tmp_path, env=env, timeout=120)
    word = args[2] if args[0] == "predict" else args[4]
    shown = repr(word).encode("ascii", "backslashreplace").decode()
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.splitlines() == [
        f"error: the argument {shown} is not text in this locale's encoding (ascii), so ftcli cannot tell which "
        "characters it holds",
        "hint: run ftcli in a UTF-8 locale (LC_ALL=C.UTF-8) or with PYTHONUTF8=1"]


def test_a_file_named_with_a_leading_dash_is_said_how_to_pass(capsys, tmp_path, monkeypatch):
    # `ftcli evaluate M -dash.csv` said "no such option: -d" and "see ftcli evaluate -h": the file was there
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-dash.csv").write_text("text,label\ngood,1\n")
    r = run_cli(capsys, "evaluate", "model", "-dash.csv")
    assert (r.code, r.out) == (2, "")
    assert r.err.splitlines() == ["error: no such option: -d",
                                  "hint: -dash.csv is read as an option; the file of that name is ./-dash.csv (or "
                                  "put -- before it)"]
    r = run_cli(capsys, "evaluate", "model", "-other.csv")  # no such file: the usual hint
    assert r.code == 2 and r.err.splitlines()[1].endswith("ftcli evaluate -h")  # (in-process: python -m pytest's)
