"""The trainer wheel: only the trainer's modules, named by content, installable alone, with its true floors."""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest
from packaging.requirements import Requirement

from ftcli.errors import FtcliError
from ftcli.packaging import (
    EXTRAS,
    REQUIRES_PYTHON,
    TRAINER_DEPENDENCIES,
    TrainerPackage,
    allowlisted_files,
    build_wheel,
    content_hash,
    trainer_root,
)
from ftcli_trainer import __version__ as TRAINER_VERSION


def _copy(tmp_path):
    root = tmp_path / "ftcli_trainer"
    shutil.copytree(trainer_root(), root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_wheel_holds_only_the_trainer(tmp_path):
    # stray files a user may have next to the code never go in
    root = _copy(tmp_path)
    (root / ".env").write_text("SECRET=1")
    (root / "secrets").mkdir()
    (root / "secrets" / "key.json").write_text("{}")
    (root / "notes.ipynb").write_text("{}")
    wheel = build_wheel(tmp_path / "dist", root)
    pkg = TrainerPackage.current(root)
    assert wheel.name == pkg.filename and pkg.filename.startswith("ftcli_trainer-")
    assert pkg.filename.endswith("-py3-none-any.whl")
    names = zipfile.ZipFile(wheel).namelist()
    modules = sorted(n.rsplit("/", 1)[-1] for n in names if n.startswith("ftcli_trainer/"))
    assert modules == sorted(p.name for p in allowlisted_files(root))
    assert "task.py" in modules and "config.py" in modules
    assert not [n for n in names if "sample" in n or ".env" in n or "secrets" in n or "ipynb" in n
                or n.startswith("ftcli/")]
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Name: ftcli-trainer" in metadata and "typer" not in metadata
    assert f"Requires-Python: {REQUIRES_PYTHON}" in metadata
    # Read as requirements: setuptools 70.1 (the floor) writes "torch >=2.6" and "datasets >=3 ; extra == 'hub'"
    requires = {str(Requirement(line.split(":", 1)[1])) for line in metadata.splitlines()
                if line.startswith("Requires-Dist:")}
    assert "torch>=2.6" in requires
    assert 'datasets>=3; extra == "hub"' in requires


@pytest.mark.parametrize("digest", ["043222604127" + "0" * 52, "a43222604127" + "0" * 52, "000000000001" + "f" * 52])
def test_the_wheel_is_named_as_expected_whatever_its_hash(tmp_path, monkeypatch, digest):
    # A content hash whose first 12 hex digits were all decimal, from a 0 (043222604127...), made a local version that
    # setuptools normalizes (+43222604127): the wheel "came out as" another name than expected, and `ftcli train`
    # failed before uploading anything, for every run of that code.
    import ftcli.packaging

    monkeypatch.setattr(ftcli.packaging, "content_hash", lambda root=None: digest)
    root = _copy(tmp_path)
    wheel = build_wheel(tmp_path / "dist", root)
    assert wheel.name == TrainerPackage.current(root).filename


def test_a_symlinked_module_is_refused(tmp_path):
    # A `creds.py` link to a key file was packed and uploaded; a link is now an error, nothing is built.
    root = _copy(tmp_path)
    key = tmp_path / "service-account.json"
    key.write_text('{"private_key": "-----BEGIN PRIVATE KEY-----"}')
    (root / "creds.py").symlink_to(key)
    with pytest.raises(FtcliError) as info:
        build_wheel(tmp_path / "dist", root)
    assert "creds.py" in info.value.message and "symbolic link" in info.value.message
    assert not (tmp_path / "dist").exists() or not list((tmp_path / "dist").iterdir())


def test_hash_is_stable_and_tracks_content(tmp_path):
    root = _copy(tmp_path)
    first = content_hash(root)
    assert content_hash(root) == first == content_hash(trainer_root())
    (root / "README.txt").write_text("not packaged")  # not in the allowlist: same hash
    assert content_hash(root) == first
    (root / "task.py").write_text((root / "task.py").read_text() + "\n# changed\n")
    assert content_hash(root) != first


def test_pyproject_train_extra_matches_the_trainer_requirements():
    # `pip install ftcli[train]` (ftcli local) and the job install the same floors.
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    train = set(pyproject["project"]["optional-dependencies"]["train"])
    assert set(TRAINER_DEPENDENCIES) - {"google-cloud-storage>=2.16"} <= train
    assert set(EXTRAS["hub"]) <= train
    assert pyproject["project"]["requires-python"] == REQUIRES_PYTHON


def test_the_build_system_floor_reads_the_projects_own_license_field():
    # `license = "Apache-2.0"`, an SPDX expression (PEP 639), is read by setuptools from 77 on; 76.1.0 refuses the
    # whole pyproject.toml ("`project.license` must be valid exactly by one definition"), so `pip install
    # --no-build-isolation -e .` beside an older setuptools failed though [build-system] said it would do.
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    floor = next(Requirement(r) for r in pyproject["build-system"]["requires"] if r.startswith("setuptools"))
    assert isinstance(pyproject["project"]["license"], str)
    assert not floor.specifier.contains("76.1.0") and floor.specifier.contains("77.0.1")


def test_wheel_installs_alone_and_runs_without_ftcli(tmp_path):
    wheel = build_wheel(tmp_path / "dist")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    # The bare venv must see only what is installed in it: a PYTHONPATH naming a checkout's src/ (as when testing a
    # clone against a shared venv) made `import ftcli` succeed there and the trainer load from the checkout.
    alone = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    # install with this interpreter's pip into the bare venv, no dependencies, no network, no build step
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--prefix", str(venv), str(wheel)], check=True, capture_output=True)
    r = subprocess.run([str(py), "-c", "import ftcli_trainer.config as c; print(c.__file__)"], capture_output=True,
                       text=True, env=alone)
    assert r.returncode == 0, r.stderr
    assert str(venv) in r.stdout
    r = subprocess.run([str(py), "-c", "import ftcli"], capture_output=True, text=True, env=alone)
    assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr


def test_a_renamed_module_gets_another_wheel_name(tmp_path):
    # The wheel's name is all the bucket is asked about: a trainer whose module was renamed (same bytes, same place in
    # the file order) found the old wheel "already uploaded", and the job imported the old name.
    root = _copy(tmp_path)
    first = TrainerPackage.current(root).filename
    (root / "task.py").rename(root / "task_.py")
    assert TrainerPackage.current(root).filename != first


def test_two_trainers_whose_files_run_together_alike_get_other_names(tmp_path):
    # Each file's bytes end where its name's do not begin: `a.py` holding "xb.py\0y" alone, and `a.py` "x" beside
    # `b.py` "y", are two trainers, not one wheel name.
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (one / "a.py").write_bytes(b"xb.py\0y")
    (two / "a.py").write_bytes(b"x")
    (two / "b.py").write_bytes(b"y")
    assert content_hash(one) != content_hash(two)


def test_other_requirements_get_another_wheel_name(tmp_path, monkeypatch):
    # The same trainer code with other floors (a new ftcli release) is another wheel: the job installed the old floors
    # from the wheel already in the bucket under the same name.
    import ftcli.packaging

    root = _copy(tmp_path)
    first = TrainerPackage.current(root).filename
    monkeypatch.setattr(ftcli.packaging, "TRAINER_DEPENDENCIES", (*TRAINER_DEPENDENCIES, "regex>=2024.1"))
    assert TrainerPackage.current(root).filename != first


def test_the_wheel_requires_every_floor_and_extra(tmp_path):
    # Each floor is in the wheel's METADATA (a dropped sentencepiece failed a DeBERTa-v3 job at its start on Vertex).
    wheel = build_wheel(tmp_path / "dist", _copy(tmp_path))
    names = zipfile.ZipFile(wheel).namelist()
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = {str(Requirement(line.split(":", 1)[1])) for line in metadata.splitlines()
                if line.startswith("Requires-Dist:")}
    expected = {str(Requirement(d)) for d in TRAINER_DEPENDENCIES} | {
        str(Requirement(f'{d}; extra == "{extra}"')) for extra, deps in EXTRAS.items() for d in deps}
    assert requires == expected


def test_the_hash_is_the_same_on_every_machine(tmp_path):
    # Another laptop (another filesystem, which lists a folder in its own order) must name the same trainer alike, or a
    # re-submission from it uploads the wheel again under another name: the files are hashed by name order.
    import hashlib

    from ftcli.packaging import _pyproject

    root = _copy(tmp_path)
    h = hashlib.sha256(_pyproject(TRAINER_VERSION).encode())
    for path in sorted(root.glob("*.py"), key=lambda p: p.name):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    assert content_hash(root) == h.hexdigest()


def test_a_folder_named_like_a_module_stays_out_and_the_build_goes_on(tmp_path):
    # Only regular files are modules: a folder `scratch.py/` beside them is neither packed nor hashed.
    root = _copy(tmp_path)
    first = content_hash(root)
    (root / "scratch.py").mkdir()
    (root / "scratch.py" / "notes.txt").write_text("not packaged")
    assert content_hash(root) == first
    names = zipfile.ZipFile(build_wheel(tmp_path / "dist", root)).namelist()
    assert not [n for n in names if "scratch" in n]
