"""Core job logic without a network: the headline metric of a finished job and the JSON shape of a job."""

import datetime as dt

import pytest

from ftcli.jobs import headline, record, scalar_metrics
from ftcli.values import Job, JobName, Pool


@pytest.mark.parametrize(("metrics", "expected"), [
    ({"eval_accuracy": 0.9, "eval_macro_f1": 0.8, "eval_loss": 0.3}, ("eval_accuracy", 0.9)),
    ({"eval_micro_f1": 0.7, "eval_macro_f1": 0.6, "eval_subset_accuracy": 0.4}, ("eval_micro_f1", 0.7)),  # multi-label
    ({"eval_accuracy": 0.8, "eval_matthews_correlation": 0.5}, ("eval_matthews_correlation", 0.5)),  # CoLA: Matthews
    ({"eval_pearson": 0.88, "eval_spearmanr": 0.87, "eval_mse": 0.5}, ("eval_pearson", 0.88)),  # regression
    ({"eval_accuracy": 0.85, "eval_f1": 0.89}, ("eval_f1", 0.89)),  # MRPC, QQP
    ({"eval_accuracy": 0.8, "eval_macro_f1": 0.7, "primary_metric": "eval_macro_f1"}, ("eval_macro_f1", 0.7)),
    ({"eval_loss": 0.4}, ("eval_loss", 0.4)),
    ({"eval_accuracy": True}, None), ({}, None), (None, None),
])
def test_headline(metrics, expected):
    assert headline(metrics) == expected


def test_scalar_metrics_leave_out_tables():
    assert scalar_metrics({"eval_accuracy": 0.9, "per_label": {"a": {}}, "confusion_matrix": [[1]],
                           "label_names": ["a"], "flag": True}) == {"eval_accuracy": 0.9}


def test_record_of_a_finished_multi_machine_job():
    t = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC)
    job = Job(JobName("p", "europe-west4", "42"), "run", "SUCCEEDED", created=t, started=t + dt.timedelta(minutes=2),
              ended=t + dt.timedelta(minutes=65), labels={"ftcli_task": "mnli", "ftcli_model": "bert-base-uncased"},
              pools=(Pool("a2-highgpu-8g", "NVIDIA_TESLA_A100", 8, 1), Pool("a2-highgpu-8g", "NVIDIA_TESLA_A100", 8, 1),
                     Pool("n1-highcpu-16", None, 0, 2)), output_dir="gs://b/runs/x")
    r = record(job, 7, {"eval_accuracy": 0.84})
    assert (r["short_id"], r["id"], r["task"], r["model"], r["gpu"]) == (7, "42", "mnli", "bert-base-uncased", "A100x8")
    assert r["hardware"] == "8 x A100 on a2-highgpu-8g" and r["machines"] == 2  # the reduction servers do not count
    assert r["duration_s"] == 63 * 60 and r["metric"] == {"name": "eval_accuracy", "value": 0.84}
    assert r["console_url"] == "https://console.cloud.google.com/agent-platform/locations/europe-west4/training/42?project=p"
