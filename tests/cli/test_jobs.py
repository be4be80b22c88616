"""`ftcli jobs list | describe | cancel` against the JobService and GCS emulators: the table fits 80 columns and
shows each finished job's headline metric, --json is one object per job, a finished job cannot be cancelled."""

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys

import grpc
import pytest

from tests.cli.helpers import GrpcProxy, run_cli
from tests.conftest import use_price_file

FTCLI = [sys.executable, "-c", "from ftcli.cli.app import main; main()"]
LONG_MODEL = "google/bert-large-uncased-whole-word-masking-finetuned-squad-and-more"


def submit(capsys, *args) -> dict:
    r = run_cli(capsys, "train", "--detach", "--json", *args)
    assert r.code == 0, r.err
    return json.loads(r.out)


def finish(gcs, vertex, job: dict, metrics: dict | None) -> None:
    vertex.set_state(job["name"], "SUCCEEDED")
    if metrics is not None:
        prefix = job["base_output_dir"].removeprefix("gs://ftcli-test/")
        gcs.write("ftcli-test", f"{prefix}/model/metrics.json", json.dumps(metrics).encode())


def three_jobs(capsys, gcs, vertex):
    imdb = submit(capsys, "--task", "imdb", "--gpu", "T4")
    finish(gcs, vertex, imdb, {"eval_accuracy": 0.91234, "eval_macro_f1": 0.9, "per_label": {"pos": {"f1": 0.9}}})
    multi = submit(capsys, "--task", "imdb", "--gpu", "L4x2", "--model", LONG_MODEL)
    finish(gcs, vertex, multi, {"eval_micro_f1": 0.8101, "eval_macro_f1": 0.7})
    running = submit(capsys, "--task", "mnli", "--gpu", "A100x8")
    vertex.set_state(running["name"], "RUNNING")
    return imdb, multi, running


def test_list_is_a_table_that_fits_80_columns_with_the_metrics(capsys, cloud_env):
    gcs, vertex = cloud_env
    three_jobs(capsys, gcs, vertex)
    r = subprocess.run([*FTCLI, "jobs", "list"], capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["JOB", "STATE", "TASK", "MODEL", "GPU", "AGE", "TIME", "METRIC"]
    assert all(len(line) <= 80 for line in lines), [len(x) for x in lines]
    newest, multi, imdb = lines[1:]
    assert newest.split()[:3] == ["3", "RUNNING", "mnli"] and "A100x8" in newest
    assert multi.split()[:3] == ["2", "SUCCEEDED", "imdb"] and "L4x2" in multi and "micro-F1 0.810" in multi
    assert "…" in multi  # the long model name was shortened to fit
    assert imdb.split()[:2] == ["1", "SUCCEEDED"] and "T4x1" in imdb and "acc 0.912" in imdb


@pytest.mark.parametrize("width", [40, 30, 20])
def test_a_terminal_too_narrow_for_the_table_loses_no_column_without_a_word(capsys, cloud_env, width):
    # At COLUMNS=40 (less than every column's header needs) the lines were cropped at the terminal's edge: TIME became
    # "T" and METRIC was gone, with no mark. Now the model and the task give way, said on stderr; the numbers, the
    # GPU and the metric are never cut, and lines still too wide are printed whole, for the terminal to wrap. At 30
    # and 20 (a split pane) Rich still squeezed the table into the terminal: AGE, then GPU and TIME, were left no
    # room at all and vanished, the note naming TASK and MODEL alone.
    gcs, vertex = cloud_env
    three_jobs(capsys, gcs, vertex)
    r = subprocess.run([*FTCLI, "jobs", "list"], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": str(width)})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["JOB", "STATE", "GPU", "AGE", "TIME", "METRIC"]
    at = lines[0].index("METRIC")
    assert [line[at:].strip() for line in lines[1:]] == ["-", "micro-F1 0.810", "acc 0.912"], lines
    assert [line.split()[2] for line in lines[1:]] == ["A100x8", "L4x2", "T4x1"], lines
    assert all(re.fullmatch(r"\d+[smhd] +(\d+[smhd]|-)", line[lines[0].index("GPU") + 6:at].strip())
               for line in lines[1:]), lines  # AGE and TIME
    assert r.stderr == f"(TASK and MODEL left out to fit {width} columns; a wider terminal or --json shows them)\n"


def test_at_80_columns_long_job_ids_and_costs_cut_no_number_nor_gpu(capsys, cloud_env, tmp_path, monkeypatch):
    # Jobs without a short id here (another machine's, or --all) show 19-digit ids; with a COST column the table at
    # 80 columns cut the metric's number (`acc 0.…` for 0.912) and the GPU (`L4…`). The model gives way instead.
    gcs, vertex = cloud_env
    three_jobs(capsys, gcs, vertex)
    import shutil

    shutil.rmtree(tmp_path / "state")  # no short ids: the jobs were submitted elsewhere
    use_price_file(tmp_path, monkeypatch)
    r = subprocess.run([*FTCLI, "jobs", "list"], capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), [len(x) for x in lines]
    assert lines[0].split() == ["JOB", "STATE", "TASK", "GPU", "AGE", "TIME", "COST", "METRIC"]
    assert "…" not in r.stdout
    rows = [line.split() for line in lines[1:]]
    assert [(len(x[0]), x[1], x[2], x[3]) for x in rows] == [
        (19, "RUNNING", "mnli", "A100x8"), (19, "SUCCEEDED", "imdb", "L4x2"), (19, "SUCCEEDED", "imdb", "T4x1")]
    assert [x[6:] for x in rows] == [["-", "-"], ["-", "micro-F1", "0.810"], ["$0.00", "acc", "0.912"]]
    assert r.stderr == "(MODEL left out to fit 80 columns; a wider terminal or --json shows it)\n"
    r = subprocess.run([*FTCLI, "jobs", "list"], capture_output=True, text=True, env={**os.environ, "COLUMNS": "100"})
    assert r.stdout.splitlines()[0].split() == ["JOB", "STATE", "TASK", "MODEL", "GPU", "AGE", "TIME", "COST",
                                                "METRIC"] and r.stderr == ""


def test_a_long_metric_name_is_cut_never_its_number():
    from ftcli.cli.jobs import _metric

    assert _metric({"metric": {"name": "eval_accuracy", "value": 0.4}}) == "acc 0.400"
    assert _metric({"metric": {"name": "eval_my_own_weighted_recall", "value": 0.4}}) == "my-own-we… 0.400"  # 16 wide
    assert _metric({"metric": {"name": "eval_mse", "value": 123456789.0}}) == "M… 123456789.000"
    assert _metric({"metric": None}) == "-"


def test_describe_of_a_failed_job_points_at_its_logs(capsys, cloud_env):
    # It showed Vertex's error and nothing on where the reason is: the job's own last lines.
    gcs, vertex = cloud_env
    job = submit(capsys, "--task", "imdb", "--gpu", "T4")
    vertex.set_state(job["name"], "FAILED", "The replica workerpool0-0 exited with a non-zero status of 1.")
    r = run_cli(capsys, "jobs", "describe", "last")
    assert r.code == 0, r.err
    text = " ".join(r.out.split())
    assert "The replica workerpool0-0 exited with a non-zero status of 1. (its last lines: ftcli logs 1 --no-follow)" \
        in text, r.out


def test_a_limit_below_one_is_one_line_and_the_help_says_the_floor_in_words(capsys, cloud_env):
    # Click's range check wrote "[default: 20; x>=1]" in the help and "0 is not in the range x>=1"
    vertex = cloud_env[1]
    for bad in ("0", "-3"):
        r = run_cli(capsys, "jobs", "list", "--limit", bad)
        assert r.code == 2 and not r.out
        assert r.err.splitlines() == [f"error: --limit {bad}: give 1 or more",
                                      "hint: ftcli jobs list --limit 5 lists the 5 newest"]
    assert not vertex.calls("ListCustomJobs")  # refused before anything is read
    r = run_cli(capsys, "jobs", "list", "-h")
    assert "x>=" not in r.out and "newest first (1 or more)" in " ".join(r.out.split())


def test_list_json_is_one_object_per_job(capsys, cloud_env):
    gcs, vertex = cloud_env
    three_jobs(capsys, gcs, vertex)
    r = run_cli(capsys, "jobs", "list", "--json")
    assert r.code == 0, r.err
    rows = [json.loads(line) for line in r.out.splitlines()]
    assert [(x["short_id"], x["state"], x["gpu"], x["task"]) for x in rows] == [
        (3, "RUNNING", "A100x8", "mnli"), (2, "SUCCEEDED", "L4x2", "imdb"), (1, "SUCCEEDED", "T4x1", "imdb")]
    # the metric as the trainer wrote it in metrics.json (the table says "acc"), as describe --json's "metrics" has it
    assert rows[2]["metric"] == {"name": "eval_accuracy", "value": 0.91234} and rows[0]["metric"] is None
    assert rows[1]["metric"] == {"name": "eval_micro_f1", "value": 0.8101}
    described = json.loads(run_cli(capsys, "jobs", "describe", "1", "--json").out)
    assert described["metric"] == rows[2]["metric"] and rows[2]["metric"]["name"] in described["metrics"]
    assert rows[2]["hardware"] == "1 x T4 on n1-standard-8" and rows[2]["machines"] == 1
    assert rows[1]["model"] == LONG_MODEL.rsplit("/", 1)[1]  # the label's value: the model's last path segment


def test_list_has_a_cost_column_only_with_rates_and_still_fits_80_columns(capsys, cloud_env, tmp_path, monkeypatch):
    gcs, vertex = cloud_env
    three_jobs(capsys, gcs, vertex)
    rows = [json.loads(line) for line in run_cli(capsys, "jobs", "list", "--json").out.splitlines()]
    assert all(r["cost_usd"] is None for r in rows)  # no price file: nothing to say
    use_price_file(tmp_path, monkeypatch)  # T4 on n1-standard-8 only: job 1
    from ftcli import prices

    parsed = []
    real_parse = prices.parse
    monkeypatch.setattr(prices, "parse", lambda text, path: parsed.append(path) or real_parse(text, path))
    rows = [json.loads(line) for line in run_cli(capsys, "jobs", "list", "--json").out.splitlines()]
    assert len(parsed) == 1  # read and checked once for the three jobs
    one = rows[2]
    started, ended = (dt.datetime.fromisoformat(one[k]) for k in ("started", "ended"))
    assert one["cost_usd"] == pytest.approx(0.75 * (ended - started).total_seconds() / 3600, abs=1e-4)
    assert rows[0]["cost_usd"] is None and rows[1]["cost_usd"] is None  # A100x8, L4x2: no rate in the file
    r = subprocess.run([*FTCLI, "jobs", "list"], capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["JOB", "STATE", "TASK", "MODEL", "GPU", "AGE", "TIME", "COST", "METRIC"]
    assert all(len(line) <= 80 for line in lines), [len(x) for x in lines]
    assert "$0.00" in lines[3] and " - " in lines[1]  # job 1 ran a moment: $0.00; job 3 has no rate
    assert "micro-F1 0.810" in lines[2] and "acc 0.912" in lines[3]  # the metrics stay whole
    # a broken price file: one warning, the list without costs
    use_price_file(tmp_path, monkeypatch, 'source = "x"\n')
    r = run_cli(capsys, "jobs", "list")
    assert r.code == 0 and "COST" not in r.out and r.out.count("\n") == 4
    assert "warning:" in r.err and "read = YYYY-MM-DD" in r.err


def test_a_spot_jobs_cost_is_an_on_demand_ceiling_in_list_describe_and_json(capsys, cloud_env, tmp_path,
                                                                            monkeypatch):
    # A --spot job was shown as costing "about" its on-demand amount, and its cost_usd was that amount: Spot is
    # billed at lower prices the price file does not hold.
    gcs, vertex = cloud_env
    spot = submit(capsys, "--task", "imdb", "--gpu", "T4", "--spot")
    finish(gcs, vertex, spot, None)
    plain = submit(capsys, "--task", "imdb", "--gpu", "T4")
    finish(gcs, vertex, plain, None)
    use_price_file(tmp_path, monkeypatch)  # T4 on n1-standard-8: $0.75 an hour, on-demand
    rows = [json.loads(line) for line in run_cli(capsys, "jobs", "list", "--json").out.splitlines()]
    on_demand, spot_row = rows
    assert on_demand["cost_usd"] is not None and on_demand["cost_usd"] == on_demand["cost_usd_on_demand"]
    started, ended = (dt.datetime.fromisoformat(spot_row[k]) for k in ("started", "ended"))
    assert spot_row["cost_usd"] is None
    assert spot_row["cost_usd_on_demand"] == pytest.approx(0.75 * (ended - started).total_seconds() / 3600, abs=1e-4)
    r = subprocess.run([*FTCLI, "jobs", "list"], capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "COST" in lines[0] and "≤$0.00" in lines[2] and "≤" not in lines[1]
    r = run_cli(capsys, "jobs", "describe", "1")
    assert r.code == 0, r.err
    text = " ".join(r.out.split())
    assert "at most $0.00 (" in text and "at $0.75 an hour, on-demand; Spot is billed at lower Spot prices, not in " \
        "your price file; us-central1 rates from my contract, read 2026-11-02)" in text
    assert "about $" not in text
    obj = json.loads(run_cli(capsys, "jobs", "describe", "1", "--json").out)
    assert obj["cost_usd"] is None and obj["cost_usd_on_demand"] == pytest.approx(spot_row["cost_usd_on_demand"])


def test_a_reservation_jobs_cost_is_not_said_as_its_bill(capsys, cloud_env, tmp_path, monkeypatch):
    # A --reservation job was listed and described as an on-demand one ("$0.05", "about $0.05", cost_usd set), though
    # Compute Engine bills the reservation for its life, not the job at Vertex's on-demand rates.
    gcs, vertex = cloud_env
    job = submit(capsys, "--task", "imdb", "--gpu", "T4", "--reservation",
                 "projects/test-project/zones/us-central1-b/reservations/t4-pool")
    finish(gcs, vertex, job, None)
    use_price_file(tmp_path, monkeypatch)
    (row,) = [json.loads(line) for line in run_cli(capsys, "jobs", "list", "--json").out.splitlines()]
    assert row["provisioning"] == "Reservation" and row["cost_usd"] is None and row["cost_usd_on_demand"] is not None
    r = subprocess.run([*FTCLI, "jobs", "list"], capture_output=True, text=True, env={**os.environ, "COLUMNS": "100"})
    assert r.returncode == 0, r.stderr
    header, line = r.stdout.splitlines()[:2]
    assert "COST" in header and line.rstrip().endswith(" -") and "$" not in line, r.stdout
    text = " ".join(run_cli(capsys, "jobs", "describe", "1").out.split())
    assert "about $" not in text and "at most $" not in text
    assert "on-demand; a reservation's machines are billed by Compute Engine for as long as the reservation exists" \
        in text, text


def test_describe_shows_gpu_machine_output_and_metrics(capsys, cloud_env):
    gcs, vertex = cloud_env
    imdb, _, _ = three_jobs(capsys, gcs, vertex)
    r = run_cli(capsys, "jobs", "describe", "1")
    assert r.code == 0, r.err
    assert "1 x T4 on n1-standard-8" in r.out and "SUCCEEDED" in r.out
    assert imdb["base_output_dir"] in r.out
    assert "accuracy 0.9123" in r.out and "macro_f1 0.9" in r.out and "per_label" not in r.out
    r = run_cli(capsys, "jobs", "describe", "1", "--json")
    obj = json.loads(r.out)
    assert obj["metrics"] == {"eval_accuracy": 0.91234, "eval_macro_f1": 0.9}
    assert obj["resource"]["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["machineType"] == "n1-standard-8"


def test_describe_says_the_metrics_are_the_kept_steps(capsys, cloud_env):
    # With --keep-best the metrics shown are the best evaluation's weights', not the last step's: describe did not say
    gcs, vertex = cloud_env
    kept = submit(capsys, "--task", "imdb", "--gpu", "T4", "--early-stopping", "6", "--eval-every", "3")
    finish(gcs, vertex, kept, {"eval_accuracy": 1.0, "eval_loss": 0.01, "global_step": 39, "best_global_step": 21,
                               "best_epoch": 1.4, "metric_for_best_model": "eval_accuracy", "best_metric": 1.0,
                               "last_eval": {"global_step": 39, "eval_accuracy": 0.5},
                               "early_stopping": {"patience": 6, "threshold": 0.0, "stopped": True,
                                                  "evaluations_without_improvement": 6}})
    plain = submit(capsys, "--task", "imdb", "--gpu", "T4")
    finish(gcs, vertex, plain, {"eval_accuracy": 0.9, "global_step": 60})
    r = run_cli(capsys, "jobs", "describe", "1")
    assert r.code == 0, r.err
    lines = [" ".join(line.split()) for line in r.out.splitlines()]
    row = lines.index("weights kept step 21 of 39 (best acc=1.0000); the metrics are its own; stopped early "
                      "(--early-stopping 6)")
    assert lines[row + 1].startswith("metrics accuracy 1 · loss 0.01")
    r = run_cli(capsys, "jobs", "describe", "2")
    assert r.code == 0 and "accuracy 0.9" in r.out and "kept" not in r.out


def test_describe_json_gives_a_metric_that_is_not_a_number_as_null(capsys, cloud_env):
    # A NaN in metrics.json (a diverged loss, an undefined Pearson) came out of --json as a bare NaN, which is not JSON:
    # jq and other strict readers refused the whole line.
    gcs, vertex = cloud_env
    job = submit(capsys, "--task", "stsb", "--gpu", "T4")
    finish(gcs, vertex, job, {"eval_pearson": float("nan"), "eval_loss": 0.5, "global_step": 10})

    def strict(text: str):
        raise AssertionError(f"not JSON: {text}")

    for args in (("jobs", "describe", "1", "--json"), ("jobs", "list", "--json")):
        r = run_cli(capsys, *args)
        assert r.code == 0, r.err
        obj = json.loads(r.out.splitlines()[0], parse_constant=strict)
        if args[1] == "describe":
            assert obj["metrics"] == {"eval_pearson": None, "eval_loss": 0.5, "global_step": 10}


def test_describe_says_what_the_job_cost_at_the_users_rates(capsys, cloud_env, tmp_path, monkeypatch):
    gcs, vertex = cloud_env
    three_jobs(capsys, gcs, vertex)
    r = run_cli(capsys, "jobs", "describe", "1")
    assert "cost" not in r.out  # no price file: no cost row, no noise
    use_price_file(tmp_path, monkeypatch)
    r = run_cli(capsys, "jobs", "describe", "1")
    assert r.code == 0, r.err
    assert "at $0.75 an hour, on-demand; us-central1 rates from my contract, read 2026-11-02)" in r.out
    obj = json.loads(run_cli(capsys, "jobs", "describe", "1", "--json").out)
    started, ended = (dt.datetime.fromisoformat(obj[k]) for k in ("started", "ended"))
    assert obj["cost_usd"] == pytest.approx(0.75 * (ended - started).total_seconds() / 3600, abs=1e-4)
    r = run_cli(capsys, "jobs", "describe", "2")  # L4x2 on g2-standard-24: the file has no rate for them
    assert "no amount: no us-central1 rate for g2-standard-24, L4 in the price file" in r.out


def test_describe_a_cpu_job_says_cpu_not_the_machine_twice(capsys, cloud_env):
    # It used to print "n1-standard-8 on n1-standard-8".
    gcs, vertex = cloud_env
    submit(capsys, "--task", "imdb", "--gpu", "none")
    r = run_cli(capsys, "jobs", "describe", "last")
    assert r.code == 0, r.err
    assert "n1-standard-8 (CPU)" in r.out and "on n1-standard-8" not in r.out


def test_cancelling_a_finished_job_is_one_line_and_sends_nothing(capsys, cloud_env):
    gcs, vertex = cloud_env
    job = submit(capsys, "--task", "imdb", "--gpu", "T4")
    vertex.set_state(job["name"], "SUCCEEDED")
    r = run_cli(capsys, "jobs", "cancel", "1", "--yes")
    assert r.code == 1
    assert r.err.startswith("error: job 1 has already ended (SUCCEEDED): there is nothing to cancel")
    assert len(r.err.splitlines()) == 1 and "Traceback" not in r.err
    assert not vertex.calls("CancelCustomJob")


def test_a_cancelled_jobs_description_has_no_error_that_repeats_its_state(capsys, cloud_env):
    # Vertex's error of a cancelled job is its note of the cancel (code CANCELLED, "CANCELED"): describe showed it as
    # "error  CANCELED (its last lines: ftcli logs 1 --no-follow)", a failure to look into. A reason given with a
    # cancel is still said.
    gcs, vertex = cloud_env
    job = submit(capsys, "--task", "imdb", "--gpu", "T4")
    assert run_cli(capsys, "jobs", "cancel", "1", "--yes").code == 0
    r = run_cli(capsys, "jobs", "describe", "1")
    assert r.code == 0, r.err
    assert r.out.split()[1] == "CANCELLED" and "error" not in r.out and "CANCELED" not in r.out, r.out
    r = run_cli(capsys, "jobs", "describe", "1", "--json")
    assert json.loads(r.out)["error"] == "CANCELED"  # --json keeps Vertex's value
    vertex.set_state(job["name"], "CANCELLED", "Job exceeded its maximum wait time.")
    r = run_cli(capsys, "jobs", "describe", "1")
    # never started, so no logs to point at (it said "(its last lines: ftcli logs 1 --no-follow)", which show none)
    assert "error     Job exceeded its maximum wait time.\n" in r.out, r.out


def test_cancel_with_stdin_closed_cancels_without_asking(capsys, cloud_env):
    # `ftcli jobs cancel 1 <&-` (a script or daemon with no stdin): sys.stdin is None there, and asking it isatty()
    # was an AttributeError traceback, with the job left running.
    gcs, vertex = cloud_env
    job = submit(capsys, "--task", "imdb", "--gpu", "T4")
    r = subprocess.run(["sh", "-c", 'exec "$@" <&-', "sh", *FTCLI, "jobs", "cancel", "1"], capture_output=True,
                       text=True, env={**os.environ})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"cancel requested for job 1 ({job['id']})") and r.stderr == ""
    assert [x.name for x in vertex.calls("CancelCustomJob")] == [job["name"]]


def test_a_name_the_locale_cannot_encode_is_shown_escaped_not_a_traceback(capsys, cloud_env):
    # Under a locale that is not UTF-8 (PYTHONIOENCODING=ascii stands in for it), stdout's strict encoder ended
    # `jobs describe` with a UnicodeEncodeError traceback on the job's name (and on ftcli's own '·').
    gcs, vertex = cloud_env
    job = submit(capsys, "--task", "imdb", "--gpu", "T4", "--display-name", "critiques-café")
    r = subprocess.run([*FTCLI, "jobs", "describe", "1"], capture_output=True, text=True, encoding="ascii",
                       errors="strict", env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].split() == ["critiques-caf\\xe9", "PENDING"]
    assert f"  job       #1 \\xb7 {job['name']}" in r.stdout and r.stderr == ""
    r = subprocess.run([*FTCLI, "jobs", "describe", "1", "--json"], capture_output=True, env={**os.environ,
                       "PYTHONIOENCODING": "ascii"})
    assert r.returncode == 0 and json.loads(r.stdout)["display_name"] == "critiques-café"


def test_cancel_json_and_a_race_with_the_end(capsys, cloud_env):
    gcs, vertex = cloud_env
    job = submit(capsys, "--task", "imdb", "--gpu", "T4")
    r = run_cli(capsys, "jobs", "cancel", "1", "--json")
    assert r.code == 0, r.err
    got = json.loads(r.out)
    assert (got["name"], got["short_id"]) == (job["name"], 1) and got["state"] in ("CANCELLING", "CANCELLED")
    # ended between ftcli's read and the cancel: Vertex's FAILED_PRECONDITION is one line too
    other = submit(capsys, "--task", "imdb", "--gpu", "T4")
    vertex.fail_next("CancelCustomJob", grpc.StatusCode.FAILED_PRECONDITION,
                     message=f"Cannot cancel CustomJob {other['name']} in state JOB_STATE_SUCCEEDED.")
    r = run_cli(capsys, "jobs", "cancel", "2", "--yes")
    assert r.code == 1 and "Cannot cancel" in r.err and "Traceback" not in r.err


def test_cancel_json_says_what_the_job_cost_as_list_and_describe_do(capsys, cloud_env, tmp_path, monkeypatch):
    # It had no cost_usd, while jobs list/describe --json had one.
    gcs, vertex = cloud_env
    job = submit(capsys, "--task", "imdb", "--gpu", "T4")
    vertex.set_state(job["name"], "RUNNING")
    use_price_file(tmp_path, monkeypatch)  # T4 on n1-standard-8: $0.75 an hour
    r = run_cli(capsys, "jobs", "cancel", "1", "--yes", "--json")
    assert r.code == 0, r.err
    got = json.loads(r.out)
    assert got["cost_usd"] == pytest.approx(0.75 * got["duration_s"] / 3600, abs=1e-3) and got["cost_usd"] >= 0
    # a broken price file: the cancel is still made and reported, with one warning and no cost
    other = submit(capsys, "--task", "imdb", "--gpu", "T4")
    vertex.set_state(other["name"], "RUNNING")
    use_price_file(tmp_path, monkeypatch, 'source = "x"\n')
    r = run_cli(capsys, "jobs", "cancel", "2", "--yes", "--json")
    assert r.code == 0, r.err
    got = json.loads(r.out)
    assert got["cost_usd"] is None and got["state"] in ("CANCELLING", "CANCELLED")
    assert len(vertex.calls("CancelCustomJob")) == 2
    assert r.err.startswith("warning: price file ") and "read = YYYY-MM-DD" in r.err and "Traceback" not in r.err
    # describe goes on too: the job is shown, the price file's problem is a warning
    r = run_cli(capsys, "jobs", "describe", "2")
    assert r.code == 0 and "imdb" in r.out and "warning: price file " in r.err


def test_retries_say_what_is_retried(capsys, cloud_env):
    gcs, vertex = cloud_env
    submit(capsys, "--task", "imdb", "--gpu", "T4")
    vertex.fail_next("GetCustomJob", grpc.StatusCode.UNAVAILABLE, times=2)
    r = run_cli(capsys, "jobs", "describe", "1")
    assert r.code == 0, r.err
    assert r.err.count("Vertex AI did not answer GetCustomJob (503 ServiceUnavailable); retrying") == 2


@pytest.mark.parametrize("args", [("jobs", "list"), ("jobs", "describe", "1")])
def test_a_used_up_request_quota_on_a_read_says_to_wait_not_to_pick_another_gpu(capsys, cloud_env, args):
    # RESOURCE_EXHAUSTED on a read (ListCustomJobs, GetCustomJob) was said as a create's: "request more of ... or
    # pick another --gpu or --region", options these commands do not have and that change nothing about requests.
    gcs, vertex = cloud_env
    submit(capsys, "--task", "imdb", "--gpu", "T4")
    metric = "aiplatform.googleapis.com/resource_management_requests"
    method = "ListCustomJobs" if args[1] == "list" else "GetCustomJob"
    vertex.fail_next(method, grpc.StatusCode.RESOURCE_EXHAUSTED, message="Quota exceeded for quota metric "
                     "'Resource management (CRUD) requests' and limit 'per minute per region'",
                     quota_failure=[{"subject": "project:123456789012", "quota_metric": metric}])
    r = run_cli(capsys, *args)
    assert r.code == 1
    assert r.err.splitlines() == [
        f"error: quota exceeded ({metric}): Quota exceeded for quota metric 'Resource management (CRUD) requests' "
        "and limit 'per minute per region'",
        f"hint: wait a minute and try again: a quota on requests frees up within its minute; if it goes on, {metric} "
        "in us-central1 and its use are at https://console.cloud.google.com/iam-admin/quotas?project=test-project"]


def test_an_env_variable_error_names_the_variable(capsys, cloud_env, monkeypatch):
    monkeypatch.setenv("FTCLI_REGION", "us-centrall1")
    r = run_cli(capsys, "jobs", "list")
    assert r.code == 2
    assert "FTCLI_REGION: unknown Vertex AI region 'us-centrall1'; did you mean us-central1?" in r.err


def test_metrics_that_cannot_be_read_leave_a_gap_and_one_warning(capsys, cloud_env, monkeypatch):
    from tests.emulators.gcs import FaultyProxy

    gcs, vertex = cloud_env
    three_jobs(capsys, gcs, vertex)
    with FaultyProxy(gcs.url, status=403, fail_when=lambda m, t, n: "metrics.json" in t) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        r = run_cli(capsys, "jobs", "list", "--json")
    assert r.code == 0, r.err
    assert [x["metric"] for x in map(json.loads, r.out.splitlines())] == [None, None, None]
    assert r.err.count("warning: metrics not shown: permission denied") == 1 and "Traceback" not in r.err


def test_cancelling_a_tuning_job_and_a_race_with_its_end(capsys, cloud_env):
    gcs, vertex = cloud_env
    r = run_cli(capsys, "tune", "--task", "imdb", "--gpu", "T4", "--trials", "2", "--json")
    assert r.code == 0, r.err
    name = json.loads(r.out)["name"]
    r = run_cli(capsys, "jobs", "cancel", "1", "--yes", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["state"] == "CANCELLED" and vertex.tuning_jobs[name].state.name == "JOB_STATE_CANCELLED"
    assert json.loads(r.out)["cost_usd"] is None  # the key jobs list --json has; no price file: no amount
    r = run_cli(capsys, "jobs", "cancel", "1", "--yes")
    assert r.code == 1 and len(r.err.splitlines()) == 1
    assert r.err.startswith("error: tuning job 1 has already ended (CANCELLED): there is nothing to cancel")
    assert len(vertex.calls("CancelHyperparameterTuningJob")) == 1  # nothing sent for an ended job

    # ended between ftcli's read and the cancel: said as an ended job, not as Vertex's FAILED_PRECONDITION
    r = run_cli(capsys, "tune", "--task", "imdb", "--gpu", "T4", "--trials", "2", "--json")
    other = json.loads(r.out)["name"]

    vertex.fail_next("CancelHyperparameterTuningJob", grpc.StatusCode.FAILED_PRECONDITION, lose_response=True,
                     message=f"Cannot cancel HyperparameterTuningJob {other} in state JOB_STATE_CANCELLED.")
    r = run_cli(capsys, "jobs", "cancel", "2", "--yes")
    assert r.code == 1 and "Traceback" not in r.err
    assert r.err.startswith("error: tuning job 2 has already ended (CANCELLED)")


class HoldAfterCancel(GrpcProxy):
    """A gRPC proxy in front of the JobService emulator that, once a cancel has gone through, holds the next read of
    the job for a minute: the window between Vertex taking the cancel and ftcli reading the job again."""

    def __init__(self, upstream: str):
        import threading
        import time

        self.holding, cancelled = threading.Event(), threading.Event()

        def before(method: str) -> None:
            if cancelled.is_set() and method.endswith(("/GetCustomJob", "/GetHyperparameterTuningJob")):
                self.holding.set()
                time.sleep(60)

        def after(method: str) -> None:
            if method.endswith(("/CancelCustomJob", "/CancelHyperparameterTuningJob")):
                cancelled.set()

        super().__init__(upstream, before, after)


class HoldCancelAnswer(GrpcProxy):
    """A gRPC proxy in front of the JobService emulator that holds the answer to a cancel for a minute, the cancel
    carried out: the window in which ftcli cannot know whether Vertex took it."""

    def __init__(self, upstream: str):
        import threading
        import time

        self.holding = threading.Event()

        def after(method: str) -> None:
            if method.endswith(("/CancelCustomJob", "/CancelHyperparameterTuningJob")):
                self.holding.set()
                time.sleep(60)

        super().__init__(upstream, after=after)


def _signal_in_cancel(capsys, vertex, tmp_path, kind: str, proxy_class: type, sig: int) -> tuple[str, int, str, str]:
    """Submit a job (or tune), then `ftcli jobs cancel 1 --yes --json` through `proxy_class`, given `sig` half a second
    into its hold: (the job's name, exit status, stdout, stderr)."""
    import time

    from tests.cli.helpers import signal_child

    if kind == "job":
        name = submit(capsys, "--task", "imdb", "--gpu", "T4")["name"]
    else:
        r = run_cli(capsys, "tune", "--task", "imdb", "--gpu", "T4", "--trials", "2", "--json")
        assert r.code == 0, r.err
        name = json.loads(r.out)["name"]

    def held():
        assert proxy.holding.wait(60), "the proxy never held a call"
        time.sleep(0.5)

    with proxy_class(vertex.address) as proxy:
        env = {**os.environ, "FTCLI_VERTEX_ENDPOINT": f"http://127.0.0.1:{proxy.port}"}
        code, out, err = signal_child([*FTCLI, "jobs", "cancel", "1", "--yes", "--json"], env, tmp_path, held, sig)
    return name, code, out, err


@pytest.mark.parametrize(("kind", "sig", "status"), [("job", signal.SIGINT, 130), ("tuning job", signal.SIGINT, 130),
                                                     ("job", signal.SIGTERM, 143), ("job", signal.SIGHUP, 129)])
def test_ctrl_c_after_the_cancel_was_taken_says_it_was(capsys, cloud_env, tmp_path, kind, sig, status):
    """A Ctrl-C while the job was read again after Vertex took the cancel said only "interrupted": nobody could tell
    whether the job was being cancelled. It is said on stderr; stdout stays empty with --json, as the README's --json
    rule has it (the job ends without the script's help: nothing is left for it to act on). SIGTERM and SIGHUP killed
    ftcli without a word: they are said as Ctrl-C is."""
    gcs, vertex = cloud_env
    name, code, out, err = _signal_in_cancel(capsys, vertex, tmp_path, kind, HoldAfterCancel, sig)
    assert (code, out) == (status, "")
    assert "Traceback" not in err and err.splitlines()[-1] == (
        f"interrupted; the cancel of {kind} #1 {name.rsplit('/', 1)[-1]} was requested ({name}). Its state: ftcli "
        "jobs describe 1")
    assert len(vertex.calls("CancelHyperparameterTuningJob" if kind != "job" else "CancelCustomJob")) == 1


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_before_vertex_answered_the_cancel_says_where_to_look(capsys, cloud_env, tmp_path, sig, status):
    # Before Vertex answered, the cancel may have been taken (here it was) or not: "interrupted" alone said neither,
    # and SIGTERM killed ftcli without a word.
    gcs, vertex = cloud_env
    name, code, out, err = _signal_in_cancel(capsys, vertex, tmp_path, "job", HoldCancelAnswer, sig)
    assert (code, out) == (status, "")
    assert "Traceback" not in err and err.splitlines()[-1] == (
        f"interrupted; before Vertex answered the cancel of job #1 {name.rsplit('/', 1)[-1]} ({name}); whether it was "
        "taken: ftcli jobs describe 1")
    assert len(vertex.calls("CancelCustomJob")) == 1


def test_a_signal_in_a_cancel_behind_a_reader_that_reads_nothing_ends_ftcli(capsys, cloud_env, tmp_path):
    # `ftcli jobs cancel 1 --yes 2>&1 | reader` whose reader had stopped reading (a hung script, its pipe full), then
    # SIGTERM while the job was read again: the line that says the cancel was taken waited on that reader forever, and
    # ftcli never exited. It waits a few seconds for the reader (output.LAST_WRITE_PATIENCE), then exits without it.
    import time

    from ftcli.output import LAST_WRITE_PATIENCE
    from tests.cli.helpers import signal_behind_a_full_pipe

    gcs, vertex = cloud_env
    submit(capsys, "--task", "imdb", "--gpu", "T4")

    def held():
        assert proxy.holding.wait(60), "the proxy never held a call"
        time.sleep(0.5)

    with HoldAfterCancel(vertex.address) as proxy:
        env = {**os.environ, "FTCLI_VERTEX_ENDPOINT": f"http://127.0.0.1:{proxy.port}"}
        code, took, out, _ = signal_behind_a_full_pipe([*FTCLI, "jobs", "cancel", "1", "--yes"], env, tmp_path,
                                                       signal.SIGTERM, ready=held, stderr_too=True)
    assert code == 143 and took < LAST_WRITE_PATIENCE + 5, (code, took, out)
    assert len(vertex.calls("CancelCustomJob")) == 1


@pytest.mark.parametrize("command", [["jobs", "describe"], ["jobs", "cancel", "--yes"], ["logs", "--no-follow"],
                                     ["download"]])
def test_an_unknown_job_id_says_where_it_was_looked_for_and_how_to_look_elsewhere(capsys, cloud_env, command):
    # Found by hand: `ftcli logs 7100000000000000999` said only "job ... not found", with no way forward.
    gcs, vertex = cloud_env
    r = run_cli(capsys, *command, "7100000000000000999", "--region", "europe-west4")
    assert r.code == 1 and "Traceback" not in r.err
    assert r.err.splitlines()[0].startswith("error: job 7100000000000000999 not found: ")
    assert r.err.splitlines()[1] == (
        "hint: it was looked for in project test-project, region europe-west4: check the id, --project and --region "
        "(`ftcli jobs list --all --project test-project --region europe-west4` lists the jobs there)")
    assert not vertex.calls("CancelCustomJob")


def test_a_low_cost_jobs_cost_is_a_ceiling_not_an_about(capsys, cloud_env, tmp_path, monkeypatch):
    # A job another tool created with the deprecated LOW_COST strategy ("making potential use of spot resources")
    # was shown as costing "about" its on-demand amount, with cost_usd set.
    from google.cloud.aiplatform_v1 import Scheduling

    gcs, vertex = cloud_env
    job = submit(capsys, "--task", "imdb", "--gpu", "T4")
    with vertex._lock:
        vertex._jobs[job["name"]].job_spec.scheduling.strategy = Scheduling.Strategy.LOW_COST
    finish(gcs, vertex, job, None)
    use_price_file(tmp_path, monkeypatch)
    text = " ".join(run_cli(capsys, "jobs", "describe", "1").out.split())
    assert "at most $0.00 (" in text
    # one plain note, not "Low-cost (Spot where it can) is billed at lower Low-cost (Spot where it can) prices"
    assert "on-demand; Low-cost may run on Spot machines, billed at lower Spot prices, not in your price file;" in text
    assert "about $" not in text
    obj = json.loads(run_cli(capsys, "jobs", "describe", "1", "--json").out)
    assert obj["cost_usd"] is None and obj["cost_usd_on_demand"] is not None


def test_a_tuning_trials_job_and_a_model_study_show_the_task_and_the_model_that_ran(capsys, cloud_env):
    # `jobs list --all` showed a trial's CustomJob as TASK -, MODEL -: Vertex makes it from the tuning job's trial
    # spec, which has no labels. And a study over models showed the label's model (the task's default, which no
    # trial trained). Now the trial's row reads the trainer's options in its args (the trial's appended --model
    # last), and the study's row names its best trial's model.
    from tests.emulators.vertex import add_trial

    gcs, vertex = cloud_env
    r = run_cli(capsys, "tune", "--task", "imdb", "--gpu", "T4", "--trials", "2", "--json",
                "--search", "model=choice(bert-base-uncased,roberta-base)")
    assert r.code == 0, r.err
    name = json.loads(r.out)["name"]
    spec = type(vertex.tuning_jobs[name].trial_job_spec).to_dict(vertex.tuning_jobs[name].trial_job_spec)
    spec["worker_pool_specs"][0]["container_spec"]["args"] += ["--model", "roberta-base"]  # as Vertex appends it
    with vertex.client() as client:
        trial_job = client.create_custom_job(parent="projects/test-project/locations/us-central1",
                                             custom_job={"display_name": "trial-1", "job_spec": spec})
        assert not trial_job.labels
        vertex._tuning_scripts[name] = [add_trial("1", "SUCCEEDED", {"model": "roberta-base"}, 0.9)]
        client.get_hyperparameter_tuning_job(name=name)  # (the step applies on a read)
    rows = {x["id"]: x for x in map(json.loads, run_cli(capsys, "jobs", "list", "--all", "--json").out.splitlines())}
    trial_id, tuning_id = trial_job.name.rsplit("/", 1)[1], name.rsplit("/", 1)[1]
    assert (rows[trial_id]["task"], rows[trial_id]["model"]) == ("imdb", "roberta-base")
    assert (rows[tuning_id]["task"], rows[tuning_id]["model"]) == ("imdb", "roberta-base")
    r = subprocess.run([*FTCLI, "jobs", "list", "--all"], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "120"})
    trial_line = next(ln for ln in r.stdout.splitlines() if ln.startswith(trial_id))
    assert trial_line.split()[1:4] == ["PENDING", "imdb", "roberta-base"], r.stdout
    # a job that does not run ftcli's trainer says nothing it cannot know
    with vertex.client() as client:
        other = client.create_custom_job(parent="projects/test-project/locations/us-central1", custom_job={
            "display_name": "theirs", "job_spec": {"worker_pool_specs": [{
                "machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
                "container_spec": {"image_uri": "python:3.11", "args": ["--task", "x", "--model", "y"]}}]}})
    rows = {x["id"]: x for x in map(json.loads, run_cli(capsys, "jobs", "list", "--all", "--json").out.splitlines())}
    assert (rows[other.name.rsplit("/", 1)[1]]["task"], rows[other.name.rsplit("/", 1)[1]]["model"]) == (None, None)


def test_describe_of_a_job_not_started_says_what_it_waits_for(capsys, cloud_env):
    # The title said "QUEUED" and nothing else: not that a long QUEUED wait is the project's quota, nor where to raise
    # it; `ftcli logs` says both
    gcs, vertex = cloud_env
    job = submit(capsys, "--task", "imdb", "--gpu", "T4")
    vertex.set_state(job["name"], "QUEUED")
    r = run_cli(capsys, "jobs", "describe", "1")
    assert r.code == 0, r.err
    waiting = next(ln for ln in r.out.splitlines() if ln.lstrip().startswith("waiting"))
    assert "a long wait means the project lacks custom-training quota" in waiting
    assert "https://console.cloud.google.com/iam-admin/quotas?project=test-project" in r.out.replace("\n", "")
    vertex.set_state(job["name"], "RUNNING")
    assert "waiting" not in run_cli(capsys, "jobs", "describe", "1").out


def test_every_command_that_takes_a_job_takes_a_tuning_job_in_every_form(capsys, cloud_env, tmp_path):
    # What each command's -h (JOB_FORMS) and the README say: a tuning job by its short id, numeric id, resource name,
    # console URL or display name. jobs describe and cancel act on the tuning job; the others on its best trial (here
    # none yet: said of this tuning job, so it was the one resolved).
    from ftcli.values import TuningName

    gcs, vertex = cloud_env
    r = run_cli(capsys, "tune", "--task", "imdb", "--gpu", "T4", "--trials", "2", "--json", "--display-name", "study")
    assert r.code == 0, r.err
    name = TuningName.parse(json.loads(r.out)["name"])
    rows = tmp_path / "rows.csv"
    rows.write_text("text,label\nfine,positive\n")
    refs = ("1", name.id, name.full, name.console_url, "study")
    for ref in refs:
        r = run_cli(capsys, "jobs", "describe", ref)
        assert r.code == 0 and f"tuning job  #1 · {name.full}" in r.out, (ref, r.err)
        for args in (["logs", ref, "--no-follow"], ["download", ref, str(tmp_path / "model")], ["predict", ref, "hi"],
                     ["evaluate", ref, str(rows)], ["report", ref]):
            r = run_cli(capsys, *args)
            assert r.code == 2 and r.err.startswith(f"error: tuning job {name.id} has no trials yet (PENDING)\n"), (
                args, r.err)
    assert not (tmp_path / "model").exists()
    r = run_cli(capsys, "jobs", "cancel", refs[0], "--yes", "--json")
    assert r.code == 0 and json.loads(r.out)["name"] == name.full, r.err
    for ref in refs[1:]:
        r = run_cli(capsys, "jobs", "cancel", ref, "--yes")
        assert r.code == 1 and r.err.startswith("error: tuning job 1 has already ended (CANCELLED)"), (ref, r.err)
    assert len(vertex.calls("CancelHyperparameterTuningJob")) == 1


def test_a_tuning_job_without_trials_is_said_as_waiting_or_as_ended(capsys, cloud_env, tmp_path):
    # A tuning job cancelled before its first trial got "has no trials yet (CANCELLED)" and "hint: wait for the first
    # trial, or follow it: ftcli tune ... without --detach": nothing to wait for, and a hint that read as "submit
    # another".
    _, vertex = cloud_env
    r = run_cli(capsys, "tune", "--task", "imdb", "--gpu", "T4", "--trials", "2", "--json")
    assert r.code == 0, r.err
    job_id = json.loads(r.out)["name"].rsplit("/", 1)[-1]
    r = run_cli(capsys, "logs", "1", "--no-follow")
    assert r.code == 2 and r.err.splitlines() == [
        f"error: tuning job {job_id} has no trials yet (PENDING)",
        "hint: wait for its first trial to start; ftcli jobs describe 1 lists them as they do"], r.err
    # a trial asked for (or the latest) that has no job yet: where the trials are said, and that another can be picked
    from tests.emulators.vertex import add_trial

    with vertex._lock:
        add_trial("1", "REQUESTED", {})(next(iter(vertex._tuning.values())))
    r = run_cli(capsys, "logs", "1", "--trial", "1", "--no-follow")
    assert r.code == 2 and r.err.splitlines() == [
        f"error: trial 1 of tuning job {job_id} has not started a job yet (REQUESTED)",
        "hint: wait for it to start (ftcli jobs describe 1 lists the trials), or pick one that has with --trial N",
    ], r.err
    # a training job given --trial
    submit(capsys, "--task", "imdb", "--gpu", "T4")
    r = run_cli(capsys, "logs", "2", "--trial", "1", "--no-follow")
    assert r.code == 2 and r.err.splitlines() == [
        "error: --trial is for tuning jobs; 2 is a training job", "hint: run it again without --trial"], r.err
    with vertex._lock:
        del next(iter(vertex._tuning.values())).trials[:]
    assert run_cli(capsys, "jobs", "cancel", "1", "--yes").code == 0
    for args in (["logs", "1", "--no-follow"], ["download", "1", str(tmp_path / "model")]):
        r = run_cli(capsys, *args)
        assert r.code == 2 and r.err.splitlines() == [
            f"error: tuning job {job_id} ended (CANCELLED) before any trial started",
            "hint: ftcli jobs describe 1 says why"], (args, r.err)
    assert not (tmp_path / "model").exists()


def test_a_tuning_job_by_the_console_url_googles_sdk_prints(capsys, cloud_env, tmp_path, monkeypatch):
    # google-cloud-aiplatform prints "View HyperparameterTuningJob: https://console.cloud.google.com/agent-platform/
    # locations/R/training/ID?project=P", the address of a custom job's page too: it was "not a job reference", and
    # read as a CustomJob's it would be "not found". Now, as a numeric id, this machine's history or Vertex says which.
    from ftcli.values import TuningName

    gcs, vertex = cloud_env
    r = run_cli(capsys, "tune", "--task", "imdb", "--gpu", "T4", "--trials", "2", "--json")
    tuning = TuningName.parse(json.loads(r.out)["name"])
    job = submit(capsys, "--task", "imdb", "--gpu", "T4")["name"]
    for path in ("agent-platform", "ai/platform"):
        for full, said in ((tuning.full, f"tuning job  #1 · {tuning.full}"), (job, f"job       #2 · {job}")):
            url = f"https://console.cloud.google.com/{path}/locations/{tuning.region}/training/{full.rsplit('/')[-1]}" \
                  f"?project={tuning.project}"
            r = run_cli(capsys, "jobs", "describe", url)
            assert r.code == 0 and said in r.out, (url, r.out, r.err)
            with monkeypatch.context() as m:  # another machine: no history, Vertex says which
                m.setenv("FTCLI_STATE_DIR", str(tmp_path / "elsewhere"))
                r = run_cli(capsys, "jobs", "describe", url, "--json")
                assert r.code == 0 and json.loads(r.out)["name"] == full, (url, r.err)


@pytest.mark.parametrize(("sig", "json_out"), [(signal.SIGINT, False), (signal.SIGINT, True), (signal.SIGTERM, False),
                                               (signal.SIGHUP, True)],
                         ids=["table", "json", "sigterm", "sighup-json"])
def test_ctrl_c_while_the_listing_waits_on_a_reader_that_reads_nothing_ends_ftcli(capsys, cloud_env, sig, json_out):
    # `ftcli jobs list | reader` whose reader had stopped reading (a stopped pager, a hung script), then Ctrl-C: ftcli
    # said "interrupted" and never exited, Python's flush at exit waiting on the lines the Ctrl-C had cut short. It
    # waits a few seconds for the reader (output.LAST_WRITE_PATIENCE), then exits without them. A SIGTERM (a CI step's
    # timeout) or SIGHUP there killed ftcli without a word (exit -15, -1): now "interrupted" too, and 128 + the signal.
    from ftcli.output import LAST_WRITE_PATIENCE
    from tests.cli.helpers import signal_behind_a_full_pipe

    gcs, vertex = cloud_env
    three_jobs(capsys, gcs, vertex)
    code, took, out, err = signal_behind_a_full_pipe(
        [*FTCLI, "jobs", "list", *(["--json"] if json_out else [])], {**os.environ, "COLUMNS": "80"}, None, sig)
    assert code == (130 if sig == signal.SIGINT else 128 + sig) and took < LAST_WRITE_PATIENCE + 5, (code, took, err)
    assert "Traceback" not in err and "Exception ignored" not in err and err.splitlines()[-1] == "interrupted", err
