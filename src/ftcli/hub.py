"""Can the job load a Hub `--model`? Asked of the Hugging Face Hub before anything is uploaded.

A mistyped id, a private model or a gated one (meta-llama/...) was packaged, uploaded and given a GPU machine,
and only then did the trainer fail to load it. One GET of the Hub's model API answers it as the job would be
answered: without a token, since the job gets none (with --hf-secret it gets one: a gated or private model passes).

What the Hub answers (the Hub is the specification; read 2026-11-27):
- GET {HF_ENDPOINT}/api/models/{repo_id}: the model's info, with `private`, `gated` (false, "auto" or "manual") and
  `siblings` (its files, [{"rfilename": ...}]); a gated model's info and file list are public, its files are not
  ("Gated models", https://huggingface.co/docs/hub/models-gated: "You can list files but not access them").
- A missing repo, and a private one asked without a token that can read it, are one answer: 401 (no token) or 404,
  with `X-Error-Code: RepoNotFound` ("401 is misleading as it is returned for: private and gated repos if user is
  not authenticated, missing repos", huggingface_hub 2.4.0's utils/_http.py hf_raise_for_status, from
  https://github.com/huggingface/huggingface_hub/pull/1202). An invalid token is a 401 whose `X-Error-Message` is
  "Invalid credentials in Authorization header" (the same function).
- A renamed or transferred repo redirects to its new name (followed here as from_pretrained follows it).

The huggingface_hub library answers the same through HfApi.model_info, but it is not a launcher dependency: it
brings httpx2, click, fsspec, pyyaml, tqdm, filelock and hf-xet (a 4.3 MB compiled wheel) for two GET requests.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# (INVALID_TOKEN: the Hub's word for a bad token; token_or_download: the trainer's fix for a gated or private model)
from ftcli_trainer.model import INVALID_TOKEN, hub_switch, token_or_download

HUB = "https://huggingface.co"
TIMEOUT_S = 8.0  # after local.hub_unreachable's few seconds: a Hub that accepts a connection and never answers
def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set as huggingface_hub reads it: no Hub request is made."""
    return hub_switch("HF_HUB_OFFLINE") or hub_switch("TRANSFORMERS_OFFLINE")


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or HUB).rstrip("/")


def user_token() -> str | None:
    """This machine's Hugging Face token, where huggingface_hub finds it (HF_TOKEN, HUGGING_FACE_HUB_TOKEN, then the
    file `hf auth login` writes: HF_TOKEN_PATH, else HF_HOME/token, else ~/.cache/huggingface/token). Only used to
    tell a private model from a missing one; never sent to the job. None with HF_HUB_DISABLE_IMPLICIT_TOKEN."""
    if hub_switch("HF_HUB_DISABLE_IMPLICIT_TOKEN"):
        return None
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if not token:
        home = os.environ.get("HF_HOME") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
        path = os.environ.get("HF_TOKEN_PATH") or os.path.join(os.path.expanduser(home), "token")
        try:
            token = Path(os.path.expanduser(path)).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
    return token.strip() or None


@dataclass(frozen=True)
class Answer:
    """The Hub's answer to one model-info request: `status` None when there was none (`why` says why)."""

    status: int | None
    info: dict[str, Any] | None = None
    error_code: str = ""
    error_message: str = ""
    why: str = ""


def model_info(repo_id: str, token: str | None = None) -> Answer:
    import urllib.error
    import urllib.request
    from urllib.parse import quote

    from ftcli import __version__

    headers = {"User-Agent": f"ftcli/{__version__}", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"{endpoint()}/api/models/{quote(repo_id, safe='/')}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            body = response.read()
    except urllib.error.HTTPError as e:
        return Answer(e.code, error_code=e.headers.get("X-Error-Code") or "",
                      error_message=e.headers.get("X-Error-Message") or "", why=f"HTTP {e.code}")
    except OSError as e:  # URLError, a timeout, a closed connection
        reason = getattr(e, "reason", None) or e
        return Answer(None, why=str(reason) or type(reason).__name__)
    except ValueError as e:  # an HF_ENDPOINT that is not a URL
        return Answer(None, why=str(e))
    try:
        info = json.loads(body)
    except ValueError:
        info = None
    if not isinstance(info, dict):  # a page of a proxy or a captive portal, say
        return Answer(None, why="its answer was not a model's info")
    return Answer(200, info)


def _not_found(answer: Answer) -> bool:
    # huggingface_hub's RepositoryNotFoundError rule (hf_raise_for_status): a 404 without the Hub's RepoNotFound code
    # is some other server's answer (a proxy's, an HF_ENDPOINT without the model API), which says nothing of the model
    return answer.error_code == "RepoNotFound" or (answer.status == 401 and answer.error_message != INVALID_TOKEN)


def _token_or_download(repo_id: str, flag: str) -> str:
    # the trainer's own two ways for a Vertex job (its hint for a gated or private model), from the same words
    where = "give --model DIR" if flag == "--model" else f"give DIR in its place ({flag}=choice(DIR,...))"
    return token_or_download(repo_id, where)


def _gated(flag: str, repo_id: str) -> str:
    return (f"{flag} {repo_id} is a gated model on the Hugging Face Hub, and the job gets no Hugging Face token "
            f"without --hf-secret: {_token_or_download(repo_id, flag)} (logged in here with an account that has "
            "access: hf auth login)")


def _config_problem(flag: str, repo_id: str, info: dict[str, Any]) -> str | None:
    siblings = info.get("siblings")
    if not isinstance(siblings, list):
        return None  # not said: not judged
    files = [s.get("rfilename") for s in siblings if isinstance(s, dict)]
    if "config.json" in files:
        return None
    shown = ", ".join(str(f) for f in files[:4]) + (", ..." if len(files) > 4 else "") or "no files"
    return (f"{flag} {repo_id}: the Hugging Face Hub model has no config.json ({shown}), so transformers cannot load "
            "it as a classifier; give a transformers model (one with a config.json)")


def check_model(repo_id: str, *, job_has_token: bool, flag: str = "--model", default: str | None = None,
                checks: dict | None = None) -> tuple[str | None, str | None]:
    """Whether the job can load Hub model `repo_id`: (problem, note), each one line or None. `job_has_token`: the
    job gets a Hugging Face token, so a gated or private model it names passes (a missing one does not). `default`
    is the task's default model, offered when `repo_id` looks like a typo of it. The Hub unreachable from here, or
    not answering, is a note and never a problem; HF_HUB_OFFLINE=1 skips the look-up. `checks` keeps whether the
    Hub could be reached, and answered, for the next model's check."""
    if offline():
        return None, None
    from ftcli.local import hub_unreachable

    known = checks if checks is not None else {}
    if "hub unreachable" not in known:
        known["hub unreachable"] = hub_unreachable()  # one connection, a few seconds at most
    if why := known["hub unreachable"]:
        return None, (f"the Hugging Face Hub is not reachable from here ({why}): {flag} {repo_id} is not looked up "
                      "before the job downloads it")
    if why := known.get("hub silent"):  # (each model waited TIMEOUT_S for a Hub that answers none)
        return None, (f"the Hugging Face Hub did not answer an earlier look-up ({why}): {flag} {repo_id} is not "
                      "looked up before the job downloads it")
    answer = model_info(repo_id)
    if answer.status is None:
        known["hub silent"] = answer.why
    if answer.status == 200 and answer.info is not None:
        gated = answer.info.get("gated")
        if gated and not job_has_token:
            return _gated(flag, repo_id), None
        if answer.info.get("private") and not job_has_token:  # (not answered so without a token)
            return (f"{flag} {repo_id} is a private model on the Hugging Face Hub, and the job gets no Hugging Face "
                    f"token without --hf-secret: {_token_or_download(repo_id, flag)}"), None
        return _config_problem(flag, repo_id, answer.info), None
    if answer.error_code == "GatedRepo" and not job_has_token:  # (the model API answers 200 for a gated model)
        return _gated(flag, repo_id), None
    if answer.status is None or answer.error_code == "GatedRepo" or not _not_found(answer):
        return None, (f"the Hugging Face Hub did not answer for {flag} {repo_id} ({answer.why}): it is not looked "
                      "up before the job downloads it")
    # Not found without a token: missing, or private. This machine's token (when there is one) tells them apart.
    token = user_token()
    mine = model_info(repo_id, token) if token else None
    if mine is not None and mine.status == 200 and mine.info is not None:
        if job_has_token:
            return _config_problem(flag, repo_id, mine.info), None
        return (f"{flag} {repo_id} is a private model on the Hugging Face Hub (your token can read it; the job gets "
                f"no Hugging Face token without --hf-secret): {_token_or_download(repo_id, flag)}"), None
    guess = default if default and default != repo_id and _typo_of(repo_id, default) else None
    spelling = f"check its spelling (did you mean {guess}, the task's default model?)" if guess else \
        "check its spelling"
    if mine is not None and _not_found(mine) and mine.error_message != INVALID_TOKEN:
        if job_has_token:  # the job's token (--hf-secret: an organisation's, say) may read what yours cannot
            return None, (f"{flag} {repo_id} is not on the Hugging Face Hub for your Hugging Face token either: "
                          f"{spelling} (only --hf-secret's token, which ftcli does not read, could load it)")
        return (f"{flag} {repo_id} is not on the Hugging Face Hub (asked with your Hugging Face token too): "
                f"{spelling}"), None
    if job_has_token:
        return None, (f"{flag} {repo_id} is not on the Hugging Face Hub, or is private (the Hub does not say which to "
                      "a request without a token): it is not checked before the job downloads it")
    return (f"{flag} {repo_id} is not on the Hugging Face Hub, or is private (the Hub does not say which without a "
            f"token, and the job gets none without --hf-secret): {spelling}, or, for a private model, "
            f"{_token_or_download(repo_id, flag)}"), None


def _typo_of(given: str, known: str) -> bool:
    """`given` is at most two typing slips (a letter left out, added, changed, or two swapped) from `known`: a closer
    look-alike than that (bert-base-uncsed for bert-base-cased) is another model, not a typo."""
    a, b = given.lower(), known.lower()
    if abs(len(a) - len(b)) > 2 or min(len(a), len(b)) < 5:
        return False
    from ftcli.spelling import edits

    return edits(a, b) <= 2
