"""The image manifest and the pre-flight: which image runs which GPU, and what cannot work, in one line."""

import dataclasses
import datetime as dt

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
    # The reference to give --image: "pytorch:TAG" alone is Docker Hub's library/pytorch (no such image), which ftcli
    # does not know either
    assert problem.endswith("use pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime or leave --image out")
    assert images.known("pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime").uri == CU126


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
    # the TPU images spell their Python cp310: they passed as an image ftcli "cannot check"
    ("us-docker.pkg.dev/vertex-ai/training/pytorch-tpu.2-2.cp310:latest", "3.10"),
    ("europe-docker.pkg.dev/vertex-ai/training/tf-tpu.2-15.cp310:latest", "3.10"),
])
def test_vertex_prebuilt_images_are_refused_by_their_python(uri, python):
    problem = images.prebuilt_problem(uri, REQUIRES_PYTHON)
    assert problem is not None and f"has Python {python}; the trainer needs Python {REQUIRES_PYTHON}" in problem
    assert "leave --image out" in problem


@pytest.mark.parametrize("uri", [
    "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.1-13:latest",
    "europe-docker.pkg.dev/vertex-ai/training/pytorch-gpu.1-10:latest",
    "us-docker.pkg.dev/vertex-ai/training/pytorch-xla.2-1",
    "asia-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4@sha256:0123",
])
def test_older_vertex_pytorch_images_without_a_python_in_their_name_are_refused(uri):
    # They went through as an image ftcli "cannot check", and the job was created on an image past its end of
    # availability.
    name = uri.rsplit("/", 1)[1].split(":")[0].split("@")[0]
    problem = images.prebuilt_problem(uri, REQUIRES_PYTHON, today=dt.date(2026, 11, 27))
    assert problem == (f"--image {uri}: Vertex's prebuilt image {name} names no Python (the trainer needs Python "
                       f"{REQUIRES_PYTHON}; the newest of these images has 3.10), and Vertex's prebuilt PyTorch images "
                       "are past their end of availability (pytorch-gpu.2-4.py310: 2026-07-24): leave --image out for "
                       "ftcli's own image")


def test_the_end_of_availability_is_told_by_the_date():
    uri = "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest"
    assert "images reach their end of availability (pytorch-gpu.2-4.py310: 2026-07-24)" in images.prebuilt_problem(
        uri, REQUIRES_PYTHON, today=dt.date(2026, 7, 24))
    assert "images are past their end of availability (pytorch-gpu.2-4.py310: 2026-07-24)" in images.prebuilt_problem(
        uri, REQUIRES_PYTHON, today=dt.date(2026, 7, 25))


@pytest.mark.parametrize("uri", [
    CU126, "us-docker.pkg.dev/my-project/repo/trainer:1", "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.3-0.py312",
    "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-5:latest", "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-8",
])
def test_other_images_are_not_prebuilt_problems(uri):
    assert images.prebuilt_problem(uri, REQUIRES_PYTHON) is None


@pytest.mark.parametrize(("uri", "torch"), [
    ("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", "2.5.1"),
    ("docker.io/pytorch/pytorch:2.4.0-cuda12.1-cudnn9-devel", "2.4.0"),
    ("us-central1-docker.pkg.dev/p/dockerhub/pytorch/pytorch:2.3.1-cuda11.8-cudnn8-runtime", "2.3.1"),
    ("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime@sha256:0123", "2.5.1"),
])
def test_pytorch_images_whose_tag_names_a_torch_below_the_floor_are_refused(uri, torch):
    # The job keeps the image's torch (its start script holds it), so the install can only fail there.
    assert images.pytorch_tag_problem(uri, TRAINER_DEPENDENCIES) == (
        f"--image {uri}: its tag says torch {torch}; the trainer needs torch>=2.6, and the job keeps the image's "
        "torch: use pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime (or a newer pytorch/pytorch tag), or leave --image "
        "out")


@pytest.mark.parametrize("uri", [
    CU126, "pytorch/pytorch:2.8.0-cuda12.9-cudnn9-runtime", "pytorch/pytorch:latest", "pytorch/pytorch",
    "us-docker.pkg.dev/my-project/repo/trainer:1", "nvcr.io/nvidia/pytorch:24.01-py3", "me/pytorch:2.1.0-cuda12.1",
])
def test_other_images_are_not_refused_by_their_tag(uri):
    assert images.pytorch_tag_problem(uri, TRAINER_DEPENDENCIES) is None


@pytest.mark.parametrize(("image", "path"), [
    (CU126, "pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"), ("pytorch/pytorch:2.7.1", "pytorch/pytorch:2.7.1"),
    ("ubuntu:22.04", "library/ubuntu:22.04"), ("docker.io/ubuntu", "library/ubuntu"),
    ("us-central1-docker.pkg.dev/p/r/img:1", None), ("nvcr.io/nvidia/pytorch:25.01-py3", None),
    ("localhost:5000/img", None), ("ghcr.io/owner/img:1", None),
])
def test_docker_hub_images_are_told_from_other_registries(image, path):
    assert images.docker_hub_path(image) == path


RATE_LIMITED = ("Unable to pull the container image: 429 Too Many Requests - Server message: toomanyrequests: You "
                "have reached your unauthenticated pull rate limit. https://www.docker.com/increase-rate-limit")


def test_a_docker_hub_rate_limit_is_answered_with_an_artifact_registry_remote_repository():
    hint = images.pull_failure_hint(RATE_LIMITED, CU128, "my-proj", "europe-west4")
    assert "--location=europe-west4" in hint and "--remote-docker-repo=DOCKER-HUB" in hint
    assert hint.endswith("--image europe-west4-docker.pkg.dev/my-proj/dockerhub/pytorch/pytorch:2.7.1-cuda12.8-cudnn9-"
                         "runtime")
    # the suggested image is then checked as the Docker Hub image it mirrors, kernels and all
    mirror = hint.rsplit("--image ", 1)[1]
    assert images.mirror_of(mirror) == images.known(CU128)


@pytest.mark.parametrize(("error", "image"), [
    ("The replica workerpool0-0 exited with a non-zero status of 1.", CU126),  # not a pull
    (None, CU126),
    (RATE_LIMITED, "us-central1-docker.pkg.dev/p/dockerhub/pytorch/pytorch:2.7.1"),  # not Docker Hub's refusal
])
def test_no_pull_hint_for_other_failures(error, image):
    assert images.pull_failure_hint(error, image, "p", "us-central1") is None


@pytest.mark.parametrize("uri", ["us-central1-docker.pkg.dev/p/dockerhub/pytorch/pytorch:2.7.1-cuda9-other",
                                 "us-central1-docker.pkg.dev/p/dockerhub/pytorch/pytorch",
                                 "gcr.io/p/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"])
def test_only_an_artifact_registry_path_of_a_known_tag_is_taken_for_a_mirror(uri):
    assert images.mirror_of(uri) is None
