"""The image manifest and the pre-flight: which image runs which GPU, and what cannot work, in one line."""

import dataclasses

import pytest

from ftcli import images
from ftcli.catalog import resolve_gpu
from ftcli.packaging import REQUIRES_PYTHON, TRAINER_DEPENDENCIES

CU126 = "docker.io/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"
CU128 = "docker.io/pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"


@pytest.mark.parametrize(("gpu", "image"), [
    ("P4", CU126), ("P100", CU126), ("V100", CU126), ("T4", CU126), ("L4", CU126), ("A100", CU126),
    ("H100x8", CU126), ("H200", CU126), ("B200", CU128), ("RTX-PRO-6000", CU128), ("RTX-PRO-6000x8", CU128),
    ("none", CU126),
])
def test_default_image_covers_the_gpu(gpu, image):
    hw = resolve_gpu(gpu)
    chosen = images.default_image(hw)
    assert chosen.uri == image
    assert images.problems(chosen, hw, REQUIRES_PYTHON, TRAINER_DEPENDENCIES) == []


def test_every_image_is_pinned_to_an_exact_tag_and_records_its_digest():
    for image in images.IMAGES:
        tag = image.uri.rsplit(":", 1)[1]
        assert tag != "latest" and tag[0].isdigit()
        assert image.digest.startswith("sha256:") and len(image.digest) == 71
        assert image.source


@pytest.mark.parametrize(("cc", "runs"), [("6.1", True), ("6.0", True), ("7.0", True), ("8.9", True), ("9.0", True),
                                          ("10.0", False), ("5.2", True), ("12.0", False)])
def test_binary_compatibility_within_a_major_version(cc, runs):
    assert images.known(CU126).runs_on(cc) is runs


def test_cuda_12_8_build_has_no_pascal_or_volta():
    cu128 = images.known(CU128)
    assert not cu128.runs_on("6.0") and not cu128.runs_on("6.1") and cu128.runs_on("10.0")
    hw = resolve_gpu("V100")
    (problem,) = images.problems(cu128, hw, REQUIRES_PYTHON, TRAINER_DEPENDENCIES)
    assert problem.startswith("pytorch:2.7.1-cuda12.8-cudnn9-runtime has no kernels for V100 (compute capability 7.0")
    assert problem.endswith(f"use {CU126.rsplit('/', 1)[1]} or leave --image out")


def test_old_python_and_torch_are_refused():
    old = dataclasses.replace(images.known(CU126), python="3.10", torch="2.4.1")
    got = images.problems(old, resolve_gpu("T4"), REQUIRES_PYTHON, TRAINER_DEPENDENCIES)
    assert any("has Python 3.10; the trainer needs Python >=3.11" in p for p in got)
    assert any("has torch 2.4.1; the trainer needs torch>=2.6" in p for p in got)


def test_known_accepts_the_docker_hub_short_form():
    assert images.known("pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime").uri == CU126
    assert images.known("us-docker.pkg.dev/me/repo/trainer:1") is None


@pytest.mark.parametrize(("uri", "python"), [
    ("us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest", "3.10"),
    ("europe-docker.pkg.dev/vertex-ai/training/pytorch-xla.2-3.py310:latest", "3.10"),
    ("asia-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310", "3.10"),
    ("us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.1-13.py39@sha256:0123", "3.9"),
])
def test_vertex_prebuilt_images_are_refused_by_their_python(uri, python):
    problem = images.prebuilt_problem(uri, REQUIRES_PYTHON)
    assert problem is not None and f"has Python {python}; the trainer needs Python {REQUIRES_PYTHON}" in problem
    assert "leave --image out" in problem


@pytest.mark.parametrize("uri", [
    CU126, "us-docker.pkg.dev/my-project/repo/trainer:1", "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.3-0.py312",
])
def test_other_images_are_not_prebuilt_problems(uri):
    assert images.prebuilt_problem(uri, REQUIRES_PYTHON) is None
