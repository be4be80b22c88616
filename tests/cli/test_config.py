"""`ftcli config`: the value each setting has now and where it comes from; an unset key says so."""

import json
import os
import sys
from pathlib import Path

import pytest

from tests.cli.helpers import run_cli


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("FTCLI_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    for var in ("FTCLI_PROJECT", "FTCLI_REGION", "FTCLI_BUCKET", "FTCLI_SERVICE_ACCOUNT", "GOOGLE_CLOUD_PROJECT",
                "GCLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT", "CLOUDSDK_ACTIVE_CONFIG_NAME", "CLOUDSDK_AI_REGION",
                "CLOUDSDK_COMPUTE_REGION", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def rows(out: str) -> dict[str, dict]:
    return {x["key"]: x for x in map(json.loads, out.splitlines())}


def test_list_shows_each_value_and_its_source(capsys, monkeypatch, isolated):
    gcloud = isolated / "gcloud"
    (gcloud / "configurations").mkdir(parents=True)
    (gcloud / "configurations" / "config_default").write_text("[core]\nproject = from-gcloud\n")
    assert run_cli(capsys, "config", "set", "bucket", "gs://my-bucket/x").code == 0
    monkeypatch.setenv("FTCLI_REGION", "europe-west4")
    r = run_cli(capsys, "config", "list", "--json", "--service-account", "sa@p.iam.gserviceaccount.com")
    assert r.code == 0, r.err
    got = rows(r.out)
    assert (got["project"]["value"], got["project"]["source"]) == ("from-gcloud", "gcloud")
    assert "core/project" in got["project"]["origin"]
    assert (got["region"]["value"], got["region"]["source"], got["region"]["origin"]) == (
        "europe-west4", "env", "FTCLI_REGION")
    assert (got["bucket"]["value"], got["bucket"]["source"]) == ("gs://my-bucket/x", "file")
    assert got["bucket"]["origin"] == str(isolated / "config.toml")
    assert (got["service-account"]["source"], got["service-account"]["origin"]) == ("flag", "--service-account")

    monkeypatch.delenv("FTCLI_REGION")
    r = run_cli(capsys, "config", "list")
    assert r.code == 0
    assert "us-central1" in r.out and "default" in r.out and "(not set)" in r.out


def test_list_shows_every_value_and_source_whole_at_80_columns(capsys, monkeypatch, isolated):
    # The table used to be wider than the terminal: the lines were cropped at its edge, the source cut mid-word
    # with nothing to say so ("gcloud: gcloud configuration default (com"); then cut with an ellipsis, down to
    # "file:…" beside a long service account. A long value or source now wraps in its column.
    monkeypatch.setenv("COLUMNS", "80")
    gcloud = isolated / "gcloud"
    (gcloud / "configurations").mkdir(parents=True)
    (gcloud / "configurations" / "config_default").write_text("[compute]\nregion = europe-west4\n")
    for key, value in (("bucket", "gs://my-long-project-name-123-ftcli/staging"),
                       ("service-account", "trainer-sa@my-long-project-name-123.iam.gserviceaccount.com")):
        assert run_cli(capsys, "config", "set", key, value).code == 0
    r = run_cli(capsys, "config", "list", "--project", "my-project-123")
    assert r.code == 0, r.err
    assert [line.rstrip() for line in r.out.splitlines()] == [
        "KEY              VALUE                                    SOURCE",
        "project          my-project-123                           flag: --project",
        "region           europe-west4                             gcloud: compute/region",
        "bucket           gs://my-long-project-name-123-ftcli/sta  config file",
        "                 ging",
        "service-account  trainer-sa@my-long-project-name-123.iam  config file",
        "                 .gserviceaccount.com",
        "image-mirror     (not set)                                -"]
    assert f"config file: {isolated / 'config.toml'}" in r.err.splitlines()  # the file the table names
    (gcloud / "configurations" / "config_work").write_text("[compute]\nregion = asia-east1\n")
    monkeypatch.setenv("CLOUDSDK_ACTIVE_CONFIG_NAME", "work")
    monkeypatch.setenv("COLUMNS", "200")
    r = run_cli(capsys, "config", "list")
    region = next(line for line in r.out.splitlines() if line.startswith("region"))
    assert region.rstrip().split(None, 2)[1:] == ["asia-east1", "gcloud: compute/region (work configuration)"]


@pytest.mark.parametrize("columns, table, said", [
    (54, ["KEY              VALUE                 SOURCE",
          "project          my-project-123        flag: --project",
          "region           us-central1           ftcli's default",
          "bucket           gs://my-long-project  config file",
          "                 -name-123-ftcli/stag",
          "                 ing",
          "service-account  trainer-sa@my-long-p  config file",
          "                 roject-name-123.iam.",
          "                 gserviceaccount.com",
          "image-mirror     (not set)             -"], []),
    (40, ["KEY              VALUE",
          "project          my-project-123",
          "region           us-central1",
          "bucket           gs://my-long-project-na",
          "                 me-123-ftcli/staging",
          "service-account  trainer-sa@my-long-proj",
          "                 ect-name-123.iam.gservi",
          "                 ceaccount.com",
          "image-mirror     (not set)"],
     ["(SOURCE left out to fit 40 columns; a wider terminal or --json shows it)"]),
    (30, ["KEY              VALUE",
          "project          my-project-12",
          "                 3",
          "region           us-central1",
          "bucket           gs://my-long-",
          "                 project-name-",
          "                 123-ftcli/sta",
          "                 ging",
          "service-account  trainer-sa@my",
          "                 -long-project",
          "                 -name-123.iam",
          "                 .gserviceacco",
          "                 unt.com",
          "image-mirror     (not set)"],
     ["(SOURCE left out to fit 30 columns; a wider terminal or --json shows it)"])])
def test_list_fits_a_narrow_terminal(capsys, monkeypatch, isolated, columns, table, said):
    # README: "Tables fit the terminal". Below about 58 columns the table stayed 58 wide (the value was held at 24
    # columns): the terminal wrapped each line. The value and the source now fold, and below about 50 columns the
    # source gives way, said on stderr, as jobs list's MODEL and TASK do.
    monkeypatch.setenv("COLUMNS", str(columns))
    for key, value in (("bucket", "gs://my-long-project-name-123-ftcli/staging"),
                       ("service-account", "trainer-sa@my-long-project-name-123.iam.gserviceaccount.com")):
        assert run_cli(capsys, "config", "set", key, value).code == 0
    r = run_cli(capsys, "config", "list", "--project", "my-project-123")
    assert r.code == 0, r.err
    assert max(map(len, r.out.splitlines())) == columns
    assert [line.rstrip() for line in r.out.splitlines()] == table
    assert [line for line in r.err.splitlines() if line.startswith("(")] == said


@pytest.mark.parametrize("columns", [27, 21, 15, 8])
def test_list_in_a_terminal_too_narrow_for_the_table_says_key_equals_value(capsys, monkeypatch, isolated, columns):
    # Below 22 columns the table was wider than the terminal (every line wrapped by it, the value folded in 5-column
    # pieces: "gs://", "my-lo", ...), and below 18 it had no VALUE column at all: KEY alone, the values gone. Where
    # the value would get fewer columns than the default region's name, each setting is now one `key = value` line,
    # whole, for the terminal to wrap.
    monkeypatch.setenv("COLUMNS", str(columns))
    assert run_cli(capsys, "config", "set", "bucket", "gs://my-long-project-name-123-ftcli/staging").code == 0
    r = run_cli(capsys, "config", "list", "--project", "my-project-123")
    assert r.code == 0, r.err
    assert r.out.splitlines() == ["project = my-project-123", "region = us-central1",
                                  "bucket = gs://my-long-project-name-123-ftcli/staging",
                                  "service-account = (not set)", "image-mirror = (not set)"]
    assert r.err.splitlines()[0] == (f"(SOURCE left out to fit {columns} columns; a wider terminal or --json shows "
                                     "it)")


@pytest.mark.parametrize("name", ["prdo", "NONE"])
def test_a_gcloud_configuration_that_does_not_exist_is_read_empty_and_said(capsys, monkeypatch, isolated, name):
    """CLOUDSDK_ACTIVE_CONFIG_NAME=prdo (for prod) was read as an empty configuration without a word, and the project
    came from the key file: a job went to another project than the one the user chose. gcloud reads it as empty too
    (its named_configs takes the variable's name as it is, and its properties file skips a file that is not there), so
    ftcli still does, and says so. NONE is gcloud's own configuration with no properties: nothing to say."""
    gcloud = isolated / "gcloud"
    (gcloud / "configurations").mkdir(parents=True)
    (gcloud / "configurations" / "config_prod").write_text("[core]\nproject = prod-project\n")
    key = isolated / "key.json"
    key.write_text('{"type": "service_account", "project_id": "key-project", "client_email": "a@b.com"}')
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    monkeypatch.setenv("CLOUDSDK_ACTIVE_CONFIG_NAME", name)
    r = run_cli(capsys, "config", "get", "project")
    assert (r.code, r.out) == (0, "key-project\n")
    said = [line for line in r.err.splitlines() if not line.startswith("(key file:")]
    assert said == ([] if name == "NONE" else [
        f"warning: CLOUDSDK_ACTIVE_CONFIG_NAME names the gcloud configuration 'prdo', which does not exist "
        f"({gcloud / 'configurations' / 'config_prdo'}): gcloud reads it as empty, and so does ftcli "
        "hint: `gcloud config configurations list` names yours (here: prod); set CLOUDSDK_ACTIVE_CONFIG_NAME to one "
        "of them, or unset it"])


@pytest.mark.parametrize("name", ["prdo", "NONE"])
def test_a_gcloud_configuration_gclouds_active_config_names_that_does_not_exist_is_said(capsys, monkeypatch, isolated,
                                                                                         name):
    """gcloud's own active_config file naming a configuration whose file is gone (deleted by hand; gcloud refuses to
    delete the active one) was read as empty without a word, where CLOUDSDK_ACTIVE_CONFIG_NAME naming one is said:
    gcloud takes the file's name as it is too, and the project came from the key file. The warning names the file,
    and the fix is gcloud's `activate` (which rewrites it)."""
    gcloud = isolated / "gcloud"
    (gcloud / "configurations").mkdir(parents=True)
    (gcloud / "configurations" / "config_prod").write_text("[core]\nproject = prod-project\n")
    (gcloud / "active_config").write_text(name)
    key = isolated / "key.json"
    key.write_text('{"type": "service_account", "project_id": "key-project", "client_email": "a@b.com"}')
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    r = run_cli(capsys, "config", "get", "project")
    assert (r.code, r.out) == (0, "key-project\n")
    said = [line for line in r.err.splitlines() if not line.startswith("(key file:")]
    assert said == ([] if name == "NONE" else [
        f"warning: {gcloud / 'active_config'} names the gcloud configuration 'prdo', which does not exist "
        f"({gcloud / 'configurations' / 'config_prdo'}): gcloud reads it as empty, and so does ftcli "
        "hint: `gcloud config configurations list` names yours (here: prod); `gcloud config configurations activate "
        "NAME` makes one of them the active one"])


def test_a_project_google_s_libraries_read_is_not_labelled_gcloud(capsys, monkeypatch, isolated):
    # A key file's project_id read "gcloud: project_id of KEY (GOOGLE_APPLICATION_CREDENTIALS)", and
    # GOOGLE_CLOUD_PROJECT "gcloud: GOOGLE_CLOUD_PROJECT": the user looked in a gcloud configuration that had no project
    monkeypatch.setenv("COLUMNS", "80")
    key = isolated / "key.json"
    key.write_text('{"type": "service_account", "project_id": "key-project", "client_email": "a@b.com"}')
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    r = run_cli(capsys, "config", "list")
    assert r.code == 0, r.err
    header, *lines = r.out.splitlines()
    column = header.index("SOURCE")  # the project's source, wrapped in its column
    source = [line[column:].strip() for line in lines[:[x.split(" ")[0] for x in lines].index("region")]]
    assert source[0].startswith("key file:")
    assert "".join(source).replace(" ", "") == f"keyfile:{key}(GOOGLE_APPLICATION_CREDENTIALS)"
    assert all(len(line.rstrip()) <= 80 for line in r.out.splitlines())
    r = run_cli(capsys, "config", "get", "project")
    assert (r.out, r.err) == ("key-project\n", f"(key file: {key} (GOOGLE_APPLICATION_CREDENTIALS))\n")
    r = run_cli(capsys, "config", "get", "project", "--json")
    assert json.loads(r.out) == {"key": "project", "value": "key-project", "source": "adc",
                                 "origin": f"project_id of {key} (GOOGLE_APPLICATION_CREDENTIALS)"}
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "env-project")
    r = run_cli(capsys, "config", "list")
    (line,) = [line for line in r.out.splitlines() if line.startswith("project")]
    assert line.split(None, 2)[1:] == ["env-project", "env: GOOGLE_CLOUD_PROJECT"]
    assert run_cli(capsys, "config", "get", "project").err == "(env: GOOGLE_CLOUD_PROJECT)\n"


def test_list_names_the_price_file_and_whether_it_is_there(capsys, monkeypatch, isolated):
    monkeypatch.delenv("FTCLI_PRICES", raising=False)  # the default place: beside the config file
    r = run_cli(capsys, "config", "list")
    assert (f"price file:  {isolated / 'prices.toml'}  (none: cost lines give no dollar amounts; FTCLI_PRICES moves "
            "it)") in r.err.splitlines()
    (isolated / "prices.toml").write_text('source = "s"\nread = 2026-11-02\n')
    r = run_cli(capsys, "config", "list")
    assert f"price file:  {isolated / 'prices.toml'}  (FTCLI_PRICES moves it)" in r.err.splitlines()
    monkeypatch.setenv("FTCLI_PRICES", str(isolated / "prices.toml"))
    r = run_cli(capsys, "config", "list")
    assert f"price file:  {isolated / 'prices.toml'}" in r.err.splitlines()


def test_list_warns_of_a_price_file_that_train_would_refuse(capsys, monkeypatch, isolated):
    # It named the file as if it were fine, while `ftcli train` stopped on it and `jobs list` warned of it.
    monkeypatch.delenv("FTCLI_PRICES", raising=False)
    (isolated / "prices.toml").write_text('source = "s"\n')
    r = run_cli(capsys, "config", "list")
    assert r.code == 0, r.err
    lines = r.err.splitlines()
    assert lines[lines.index(f"price file:  {isolated / 'prices.toml'}  (FTCLI_PRICES moves it)") + 1] == (
        f"warning: price file {isolated / 'prices.toml'}: needs read = YYYY-MM-DD: when the rates were read hint: "
        "see README 'What a job costs' for its format; FTCLI_PRICES names another file")
    (isolated / "prices.toml").write_text('source = "s"\nread = 2026-11-02\n')
    assert "warning: price file" not in run_cli(capsys, "config", "list").err


@pytest.mark.skipif(sys.platform != "linux", reason="XDG_CONFIG_HOME places the config file on Linux")
def test_list_names_the_variable_that_moves_each_file(capsys, monkeypatch, isolated):
    # The history and the model cache said "(FTCLI_STATE_DIR moves it)", "(FTCLI_CACHE_DIR moves it)"; the config
    # file, which a container without a writable home needs to move first, named no variable.
    monkeypatch.delenv("FTCLI_CONFIG")
    monkeypatch.delenv("FTCLI_PRICES", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(isolated / "xdg"))
    r = run_cli(capsys, "config", "list")
    assert r.code == 0, r.err
    assert f"config file: {isolated / 'xdg' / 'ftcli' / 'config.toml'}  (FTCLI_CONFIG moves it)" in r.err.splitlines()
    monkeypatch.setenv("FTCLI_CONFIG", str(isolated / "config.toml"))  # moved: the line is the path alone
    assert f"config file: {isolated / 'config.toml'}" in run_cli(capsys, "config", "list").err.splitlines()


def test_get_prints_the_value_and_says_when_it_is_unset(capsys, monkeypatch):
    r = run_cli(capsys, "config", "get", "project")
    assert r.code == 1 and r.out == ""
    error, hint = r.err.splitlines()  # said once: no warning before the error
    assert error == "error: project is not set" and hint.startswith("hint: set it with --project ID, FTCLI_PROJECT")
    r = run_cli(capsys, "config", "get", "project", "--json")
    assert r.code == 1 and json.loads(r.out) == {"key": "project", "value": None, "source": None, "origin": None}
    r = run_cli(capsys, "config", "get", "region")
    assert r.code == 0 and r.out == "us-central1\n" and "default" in r.err
    # named as the command takes it, however it was typed (it said "service_account is not set")
    for typed in ("service_account", "service-account"):
        r = run_cli(capsys, "config", "get", typed)
        assert r.code == 1 and r.err.splitlines()[0] == "error: service-account is not set"
    monkeypatch.setenv("FTCLI_PROJECT", "env-project")
    r = run_cli(capsys, "config", "get", "project", "--json")
    assert json.loads(r.out) == {"key": "project", "value": "env-project", "source": "env", "origin": "FTCLI_PROJECT"}


def test_list_says_which_value_would_be_refused_and_where_it_came_from(capsys, monkeypatch):
    monkeypatch.setenv("FTCLI_BUCKET", "my-bucket")
    r = run_cli(capsys, "config", "list")
    assert r.code == 0
    assert "FTCLI_BUCKET must be a gs:// URI (gs://BUCKET[/PREFIX]), got 'my-bucket': write gs://my-bucket" in r.err


def test_get_prints_a_value_every_command_would_refuse_and_says_so(capsys, monkeypatch, isolated):
    # `config get region` printed FTCLI_REGION=us-centrall1 as if it were fine; `config list` warned, get did not
    monkeypatch.setenv("FTCLI_REGION", "us-centrall1")
    for args in ([], ["--json"]):
        r = run_cli(capsys, "config", "get", "region", *args)
        assert r.code == 0 and "us-centrall1" in r.out
        assert ("warning: FTCLI_REGION: unknown Vertex AI region 'us-centrall1'; did you mean us-central1?"
                in r.err.splitlines())
    (isolated / "config.toml").write_text('project = "My-Project"\n')
    r = run_cli(capsys, "config", "get", "project")
    assert r.code == 0 and r.out == "My-Project\n"
    assert r.err.startswith(f"warning: project in {isolated / 'config.toml'}: 'My-Project' is not a valid project id")
    monkeypatch.delenv("FTCLI_REGION")
    r = run_cli(capsys, "config", "get", "region")  # a good value: no warning
    assert r.code == 0 and "warning" not in r.err


def test_a_bad_value_in_the_config_file_names_the_file(capsys, isolated):
    (isolated / "config.toml").write_text('region = "mars-north1"\nproject = "my-project"\n')
    r = run_cli(capsys, "jobs", "list")
    assert r.code == 2
    assert f"region in {isolated / 'config.toml'}: unknown Vertex AI region 'mars-north1'" in r.err


def test_set_keeps_the_files_comments_order_and_other_keys(capsys, isolated):
    # The file was rewritten from the known keys alone: comments, a table of the user's, and types were lost.
    (isolated / "config.toml").write_text('# my comment\nproject = "local-project"  # prod\nregion = "us-central1"\n\n'
                        '[extra]\nfoo = 1\n')
    assert run_cli(capsys, "config", "set", "region", "europe-west4").code == 0
    assert (isolated / "config.toml").read_text() == (
        '# my comment\nproject = "local-project"  # prod\nregion = "europe-west4"\n\n[extra]\nfoo = 1\n')
    assert run_cli(capsys, "config", "unset", "project").code == 0
    assert (isolated / "config.toml").read_text() == '# my comment\nregion = "europe-west4"\n\n[extra]\nfoo = 1\n'


@pytest.mark.parametrize("before, args, after", [
    (b'# mine\r\nproject = "my-project"   # prod\r\n\r\n[notes]\r\nx = 1\r\n', ["set", "region", "europe-west4"],
     b'# mine\r\nproject = "my-project"   # prod\r\nregion = "europe-west4"\r\n\r\n[notes]\r\nx = 1\r\n'),
    (b'project = "my-project"  # prod\r\nregion = "us-central1"', ["set", "region", "europe-west4"],
     b'project = "my-project"  # prod\r\nregion = "europe-west4"'),
    (b'# mine\r\nproject = "my-project"', ["set", "region", "europe-west4"],
     b'# mine\r\nproject = "my-project"\r\nregion = "europe-west4"\r\n'),
    (b'\xef\xbb\xbfregion = "us-central1"\r\n# end\r\n', ["unset", "region"], b'\xef\xbb\xbf# end\r\n'),
    ('\ufeff# mine\r\nregion = "us-central1"\r\n'.encode("utf-16-be"), ["set", "project", "my-project"],  # a mark
     '\ufeff# mine\r\nregion = "us-central1"\r\nproject = "my-project"\r\n'.encode("utf-16-be")),
    (b'# mine\nregion = "us-central1"\r\n', ["set", "project", "my-project"],  # mixed: its own kept, LF added
     b'# mine\nregion = "us-central1"\r\nproject = "my-project"\n')],
    ids=["crlf", "crlf-replaced", "crlf-no-last-break", "utf8-bom-unset", "utf16be-bom", "mixed"])
def test_set_and_unset_keep_the_files_line_breaks_and_encoding(capsys, isolated, before, args, after):
    # A config file written on Windows (CRLF; Notepad's or PowerShell's byte-order mark, PowerShell's UTF-16) came back
    # with the new line ending in a bare LF among CRLF ones, and without its mark: everything but the line set or
    # unset is now kept byte for byte.
    config = isolated / "config.toml"
    config.write_bytes(before)
    r = run_cli(capsys, "config", *args)
    assert r.code == 0, r.err
    assert config.read_bytes() == after


@pytest.mark.parametrize("before, after", [
    ('# my settings\nproject = "my-project"\n[prices]\nT4 = 0.35\n',
     '# my settings\nproject = "my-project"\nregion = "europe-west4"\n[prices]\nT4 = 0.35\n'),
    ('project = "my-project"\n\n# what I pay, read 2026-11-26\n[prices]\nT4 = 0.35\n',
     'project = "my-project"\nregion = "europe-west4"\n\n# what I pay, read 2026-11-26\n[prices]\nT4 = 0.35\n'),
    ('# my settings\n[notes]\nx = 1\n', '# my settings\nregion = "europe-west4"\n[notes]\nx = 1\n'),
    ('[[profiles]]\nname = "eu"\n', 'region = "europe-west4"\n[[profiles]]\nname = "eu"\n'),
    ('about = """\n[not a table]\n"""\n\n[notes]\nx = 1\n',
     'about = """\n[not a table]\n"""\nregion = "europe-west4"\n\n[notes]\nx = 1\n')],
    ids=["no-blank-line", "comment-over-table", "heading-comment", "array-of-tables", "multiline-string"])
def test_set_and_unset_keep_the_layout_of_a_file_with_tables(capsys, isolated, before, after):
    # A key set in a file with a table of its own below the settings came with a blank line before the table (tomlkit
    # adds one where there was none), which `config unset` left behind; and it went between the table and the
    # comment over it. It now goes after the file's last setting, and set then unset gives the file back byte for
    # byte.
    config = isolated / "config.toml"
    config.write_text(before)
    assert run_cli(capsys, "config", "set", "region", "europe-west4").code == 0
    assert config.read_text() == after
    assert run_cli(capsys, "config", "unset", "region").code == 0
    assert config.read_text() == before


def test_set_edits_the_file_a_linked_config_points_at_and_keeps_the_link(capsys, isolated):
    # Dotfiles kept in a repository and linked into place: the rename replaced the link with a copy, and the
    # repository's file silently stopped being the config.
    kept = isolated / "dotfiles" / "ftcli.toml"
    kept.parent.mkdir()
    kept.write_text('# mine\nproject = "p1"\n')
    (isolated / "config.toml").symlink_to(Path("dotfiles") / "ftcli.toml")
    assert run_cli(capsys, "config", "set", "region", "europe-west4").code == 0
    assert os.readlink(isolated / "config.toml") == str(Path("dotfiles") / "ftcli.toml")
    assert kept.read_text() == '# mine\nproject = "p1"\nregion = "europe-west4"\n'
    assert sorted(p.name for p in kept.parent.iterdir()) == ["ftcli.toml"]  # no temporary file left either


@pytest.mark.parametrize("key,value,needle", [
    ("project", "bad project!", "'bad project!' is not a valid project id"),
    ("project", "", "'' is not a valid project id"),
    ("service-account", "notanemail", "service-account must be a service account e-mail"),
    ("region", "us-centrall1", "did you mean us-central1"),
    ("bucket", "my-bucket", "must be a gs:// URI"),
    # an image, not a repository: every job's image would have been REPOSITORY/pytorch:TAG/pytorch/pytorch:TAG
    ("image-mirror", "us-central1-docker.pkg.dev/p/dockerhub/pytorch/pytorch:2.7.1", "(no image name)"),
    ("image-mirror", "mirror.gcr.io", "must be an Artifact Registry remote repository of Docker Hub"),
])
def test_set_refuses_a_value_every_command_would_refuse(capsys, isolated, key, value, needle):
    # A bad project or service account was saved, and then stopped every command, `jobs list` included.
    (isolated / "config.toml").write_text('project = "good-project"\n')
    r = run_cli(capsys, "config", "set", key, value)
    assert r.code == 2 and needle in r.err and "Traceback" not in r.err
    assert (isolated / "config.toml").read_text() == 'project = "good-project"\n'


def test_set_takes_a_bucket_with_the_region_field(capsys, isolated):
    # Found by hand: the README's `{region}` bucket (one staging bucket per region) could not be saved with
    # `config set`: "bucket name 'ml-{region}' may contain only lowercase letters, ...".
    r = run_cli(capsys, "config", "set", "bucket", "gs://ml-{region}/runs/")
    assert r.code == 0, r.err
    assert (isolated / "config.toml").read_text() == 'bucket = "gs://ml-{region}/runs"\n'
    r = run_cli(capsys, "config", "set", "bucket", "gs://ML-{region}")
    assert r.code == 2 and "bucket name 'ML-us-central1' may contain only lowercase letters" in r.err


def test_set_says_when_a_variable_wins_over_the_file(capsys, isolated, monkeypatch):
    monkeypatch.setenv("FTCLI_REGION", "asia-east1")
    r = run_cli(capsys, "config", "set", "region", "europe-west4")
    assert r.code == 0 and "FTCLI_REGION=asia-east1 is set, and wins over the config file" in r.err


def test_list_says_when_the_price_variable_names_no_file(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FTCLI_PRICES", str(tmp_path / "prices.tmol"))
    r = run_cli(capsys, "config", "list")
    assert r.code == 0 and "prices.tmol  (FTCLI_PRICES names no file: fix the path or unset it)" in r.err


def test_an_image_mirror_is_saved_without_its_trailing_slash_and_every_job_pulls_through_it(capsys, isolated,
                                                                                              monkeypatch):
    r = run_cli(capsys, "config", "set", "image-mirror", "europe-west4-docker.pkg.dev/my-proj/dockerhub/")
    assert r.code == 0, r.err
    assert (isolated / "config.toml").read_text() == 'image_mirror = "europe-west4-docker.pkg.dev/my-proj/dockerhub"\n'
    r = run_cli(capsys, "train", "--gpu", "B200", "--spot", "--project", "my-proj", "--bucket", "gs://bkt",
                "--region", "europe-west4", "--dry-run")
    assert r.code == 0, r.err
    spec = json.loads(r.out)["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    # the image that covers the GPU (B200: the CUDA 12.8 build), under the mirror's name
    assert spec["imageUri"] == ("europe-west4-docker.pkg.dev/my-proj/dockerhub/pytorch/pytorch:"
                                "2.7.1-cuda12.8-cudnn9-runtime")
    monkeypatch.setenv("FTCLI_IMAGE_MIRROR", "docker.io/library")
    r = run_cli(capsys, "train", "--project", "my-proj", "--bucket", "gs://bkt", "--dry-run")
    assert r.code == 2 and "FTCLI_IMAGE_MIRROR must be an Artifact Registry remote repository" in r.err


def test_unset_says_what_it_did_and_what_the_setting_is_now(capsys, monkeypatch, isolated):
    # Found by hand: `ftcli config unset region` printed nothing, whether the file had the key or not, and with
    # FTCLI_REGION set the user could not tell that the variable still gave the region.
    path = isolated / "config.toml"
    assert run_cli(capsys, "config", "set", "region", "europe-west4").code == 0
    r = run_cli(capsys, "config", "unset", "region")
    assert r.code == 0
    assert r.out == f"region unset  ({path})\n"
    assert r.err == "region is now us-central1 (ftcli's default)\n"
    assert path.read_text() == ""
    monkeypatch.setenv("FTCLI_REGION", "asia-east1")
    r = run_cli(capsys, "config", "unset", "region")
    assert r.code == 0 and r.out == ""
    assert r.err == (f"region is not in the config file {path}: nothing to unset\n"
                     "region is now asia-east1 (env: FTCLI_REGION)\n")
    r = run_cli(capsys, "config", "unset", "service-account")
    assert r.code == 0 and r.out == ""
    assert r.err == f"service-account is not in the config file {path}: nothing to unset\n"


@pytest.mark.skipif(sys.platform != "linux", reason="/proc, where no folder can be made, is Linux's")
def test_set_without_a_writable_home_names_the_config_file_and_the_variables(capsys, monkeypatch, isolated):
    """A container whose user has no home (HOME=/nonexistent): `config set` said "cannot use /nonexistent: No such
    file or directory" and "FTCLI_DEBUG=1 shows where it happened"; the config file and the FTCLI_* variables that
    need no file went unsaid. /proc takes no new folder, for root either."""
    monkeypatch.delenv("FTCLI_CONFIG")
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("HOME", "/proc/ftcli-no-home")
    r = run_cli(capsys, "config", "set", "region", "europe-west4")
    assert r.code == 1 and r.out == "" and "Traceback" not in r.err
    assert r.err.splitlines() == [
        "error: cannot save the config file /proc/ftcli-no-home/.config/ftcli/config.toml: No such file or directory "
        "(/proc/ftcli-no-home)",
        "hint: point FTCLI_CONFIG at a file in a writable folder, or set the setting's FTCLI_* variable instead "
        "(FTCLI_PROJECT, FTCLI_REGION, FTCLI_BUCKET, FTCLI_SERVICE_ACCOUNT, FTCLI_IMAGE_MIRROR)"]
    monkeypatch.setenv("FTCLI_REGION", "europe-west4")  # what the hint says works with no file at all
    r = run_cli(capsys, "config", "get", "region")
    assert r.code == 0 and r.out == "europe-west4\n"


@pytest.mark.parametrize("args,says", [
    (["set", "projet", "my-project"], ["error: unknown setting 'projet'; did you mean project?",
                                       "hint: ftcli config set project my-project"]),
    (["get", "service_acount"], ["error: unknown setting 'service_acount'; did you mean service-account?",
                                 "hint: ftcli config get service-account"]),
    (["get", "imag-mirror", "--json"], ["error: unknown setting 'imag-mirror'; did you mean image-mirror?",
                                        "hint: ftcli config get image-mirror --json"]),
    # (only the start of a name: `image` is as likely --image, the trainer image, which is no setting)
    (["set", "image", "pytorch/pytorch"], ["error: unknown setting 'image'; choose one of project, region, bucket, "
                                           "service-account, image-mirror"]),
    # `unset` says what `set` says: the key is unknown, the one meant, and the command to run instead
    (["unset", "regoin"], ["error: unknown setting 'regoin'; did you mean region?", "hint: ftcli config unset region"]),
    (["unset", "zone"], ["error: unknown setting 'zone'; choose one of project, region, bucket, service-account, "
                         "image-mirror"]),
    (["set", "location", "europe west4"], ["error: unknown setting 'location'; did you mean region?",
                                           "hint: ftcli config set region 'europe west4'"]),
])
def test_an_unknown_setting_says_which_was_meant(capsys, isolated, args, says):
    r = run_cli(capsys, "config", *args)
    assert (r.code, r.out, r.err.splitlines()) == (2, "", says)
    assert not (isolated / "config.toml").exists()


def test_a_key_ftcli_ignores_is_said_once_a_command_and_kept(capsys, isolated):
    # `team = "nlp"` or `zone = "europe-west4-a"` in the file changed nothing, without a word; `config set` reads the
    # file twice (to save, then to say what wins), and says it once.
    config = isolated / "config.toml"
    config.write_text('zone = "europe-west4-a"\n')
    warning = (f"warning: {config}: ftcli ignores the unknown key 'zone' hint: ftcli reads project, region, bucket, "
               "service_account, image_mirror; remove it with `ftcli config unset zone`, or make it a comment (#)")
    for args in (["set", "region", "europe-west4"], ["get", "region"]):
        r = run_cli(capsys, "config", *args)
        assert r.code == 0, r.err
        assert [line for line in r.err.splitlines() if line.startswith("warning")] == [warning]
    assert config.read_text() == 'zone = "europe-west4-a"\nregion = "europe-west4"\n'


@pytest.mark.parametrize("before, key, said, after", [
    (b'# mine\r\nzone = "europe-west4-a"  # old\r\nregion = "europe-west4"\r\n', "zone", "key 'zone'",
     b'# mine\r\nregion = "europe-west4"\r\n'),
    (b'\xef\xbb\xbfregion = "europe-west4"\nteam = "nlp"\n[notes]\nx = 1\n', "notes", "table [notes]",
     b'\xef\xbb\xbfregion = "europe-west4"\nteam = "nlp"\n'),
    ('\ufeffmy-key = 1\r\nregion = "europe-west4"\r\n'.encode("utf-16-le"), "my-key", "key 'my-key'",
     '\ufeffregion = "europe-west4"\r\n'.encode("utf-16-le")),
    # a misspelled setting, which every command refuses ("did you mean region?"), beside another one
    (b'regoin = "europe-west4"\nprojet = "p"\n', "regoin", "key 'regoin'", b'projet = "p"\n')],
    ids=["crlf-comments", "bom-table", "utf16", "misspelled"])
def test_unset_removes_a_key_ftcli_does_not_read(capsys, isolated, before, key, said, after):
    # Every command warned of `zone = ...` ("delete it"), but `ftcli config unset zone` refused it as an unknown
    # setting: the file had to be edited by hand. It is removed now, and the rest of the file kept byte for byte.
    config = isolated / "config.toml"
    config.write_bytes(before)
    r = run_cli(capsys, "config", "unset", key)
    assert (r.code, r.out, r.err) == (0, f"{said} removed  ({config})\n", "")
    assert config.read_bytes() == after
    # not in the file any more: refused as an unknown setting, as before, and the file left as it is
    r = run_cli(capsys, "config", "unset", key)
    assert r.code == 2 and r.err.startswith(f"error: unknown setting {key!r}")
    assert config.read_bytes() == after


@pytest.mark.parametrize("before, key, says, after", [
    ('# mine\nproject = "my-project"\nimage-mirror = "europe-docker.pkg.dev/my-project/dockerhub"  # pulls\n',
     "image-mirror", ["key 'image-mirror' removed"], '# mine\nproject = "my-project"\n'),
    ('service-account = "sa-trainer@my-project.iam.gserviceaccount.com"\nregion = "europe-west4"\n',
     "service_account", ["key 'service-account' removed"], 'region = "europe-west4"\n'),
    ('image_mirror = "europe-docker.pkg.dev/p-123456/a"\nimage-mirror = "europe-docker.pkg.dev/p-123456/b"\n',
     "image-mirror", ["key 'image-mirror' removed", "image-mirror unset"], "")],
    ids=["dash", "typed-underscore", "both"])
def test_unset_removes_the_setting_spelled_with_dashes_in_the_file(capsys, isolated, before, key, says, after):
    # A hand-written `image-mirror = ...` (ftcli writes image_mirror) is refused by every command ("did you mean
    # image_mirror?"), but `ftcli config unset image-mirror`, typed as the command spells the setting, was refused
    # with the same error, and the line had to be removed by hand. It is removed now, whichever spelling is typed.
    config = isolated / "config.toml"
    config.write_text(before)
    r = run_cli(capsys, "config", "unset", key)
    assert (r.code, r.out.splitlines(), r.err) == (0, [f"{x}  ({config})" for x in says], "")
    assert config.read_text() == after
    r = run_cli(capsys, "config", "get", key)
    assert (r.code, r.err.splitlines()[0]) == (1, f"error: {key.replace('_', '-')} is not set")


@pytest.mark.parametrize("before, key, says, after", [
    (b'# mine\r\nproject = "my-project"\r\n  "image-mirror" = "europe-docker.pkg.dev/p-123456/a"  # pulls\r\n'
     b'region = "europe-west4"\r\n[notes]\r\nx = 1\r\n', "image-mirror",
     "the config file's image-mirror line now reads image_mirror, the key ftcli reads there",
     b'# mine\r\nproject = "my-project"\r\n  image_mirror = "us-docker.pkg.dev/p-123456/b"  # pulls\r\n'
     b'region = "europe-west4"\r\n[notes]\r\nx = 1\r\n'),
    # a line of a multi-line string that reads like the key is not the key
    (b's = """\nimage-mirror = x\n"""\nimage-mirror = "europe-docker.pkg.dev/p-123456/a"\n', "image_mirror",
     "the config file's image-mirror line now reads image_mirror, the key ftcli reads there",
     b's = """\nimage-mirror = x\n"""\nimage_mirror = "us-docker.pkg.dev/p-123456/b"\n'),
    (b'image-mirror = "europe-docker.pkg.dev/p-123456/a"\nimage_mirror = "europe-docker.pkg.dev/p-123456/c"\n',
     "image-mirror", "removed the config file's image-mirror line: image_mirror holds the setting there",
     b'image_mirror = "us-docker.pkg.dev/p-123456/b"\n')],
    ids=["dash-crlf-quoted", "multiline-string", "both"])
def test_set_replaces_the_setting_spelled_with_dashes_in_the_file(capsys, isolated, before, key, says, after):
    # `ftcli config set image-mirror X`, where the file held `image-mirror = ...` (every command refuses it: "did you
    # mean image_mirror?"), was refused with "rename it in FILE", though that line is the very setting being set. The
    # line now takes the value and the key ftcli reads, where it was, and the rest of the file is kept byte for byte.
    config = isolated / "config.toml"
    config.write_bytes(before)
    r = run_cli(capsys, "config", "set", key, "us-docker.pkg.dev/p-123456/b")
    assert (r.code, r.out) == (0, f"{key} = us-docker.pkg.dev/p-123456/b  ({config})\n")
    assert says in r.err.splitlines()
    assert config.read_bytes() == after
    r = run_cli(capsys, "config", "get", "image-mirror")
    assert (r.code, r.out) == (0, "us-docker.pkg.dev/p-123456/b\n")


@pytest.mark.parametrize("value", ["true", '["europe-west4"]'])
def test_unset_and_set_mend_a_setting_of_the_wrong_type(capsys, isolated, value):
    # Every command refuses `region = true` ("region must be a string"), and so did `config unset region` and
    # `config set region X`, the commands that mend it: the line had to be edited by hand. Each replaces it now, and
    # keeps the rest of the file; a problem of another line is still refused, with the file left as it was.
    config = isolated / "config.toml"
    before = f'# mine\nproject = "my-project"\nregion = {value}  # old\n[notes]\nx = 1\n'
    config.write_text(before)
    r = run_cli(capsys, "config", "unset", "region")
    assert (r.code, r.out) == (0, f"region unset  ({config})\n")
    assert config.read_text() == '# mine\nproject = "my-project"\n[notes]\nx = 1\n'
    config.write_text(before)
    r = run_cli(capsys, "config", "set", "region", "europe-west4")
    assert (r.code, r.out) == (0, f"region = europe-west4  ({config})\n")
    assert config.read_text() == before.replace(f"region = {value}", 'region = "europe-west4"')
    broken = before.replace("# mine\n", "# mine\nbucket = 1.5\n")
    config.write_text(broken)
    for args in (["unset", "region"], ["set", "region", "europe-west4"]):
        r = run_cli(capsys, "config", *args)
        assert (r.code, r.out, r.err.splitlines()[0]) == (
            2, "", f"error: {config}: bucket must be a string, not a decimal number")
        assert config.read_text() == broken


@pytest.mark.parametrize("text", ['regoin = "europe-west4"\n', '[notes]\nx = 1\nregion = "europe-west4"\n'])
def test_set_leaves_a_refused_config_file_as_it_was(capsys, isolated, text):
    # A file every command refuses is not edited by `config set` (which could not say which region is meant): it is
    # left byte for byte, and nothing else is written beside it.
    config = isolated / "config.toml"
    config.write_text(text)
    r = run_cli(capsys, "config", "set", "region", "asia-east1")
    assert r.code == 2 and r.out == "" and r.err.startswith(f"error: {config}: ")
    assert config.read_text() == text and sorted(p.name for p in isolated.iterdir()) == ["config.toml"]


def test_the_config_files_settings_reach_the_created_job_and_flags_win_over_them(capsys, cloud_env, monkeypatch):
    """What `config set` saves is what `ftcli train` sends Vertex (the emulated JobService receives the request), and
    each flag wins over its saved value. The other CLI tests set FTCLI_* variables only."""
    gcs, vertex = cloud_env
    for var in ("FTCLI_PROJECT", "FTCLI_BUCKET"):
        monkeypatch.delenv(var)
    gcs.create_bucket("ftcli-file", "EUROPE-WEST4")  # Vertex wants the staging bucket in the job's region
    saved = {"project": "file-project", "region": "europe-west4", "bucket": "gs://ftcli-file/runs",
             "service-account": "trainer@file-project.iam.gserviceaccount.com"}
    for key, value in saved.items():
        assert run_cli(capsys, "config", "set", key, value).code == 0

    def created(*flags: str):
        vertex.requests.clear()
        r = run_cli(capsys, "train", "--detach", "--json", "--epochs", "1", "--task", "imdb", "--gpu", "T4", *flags)
        assert r.code == 0, r.err
        (request,) = [req for method, req in vertex.requests if method == "CreateCustomJob"]
        spec = request.custom_job.job_spec
        return request.parent, spec.base_output_directory.output_uri_prefix, spec.service_account

    parent, output, account = created()
    assert parent == "projects/file-project/locations/europe-west4"
    assert output.startswith("gs://ftcli-file/runs/ftcli/runs/")
    assert account == "trainer@file-project.iam.gserviceaccount.com"

    parent, output, account = created("--project", "flag-project", "--region", "us-central1", "--bucket",
                                      "gs://ftcli-test/team", "--service-account",
                                      "runner@flag-project.iam.gserviceaccount.com")
    assert parent == "projects/flag-project/locations/us-central1"
    assert output.startswith("gs://ftcli-test/team/ftcli/runs/")
    assert account == "runner@flag-project.iam.gserviceaccount.com"
    assert run_cli(capsys, "config", "get", "region").out == "europe-west4\n"  # a flag changes nothing saved


def test_a_tilde_in_the_path_variables_is_the_home_folder_not_a_folder_named_tilde(capsys, monkeypatch, tmp_path):
    # Found by hand: FTCLI_CONFIG="~/x/config.toml" (a Dockerfile's ENV, a .env file: no shell expands the ~) made
    # ./~/x/config.toml in the folder the command ran from; run from elsewhere, ftcli did not find it.
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    for var, value in (("FTCLI_CONFIG", "~/cfg/config.toml"), ("FTCLI_STATE_DIR", "~/state"),
                       ("FTCLI_CACHE_DIR", "~/cache"), ("FTCLI_PRICES", "~/cfg/prices.toml")):
        monkeypatch.setenv(var, value)
    r = run_cli(capsys, "config", "set", "region", "europe-west4")
    assert r.code == 0 and r.out == f"region = europe-west4  ({home / 'cfg' / 'config.toml'})\n"
    assert (home / "cfg" / "config.toml").read_text() == 'region = "europe-west4"\n'
    r = run_cli(capsys, "config", "list")
    for line in (f"config file: {home / 'cfg' / 'config.toml'}", f"price file:  {home / 'cfg' / 'prices.toml'}",
                 f"history:     {home / 'state'}", f"model cache: {home / 'cache' / 'models'}"):
        assert line in r.err, line
    assert list(work.iterdir()) == []
    monkeypatch.setenv("FTCLI_CONFIG", "relative.toml")  # named as the absolute file it is
    r = run_cli(capsys, "config", "set", "region", "europe-west4")
    assert r.code == 0 and r.out == f"region = europe-west4  ({work / 'relative.toml'})\n"


@pytest.mark.parametrize("args,says", [
    (["region=europe-west4"], ["error: missing argument 'VALUE'",
                               "hint: a space, not '=': ftcli config set region europe-west4"]),
    (["project", "my-project", "region", "europe-west4"],
     ["error: got unexpected extra argument(s) (region europe-west4)",
      "hint: one setting at a time: run `ftcli config set KEY VALUE` once for each"]),
])
def test_set_typed_as_other_tools_take_it_says_how_to_type_it(capsys, isolated, args, says):
    # `config set region=europe-west4` (git's and .env's KEY=VALUE) said only "missing argument 'value'" and "see
    # ftcli config set -h"; two settings at once, "got unexpected extra argument(s)"
    r = run_cli(capsys, "config", "set", *args)
    assert (r.code, r.out, r.err.splitlines()) == (2, "", says)
    assert not (isolated / "config.toml").exists()


def test_list_without_a_bucket_says_nothing_is_wrong(capsys, monkeypatch):
    # `config list` reads as `jobs list` does: a bucket (needed only to submit) that is not set is no problem
    monkeypatch.setenv("FTCLI_PROJECT", "my-project")
    r = run_cli(capsys, "config", "list", "--json")
    assert r.code == 0 and rows(r.out)["bucket"]["value"] is None
    assert not [line for line in r.err.splitlines() if line.startswith("warning:")], r.err


def test_unset_of_a_key_not_in_a_refused_file_says_only_the_refusal(capsys, isolated):
    # The file is refused before anything is said: "region is not in the config file" above the error sent the user
    # looking for a region line, where the misspelled key was what to fix.
    config = isolated / "config.toml"
    config.write_text('regoin = "europe-west4"\n')
    r = run_cli(capsys, "config", "unset", "region")
    assert (r.code, r.out, r.err.splitlines()) == (2, "", [
        f"error: {config}: unknown key 'regoin'; did you mean region?",
        f"hint: rename it in {config} (ftcli reads project, region, bucket, service_account, image_mirror, at the top "
        "of the file)"])
    assert config.read_text() == 'regoin = "europe-west4"\n'


def test_set_with_a_key_and_an_equals_sign_only_is_not_told_to_set_an_empty_value(capsys, isolated):
    # `config set region=` has no value to move after a space: the usual pointer to -h, not `config set region ''`
    r = run_cli(capsys, "config", "set", "region=")
    error, hint = r.err.splitlines()
    assert (r.code, error) == (2, "error: missing argument 'VALUE'")
    assert hint.startswith("hint: see ") and hint.endswith("config set -h"), hint
