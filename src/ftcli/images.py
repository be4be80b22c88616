"""The trainer's container images: which image runs a job, what is in it, and a pre-flight that refuses a
combination that cannot work (trainer requirements vs the image's Python and torch, GPU vs the kernels in the
build) before anything is uploaded. Plain data, no google import.

Why these images. Vertex's own prebuilt PyTorch *training* images stop at PyTorch 2.4 / Python 3.10, and every
one of them is past its end of availability ("Prebuilt containers for custom training",
https://docs.cloud.google.com/vertex-ai/docs/training/pre-built-containers: pytorch-gpu.2-4.py310 ends
2026-07-24; the "Framework support policy" says services "might block the creation of new resources using these
images"); Google's Deep Learning Containers also top out at 2.4 / 3.10. A custom container may come from
"Artifact Registry or Docker Hub" ("Custom containers overview",
https://docs.cloud.google.com/vertex-ai/docs/training/containers-overview). So ftcli runs its trainer on the
PyTorch project's own public runtime images from Docker Hub (pytorch/pytorch), pinned by exact tag, and
installs the trainer wheel from the bucket (mounted at /gcs/) when the container starts: no Docker on the
user's machine, no registry of one's own.

Kernels. PyTorch's wheel builds (.ci/manywheel/build_cuda.sh in pytorch/pytorch) compile CUDA 12.6 for
5.0;6.0;7.0;7.5;8.0;8.6;9.0 and CUDA 12.8 for 7.5 through 12.0 (Blackwell; torch 2.7 is the first release with
it). So the 12.6 build is the one that still runs on Pascal and Volta (P4, P100, V100), and B200 (10.0) needs
the 12.8 build. A cubin for X.y runs on any X.z with z >= y (CUDA's binary compatibility), so 8.6 covers L4
(8.9) and 6.0 covers P4 (6.1).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from ftcli.catalog import Hardware


@dataclass(frozen=True)
class Image:
    uri: str  # what goes into containerSpec.imageUri
    python: str  # major.minor of the image's `python`
    torch: str  # the torch release the image carries (its local build tag, e.g. +cu126, left out)
    cuda: str | None
    archs: tuple[str, ...]  # compute capabilities the build has machine code for
    digest: str  # the tag's manifest digest when read: a re-pushed tag would show up as a different digest
    source: str

    @property
    def name(self) -> str:
        return self.uri.rsplit("/", 1)[-1]

    @property
    def ref(self) -> str:
        """The reference to give --image: `name` alone (pytorch:TAG) is Docker Hub's library/pytorch, no such image."""
        return self.uri.removeprefix("docker.io/")

    def runs_on(self, cc: str) -> bool:
        major, minor = _cc(cc)
        return any(a[0] == major and a[1] <= minor for a in map(_cc, self.archs))


def _cc(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    return int(major), int(minor or 0)


# Where the image facts come from (read 2026-11-26). The tags are the PyTorch project's release images on Docker Hub
# (https://hub.docker.com/r/pytorch/pytorch/tags; no stored copy of that page could be read), named
# "${PYTORCH_VERSION}-cuda${CUDA_VERSION_SHORT}-cudnn${CUDNN_VERSION}-runtime" by pytorch/pytorch's
# .github/workflows/docker-release.yml (`make -f docker.Makefile runtime-image`), from the "official" stage of its
# Dockerfile (https://github.com/pytorch/pytorch/blob/main/Dockerfile: `ARG BASE_IMAGE=ubuntu:22.04`,
# `ARG PYTHON_VERSION=3.11`, conda under /opt/conda, ca-certificates and no curl or gnupg installed). The digests,
# and Python 3.11 with torch 2.7.1+cu126 in the 12.6 image, are the ones public projects pin these tags by (e.g.
# `FROM pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime@sha256:2b59b1b9...`); not read from Docker Hub itself.
_PYTORCH_SOURCE = ("PyTorch's release images on Docker Hub (https://hub.docker.com/r/pytorch/pytorch/tags), built from "
                   "pytorch/pytorch's Dockerfile (ubuntu:22.04, conda Python 3.11) by its docker-release.yml; digest "
                   "as pinned by public projects; read 2026-11-26")

# Preference order: the first image whose build covers the GPU runs the job.
IMAGES: tuple[Image, ...] = (
    Image("docker.io/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime", python="3.11", torch="2.7.1", cuda="12.6",
          archs=("5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0"),
          digest="sha256:2b59b1b91885677814f78be1f8df48a25d5dc952eb6580eaecfefca510f9afd3", source=_PYTORCH_SOURCE),
    Image("docker.io/pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime", python="3.11", torch="2.7.1", cuda="12.8",
          archs=("7.5", "8.0", "8.6", "9.0", "10.0", "12.0"),
          digest="sha256:c16f4c749e2d9e96878875cdf6cc45cddda1d1a36fddd371dd6f2360f1b6e2a2", source=_PYTORCH_SOURCE),
)
_BY_URI = {i.uri: i for i in IMAGES}


def known(uri: str) -> Image | None:
    """The manifest entry for an image reference (with or without the docker.io/ prefix)."""
    return _BY_URI.get(uri) or _BY_URI.get(f"docker.io/{uri}")


# Docker Hub limits pulls: unauthenticated users get "10 per IPv4 address or IPv6 /64 subnet" an hour (Docker's
# "Docker Hub usage and limits", content/manuals/docker-hub/usage/_index.md in docker/docs, as of its PR #22134, read
# 2026-11-27), and Google names no Docker Hub cache for Vertex (mirror.gcr.io is checked automatically by "Cloud Build
# and Google Kubernetes Engine", "Pulling cached Docker Hub images", https://cloud.google.com/container-registry/docs/
# pulling-cached-images, read 2026-11-27). The way round it is an Artifact Registry remote repository of Docker Hub,
# which "acts as a proxy for the upstream source" and serves its cached copy afterwards ("Create remote repositories",
# https://cloud.google.com/artifact-registry/docs/repositories/remote-repo, read 2026-11-27; created with `gcloud
# artifacts repositories create REPOSITORY --location=LOCATION --repository-format=docker --mode=remote-repository
# --remote-docker-repo=DOCKER-HUB`, https://cloud.google.com/sdk/gcloud/reference/artifacts/repositories/create, read
# 2026-11-27): docker.io/pytorch/pytorch:TAG is then LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/pytorch/pytorch:TAG.
# Vertex pulls with its own service agent ("Vertex AI uses the default service account to pull images", "Use a
# custom service account", https://docs.cloud.google.com/vertex-ai/docs/general/custom-service-account, read
# 2026-11-27).
_ARTIFACT_REGISTRY = re.compile(r"^(?P<location>[a-z0-9-]+)-docker\.pkg\.dev/(?P<project>[^/]+)/(?P<repo>[^/]+)/"
                                r"(?P<path>.+)$")


def mirror_of(uri: str) -> Image | None:
    """The image of ftcli's that `uri` pulls through an Artifact Registry remote repository of Docker Hub
    (LOCATION-docker.pkg.dev/PROJECT/REPO/pytorch/pytorch:TAG: a remote repository keeps Docker Hub's path), else
    None."""
    m = _ARTIFACT_REGISTRY.match(uri.strip())
    return known(f"docker.io/{m['path']}") if m else None


# A registry's answer when it refuses a pull for its rate limit: Docker Hub says "429 Too Many Requests - Server
# message: toomanyrequests: You have reached your pull rate limit" (as quoted from kubelet and ECS in
# airbytehq/airbyte#36369 and PrefectHQ/prefect#12003, read 2026-11-27). What Vertex wraps around it in the job's
# error is not documented, so only the registry's own words are matched.
_PULL_LIMIT = re.compile(r"toomanyrequests|pull rate limit|429 Too Many Requests", re.IGNORECASE)


def docker_hub_path(image: str) -> str | None:
    """OWNER/NAME:TAG of an image Docker Hub serves (docker.io/..., or a reference without a registry host, as
    Docker reads `ubuntu` or `pytorch/pytorch:TAG`), else None."""
    first, slash, rest = image.partition("/")
    if first in ("docker.io", "index.docker.io", "registry-1.docker.io"):
        return rest if "/" in rest else f"library/{rest}"
    if slash and ("." in first or ":" in first or first == "localhost"):
        return None  # another registry's host
    return image if slash else f"library/{image}"


def pull_failure_hint(error: str | None, image: str, project: str, region: str) -> str | None:
    """What to do when a job failed because Docker Hub refused to send its image for its rate limit (else None):
    pull it through an Artifact Registry remote repository of Docker Hub."""
    path = docker_hub_path(image)
    if not error or path is None or not _PULL_LIMIT.search(error):
        return None
    repo = "dockerhub"
    mirror = f"{region}-docker.pkg.dev/{project}/{repo}"
    return (f"Docker Hub refused to send {image}: it allows 10 anonymous pulls an hour per address. Pull it through "
            f"Artifact Registry: create a remote repository of Docker Hub once (`gcloud artifacts repositories "
            f"create {repo} --project={project} --location={region} --repository-format=docker "
            f"--mode=remote-repository --remote-docker-repo=DOCKER-HUB`), then `ftcli config set image-mirror "
            f"{mirror}` (every job's image comes through it) or run again with --image {mirror}/{path}")


# Vertex's prebuilt training images name their Python in the image name ("pytorch-gpu.2-4.py310", "tf-gpu.2-17.py310",
# "Prebuilt containers for custom training", above): ftcli reads it from there. The TPU ones spell it cp310:
# "pytorch-tpu.2-2.cp310", "2.2 (Python 3.10) | TPU only | Nov 6, 2024 | Nov 6, 2025", and "tf-tpu.2-15.cp310" (the
# same page, https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/training/
# pre-built-containers, read 2026-11-29): they went through as an image ftcli "cannot check", and the job was created
# on a TPU-only Python 3.10 image past its end of availability.
_PREBUILT = re.compile(r"^(?:us|europe|asia)-docker\.pkg\.dev/vertex-ai/training/"
                       r"(?P<name>[a-z0-9-]+\.[0-9-]+\.(?:py|cp)(?P<py>3)(?P<minor>\d+))(?:[:@].*)?$")
# The older ones do not: "pytorch-gpu.1-13:latest", "pytorch-gpu.1-10:latest", "pytorch-gpu.2-1:latest", as public
# training scripts and Dockerfiles still name them (found 2026-11-27 with the search tool's find_string). Their name
# gives no Python, and a PyTorch one of version 2.4 or older is past its end of availability with the rest: the newest,
# pytorch-gpu.2-4.py310, reached it on 2026-07-24 ("Prebuilt containers for custom training", above; the emulator's
# vertex_rules.PREBUILT_PYTORCH holds the page's dates, read again 2026-11-29: the latest of them all is
# pytorch-xla.2-2.py310's, 2026-10-23, not 2.4's). They went through as an image "ftcli cannot check", and the job was
# created on an image Vertex may no longer pull.
_PREBUILT_UNNAMED_PYTHON = re.compile(r"^(?:us|europe|asia)-docker\.pkg\.dev/vertex-ai/training/"
                                      r"(?P<name>pytorch-[a-z0-9]+\.(?P<major>\d+)-(?P<minor>\d+))(?:[:@].*)?$")
PREBUILT_PYTORCH_NEWEST = ("pytorch-gpu.2-4.py310", (2, 4), dt.date(2026, 7, 24))


def _prebuilt_end(today: dt.date | None) -> str:
    name, _, end = PREBUILT_PYTORCH_NEWEST
    today = today or dt.date.today()
    when = "are past their end of availability" if today > end else "reach their end of availability"
    return f"Vertex's prebuilt PyTorch images {when} ({name}: {end.isoformat()})"


def prebuilt_problem(uri: str, requires_python: str, today: dt.date | None = None) -> str | None:
    """Why one of Vertex's own prebuilt training images cannot run the trainer (its Python, from its name; or, for an
    older PyTorch one whose name gives no Python, its end of availability), or None for any other image."""
    from packaging.specifiers import SpecifierSet

    m = _PREBUILT.match(uri.strip())
    if m is None:
        old = _PREBUILT_UNNAMED_PYTHON.match(uri.strip())
        if old is None or (int(old["major"]), int(old["minor"])) > PREBUILT_PYTORCH_NEWEST[1]:
            return None
        return (f"--image {uri}: Vertex's prebuilt image {old['name']} names no Python (the trainer needs Python "
                f"{requires_python}; the newest of these images has 3.10), and {_prebuilt_end(today)}: leave --image "
                "out for ftcli's own image")
    python = f"{m['py']}.{m['minor']}"
    if python in SpecifierSet(requires_python):
        return None
    return (f"--image {uri}: Vertex's prebuilt image {m['name']} has Python {python}; the trainer needs Python "
            f"{requires_python} (its transformers does), and {_prebuilt_end(today)}: leave --image out for ftcli's "
            "own image")


# The PyTorch project's Docker Hub images name the torch release they carry in their tag:
# "${PYTORCH_VERSION}-cuda${CUDA_VERSION_SHORT}-cudnn${CUDNN_VERSION}-runtime" (pytorch/pytorch's
# .github/workflows/docker-release.yml, read 2026-11-27; -devel images alike). The job keeps the image's torch (the
# start script holds it by a constraint), so one below the trainer's floor can only fail there, after the GPUs are
# provisioned.
_PYTORCH_TAG = re.compile(r"^pytorch/pytorch:(?P<torch>\d+\.\d+(?:\.\d+)?)-cuda[0-9.]+-cudnn\d+-(?:runtime|devel)"
                          r"(?:@.*)?$")


def pytorch_tag_problem(uri: str, requirements: tuple[str, ...]) -> str | None:
    """Why an image of pytorch/pytorch (from Docker Hub, or through an Artifact Registry remote repository of it) that
    ftcli does not list cannot run the trainer: the torch release its tag names is below the trainer's floor. None for
    any other image, or one whose tag does not say."""
    from packaging.requirements import Requirement

    m = _ARTIFACT_REGISTRY.match(uri.strip())
    path = m["path"] if m else docker_hub_path(uri.strip())
    tag = _PYTORCH_TAG.match(path or "")
    if tag is None:
        return None
    for text in requirements:
        req = Requirement(text)
        if req.name == "torch" and tag["torch"] not in req.specifier:
            return (f"--image {uri}: its tag says torch {tag['torch']}; the trainer needs {text}, and the job keeps "
                    f"the image's torch: use {IMAGES[0].ref} (or a newer pytorch/pytorch tag), or leave --image out")
    return None


def default_image(hw: Hardware) -> Image:
    """The first image whose kernels cover the GPU (a CUDA build runs on a CPU machine too)."""
    cc = hw.compute_capability
    for image in IMAGES:
        if cc is None or image.runs_on(cc):
            return image
    raise AssertionError(f"no image covers {hw.summary}")  # the catalog tests cover every GPU


def problems(image: Image, hw: Hardware, requires_python: str, requirements: tuple[str, ...]) -> list[str]:
    """Why the trainer cannot run in `image` on `hw` (empty when it can)."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    out = []
    if image.python not in SpecifierSet(requires_python):
        out.append(f"{image.name} has Python {image.python}; the trainer needs Python {requires_python} (its "
                   "transformers does): use an image with a newer Python, or leave --image out")
    for text in requirements:
        req = Requirement(text)
        if req.name == "torch" and image.torch not in req.specifier:
            out.append(f"{image.name} has torch {image.torch}; the trainer needs {text}: use an image with a newer "
                       "torch, or leave --image out")
    cc = hw.compute_capability
    if cc is not None and not image.runs_on(cc):
        fits = [i.ref for i in IMAGES if i.runs_on(cc)]
        out.append(f"{image.name} has no kernels for {hw.gpu_name} (compute capability {cc}; the build covers "
                   f"{', '.join(image.archs)})" + (f": use {fits[0]} or leave --image out" if fits else ""))
    return out
