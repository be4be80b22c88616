"""The tuning job builder: search spaces, the metric and its goal, and the proto round trip."""

import pytest

from ftcli.errors import UsageError
from ftcli.gcp.vertex import tuning_to_proto as to_proto
from ftcli.tune import build_tuning_job, count_problems, goal, load_study_file, parse_search
from ftcli_trainer.config import OPTIONS

TYPES = {o.name: o.type for o in OPTIONS}


def test_search_specs():
    lr, bs, wd, ep, model = parse_search(["learning_rate=loguniform(1e-5, 1e-4)", "batch-size=choice(32,16,32)",
                                          "weight_decay=uniform(0,0.1)", "epochs=int(1,4)",
                                          "model=choice(bert-base-uncased, roberta-base)"], TYPES)
    assert lr.spec == {"parameterId": "learning_rate", "doubleValueSpec": {"minValue": 1e-5, "maxValue": 1e-4},
                       "scaleType": "UNIT_LOG_SCALE"}
    assert bs.spec == {"parameterId": "batch_size", "discreteValueSpec": {"values": [16.0, 32.0]}}
    assert wd.spec["scaleType"] == "UNIT_LINEAR_SCALE" and wd.extremes == (0.0, 0.1)
    assert ep.spec == {"parameterId": "epochs", "integerValueSpec": {"minValue": "1", "maxValue": "4"},
                       "scaleType": "UNIT_LINEAR_SCALE"}
    assert model.spec == {"parameterId": "model",
                          "categoricalValueSpec": {"values": ["bert-base-uncased", "roberta-base"]}}


def test_default_search():
    assert [p.name for p in parse_search([], TYPES)] == ["learning_rate", "batch_size"]


def test_a_choice_of_values_with_a_comma_is_a_json_list(tmp_path):
    # choice(A,B) split every value on its commas: a model folder `runs/a,b` (or a study file's list naming it)
    # became two folders that do not exist
    (model,) = parse_search(['model=choice(["runs/a,b", "roberta-base"])'], TYPES)
    assert model.spec["categoricalValueSpec"]["values"] == ["runs/a,b", "roberta-base"]
    (bs,) = parse_search(["batch_size=choice([32, 16])"], TYPES)
    assert bs.spec["discreteValueSpec"]["values"] == [16.0, 32.0]
    study = tmp_path / "study.toml"
    study.write_text('[search]\nmodel = ["runs/a,b", "roberta-base"]\nbatch_size = [16, 32]\n')
    (model, bs) = parse_search(list(load_study_file(str(study)).search), TYPES)
    assert model.extremes == ("runs/a,b", "roberta-base") and bs.extremes == (16, 32)
    with pytest.raises(UsageError) as e:
        parse_search(['model=choice(["a,b", 1e400 x])'], TYPES)
    assert e.value.message.startswith("--search model: choice([\"a,b\", 1e400 x]) is not a valid JSON list (")


def test_a_number_with_a_comma_in_a_json_choice_is_refused_not_split(tmp_path):
    # choice(["1,000", 5]) was joined and split again on its commas: seeds 0, 1 and 5, three trials' values where two
    # were given, without a word; a study file's list ["1,000", 5] went the same way
    with pytest.raises(UsageError) as e:
        parse_search(['seed=choice(["1,000", 5])'], TYPES)
    assert e.value.message == "--search seed: expected int values, got '1,000'"
    study = tmp_path / "study.toml"
    study.write_text('[search]\nlearning_rate = ["1e-5,2e-5", 3e-5]\n')
    with pytest.raises(UsageError) as e:
        parse_search(list(load_study_file(str(study)).search), TYPES)
    assert e.value.message == "--search learning_rate: expected float values, got '1e-5,2e-5'"


@pytest.mark.parametrize(("item", "needle"), [
    ("learning_rate=loguniform(0,1e-4)", "loguniform needs LOW > 0"),
    ("learning_rate=uniform(1e-4,1e-5)", "LOW < HIGH"),
    ("batch_size=uniform(8,64)", "takes whole numbers"),
    ("learning_rate=int(1,2)", "is not a whole number"),
    ("train_file=choice(a,b)", "--search NAME must be one of learning_rate, "),
    ("learning_rate=normal(0,1)", "unknown distribution 'normal'"),
    ("learning_rate 1e-4", "write NAME=loguniform"),
    ("batch_size=choice(32)", "at least two values"),
    ("batch_size=choice(a,b)", "expected int values"),
    # a numeric choice is a DiscreteValueSpec: values at least 1e-10 apart, at most 1000 of them (Vertex refused both)
    ("weight_decay=choice(1e-11,2e-11)", "--search weight_decay: choice values 1e-11 and 2e-11 are less than 1e-10 "
                                         "apart, which Vertex refuses: keep one of them"),
    ("weight_decay=choice(0.1,0.10000000000001,0.2)", "choice values 0.1 and 0.10000000000001 are less than"),
    (f"seed=choice({','.join(map(str, range(1001)))})", "--search seed: choice takes at most 1000 numbers (Vertex's "
                                                        "limit), got 1001"),
])
def test_bad_searches_are_one_line(item, needle):
    with pytest.raises(UsageError) as info:
        parse_search([item], TYPES)
    assert needle in info.value.message


def test_every_problem_at_once():
    with pytest.raises(UsageError) as info:
        parse_search(["learning_rate=uniform(1,0)", "x=choice(1,2)", "epochs=int(1,2)", "epochs=int(2,3)"], TYPES)
    assert info.value.message == "3 problems with --search:"


def test_goal_and_counts():
    assert goal("eval_accuracy") == "MAXIMIZE" and goal("eval_loss") == "MINIMIZE"
    assert count_problems(16, 4) == [] and count_problems(0, 1) and count_problems(4, 5) and count_problems(4, 0)


def test_tuning_job_wraps_the_train_job_and_round_trips():
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    from ftcli.spec import build_custom_job
    from tests.test_spec import T4_SINGLE

    custom = build_custom_job(T4_SINGLE)
    job = build_tuning_job(custom, parse_search([], TYPES), "eval_accuracy", trials=8, parallel=2)
    assert job["trialJobSpec"] == custom["jobSpec"] and job["displayName"] == custom["displayName"]
    assert job["studySpec"]["metrics"] == [{"metricId": "eval_accuracy", "goal": "MAXIMIZE"}]
    proto = to_proto(job)
    assert isinstance(proto, aiplatform_v1.HyperparameterTuningJob)
    assert json_format.MessageToDict(aiplatform_v1.HyperparameterTuningJob.pb(proto)) == job


def test_following_a_study_outlasts_a_state_it_cannot_read_for_a_while_not_for_ever():
    from ftcli import tuning
    from ftcli.errors import FollowingLost, FtcliError, NotFound
    from ftcli.values import TuningJob, TuningName

    name = TuningName("p", "us-central1", "1")

    def job(state):
        return TuningJob(name, "study", state, "eval_accuracy", "MAXIMIZE", 2, 1)

    def run(reads, patience=10.0):
        now, told, seen = [0.0], [], []
        reads = iter(reads)

        def get():
            r = next(reads)
            if isinstance(r, Exception):
                raise r
            return r

        def sleep(s):
            now[0] += s

        final = tuning.follow(get, lambda j, changed: seen.append(j.state), interval=3.0, sleep=sleep,
                              on_unreadable=told.append, patience=patience, clock=lambda: now[0])
        return final, told, seen

    down = FtcliError("vertex: internal error")
    final, told, seen = run([job("RUNNING"), down, down, job("SUCCEEDED")])
    assert final.state == "SUCCEEDED" and told == [down] and seen == ["RUNNING", "SUCCEEDED"]
    with pytest.raises(FollowingLost) as lost:  # past the patience: raised (a login that expired, a role taken away)
        run([job("RUNNING"), *[down] * 6, job("SUCCEEDED")])
    # (saying that the study may run on: the command adds how to see its trials and cancel it)
    assert lost.value.message == ("vertex: internal error (10 s of failed reads: ftcli stopped following the tuning "
                                  "job, which may still be running)")
    assert lost.value.cause is down and lost.value.exit_code == down.exit_code
    with pytest.raises(FtcliError) as first:  # the first read: nothing was followed yet, the error as it came
        run([down, job("SUCCEEDED")])
    assert first.value is down
    with pytest.raises(NotFound):
        run([job("RUNNING"), NotFound("gone"), job("SUCCEEDED")])
