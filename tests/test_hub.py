"""ftcli.hub: is a Hub --model one the job can load? Asked of a Hub model API emulator (tests/emulators/hub.py)."""

import os
import time

import pytest

from ftcli.hub import check_model
from tests.emulators.hub import HubModel

DOWNLOAD = ("give --hf-secret projects/P/secrets/NAME (a Secret Manager secret that holds a token of an account with "
            "access), or download it here (hf download {0} --local-dir DIR) and give --model DIR")


def test_a_public_model_with_a_config_passes_and_is_asked_without_a_token(hub, monkeypatch):
    hub.models["org/model"] = HubModel()
    hub.tokens.add("hf_mine")
    monkeypatch.setenv("HF_TOKEN", "hf_mine")  # this machine's token: the job has none, so neither has the look-up
    assert check_model("org/model", job_has_token=False) == (None, None)
    assert hub.requests == [("/api/models/org/model", None)]


def test_a_renamed_model_is_followed_to_its_new_name(hub):
    hub.models["google-bert/bert-base-uncased"] = HubModel()
    hub.renamed["bert-base-uncased"] = "google-bert/bert-base-uncased"
    assert check_model("bert-base-uncased", job_has_token=False) == (None, None)
    assert [p for p, _ in hub.requests] == ["/api/models/bert-base-uncased",
                                            "/api/models/google-bert/bert-base-uncased"]


@pytest.mark.parametrize("gated", ["auto", "manual"])
def test_a_gated_model_is_refused_unless_the_job_gets_a_token(hub, gated):
    hub.models["meta-llama/Llama-3.2-1B"] = HubModel(gated=gated)
    problem, note = check_model("meta-llama/Llama-3.2-1B", job_has_token=False)
    assert problem == ("--model meta-llama/Llama-3.2-1B is a gated model on the Hugging Face Hub, and the job gets no "
                       "Hugging Face token without --hf-secret: " + DOWNLOAD.format("meta-llama/Llama-3.2-1B") +
                       " (logged in here with an account that has access: hf auth login)") and note is None
    assert check_model("meta-llama/Llama-3.2-1B", job_has_token=True) == (None, None)


def test_a_missing_model_cannot_be_told_from_a_private_one_without_a_token(hub):
    hub.models["acme/secret"] = HubModel(private=True, readers=frozenset({"hf_mine"}))
    for name in ("acme/secret", "acme/no-such-model"):
        problem, _ = check_model(name, job_has_token=False)
        assert problem == (f"--model {name} is not on the Hugging Face Hub, or is private (the Hub does not say which "
                           "without a token, and the job gets none without --hf-secret): check its spelling, or, for a "
                           "private model, "
                           + DOWNLOAD.format(name))
    # a job with a token may read it: not refused, but said
    problem, note = check_model("acme/secret", job_has_token=True)
    assert problem is None and note == ("--model acme/secret is not on the Hugging Face Hub, or is private (the Hub "
                                        "does not say which to a request without a token): it is not checked before "
                                        "the job downloads it")


def test_this_machines_token_tells_a_private_model_from_a_missing_one(hub, monkeypatch, tmp_path):
    hub.models["acme/secret"] = HubModel(private=True, readers=frozenset({"hf_mine"}))
    hub.tokens.add("hf_mine")
    (tmp_path / "token").write_text("hf_mine\n")  # where `hf auth login` saved it
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "token"))
    assert check_model("acme/secret", job_has_token=False) == (
        "--model acme/secret is a private model on the Hugging Face Hub (your token can read it; the job gets no "
        "Hugging Face token without --hf-secret): " + DOWNLOAD.format("acme/secret"), None)
    assert check_model("acme/secret", job_has_token=True) == (None, None)
    assert check_model("acme/no-such-model", job_has_token=False) == (
        "--model acme/no-such-model is not on the Hugging Face Hub (asked with your Hugging Face token too): check its "
        "spelling", None)
    # a job with a token of its own (--hf-secret: an organisation's, say) may read what this machine's cannot: said,
    # not refused (it was refused, and no job could be submitted for a model only the job's token can read)
    assert check_model("acme/no-such-model", job_has_token=True) == (
        None, "--model acme/no-such-model is not on the Hugging Face Hub for your Hugging Face token either: check "
              "its spelling (only --hf-secret's token, which ftcli does not read, could load it)")
    assert hub.requests[:2] == [("/api/models/acme/secret", None), ("/api/models/acme/secret", "Bearer hf_mine")]
    # HF_HUB_DISABLE_IMPLICIT_TOKEN: huggingface_hub sends no saved token; nor does the look-up
    hub.requests.clear()
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    assert check_model("acme/secret", job_has_token=False)[0].startswith("--model acme/secret is not on the Hugging "
                                                                         "Face Hub, or is private")
    assert hub.requests == [("/api/models/acme/secret", None)]


def test_an_invalid_token_here_is_no_answer_about_the_model(hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_expired")
    problem, _ = check_model("acme/secret", job_has_token=False)
    assert problem.startswith("--model acme/secret is not on the Hugging Face Hub, or is private (the Hub does not "
                              "say which without a token")


@pytest.mark.parametrize("given, default, says", [
    ("bert-base-uncsed", "bert-base-uncased", "check its spelling (did you mean bert-base-uncased, the task's default "
     "model?)"),
    # close, but not a typo of it: no guess
    ("bert-base-uncsed", "bert-base-cased", "check its spelling, or"),
    ("roberta-bsae", "bert-base-cased", "check its spelling, or"),
])
def test_a_typo_of_the_tasks_default_model_names_it(hub, given, default, says):
    problem, _ = check_model(given, job_has_token=False, default=default)
    assert says in problem and ("did you mean" in says) == ("did you mean" in problem)


def test_a_model_without_a_config_is_refused(hub):
    hub.models["TheBloke/Llama-2-7B-GGUF"] = HubModel(files=("README.md", "llama-2-7b.Q4_K_M.gguf"))
    assert check_model("TheBloke/Llama-2-7B-GGUF", job_has_token=False) == (
        "--model TheBloke/Llama-2-7B-GGUF: the Hugging Face Hub model has no config.json (README.md, "
        "llama-2-7b.Q4_K_M.gguf), so transformers cannot load it as a classifier; give a transformers model (one with "
        "a config.json)", None)


def test_a_hub_that_does_not_answer_is_a_note_not_a_problem(hub):
    hub.fail_with = 503
    assert check_model("org/model", job_has_token=False) == (
        None, "the Hugging Face Hub did not answer for --model org/model (HTTP 503): it is not looked up before the "
              "job downloads it")


def test_a_404_that_is_not_the_hubs_is_a_note_not_a_missing_model(hub):
    # A proxy (or an HF_ENDPOINT mirror without the model API) answering 404 with none of the Hub's headers: the
    # model was refused as "not on the Hugging Face Hub", and the job could not be submitted at all. huggingface_hub
    # reads such a 404 as a plain HTTP error, RepositoryNotFoundError only with X-Error-Code: RepoNotFound.
    hub.models["org/model"] = HubModel()
    hub.fail_with = 404
    assert check_model("org/model", job_has_token=False) == (
        None, "the Hugging Face Hub did not answer for --model org/model (HTTP 404): it is not looked up before the "
              "job downloads it")


def test_a_web_page_instead_of_the_hubs_answer_is_a_note(hub):
    hub.not_json = True  # a proxy's sign-in page, a captive portal
    assert check_model("org/model", job_has_token=False) == (
        None, "the Hugging Face Hub did not answer for --model org/model (its answer was not a model's info): it is "
              "not looked up before the job downloads it")


def test_an_hf_endpoint_that_is_not_a_url_is_a_note(hub, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "hf-mirror.example")  # no scheme
    assert check_model("org/model", job_has_token=False) == (
        None, "the Hugging Face Hub is not reachable from here (HF_ENDPOINT 'hf-mirror.example' is not an http(s):// "
              "URL): --model org/model is not looked up before the job downloads it")  # not huggingface.co's state


def test_an_unreachable_hub_is_a_note_in_seconds(hub, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on port 9 (discard)
    start = time.monotonic()
    problem, note = check_model("org/model", job_has_token=False)
    assert time.monotonic() - start < 5 and problem is None
    assert note == ("the Hugging Face Hub is not reachable from here (127.0.0.1: Connection refused): --model "
                    "org/model is not looked up before the job downloads it")


def test_a_hub_that_never_answers_is_waited_for_once(hub, monkeypatch):
    # A Hub that takes the connection and never answers (a stalled proxy, a firewall): every model of a model search
    # waited the full timeout again, 8 s each (4 models of `ftcli tune --search model=choice(...)`: 45 s).
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # connections are taken (by the kernel) and never answered
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
    monkeypatch.setattr("ftcli.hub.TIMEOUT_S", 2.0)
    checks: dict = {}
    start = time.monotonic()
    try:
        said = [check_model(name, job_has_token=False, checks=checks) for name in ("org/a", "org/b", "org/c")]
    finally:
        silent.close()
    assert time.monotonic() - start < 4.5  # one timeout, not three
    assert said == [(None, "the Hugging Face Hub did not answer for --model org/a (timed out): it is not looked up "
                           "before the job downloads it")] + [
        (None, f"the Hugging Face Hub did not answer an earlier look-up (timed out): --model org/{n} is not looked up "
               "before the job downloads it") for n in "bc"]


@pytest.mark.parametrize("value", ["1", "yes", "TRUE", "on"])
def test_hf_hub_offline_asks_nothing(hub, monkeypatch, value):
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert check_model("acme/no-such-model", job_has_token=False) == (None, None)
    assert hub.requests == []


@pytest.mark.parametrize("value", ["yes", "TRUE", "on"])
def test_every_spelling_of_hf_hub_offline_is_read_alike(monkeypatch, value):
    # One reading of huggingface_hub's switch (model.hub_switch) for the launcher and the trainer: `ftcli local`
    # probed the Hub (and could refuse a model) unless HF_HUB_OFFLINE was exactly "1".
    from types import SimpleNamespace

    from ftcli import local
    from ftcli.errors import FtcliError
    from ftcli_trainer.secret_manager import use_hub_token

    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(local, "hub_unreachable", lambda *a, **k: pytest.fail("the Hub was probed"))
    cfg = SimpleNamespace(model="org/some-model", task="csv", train_file="t.csv", eval_file=None)
    with pytest.raises(FtcliError) as e:  # offline, so never probed: a model not in the cache is refused at once
        local.check_hub(cfg, lambda line: None)
    assert e.value.message == ("--model org/some-model is not in the Hugging Face Hub cache, and this run is offline "
                               "(HF_HUB_OFFLINE): nothing is downloaded")
    use_hub_token("projects/p/secrets/hf-token")  # not read (no Secret Manager here: it would fail)
    assert "HF_TOKEN" not in os.environ
