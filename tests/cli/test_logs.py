"""`ftcli logs` against the Logging and JobService emulators: complete, ordered, once, and ends with the job."""

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import zoneinfo

import grpc
import pytest

from ftcli.cli.watch import timing_from_env
from tests.cli.helpers import read_until, run_cli, wait_for_child

REPLICAS = ["workerpool0-0", "workerpool1-0", "workerpool1-1"]
# How long a test gives an `ftcli logs` it starts to open its tail: 20 s was not always enough on a busy machine (the
# child not yet past its imports: 6 runs in 25 of the Ctrl-C tests below, beside four busy processes on the 2-core VM
# that others' tests shared, 2026-11-29)
STARTING_S = 120


def a_tail_opens(logs) -> None:
    """The `ftcli logs` a test started has opened its tail (it fails the test if none has in STARTING_S)."""
    assert logs.wait_for_tails(1, timeout=STARTING_S), f"no tail in {STARTING_S} s"


@pytest.fixture
def logs_env(cloud_env, cloud_logging, monkeypatch, capsys):
    gcs, vertex = cloud_env
    monkeypatch.setenv("FTCLI_LOGGING_ENDPOINT", cloud_logging.endpoint)
    monkeypatch.setenv("FTCLI_LOGS_INTERVAL", "0.1")
    monkeypatch.setattr(cloud_logging, "project", "test-project")  # entries belong to the job's project
    r = run_cli(capsys, "train", "--detach", "--json", "--task", "imdb", "--gpu", "T4", "--replicas", "3")
    assert r.code == 0, r.err
    job = json.loads(r.out)
    vertex.set_state(job["name"], "RUNNING")
    return vertex, cloud_logging, job


class Background(threading.Thread):
    """`fn` in a daemon thread. Should it fail, every job in `vertex` ends FAILED, so that a CLI following one
    returns instead of waiting forever (a producer that died once left a full test run hanging), and join() raises
    its error."""

    def __init__(self, fn, vertex):
        super().__init__(daemon=True)
        self.fn, self.vertex, self.error = fn, vertex, None

    def run(self):
        try:
            self.fn()
        except BaseException as e:  # noqa: BLE001 - handed to join()
            self.error = e
            if self.vertex is not None:
                for name in self.vertex.jobs:
                    self.vertex.set_state(name, "FAILED", "the test's background producer failed")

    def join(self, timeout=None):
        super().join(timeout)
        if self.error is not None:
            raise self.error


def in_background(fn, vertex=None):
    t = Background(fn, vertex)
    t.start()
    return t


def run_while(capsys, produce, vertex, *args: str):
    """`ftcli ARGS` run here while `produce` (writing lines, changing the job's state) runs beside it."""
    writer = in_background(produce, vertex)
    r = run_cli(capsys, *args)
    writer.join()
    return r


def _stopped(proc, reader) -> None:
    """The `ftcli logs` child killed if it is still there, and its reader ended."""
    if proc.poll() is None:
        proc.kill()
    reader.join(timeout=10)


def json_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def logs_while(capsys, vertex, produce, *args):
    """`ftcli logs ARGS --json` while `produce` writes in the background: (the result, the lines' texts); the
    command must end well."""
    r = run_while(capsys, produce, vertex, "logs", *args, "--json")
    assert r.code == 0, r.err
    return r, [x["text"] for x in json_lines(r.out) if "text" in x]


def write_many(logs, job_id, n, start, pause_every=200, pause=0.05):
    for i in range(n):
        ts = start + dt.timedelta(milliseconds=10 * i)
        logs.write_line(job_id, REPLICAS[i % 3], f"line {i:05d}", timestamp=ts, insert_id=f"id-{i}")
        if i % pause_every == pause_every - 1:
            time.sleep(pause)


def test_thousands_of_lines_complete_in_order_then_exit_0(capsys, logs_env):
    vertex, logs, job = logs_env
    start = dt.datetime.now(dt.UTC)

    def produce():
        assert logs.wait_for_tails(1, timeout=10)
        write_many(logs, job["id"], 3000, start)
        time.sleep(0.5)
        vertex.set_state(job["name"], "SUCCEEDED")

    r = run_while(capsys, produce, vertex, "logs", "1", "--json")
    assert r.code == 0, r.err
    lines = [x for x in json_lines(r.out) if "text" in x]
    assert [x["text"] for x in lines] == [f"line {i:05d}" for i in range(3000)]
    assert {x["replica"] for x in lines} == set(REPLICAS)
    states = [x["state"] for x in json_lines(r.out) if x.get("event") == "state"]
    assert states == ["RUNNING", "SUCCEEDED"]
    assert f'resource.type="ml_job" AND resource.labels.job_id="{job["id"]}"' in logs.filters[0]


def test_cut_streams_and_late_lines_lose_nothing_repeat_nothing(capsys, logs_env):
    vertex, logs, job = logs_env
    logs.cut_streams_after(300)
    start = dt.datetime.now(dt.UTC)

    def produce():
        assert logs.wait_for_tails(1, timeout=10)
        write_many(logs, job["id"], 1500, start, pause_every=150, pause=0.4)
        time.sleep(1.0)  # the reader has printed past `start` by now
        logs.write_line(job["id"], "workerpool0-0", "late line", timestamp=start - dt.timedelta(seconds=20),
                        insert_id="late")
        time.sleep(0.5)
        vertex.set_state(job["name"], "SUCCEEDED")

    _, texts = logs_while(capsys, vertex, produce, "last")
    assert sorted(t for t in texts if t != "late line") == [f"line {i:05d}" for i in range(1500)]
    assert texts.count("late line") == 1
    assert logs.tails_opened >= 3  # the stream really was cut and re-opened, more than once


def test_a_running_job_shows_what_it_logged_before_ftcli_logs_attached_first(capsys, logs_env):
    # A tail sends only what is written after it opens: lines logged before `ftcli logs` attached came at the end,
    # out of order, or (more than 30 s older than the newest) never.
    vertex, logs, job = logs_env
    start = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    for i in range(300):
        logs.write_line(job["id"], REPLICAS[i % 3], f"old {i:03d}", timestamp=start + dt.timedelta(seconds=i / 2),
                        insert_id=f"old-{i}")

    def produce():
        assert logs.wait_for_tails(1, timeout=10)
        for i in range(50):
            logs.write_line(job["id"], REPLICAS[i % 3], f"new {i:03d}", insert_id=f"new-{i}")
            time.sleep(0.01)
        time.sleep(0.5)
        vertex.set_state(job["name"], "SUCCEEDED")

    _, texts = logs_while(capsys, vertex, produce, "last")
    assert texts == [f"old {i:03d}" for i in range(300)] + [f"new {i:03d}" for i in range(50)]
    # its live tail is closed once it has returned, not left to the server's end of the stream (10 a project)
    assert logs.wait_for_tails(0, timeout=5)


def test_no_follow_reads_every_page_of_a_long_log_in_order(capsys, logs_env):
    # Each page is an entries.list request of its own (60 a minute per project): 2,500 lines are 3 pages of 1,000,
    # each asked for with the token of the one before and the same filter, oldest first.
    vertex, logs, job = logs_env
    start = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    for i in reversed(range(2500)):  # written newest first: the order is the timestamps'
        at = start + dt.timedelta(milliseconds=10 * i)
        logs.write_line(job["id"], REPLICAS[i % 3], f"line {i:05d}", timestamp=at, insert_id=f"id-{i}")
    r = run_cli(capsys, "logs", "1", "--no-follow", "--json")
    assert r.code == 0, r.err
    assert [x["text"] for x in json_lines(r.out) if "text" in x] == [f"line {i:05d}" for i in range(2500)]
    pages = logs.calls("ListLogEntries")
    assert [(p.page_token, p.page_size, p.order_by) for p in pages] == [
        ("", 1000, "timestamp asc"), ("1000", 1000, "timestamp asc"), ("2000", 1000, "timestamp asc")]
    assert len({p.filter for p in pages}) == 1


@pytest.mark.parametrize("state,code", [("FAILED", 3), ("CANCELLED", 4)])
def test_failed_and_cancelled_jobs_exit_non_zero_with_a_summary(capsys, logs_env, state, code):
    vertex, logs, job = logs_env

    def produce():
        assert logs.wait_for_tails(1, timeout=10)
        logs.write_line(job["id"], "workerpool0-0", "step 10/100 | loss 0.5")
        logs.write_line(job["id"], "workerpool0-0", "error: data.csv has no column 'text'", severity="ERROR")
        time.sleep(0.5)
        vertex.set_state(job["name"], state, "The replica workerpool0-0 exited with a non-zero status of 2."
                         if state == "FAILED" else None)

    r = run_while(capsys, produce, vertex, "logs", "1")
    assert r.code == code, r.err
    assert "step 10/100 | loss 0.5" in r.out
    assert f"job 1 {state}" in r.err
    if state == "CANCELLED":  # Vertex's error of a cancelled job (code CANCELLED, "CANCELED") is not said again
        assert "job 1 CANCELLED" in r.err.splitlines() and "CANCELED" not in r.err, r.err
    if state == "FAILED":
        assert "exited with a non-zero status of 2" in r.err
        assert "last lines of workerpool0-0" in r.err and "has no column 'text'" in r.err.split("last lines")[1]


def test_stderr_lines_are_not_errors_unless_they_say_so(capsys, logs_env):
    vertex, logs, job = logs_env

    def produce():
        assert logs.wait_for_tails(1, timeout=10)
        logs.write_line(job["id"], "workerpool0-0", "Downloading: 100%", severity="ERROR")  # plain stderr
        logs.write_line(job["id"], "workerpool0-0", "10%|#   | 1/10\r50%|#####| 5/10\r100%|#####| 10/10",
                        severity="ERROR")
        logs.write_line(job["id"], "workerpool0-0", "WARNING: something odd", severity="ERROR")
        logs.write_line(job["id"], "workerpool0-0", "Traceback (most recent call last):", severity="ERROR")
        time.sleep(0.3)
        vertex.set_state(job["name"], "SUCCEEDED")

    r = run_while(capsys, produce, vertex, "logs", "1", "--json")
    got = [(x["text"], x["severity"]) for x in json_lines(r.out) if "text" in x]
    assert got == [("Downloading: 100%", "INFO"), ("100%|#####| 10/10", "INFO"),
                   ("WARNING: something odd", "WARNING"), ("Traceback (most recent call last):", "ERROR")]


def test_a_line_cloud_logging_holds_as_a_warning_is_shown_as_one(capsys, logs_env):
    # Found by hand: Cloud Logging's severity reached the follower as a number ("400"), never as WARNING, so a line
    # logged at WARNING (a structured log line's own level) was shown as plain output, listed or tailed.
    vertex, logs, job = logs_env
    logs.write_line(job["id"], "workerpool0-0", "disk 95% full", severity="WARNING")

    def produce():
        assert logs.wait_for_tails(1, timeout=10)
        logs.write_line(job["id"], "workerpool0-0", "eval set is tiny", severity="WARNING")
        logs.write_line(job["id"], "workerpool0-0", "lost the GPU", severity="CRITICAL")
        time.sleep(0.3)
        vertex.set_state(job["name"], "SUCCEEDED")

    r = run_while(capsys, produce, vertex, "logs", "1", "--json")
    got = [(x["text"], x["severity"]) for x in json_lines(r.out) if "text" in x]
    assert got == [("disk 95% full", "WARNING"), ("eval set is tiny", "WARNING"), ("lost the GPU", "CRITICAL")]


def test_polling_fallback_when_tail_is_unavailable(capsys, logs_env):
    vertex, logs, job = logs_env
    logs.tail_unavailable = True
    start = dt.datetime.now(dt.UTC)

    def produce():
        write_many(logs, job["id"], 500, start, pause_every=100)
        time.sleep(0.8)
        vertex.set_state(job["name"], "SUCCEEDED")

    r = run_while(capsys, produce, vertex, "logs", "1", "--json")
    assert r.code == 0
    texts = [x["text"] for x in json_lines(r.out) if "text" in x]
    assert texts == [f"line {i:05d}" for i in range(500)]
    # It said nothing, and the lines came in batches with no word of why: said once, as a note (no warning, no JSON
    # event: the logs are there), with how often they are read.
    every = timing_from_env().poll_interval
    said = [x for x in r.err.splitlines() if "live tail" in x]
    assert len(said) == 1 and said[0].startswith("live tailing is not available here (")
    assert said[0].endswith(f"); reading the logs every {every:g} s instead, so lines come in batches")
    assert not [x for x in json_lines(r.out) if "event" in x and x["event"] != "state"]


def test_no_follow_and_filters(capsys, logs_env):
    vertex, logs, job = logs_env
    logs.write_line(job["id"], "workerpool0-0", "chief says hi")
    logs.write_line(job["id"], "workerpool1-0", "worker warns", severity="WARNING")
    r = run_cli(capsys, "logs", "1", "--no-follow", "--replica", "workerpool1-0", "--severity", "warning",
                "--since", "10m")
    assert r.code == 0, r.err
    assert "worker warns" in r.out and "chief says hi" not in r.out
    f = logs.filters[-1]
    # --severity is applied to the level each line is shown at, not by Cloud Logging (see the test below)
    assert 'resource.labels.task_name="workerpool1-0"' in f and "severity" not in f and 'timestamp>="' in f
    assert job["name"] in vertex.jobs and vertex.job(job["name"]).state.name == "JOB_STATE_RUNNING"


def test_severity_keeps_the_lines_at_the_level_they_are_shown_at(capsys, logs_env):
    # Found by hand (README walk-through): `ftcli logs 1 --no-follow --severity WARNING` against the emulators showed
    # none of the trainer's `warning: ...` lines, which `ftcli logs` itself shows at WARNING. Vertex files a job's
    # stdout as INFO and its stderr as ERROR, and the trainer logs its warnings on stdout: Cloud Logging's own
    # severity filter dropped them, and let every stderr line through (a download bar shown as INFO).
    vertex, logs, job = logs_env
    logs.write_line(job["id"], "workerpool0-0", "step 1/8 | loss 0.69")  # stdout: INFO
    logs.write_line(job["id"], "workerpool0-0", "warning: the eval set has 3 rows")  # stdout: INFO in Cloud Logging
    logs.write_line(job["id"], "workerpool0-0", "Downloading: 100%", severity="ERROR")  # stderr chatter
    logs.write_line(job["id"], "workerpool0-0", "error: data.csv line 7 has no label", severity="ERROR")
    r = run_cli(capsys, "logs", "1", "--no-follow", "--severity", "WARNING", "--json")
    assert r.code == 0, r.err
    got = [(x["text"], x["severity"]) for x in json_lines(r.out) if "text" in x]
    assert got == [("warning: the eval set has 3 rows", "WARNING"), ("error: data.csv line 7 has no label", "ERROR")]
    r = run_cli(capsys, "logs", "1", "--no-follow", "--severity", "ERROR")
    assert len(r.out.splitlines()) == 1 and r.out.rstrip().endswith("error: data.csv line 7 has no label")


def test_severity_error_keeps_the_trainers_hint_under_its_error(capsys, logs_env):
    # The trainer says its error's fix on a `hint:` line of its own, on stderr (filed as ERROR) with the error: it was
    # shown as plain output (INFO), so `--severity ERROR` showed the error without it
    vertex, logs, job = logs_env
    logs.write_line(job["id"], "workerpool0-0", "step 1/8 | loss 0.69")
    logs.write_line(job["id"], "workerpool0-0", "error: data.csv has no column 'body' (columns: text, label)",
                    severity="ERROR")
    logs.write_line(job["id"], "workerpool0-0", "hint: pass --text-column NAME", severity="ERROR")
    logs.write_line(job["id"], "workerpool0-0", "hint: a stdout line that says so is output")
    r = run_cli(capsys, "logs", "1", "--no-follow", "--severity", "ERROR", "--json")
    assert r.code == 0, r.err
    assert [(x["text"], x["severity"]) for x in json_lines(r.out) if "text" in x] == [
        ("error: data.csv has no column 'body' (columns: text, label)", "ERROR"),
        ("hint: pass --text-column NAME", "ERROR")]


def test_a_wrong_severity_says_which_was_meant_before_any_job_is_looked_up(capsys, monkeypatch, tmp_path):
    # `--severity warn` was checked only after the job was looked up (a wrong job id said that instead), with no
    # word of WARNING
    monkeypatch.setenv("FTCLI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("FTCLI_VERTEX_ENDPOINT", "127.0.0.1:9")  # nothing listens: no call may be made
    r = run_cli(capsys, "logs", "3", "--severity", "warn", "--project", "my-project")
    assert (r.code, r.out) == (2, "")
    # "..., CRITICAL, got 'warn'" read as one more choice: said as every closed choice is ("; got")
    assert r.err.splitlines() == ["error: --severity must be one of DEBUG, INFO, NOTICE, WARNING, ERROR, CRITICAL; "
                                  "got 'warn': did you mean WARNING?"]


@pytest.fixture
def paris_time(monkeypatch):
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_since_takes_a_time_without_offset_as_the_lines_are_shown_in_this_machines_zone(capsys, logs_env,
                                                                                         paris_time):
    # Found by hand: with TZ=Europe/Paris the lines showed 17:39:33 (local time) but `--since 2026-11-27T17:39:33`,
    # copied from them, was read as UTC, an hour after the lines: the ones in that hour never came out.
    vertex, logs, job = logs_env
    created = vertex.job(job["name"]).create_time.replace(microsecond=0)
    early, late = created + dt.timedelta(seconds=1), created + dt.timedelta(seconds=14)
    logs.write_line(job["id"], "workerpool0-0", "before", timestamp=early)
    logs.write_line(job["id"], "workerpool0-0", "step 8", timestamp=late)
    vertex.set_state(job["name"], "SUCCEEDED")
    paris = late.astimezone(zoneinfo.ZoneInfo("Europe/Paris"))
    shown = paris.strftime("%H:%M:%S")
    r = run_cli(capsys, "logs", "1", "--no-follow")
    assert r.code == 0, r.err
    assert r.out.splitlines() == [early.astimezone(paris.tzinfo).strftime("%H:%M:%S workerpool0-0 before"),
                                  f"{shown} workerpool0-0 step 8"]
    r = run_cli(capsys, "logs", "1", "--no-follow", "--since", paris.replace(tzinfo=None).isoformat())
    assert r.code == 0, r.err
    assert r.out.splitlines() == [f"{shown} workerpool0-0 step 8"]
    assert f'timestamp>="{late.strftime("%Y-%m-%dT%H:%M:%S")}.000000Z"' in logs.filters[-1]
    # a time with its offset is taken as it says
    r = run_cli(capsys, "logs", "1", "--no-follow", "--since", late.isoformat())
    assert r.code == 0 and r.out.splitlines() == [f"{shown} workerpool0-0 step 8"], r.err


@pytest.mark.parametrize(("since", "ago"), [("90s", dt.timedelta(seconds=90)), ("10m", dt.timedelta(minutes=10)),
                                          ("2h", dt.timedelta(hours=2)), (" 1d ", dt.timedelta(days=1))])
def test_since_a_duration_is_that_long_before_now(since, ago):
    from ftcli.cli.logs import parse_since

    before = dt.datetime.now(dt.UTC)
    got = parse_since(since)
    assert before - ago - dt.timedelta(seconds=0.5) <= got <= dt.datetime.now(dt.UTC) - ago


def test_the_log_reads_start_at_the_jobs_creation_not_the_projects_whole_retention(capsys, logs_env):
    # Without --since the list had no timestamp bound: entries.list scanned every entry the project keeps.
    import datetime as dt
    import re

    vertex, logs, job = logs_env
    logs.write_line(job["id"], "workerpool0-0", "chief says hi")
    r = run_cli(capsys, "logs", "1", "--no-follow")
    assert r.code == 0 and "chief says hi" in r.out, r.err
    (bound,) = re.findall(r'timestamp>="([^"]+)"', logs.filters[-1])
    created = vertex.job(job["name"]).create_time
    assert dt.datetime.fromisoformat(bound) == created - dt.timedelta(minutes=10)


def test_no_follow_of_a_failed_job_says_so_and_exits_3(capsys, logs_env):
    # Found by hand: `ftcli logs 2 --no-follow` on a FAILED job exited 0 and never said it had failed.
    vertex, logs, job = logs_env
    logs.write_line(job["id"], "workerpool0-0", "error: cannot load the tokenizer", severity="ERROR")
    vertex.set_state(job["name"], "FAILED", "The replica workerpool0-0 exited with a non-zero status of 2.")
    r = run_cli(capsys, "logs", "1", "--no-follow")
    assert r.code == 3, r.err
    assert "error: cannot load the tokenizer" in r.out
    assert "job 1 FAILED: The replica workerpool0-0 exited with a non-zero status of 2." in r.err
    r = run_cli(capsys, "logs", "1", "--no-follow", "--json")
    assert r.code == 3
    assert json_lines(r.out)[-1] == {"event": "state", "state": "FAILED",
                                     "error": "The replica workerpool0-0 exited with a non-zero status of 2."}


def test_no_follow_retries_a_passing_503_and_a_used_up_read_quota(capsys, logs_env):
    # Found by hand: one 503 from ListLogEntries made `ftcli logs 1 --no-follow` exit 1 ("cannot reach Cloud
    # Logging"): ftcli turned off the retry Google's client does on UNAVAILABLE, and nothing retried it later.
    vertex, logs, job = logs_env
    for i in range(5):
        logs.write_line(job["id"], "workerpool0-0", f"line {i}", insert_id=f"id-{i}")
    logs.fail_next("ListLogEntries", grpc.StatusCode.UNAVAILABLE, times=2, message="The service is unavailable.")
    r = run_cli(capsys, "logs", "1", "--no-follow")
    assert r.code == 0, r.err
    assert [line.split(" ", 2)[2] for line in r.out.splitlines()] == [f"line {i}" for i in range(5)]
    assert r.err.count("Cloud Logging did not answer ListLogEntries (503 ServiceUnavailable); retrying") == 2
    # A page after the first fails on the per-minute read quota: that page is asked for again, not the first.
    from ftcli.gcp.cloud_logging import LoggingGateway

    said: list[str] = []
    pages = LoggingGateway("test-project", notify=said.append).list(f'resource.labels.job_id="{job["id"]}"',
                                                                    page_size=2, patience=5.0)
    got = [next(pages).text, next(pages).text]  # the first page
    before = len(logs.calls("ListLogEntries"))
    logs.fail_next("ListLogEntries", grpc.StatusCode.RESOURCE_EXHAUSTED, times=1, message="Quota exceeded")
    got += [e.text for e in pages]
    assert got == [f"line {i}" for i in range(5)]
    assert len(logs.calls("ListLogEntries")) - before == 3  # pages 2 (twice) and 3
    assert said == ["Cloud Logging's read quota is used up (60 log reads a minute per project); retrying"]
    logs.fail_next("ListLogEntries", grpc.StatusCode.UNAVAILABLE, times=1000)
    started = time.monotonic()
    r = run_cli(capsys, "logs", "1", "--no-follow")  # FTCLI_LOGS_INTERVAL=0.1: it gives up after 6 s
    assert r.code == 1 and "error: cannot reach Cloud Logging" in r.err and time.monotonic() - started < 15


@pytest.mark.parametrize(("sig", "status"), [
    (signal.SIGINT, 130),
    # A CI runner cancelling the step, `docker stop` or a cron timeout (SIGTERM), a closed terminal (SIGHUP): they
    # killed the follower without a word (`ftcli train` follows by default), the job running on, unnamed in the log.
    (signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_ctrl_c_detaches_and_leaves_the_job_running(logs_env, sig, status):
    vertex, logs, job = logs_env
    env = {**os.environ}
    proc = subprocess.Popen([sys.executable, "-c", "from ftcli.cli.app import main; main()", "logs", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:  # a child left running would keep its tail open, and the next test's wait for one tail would never end
        wait_for_child(proc, lambda: a_tail_opens(logs),
                       lambda: f"tails open: {logs.active_tails}, opened: {logs.tails_opened}")
        logs.write_line(job["id"], "workerpool0-0", "still training")
        # the signal once the line is printed: a second's sleep was not always enough on a busy machine
        printed: list[str] = []
        wait_for_child(proc, lambda: printed.append(read_until(proc, "still training")))
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
        out = printed[0] + out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == status, err
    assert "Traceback" not in err and err.splitlines()[-1] == (
        "detached; the job keeps running. Re-attach: ftcli logs 1   cancel: ftcli jobs cancel 1")
    assert "still training" in out
    assert "detached; the job keeps running" in err and "ftcli jobs cancel 1" in err
    assert vertex.job(job["name"]).state.name == "JOB_STATE_RUNNING"
    assert not [m for m, _ in vertex.requests if m == "CancelCustomJob"]


DETACHED = "detached; the job keeps running. Re-attach: ftcli logs 1   cancel: ftcli jobs cancel 1"


def test_a_detached_json_stream_is_whole_lines_without_a_closing_object(logs_env):
    """`logs --json` detached by Ctrl-C prints no object of its own: the job runs on as it would have without ftcli,
    so nothing is left for a script to act on, and a stream without the job's final state event is the README's sign
    of a detach. What was printed stays whole JSON lines."""
    vertex, logs, job = logs_env
    proc = subprocess.Popen([sys.executable, "-c", "from ftcli.cli.app import main; main()", "logs", "1", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ})
    try:
        wait_for_child(proc, lambda: a_tail_opens(logs))
        logs.write_line(job["id"], "workerpool0-0", "still training")
        printed: list[str] = []  # (the Ctrl-C once the line is printed, not a second later)
        wait_for_child(proc, lambda: printed.append(read_until(proc, '"still training"')))
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
        out = printed[0] + out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert any(x.get("text") == "still training" for x in lines)
    assert [x["state"] for x in lines if x.get("event") == "state"] == ["RUNNING"]  # no final state
    assert not any("detached" in json.dumps(x) or "interrupted" in json.dumps(x) for x in lines)
    assert err.splitlines()[-1] == ("detached; the job keeps running. Re-attach: ftcli logs 1   cancel: ftcli jobs "
                                    "cancel 1")


def test_a_detach_while_an_ended_jobs_last_lines_come_in_says_it_ended(logs_env):
    # Once the job has ended, `ftcli logs` reads the lines still coming in before it says the end: a Ctrl-C then said
    # "detached; the job keeps running" and how to cancel it, of a job that had SUCCEEDED. It says the state it ended
    # in.
    vertex, logs, job = logs_env
    env = {**os.environ, "FTCLI_LOGS_INTERVAL": "1"}  # ftcli's own waits: the end is drained until 3 s of quiet
    proc = subprocess.Popen([sys.executable, "-c", "from ftcli.cli.app import main; main()", "logs", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for_child(proc, lambda: logs.wait_for_tails(1, timeout=20) or pytest.fail("no tail in 20 s"))
        logs.write_line(job["id"], "workerpool0-0", "training")
        read = len(vertex.calls("GetCustomJob"))
        vertex.set_state(job["name"], "SUCCEEDED")
        deadline = time.monotonic() + 30
        i = 0
        # two reads of the state since it ended (one may have been answered before), the lines coming in all along
        while len(vertex.calls("GetCustomJob")) < read + 2 and time.monotonic() < deadline:
            logs.write_line(job["id"], "workerpool0-0", f"exporting {i}")
            i += 1
            time.sleep(0.3)
        logs.write_line(job["id"], "workerpool0-0", "still exporting")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.splitlines()[-1] == (
        "detached; job 1 has ended: SUCCEEDED (its last lines were still coming in). Its logs: ftcli logs 1"), err
    assert "keeps running" not in err and "cancel" not in err


def test_sigterm_while_no_follow_prints_an_ended_jobs_lines_says_it_ended(logs_env):
    # `ftcli logs 1 --no-follow | reader` of a job that had SUCCEEDED, the reader having stopped reading, then SIGTERM
    # (a CI step's timeout) while its lines were printed: ftcli said "detached; the job keeps running" and how to
    # cancel it, of a job that had ended (the snapshot never told the view the state it had read). It says the
    # state the job ended in, and that its lines were being printed.
    from ftcli.output import LAST_WRITE_PATIENCE
    from tests.cli.helpers import signal_behind_a_full_pipe

    vertex, logs, job = logs_env
    for i in range(50):
        logs.write_line(job["id"], "workerpool0-0", f"step {i}")
    vertex.set_state(job["name"], "SUCCEEDED")
    code, took, _, err = signal_behind_a_full_pipe(
        [sys.executable, "-c", "from ftcli.cli.app import main; main()", "logs", "1", "--no-follow"],
        {**os.environ}, None, signal.SIGTERM)
    assert code == 143 and took < LAST_WRITE_PATIENCE + 5, (code, took, err)
    assert "Traceback" not in err and err.strip().splitlines()[-1] == (
        "interrupted; job 1 has ended: SUCCEEDED (its lines were still being printed). Its logs: ftcli logs 1"), err
    assert "keeps running" not in err and "cancel" not in err


def test_sigterm_while_no_follow_prints_a_running_jobs_lines_says_it_was_not_following(logs_env):
    # `ftcli logs 1 --no-follow | reader` of a RUNNING job, the reader having stopped reading, then SIGTERM while its
    # lines were printed: ftcli said "detached; the job keeps running. Re-attach: ftcli logs 1", of a snapshot that
    # was never attached to anything (and whose own command was `--no-follow`). It says it was interrupted, the state
    # the job was read in, both ways to see its logs again, and how to cancel it.
    from ftcli.output import LAST_WRITE_PATIENCE
    from tests.cli.helpers import signal_behind_a_full_pipe

    vertex, logs, job = logs_env
    for i in range(50):
        logs.write_line(job["id"], "workerpool0-0", f"step {i}")
    code, took, _, err = signal_behind_a_full_pipe(
        [sys.executable, "-c", "from ftcli.cli.app import main; main()", "logs", "1", "--no-follow"],
        {**os.environ}, None, signal.SIGTERM)
    assert code == 143 and took < LAST_WRITE_PATIENCE + 5, (code, took, err)
    assert "Traceback" not in err and err.strip().splitlines()[-1] == (
        "interrupted; job 1 was RUNNING when its lines were read (they were still being printed). "
        "Its lines: ftcli logs 1 --no-follow   follow it: ftcli logs 1   cancel: ftcli jobs cancel 1"), err
    assert "detached" not in err and "Re-attach" not in err


@pytest.mark.parametrize("follow", [True, False], ids=["follow", "no-follow"])
def test_a_signal_while_an_ended_jobs_summary_is_printed_says_it_ended(logs_env, tmp_path, follow):
    # SIGTERM once the job had FAILED and its lines were read, while the summary (what it cost, the error, the
    # failing replica's last lines) was printed: that printing was outside the follower's handling, and ftcli said
    # the app's bare "interrupted", nothing of the job's end. It says the state the job ended in, that its summary was
    # being printed, and where to read it all again. Held where the summary begins (its cost), so that the signal
    # lands there and not in the following.
    from tests.cli.helpers import signal_when_held

    vertex, logs, job = logs_env
    logs.write_line(job["id"], "workerpool0-0", "Traceback (most recent call last):")
    vertex.set_state(job["name"], "FAILED", "The replica workerpool0-0 exited with a non-zero status of 1.")
    code, printed, err = signal_when_held("ftcli.cli.watch:FollowView._spent", 1,
                                          ["logs", "1", *([] if follow else ["--no-follow"])], signal.SIGTERM,
                                          tmp_path / "held", tmp_path)
    assert code == 143 and "Traceback (most recent" in printed, (code, err)
    assert "Traceback" not in err and err.strip().splitlines()[-1] == (
        "interrupted; job 1 has ended: FAILED (its summary was still being printed). Its logs: ftcli logs 1   "
        "the job: ftcli jobs describe 1"), err


def test_a_signal_before_the_followed_jobs_state_was_read_says_it_is_not_known(logs_env, tmp_path):
    # SIGTERM while `ftcli logs 1` read the job's state for the first time (its first GetCustomJob held): it said
    # "detached; the job keeps running. Re-attach: ftcli logs 1", of a job it had not read, which may have ended
    # long before. It says that the state was still being read, and how to follow it, see its state and cancel it.
    from tests.cli.helpers import signal_when_held

    vertex, logs, job = logs_env
    vertex.set_state(job["name"], "SUCCEEDED")
    code, printed, err = signal_when_held("ftcli.gcp.vertex:VertexGateway.get", 1, ["logs", "1"], signal.SIGTERM,
                                          tmp_path / "held", tmp_path)
    assert code == 143 and printed == "", (code, printed, err)
    assert "Traceback" not in err and err.strip().splitlines()[-1] == (
        "interrupted; job 1's state was still being read (whether it runs on is not known here). Follow it: "
        "ftcli logs 1   its state: ftcli jobs describe 1   cancel: ftcli jobs cancel 1"), err
    assert "keeps running" not in err and "detached" not in err


def _fill_then_signal(logs, job, json_out: bool, sig: int) -> tuple[subprocess.Popen, int]:
    """`ftcli logs 1` writing into a pipe nobody reads, until the pipe is full and ftcli waits in a write, then sent
    `sig`: (the child, the pipe's read end). Python's own buffering, as a user's shell runs it: with
    PYTHONUNBUFFERED the line a signal cuts short is not held for the exit."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", "from ftcli.cli.app import main; main()", "logs", "1",
                             *(["--json"] if json_out else [])], stdout=w, stderr=subprocess.PIPE, text=True, env=env)
    os.close(w)
    try:
        _fill(proc, r, logs, job)
    except BaseException:  # a child left running would keep its tail open, and the next test would wait for it
        proc.kill()
        proc.communicate()
        os.close(r)
        raise
    proc.send_signal(sig)
    return proc, r


def _fill(proc: subprocess.Popen, r: int, logs, job) -> None:
    import fcntl
    import termios

    wait_for_child(proc, lambda: logs.wait_for_tails(1, timeout=20) or pytest.fail("no tail in 20 s"))
    size = fcntl.fcntl(r, 1032)  # F_GETPIPE_SZ

    def held() -> int:
        return int.from_bytes(fcntl.ioctl(r, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)

    start, i, before = dt.datetime.now(dt.UTC), 0, -1
    deadline = time.monotonic() + 60
    # Full: it holds no more though more lines were written (a line does not share a page of the pipe with the one
    # before it when it does not fit, so full is short of F_GETPIPE_SZ)
    while not (held() == before and held() > size - 4096) and time.monotonic() < deadline:
        before = held()
        for _ in range(100):
            logs.write_line(job["id"], REPLICAS[i % 3], f"line {i:05d}", timestamp=start + dt.timedelta(
                milliseconds=10 * i), insert_id=f"id-{i}")
            i += 1
        time.sleep(0.5)
    assert held() == before, (held(), size)  # and ftcli waits in a write, its last lines not taken


def _drain(r: int) -> str:
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    return b"".join(chunks).decode()


@pytest.mark.parametrize("json_out", [False, True], ids=["lines", "json"])
def test_a_signal_while_the_reader_reads_nothing_still_ends_ftcli(logs_env, json_out):
    # `ftcli logs 1 | reader` whose reader had stopped reading (a stopped pager, a hung script), the pipe full: a
    # SIGTERM (or Ctrl-C) said "detached" and ftcli never exited, Python's flush at exit waiting on the line the
    # signal had cut short. It waits a few seconds for the reader (output.LAST_WRITE_PATIENCE), then exits without it.
    from ftcli.output import LAST_WRITE_PATIENCE

    vertex, logs, job = logs_env
    proc = r = None
    try:
        proc, r = _fill_then_signal(logs, job, json_out, signal.SIGTERM)
        signalled = time.monotonic()
        proc.wait(timeout=LAST_WRITE_PATIENCE + 10)
        took = time.monotonic() - signalled
        err = proc.stderr.read()
        out = _drain(r)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143 and took < LAST_WRITE_PATIENCE + 5, (took, err)
    assert "Traceback" not in err and "Exception ignored" not in err and err.splitlines()[-1] == DETACHED, err
    lines = out.splitlines()
    assert out.endswith("\n") and len(lines) > 300  # whole lines
    if json_out:
        texts = [json.loads(line).get("text") for line in lines]
        got = [t for t in texts if t]
        assert got == [f"line {i:05d}" for i in range(len(got))]  # nothing torn, nothing out of order
    assert vertex.job(job["name"]).state.name == "JOB_STATE_RUNNING"


@pytest.mark.parametrize("json_out", [False, True], ids=["lines", "json"])
def test_a_reader_that_stops_early_ends_the_following_quietly(logs_env, json_out):
    # `ftcli logs 1 | head -1`: once head had exited, ftcli followed on (re-reading the job's state, holding one of
    # the project's live tails) until the job logged again, hours later for a quiet job, and only then found the
    # pipe closed. The job here logs nothing more and keeps running: ftcli must end on its own, without a word.
    vertex, logs, job = logs_env
    proc = subprocess.Popen([sys.executable, "-c", "from ftcli.cli.app import main; main()", "logs", "1",
                             *(["--json"] if json_out else [])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ})
    try:
        wait_for_child(proc, lambda: a_tail_opens(logs))
        logs.write_line(job["id"], "workerpool0-0", "first line")
        first = proc.stdout.readline()
        while json_out and '"first line"' not in first:  # the RUNNING state event comes first
            first = proc.stdout.readline()
        assert "first line" in first
        proc.stdout.close()  # the reader exits, as head -1 does
        code = proc.wait(timeout=10)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert code == 1, err  # as when a write finds the pipe closed (Click's EPIPE exit)
    assert "Traceback" not in err and "Exception ignored" not in err and "error" not in err, err
    assert logs.wait_for_tails(0, timeout=5)  # its live tail closed
    assert vertex.job(job["name"]).state.name == "JOB_STATE_RUNNING"


def test_train_follows_by_default_and_exits_with_the_job(capsys, cloud_env, cloud_logging, monkeypatch):
    gcs, vertex = cloud_env
    monkeypatch.setenv("FTCLI_LOGGING_ENDPOINT", cloud_logging.endpoint)
    monkeypatch.setenv("FTCLI_LOGS_INTERVAL", "0.1")
    monkeypatch.setattr(cloud_logging, "project", "test-project")

    def produce():
        assert cloud_logging.wait_for_tails(1, timeout=20)
        (name,) = vertex.jobs
        vertex.set_state(name, "RUNNING")
        cloud_logging.write_line(name.rsplit("/", 1)[-1], "workerpool0-0", "done: accuracy 0.91")
        time.sleep(0.3)
        vertex.set_state(name, "SUCCEEDED")

    r = run_while(capsys, produce, vertex, "train", "--task", "imdb", "--gpu", "T4")
    assert r.code == 0, r.err
    assert "submitted job #1" in r.out and "done: accuracy 0.91" in r.out
    assert 'next: ftcli download 1   ·   ftcli predict 1 "text"' in r.err
    # as `ftcli logs` shows it (no --json asked for): its time, then the text
    assert re.search(r"^\d\d:\d\d:\d\d done: accuracy 0\.91$", r.out, re.MULTILINE) and not json_lines(r.out), r.out


def test_a_steady_stream_reaches_the_screen_within_3_seconds(logs_env):
    """A line every 0.1 s never lets the queue go idle: lines must still come out while the stream flows."""
    vertex, logs, job = logs_env
    env = {**os.environ, "FTCLI_LOGS_INTERVAL": "1"}  # the real timings
    proc = subprocess.Popen([sys.executable, "-c", "from ftcli.cli.app import main; main()", "logs", "1", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    written: dict[str, float] = {}
    shown: dict[str, float] = {}

    def read():
        for raw in proc.stdout:
            if raw.startswith("{") and "text" in (obj := json.loads(raw)):
                shown[obj["text"]] = time.monotonic()

    reader = in_background(read)
    try:
        assert logs.wait_for_tails(1, timeout=30)
        for i in range(80):  # 8 s of a line every 0.1 s
            text = f"steady {i:03d}"
            written[text] = time.monotonic()
            logs.write_line(job["id"], "workerpool0-0", text, insert_id=f"steady-{i}")
            time.sleep(0.1)
        time.sleep(3.0)
        vertex.set_state(job["name"], "SUCCEEDED")
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        _stopped(proc, reader)
    assert sorted(shown) == sorted(written)
    late = {t: round(shown[t] - written[t], 2) for t in written if shown[t] - written[t] > 3.0}
    assert not late, late


def test_lines_the_tail_left_out_are_listed_while_the_job_runs(logs_env):
    """Cloud Logging's tail leaves entries out past its rate limit and says how many in `suppression_info`; ftcli
    ignored it, so those lines showed only if the job ended within 30 s of them (the last list's overlap), and
    never in a longer job."""
    vertex, logs, job = logs_env
    proc = subprocess.Popen([sys.executable, "-c", "from ftcli.cli.app import main; main()", "logs", "1", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ})
    shown: list[str] = []

    def read():
        for raw in proc.stdout:
            if raw.startswith("{") and "text" in (obj := json.loads(raw)):
                shown.append(obj["text"])

    def wait_shown(text: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in shown and time.monotonic() < deadline:
            time.sleep(0.05)
        assert text in shown, (text, shown)

    reader = in_background(read)
    try:
        wait_for_child(proc, lambda: a_tail_opens(logs))
        logs.write_line(job["id"], "workerpool0-0", "before", insert_id="before")
        wait_shown("before")
        logs.suppress_next(20)
        for i in range(20):
            logs.write_line(job["id"], REPLICAS[i % 3], f"left out {i:02d}", insert_id=f"out-{i}")
        logs.write_line(job["id"], "workerpool0-0", "after", insert_id="after")
        wait_shown("after")
        time.sleep(1.0)  # the catch-up list (at most one every 0.5 s here) has come and gone
        while_running = list(shown)
        vertex.set_state(job["name"], "SUCCEEDED")
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        _stopped(proc, reader)
    left_out = [f"left out {i:02d}" for i in range(20)]
    assert sorted(t for t in while_running if t.startswith("left out")) == left_out
    assert sorted(shown) == sorted(["before", "after", *left_out])  # each once


def test_permission_denied_is_said_once_and_the_job_is_still_followed(capsys, logs_env):
    vertex, logs, job = logs_env
    logs.fail_next("TailLogEntries", grpc.StatusCode.PERMISSION_DENIED, times=20, message="no logging.viewer")
    logs.fail_next("ListLogEntries", grpc.StatusCode.PERMISSION_DENIED, times=100, message="no logging.viewer")

    def produce():
        time.sleep(1.0)
        vertex.set_state(job["name"], "SUCCEEDED")

    r = run_while(capsys, produce, vertex, "logs", "1")
    assert r.code == 0, r.err
    assert r.err.count("cannot read the job's logs: permission denied on project test-project") == 1
    assert "roles/logging.viewer" in r.err and "following the job's state" in r.err
    assert "job 1: RUNNING" in r.err and "job 1: SUCCEEDED" in r.err and "Traceback" not in r.err


def test_permission_denied_without_follow_is_one_line(capsys, logs_env):
    vertex, logs, job = logs_env
    logs.fail_next("ListLogEntries", grpc.StatusCode.PERMISSION_DENIED, message="no logging.viewer")
    r = run_cli(capsys, "logs", "1", "--no-follow")
    assert r.code == 1
    assert r.err.startswith("error: cannot read the job's logs: permission denied")
    assert "roles/logging.viewer" in r.err and "Traceback" not in r.err and len(r.err.splitlines()) == 2


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_logging_is_said_once_and_the_job_is_still_followed(capsys, logs_env, monkeypatch):
    vertex, logs, job = logs_env
    port = _closed_port()
    monkeypatch.setenv("FTCLI_LOGGING_ENDPOINT", f"http://127.0.0.1:{port}")

    def produce():
        time.sleep(1.5)
        vertex.set_state(job["name"], "FAILED", "boom")

    r = run_while(capsys, produce, vertex, "logs", "1")
    assert r.code == 3, r.err
    assert r.err.count(f"cannot reach Cloud Logging at 127.0.0.1:{port}") == 1
    assert "job 1: FAILED" in r.err and "Traceback" not in r.err

    r = run_cli(capsys, "logs", "1", "--no-follow")
    assert r.code == 1 and f"error: cannot reach Cloud Logging at 127.0.0.1:{port}" in r.err
    assert "Traceback" not in r.err


def test_quota_exhausted_falls_back_to_slow_polls_never_a_hot_loop(capsys, logs_env):
    vertex, logs, job = logs_env
    logs.tail_unavailable = grpc.StatusCode.RESOURCE_EXHAUSTED  # no live-tail session left in the project
    logs.fail_next("ListLogEntries", grpc.StatusCode.RESOURCE_EXHAUSTED, times=2)
    for i in range(5):
        logs.write_line(job["id"], "workerpool0-0", f"line {i}")

    def produce():
        time.sleep(3.0)
        vertex.set_state(job["name"], "SUCCEEDED")

    writer = in_background(produce, vertex)
    started = time.monotonic()
    r = run_cli(capsys, "logs", "1", "--json")
    elapsed = time.monotonic() - started
    writer.join()
    assert r.code == 0, r.err
    assert [x["text"] for x in json_lines(r.out) if "text" in x] == [f"line {i}" for i in range(5)]
    notices = [x for x in json_lines(r.out) if x.get("event") == "logs_unavailable"]
    assert [n["reason"] for n in notices] == ["quota"]  # said once, though the tail and two lists hit it
    assert len(logs.calls("TailLogEntries")) == 1  # no retrying the tail in a loop
    # FTCLI_LOGS_INTERVAL=0.1 scales the 5 s floor to 0.5 s: polls are at least that far apart
    assert len(logs.calls("ListLogEntries")) <= elapsed / 0.5 + 2, (len(logs.calls("ListLogEntries")), elapsed)


def test_a_replica_that_does_not_exist_says_so(capsys, logs_env):
    vertex, logs, job = logs_env
    ender = threading.Timer(5.0, vertex.set_state, (job["name"], "SUCCEEDED"))  # so a regression fails, not hangs
    ender.start()
    r = run_cli(capsys, "logs", "1", "--replica", "workerpool0-1")
    ender.cancel()
    assert r.code == 2
    assert "--replica workerpool0-1 matches no replica of job 1" in r.err
    assert "workerpool0-0, workerpool1-0, workerpool1-1" in r.err


def test_a_failing_background_producer_ends_the_job_instead_of_hanging_the_run(capsys, logs_env):
    """The helper above: a producer that dies (here at once) ends the followed job, so the CLI returns and join()
    names the error; before it, one such failure left a whole test run waiting forever."""
    vertex, logs, job = logs_env

    def produce():
        raise RuntimeError("the producer broke")

    writer = in_background(produce, vertex)
    r = run_cli(capsys, "logs", "1")
    assert r.code != 0
    with pytest.raises(RuntimeError, match="the producer broke"):
        writer.join()


def test_logging_api_disabled_says_enable_it_not_grant_a_role(capsys, logs_env):
    """Cloud Logging's SERVICE_DISABLED (PERMISSION_DENIED with an ErrorInfo) was read as a missing role: "grant
    roles/logging.viewer", which cannot help."""
    vertex, logs, job = logs_env
    logs.fail_next("ListLogEntries", grpc.StatusCode.PERMISSION_DENIED,
                   message="Cloud Logging API has not been used in project 123 before or it is disabled.",
                   error_info={"reason": "SERVICE_DISABLED", "domain": "googleapis.com",
                               "metadata": {"service": "logging.googleapis.com", "consumer": "projects/test-project"}})
    r = run_cli(capsys, "logs", "1", "--no-follow")
    assert r.code == 1 and "Traceback" not in r.err
    assert r.err.splitlines() == [
        "error: cannot read the job's logs: the logging.googleapis.com API is not enabled in project test-project",
        "hint: enable it: gcloud services enable logging.googleapis.com --project test-project"]


@pytest.mark.parametrize(("code", "said"), [
    ("ABORTED", ["error: Cloud Logging error: Aborted: msg",
                 "hint: it met another change made at the same moment: run the command again"]),
    ("NOT_FOUND", ["error: project test-project not found: msg",
                   "hint: check what it names, and the project (test-project) it went to: `ftcli config list` shows "
                   "where each comes from"]),
    ("FAILED_PRECONDITION", ["error: Cloud Logging refused: msg",
                             "hint: Cloud Logging needs what it names changed first: the same request, sent again as "
                             "it is, fails the same way"]),
    ("DATA_LOSS", ["error: Cloud Logging failed on Google's side (DATA_LOSS): msg",
                   "hint: nothing in your request caused it: try again in a few minutes; "
                   "https://status.cloud.google.com lists Google Cloud incidents"]),
    ("INVALID_ARGUMENT", ["error: Cloud Logging rejected the request: msg",
                          "hint: FTCLI_DEBUG=1 shows where it happened"]),  # (`ftcli logs` has no --dry-run)
    ("UNIMPLEMENTED", ["error: Cloud Logging error: MethodNotImplemented: msg",
                       "hint: Cloud Logging at ADDRESS (from FTCLI_LOGGING_ENDPOINT) does not offer this call: check "
                       "that endpoint"]),
])
def test_a_logging_error_has_the_hint_every_command_gives_its_code(capsys, logs_env, code, said):
    """The Logging gateway had its own mapping of Google's errors beside the one every other gateway uses: each code
    it did not name was said as "Cloud Logging error: KIND: ..." with no hint."""
    vertex, logs, job = logs_env
    logs.fail_next("ListLogEntries", getattr(grpc.StatusCode, code), message="msg")
    r = run_cli(capsys, "logs", "1", "--no-follow")
    assert r.code == 1
    assert r.err.splitlines() == [line.replace("ADDRESS", logs.address) for line in said]


@pytest.mark.parametrize(("code", "error_info", "said", "state_notices"), [
    (grpc.StatusCode.INTERNAL, None, "Vertex AI failed on Google's side (INTERNAL): Internal error encountered.", 1),
    # Vertex's per-minute read quota (ErrorReason RATE_LIMIT_EXCEEDED): retried within the read itself
    (grpc.StatusCode.RESOURCE_EXHAUSTED,
     {"reason": "RATE_LIMIT_EXCEEDED", "domain": "googleapis.com",
      "metadata": {"service": "aiplatform.googleapis.com", "consumer": "projects/123",
                   "quota_metric": "aiplatform.googleapis.com/resource_management_requests"}},
     "Vertex AI is limiting the rate of requests (429 ResourceExhausted, GetCustomJob); retrying", 0),
])
def test_a_failed_state_read_does_not_end_following(capsys, logs_env, code, error_info, said, state_notices):
    """One GetCustomJob answered 500 (or over the per-minute quota) while `ftcli logs` followed a running job ended
    it with exit 1 and that error, the job still running. It is said once, and the job is followed to its end."""
    vertex, logs, job = logs_env
    resource = {"type": "ml_job", "labels": {"job_id": job["name"].rsplit("/", 1)[-1], "task_name": "workerpool0-0"}}

    def produce():
        n = len(vertex.calls("GetCustomJob"))
        # the command's read, then the follower's first: following has started
        assert vertex.wait_for_requests("GetCustomJob", n + 2, timeout=20)
        vertex.fail_next("GetCustomJob", code, times=2, message="Internal error encountered.", error_info=error_info)
        assert vertex.wait_for_requests("GetCustomJob", n + 4, timeout=20)  # both failed reads happened
        logs.write([{"resource": resource, "text_payload": "still training", "insert_id": "a"}])
        time.sleep(0.5)
        vertex.set_state(job["name"], "SUCCEEDED")

    r = run_while(capsys, produce, vertex, "logs", "1")
    assert r.code == 0, r.err
    assert r.err.count("cannot read the job's state now") == state_notices and said in r.err, r.err
    assert ("still following it" in r.err) == bool(state_notices)
    assert "job 1: SUCCEEDED" in r.err and "Traceback" not in r.err
    assert "still training" in r.out


def test_a_state_unreadable_past_the_patience_says_the_job_was_not_stopped(capsys, logs_env, monkeypatch):
    """A state read failing for longer than ftcli waits (a login that expired, a role taken away) ended `ftcli logs`
    (and `ftcli train`'s following) with that error alone: nothing said the job ran on, billing, nor how to get back
    to it."""
    from ftcli import follow

    vertex, logs, job = logs_env
    monkeypatch.setattr(follow, "STATE_PATIENCE", 1.0)

    def produce():
        n = len(vertex.calls("GetCustomJob"))
        assert vertex.wait_for_requests("GetCustomJob", n + 2, timeout=20)  # following has started
        vertex.fail_next("GetCustomJob", grpc.StatusCode.INTERNAL, times=10_000, message="Internal error encountered.")

    r = run_while(capsys, produce, vertex, "logs", "1")
    assert r.code == 1 and "Traceback" not in r.err
    assert r.err.splitlines()[-2:] == [
        "error: Vertex AI failed on Google's side (INTERNAL): Internal error encountered. (1 s of failed reads: ftcli "
        "stopped following the job, which may still be running)",
        "hint: nothing in your request caused it: try again in a few minutes; https://status.cloud.google.com lists "
        "Google Cloud incidents; then follow it again: ftcli logs 1   cancel it: ftcli jobs cancel 1"]


def test_a_console_url_one_part_short_is_one_line_that_names_the_part(capsys):
    # `ftcli logs URL` of an address copied without its ?project=: "not a job reference", and a hint that listed the
    # forms without console URLs
    url = "https://console.cloud.google.com/vertex-ai/locations/us-central1/training/1234567890/cpu"
    r = run_cli(capsys, "logs", url)
    assert r.code == 2 and r.out == ""
    assert r.err.splitlines() == [
        f"error: '{url}' is not a job's console URL: it has no project (?project=PROJECT)",
        "hint: a job's page is https://console.cloud.google.com/agent-platform/locations/REGION/training/ID?"
        "project=PROJECT, as ftcli train and ftcli jobs describe show it"]
