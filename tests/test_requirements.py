"""Against the package registry: the trainer's requirements install on each image's Python, with the image's torch.

This is what the emulators cannot know and what broke on Vertex (transformers 5.24 has no release for Python
3.10). pip resolves the whole tree for the image's interpreter with the image's torch held fixed, from PyPI's
metadata only (`--dry-run`: no wheel is downloaded, torch's included): seconds, not gigabytes. Without network
the test skips and says so; a resolution failure fails it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ftcli.images import IMAGES
from ftcli.packaging import EXTRAS, TRAINER_DEPENDENCIES

# The wheels the images' pip takes: pytorch/pytorch's images are built FROM ubuntu:22.04 (its Dockerfile's
# `ARG BASE_IMAGE=ubuntu:22.04`, read 2026-11-27), whose glibc 2.35 runs every manylinux tag up to 2_35. Listing only
# 2_28 and older made pip resolve other wheels than the job's (cryptography's 2_34, tensorboard-data-server's 2_31).
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(35, 16, -1)] + ["manylinux2014_x86_64"]
OFFLINE = ("Network is unreachable", "Temporary failure in name resolution", "Failed to establish a new connection",
           "No route to host", "Connection refused")


def resolve(python: str, requirements: list[str], tmp_path) -> tuple[int, str, dict]:
    report = tmp_path / f"report-{python}.json"
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--only-binary=:all:",
           "--python-version", python, "--implementation", "cp", *[f"--platform={p}" for p in PLATFORMS],
           "--target", str(tmp_path / "target"), "--report", str(report), "--quiet",
           "--index-url", "https://pypi.org/simple", *requirements]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    text = r.stdout + r.stderr
    if r.returncode != 0 and any(s in text for s in OFFLINE):
        pytest.skip(f"PyPI is not reachable from here: {text.strip().splitlines()[-1][:200]}")
    return r.returncode, text, json.loads(report.read_text()) if report.exists() else {}


# One resolution per distinct (Python, torch) pair among the images.
PAIRS = sorted({(i.python, i.torch) for i in IMAGES})


@pytest.mark.parametrize(("python", "torch"), PAIRS, ids=[f"py{p}-torch{t}" for p, t in PAIRS])
def test_trainer_requirements_resolve_for_each_image(python, torch, tmp_path):
    requirements = [r for r in TRAINER_DEPENDENCIES if not r.startswith("torch")]
    requirements += [r for deps in EXTRAS.values() for r in deps] + [f"torch=={torch}"]
    code, text, report = resolve(python, requirements, tmp_path)
    assert code == 0, text[-2000:]
    installed = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in report["install"]}
    assert installed["torch"] == torch  # nothing asked for a newer torch than the image's
    assert installed["transformers"].startswith("5.24.")


def test_the_check_fails_where_the_old_image_failed(tmp_path):
    # Vertex's last prebuilt PyTorch image had Python 3.10: transformers 5.24 has no release for it.
    code, text, _ = resolve("3.10", ["transformers>=5.24,<5.25"], tmp_path)
    assert code != 0 and "transformers" in text
