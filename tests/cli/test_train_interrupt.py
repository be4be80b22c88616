"""Ctrl-C during `ftcli train`: once a job exists it is always named, with how to follow and cancel it."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import grpc
import pytest

from tests.cli.helpers import GrpcProxy, signal_child

FTCLI = [sys.executable, "-c", "from ftcli.cli.app import main; main()"]


def ctrl_c_train(args: list[str], env: dict, cwd, ready, command: str = "train",
                 sig: int = signal.SIGINT) -> tuple[int, str, str]:
    """Start `ftcli train ARGS` (or `command`), press Ctrl-C (or send `sig`) once `ready()` holds (it asserts), and
    return (exit status, stdout, stderr); the process never outlives the test."""
    return signal_child([*FTCLI, command, *args], env, cwd, ready, sig)


class SlowCreateProxy(GrpcProxy):
    """A gRPC proxy in front of the JobService emulator that holds CreateCustomJob's (and
    CreateHyperparameterTuningJob's) answer for `delay` seconds after the job exists: the window in which a Ctrl-C
    used to leave a running job unnamed."""

    def __init__(self, upstream: str, delay: float):
        self.created = threading.Event()

        def after(method: str) -> None:
            if method.endswith(("/CreateCustomJob", "/CreateHyperparameterTuningJob")):
                self.created.set()
                time.sleep(delay)

        super().__init__(upstream, after=after)


def signal_in_create(vertex, tmp_path, command: str, sig: int, mode: str) -> tuple[int, str, str]:
    """`ftcli train` (or `tune --trials 2`) of imdb on a T4 with `mode` (--detach, --json), given `sig` half a second
    into a create call that the server holds for a minute: (exit status, stdout, stderr)."""
    with SlowCreateProxy(vertex.address, delay=60) as proxy:
        env = {**os.environ, "FTCLI_VERTEX_ENDPOINT": f"http://127.0.0.1:{proxy.port}"}

        def created():
            assert proxy.created.wait(60), "the create call never arrived"
            time.sleep(0.5)

        return ctrl_c_train(["--task", "imdb", "--gpu", "T4", mode, *(["--trials", "2"] if command == "tune" else [])],
                            env, tmp_path, created, command=command, sig=sig)


@pytest.mark.parametrize(("command", "sig", "status"), [
    ("train", signal.SIGINT, 130), ("tune", signal.SIGINT, 130),
    # a CI step's timeout (SIGTERM) or a closed terminal (SIGHUP) killed ftcli without a word, the job unnamed
    ("train", signal.SIGTERM, 143), ("train", signal.SIGHUP, 129)])
def test_ctrl_c_while_the_create_call_is_in_flight_names_the_job(cloud_env, tmp_path, command, sig, status):
    # tune: Ctrl-C in the create call said only "interrupted", and the tuning job ran on unnamed, without a short id
    gcs, vertex = cloud_env
    code, out, err = signal_in_create(vertex, tmp_path, command, sig, "--detach")
    made = vertex.tuning_jobs if command == "tune" else vertex.jobs
    (name,) = made
    what, follow = ("tuning job", "ftcli jobs describe 1") if command == "tune" else ("job", "ftcli logs 1")
    assert code == status, err
    assert "Traceback" not in err
    assert f"interrupted; {what} #1 {name.rsplit('/', 1)[-1]} keeps running ({name})" in err
    assert follow in err and "ftcli jobs cancel 1" in err
    state = made[name].state if command == "tune" else vertex.job(name).state
    assert state.name == "JOB_STATE_PENDING"  # nothing cancelled behind the user's back
    r = subprocess.run([*FTCLI, "jobs", "describe", "1", "--json"], env=os.environ, capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(r.stdout)["name"] == name  # short id 1 is that job


def test_an_ignored_sighup_nohup_does_not_stop_the_submission(cloud_env, tmp_path):
    # `nohup ftcli train ... &` ignores SIGHUP so that closing the terminal leaves it running; the submission's own
    # SIGHUP handler replaced that, and the closed terminal stopped it (exit 129).
    gcs, vertex = cloud_env
    with SlowCreateProxy(vertex.address, delay=2) as proxy:
        env = {**os.environ, "FTCLI_VERTEX_ENDPOINT": f"http://127.0.0.1:{proxy.port}"}
        proc = subprocess.Popen([*FTCLI, "train", "--task", "imdb", "--gpu", "T4", "--detach"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                                preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
        try:
            assert proxy.created.wait(60), "the create call never arrived"
            proc.send_signal(signal.SIGHUP)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err
    (name,) = vertex.jobs
    assert "submitted job #1" in out and name.rsplit("/", 1)[-1] in out and "interrupted" not in err


@pytest.mark.parametrize("mode", ["--detach", "--json"])
def test_ctrl_c_before_any_job_exists_says_so(cloud_env, tmp_path, monkeypatch, mode):
    gcs, vertex = cloud_env
    with SlowCreateProxy(vertex.address, delay=0) as proxy:
        vertex.fail_next("CreateCustomJob", grpc.StatusCode.UNAVAILABLE, times=1000)  # create never succeeds
        env = {**os.environ, "FTCLI_VERTEX_ENDPOINT": f"http://127.0.0.1:{proxy.port}"}
        code, out, err = ctrl_c_train(["--task", "imdb", "--gpu", "T4", mode], env, tmp_path,
                                      lambda: vertex.wait_for_requests("CreateCustomJob", 2, timeout=60) or
                                      pytest.fail("the create call was never retried"))
    assert code == 130, err
    assert "interrupted before the job was created; nothing is running" in err and "Traceback" not in err
    assert not vertex.jobs
    assert out == ""  # (--json: no job, no object; the exit status says it did not finish)


def test_ctrl_c_while_uploading_knows_no_job_exists_without_asking(cloud_env, tmp_path):
    # Interrupted before the create call, it asked Vertex anyway, and when that lookup failed it said a job "may
    # have been created" though none could have been.
    from tests.emulators.gcs import FaultyProxy

    gcs, vertex = cloud_env
    with FaultyProxy(gcs.url, fail_when=lambda method, target, n: "/upload/" in target) as proxy:
        env = {**os.environ, **proxy.env()}

        def uploading():  # the wheel's upload has failed once and is being retried
            deadline = time.monotonic() + 60
            while proxy.failed < 1:
                assert time.monotonic() < deadline, "no upload was tried"
                time.sleep(0.05)

        code, out, err = ctrl_c_train(["--task", "imdb", "--gpu", "T4", "--detach"], env, tmp_path, uploading)
    assert code == 130, err
    assert "interrupted before the job was created; nothing is running" in err and "Traceback" not in err
    assert not vertex.jobs and not [m for m, _ in vertex.requests if m in ("CreateCustomJob", "ListCustomJobs")]


def test_ctrl_c_while_following_prints_the_job_and_exit_130(cloud_env, cloud_logging, tmp_path):
    gcs, vertex = cloud_env
    env = {**os.environ, "FTCLI_LOGGING_ENDPOINT": cloud_logging.endpoint}
    code, out, err = ctrl_c_train(["--task", "imdb", "--gpu", "T4"], env, tmp_path,
                                  lambda: cloud_logging.wait_for_tails(1, timeout=60) or
                                  pytest.fail("ftcli never started following the logs"))
    assert code == 130, err
    (name,) = vertex.jobs
    assert name.rsplit("/", 1)[-1] in out and "ftcli jobs cancel 1" in err and "Traceback" not in err


def test_a_signal_while_the_followed_jobs_summary_is_printed_says_it_ended(cloud_env, cloud_logging, tmp_path):
    # `ftcli train` following its job, which FAILED; SIGTERM while the end's summary (its cost, the error, the last
    # lines) was printed: it said "interrupted; job #1 ... keeps running ... cancel it: ftcli jobs cancel 1" of a job
    # that had ended (the summary was printed outside the follower's handling, inside the submission's). It says the
    # state the job ended in. Held where the summary begins (its cost), so that the signal lands there.
    from tests.cli.helpers import signal_when_held

    gcs, vertex = cloud_env
    env = {**os.environ, "FTCLI_LOGGING_ENDPOINT": cloud_logging.endpoint, "FTCLI_LOGS_INTERVAL": "0.1"}

    def fail_it():
        deadline = time.monotonic() + 120
        while not vertex.jobs and time.monotonic() < deadline:
            time.sleep(0.05)
        for name in list(vertex.jobs):
            vertex.set_state(name, "FAILED", "The replica workerpool0-0 exited with a non-zero status of 1.")

    failing = threading.Thread(target=fail_it, daemon=True)
    failing.start()
    code, out, err = signal_when_held("ftcli.cli.watch:FollowView._spent", 1,
                                      ["train", "--task", "imdb", "--gpu", "T4"], signal.SIGTERM, tmp_path / "held",
                                      tmp_path, env)
    failing.join(10)
    assert code == 143, err
    assert "Traceback" not in err and "keeps running" not in err and err.strip().splitlines()[-1] == (
        "interrupted; job 1 has ended: FAILED (its summary was still being printed). Its logs: ftcli logs 1   "
        "the job: ftcli jobs describe 1"), err


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_while_following_a_tuning_job_names_it_as_the_submission_does(cloud_env, tmp_path, sig, status):
    # It said "detached: tuning job #1 keeps running · ...": no id and no resource name, the only way to the job from
    # a machine that does not have the short id (the CI runner a SIGTERM comes from), as the submission's own line has.
    gcs, vertex = cloud_env

    def following():
        deadline = time.monotonic() + 60
        while not vertex.calls("GetHyperparameterTuningJob"):
            assert time.monotonic() < deadline, "ftcli never started following the tuning job"
            time.sleep(0.1)

    code, out, err = ctrl_c_train(["--task", "imdb", "--gpu", "T4", "--trials", "2"], dict(os.environ), tmp_path,
                                  following, command="tune", sig=sig)
    (name,) = vertex.tuning_jobs
    assert code == status, err
    assert "Traceback" not in err
    assert f"interrupted; tuning job #1 {name.rsplit('/', 1)[-1]} keeps running ({name})" in err
    # (not "Follow it": describe shows the trials as they are, it follows nothing)
    assert "Its trials: ftcli jobs describe 1   cancel it: ftcli jobs cancel 1" in err and "Follow it" not in err
    assert vertex.tuning_jobs[name].state.name == "JOB_STATE_PENDING"  # nothing cancelled behind the user's back


def test_a_signal_before_the_followed_jobs_state_was_read_says_it_is_not_known(cloud_env, cloud_logging, tmp_path):
    # `ftcli train` following the job it created; SIGTERM while the follower read the job's state for the first time
    # (held there): it said "detached; the job keeps running", of a job it had not yet read. It says what it knows.
    from tests.cli.helpers import signal_when_held

    env = {**os.environ, "FTCLI_LOGGING_ENDPOINT": cloud_logging.endpoint, "FTCLI_LOGS_INTERVAL": "0.1"}
    code, out, err = signal_when_held("ftcli.follow:follow_job", 1, ["train", "--task", "imdb", "--gpu", "T4"],
                                      signal.SIGTERM, tmp_path / "held", tmp_path, env)
    assert code == 143, err
    assert "next: ftcli logs 1" in out and "Traceback" not in err and "keeps running" not in err, err
    assert err.strip().splitlines()[-1] == (
        "interrupted; job 1's state was still being read (whether it runs on is not known here). Follow it: "
        "ftcli logs 1   its state: ftcli jobs describe 1   cancel: ftcli jobs cancel 1"), err


@pytest.mark.parametrize(("held", "at", "printing"), [
    # the summary after the end: its cost (held where it begins), the study's state, the failed trial's hint
    ("ftcli.cli.cost:say_spent", 1, "its summary was still being printed"),
    # the last read of the study, which found it ended: its state line (the 2nd; the 1st is RUNNING's)
    ("ftcli.cli.watch:tuning_waiting_for", 2, "its last changes were still being printed")], ids=["summary", "end"])
def test_a_signal_once_a_followed_tuning_job_has_ended_says_it_ended(cloud_env, tmp_path, held, at, printing):
    # `ftcli tune` following its study, which FAILED (a trial INFEASIBLE); SIGTERM while the end was printed: the
    # summary was printed outside the follower's signal handling, and ftcli said the app's bare "interrupted"; during
    # the last read's lines it said "tuning job #1 ... keeps running ... cancel it" of a study that had ended. It says
    # the state the study ended in, what was being printed, and where to see it again.
    from tests.cli.helpers import signal_when_held
    from tests.emulators.vertex import add_trial

    gcs, vertex = cloud_env
    lr = {"learning_rate": 3e-05}
    vertex.next_tuning_scripts = [["RUNNING", add_trial("1", "ACTIVE", lr),
                                   add_trial("1", "INFEASIBLE", lr, reason="The replica workerpool0-0 exited with a "
                                             "non-zero status of 1."), "FAILED"]]
    code, out, err = signal_when_held(held, at, ["tune", "--task", "imdb", "--gpu", "T4", "--trials", "1"],
                                      signal.SIGTERM, tmp_path / "held", tmp_path,
                                      {**os.environ, "FTCLI_LOGS_INTERVAL": "0.01"})
    (name,) = vertex.tuning_jobs
    assert vertex.tuning_jobs[name].state.name == "JOB_STATE_FAILED"
    assert code == 143, err
    assert "trial 1 INFEASIBLE" in out and "Traceback" not in err and "keeps running" not in err, err
    assert err.strip().splitlines()[-1] == (
        f"interrupted; tuning job 1 has ended: FAILED ({printing}). Its trials: ftcli jobs describe 1"), err


@pytest.mark.parametrize(("command", "sig", "status"), [
    ("train", signal.SIGINT, 130), ("tune", signal.SIGTERM, 143)])
def test_json_of_an_interrupted_submission_still_names_the_job_it_created(cloud_env, tmp_path, command, sig, status):
    # With --json, a signal in the create call left stdout empty: the job was named on stderr only, and a script that
    # reads stdout for the job's name (to follow it, or cancel it) had nothing while the job ran on, billed. Now stdout
    # has the object a finished submission prints, marked "interrupted"; without a job, stdout stays empty.
    gcs, vertex = cloud_env
    code, out, err = signal_in_create(vertex, tmp_path, command, sig, "--json")
    (name,) = vertex.tuning_jobs if command == "tune" else vertex.jobs
    assert code == status, err
    assert len(out.splitlines()) == 1, out
    said = json.loads(out)
    assert said["interrupted"] is True and said["name"] == name and said["short_id"] == 1
    assert said["id"] == name.rsplit("/", 1)[-1] and said["base_output_dir"].startswith("gs://ftcli-test/team/")
    assert "keeps running" in err and "Traceback" not in err


@pytest.mark.parametrize(("command", "sig", "mode"), [("train", signal.SIGTERM, "--json"),
                                                    ("tune", signal.SIGINT, "--json"), ("train", signal.SIGINT, "")],
                         ids=["train-json", "tune-json", "train-follow"])
def test_an_interrupted_submission_behind_a_reader_that_reads_nothing_names_the_job_and_ends(cloud_env, tmp_path,
                                                                                            command, sig, mode):
    # `ftcli train --json ... | reader` whose reader had stopped reading (a hung script, its pipe full), then a signal
    # in the create call: the object that names the job waited on that reader forever, and ftcli never said, on
    # stderr, which job keeps running, nor exited. Without --json, Ctrl-C while "submitted job #1" waited on the reader
    # named the job and never exited. It waits a few seconds for the reader (output.LAST_WRITE_PATIENCE), then exits.
    from ftcli.output import LAST_WRITE_PATIENCE
    from tests.cli.helpers import signal_behind_a_full_pipe

    gcs, vertex = cloud_env
    with SlowCreateProxy(vertex.address, delay=60 if mode else 0) as proxy:
        env = {**os.environ, "FTCLI_VERTEX_ENDPOINT": f"http://127.0.0.1:{proxy.port}"}

        def created():
            assert proxy.created.wait(60), "the create call never arrived"
            time.sleep(0.5)

        code, took, out, err = signal_behind_a_full_pipe(
            [*FTCLI, command, "--task", "imdb", "--gpu", "T4", *([mode] if mode else []),
             *(["--trials", "2"] if command == "tune" else [])], env, tmp_path, sig, ready=created if mode else None)
    (name,) = vertex.tuning_jobs if command == "tune" else vertex.jobs
    what = "tuning job" if command == "tune" else "job"
    assert code == 128 + sig and took < LAST_WRITE_PATIENCE + 5, (code, took, err)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert f"interrupted; {what} #1 {name.rsplit('/', 1)[-1]} keeps running ({name})" in err, err


@pytest.mark.parametrize(("command", "mode"), [("train", "--json"), ("train", "--detach"), ("tune", "--json")])
def test_a_sigterm_while_the_created_job_waits_on_a_reader_that_reads_nothing_names_it(cloud_env, tmp_path, command,
                                                                                       mode):
    # `ftcli train --json ... | reader` whose reader had stopped reading, then SIGTERM (a CI step's timeout) while the
    # created job was printed: ftcli was killed without a word (exit -15), the job running on unnamed; Ctrl-C said only
    # "interrupted". The job is named on stderr, within output.LAST_WRITE_PATIENCE.
    from ftcli.output import LAST_WRITE_PATIENCE
    from tests.cli.helpers import signal_behind_a_full_pipe

    gcs, vertex = cloud_env
    code, took, out, err = signal_behind_a_full_pipe(
        [*FTCLI, command, "--task", "imdb", "--gpu", "T4", mode, *(["--trials", "2"] if command == "tune" else [])],
        dict(os.environ), tmp_path, signal.SIGTERM)
    (name,) = vertex.tuning_jobs if command == "tune" else vertex.jobs
    what = "tuning job" if command == "tune" else "job"
    assert code == 143 and took < LAST_WRITE_PATIENCE + 5, (code, took, err)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert f"interrupted; {what} #1 {name.rsplit('/', 1)[-1]} keeps running ({name})" in err, err
    state = vertex.tuning_jobs[name].state if command == "tune" else vertex.job(name).state
    assert state.name == "JOB_STATE_PENDING"
