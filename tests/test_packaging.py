import shutil
import subprocess
import sys
import tarfile

from ftcli.packaging import TrainerPackage, allowlisted_files, build_sdist, content_hash, trainer_root


def test_sdist_holds_only_the_trainer(tmp_path):
    # stray files a user may have next to the code never go in
    root = tmp_path / "ftcli_trainer"
    shutil.copytree(trainer_root(), root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / ".env").write_text("SECRET=1")
    (root / "secrets").mkdir()
    (root / "secrets" / "key.json").write_text("{}")
    (root / "notes.ipynb").write_text("{}")
    sdist = build_sdist(tmp_path / "dist", root)
    pkg = TrainerPackage.current(root)
    assert sdist.name == pkg.filename and pkg.filename.startswith("ftcli_trainer-")
    names = tarfile.open(sdist).getnames()
    modules = sorted(n.rsplit("/", 1)[-1] for n in names if "/ftcli_trainer/" in n)
    assert modules == sorted(p.name for p in allowlisted_files(root))
    assert "task.py" in modules and "config.py" in modules
    assert not [n for n in names if "sample" in n or ".env" in n or "secrets" in n or "ipynb" in n or "ftcli/" in n]
    pyproject = tarfile.open(sdist).extractfile(next(n for n in names if n.endswith("/pyproject.toml"))).read()
    assert b'name = "ftcli-trainer"' in pyproject and b"typer" not in pyproject


def test_hash_is_stable_and_tracks_content(tmp_path):
    root = tmp_path / "ftcli_trainer"
    shutil.copytree(trainer_root(), root, ignore=shutil.ignore_patterns("__pycache__"))
    first = content_hash(root)
    assert content_hash(root) == first == content_hash(trainer_root())
    (root / "README.txt").write_text("not packaged")  # not in the allowlist: same hash
    assert content_hash(root) == first
    (root / "task.py").write_text((root / "task.py").read_text() + "\n# changed\n")
    assert content_hash(root) != first


def test_sdist_installs_alone_and_runs_without_ftcli(tmp_path):
    sdist = build_sdist(tmp_path / "dist")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    # install with this interpreter's pip into the bare venv, no dependencies, no network
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--prefix", str(venv), str(sdist)], check=True, capture_output=True)
    r = subprocess.run([str(py), "-m", "ftcli_trainer.task", "--help"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "--gradient-accumulation-steps" in r.stdout
    r = subprocess.run([str(py), "-c", "import ftcli"], capture_output=True, text=True)
    assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr
