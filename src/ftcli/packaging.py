"""The trainer, packaged alone as a wheel named by the hash of its contents, and what it requires.

Only an allowlist goes in: the trainer's Python modules, each a regular file (a symbolic link is refused: a
`creds.py` link to a key file must never be packed). Nothing of `ftcli`, no bundled sample data, no stray local
files (.env, secrets/, notebooks). The same trainer always gets the same name, so a re-submission finds it
already uploaded and sends 0 bytes. A wheel, not an sdist: the job's container installs it at start with no
build step (an sdist would need setuptools fetched into an isolated build environment first).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ftcli.errors import FtcliError
from ftcli_trainer import __version__ as TRAINER_VERSION

DIST_NAME = "ftcli-trainer"
# The trainer's true floors. transformers from 5.21 on declares Requires-Python >=3.11 (wheel METADATA), and
# transformers 5.x switches PyTorch off below 2.6 (utils/import_utils.py); the image provides torch, so pip
# keeps the image's build when it satisfies the floor. tests/test_requirements.py resolves these against PyPI
# for every image's Python with the image's torch held fixed.
REQUIRES_PYTHON = ">=3.11"
TRAINER_DEPENDENCIES = (
    "torch>=2.6",
    "transformers>=5.24,<5.25",
    "tokenizers>=0.22",
    "numpy>=1.26",
    "safetensors>=0.4",
    "google-cloud-storage>=2.16",
    "tensorboard>=2.15",
    # A tokenizer kept as a SentencePiece model with no tokenizer.json (microsoft/deberta-v3-base's spm.model, ALBERT's
    # and T5's spiece.model) is converted with it; the floor is transformers 5.24's own (dependency_versions_table).
    # Without it a DeBERTa-v3 job failed at its start on Vertex. ~1.3 MB, a wheel for every Python the images have.
    "sentencepiece>=0.1.91,!=0.1.92",
)
# Only Hub tasks (imdb, mnli, ...) read with `datasets` (and its pyarrow and pandas): local and gs:// files
# don't, so a CSV job does not install it at start.
EXTRAS = {"hub": ("datasets>=3",),
          # --wandb-project: wandb, and the Secret Manager client that reads its key inside the job
          "wandb": ("wandb>=0.19", "google-cloud-secret-manager>=2.20"),
          # --hf-secret: the Secret Manager client that reads the Hugging Face token inside the job
          "secrets": ("google-cloud-secret-manager>=2.20",)}
PYPROJECT = """\
[build-system]
requires = ["setuptools>=70.1"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "{version}"
description = "ftcli's trainer: fine-tunes a transformer text classifier (runs inside Vertex AI)"
requires-python = "{requires_python}"
dependencies = [{deps}]

[project.optional-dependencies]
{extras}

[tool.setuptools]
packages = ["ftcli_trainer"]
"""


def trainer_root() -> Path:
    import ftcli_trainer

    return Path(ftcli_trainer.__file__).resolve().parent


def allowlisted_files(root: Path | None = None) -> list[Path]:
    """The trainer's own modules: *.py directly in the package (no sub-folders: sample/ stays out).
    Raises FtcliError on a symbolic link: whatever it points at would be packed and uploaded."""
    root = root or trainer_root()
    files = sorted(root.glob("*.py"))
    links = [p.name for p in files if p.is_symlink()]
    if links:
        raise FtcliError(f"refusing to package the trainer: {', '.join(links)} in {root} is a symbolic link",
                         hint="replace it with a regular file, or remove it")
    return [p for p in files if p.is_file()]


def _quoted(items: Iterable[str]) -> str:
    return ", ".join(f'"{d}"' for d in items)


def _pyproject(version: str) -> str:
    extras = "\n".join(f"{name} = [{_quoted(deps)}]" for name, deps in EXTRAS.items())
    return PYPROJECT.format(name=DIST_NAME, version=version, requires_python=REQUIRES_PYTHON,
                            deps=_quoted(TRAINER_DEPENDENCIES), extras=extras)


def content_hash(root: Path | None = None) -> str:
    """sha256 over the file names and bytes that go into the wheel (and the requirements)."""
    h = hashlib.sha256()
    h.update(_pyproject(TRAINER_VERSION).encode())
    for path in allowlisted_files(root):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@dataclass(frozen=True)
class TrainerPackage:
    version: str  # e.g. 0.1.0+3fa2b1c4d5e6: the content hash as a local version label
    filename: str  # ftcli_trainer-0.1.0+3fa2b1c4d5e6-py3-none-any.whl

    @classmethod
    def current(cls, root: Path | None = None) -> TrainerPackage:
        from packaging.version import Version

        # As setuptools writes it (normalized, PEP 440): a hash whose first 12 hex digits are all decimal digits is a
        # number, and one that starts with 0 lost it ("came out as ...+43222604127, expected ...+043222604127": every
        # `ftcli train` of that code failed before upload)
        version = str(Version(f"{TRAINER_VERSION}+{content_hash(root)[:12]}"))
        return cls(version=version, filename=f"ftcli_trainer-{version}-py3-none-any.whl")


def build_wheel(out_dir: Path, root: Path | None = None) -> Path:
    """Build the wheel in-process (setuptools' PEP 517 backend, no isolated env: under a second)."""
    from setuptools import build_meta

    pkg = TrainerPackage.current(root)
    with tempfile.TemporaryDirectory(prefix="ftcli-wheel-") as tmp:
        src = Path(tmp) / "src"
        (src / "ftcli_trainer").mkdir(parents=True)
        for path in allowlisted_files(root):
            shutil.copyfile(path, src / "ftcli_trainer" / path.name)
        (src / "pyproject.toml").write_text(_pyproject(pkg.version))
        out_dir.mkdir(parents=True, exist_ok=True)
        cwd = os.getcwd()
        chatter = io.StringIO()
        try:
            os.chdir(src)
            # setuptools talks a lot on stdout/stderr, and leaves build/ and *.egg-info in the source folder
            # (a temporary one here); keep the CLI's output clean
            with contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
                name = build_meta.build_wheel(str(out_dir))
        finally:
            os.chdir(cwd)
    built = out_dir / name
    if built.name != pkg.filename:
        raise FtcliError(f"the trainer wheel came out as {built.name}, expected {pkg.filename}")
    return built
