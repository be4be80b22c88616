"""How a followed job looks: waits as a spinner on a terminal and a plain line a minute elsewhere; the end says
what to run next, or why it failed."""

import datetime as dt
import io
import time

import pytest
from rich.console import Console

from ftcli.cli.watch import FollowView, timing_from_env
from ftcli.follow import Line, Outcome, Timing
from ftcli.output import Waiting
from ftcli.values import Job, JobName
from tests.conftest import use_price_file

NAME = JobName("p", "us-central1", "123")


class Screen(io.StringIO):
    """A stream that says it is a terminal, as a tty does."""

    def isatty(self) -> bool:
        return True


def console(terminal: bool) -> tuple[Console, io.StringIO]:
    buf = Screen() if terminal else io.StringIO()
    return Console(file=buf, width=100, highlight=False), buf


def test_elsewhere_a_wait_is_a_plain_line_each_full_minute():
    c, buf = console(False)
    w = Waiting(c)
    for elapsed in (0, 5, 59, 60, 61, 119, 125, 300):
        w.update("job 3: PENDING, waiting for machines", elapsed)
    w.stop()
    assert buf.getvalue().splitlines() == ["job 3: PENDING, waiting for machines · 1m",
                                           "job 3: PENDING, waiting for machines · 2m",
                                           "job 3: PENDING, waiting for machines · 5m"]


def test_on_a_terminal_a_wait_is_a_spinner_that_goes_away():
    c, buf = console(True)
    w = Waiting(c)
    w.update("job 3: PENDING, waiting for machines", 5)
    time.sleep(0.2)
    w.update("job 3: PENDING, waiting for machines", 75)
    time.sleep(0.2)
    w.stop()
    text = buf.getvalue()
    assert "job 3: PENDING, waiting for machines · 1m" in text
    assert "\x1b[" in text  # drawn and redrawn in place, not printed line after line


@pytest.mark.parametrize("env", [{"FORCE_COLOR": "1"}, {"TTY_COMPATIBLE": "1"}, {"TERM": "dumb", "screen": "yes"}])
def test_a_log_that_asks_for_colours_gets_no_spinner_or_bar(monkeypatch, env):
    """CI workflows set FORCE_COLOR (or Rich's TTY_COMPATIBLE) to get colours in their logs, and Rich then takes the
    log for a terminal: a followed job's spinner was redrawn about 12 times a second into the log file, and every
    upload drew a bar. On a dumb terminal neither the spinner (Rich does not draw it there) nor a line was shown."""
    from ftcli import output

    env = dict(env)
    screen = env.pop("screen", None)
    monkeypatch.delenv("TTY_INTERACTIVE", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    buf = Screen() if screen else io.StringIO()
    c = Console(file=buf, width=100, highlight=False)  # as ftcli's own
    w = Waiting(c)
    for elapsed in (0, 5, 59, 60, 61, 125):
        w.update("job 3: PENDING, waiting for machines", elapsed)
        time.sleep(0.05)
    w.stop()
    assert buf.getvalue().splitlines() == ["job 3: PENDING, waiting for machines · 1m",
                                           "job 3: PENDING, waiting for machines · 2m"]
    assert "\x1b" not in buf.getvalue() and "\r" not in buf.getvalue()
    monkeypatch.setattr(output, "err", lambda: c)
    with output.transfer("uploading train.csv") as progress:
        assert progress is None  # no bar: the upload says what it sent when it is done


def test_a_job_without_machines_says_what_it_waits_for():
    # "job 3: PENDING" and "waiting for machines" said nothing of why a Flex-start job can wait a day, or that a long
    # QUEUED wait is the project's quota; nor that the wait need not be watched
    out, _ = console(False)
    buf = io.StringIO()
    err = Console(file=buf, width=200, highlight=False)
    view = FollowView("3", json_out=False, out=out, err=err)
    view.start(Job(NAME, "run", "PENDING", provisioning="Flex-start"))
    view.state("PENDING", None)
    view.state("RUNNING", None)
    assert buf.getvalue().splitlines() == [
        "job 3: PENDING (waiting for Flex-start GPUs, up to its maximum wait (--max-wait; 1 day by default); Ctrl-C "
        "detaches, ftcli jobs cancel 3 cancels it)", "job 3: RUNNING"]
    buf = io.StringIO()
    view = FollowView("4", json_out=False, out=out, err=Console(file=buf, width=200, highlight=False))
    view.start(Job(NAME, "run", "PENDING"))
    view.state("PENDING", None)
    assert buf.getvalue() == ("job 4: PENDING (Vertex is starting its machines; with several, the job is PENDING "
                              "until all are up; Ctrl-C detaches, ftcli jobs cancel 4 cancels it)\n")


def test_a_queued_job_is_said_as_queued_with_what_to_do_not_as_waiting_for_machines():
    # QUEUED is "just created or resumed and processing has not yet begun", kept there while the project lacks
    # custom-training quota: the line that counts the wait said "QUEUED, waiting for machines", none asked for yet,
    # and nothing said where the quota is raised. A Flex-start job's count said "waiting for machines" too.
    out, _ = console(False)
    err, buf = console(False)
    view = FollowView("5", json_out=False, out=out, err=Console(file=buf, width=300, highlight=False))
    view.start(Job(NAME, "run", "QUEUED"))
    view.state("QUEUED", None)
    view.waiting("QUEUED", 60)
    assert buf.getvalue().splitlines() == [
        "job 5: QUEUED (queued by Vertex, not started: a long wait means the project lacks custom-training quota for "
        "it; request more at https://console.cloud.google.com/iam-admin/quotas?project=p, or cancel it and pick "
        "another --gpu or --region; Ctrl-C detaches, ftcli jobs cancel 5 cancels it)",
        "job 5: QUEUED, not started yet · 1m"]
    err, buf = console(False)
    view = FollowView("6", json_out=False, out=out, err=err)
    view.start(Job(NAME, "run", "PENDING", provisioning="Flex-start"))
    view.waiting("PENDING", 120)
    assert buf.getvalue() == "job 6: PENDING, waiting for Flex-start GPUs · 2m\n"


def test_success_says_what_to_run_next():
    out, _ = console(False)
    err, buf = console(False)
    view = FollowView("3", json_out=False, out=out, err=err)
    view.ended(Outcome("SUCCEEDED", Job(NAME, "run", "SUCCEEDED")))
    assert buf.getvalue() == 'next: ftcli download 3   ·   ftcli predict 3 "text"\n'
    err, buf = console(False)  # a task of sentence pairs: predict takes a pair per text
    view = FollowView("4", json_out=False, out=out, err=err)
    view.ended(Outcome("SUCCEEDED", Job(NAME, "run", "SUCCEEDED", labels={"ftcli_task": "mnli"})))
    assert buf.getvalue() == 'next: ftcli download 4   ·   ftcli predict 4 "text" --pair "hypothesis"\n'
    # a CSV of pairs: the task says nothing, the trainer's --text-pair-column does (each spelling the trainer takes)
    from ftcli.values import Pool

    for args in (("--task", "csv", "--text-pair-column", "question2"), ("--text_pair_column", "question2"),
                 ("--task=csv", "--text-pair-column=question2")):
        err, buf = console(False)
        job = Job(NAME, "run", "SUCCEEDED", labels={"ftcli_task": "csv"}, pools=(Pool("n1-standard-4", args=args),))
        FollowView("5", json_out=False, out=out, err=err).ended(Outcome("SUCCEEDED", job))
        assert buf.getvalue() == 'next: ftcli download 5   ·   ftcli predict 5 "text" --pair "question2"\n', args
    err, buf = console(False)  # a column named with brackets: Rich took "[/]" for markup and crashed at the end
    job = Job(NAME, "run", "SUCCEEDED", pools=(Pool("n1-standard-4", args=("--text-pair-column", "q [/] [b]")),))
    FollowView("5", json_out=False, out=out, err=err).ended(Outcome("SUCCEEDED", job))
    assert buf.getvalue() == 'next: ftcli download 5   ·   ftcli predict 5 "text" --pair "q [/] [b]"\n'
    err, buf = console(False)
    job = Job(NAME, "run", "SUCCEEDED", pools=(Pool("n1-standard-4", args=("--task", "csv", "--text-column", "t")),))
    FollowView("6", json_out=False, out=out, err=err).ended(Outcome("SUCCEEDED", job))
    assert buf.getvalue() == 'next: ftcli download 6   ·   ftcli predict 6 "text"\n'
    # a tuning trial's job (`ftcli logs 4 --trial 2`) has no labels: its task is in the trainer's options, and a
    # sentence-pair task's --pair was left out of the next line
    err, buf = console(False)
    trial = Pool("n1-standard-4", args=("--task", "mnli", "--learning_rate", "3e-05"),
                 command=("bash", "-c", "exec python -m ftcli_trainer.task \"$@\""))
    FollowView("7", json_out=False, out=out, err=err).ended(Outcome("SUCCEEDED", Job(NAME, "t", "SUCCEEDED",
                                                                                     pools=(trial,))))
    assert buf.getvalue() == 'next: ftcli download 7   ·   ftcli predict 7 "text" --pair "hypothesis"\n'


def test_the_end_says_what_the_job_cost_at_the_users_rates(tmp_path, monkeypatch):
    from ftcli.values import Pool

    use_price_file(tmp_path, monkeypatch)
    t0 = dt.datetime(2026, 11, 27, 9, tzinfo=dt.UTC)
    job = Job(NAME, "run", "SUCCEEDED", started=t0, ended=t0 + dt.timedelta(minutes=100),
              pools=(Pool("n1-standard-8", "NVIDIA_TESLA_T4", 1),))
    err, buf = console(False)
    FollowView("3", json_out=False, out=console(False)[0], err=err).ended(Outcome("SUCCEEDED", job))
    assert buf.getvalue().splitlines() == [
        "ran 1h40m: about $1.25 at your us-central1 rates (on-demand; $0.75 an hour)",
        'next: ftcli download 3   ·   ftcli predict 3 "text"']
    # The run time as `jobs describe` and `jobs list` say it (rounded): 56.9 s is 57s, not 56s
    short = Job(NAME, "run", "SUCCEEDED", started=t0, ended=t0 + dt.timedelta(seconds=56.9),
                pools=(Pool("n1-standard-8", "NVIDIA_TESLA_T4", 1),))
    err, buf = console(False)
    FollowView("3", json_out=False, out=console(False)[0], err=err).ended(Outcome("SUCCEEDED", short))
    assert buf.getvalue().startswith("ran 57s: about $0.01 at your us-central1 rates")
    # A broken price file is a warning here: it never changes how following the job ends.
    (tmp_path / "prices.toml").write_text('source = "s"\n')
    err, buf = console(False)
    FollowView("3", json_out=False, out=console(False)[0], err=err).ended(Outcome("SUCCEEDED", job))
    assert buf.getvalue().endswith('next: ftcli download 3   ·   ftcli predict 3 "text"\n')


def test_failure_shows_the_error_and_the_failing_replicas_last_lines():
    out, _ = console(False)
    err, buf = console(False)
    view = FollowView("3", json_out=False, out=out, err=err)
    t = dt.datetime(2026, 11, 27, tzinfo=dt.UTC)
    lines = [Line(t, "workerpool0-0", "ERROR", "error: no column 'text'", "a")]
    view.ended(Outcome("FAILED", Job(NAME, "run", "FAILED", "exit status 2"), "workerpool0-0", lines))
    assert buf.getvalue().splitlines() == ["job 3 FAILED: exit status 2", "last lines of workerpool0-0:",
                                           "  error: no column 'text'"]


@pytest.mark.parametrize("failing", ["workerpool1-0", "workerpool0-0"])
def test_a_failed_replicas_error_is_said_by_its_first_line_then_the_last_lines_of_the_replica_that_failed(failing):
    from ftcli.values import Pool

    out, _ = console(False)
    buf = io.StringIO()
    err = Console(file=buf, width=200, highlight=False)  # (Vertex's first line is longer than 100)
    t = dt.datetime(2026, 11, 27, tzinfo=dt.UTC)
    error = ("The replica workerpool0-0 exited with a non-zero status of 1. Termination reason: Error. \n"
             "Traceback (most recent call last):\nRuntimeError: Connection reset by peer\n")
    lines = [Line(t, failing, "ERROR", "Traceback (most recent call last):", "a"),
             Line(t, failing, "INFO", "ValueError: bad row 17", "b")]
    pools = (Pool("n1-standard-4"), Pool("n1-standard-4"))
    FollowView("3", json_out=False, out=out, err=err).ended(Outcome("FAILED", Job(NAME, "run", "FAILED", error,
                                                                                  pools=pools), failing, lines))
    # Vertex names the replica whose process ended first; when another failed before it, that one is said as such
    first = ", which failed first" if failing != "workerpool0-0" else ""
    assert buf.getvalue().splitlines() == [
        "job 3 FAILED: The replica workerpool0-0 exited with a non-zero status of 1. Termination reason: Error.",
        f"last lines of {failing}{first}:", "  Traceback (most recent call last):", "  ValueError: bad row 17"]
    # a job that failed without an error (and a one-machine job)
    buf.truncate(0), buf.seek(0)
    FollowView("3", json_out=False, out=out, err=err).ended(Outcome("FAILED", Job(NAME, "run", "FAILED",
                                                                                  pools=pools[:1]), failing, lines))
    assert buf.getvalue().splitlines() == ["job 3 FAILED", f"last lines of {failing}:",
                                           "  Traceback (most recent call last):", "  ValueError: bad row 17"]


def test_a_line_is_its_time_its_replica_when_it_says_which_its_level_above_info_and_its_text(capsys):
    from ftcli.values import Pool

    t = dt.datetime(2026, 11, 27, 12, 0, 5, tzinfo=dt.UTC)
    at = t.astimezone().strftime("%H:%M:%S")  # the machine's time, as --since reads a time without an offset
    out, buf = console(False)
    one = FollowView("3", json_out=False, out=out, err=console(False)[0])
    one.start(Job(NAME, "run", "RUNNING", pools=(Pool("n1-standard-4"),)))
    one.line(Line(t, "workerpool0-0", "INFO", "step 1 [b]", "a"))  # (Rich markup shown as typed)
    one.line(Line(t, "workerpool0-0", "WARNING", "warning: the eval set has 3 rows", "b"))
    one.line(Line(t, "service", "ERROR", "The replica workerpool0-0 exited\nTraceback (most recent call last):", "c"))
    several = FollowView("4", json_out=False, out=out, err=console(False)[0])
    several.start(Job(NAME, "run", "RUNNING", pools=(Pool("n1-standard-4"), Pool("n1-standard-4", replicas=2))))
    several.line(Line(t, "workerpool1-1", "CRITICAL", "lost the GPU", "d"))
    several.line(Line(t, "workerpool0-0", "INFO", "", "e"))
    assert buf.getvalue().splitlines() == [
        f"{at} step 1 [b]",
        f"{at} WARNING warning: the eval set has 3 rows",
        f"{at} service ERROR The replica workerpool0-0 exited",  # Vertex's own lines named, each line of the entry
        f"{at} service ERROR Traceback (most recent call last):",
        f"{at} workerpool1-1 CRITICAL lost the GPU",
        f"{at} workerpool0-0 "]
    FollowView("3", json_out=True).line(Line(t, "workerpool0-0", "WARNING", "warning: x", "b"))
    assert capsys.readouterr().out.splitlines() == [
        '{"timestamp": "2026-11-27T12:00:05+00:00", "replica": "workerpool0-0", "severity": "WARNING", '
        '"text": "warning: x", "insert_id": "b"}']


def test_a_transfer_bar_is_drawn_only_once_something_moves(monkeypatch):
    # `ftcli predict MODEL_DIR` and `ftcli evaluate MODEL_DIR FILE` flashed "downloading the model 0/? bytes" on a
    # terminal, where nothing was downloaded
    from ftcli import output

    c, buf = console(True)
    monkeypatch.setattr(output, "err", lambda: c)
    with output.transfer("downloading the model") as progress:
        assert progress is not None
        time.sleep(0.2)
    assert buf.getvalue() == ""
    with output.transfer("downloading the model") as progress:
        assert progress is not None
        progress(1000, 4000)
        time.sleep(0.2)
    assert "downloading the model" in buf.getvalue() and "1.0/4.0 kB" in buf.getvalue()


def test_predict_and_evaluate_on_a_model_folder_draw_no_download_bar(capsys, monkeypatch, tmp_path, tiny_model):
    from ftcli import output
    from tests.cli.helpers import run_cli

    c, buf = console(True)
    monkeypatch.setattr(output, "err", lambda: c)
    r = run_cli(capsys, "predict", str(tiny_model), "a wonderful film")
    assert r.code == 0, buf.getvalue()
    rows = tmp_path / "test.csv"
    rows.write_text("text,label\na wonderful film,LABEL_1\na dull film,LABEL_0\n")
    r = run_cli(capsys, "evaluate", str(tiny_model), str(rows))
    assert r.code == 0, buf.getvalue()
    assert "downloading" not in buf.getvalue()


@pytest.mark.parametrize("value", ["fast", "0", "-1", "nan", "inf", ""])
def test_the_tests_interval_knob_is_ignored_unless_it_is_a_positive_number(monkeypatch, value):
    # FTCLI_LOGS_INTERVAL scales the follower's waits for the tests, and README does not mention it (a user gains
    # nothing from it): a bad value stopped `ftcli logs` with a usage error naming it, and `ftcli train` with exit 2
    # after the job was created. It is ignored; "inf" made every wait endless.
    monkeypatch.setenv("FTCLI_LOGS_INTERVAL", value)
    assert timing_from_env() == Timing()
    monkeypatch.setenv("FTCLI_LOGS_INTERVAL", "0.1")
    assert timing_from_env() == Timing().scaled(0.1)
