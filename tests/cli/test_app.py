"""The one error handler: whatever goes wrong is one line and a non-zero exit, never a traceback."""

from tests.cli.helpers import run_cli


def test_a_config_path_that_is_a_folder_is_one_line(capsys, tmp_path, monkeypatch):
    folder = tmp_path / "config-folder"
    folder.mkdir()
    monkeypatch.setenv("FTCLI_CONFIG", str(folder))
    for args in (["config", "list"], ["config", "set", "project", "p"], ["jobs", "list"]):
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
        for args in (["config", "list"], ["config", "set", "project", "p"]):
            r = run_cli(capsys, *args)  # never blocks on the pipe, never writes to the device
            assert r.code == 2, (args, r.err)
            assert r.err.startswith(f"error: the config file {path} is {kind}, not a regular file"), (args, r.err)
            assert "folder" not in r.err.splitlines()[0] and "Traceback" not in r.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config-pipe"]
