"""The user's price file (ftcli.prices): the rates that turn `cost:` lines into dollars, checked key by key."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftcli.catalog import estimate, resolve_gpu
from ftcli.errors import UsageError
from ftcli.prices import for_region, parse
from tests.conftest import fifo_read_at_most_for, use_price_file

GOOD = '''source = "https://cloud.google.com/vertex-ai/pricing"
read = 2026-11-20

[us-central1.machines]
n1-standard-8 = 0.5
n1-highcpu-16 = 0.25
[us-central1.gpus]
t4 = 0.4
A100-80GB = 4

[europe-west4.machines]
g2-standard-8 = 1.0
'''


def test_a_good_file_gives_one_table_per_region_with_gpu_names_as_ftcli_spells_them():
    tables = parse(GOOD, Path("p.toml"))
    us = tables["us-central1"]
    assert us.source == "https://cloud.google.com/vertex-ai/pricing" and us.read == "2026-11-20"
    assert us.machines == {"n1-standard-8": 0.5, "n1-highcpu-16": 0.25}
    assert us.gpus == {"T4": 0.4, "A100-80GB": 4.0}  # 't4' is T4, the name --gpu takes
    assert tables["europe-west4"].gpus == {}
    e = estimate(resolve_gpu("T4x2", "n1-standard-8"), replicas=3, reduction_server=2, timeout_s=2 * 3600,
                 region="us-central1", prices=us)
    assert e.per_hour == pytest.approx(3 * (0.5 + 2 * 0.4) + 2 * 0.25) and e.at_most == pytest.approx(2 * e.per_hour)


@pytest.mark.parametrize("text, says", [
    ('read = 2026-11-20\n', "needs source"),
    ('source = "x"\n', "needs read = YYYY-MM-DD"),
    ('source = "x"\nread = "last week"\n', "needs read = YYYY-MM-DD"),
    ('source = "x"\nread = 2026-11-20T10:00:00\n', "needs read = YYYY-MM-DD"),
    ('source = "x"\nread = 2026-11-20\nfoo = 1\n', "unknown key 'foo'"),
    ('source = "x"\nread = 2026-11-20\n[us-centrl1.gpus]\nT4 = 1\n', "did you mean us-central1"),
    ('source = "x"\nread = 2026-11-20\n[us-central1.gpu]\nT4 = 1\n', "takes machines and gpus tables, not gpu"),
    ('source = "x"\nread = 2026-11-20\n[us-central1.gpus]\nRTX4090 = 1\n', "unknown GPU 'RTX4090'"),
    ('source = "x"\nread = 2026-11-20\n[us-central1.gpus]\nT4 = -1\n', "us-central1.gpus.T4 must be a price"),
    ('source = "x"\nread = 2026-11-20\n[us-central1.gpus]\nT4 = nan\n', "must be a price"),
    ('source = "x"\nread = 2026-11-20\n[us-central1.gpus]\nT4 = "0.4"\n', "must be a price"),
    ('source = "x"\nread = 2026-11-20\n[us-central1.gpus]\nT4 = true\n', "must be a price"),
    ('source = "x"\nread = 2026-11-20\n[us-central1.machines]\n"n1 standard" = 1\n', "is not a machine type"),
    ('source = "x"\nread = 2026-11-20\n[us-central1]\nmachines = 1\n', "must be a table"),
    ('source = "x"\nread = [\n', "not valid TOML"),
])
def test_every_problem_is_one_line_naming_the_file_and_key(text, says):
    with pytest.raises(UsageError) as e:
        parse(text, Path("/home/me/prices.toml"))
    assert says in e.value.message and e.value.message.startswith("price file /home/me/prices.toml: ")
    assert "\n" not in e.value.message


def test_for_region_says_why_there_are_no_rates(tmp_path, monkeypatch):
    path = tmp_path / "user-config" / "prices.toml"  # beside the config file (conftest's FTCLI_CONFIG)
    table, why = for_region("us-central1")
    assert table is None and why == f"no price file ({path}); ftcli ships no rates"
    path.parent.mkdir()
    path.write_text(GOOD)
    table, why = for_region("us-central1")
    assert why is None and table.machines["n1-standard-8"] == 0.5
    table, why = for_region("asia-east1")
    assert table is None and why == f"{path} has no asia-east1 rates (it has: europe-west4, us-central1)"
    path.unlink()
    path.mkdir()
    with pytest.raises(UsageError, match="is a folder, not a file"):
        for_region("us-central1")


def test_the_file_beside_the_config_is_used_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("FTCLI_PRICES", raising=False)
    monkeypatch.setenv("FTCLI_CONFIG", str(tmp_path / "cfg" / "config.toml"))
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "prices.toml").write_text(GOOD)
    table, why = for_region("europe-west4")
    assert why is None and table.machines == {"g2-standard-8": 1.0}


def test_a_price_file_with_a_byte_order_mark_is_read(tmp_path, monkeypatch):
    # Windows PowerShell's `Out-File -Encoding utf8` starts the file with one (settings.toml_text): it was "not
    # valid TOML (Invalid statement (at line 1, column 1))"
    use_price_file(tmp_path, monkeypatch).write_text(GOOD, encoding="utf-8-sig")
    table, why = for_region("europe-west4")
    assert why is None and table.machines == {"g2-standard-8": 1.0}


def test_a_jobs_cost_is_every_pools_machine_hours_at_the_files_rates(tmp_path, monkeypatch):
    import datetime as dt

    from ftcli.prices import job_cost
    from ftcli.values import Job, JobName, Pool

    use_price_file(tmp_path, monkeypatch, GOOD)
    t0 = dt.datetime(2026, 11, 20, 10, tzinfo=dt.UTC)
    pools = (Pool("n1-standard-8", "NVIDIA_TESLA_T4", 2), Pool("n1-standard-8", "NVIDIA_TESLA_T4", 2, replicas=2),
             Pool("n1-highcpu-16", replicas=3))
    job = Job(JobName("p", "us-central1", "1"), "run", "SUCCEEDED", started=t0, ended=t0 + dt.timedelta(hours=1.5),
              pools=pools)
    spent, why = job_cost(job)
    assert why is None
    assert spent.per_hour == pytest.approx(3 * (0.5 + 2 * 0.4) + 3 * 0.25)  # 3 GPU machines + 3 Reduction Servers
    assert spent.hours == pytest.approx(1.5) and spent.amount == pytest.approx(1.5 * spent.per_hour)
    running = Job(job.name, "run", "RUNNING", started=t0, pools=pools)
    assert job_cost(running, now=t0 + dt.timedelta(minutes=30))[0].hours == pytest.approx(0.5)  # so far
    assert job_cost(Job(job.name, "run", "PENDING", pools=pools)) == (None, None)  # nothing to say yet
    l4 = Job(job.name, "run", "SUCCEEDED", started=t0, ended=t0, pools=(Pool("g2-standard-8", "NVIDIA_L4", 1),))
    assert job_cost(l4) == (None, "no us-central1 rate for g2-standard-8, L4 in the price file")
    elsewhere = Job(JobName("p", "asia-east1", "1"), "run", "SUCCEEDED", started=t0, ended=t0, pools=pools)
    assert job_cost(elsewhere)[1].endswith("has no asia-east1 rates (it has: europe-west4, us-central1)")
    monkeypatch.delenv("FTCLI_PRICES", raising=False)
    assert job_cost(job) == (None, None)  # no price file: nothing to say after the fact


def test_a_price_file_variable_naming_no_file_is_said_not_ignored(tmp_path, monkeypatch):
    # FTCLI_PRICES=~/prices.tmol made every cost vanish without a word, as if there were no rates at all.
    monkeypatch.setenv("FTCLI_PRICES", str(tmp_path / "prices.tmol"))
    with pytest.raises(UsageError, match=r"FTCLI_PRICES names .*prices\.tmol, which does not exist"):
        for_region("us-central1", quiet_without_file=True)


@pytest.mark.parametrize("variable", [True, False])
def test_a_price_file_that_is_a_folder_or_not_text_says_how_to_fix_that_not_the_format(tmp_path, monkeypatch,
                                                                                       variable):
    # Each was "price file P: ...", hint "see README 'What a job costs' for its format": no format fixes either.
    path = tmp_path / "user-config" / "prices.toml"  # beside the config file (conftest's FTCLI_CONFIG)
    if variable:
        path = tmp_path / "prices.toml"
        monkeypatch.setenv("FTCLI_PRICES", str(path))
    path.mkdir(parents=True)
    with pytest.raises(UsageError) as e:
        for_region("us-central1")
    assert (e.value.message, e.value.hint) == (f"price file {path}: is a folder, not a file", (
        "point FTCLI_PRICES at the price file itself" if variable else
        "move that folder away (ftcli reads rates from a file there), or point FTCLI_PRICES at your price file"))
    path.rmdir()
    path.write_bytes('source = "café"\nread = 2026-11-20\n'.encode("latin-1"))  # an editor's Windows-1252
    with pytest.raises(UsageError) as e:
        for_region("us-central1")
    assert (e.value.message, e.value.hint) == (
        f"price file {path}: is not UTF-8 text (byte 13: invalid continuation byte)",
        "save it as UTF-8 (or UTF-16 with a byte-order mark)")


@pytest.mark.parametrize("variable", [True, False])
def test_a_price_file_that_is_a_named_pipe_is_refused_not_waited_on(tmp_path, monkeypatch, variable):
    # Read as the file: with nothing writing into the pipe, `ftcli jobs list` (and train, config list) waited for ever.
    path = tmp_path / "user-config" / "prices.toml"  # beside the config file (conftest's FTCLI_CONFIG)
    path.parent.mkdir()
    if variable:
        path = tmp_path / "prices.toml"
        monkeypatch.setenv("FTCLI_PRICES", str(path))
    with fifo_read_at_most_for(path), pytest.raises(UsageError) as e:
        for_region("us-central1", quiet_without_file=True)
    assert (e.value.message, e.value.hint) == (f"price file {path}: is a named pipe, not a regular file", (
        "point FTCLI_PRICES at the price file itself" if variable else
        "move it away (ftcli reads rates from a file there), or point FTCLI_PRICES at your price file"))


def test_a_tuning_jobs_cost_is_every_trials_run_time(tmp_path, monkeypatch):
    import datetime as dt

    from ftcli.prices import tuning_cost
    from ftcli.values import Pool, Trial, TuningJob, TuningName

    use_price_file(tmp_path, monkeypatch, GOOD)
    t0 = dt.datetime(2026, 11, 20, 10, tzinfo=dt.UTC)
    trials = (Trial("1", "SUCCEEDED", started=t0, ended=t0 + dt.timedelta(minutes=40)),
              Trial("2", "ACTIVE", started=t0 + dt.timedelta(minutes=40)),
              Trial("3", "REQUESTED"))
    job = TuningJob(TuningName("p", "us-central1", "7"), "t", "RUNNING", "eval_accuracy", "MAXIMIZE", 3, 1, trials,
                    pools=(Pool("n1-standard-8", "NVIDIA_TESLA_T4", 1),))
    spent, why = tuning_cost(job, now=t0 + dt.timedelta(minutes=60))
    assert why is None and spent.per_hour == pytest.approx(0.9)
    assert spent.hours == pytest.approx(1.0)  # 40 minutes + 20 so far; the third has not started
    assert tuning_cost(TuningJob(job.name, "t", "PENDING", "m", "MAXIMIZE", 1, 1, (trials[2],), pools=job.pools)) == (
        None, None)


def test_a_spot_or_flex_start_jobs_amount_is_an_on_demand_ceiling_never_an_about(tmp_path, monkeypatch):
    # A --spot or --flex-start job was costed "about" its on-demand amount: Vertex bills it at lower prices that the
    # (on-demand) price file does not hold, so the amount is a ceiling and is said as one.
    import datetime as dt

    from ftcli.catalog import estimate, resolve_gpu
    from ftcli.cli.cost import cost_lines
    from ftcli.prices import job_cost
    from ftcli.values import Job, JobName, Pool

    use_price_file(tmp_path, monkeypatch, GOOD)
    t0 = dt.datetime(2026, 11, 20, 10, tzinfo=dt.UTC)
    pools = (Pool("n1-standard-8", "NVIDIA_TESLA_T4", 1),)
    on_demand = Job(JobName("p", "us-central1", "1"), "run", "SUCCEEDED", started=t0, ended=t0 + dt.timedelta(hours=2),
                    pools=pools)
    spent, _ = job_cost(on_demand)
    assert (spent.provisioning, spent.billed_usd, spent.shown) == (None, pytest.approx(1.8), "about $1.80")
    for kind in ("Spot", "Flex-start"):
        spent, why = job_cost(Job(on_demand.name, "run", "SUCCEEDED", started=t0, ended=t0 + dt.timedelta(hours=2),
                                  pools=pools, provisioning=kind))
        assert why is None and spent.amount == pytest.approx(1.8)  # the on-demand amount, kept as the ceiling
        assert (spent.provisioning, spent.billed_usd, spent.shown) == (kind, None, "at most $1.80")
    table, _ = for_region("us-central1")
    e = estimate(resolve_gpu("T4", "n1-standard-8"), replicas=1, reduction_server=0, timeout_s=10 * 3600,
                 region="us-central1", prices=table)
    assert cost_lines(e, "10h", discounted=None)[1].strip().startswith("about $0.90 an hour, at most $9.00 (on-demand "
                                                                        "rates: us-central1 rates from ")
    lines = cost_lines(e, "10h", discounted="Flex-start", trials=8, parallel=2)
    assert lines[1].strip().startswith("at most $1.80 an hour with 2 running, $72.00 for 8 trials (on-demand rates, a "
                                       "ceiling: Flex-start is billed at lower Flex-start prices, not in your price "
                                       "file; us-central1 rates from ")
