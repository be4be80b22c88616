"""Hub models downloaded as the job downloads them: the real transformers and huggingface_hub clients, in a process of
their own (huggingface_hub reads HF_ENDPOINT and HF_HUB_OFFLINE at its import), against the Hub emulator
(tests/emulators/hub.py: its model API, its files' HEAD/GET /resolve/ answers and a CDN for the LFS ones) serving a
tiny BERT as a public, a gated and a private model; the token read from the Secret Manager emulator with --hf-secret."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.emulators.hub import HubModel

pytest.importorskip("torch")

SRC = str(Path(__file__).resolve().parents[2] / "src")
FTCLI = [sys.executable, "-c", "from ftcli.cli.app import main; main()"]
ACCESS = "hf_accessToken0123456789abcdefABCDEF"  # shaped like a real one: an account with access to the gated model
NO_ACCESS = "hf_noAccessToken0123456789abcdefABCD"  # a valid token of an account without access
REVOKED = "hf_revokedToken0123456789abcdefABCDEF"  # a token the Hub no longer knows
SECRET = "projects/p/secrets/hf-token"


@pytest.fixture
def models(hub, tiny_model, tmp_path, monkeypatch):
    """The tiny BERT on the Hub emulator as org/tiny-public, org/tiny-gated and org/tiny-private (ACCESS reads the two
    last); an empty Hugging Face cache in tmp_path; the Hub switched on for the processes the test starts."""
    hub.models["org/tiny-public"] = HubModel(folder=tiny_model)
    hub.models["org/tiny-gated"] = HubModel(folder=tiny_model, gated="manual", readers=frozenset({ACCESS}))
    hub.models["org/tiny-private"] = HubModel(folder=tiny_model, private=True, readers=frozenset({ACCESS}))
    hub.tokens |= {ACCESS, NO_ACCESS}
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("COLUMNS", "200")
    return hub


def _model_calls(hub, repo_id: str) -> list[tuple[str, str, str | None, str]]:
    """The Hub requests about `repo_id` (huggingface_hub 2.4 also asks /api/agent-harnesses, about none)."""
    return [c for c in hub.hub_calls() if f"/{repo_id}/" in c[1] or c[1].split("?")[0].endswith(f"/{repo_id}")]


def _trainer(train: Path, model: str, out: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ftcli_trainer.task", "--task", "csv", "--train-file", str(train),
                           "--model", model, "--epochs", "1", "--max-train-samples", "32", "--output-dir", str(out),
                           *args], capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})


def test_ftcli_local_downloads_a_public_hub_model_and_trains(models, tmp_path, sentiment_csv):
    train, test = sentiment_csv
    r = subprocess.run([*FTCLI, "local", "--task", "csv", "--train-file", str(train), "--eval-file", str(test),
                        "--model", "org/tiny-public", "--epochs", "1", "--output-dir", str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "  model       org/tiny-public (28.5 k parameters, " in r.stdout
    said = {(method, path.split("/resolve/")[-1].split("/", 1)[-1]) for method, path, *_ in
            _model_calls(models, "org/tiny-public") if "/resolve/" in path}
    # the small files from the Hub itself, the weights (LFS) through the CDN the Hub redirects to
    assert {("GET", "config.json"), ("GET", "tokenizer.json"), ("HEAD", "model.safetensors")} <= said
    assert ("GET", "model.safetensors") not in said
    assert [c[0] for c in models.calls if c[0].startswith("cdn ")] == ["cdn GET"]
    assert {auth for _, _, auth, _ in models.calls} == {None}  # no token here, none sent
    exported = tmp_path / "run" / "model"
    assert (exported / "model.safetensors").is_file() and (exported / "tokenizer.json").is_file()
    assert '"positive"' in (exported / "config.json").read_text()


# The fix was inside the error's line, after a ". " or a ": " ("... no Hugging Face token was sent. Request access on
# ..."): each now says what the Hub answered on the `error:` line and what to do on a `hint:` line of its own.
@pytest.mark.parametrize("token, says, fix", [
    (None, "it is a gated model on the Hugging Face Hub, and no Hugging Face token was sent",
     "request access on https://huggingface.co/org/tiny-gated, then for a Vertex job, give --hf-secret "
     "projects/P/secrets/NAME (a Secret Manager secret that holds a token of an account with access), or download it "
     "here (hf download org/tiny-gated --local-dir DIR) and give --model DIR; here, log in (hf auth login) or set "
     "HF_TOKEN"),
    (NO_ACCESS, "it is a gated model on the Hugging Face Hub, and the token sent (this machine's HF_TOKEN or Hugging "
                "Face login) has no access to it",
     "request access on https://huggingface.co/org/tiny-gated with that token's account, or use a token of an "
     "account that has access"),
])
def test_a_gated_model_without_a_token_that_has_access_is_one_line(models, tmp_path, sentiment_csv, token, says,
                                                                   fix):
    r = _trainer(sentiment_csv[0], "org/tiny-gated", tmp_path / "run", env={"HF_TOKEN": token} if token else None)
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.strip().splitlines()[-2:] == [f"error: cannot load the tokenizer of 'org/tiny-gated': {says}",
                                                  f"hint: {fix}"]
    assert "Traceback" not in r.stderr and not (tmp_path / "run" / "model").exists()
    assert {auth for _, _, auth, _ in _model_calls(models, "org/tiny-gated")} == {f"Bearer {token}" if token else None}


@pytest.mark.parametrize("source", ["--hf-secret", "HF_TOKEN"])
def test_a_token_the_hub_refuses_as_invalid_is_said_so_not_a_connection_error(models, tmp_path, sentiment_csv,
                                                                             secret_manager, source):
    # The Hub answers a revoked, expired or mistyped token with 401 "Invalid credentials in Authorization header",
    # even for a public model (https://github.com/huggingface/huggingface_hub/pull/2847, read 2026-11-27); transformers
    # re-raises it as "There was a specific connection error when trying to load org/tiny-public:", which was all the
    # line said.
    secret_manager.put(SECRET, REVOKED.encode())
    if source == "HF_TOKEN":
        r = _trainer(sentiment_csv[0], "org/tiny-public", tmp_path / "run", env={"HF_TOKEN": REVOKED})
        sent, fix = ("this machine's HF_TOKEN or Hugging Face login", "replace it with a valid one (hf auth login, or "
                     "HF_TOKEN, which comes first); a public model needs none")
    else:
        r = _trainer(sentiment_csv[0], "org/tiny-public", tmp_path / "run", "--hf-secret", SECRET)
        sent, fix = (f"from --hf-secret {SECRET}", "add a valid token as a new version of the secret (printf %s "
                     "\"$HF_TOKEN\" | gcloud secrets versions add hf-token --data-file=-)")
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.strip().splitlines()[-2:] == [
        f"error: cannot load the tokenizer of 'org/tiny-public': the Hugging Face Hub refused the token sent ({sent}) "
        "as invalid (\"Invalid credentials in Authorization header\": revoked, expired or mistyped)", f"hint: {fix}"]
    assert "Traceback" not in r.stderr and REVOKED not in r.stdout + r.stderr
    assert {auth for _, _, auth, _ in _model_calls(models, "org/tiny-public")} == {f"Bearer {REVOKED}"}


@pytest.mark.parametrize("token, says, fix", [
    (None, "the Hugging Face Hub has no public model 'org/missing'",
     "check the id; if it is private, for a Vertex job, give --hf-secret projects/P/secrets/NAME (a Secret Manager "
     "secret that holds a token of an account with access), or download it here (hf download org/missing "
     "--local-dir DIR) and give --model DIR; here, log in (hf auth login) or set HF_TOKEN"),
    (NO_ACCESS, "the Hugging Face Hub has no model 'org/missing' that the token sent (this machine's HF_TOKEN or "
                "Hugging Face login) can read",
     "check the id; a private model needs a token of an account with access to it"),
])
def test_a_model_the_hub_does_not_have_says_check_the_id_on_a_hint_line(models, tmp_path, sentiment_csv, token, says,
                                                                        fix):
    # "...has no public model 'org/missing': check the id; if it is private, ...": the fix inside the error's line
    r = subprocess.run([*FTCLI, "local", "--task", "csv", "--train-file", str(sentiment_csv[0]), "--model",
                        "org/missing", "--epochs", "1", "--output-dir", str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, **({"HF_TOKEN": token} if token else {})})
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.strip().splitlines()[-2:] == [f"error: cannot load the tokenizer of 'org/missing': {says}",
                                                  f"hint: {fix}"]
    assert "Traceback" not in r.stderr and not (tmp_path / "run" / "model").exists()


def _no_token_in(folder: Path, token: str) -> None:
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert token.encode() not in path.read_bytes(), path


def test_hf_secret_downloads_a_gated_model_with_the_token_and_writes_it_nowhere(models, tmp_path, sentiment_csv,
                                                                               secret_manager):
    # `ftcli local --hf-secret`: the trainer reads the secret (with the user's credentials here), as the job does
    secret_manager.put(SECRET, ACCESS.encode() + b"\n")  # `gcloud secrets create --data-file` keeps the newline
    train, test = sentiment_csv
    run = tmp_path / "run"
    r = subprocess.run([*FTCLI, "local", "--task", "csv", "--train-file", str(train), "--eval-file", str(test),
                        "--model", "org/tiny-gated", "--epochs", "1", "--output-dir", str(run), "--hf-secret", SECRET],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "  model       org/tiny-gated (28.5 k parameters, " in r.stdout
    calls = _model_calls(models, "org/tiny-gated")
    assert any(m == "GET" and p.endswith("/tokenizer.json") for m, p, *_ in calls)
    assert {auth for _, _, auth, _ in calls} == {f"Bearer {ACCESS}"}  # every request about the model
    assert [auth for m, _, auth, _ in models.calls if m.startswith("cdn ")] == [None]  # never to the CDN's host
    assert [m for m, _ in secret_manager.requests] == ["AccessSecretVersion"]
    assert (run / "model" / "model.safetensors").is_file()
    assert ACCESS not in r.stdout + r.stderr
    _no_token_in(run, ACCESS)
    _no_token_in(tmp_path / "hf-home", ACCESS)  # the Hub cache: the model's files, never the token


def test_torchruns_workers_load_the_gated_model_with_the_token_read_once(models, tmp_path, sentiment_csv,
                                                                        secret_manager):
    # As task.main runs in a job with 2 GPUs: the secret read, then torchrun (ftcli_trainer.launcher) started in its
    # place, whose workers inherit the token; here 2 gloo workers on this CPU.
    secret_manager.put(SECRET, ACCESS.encode())
    from tests.trainer.test_distributed import _free_port

    train, test = sentiment_csv
    run = tmp_path / "run"
    relaunch = ("import os, sys; from ftcli_trainer.secret_manager import use_hub_token; use_hub_token(sys.argv[1]); "
                "os.execv(sys.executable, [sys.executable, '-m', 'ftcli_trainer.launcher', '--nproc-per-node=2', "
                "sys.argv[2], '-m', 'ftcli_trainer.task', *sys.argv[3:]])")
    r = subprocess.run([sys.executable, "-c", relaunch, SECRET, f"--master-port={_free_port()}", "--task", "csv",
                        "--train-file", str(train), "--eval-file", str(test), "--model", "org/tiny-gated",
                        "--epochs", "1", "--batch-size", "8", "--output-dir", str(run), "--hf-secret", SECRET],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "8 × 1 accumulation × 2 process(es) = 16 examples per step" in r.stdout
    calls = _model_calls(models, "org/tiny-gated")
    # the workers asked the Hub about the model (transformers names its process in its User-Agent: session_id/...),
    # each with the token. The files the first downloaded, the other may read from the shared cache without asking
    # anything: one session or two, by timing (one in 2 of 3 fresh-clone CI runs on 2026-11-28, two before).
    assert 1 <= len({agent.split("session_id/")[1].split(";")[0] for *_, agent in calls if "session_id/" in agent}) <= 2
    assert {auth for _, _, auth, _ in calls} == {f"Bearer {ACCESS}"}
    assert [m for m, _ in secret_manager.requests] == ["AccessSecretVersion"]  # read once, by the first process
    assert ACCESS not in r.stdout + r.stderr
    _no_token_in(run, ACCESS)


@pytest.mark.parametrize("status,answered,wait", [
    (403, "HTTP 403 Forbidden", ""),
    # "...answered HTTP 429 Too Many Requests: the Hub's rate limit, wait and run again, and the files are not in this
    # machine's Hugging Face cache. Pass a Hugging Face model id ...": two fixes inside the line
    (429, "HTTP 429 Too Many Requests (its rate limit)", "wait a minute and run again, or "),
])
def test_a_hub_that_answers_with_an_error_is_said_so_not_as_no_connection(models, tmp_path, sentiment_csv, status,
                                                                          answered, wait):
    # transformers said "We couldn't connect to 'HF_ENDPOINT' to load the files" for any answer of the Hub but a
    # missing, gated or private model: a proxy's refusal, a rate limit (429), an outage (5xx)
    models.fail_with = status
    r = _trainer(sentiment_csv[0], "org/tiny-public", tmp_path / "run")
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.strip().splitlines()[-2:] == [
        f"error: cannot load the tokenizer of 'org/tiny-public': the Hugging Face Hub answered {answered}, and the "
        "files are not in this machine's Hugging Face cache",
        f"hint: {wait}pass a Hugging Face model id (with network access) or a local folder that holds a model and its "
        "tokenizer"]
    assert "Traceback" not in r.stderr
    # a file the model lacks (404 EntryNotFound) is still transformers' own words
    models.fail_with = None
    (tmp_path / "no-config").mkdir()
    (tmp_path / "no-config" / "tokenizer.json").write_bytes((models.models["org/tiny-public"].folder /
                                                            "tokenizer.json").read_bytes())
    models.models["org/no-config"] = HubModel(folder=tmp_path / "no-config")
    r = _trainer(sentiment_csv[0], "org/no-config", tmp_path / "run")
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.strip().splitlines()[-2].startswith("error: cannot load the model 'org/no-config': Unrecognized "
                                                        "model in org/no-config")
    assert r.stderr.strip().splitlines()[-1] == ("hint: pass a Hugging Face model id (with network access) or a local "
                                                 "model folder")
