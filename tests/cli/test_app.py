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
