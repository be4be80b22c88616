import pytest

from ftcli import history
from ftcli.errors import UsageError

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


def test_unknown_references_say_what_to_use():
    with pytest.raises(UsageError, match="no jobs submitted"):
        history.resolve("last")
    with pytest.raises(UsageError, match="no job #7"):
        history.resolve("7")
    with pytest.raises(UsageError, match="is not a job reference"):
        history.resolve("abc")


def test_torn_line_is_skipped(tmp_path):
    history.record(NAME.format(1), "a")
    with open(tmp_path / "history.jsonl", "a") as f:
        f.write('{"n": 2, "na')
    assert history.resolve("last") == NAME.format(1)
    assert history.record(NAME.format(3), "c") == 2
