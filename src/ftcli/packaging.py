"""The trainer, packaged alone as an sdist named by the hash of its contents.

Only an allowlist goes in: the trainer's Python modules. Nothing of `ftcli`, no bundled sample data, no
stray local files (.env, secrets/, notebooks). The same trainer always gets the same name, so a
re-submission finds it already uploaded and sends 0 bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ftcli_trainer import __version__ as TRAINER_VERSION

DIST_NAME = "ftcli-trainer"
# What the trainer needs on top of Vertex's prebuilt PyTorch image (which already has torch).
TRAINER_DEPENDENCIES = (
    "torch>=2.1",
    "transformers>=5.24,<5.25",
    "tokenizers>=0.22",
    "datasets>=3",
    "numpy>=1.26",
    "safetensors>=0.4",
    "google-cloud-storage>=2.16",
    "tensorboard>=2.15",
)
PYPROJECT = """\
[build-system]
requires = ["setuptools>=70.1"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "{version}"
description = "ftcli's trainer: fine-tunes a transformer text classifier (runs inside Vertex AI)"
requires-python = ">=3.10"
dependencies = [{deps}]

[tool.setuptools]
packages = ["ftcli_trainer"]
"""


def trainer_root() -> Path:
    import ftcli_trainer

    return Path(ftcli_trainer.__file__).resolve().parent


def allowlisted_files(root: Path | None = None) -> list[Path]:
    """The trainer's own modules: *.py directly in the package (no sub-folders: sample/ stays out)."""
    root = root or trainer_root()
    return sorted(p for p in root.glob("*.py") if p.is_file())


def _pyproject(version: str) -> str:
    deps = ", ".join(f'"{d}"' for d in TRAINER_DEPENDENCIES)
    return PYPROJECT.format(name=DIST_NAME, version=version, deps=deps)


def content_hash(root: Path | None = None) -> str:
    """sha256 over the file names and bytes that go into the sdist (and the dependency list)."""
    h = hashlib.sha256()
    h.update(_pyproject(TRAINER_VERSION).encode())
    for path in allowlisted_files(root):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@dataclass(frozen=True)
class TrainerPackage:
    version: str  # e.g. 0.1.0+3fa2b1c4d5e6: the content hash as a local version label
    filename: str  # ftcli_trainer-0.1.0+3fa2b1c4d5e6.tar.gz

    @classmethod
    def current(cls, root: Path | None = None) -> TrainerPackage:
        version = f"{TRAINER_VERSION}+{content_hash(root)[:12]}"
        return cls(version=version, filename=f"ftcli_trainer-{version}.tar.gz")


def build_sdist(out_dir: Path, root: Path | None = None) -> Path:
    """Build the sdist in-process (setuptools' PEP 517 backend, no isolated env: ~0.4 s)."""
    from setuptools import build_meta

    pkg = TrainerPackage.current(root)
    with tempfile.TemporaryDirectory(prefix="ftcli-sdist-") as tmp:
        src = Path(tmp) / "src"
        (src / "ftcli_trainer").mkdir(parents=True)
        for path in allowlisted_files(root):
            shutil.copy2(path, src / "ftcli_trainer" / path.name)
        (src / "pyproject.toml").write_text(_pyproject(pkg.version))
        out_dir.mkdir(parents=True, exist_ok=True)
        cwd = os.getcwd()
        chatter = io.StringIO()
        try:
            os.chdir(src)
            # setuptools talks a lot on stdout/stderr; keep the CLI's output clean
            with contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
                name = build_meta.build_sdist(str(out_dir))
        finally:
            os.chdir(cwd)
    built = out_dir / name
    if built.name != pkg.filename:  # setuptools normalises the name; keep ours, which names the hash
        built = built.rename(out_dir / pkg.filename)
    return built
