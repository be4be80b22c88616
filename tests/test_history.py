import json
import os
import subprocess
import sys
import time

import pytest

from ftcli import history
from ftcli.errors import FtcliError, UsageError

NAME = "projects/p/locations/us-central1/customJobs/{}"


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path))


def test_short_ids_last_numeric_and_full_names():
    assert history.record(NAME.format(111111111), "a") == 1
    assert history.record(NAME.format(222222222), "b") == 2
    assert history.resolve("1") == NAME.format(111111111)
    assert history.resolve("last") == NAME.format(222222222)
    assert history.resolve(NAME.format(5)) == NAME.format(5)
    full = "projects/p/locations/europe-west4/customJobs/1234567890"
    assert history.resolve("1234567890", "p", "europe-west4") == full
    assert history.short_id(NAME.format(222222222)) == 2
    assert history.job_id(NAME.format(42)) == "42"
    # the edge between the two, in one place (history, jobs.resolve and predict/report's folder check use it)
    assert history.resolve("123456789", "p", "europe-west4") == "projects/p/locations/europe-west4/customJobs/123456789"
    with pytest.raises(UsageError, match="no job #12345678 in this machine's history"):
        history.resolve("12345678", "p", "europe-west4")


def test_the_console_urls_ftcli_prints_are_job_references():
    from ftcli.values import JobName, TuningName

    job = JobName.parse("projects/my-p/locations/us-east1/customJobs/123456789012")
    tuning = TuningName.parse("projects/my-p/locations/europe-west4/hyperparameterTuningJobs/987654321")
    # Google's SDK's address, which it prints for either kind of job (google-cloud-aiplatform 2.7.0)
    assert job.console_url == ("https://console.cloud.google.com/agent-platform/locations/us-east1/training/"
                               "123456789012?project=my-p")
    assert tuning.console_url == ("https://console.cloud.google.com/agent-platform/locations/europe-west4/training/"
                                  "987654321?project=my-p")
    assert history.resolve(job.console_url) == job.full
    # The address names no kind: a tuning job this machine submitted is one by its history (jobs.resolve_any asks
    # Vertex about the others)
    assert history.resolve(tuning.console_url) == "projects/my-p/locations/europe-west4/customJobs/987654321"
    history.record(tuning.full, "study")
    assert history.resolve(tuning.console_url) == tuning.full
    # The addresses earlier ftcli's printed, whose page says the kind
    for name, page in ((job, "cpu"), (tuning, "hyperparameter-tuning-trials")):
        old = f"https://console.cloud.google.com/vertex-ai/locations/{name.region}/training/{name.id}/{page}?project=my-p"
        assert history.resolve(old) == name.full
    assert history.resolve("https://console.cloud.google.com/vertex-ai/locations/us-east1/training/5?authuser=1&"
                           "project=my-p") == "projects/my-p/locations/us-east1/customJobs/5"


@pytest.mark.parametrize("path", ["agent-platform", "ai/platform"])
def test_the_console_urls_googles_sdk_prints_are_job_references(path):
    # google-cloud-aiplatform prints "View Custom Job: https://console.cloud.google.com/agent-platform/locations/R/
    # training/ID?project=P" (/ai/platform/ before 2.x's rename): "not a job reference"
    url = f"https://console.cloud.google.com/{path}/locations/us-east1/training/123456789012?project=my-p"
    assert history.resolve(url) == "projects/my-p/locations/us-east1/customJobs/123456789012"
    with pytest.raises(UsageError, match=r"is not a job's console URL: it has no project \(\?project=PROJECT\)$"):
        history.resolve(url.split("?")[0])


def test_a_malformed_resource_name_is_said_as_one():
    # it was "no such folder, and not a job reference", from commands (logs) that take no folder
    with pytest.raises(UsageError, match=r"is not a job's resource name: its ID 'abc' is not all digits$") as info:
        history.resolve("projects/P/locations/R/customJobs/abc")
    assert "projects/P/locations/R/customJobs/ID" in info.value.hint
    with pytest.raises(UsageError, match=r"'trainingPipelines' is not customJobs or hyperparameterTuningJobs$"):
        history.resolve("projects/P/locations/R/trainingPipelines/1")
    with pytest.raises(UsageError, match=r": it is not projects/PROJECT/locations/REGION/COLLECTION/ID$"):
        history.resolve("projects/P/R/customJobs/1")


def test_a_reference_that_is_no_job_is_told_every_form_the_help_says():
    # The hints listed the forms by hand, without the console URL that -h and the README name (nor, in the folder
    # commands' hint, the display name): a user who pasted a slightly wrong URL was not told that URLs work.
    from ftcli.cli.options import JOB_FORMS

    for ref, folder_too in (("abc", False), ("TYPO", True), ("projects/P/locations/R/customJobs/abc", False)):
        with pytest.raises(UsageError) as info:
            history.resolve(ref, folder_too=folder_too)
        assert info.value.hint.endswith(f"give a job as: {JOB_FORMS}"), info.value.hint
    assert "console URL" in JOB_FORMS and "display name" in JOB_FORMS


@pytest.mark.parametrize(("url", "lacks"), [
    ("https://console.cloud.google.com/vertex-ai/locations/us-east1/training/5/cpu", "project (?project=PROJECT)"),
    ("https://console.cloud.google.com/vertex-ai/locations/us-east1/training/5/cpu?authuser=1", "project "
     "(?project=PROJECT)"),
    ("https://console.cloud.google.com/vertex-ai/training/custom-jobs?project=p",  # the list's page, not a job's
     "region (/locations/REGION/) and no job id (/training/ID/, all digits)"),
    ("https://console.cloud.google.com/vertex-ai/locations/us-east1/training/cpu?project=p",
     "job id (/training/ID/, all digits)"),
    ("console.cloud.google.com/vertex-ai/locations/us-east1/training/5/cpu?project=p", "https:// at its start"),
])
def test_a_console_url_that_names_no_job_says_what_it_lacks(url, lacks):
    # It was "not a job reference", with a hint that did not name console URLs, for an address one part short.
    with pytest.raises(UsageError) as info:
        history.resolve(url)
    assert info.value.message == f"{url!r} is not a job's console URL: it has no {lacks}"
    assert info.value.hint == ("a job's page is https://console.cloud.google.com/agent-platform/locations/REGION/"
                               "training/ID?project=PROJECT, as ftcli train and ftcli jobs describe show it")
    with pytest.raises(UsageError) as folder:  # predict and report: not "no such folder"
        history.resolve(url, folder_too=True)
    assert folder.value.message == info.value.message


def test_a_display_name_of_a_job_from_this_machine_names_it():
    # Found by hand: `ftcli logs ftcli-csv-20261128-065633-3d46`, the name `ftcli train` printed, was "not a job
    # reference".
    history.record(NAME.format(111111111), "ftcli-csv-20261128-065633-3d46")
    history.record(NAME.format(222222222), "twice")
    history.record(NAME.format(333333333), "twice")
    assert history.resolve("ftcli-csv-20261128-065633-3d46") == NAME.format(111111111)
    with pytest.raises(UsageError, match="2 jobs submitted from this machine are named 'twice'") as info:
        history.resolve("twice")
    assert info.value.hint == "give one's short id: #2, #3"
    with pytest.raises(UsageError, match="is not a job reference") as info:
        history.resolve("ftcli-csv-20261128-065633-3d47")
    assert "display name of a job submitted from this machine" in info.value.hint


def test_extra_fields_are_kept():
    history.record(NAME.format(1), "a", project="p", region="us-central1", base_output_dir="gs://b/x/")
    (e,) = history.entries()
    assert e == {"n": 1, "name": NAME.format(1), "display_name": "a", "project": "p", "region": "us-central1",
                 "base_output_dir": "gs://b/x/"}


def test_unknown_references_say_what_to_use():
    with pytest.raises(UsageError, match="no jobs submitted"):
        history.resolve("last")
    with pytest.raises(UsageError, match="no job #7"):
        history.resolve("7")
    with pytest.raises(UsageError, match="is not a job reference"):
        history.resolve("abc")
    # predict and report take a folder too: a mistyped one was called "not a job reference" (with no "/" in it
    # still so: `ftcli report TYPO`), and a file given for a folder was "no such folder"
    with pytest.raises(UsageError, match=r"'./nope/run': no such folder, and not a job reference"):
        history.resolve("./nope/run", folder_too=True)
    with pytest.raises(UsageError, match=r"^'TYPO': no such folder, and not a job reference"):
        history.resolve("TYPO", folder_too=True)
    with pytest.raises(UsageError, match=r"^'.*test_history.py' is a file, not a folder, and not a job reference"):
        history.resolve(__file__, folder_too=True)
    with pytest.raises(UsageError, match=r"^'./nope/run' is not a job reference"):  # logs, download: no folder
        history.resolve("./nope/run")


RECORD_30 = """
import sys, time
from ftcli import history
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # both start writing at the same moment
for i in range(30):
    history.record(f"projects/p/locations/r/customJobs/{sys.argv[1]}{i:03d}", "x")
"""


def test_concurrent_processes_never_share_a_short_id(tmp_path):
    env = {**os.environ, "FTCLI_STATE_DIR": str(tmp_path)}
    start = str(time.time() + 3)
    procs = [subprocess.Popen([sys.executable, "-c", RECORD_30, str(k), start], env=env, stderr=subprocess.PIPE,
                              text=True) for k in (1, 2)]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    got = history.entries()
    assert len(got) == 60
    assert sorted(e["n"] for e in got) == list(range(1, 61))
    assert len({e["name"] for e in got}) == 60


CRASH_MID_WRITE = """
import os, sqlite3, sys
from ftcli import history
history.record("projects/p/locations/r/customJobs/1", "a")
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
db.execute("INSERT INTO jobs (n, name, display_name) VALUES (2, 'projects/p/locations/r/customJobs/2', 'torn')")
os._exit(9)  # dies mid-transaction, holding the write lock
"""


def test_a_crash_mid_write_loses_only_that_record(tmp_path):
    env = {**os.environ, "FTCLI_STATE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", CRASH_MID_WRITE, str(history.db_path())], env=env)
    assert r.returncode == 9
    assert [e["n"] for e in history.entries()] == [1]
    assert history.record(NAME.format(3), "c") == 2
    assert history.resolve("2") == NAME.format(3)


def test_old_jsonl_history_is_migrated_once_keeping_its_numbers(tmp_path):
    old = tmp_path / "history.jsonl"
    lines = [json.dumps({"n": 1, "name": NAME.format(11), "display_name": "a"}),
             "[1, 2]",  # valid JSON, not an object: used to crash `ftcli logs`
             '"just a string"',
             json.dumps({"n": 5, "name": NAME.format(55), "display_name": "e", "project": "p"}),
             json.dumps({"n": 5, "name": NAME.format(56), "display_name": "dup"}),  # the old race's duplicate
             json.dumps({"n": "x", "name": 3}),
             '{"n": 6, "na']  # torn by a crash, no newline
    old.write_text("\n".join(lines))
    before = old.read_bytes()
    assert history.resolve("1") == NAME.format(11)
    assert history.resolve("5") == NAME.format(55)  # the first #5 keeps its number, as `ftcli logs 5` meant
    assert history.short_id(NAME.format(56)) == 6  # the duplicate gets a fresh number instead of sharing one
    assert history.record(NAME.format(77), "new") == 7  # not swallowed by the torn line
    assert history.resolve("last") == NAME.format(77)
    assert old.read_bytes() == before  # the old file is left as it was
    old.write_text(json.dumps({"n": 9, "name": NAME.format(99), "display_name": "later"}) + "\n")
    assert history.short_id(NAME.format(99)) is None  # migrated once, not on every start


def test_ensure_writable_fails_early_with_one_line(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("FTCLI_STATE_DIR", str(blocker / "state"))
    with pytest.raises(FtcliError) as e:
        history.ensure_writable()
    assert "cannot write ftcli's job history" in e.value.message and str(blocker / "state") in e.value.message
    assert "FTCLI_STATE_DIR" in e.value.hint


def test_ensure_writable_refuses_a_database_that_is_a_folder(tmp_path):
    history.db_path().mkdir()
    with pytest.raises(FtcliError, match="cannot write ftcli's job history"):
        history.ensure_writable()


def test_ensure_writable_passes_and_creates_nothing_but_the_database(tmp_path):
    history.ensure_writable()
    assert history.entries() == []
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(history.db_path().name)) == []


def test_a_record_that_cannot_be_saved_still_names_the_job(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("FTCLI_STATE_DIR", str(blocker / "state"))
    with pytest.raises(FtcliError) as e:
        history.record(NAME.format(123456789), "a", project="p", region="us-central1")
    assert NAME.format(123456789) in e.value.message and "was created" in e.value.message
    assert "ftcli logs 123456789 --project p --region us-central1" in e.value.hint


def test_a_tuning_record_that_cannot_be_saved_still_names_the_job(tmp_path, monkeypatch):
    # ftcli tune records its tuning job's name: the hint took the id through JobName.parse, which raised ValueError
    # for a hyperparameterTuningJobs name, so the user got a traceback instead of the job that had been created
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("FTCLI_STATE_DIR", str(blocker / "state"))
    name = "projects/p/locations/us-central1/hyperparameterTuningJobs/123456789"
    with pytest.raises(FtcliError) as e:
        history.record(name, "a", project="p", region="us-central1", kind="tune")
    assert name in e.value.message and "was created" in e.value.message
    assert "ftcli logs 123456789 --project p --region us-central1" in e.value.hint


def test_a_folder_named_like_a_job_reference_names_the_job_it_shadows(tmp_path, monkeypatch):
    # predict/report on a folder named `last` or `3`: the note said to give "projects/P/locations/R/customJobs/ID",
    # which names no job when the one meant is a tuning job
    monkeypatch.chdir(tmp_path)
    (tmp_path / "last").mkdir()
    (tmp_path / "1").mkdir()
    assert history.folder_over_job("last") == ("'last' is a folder here, so that folder is used; for a job, give its "
                                               "numeric id or resource name (ftcli jobs list)")
    tuning = "projects/p/locations/us-central1/hyperparameterTuningJobs/7100000000000000001"
    history.record(tuning, "study")
    for ref in ("last", "1"):
        assert history.folder_over_job(ref) == f"'{ref}' is a folder here, so that folder is used; for job #1, give " \
                                               f"{tuning}"
    assert history.folder_over_job("./1") is None
