"""The pure CustomJob builder: whole-dict equality for realistic requests, rejections, and the proto round trip."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from ftcli.catalog import Hardware, resolve_gpu
from ftcli.errors import UsageError
from ftcli.gcp.vertex import to_proto
from ftcli.spec import REDUCTION_SERVER_START_SCRIPT, START_SCRIPT, JobRequest, build_custom_job

PACKAGE = "gs://my-bucket/ftcli/packages/ftcli_trainer-0.1.0+3f2a9c-py3-none-any.whl"
WHEEL = "/gcs/my-bucket/ftcli/packages/ftcli_trainer-0.1.0+3f2a9c-py3-none-any.whl"
IMAGE = "docker.io/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"
DISK = {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100}
COMMAND = ["bash", "-c", START_SCRIPT, "ftcli-trainer"]


def env(wheel=WHEEL, *extra):
    return [{"name": "FTCLI_TRAINER_WHEEL", "value": wheel}, {"name": "PYTHONUNBUFFERED", "value": "1"}, *extra]


def request(**changes) -> JobRequest:
    base = JobRequest(
        project="my-project",
        region="us-central1",
        display_name="ftcli-imdb-20240501-120000",
        hardware=resolve_gpu("T4"),
        image=IMAGE,
        package_uri=PACKAGE,
        args=("--task", "imdb", "--epochs", "2"),
        base_output_dir="gs://my-bucket/ftcli/runs/imdb-20240501-120000",
    )
    return dataclasses.replace(base, **changes)


T4_SINGLE = request(extras=("hub",))
T4_SINGLE_JOB = {
    "displayName": "ftcli-imdb-20240501-120000",
    "jobSpec": {
        "workerPoolSpecs": [{
            "machineSpec": {"machineType": "n1-standard-8", "acceleratorType": "NVIDIA_TESLA_T4",
                            "acceleratorCount": 1},
            "replicaCount": "1",
            "containerSpec": {
                "imageUri": IMAGE,
                "command": COMMAND,
                "args": ["--task", "imdb", "--epochs", "2"],
                "env": env(WHEEL + "[hub]"),
            },
            "diskSpec": DISK,
        }],
        "scheduling": {"timeout": "86400s"},
        "baseOutputDirectory": {"outputUriPrefix": "gs://my-bucket/ftcli/runs/imdb-20240501-120000"},
    },
}

L4_SPOT = request(
    region="europe-west4",
    display_name="ftcli-financial",
    hardware=resolve_gpu("L4"),
    args=("--task", "financial", "--dataset-config", "sentences_50agree"),
    base_output_dir="gs://eu-bucket/runs/financial/",
    spot=True,
    timeout_s=6 * 3600,
    service_account="trainer@my-project.iam.gserviceaccount.com",
    labels=(("ftcli_task", "financial"), ("team", "nlp")),
    env=(("WANDB_PROJECT", "financial"), ("TOKENIZERS_PARALLELISM", "false")),
)
L4_SPOT_JOB = {
    "displayName": "ftcli-financial",
    "labels": {"ftcli_task": "financial", "team": "nlp"},
    "jobSpec": {
        "workerPoolSpecs": [{
            "machineSpec": {"machineType": "g2-standard-8", "acceleratorType": "NVIDIA_L4", "acceleratorCount": 1},
            "replicaCount": "1",
            "containerSpec": {
                "imageUri": IMAGE,
                "command": COMMAND,
                "args": ["--task", "financial", "--dataset-config", "sentences_50agree"],
                "env": env(WHEEL, {"name": "WANDB_PROJECT", "value": "financial"},
                           {"name": "TOKENIZERS_PARALLELISM", "value": "false"}),
            },
            "diskSpec": DISK,
        }],
        "scheduling": {"timeout": "21600s", "strategy": "SPOT", "restartJobOnWorkerRestart": True},
        "serviceAccount": "trainer@my-project.iam.gserviceaccount.com",
        # the trailing slash given is dropped: Vertex appends /model/ and the others itself
        "baseOutputDirectory": {"outputUriPrefix": "gs://eu-bucket/runs/financial"},
    },
}

A100_REDUCTION = request(
    region="asia-southeast1",
    display_name="ftcli-mnli-bert-large",
    hardware=resolve_gpu("A100x8"),
    args=("--task", "mnli", "--model", "bert-large-uncased"),
    base_output_dir="gs://asia-bucket/runs/mnli",
    replicas=2,
    reduction_server=2,
)
_A100_WORKER = {
    "machineSpec": {"machineType": "a2-highgpu-8g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 8},
    "containerSpec": {
        "imageUri": IMAGE,
        "command": ["bash", "-c", REDUCTION_SERVER_START_SCRIPT, "ftcli-trainer"],
        "args": ["--task", "mnli", "--model", "bert-large-uncased"],
        "env": env(),
    },
    "diskSpec": DISK,
}
A100_REDUCTION_JOB = {
    "displayName": "ftcli-mnli-bert-large",
    "jobSpec": {
        "workerPoolSpecs": [
            {**_A100_WORKER, "replicaCount": "1"},
            {**_A100_WORKER, "replicaCount": "1"},
            {
                "machineSpec": {"machineType": "n1-highcpu-16"},
                "replicaCount": "2",
                "containerSpec": {
                    "imageUri": "asia-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"},
                "diskSpec": DISK,
            },
        ],
        "scheduling": {"timeout": "86400s", "restartJobOnWorkerRestart": True},
        "baseOutputDirectory": {"outputUriPrefix": "gs://asia-bucket/runs/mnli"},
    },
}

CPU = request(hardware=resolve_gpu("none"), args=(), display_name="ftcli-sample")
CPU_JOB = {
    "displayName": "ftcli-sample",
    "jobSpec": {
        "workerPoolSpecs": [{
            "machineSpec": {"machineType": "n1-standard-8"},
            "replicaCount": "1",
            "containerSpec": {"imageUri": IMAGE, "command": COMMAND, "env": env()},
            "diskSpec": DISK,
        }],
        "scheduling": {"timeout": "86400s"},
        "baseOutputDirectory": {"outputUriPrefix": "gs://my-bucket/ftcli/runs/imdb-20240501-120000"},
    },
}

H200_SPOT = request(hardware=resolve_gpu("H200"), spot=True, display_name="h200")
B200_FLEX = request(hardware=resolve_gpu("B200"), flex_start=True, max_wait_s=7200, display_name="b200",
                    image="docker.io/pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime")
H200_RESERVED = request(hardware=resolve_gpu("H200"), display_name="h200-reserved",
                        reservation="projects/my-project/zones/us-central1-a/reservations/h200s")

CASES = {"t4-single": (T4_SINGLE, T4_SINGLE_JOB), "l4-spot": (L4_SPOT, L4_SPOT_JOB),
         "a100x8-reduction-server": (A100_REDUCTION, A100_REDUCTION_JOB), "cpu": (CPU, CPU_JOB)}
ALL = {**{k: v[0] for k, v in CASES.items()}, "h200-spot": H200_SPOT, "b200-flex": B200_FLEX,
       "h200-reserved": H200_RESERVED}


@pytest.mark.parametrize("case", CASES)
def test_build_custom_job(case):
    req, expected = CASES[case]
    assert build_custom_job(req) == expected


def test_start_script_installs_the_wheel_from_the_mount_and_runs_the_trainer_with_the_args():
    assert '"$FTCLI_TRAINER_WHEEL"' in START_SCRIPT and "python -m pip install" in START_SCRIPT
    assert START_SCRIPT.startswith("set -eu\n")  # a failed install stops the job before training
    assert START_SCRIPT.rstrip().endswith('exec python -m ftcli_trainer.task "$@"')


def fake_wheel(folder: Path, name: str, version: str, requires: str = "") -> Path:
    """A pure-Python wheel `name` whose module holds its VERSION, requiring `requires`."""
    import zipfile

    path = folder / f"{name}-{version}-py3-none-any.whl"
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}/__init__.py", f"VERSION = {version!r}\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                   + (f"Requires-Dist: {requires}\n" if requires else ""))
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


def test_the_job_installs_a_dependencys_newest_wheel_not_a_newer_source_archive(tmp_path):
    # The image has no compilers: a dependency out as a source archive before its wheels (demo 2.0) would be built
    # there and fail the job. The start script's own pip line, run here against a local package folder.
    import os

    def wheel(name: str, version: str, requires: str = "") -> Path:
        return fake_wheel(tmp_path / "pkgs", name, version, requires)

    wheel("demo", "1.0")
    sdist = tmp_path / "pkgs" / "demo-2.0"
    (sdist).mkdir()
    (sdist / "setup.py").write_text("raise SystemExit('no compiler on the image')\n")
    (sdist / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: demo\nVersion: 2.0\n")
    subprocess.run(["tar", "-czf", str(sdist) + ".tar.gz", "-C", str(tmp_path / "pkgs"), "demo-2.0"], check=True)
    subprocess.run(["rm", "-r", str(sdist)], check=True)
    trainer = wheel("app", "0.1", requires="demo")
    script = START_SCRIPT.split("exec python")[0].replace("python -m pip", f"{sys.executable} -m pip")
    env = {**os.environ, "FTCLI_TRAINER_WHEEL": str(trainer), "PIP_NO_INDEX": "1",
           "PIP_FIND_LINKS": str(tmp_path / "pkgs"), "PIP_TARGET": str(tmp_path / "site")}
    r = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "site" / "demo" / "__init__.py").read_text() == "VERSION = '1.0'\n"


# The image's torch is its build for the GPU: the start script never lets pip replace it. Run with a real pip in a
# venv standing in for the image, whose torch is a dist-info of the version asked for, and a local index holding a
# newer torch (PyPI's newest, 3 GB of CUDA wheels in the job) and the trainer, which needs torch>=2.6.
@pytest.fixture(scope="module")
def image_venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("image")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, capture_output=True, timeout=300)
    return root / "venv"


def run_start_script(tmp_path, venv: Path, torch: str | None) -> tuple[subprocess.CompletedProcess, str | None]:
    """Run the start script's install in `venv` holding `torch` (or none); returns the run and the torch version the
    venv has afterwards."""
    import os
    import shutil

    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path("
                                "'purelib'))"], check=True, capture_output=True, text=True).stdout.strip())
    for old in [*site.glob("torch"), *site.glob("torch-*.dist-info")]:
        shutil.rmtree(old)
    if torch is not None:
        info = site / f"torch-{torch}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {torch}\n")
        (info / "RECORD").write_text("")
        (info / "INSTALLER").write_text("pip\n")
    pkgs = tmp_path / "pkgs"
    fake_wheel(pkgs, "torch", "2.15.0")
    trainer = fake_wheel(pkgs, "app", "0.1", requires="torch>=2.6")
    script = START_SCRIPT.split("exec python")[0]
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "FTCLI_TRAINER_WHEEL": str(trainer),
           "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(pkgs)}
    r = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=300)
    after = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.metadata as m; "
                            "print(m.version('torch'))"], capture_output=True, text=True)
    return r, after.stdout.strip() if after.returncode == 0 else None


def test_the_start_script_installs_the_trainer_beside_the_images_torch(tmp_path, image_venv):
    r, torch = run_start_script(tmp_path, image_venv, "2.7.1+cu126")
    assert r.returncode == 0, r.stderr
    assert torch == "2.7.1+cu126"
    assert subprocess.run([str(image_venv / "bin" / "python"), "-c", "import app"]).returncode == 0


@pytest.mark.parametrize(("torch", "shown"), [("2.5.1+cu124", "torch 2.5.1+cu124"), (None, "torch none")])
def test_the_start_script_never_replaces_the_images_torch(tmp_path, image_venv, torch, shown):
    # An image whose torch is below the trainer's floor, or that has none, used to get PyPI's newest torch at every
    # start (torch 2.15.0 and 3 GB of CUDA 13 wheels for pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime)
    r, after = run_start_script(tmp_path, image_venv, torch)
    assert r.returncode == 1, r.stdout + r.stderr
    assert after == torch
    python = subprocess.run([str(image_venv / "bin" / "python"), "-c", "import platform; "
                             "print(platform.python_version())"], capture_output=True, text=True).stdout.strip()
    assert r.stderr.splitlines()[-1] == (
        "ftcli: pip could not install the trainer into this image (its ERROR lines above say why): the trainer needs "
        f"Python >=3.11 and torch>=2.6; the image has Python {python} and {shown}, which is kept (never replaced by "
        "one from PyPI); use an image that has both, or leave --image out; the job stops here")



def test_the_start_script_waits_out_a_pypi_hiccup(tmp_path, image_venv):
    # pip's own 5 retries give up after about 8 s: an index answering 503 for a few seconds failed the job's start
    # with "No matching distribution found". Here the index fails its first 6 requests (the first try and 5 retries).
    import http.server
    import os
    import threading

    pkgs = tmp_path / "simple"
    fake_wheel(pkgs / "demo", "demo", "1.0")
    (pkgs / "demo" / "index.html").write_text('<a href="demo-1.0-py3-none-any.whl">demo-1.0-py3-none-any.whl</a>\n')
    failures = {"left": 6}

    class Flaky(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(tmp_path), **kwargs)

        def do_GET(self):
            if failures["left"] > 0:
                failures["left"] -= 1
                self.send_error(503)
                return
            super().do_GET()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        trainer = fake_wheel(tmp_path / "dist", "app", "0.1", requires="demo")
        env = {"PATH": f"{image_venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path),
               "FTCLI_TRAINER_WHEEL": str(trainer), "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": f"http://127.0.0.1:{server.server_port}/simple",
               "PIP_DRY_RUN": "1"}
        r = subprocess.run(["bash", "-c", START_SCRIPT.split("exec python")[0]], env=env, capture_output=True,
                           text=True, timeout=300)
    finally:
        server.shutdown()
    assert failures["left"] == 0
    assert r.returncode == 0, r.stderr

# --- the Reduction Server plugin install, run under bash with fake apt-get/dpkg/python on PATH -------------------
# The Vertex emulator does not run Reduction Server pools, and the real install needs root and the network; so the
# workers' script runs here as it is, with /etc/apt/ moved to a temporary folder (as the emulator moves /gcs/).

FAKE_PYTHON = """#!/bin/bash
echo "python $*" >> "$FAKE_LOG"
case "$*" in
  *apt-key.gpg*)
    case "$FAKE_KEY" in
      fail) echo "urllib.error.URLError: <urlopen error timed out>" >&2; exit 1 ;;
      binary) printf '\\x99\\x01\\x0d\\x04' ;;
      *) printf -- '-----BEGIN PGP PUBLIC KEY BLOCK-----\\n\\nmQENBF...\\n-----END PGP PUBLIC KEY BLOCK-----\\n' ;;
    esac ;;
esac
"""
FAKE_APT_GET = """#!/bin/bash
echo "apt-get $*" >> "$FAKE_LOG"
case "$*" in
  *update*) [ "$FAKE_APT" != update ] || { echo "E: The repository is not signed." >&2; exit 100; } ;;
  *install*) [ "$FAKE_APT" != install ] || { echo "E: Unable to locate package" >&2; exit 100; } ;;
esac
"""
FAKE_DPKG = """#!/bin/bash
echo "dpkg $*" >> "$FAKE_LOG"
echo /usr/share/doc/google-reduction-server/copyright
[ "$FAKE_LIB" = none ] || echo "$FAKE_LIB"
"""


def run_reduction_server_script(tmp_path, **fakes):
    """Run the workers' start script; returns (exit status, stderr, the fakes' log lines, the /etc/apt stand-in)."""
    bin_dir, etc = tmp_path / "bin", tmp_path / "etc-apt"
    bin_dir.mkdir()
    (etc / "sources.list.d").mkdir(parents=True)
    for name, text in (("python", FAKE_PYTHON), ("apt-get", FAKE_APT_GET), ("dpkg", FAKE_DPKG)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    lib = tmp_path / "libnccl-net.so"
    lib.write_text("")
    log = tmp_path / "log"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_LOG": str(log), "FTCLI_TRAINER_WHEEL": WHEEL,
           "FAKE_KEY": "armored", "FAKE_APT": "ok", "FAKE_LIB": str(lib), **fakes}
    command = build_custom_job(A100_REDUCTION)["jobSpec"]["workerPoolSpecs"][1]["containerSpec"]["command"]
    assert command[:2] == ["bash", "-c"]
    script = command[2].replace("/etc/apt/", f"{etc}/")
    r = subprocess.run(["bash", "-c", script, "ftcli-trainer", "--task", "mnli"], env=env, capture_output=True,
                       text=True, timeout=60)
    return r.returncode, r.stderr, log.read_text().splitlines() if log.exists() else [], etc


def test_reduction_server_plugin_installs_before_the_trainer_runs(tmp_path):
    rc, err, log, etc = run_reduction_server_script(tmp_path)
    assert rc == 0, err
    assert [line.split()[:2] for line in log] == [
        ["python", "-c"], ["apt-get", "update"], ["apt-get", "install"], ["dpkg", "-L"],
        ["python", "-c"], ["python", "-m"], ["python", "-m"]]  # the image's torch version, pip, the trainer
    assert log[2] == "apt-get install -y -qq google-reduction-server"
    assert log[-1] == "python -m ftcli_trainer.task --task mnli"
    # The key is ASCII-armored, so it is kept as .asc (apt reads armor only from .asc) and named by signed-by.
    assert (etc / "keyrings/google-fast-socket.asc").read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    assert (etc / "sources.list.d/google-fast-socket.list").read_text() == (
        f"deb [signed-by={etc}/keyrings/google-fast-socket.asc] https://packages.cloud.google.com/apt "
        "google-fast-socket main\n")  # /etc/apt/keyrings/... in the job


@pytest.mark.parametrize(("fakes", "why"), [
    ({"FAKE_KEY": "fail"}, "downloading its apt key https://packages.cloud.google.com/apt/doc/apt-key.gpg failed"),
    ({"FAKE_KEY": "binary"},
     "its apt key https://packages.cloud.google.com/apt/doc/apt-key.gpg is not an ASCII-armored key any more"),
    ({"FAKE_APT": "update"}, "apt-get update failed"),
    ({"FAKE_APT": "install"}, "apt-get install google-reduction-server failed"),
    ({"FAKE_LIB": "/usr/lib/libnccl-net-gone.so"}, "/usr/lib/libnccl-net-gone.so is missing after the install"),
])
def test_reduction_server_plugin_failure_stops_the_job_before_the_trainer(tmp_path, fakes, why):
    rc, err, log, _ = run_reduction_server_script(tmp_path, **fakes)
    assert rc == 1
    assert err.splitlines()[-1] == (
        f"ftcli: cannot install the Reduction Server NCCL plugin (google-reduction-server): {why}; the job stops here")
    assert not [line for line in log if "pip install" in line or "ftcli_trainer" in line]


def test_a_plugin_package_that_lists_no_library_is_a_warning_not_a_stop(tmp_path):
    # Google's docs name no file; the library may come with one of the package's dependencies.
    rc, err, log, _ = run_reduction_server_script(tmp_path, FAKE_LIB="none")
    assert rc == 0, err
    assert log[-1] == "python -m ftcli_trainer.task --task mnli"


def test_only_reduction_server_jobs_install_the_plugin():
    assert "google-reduction-server" not in START_SCRIPT
    assert REDUCTION_SERVER_START_SCRIPT.startswith("set -eu\n")
    assert REDUCTION_SERVER_START_SCRIPT.endswith(START_SCRIPT.removeprefix("set -eu\n"))


def test_h200_spot_boots_from_hyperdisk():
    pool = build_custom_job(H200_SPOT)["jobSpec"]["workerPoolSpecs"][0]
    assert pool["machineSpec"] == {"machineType": "a3-ultragpu-8g", "acceleratorType": "NVIDIA_H200_141GB",
                                   "acceleratorCount": 8}
    assert pool["diskSpec"] == {"bootDiskType": "hyperdisk-balanced", "bootDiskSizeGb": 100}


def test_flex_start_and_reservation():
    job = build_custom_job(B200_FLEX)
    assert job["jobSpec"]["scheduling"] == {"timeout": "86400s", "strategy": "FLEX_START", "maxWaitDuration": "7200s"}
    pool = build_custom_job(H200_RESERVED)["jobSpec"]["workerPoolSpecs"][0]
    assert pool["machineSpec"]["reservationAffinity"] == {
        "reservationAffinityType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
        "values": ["projects/my-project/zones/us-central1-a/reservations/h200s"]}
    anyone = build_custom_job(request(hardware=resolve_gpu("H200"), reservation="any"))
    assert anyone["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["reservationAffinity"] == {
        "reservationAffinityType": "ANY_RESERVATION"}


def test_replicas_without_reduction_server():
    job = build_custom_job(request(replicas=3))
    pools = job["jobSpec"]["workerPoolSpecs"]
    assert len(pools) == 2
    assert [p["replicaCount"] for p in pools] == ["1", "2"]
    assert pools[1] == {**pools[0], "replicaCount": "2"}
    pools[1]["machineSpec"]["machineType"] = "changed"  # the pools share no nested dict
    assert pools[0]["machineSpec"]["machineType"] == "n1-standard-8"


def test_several_machines_restart_together_spot_or_not():
    # A worker Vertex restarts alone (VM maintenance, a non-zero exit) finds the others stuck in a collective:
    # restartJobOnWorkerRestart was set only with --spot, so an on-demand multi-machine job hung instead.
    assert build_custom_job(request(replicas=2))["jobSpec"]["scheduling"] == {
        "timeout": "86400s", "restartJobOnWorkerRestart": True}
    assert build_custom_job(A100_REDUCTION)["jobSpec"]["scheduling"]["restartJobOnWorkerRestart"] is True
    flex = build_custom_job(request(replicas=2, hardware=resolve_gpu("A100"), flex_start=True, max_wait_s=3600))
    assert flex["jobSpec"]["scheduling"] == {"timeout": "86400s", "restartJobOnWorkerRestart": True,
                                             "strategy": "FLEX_START", "maxWaitDuration": "3600s"}
    # One machine: a worker restart is the whole job's already; nothing is added.
    assert "restartJobOnWorkerRestart" not in build_custom_job(request())["jobSpec"]["scheduling"]


def test_parent():
    assert request().parent == "projects/my-project/locations/us-central1"


@pytest.mark.parametrize("labels", [
    (("a" * 63, "b" * 63),),
    (("k", ""),),
    (("ftcli_run-id", "2024-05-01_12"),),
    tuple((f"k{i}", "v") for i in range(64)),
    # "International characters are allowed" (CustomJob.labels, see ftcli.spec; read 2026-11-27): they were refused
    (("équipe", "recherche-nlp"), ("team", "équipe"), ("チーム", "開発"), ("ünit", "ß")),
])
def test_valid_labels(labels):
    assert build_custom_job(request(labels=labels))["labels"] == dict(labels)


REJECTED = [
    (dict(replicas=0), "--replicas must be 1 or more (got 0)"),
    (dict(reduction_server=-1), "--reduction-server must be 0 or more (got -1)"),
    (dict(reduction_server=1), "--reduction-server needs --replicas 2 or more"),
    (dict(reduction_server=1, hardware=resolve_gpu("A100x8")), "--reduction-server needs --replicas 2 or more"),
    (dict(reduction_server=1, replicas=2, hardware=resolve_gpu("none")), "--reduction-server needs GPU workers"),
    (dict(timeout_s=0), "the job timeout must be at least 1 second (got 0)"),
    (dict(package_uri="/tmp/ftcli_trainer.whl"), "the trainer package must be a gs://BUCKET/OBJECT URI"),
    (dict(package_uri="gs://bucket-only"), "the trainer package must be a gs://BUCKET/OBJECT URI"),
    (dict(base_output_dir="./runs/x"), "the output directory must be a gs://BUCKET[/PATH] URI for a Vertex job, "
                                       "not './runs/x'"),
    (dict(base_output_dir="s3://bucket/x"), "the output directory must be a gs://"),
    (dict(display_name=""), "the job's display name is empty"),
    (dict(display_name="x" * 129), "the job's display name has 129 characters; Vertex allows at most 128"),
    (dict(display_name="run\n2"), "the job's display name 'run\\n2' has a control character"),
    (dict(display_name="a\tb"), "has a control character"),
    (dict(image="two words"), "the image 'two words' is not an image reference"),
    (dict(env=(("FTCLI_TRAINER_WHEEL", "x"),)), "environment variable FTCLI_TRAINER_WHEEL is ftcli's own"),
    (dict(service_account="trainer"), "service account 'trainer' is not an email"),
    (dict(labels=(("Team", "nlp"),)), "label key 'Team' is invalid: it must start with a lowercase letter"),
    (dict(labels=(("1team", "nlp"),)), "label key '1team' is invalid"),
    (dict(labels=(("a" * 64, "x"),)), "label key 'aaaa"),
    (dict(labels=(("team", "NLP"),)), "--labels: label value 'NLP' (of 'team') is invalid"),  # the flag it came from
    (dict(labels=(("team", "a.b"),)), "label value 'a.b' (of 'team') is invalid"),
    (dict(labels=(("team", "Équipe"),)), "label value 'Équipe' (of 'team') is invalid"),  # upper case, any script
    (dict(labels=(("Équipe", "x"),)), "label key 'Équipe' is invalid"),
    (dict(labels=(("_team", "x"),)), "label key '_team' is invalid"),
    (dict(labels=(("team", "é" * 64),)), "label value 'éééé"),
    (dict(labels=(("team", "x" * 64),)), "label value 'xxxx"),
    (dict(labels=(("team", "a"), ("team", "b"))), "label 'team' is given more than once"),
    (dict(labels=tuple((f"k{i}", "v") for i in range(65))), "65 labels; Vertex allows at most 64"),
    (dict(env=(("1BAD", "x"),)), "environment variable name '1BAD' is invalid"),
    (dict(env=(("A", "1"), ("A", "2"))), "environment variable A is given more than once"),
]


@pytest.mark.parametrize(("changes", "message"), REJECTED)
def test_rejected(changes, message):
    with pytest.raises(UsageError) as info:
        build_custom_job(request(**changes))
    assert message in info.value.message
    assert "\n" not in info.value.message and not info.value.problems


def test_every_problem_reported_at_once():
    with pytest.raises(UsageError) as info:
        build_custom_job(request(replicas=0, package_uri="x.whl", labels=(("Bad", "v"),)))
    assert info.value.message == "3 problems with the job:"
    assert len(info.value.problems) == 3


def test_the_shortest_timeout_is_one_second():
    # `--timeout 1s` parses to 1: the job goes out with it, as the check's own words ("at least 1 second") promise.
    assert build_custom_job(request(timeout_s=1))["jobSpec"]["scheduling"] == {"timeout": "1s"}


def test_the_largest_counts_an_int64_holds_are_sent_and_one_more_is_refused():
    # WorkerPoolSpec.replica_count is an int64: 2**63 - 1 converts to the message, 2**63 does not.
    most = 2**63 - 1
    job = build_custom_job(request(replicas=most, reduction_server=most))
    assert [p["replicaCount"] for p in job["jobSpec"]["workerPoolSpecs"]] == ["1", str(most - 1), str(most)]
    assert to_proto(job).job_spec.worker_pool_specs[2].replica_count == most
    for changes, message in [
        (dict(replicas=most + 1), f"--replicas {most + 1} is more than a worker pool's replicaCount can hold ({most})"),
        (dict(replicas=2, reduction_server=most + 1),
         f"--reduction-server {most + 1} is more than a worker pool's replicaCount can hold ({most})"),
    ]:
        with pytest.raises(UsageError) as info:
            build_custom_job(request(**changes))
        assert info.value.message == message


def test_two_problems_are_both_listed():
    # Two is already "several": the count line and both problems, not the first alone nor the count without them.
    with pytest.raises(UsageError) as info:
        build_custom_job(request(replicas=0, timeout_s=0))
    assert info.value.message == "2 problems with the job:"
    assert info.value.problems == ["--replicas must be 1 or more (got 0)",
                                   "the job timeout must be at least 1 second (got 0)"]


# --- the proto round trip: the dict's names and value forms are the real CustomJob's -------------------

@pytest.mark.parametrize("case", ALL)
def test_proto_round_trip(case):
    # H200/B200 enums, Scheduling.strategy FLEX_START, maxWaitDuration and reservationAffinity need
    # google-cloud-aiplatform >= 1.93 (1.60 raised on them), NVIDIA_RTX_PRO_6000 >= 1.120: within pyproject's floor.
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    job = build_custom_job(ALL[case])
    proto = to_proto(job)
    assert isinstance(proto, aiplatform_v1.CustomJob)
    assert json_format.MessageToDict(aiplatform_v1.CustomJob.pb(proto)) == job


def test_proto_fields():
    from google.cloud import aiplatform_v1

    proto = to_proto(build_custom_job(A100_REDUCTION))
    pools = proto.job_spec.worker_pool_specs
    assert pools[0].machine_spec.accelerator_type == aiplatform_v1.AcceleratorType.NVIDIA_TESLA_A100
    assert pools[0].machine_spec.accelerator_count == 8
    assert pools[2].replica_count == 2
    assert proto.job_spec.scheduling.timeout.total_seconds() == 86400
    spot = to_proto(build_custom_job(L4_SPOT)).job_spec.scheduling
    assert spot.strategy == aiplatform_v1.Scheduling.Strategy.SPOT and spot.restart_job_on_worker_restart
    h200 = to_proto(build_custom_job(H200_SPOT))
    assert h200.job_spec.worker_pool_specs[0].machine_spec.accelerator_type == (
        aiplatform_v1.AcceleratorType.NVIDIA_H200_141GB)
    assert h200.job_spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT
    b200 = to_proto(build_custom_job(B200_FLEX))
    assert b200.job_spec.worker_pool_specs[0].machine_spec.accelerator_type == aiplatform_v1.AcceleratorType.NVIDIA_B200
    assert b200.job_spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.FLEX_START
    assert b200.job_spec.scheduling.max_wait_duration.total_seconds() == 7200


def test_empty_pool_round_trips():
    # The positional padding Vertex documents for skipped pools survives the conversion.
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    pools = build_custom_job(A100_REDUCTION)["jobSpec"]["workerPoolSpecs"]
    job = {"displayName": "x", "jobSpec": {"workerPoolSpecs": [pools[0], {}, pools[2]]}}
    assert json_format.MessageToDict(aiplatform_v1.CustomJob.pb(to_proto(job))) == job


def test_to_proto_rejects_unknown_fields():
    from google.protobuf.json_format import ParseError

    with pytest.raises(ParseError):
        to_proto({"displayName": "x", "jobSpec": {"workerPools": []}})


def test_pure_modules_import_no_google():
    # Compared with the modules present at start-up: google's namespace .pth files import `google.cloud` itself.
    code = ("import sys; before = set(sys.modules); import ftcli.catalog, ftcli.spec, ftcli.images, ftcli.regions; "
            "bad = [m for m in set(sys.modules) - before if m.split('.')[0] in ('google', 'proto', 'grpc')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_hardware_is_what_resolve_gpu_returns():
    assert T4_SINGLE.hardware == Hardware("n1-standard-8", "NVIDIA_TESLA_T4", 1)


@pytest.mark.parametrize(("gpu", "level"), [("RTX-PRO-6000x2", "PHB"), ("RTX-PRO-6000x4", "PHB"),
                                            ("RTX-PRO-6000x8", "SYS")])
def test_multi_gpu_g4_workers_get_nccl_p2p_level(gpu, level):
    # Compute Engine's G4 section: NCCL_P2P_LEVEL=PHB on 2 or 4 GPUs, SYS on 8, so NCCL uses PCIe peer-to-peer.
    pool = build_custom_job(request(hardware=resolve_gpu(gpu)))["jobSpec"]["workerPoolSpecs"][0]
    assert pool["containerSpec"]["env"] == env(WHEEL, {"name": "NCCL_P2P_LEVEL", "value": level})
    assert pool["diskSpec"] == {"bootDiskType": "hyperdisk-balanced", "bootDiskSizeGb": 100}


def test_one_gpu_g4_and_other_machines_get_no_nccl_setting_and_the_users_own_wins():
    for gpu in ("RTX-PRO-6000", "L4x4", "A100x8"):
        pool = build_custom_job(request(hardware=resolve_gpu(gpu)))["jobSpec"]["workerPoolSpecs"][0]
        assert pool["containerSpec"]["env"] == env()
    mine = request(hardware=resolve_gpu("RTX-PRO-6000x8"), env=(("NCCL_P2P_LEVEL", "NVL"),))
    pool = build_custom_job(mine)["jobSpec"]["workerPoolSpecs"][0]
    assert pool["containerSpec"]["env"] == env(WHEEL, {"name": "NCCL_P2P_LEVEL", "value": "NVL"})


def test_values_reach_the_container_as_written_through_vertexs_variable_expansion():
    # Vertex expands $(VAR_NAME) in a container's args and env values and reduces $$ to $ (Kubernetes' rules,
    # spec.container_text): a label `$$$`, a column named `$(AIP_MODEL_DIR)` or a bucket prefix with a $ reached the
    # trainer changed. Every $ is doubled in what is sent; the emulator's expansion gives back the value exactly.
    from tests.emulators.runner import expand

    values = ("--label-names", "$,$$,$$$", "--text-column", "$(AIP_MODEL_DIR)", "--eval-file", "gs://b/x$(y/z$")
    wheel = "gs://my-bucket/a$$b/$(HOME)/ftcli_trainer-0.1.0-py3-none-any.whl"
    job = build_custom_job(request(args=values, package_uri=wheel, env=(("NOTE", "cost $(usd) $$"),)))
    container = job["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    assert container["args"][1] == "$$,$$$$,$$$$$$" and container["args"][3] == "$$(AIP_MODEL_DIR)"
    service = {"AIP_MODEL_DIR": "gs://b/run/model/", "HOME": "/root"}
    sent = {e["name"]: e["value"] for e in container["env"]}
    assert {k: expand(v, service) for k, v in sent.items()} == {
        "FTCLI_TRAINER_WHEEL": "/gcs/my-bucket/a$$b/$(HOME)/ftcli_trainer-0.1.0-py3-none-any.whl",
        "PYTHONUNBUFFERED": "1", "NOTE": "cost $(usd) $$"}
    assert [expand(a, service) for a in container["args"]] == list(values)
    # ftcli's own start scripts are sent as written: expansion leaves them as they are (no $$, no $(NAME) of a
    # variable the job has)
    variables = {**service, **sent}
    for script in (START_SCRIPT, REDUCTION_SERVER_START_SCRIPT):
        assert expand(script, variables) == script
    # and what `jobs describe` / `predict` read back is the value itself
    from ftcli.gcp.vertex import to_job

    proto = to_proto({**job, "name": "projects/p/locations/us-central1/customJobs/1"})
    assert to_job(proto).trainer_option("label_names") == "$,$$,$$$"
