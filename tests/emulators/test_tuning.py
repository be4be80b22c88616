"""The emulated tuning service runs trials of the very container job ftcli builds, each with its values on the
command line, and reads back the metric the trainer reports."""

from __future__ import annotations

import json

import pytest

from ftcli.catalog import resolve_gpu
from ftcli.gcp.vertex import tuning_to_proto as to_proto
from ftcli.packaging import build_wheel
from ftcli.spec import JobRequest, build_custom_job
from ftcli.tune import build_tuning_job, parse_search
from ftcli_trainer.config import OPTIONS
from tests.conftest import sentiment_rows, write_csv

pytest.importorskip("torch")
PARENT = "projects/test-project/locations/us-central1"
IMAGE = "docker.io/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"


def test_trials_run_with_their_values_and_report_the_metric(gcs, running_vertex, tmp_path, tiny_model):
    gcs.create_bucket("tune-bkt")
    wheel = build_wheel(tmp_path / "dist")
    gcs.write("tune-bkt", f"pkg/{wheel.name}", wheel.read_bytes())
    for f in tiny_model.iterdir():
        gcs.write("tune-bkt", f"model/{f.name}", f.read_bytes())
    data = write_csv(tmp_path / "train.csv", ["text", "label"], sentiment_rows(120, seed=3))
    gcs.write("tune-bkt", "data/train.csv", data.read_bytes())
    custom = build_custom_job(JobRequest(
        project="test-project", region="us-central1", display_name="tune-test", hardware=resolve_gpu("none"),
        image=IMAGE, package_uri=f"gs://tune-bkt/pkg/{wheel.name}", base_output_dir="gs://tune-bkt/runs/t",
        args=("--task", "csv", "--train-file", "gs://tune-bkt/data/train.csv", "--model", "/gcs/tune-bkt/model",
              "--epochs", "1", "--learning-rate", "1e-9", "--hypertune-metric", "eval_accuracy")))
    params = parse_search(["learning_rate=loguniform(1e-4,1e-3)", "batch_size=choice(8,16)"],
                          {o.name: o.type for o in OPTIONS})
    body = build_tuning_job(custom, params, "eval_accuracy", trials=2, parallel=1)
    with running_vertex.client() as client:
        created = client.create_hyperparameter_tuning_job(parent=PARENT, hyperparameter_tuning_job=to_proto(body))
    job = running_vertex.wait_tuning(created.name, timeout=400)
    assert job.state.name == "JOB_STATE_SUCCEEDED", job.error.message
    assert [t.id for t in job.trials] == ["1", "2"]
    for trial in job.trials:
        assert trial.state.name == "SUCCEEDED"
        values = {p.parameter_id: p.value for p in trial.parameters}
        assert 1e-4 <= values["learning_rate"] <= 1e-3 and values["batch_size"] in (8.0, 16.0)
        (metric,) = trial.final_measurement.metrics
        assert metric.metric_id == "eval_accuracy" and 0.0 <= metric.value <= 1.0
        # the trial's CustomJob got the values after the job's own args (the last --learning-rate wins)
        args = list(running_vertex.job(trial.custom_job).job_spec.worker_pool_specs[0].container_spec.args)
        assert args[-4:] == ["--learning_rate", repr(values["learning_rate"]), "--batch_size",
                             repr(values["batch_size"])]
    shown = " ".join(e.text_payload for e in running_vertex.logs.entries)
    assert shown.count("peak lr ") == 2 and "peak lr 1e-09" not in shown  # each trial trained at its own rate
    for trial in job.trials:  # each trial's model in its own folder, BASE/TRIAL_ID/model
        assert f"runs/t/{trial.id}/model/_COMPLETE" in gcs.list("tune-bkt", f"runs/t/{trial.id}/model/")


def test_a_trials_final_measurement_is_its_last_value_or_its_best_as_the_study_says(tmp_path):
    from google.cloud.aiplatform_v1.types import study

    from tests.emulators.runner import _final_metric

    metrics = tmp_path / "output.metrics"
    metrics.write_text("".join(json.dumps({"eval_accuracy": str(v), "global_step": str(i)}) + "\n"
                               for i, v in enumerate((0.5, 0.8, 0.6))))
    spec = study.StudySpec(metrics=[study.StudySpec.MetricSpec(metric_id="eval_accuracy", goal="MAXIMIZE")])
    assert _final_metric(metrics, "eval_accuracy", spec) == 0.6  # unspecified: the last
    spec.measurement_selection_type = study.StudySpec.MeasurementSelectionType.BEST_MEASUREMENT
    assert _final_metric(metrics, "eval_accuracy", spec) == 0.8
    spec.metrics[0].goal = study.StudySpec.MetricSpec.GoalType.MINIMIZE
    assert _final_metric(metrics, "eval_accuracy", spec) == 0.5


def test_a_trial_that_failed_is_infeasible_with_its_jobs_error_and_no_value():
    # A trial whose job failed after it reported a value was INFEASIBLE *with* that value, which Vertex ignores
    # ("True if the Trial cannot be run with the given Parameter, and final_measurement will be ignored"): ftcli
    # could then name a failed trial, whose model was never exported, the best.
    from google.cloud.aiplatform_v1.types import custom_job
    from google.cloud.aiplatform_v1.types.job_state import JobState
    from google.rpc import status_pb2

    from tests.emulators.runner import _infeasible_reason

    failed = custom_job.CustomJob(state=JobState.JOB_STATE_FAILED, error=status_pb2.Status(
        message="The replica workerpool0-0 exited with a non-zero status of 1."))
    assert _infeasible_reason(failed, "eval_accuracy", 0.9) == "The replica workerpool0-0 exited with a non-zero " \
                                                                "status of 1."
    ok = custom_job.CustomJob(state=JobState.JOB_STATE_SUCCEEDED)
    assert _infeasible_reason(ok, "eval_accuracy", None) == "The trial reported no value of the metric 'eval_accuracy'."
    assert _infeasible_reason(ok, "eval_accuracy", 0.9) is None
