"""--hf-secret: the Hugging Face token read from Secret Manager (the emulator, over its gRPC protocol) where the trainer
runs, sent to the Hub (a local HTTP server posing as HF_ENDPOINT) and written nowhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from ftcli_trainer.secret_manager import HF_TOKEN_FROM, use_hub_token  # noqa: E402
from ftcli_trainer.task import main  # noqa: E402

TOKEN = "hf_secretToken0123456789abcdefABCDEF"  # shaped like a real one
SECRET = "projects/p/secrets/hf-token"
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture
def clean_hub_env(monkeypatch):
    """HF_TOKEN and its marker as the test leaves them (the trainer sets them in this process); the Hub switched on."""
    for name in ("HF_TOKEN", HF_TOKEN_FROM):
        monkeypatch.setenv(name, "")  # recorded, so that what the trainer sets is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")


def test_the_token_from_the_secret_is_what_the_hub_receives(tmp_path, secret_manager, clean_hub_env, hub,
                                                             sentiment_csv):
    # In a process of its own, as in the job: huggingface_hub reads HF_ENDPOINT at its import. The Hub emulator
    # (tests/emulators/hub.py) knows the token, which has no access to the gated model: 403 GatedRepo.
    from tests.emulators.hub import HubModel

    secret_manager.put(SECRET, TOKEN.encode() + b"\n")  # `gcloud secrets create --data-file` keeps a trailing newline
    hub.models["org/gated-model"] = HubModel(gated="manual")
    hub.tokens.add(TOKEN)
    train, _ = sentiment_csv
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0",
           "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "ftcli_trainer.task", "--task", "csv", "--train-file", str(train),
                           "--model", "org/gated-model", "--output-dir", str(tmp_path / "run"),
                           "--hf-secret", SECRET], env=env, capture_output=True, text=True, timeout=300)
    # every request for the model carries the secret's token
    assert {auth for path, auth in hub.requests if "org/gated-model" in path} == {f"Bearer {TOKEN}"}
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-2:] == [
        "error: cannot load the tokenizer of 'org/gated-model': it is a gated model on the Hugging Face Hub, and the "
        f"token sent (from --hf-secret {SECRET}) has no access to it",
        "hint: request access on https://huggingface.co/org/gated-model with that token's account, or use a token of "
        "an account that has access"]
    assert TOKEN not in done.stdout + done.stderr
    assert [m for m, _ in secret_manager.requests] == ["AccessSecretVersion"]


def test_a_run_with_the_secret_keeps_the_token_out_of_everything_it_writes(tmp_path, secret_manager, clean_hub_env,
                                                                          sentiment_csv, tiny_model, capsys):
    from huggingface_hub import get_token

    secret_manager.put(SECRET, TOKEN.encode())
    train, test = sentiment_csv
    out = tmp_path / "run"
    assert main(["--task", "csv", "--train-file", str(train), "--eval-file", str(test), "--model", str(tiny_model),
                 "--epochs", "1", "--output-dir", str(out), "--hf-secret", SECRET]) == 0
    assert get_token() == TOKEN  # what huggingface_hub sends with every download
    run_config = json.loads((out / "model" / "ftcli_run.json").read_text())
    assert run_config["hf_secret"] == SECRET  # the name, which says where the token came from
    written = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name == "model.safetensors" for p in written) and any("checkpoints" in p.parts for p in written)
    for path in written:
        assert TOKEN.encode() not in path.read_bytes(), path
    said = capsys.readouterr()
    assert TOKEN not in said.out + said.err
    # torchrun's workers (started by this process, with its environment) use it without reading the secret again
    child = subprocess.run([sys.executable, "-c", "from huggingface_hub import get_token; print(get_token())"],
                           capture_output=True, text=True, check=True)
    assert child.stdout.strip() == TOKEN
    secret_manager.requests.clear()
    use_hub_token(SECRET)  # as each torchrun worker calls it
    assert secret_manager.requests == [] and os.environ["HF_TOKEN"] == TOKEN


def test_a_missing_or_empty_secret_is_one_line_before_any_work(tmp_path, secret_manager, clean_hub_env, sentiment_csv,
                                                              capsys, monkeypatch):
    train, _ = sentiment_csv
    argv = ["--task", "csv", "--train-file", str(train), "--model", "org/some-model", "--output-dir",
            str(tmp_path / "run")]
    assert main([*argv, "--hf-secret", "projects/p/secrets/missing"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read the Hugging Face token from projects/p/secrets/missing/versions/latest "
                          "(--hf-secret): ")
    # here (`ftcli local`), the reader is the user's own account, not a job's service account
    assert err.rstrip().endswith(". The account that runs this (here: your Application Default Credentials; in a job: "
                                 "its service account) needs roles/secretmanager.secretAccessor on that secret")
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
    monkeypatch.setenv("CLOUD_ML_JOB_ID", "1234")  # in a Vertex job
    assert main([*argv, "--hf-secret", "projects/p/secrets/missing"]) == 2
    assert capsys.readouterr().err.rstrip().endswith(
        ". The job's service account needs roles/secretmanager.secretAccessor on that secret")
    secret_manager.put("projects/p/secrets/empty", b"\n")
    assert main([*argv, "--hf-secret", "projects/p/secrets/empty"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: projects/p/secrets/empty/versions/latest (--hf-secret) holds no text: add the Hugging Face token as a "
        "new version of the secret (printf %s \"$VALUE\" | gcloud secrets versions add empty --data-file=-)")
    assert "HF_TOKEN" not in os.environ


def test_offline_the_secret_is_not_read(tmp_path, secret_manager, clean_hub_env, monkeypatch, sentiment_csv,
                                        tiny_model, capsys):
    # `ftcli local` with a local model and local data runs with HF_HUB_OFFLINE=1: no token would be sent, and reading
    # it would need Secret Manager access that this run does not use.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    train, _ = sentiment_csv
    assert main(["--task", "csv", "--train-file", str(train), "--model", str(tiny_model), "--epochs", "1",
                 "--max-train-samples", "32", "--output-dir", str(tmp_path / "run"), "--hf-secret", SECRET]) == 0
    assert secret_manager.requests == [] and "HF_TOKEN" not in os.environ
    assert "--hf-secret not read: HF_HUB_OFFLINE is set" in capsys.readouterr().out


def test_the_token_given_as_the_secret_is_not_repeated_in_the_error(capsys):
    assert main(["--hf-secret", TOKEN]) == 2
    err = capsys.readouterr().err
    assert TOKEN not in err
    assert err.splitlines() == [
        "error: --hf-secret takes the name of the Secret Manager secret that holds the Hugging Face token, not the "
        "token",
        "hint: store it there first (printf %s \"$HF_TOKEN\" | gcloud secrets create NAME --data-file=-), then give "
        "--hf-secret projects/PROJECT/secrets/NAME"]


@pytest.mark.parametrize("given", ["hf-token", "wandb_key"])
def test_a_secrets_short_name_is_asked_for_in_full(capsys, given):
    # `--hf-secret hf-token` was answered as if the token itself had been pasted ("..., not the token")
    assert main(["--hf-secret", given]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: --hf-secret {given!r} is a secret's short name; the trainer reads a secret by its full name",
        f"hint: give --hf-secret projects/PROJECT/secrets/{given} (optionally /versions/N)"]


@pytest.mark.parametrize("pasted", ["hf_abcdefghij", "0123456789abcdef0123456789abcdef01234567", "x" * 31])
def test_what_reads_as_a_credential_is_never_repeated(capsys, pasted):
    assert main(["--hf-secret", pasted]) == 2
    err = capsys.readouterr().err
    assert pasted not in err and "not the token" in err


def test_a_tls_endpoint_is_where_the_secret_is_read(tmp_path):
    """FTCLI_SECRETMANAGER_ENDPOINT=host:port (TLS, as the launcher's check takes it) was dropped here too: `ftcli
    local --hf-secret` read the secret from secretmanager.googleapis.com whatever it named. A listener takes the TLS
    hello; the reader, which retries for a minute, is then stopped. The login's token endpoint refuses every grant."""
    from tests.emulators.oauth import RefusingTokenEndpoint
    from tests.emulators.tls_probe import TlsProbe

    with RefusingTokenEndpoint() as tokens, TlsProbe() as probe:
        key = tmp_path / "adc.json"
        key.write_text(json.dumps({"type": "authorized_user", "client_id": "c", "client_secret": "s",
                                   "refresh_token": "r", "token_uri": tokens.url}))
        env = {**os.environ, "GOOGLE_APPLICATION_CREDENTIALS": str(key), "FTCLI_SECRETMANAGER_ENDPOINT": probe.endpoint,
               "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
        reader = subprocess.Popen([sys.executable, "-c", "from ftcli_trainer.secret_manager import read_secret; "
                                   f"read_secret({SECRET!r}, '--hf-secret', 'the token')"],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert probe.wait_for_hello(timeout=30), probe.first_bytes
        finally:
            reader.kill()
            reader.wait()
