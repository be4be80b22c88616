"""`--help` of every command renders, at any width, and keeps its bracketed hints (env variables, defaults)."""

from __future__ import annotations

import pytest
import typer.main
from typer.testing import CliRunner

from ftcli.cli.app import app
from tests.cli.helpers import run_cli


def _commands(cmd, path: tuple[str, ...] = ()):
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):  # typer vendors click: duck-type groups
        yield from _commands(sub, (*path, name))


ROOT = typer.main.get_command(app)
ALL = list(_commands(ROOT))


def test_the_tree_has_every_command():
    names = {" ".join(p) for p, _ in ALL}
    assert {"train", "logs", "local", "download", "predict", "jobs list", "jobs describe", "jobs cancel",
            "config set", "config get", "config list"} <= names


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=lambda p: " ".join(p) or "ftcli")
def test_help_renders(path, width, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    for flag in ("--help", "-h"):
        r = CliRunner().invoke(app, [*path, flag], prog_name="ftcli", terminal_width=width)
        assert r.exit_code == 0, r.output
        assert "Usage: ftcli" in r.output
        # Rich markup would have eaten "[/PREFIX]" (a crash) or "[env FTCLI_PROJECT, ...]" (silently)
        assert "\\[" not in r.output


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("width", [80, 120])
def test_bracketed_hints_are_visible(width):
    r = CliRunner().invoke(app, ["train", "--help"], prog_name="ftcli", terminal_width=width)
    text = _flat(r.output)
    for hint in ("[env FTCLI_PROJECT", "[env FTCLI_REGION", "gs://BUCKET[/PREFIX] [env FTCLI_BUCKET",
                 "[env FTCLI_SERVICE_ACCOUNT", "[default: the task's]"):
        assert hint in text, hint


def test_the_project_flags_help_names_every_place_a_project_comes_from():
    # "[env FTCLI_PROJECT, config, gcloud]": GOOGLE_CLOUD_PROJECT and a service account's key file, which CI often
    # gives alone, went unsaid (settings.effective reads both; `config list` names them)
    r = CliRunner().invoke(app, ["config", "list", "--help"], prog_name="ftcli", terminal_width=120)
    assert "Google Cloud project [env FTCLI_PROJECT, config, GOOGLE_CLOUD_PROJECT, gcloud, key file]." in _flat(
        r.output)


@pytest.mark.parametrize("command", ["train", "tune", "local"])
def test_every_trainer_switch_that_is_on_by_default_says_so(command):
    # --gpu-warmup, --weight-copies and --fused-projections are on unless --no-NAME, and -h gave no default for them
    from ftcli_trainer.config import OPTIONS

    text = _flat(CliRunner().invoke(app, [command, "--help"], prog_name="ftcli", terminal_width=120).output)
    on = [o.flag for o in OPTIONS if o.type is bool and o.default]
    assert on, "no switch is on by default"
    for flag in on:
        assert f"{flag} / --no-{flag[2:]}" in text and f"[default: {flag}]" in text, flag


READ_COMMANDS = ["jobs list", "jobs describe", "jobs cancel", "config list", "config get", "download", "local", "logs",
                 "predict"]


@pytest.mark.parametrize("path", READ_COMMANDS)
def test_every_read_command_takes_json(path):
    r = CliRunner().invoke(app, [*path.split(), "--help"], prog_name="ftcli", terminal_width=120)
    assert "--json" in r.output


def test_shell_completion_is_offered_and_completes():
    r = CliRunner().invoke(app, ["--help"], prog_name="ftcli")
    assert "--install-completion" in r.output and "--show-completion" in r.output
    # What the installed bash script runs on TAB (the shell itself is detected from the process tree, so the
    # test asks the completion entry point directly).
    env = {"_FTCLI_COMPLETE": "complete_bash", "COMP_WORDS": "ftcli jobs li", "COMP_CWORD": "2"}
    r = CliRunner().invoke(app, [], prog_name="ftcli", env=env)
    assert r.exit_code == 0 and r.output.split() == ["list"]


@pytest.mark.parametrize("flag", ["--install-completion", "--show-completion"])
def test_a_shell_name_after_a_completion_flag_is_refused_not_ignored(capsys, monkeypatch, tmp_path, flag):
    # `ftcli --install-completion zsh` typed in bash wrote bash completion and a line in ~/.bashrc, said "bash
    # completion installed" and exited 0: Typer detects the shell and takes no name
    monkeypatch.setenv("HOME", str(tmp_path))
    r = run_cli(capsys, flag, "zsh")
    assert (r.code, r.out) == (2, "")
    assert r.err.splitlines() == [f"error: {flag} takes no shell name ('zsh'): it sets up the shell it is run from; "
                                  f"run `ftcli {flag}` in zsh"]
    assert list(tmp_path.iterdir()) == []


LEAVES = [p for p, c in ALL if not hasattr(c, "commands")]
GROUPS = [p for p, c in ALL if hasattr(c, "commands")]


def _examples(path: tuple[str, ...]) -> list[str]:
    """The commands of the Example/Examples section of `ftcli PATH -h` (each one's first line, as shown)."""
    r = CliRunner().invoke(app, [*path, "-h"], prog_name="ftcli", terminal_width=200)
    assert r.exit_code == 0, r.output
    description = r.output.split("\n\nArguments:\n")[0].split("\n\nOptions:\n")[0]
    lines = [line.strip() for line in description.splitlines()]
    if "Examples:" in lines:
        return [line for line in lines[lines.index("Examples:") + 1:] if line.startswith("ftcli ")]
    return [line.removeprefix("Example: ") for line in lines if line.startswith("Example: ftcli ")]


@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=lambda p: " ".join(p) or "ftcli")
def test_every_command_and_group_shows_examples(path):
    # README: "Every command takes -h/--help (with examples)"; `ftcli jobs -h` and `ftcli config -h` had none. Found
    # from the app, so a command or group added without examples fails here.
    examples = _examples(path)
    assert examples, f"ftcli {' '.join(path)} -h shows no Example/Examples section"
    assert examples[0].startswith(" ".join(["ftcli", *path, ""])), examples


@pytest.mark.parametrize("path", [p for p in GROUPS if p], ids=" ".join)
def test_a_groups_examples_are_its_commands_own(path):
    # so they run as the commands' tests run them, and do not drift from them
    own = {line for p in LEAVES if p[:len(path)] == path for line in _examples(p)}
    assert set(_examples(path)) <= own


def _dry_run_examples():
    import shlex

    for _, cmd in ALL:
        for line in (cmd.help or "").splitlines():
            if line.strip().startswith("ftcli ") and "--dry-run" in line:
                yield shlex.split(line.strip().split("  (")[0])[1:]  # without a trailing "   (what it shows)"


@pytest.mark.parametrize("args", list(_dry_run_examples()), ids=" ".join)
def test_the_dry_run_examples_in_the_help_run_as_written(args, capsys, monkeypatch, tmp_path):
    # `ftcli train --help` once showed --train-file gs://b/train.csv, which every command refuses (a bucket name
    # has 3 to 63 characters).
    from tests.cli.helpers import run_cli

    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("FTCLI_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setenv("FTCLI_PROJECT", "my-project")
    monkeypatch.setenv("FTCLI_BUCKET", "gs://my-bucket")
    r = run_cli(capsys, *args)
    assert r.code == 0, r.err


def test_the_config_examples_in_the_help_run_as_written_in_order(capsys, monkeypatch, tmp_path):
    # Each saves, reads or forgets a setting offline: set's examples are what a new user types first
    import shlex

    # (the commands' own: `ftcli config -h` repeats some of them, test_a_groups_examples_are_its_commands_own)
    lines = [line.strip().removeprefix("Example:").strip() for path, cmd in ALL if path[:1] == ("config",)
             and len(path) == 2 for line in (cmd.help or "").splitlines()]
    examples = [shlex.split(line)[1:] for line in lines if line.startswith("ftcli config ")]
    assert [a[:2] for a in examples] == [["config", "get"], ["config", "list"], ["config", "set"], ["config", "set"],
                                         ["config", "unset"]]
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("FTCLI_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    for var in ("FTCLI_PROJECT", "FTCLI_REGION", "FTCLI_BUCKET", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT",
                "CLOUDSDK_CORE_PROJECT", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(var, raising=False)
    sets = [a for a in examples if a[1] == "set"]
    for args in [*sets, *(a for a in examples if a[1] != "set")]:  # get and unset after set
        r = run_cli(capsys, *args)
        assert r.code == 0, (args, r.err)
    assert [line.split(" = ")[0] for line in (tmp_path / "config.toml").read_text().splitlines()] == [
        a[2] for a in sets]


def test_logs_help_lists_every_severity_it_takes():
    # `--severity NOTICE` was taken (and named in the error for a wrong level) but missing from the help's list.
    from ftcli.follow import SEVERITIES

    r = CliRunner().invoke(app, ["logs", "--help"], prog_name="ftcli", terminal_width=200)
    assert f"Only lines at or above {', '.join(SEVERITIES)}." in _flat(r.output)


USAGE = {  # as the README and the help's examples write them
    "logs": "JOB", "download": "JOB [DIR]", "predict": "MODEL_DIR_OR_JOB [TEXT]...",
    "evaluate": "MODEL_DIR_OR_JOB FILE", "report": "RUN_DIR_OR_JOB", "jobs describe": "JOB", "jobs cancel": "JOB",
    "config set": "KEY VALUE", "config get": "KEY", "config unset": "KEY",
}


@pytest.mark.parametrize("path", LEAVES, ids=" ".join)
def test_every_usage_line_names_its_arguments_as_the_readme_does(path):
    # Typer 0.29 wrote `Usage: ftcli predict [OPTIONS] {model} [texts]...` and listed `model <str>`,
    # `texts... <list[str]>` under Arguments; the README says `ftcli predict MODEL_DIR_OR_JOB "text"`
    r = CliRunner().invoke(app, [*path, "-h"], prog_name="ftcli", terminal_width=200)
    usage = r.output.splitlines()[0]
    assert usage == " ".join(["Usage: ftcli", *path, "[OPTIONS]", *filter(None, [USAGE.get(" ".join(path))])])
    arguments = r.output.split("Arguments:\n")[1].split("\n\n")[0] if "Arguments:\n" in r.output else ""
    assert "{" not in usage and "<" not in arguments
    listed = [line.split()[0] for line in arguments.splitlines() if line[:3].strip()]  # not a wrapped help line
    words = USAGE.get(" ".join(path), "").split()
    assert listed == [w.strip("[].") + ("..." if w.endswith("...") else "") for w in words]


def test_a_missing_argument_is_named_as_the_usage_line_names_it(capsys):
    r = run_cli(capsys, "evaluate", "model-dir")
    assert (r.code, r.err.splitlines()[0]) == (2, "error: missing argument 'FILE'")


@pytest.mark.parametrize("command,several", [("train", True), ("tune", False)])
def test_gpu_and_region_help_say_only_what_the_command_takes(command, several):
    # `ftcli tune -h` offered "Several in order (L4,T4), ftcli train only", which tune refuses; `ftcli train -h` did
    # not say that --region takes a list too
    text = _flat(CliRunner().invoke(app, [command, "-h"], prog_name="ftcli", terminal_width=120).output)
    gpu = ("--gpu GPU GPU[xCOUNT]: T4, V100, P100, P4, L4, A100, A100-80GB, RTX-PRO-6000, H100, H100-MEGA, H200, B200 "
           "(e.g. L4x2), or none for a CPU machine.")
    region = "--region REGION Vertex AI region [env FTCLI_REGION, config, gcloud; default us-central1]"
    assert gpu in text and region in text
    if several:
        assert text.split(gpu)[1].startswith(" Several in order (L4,T4): the next when the machines cannot be had. "
                                             "[default: T4]")
        assert text.split(region)[1].startswith(". Several in order (us-central1,europe-west4): the next when the "
                                                "machines cannot be had; each needs its own staging bucket ({region} "
                                                "in --bucket).")
    else:
        assert text.split(gpu)[1].startswith(" [default: T4]") and text.split(region)[1].startswith(". ")
        assert "L4,T4" not in text and "Several" not in text


@pytest.mark.parametrize("path", LEAVES, ids=" ".join)
def test_no_option_shows_a_python_type_for_its_value(path):
    # Typer 0.29 showed `--project <str>`, `--limit <int range>`, `--file <path>`, and `--pair <list[str]>` for an
    # option given once per text; a closed choice keeps its list (`--precision <auto|fp32|bf16|fp16>`)
    import re

    r = CliRunner().invoke(app, [*path, "-h"], prog_name="ftcli", terminal_width=200)
    shown = re.findall(r"^  (--[a-z-]+) (\S+)", r.output, flags=re.MULTILINE)
    for flag, value in shown:
        assert not value.startswith("<") or "|" in value, (flag, value)
        assert not re.search(r"\b(str|int|float|path|list)\b", value), (flag, value)


def test_an_option_given_once_per_value_names_one_value():
    text = CliRunner().invoke(app, ["predict", "-h"], prog_name="ftcli", terminal_width=200).output
    assert "  --pair TEXT " in text and "  --threshold P " in text and "  --project ID " in text
    text = CliRunner().invoke(app, ["train", "-h"], prog_name="ftcli", terminal_width=200).output
    assert "  --labels KEY=VALUE " in text and "  --timeout DURATION " in text


def test_the_readme_command_table_names_every_command_as_its_usage_line_does():
    # The table left out `ftcli tune` and `ftcli config`; a command's arguments there are its usage line's
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2] / "README.md"
    table = readme.read_text(encoding="utf-8").split("```\n", 2)[1]
    words = {line.split()[1] for line in table.splitlines() if line.startswith("ftcli ")}
    assert {" ".join(p[:1]) for p in LEAVES} <= words
    for path, arguments in USAGE.items():
        if " " not in path:  # (jobs and config share a line: `ftcli jobs list | describe JOB | cancel JOB`)
            assert f"ftcli {path} {arguments.split()[0]}" in table, path


def test_flex_start_help_names_every_gpu_it_takes():
    # Walking through the README: `--flex-start` took A100-80GB (a2-ultragpu) but its help (and the README) listed
    # "L4, A100, H100, H200, B200" only.
    import re

    from ftcli.catalog import FLEX_START_GPUS

    text = _flat(CliRunner().invoke(app, ["train", "-h"], prog_name="ftcli", terminal_width=200).output)
    listed = re.search(r"--flex-start Queue for the machines with Dynamic Workload Scheduler \(([^;]+);", text)
    assert listed and set(listed[1].split(", ")) == FLEX_START_GPUS


JOB_TAKERS = [p for p, c in ALL if any((getattr(a, "metavar", None) or "").endswith("JOB") for a in c.params)]


def test_the_commands_that_take_a_job_are_found():
    assert {" ".join(p) for p in JOB_TAKERS} == {"logs", "download", "predict", "evaluate", "report", "jobs describe",
                                                 "jobs cancel"}


def _job_forms(path: tuple[str, ...]) -> str | None:
    """What `ftcli PATH -h` lists as the forms its job argument takes ("... a job: FORMS. [required]")."""
    import re

    r = CliRunner().invoke(app, [*path, "-h"], prog_name="ftcli", terminal_width=200)
    m = re.search(r"\bjob: (.*?)\. \[required\]", _flat(r.output.split("Arguments:\n")[1].split("\n\n")[0]), re.I)
    return m[1] if m else None


@pytest.mark.parametrize("path", JOB_TAKERS, ids=" ".join)
def test_every_job_argument_names_every_form_a_job_is_given_in(path):
    # The README and history.resolve take a job's console URL (as `ftcli train` prints it); no -h said so, and
    # predict, evaluate and report named fewer forms than logs (no display name either). One list says them all.
    forms = _job_forms(path)
    assert forms is not None and "console URL" in forms and "display name" in forms, forms
    assert forms == _job_forms(("logs",))
    # a tuning job's resource name, which the README says each of them takes (and does: tests/cli/test_jobs.py
    # test_every_command_that_takes_a_job_takes_a_tuning_job_in_every_form), was in no -h
    assert "projects/P/locations/R/hyperparameterTuningJobs/ID" in forms, forms


def test_the_readme_says_the_forms_of_a_job_the_help_says():
    # The README said a tuning job is taken by its short id or resource name only, and its console URL "as ftcli
    # train prints it" (-h the same): `ftcli tune` prints a tuning job's, and its numeric id, console URL and display
    # name are taken as well (test_jobs.py: test_every_command_that_takes_a_job_takes_a_tuning_job_in_every_form).
    from pathlib import Path

    from ftcli.values import JOB_FORMS, JobName, TuningName

    readme = Path(__file__).resolve().parents[2] / "README.md"
    paragraph = _flat(readme.read_text(encoding="utf-8").split("`JOB` is a short id", 1)[1].split("\n\n", 1)[0])
    for name in (JobName("P", "R", "ID"), TuningName("P", "R", "ID")):
        assert f"`{name}`" in paragraph and str(name) in JOB_FORMS
    assert "console URL (as `ftcli train` or `ftcli tune` prints it" in paragraph
    assert "console URL (as ftcli train or tune prints it)" in JOB_FORMS
    assert "A tuning job (`ftcli tune`'s) is taken in every one of these forms" in paragraph
