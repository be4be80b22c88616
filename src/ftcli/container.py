"""A local stand-in for the trainer's container: a virtual environment into which the trainer wheel is
pip-installed exactly as the job's start script does it (`spec.START_SCRIPT`), used by `ftcli train --smoke`
(and by the tests' Vertex emulator).

With `share_packages` the environment sees the packages of the Python running ftcli (torch, transformers, ...)
as the image provides its own, listed in a .pth file: Python does not read the .pth files inside those folders,
so an editable `ftcli` install stays invisible and `import ftcli` fails there, as in the job. Its pip is that
Python's pip; a venv's own bundled setuptools would shadow the newer one torch needs.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path


def make(root: Path, python: str = sys.executable, share_packages: bool = True) -> Path:
    """Create the environment under `root`; return its bin folder (its `python` and, without
    `share_packages`, its own `pip`)."""
    args = [python, "-m", "venv", *(["--without-pip"] if share_packages else []), str(root)]
    subprocess.run(args, check=True, capture_output=True)
    if share_packages:
        ask = "import sysconfig; print(sysconfig.get_path('purelib'))"
        site = Path(subprocess.run([str(root / "bin" / "python"), "-c", ask], check=True, capture_output=True,
                                   text=True).stdout.strip())
        paths = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
        (site / "_image_packages.pth").write_text("\n".join(sorted(paths)) + "\n")
    return root / "bin"


def env(bin_dir: Path, base: dict[str, str]) -> dict[str, str]:
    """`base` with the environment's bin folder first on PATH and pip kept off the network: what the
    "image" lacks fails to install, instead of being fetched here."""
    out = dict(base)
    out.update(PATH=f"{bin_dir}:{base.get('PATH', '/usr/bin:/bin')}", PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONUNBUFFERED="1")
    return out
