"""The pure CustomJob builder: a `JobRequest` in, the CustomJob's REST JSON (as a dict) out.

The dict is what `gcloud ai custom-jobs describe --format=json` and the REST API show (camelCase keys,
int64 as strings, empty fields left out), so `--dry-run` prints exactly what is sent; the Vertex gateway
(`ftcli.gcp.vertex.to_proto`) turns it into the GAPIC message it sends.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from ftcli.catalog import (
    REDUCTION_SERVER_MACHINE,
    RESERVATION_KEY,
    Hardware,
    boot_disk,
    machine_env,
    reduction_server_image,
)
from ftcli.errors import UsageError
from ftcli.packaging import REQUIRES_PYTHON, TRAINER_DEPENDENCIES

DEFAULT_TIMEOUT_S = 24 * 3600
SUBMISSION_LABEL = "ftcli_submission"  # one id per `ftcli train`: finds a job whose create response was lost
CREATED_BY_LABEL = "created_by"
# What every ftcli job says about itself (`ftcli jobs list` shows them): label values, see label_value.
TASK_LABEL, MODEL_LABEL, GPU_LABEL = "ftcli_task", "ftcli_model", "ftcli_gpu"
LABEL_BAD = re.compile(r"[^a-z0-9_-]")


def label_value(value: str) -> str:
    """Vertex label values: lowercase letters, digits, '_' and '-', at most 63 characters."""
    return LABEL_BAD.sub("-", value.lower())[:63].strip("-") or "none"


def model_label(model: str) -> str:
    """How a job names its model (MODEL_LABEL, and the MODEL of `ftcli jobs list`): a Hub id's or a folder's last
    segment, as a label value."""
    return label_value(model.rstrip("/").rsplit("/", 1)[-1])

# Label keys with underscores: the ListCustomJobs filter documents `labels.key=value`, and hyphenated keys in a
# filter are not documented ("ListCustomJobsRequest.filter", aiplatform_v1 job_service.py).

# What the container runs: install the trainer wheel from the bucket's Cloud Storage FUSE mount ("Custom training
# jobs can access your Cloud Storage buckets as subdirectories of the root /gcs directory", "Use Cloud Storage as
# a mounted file system", https://docs.cloud.google.com/vertex-ai/docs/training/cloud-storage-file-system), then
# run it with the job's args ("$@": bash -c SCRIPT NAME ARGS...). `set -eu` comes first: anything before it that
# fails would go unnoticed and the trainer would start anyway.
_STRICT = "set -eu\n"
_TORCH_FLOOR = next(d for d in TRAINER_DEPENDENCIES if d.startswith("torch"))
# --prefer-binary: the job's image has no compilers (and no Rust for tokenizers): a dependency whose newest release
# is out as a source archive before its wheels would be built there and fail the job; pip takes the newest release
# with a wheel instead, which is what tests/test_requirements.py resolves (binary only) against PyPI.
# The image's torch is held by a constraint: it is the build made for the GPU (ftcli.images), and an image whose
# torch is older than the trainer's floor, or that has none, would otherwise get the newest torch from PyPI at every
# start (3 GB of CUDA wheels, for a CUDA the host's driver may not run), where the README promises the image's own.
# --retries 10: pip's default 5 ("Maximum attempts to establish a new HTTP connection. (default: 5)", `pip install
# --help` of pip 25.1.1, read 2026-11-27) give up after about 8 s, measured here against an index answering 503
# (then, even without --quiet, its only words are "No matching distribution found"), so a PyPI hiccup of ten
# seconds failed a job whose GPUs were already provisioned; 10 retries wait about 4 minutes in all (apache/beam#7519
# measured the same, read 2026-11-27).
# With --quiet pip says only "ResolutionImpossible", so ftcli's last line names what the trainer needs and what the
# image has. No $(NAME) here that Vertex could expand: each $( is a command with spaces in it.
_RUN_TRAINER = (
    'echo "ftcli: installing $FTCLI_TRAINER_WHEEL"\n'
    "ftcli_keep=$(mktemp -t ftcli-keep-torch.XXXXXX)\n"
    "if ftcli_torch=$(python -c 'import importlib.metadata as m; print(m.version(\"torch\"))' 2>/dev/null); then\n"
    '  echo "torch==$ftcli_torch" > "$ftcli_keep"\n'
    "else\n"
    "  ftcli_torch=none\n"
    "  echo 'torch<0' > \"$ftcli_keep\"  # no release satisfies it: never a torch from PyPI\n"
    "fi\n"
    "python -m pip install --no-cache-dir --disable-pip-version-check --progress-bar off --quiet --prefer-binary "
    "--retries 10 "
    '-c "$ftcli_keep" "$FTCLI_TRAINER_WHEEL" || {\n'
    "  echo \"ftcli: pip could not install the trainer into this image (its ERROR lines above say why): the trainer "
    f"needs Python {REQUIRES_PYTHON} and {_TORCH_FLOOR}; the image has Python $(python -c 'import platform; "
    "print(platform.python_version())') and torch $ftcli_torch, which is kept (never replaced by one from PyPI); "
    'use an image that has both, or leave --image out; the job stops here" >&2\n'
    "  exit 1\n"
    "}\n"
    'exec python -m ftcli_trainer.task "$@"\n'
)
START_SCRIPT = _STRICT + _RUN_TRAINER

# A custom container's GPU workers need NCCL 2.7+ and the google-reduction-server package when a Reduction Server
# pool is used. The documented install ("Distributed training", Reduction Server prerequisites,
# https://docs.cloud.google.com/vertex-ai/docs/training/distributed-training, now served as
# https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/training/distributed-training,
# read 2026-11-26) is `deb https://packages.cloud.google.com/apt google-fast-socket main`, the key
# https://packages.cloud.google.com/apt/doc/apt-key.gpg piped to `apt-key add -`, then
# `apt install -y google-reduction-server`.
# Here, differently: the pytorch/pytorch runtime images (Ubuntu 22.04, see ftcli.images) have no curl, gnupg or
# apt-key, so Python fetches the key. Despite its .gpg name that key is served ASCII-armored (since 2023: "serves
# an ASCII-armored key block, not a binary keyring, despite the .gpg extension", MinaProtocol/mina#19394; the
# same fix in kubernetes/website#41307, actions/runner-images#7627; read 2026-11-26), and apt reads an armored key
# only from a file named .asc, so it is kept as .asc and named by signed-by, as Docker's Ubuntu install does
# (https://docs.docker.com/engine/install/ubuntu/, /etc/apt/keyrings/docker.asc; read 2026-11-26). Every step
# stops the job with one "ftcli: ..." line on failure: a worker without the plugin would train without Reduction
# Server, or hang in the first all-reduce, with nothing in the log saying why. The last check asks dpkg for the
# shared library the package installed (an NCCL net plugin is one): one it lists but that is missing stops the
# job; none listed is only a warning, since the docs name no file and it may come with a dependency.
_KEY_URL = "https://packages.cloud.google.com/apt/doc/apt-key.gpg"
_KEYRING = "/etc/apt/keyrings/google-fast-socket.asc"
REDUCTION_SERVER_PLUGIN = (
    "ftcli_rs_fail() { echo \"ftcli: cannot install the Reduction Server NCCL plugin (google-reduction-server): $1; "
    "the job stops here\" >&2; exit 1; }\n"
    'echo "ftcli: installing the Reduction Server NCCL plugin (google-reduction-server)"\n'
    "mkdir -p /etc/apt/keyrings || ftcli_rs_fail 'cannot create /etc/apt/keyrings'\n"
    "python -c 'import sys, urllib.request as u; sys.stdout.buffer.write(u.urlopen(sys.argv[1], timeout=60).read())' "
    f"{_KEY_URL} > {_KEYRING} || ftcli_rs_fail 'downloading its apt key {_KEY_URL} failed'\n"
    f"grep -q 'BEGIN PGP PUBLIC KEY BLOCK' {_KEYRING} "
    f"|| ftcli_rs_fail 'its apt key {_KEY_URL} is not an ASCII-armored key any more'\n"
    f"echo 'deb [signed-by={_KEYRING}] https://packages.cloud.google.com/apt google-fast-socket main' "
    "> /etc/apt/sources.list.d/google-fast-socket.list || ftcli_rs_fail 'cannot write its apt source'\n"
    "apt-get update -qq || ftcli_rs_fail 'apt-get update failed'\n"
    "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq google-reduction-server "
    "|| ftcli_rs_fail 'apt-get install google-reduction-server failed'\n"
    "if ftcli_rs_lib=$(dpkg -L google-reduction-server | grep -m1 '[.]so[.0-9]*$'); then\n"
    '  test -f "$ftcli_rs_lib" || ftcli_rs_fail "$ftcli_rs_lib is missing after the install"\n'
    '  echo "ftcli: Reduction Server NCCL plugin installed: $ftcli_rs_lib"\n'
    "else\n"
    # The docs name no file: the library may come with a dependency, so this is said, not fatal.
    '  echo "ftcli: warning: google-reduction-server lists no shared library of its own (dpkg -L); if NCCL does '
    'not load the plugin, all-reduce runs without Reduction Server"\n'
    "fi\n"
)
REDUCTION_SERVER_START_SCRIPT = _STRICT + REDUCTION_SERVER_PLUGIN + _RUN_TRAINER
WHEEL_ENV = "FTCLI_TRAINER_WHEEL"

# Vertex expands Kubernetes-style references to environment variables in what the container starts with. EnvVar.value:
# "Variables that reference a $(VAR_NAME) are expanded using the previous defined environment variables in the
# container and any service environment variables. If a variable cannot be resolved, the reference in the input
# string will be unchanged. The $(VAR_NAME) syntax can be escaped with a double $$, ie: $$(VAR_NAME)" (aiplatform_v1
# types/env_var.py in google-cloud-aiplatform 2.7.0, read 2026-11-27). In containerSpec.args too: Google's own sample
# passes "--model-dir=$(AIP_MODEL_DIR)" there, "AIP_MODEL_DIR is set by the service according to
# baseOutputDirectory" ("Create a training pipeline for custom job",
# https://cloud.google.com/vertex-ai/docs/samples/aiplatform-create-training-pipeline-custom-job-sample, read
# 2026-11-27). Kubernetes reduces every $$ to $ ("Double $$ are reduced to a single $", the core v1 Container args
# field it mirrors). So a user's value (a label `$$$`, a column `cost_$(usd)`, a bucket prefix with a $) reached the
# trainer changed, or replaced by a variable's value: every $ of a value ftcli passes is doubled, which Kubernetes'
# expansion turns back into exactly the value. The start scripts (the command) are ftcli's own and hold no $$ or
# $(NAME) of a variable (tests/test_spec.py checks that expansion leaves them as they are).


def container_text(value: str) -> str:
    """`value` written so that Vertex's $(VAR_NAME) expansion gives the container exactly `value`."""
    return value.replace("$", "$$")


def from_container_text(text: str) -> str:
    """What the container sees for an escaped `text` ($$ -> $; a $(NAME) is left as written: its value is the
    job's)."""
    return text.replace("$$", "$")


# WorkerPoolSpec.replica_count is an int64 (aiplatform_v1 custom_job.py in google-cloud-aiplatform 2.7.0, read
# 2026-11-27): more does not even convert to the message.
MAX_REPLICA_COUNT = 2**63 - 1

# Label rules, Google Cloud's "Requirements for labels"
# (https://cloud.google.com/resource-manager/docs/creating-managing-labels#requirements, the same list on
# https://cloud.google.com/pubsub/docs/labels; read 2026-11-26): "up to a maximum of 64" labels; keys 1 to 63
# characters, values empty or up to 63; "only lowercase letters, numeric characters, underscores, and dashes";
# "Keys must start with a lowercase letter or international character". CustomJob.labels itself says "no longer
# than 64 characters" (its docstring in google-cloud-aiplatform 2.7.0, aiplatform_v1/types/custom_job.py; read
# 2026-11-26): the stricter 63 holds under both. "International characters are allowed" (the same docstring, and
# the aiplatform v1 CustomJob reference, https://cloud.google.com/java/docs/reference/google-cloud-aiplatform/latest/
# com.google.cloud.aiplatform.v1.CustomJobOrBuilder; read 2026-11-27): letters of any script count, unless upper- or
# title-case (team=équipe was refused though Vertex takes it).
MAX_LABEL_CHARS = 63
MAX_LABELS = 64


def _label_letter(c: str) -> bool:
    return c.isalpha() and unicodedata.category(c) not in ("Lu", "Lt")


def _label_text_ok(text: str) -> bool:
    return len(text) <= MAX_LABEL_CHARS and all(c in "_-" or c.isdigit() or _label_letter(c) for c in text)


# CustomJob.displayName: "The name can be up to 128 characters long and can consist of any UTF-8 characters" (REST
# CustomJob, https://docs.cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.customJobs, read
# 2026-11-27; the same in the installed aiplatform_v1 CustomJob.display_name docstring, read 2026-11-27); ftcli is
# stricter on control characters for its own reason (below), not Google's.
_MAX_DISPLAY_NAME = 128
# A display name is shown on one line (jobs list, the console's title): no control characters. A / or \ is taken, as
# Vertex takes it: nothing makes a folder of a display name (downloads are named by the numeric job id, and the run's
# output folder by the name's label form).
_DISPLAY_NAME = re.compile(r"[^\x00-\x1f\x7f]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, kw_only=True)
class JobRequest:
    """Everything one CustomJob needs. `replicas` counts machines (chief included), each with `hardware`."""

    project: str
    region: str
    display_name: str
    hardware: Hardware
    image: str  # containerSpec.imageUri: a Python >= 3.11 image with torch (see ftcli.images)
    package_uri: str  # gs://.../ftcli_trainer-....whl, installed from its /gcs/ mount at start
    extras: tuple[str, ...] = ()  # the wheel's optional dependencies to install (e.g. hub: datasets)
    args: tuple[str, ...] = ()
    base_output_dir: str  # gs://...; Vertex derives AIP_MODEL_DIR, AIP_CHECKPOINT_DIR, AIP_TENSORBOARD_LOG_DIR
    replicas: int = 1
    reduction_server: int = 0  # Reduction Server replicas (0: plain NCCL all-reduce)
    spot: bool = False
    flex_start: bool = False
    max_wait_s: int | None = None  # Flex-start: how long to queue (0: however long; Vertex's default: 1 day)
    reservation: str | None = None  # "any", or projects/P/zones/Z/reservations/NAME
    timeout_s: int = DEFAULT_TIMEOUT_S
    service_account: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    @property
    def parent(self) -> str:
        """The resource the job is created under."""
        return f"projects/{self.project}/locations/{self.region}"


def gcs_mount_path(uri: str) -> str:
    """gs://BUCKET/OBJECT -> /gcs/BUCKET/OBJECT, where Vertex mounts the bucket inside the container."""
    return "/gcs/" + uri[len("gs://"):]


def build_custom_job(req: JobRequest) -> dict[str, Any]:
    """The CustomJob for `req` as REST JSON. Raises UsageError for what Vertex would reject later."""
    _check(req)
    pools: list[dict[str, Any]] = [_worker_pool(req, 1)]
    if req.replicas > 1:
        pools.append(_worker_pool(req, req.replicas - 1))
    if req.reduction_server:
        # Vertex gives a pool its role by position (0 chief, 1 workers, 2 reduction servers, 3 evaluators; a
        # skipped position would be an empty spec `{}`): `_check` (topology_problems) requires --replicas 2 or more
        # with Reduction Server, so the workers' pool is always there and this one is third.
        pools.append({
            "machineSpec": {"machineType": REDUCTION_SERVER_MACHINE},
            "replicaCount": str(req.reduction_server),
            "containerSpec": {"imageUri": reduction_server_image(req.region)},
            "diskSpec": boot_disk(REDUCTION_SERVER_MACHINE),
        })

    scheduling: dict[str, Any] = {"timeout": f"{req.timeout_s}s"}
    if req.spot or req.replicas > 1:
        # A worker that Vertex restarts alone (a preempted Spot VM; VM maintenance, which restarts the worker "on
        # another VM"; a non-zero exit, restarted "on the same VM"; "Understand the Vertex AI serverless training
        # service", https://docs.cloud.google.com/vertex-ai/docs/training/understanding-training-service, read
        # 2026-11-27) comes back to a torchrun rendezvous that the other machines left long ago, while they wait
        # for it in a collective until NCCL's timeout fails them, and restart in turn. Restarting the whole job
        # lets every rank resume together from AIP_CHECKPOINT_DIR. Scheduling's restartJobOnWorkerRestart:
        # "Restarts the entire CustomJob if a worker gets restarted. This feature can be used by distributed
        # training jobs that are not resilient to workers leaving and joining a job" (REST CustomJobSpec,
        # https://docs.cloud.google.com/vertex-ai/docs/reference/rest/v1/CustomJobSpec#scheduling, read
        # 2026-11-27). With one machine a worker restart is already the whole job's; with --spot it is set anyway.
        scheduling["restartJobOnWorkerRestart"] = True
    if req.spot:
        scheduling["strategy"] = "SPOT"
    elif req.flex_start:
        scheduling["strategy"] = "FLEX_START"
        if req.max_wait_s is not None:
            scheduling["maxWaitDuration"] = f"{req.max_wait_s}s"

    job_spec: dict[str, Any] = {
        "workerPoolSpecs": pools,
        "scheduling": scheduling,
        # No trailing slash: Vertex appends /model/, /checkpoints/, /logs/ itself.
        "baseOutputDirectory": {"outputUriPrefix": req.base_output_dir.rstrip("/")},
    }
    if req.service_account:
        job_spec["serviceAccount"] = req.service_account
    job: dict[str, Any] = {"displayName": req.display_name, "jobSpec": job_spec}
    if req.labels:
        job["labels"] = dict(req.labels)
    return job


def _worker_pool(req: JobRequest, replicas: int) -> dict[str, Any]:
    hw = req.hardware
    machine: dict[str, Any] = {"machineType": hw.machine_type}
    if hw.gpu:
        machine.update(acceleratorType=hw.accelerator_type, acceleratorCount=hw.accelerator_count)
    if req.reservation == "any":
        machine["reservationAffinity"] = {"reservationAffinityType": "ANY_RESERVATION"}
    elif req.reservation:
        machine["reservationAffinity"] = {"reservationAffinityType": "SPECIFIC_RESERVATION",
                                          "key": RESERVATION_KEY, "values": [req.reservation]}
    wheel = gcs_mount_path(req.package_uri) + (f"[{','.join(req.extras)}]" if req.extras else "")
    script = REDUCTION_SERVER_START_SCRIPT if req.reduction_server else START_SCRIPT
    env = [{"name": WHEEL_ENV, "value": wheel}, {"name": "PYTHONUNBUFFERED", "value": "1"}]
    env += [{"name": k, "value": v} for k, v in req.env]
    given = {k for k, _ in req.env}
    env += [{"name": k, "value": v} for k, v in machine_env(hw.machine_type) if k not in given]
    container: dict[str, Any] = {"imageUri": req.image, "command": ["bash", "-c", script, "ftcli-trainer"]}
    if req.args:
        container["args"] = [container_text(a) for a in req.args]
    container["env"] = [{"name": e["name"], "value": container_text(e["value"])} for e in env]
    return {
        "machineSpec": machine,
        "replicaCount": str(replicas),  # int64: a string in proto JSON
        "containerSpec": container,
        "diskSpec": boot_disk(hw.machine_type),
    }


def _check(req: JobRequest) -> None:
    problems = topology_problems(req.replicas, req.reduction_server, req.hardware.gpu)
    if req.timeout_s < 1:
        problems.append(f"the job timeout must be at least 1 second (got {req.timeout_s})")
    if not re.fullmatch(r"gs://[^/]+/.+", req.package_uri):
        problems.append(f"the trainer package must be a gs://BUCKET/OBJECT URI, not {req.package_uri!r}")
    if not re.fullmatch(r"gs://[^/]+(/.*)?", req.base_output_dir):
        problems.append(f"the output directory must be a gs://BUCKET[/PATH] URI for a Vertex job, "
                        f"not {req.base_output_dir!r}")
    if not req.display_name.strip():
        problems.append("the job's display name is empty: give it a name")
    elif not _DISPLAY_NAME.fullmatch(req.display_name):
        problems.append(f"the job's display name {req.display_name!r} has a control character (a tab, a newline, "
                        "...): ftcli shows it on one line; use printable characters")
    elif len(req.display_name) > _MAX_DISPLAY_NAME:
        problems.append(f"the job's display name has {len(req.display_name)} characters; Vertex allows at most "
                        f"{_MAX_DISPLAY_NAME}")
    if req.service_account is not None and "@" not in req.service_account:
        problems.append(f"service account {req.service_account!r} is not an email: give "
                        "NAME@PROJECT.iam.gserviceaccount.com")
    if not req.image.strip() or any(c.isspace() for c in req.image):
        problems.append(f"the image {req.image!r} is not an image reference (REGISTRY/REPOSITORY:TAG)")
    problems += _label_problems(req.labels)
    problems += _env_problems(req.env)
    if any(k == WHEEL_ENV for k, _ in req.env):
        problems.append(f"environment variable {WHEEL_ENV} is ftcli's own: pick another name")
    if problems:
        n = len(problems)
        raise UsageError(problems[0] if n == 1 else f"{n} problems with the job:",
                         problems=problems if n > 1 else None)


def topology_problems(replicas: int, reduction_server: int, gpu: bool) -> list[str]:
    """What is wrong with the worker/reduction-server counts (checked with the other flags, before any work)."""
    problems = []
    if replicas < 1:
        problems.append(f"--replicas must be 1 or more (got {replicas})")
    elif replicas > MAX_REPLICA_COUNT:  # it broke the create call, after the upload, with a traceback
        problems.append(f"--replicas {replicas} is more than a worker pool's replicaCount can hold "
                        f"({MAX_REPLICA_COUNT})")
    if reduction_server < 0:
        problems.append(f"--reduction-server must be 0 or more (got {reduction_server})")
    elif reduction_server > MAX_REPLICA_COUNT:
        problems.append(f"--reduction-server {reduction_server} is more than a worker pool's replicaCount can hold "
                        f"({MAX_REPLICA_COUNT})")
    elif reduction_server > 0:
        # Reduction Server only speeds up all-reduce between machines, and only NCCL's (GPU) all-reduce.
        if replicas < 2:
            problems.append("--reduction-server needs --replicas 2 or more (it speeds up all-reduce between "
                            "machines)")
        if not gpu:
            problems.append("--reduction-server needs GPU workers (it replaces NCCL's all-reduce): add --gpu")
    return problems


def _label_problems(labels: tuple[tuple[str, str], ...]) -> list[str]:
    problems = []
    rule = f"lowercase letters (of any script), digits, _ and - only, at most {MAX_LABEL_CHARS} characters"
    if len(labels) > MAX_LABELS:
        problems.append(f"{len(labels)} labels; Vertex allows at most {MAX_LABELS}")
    keys = [k for k, _ in labels]
    # (ftcli's own labels are made valid: a bad key or value is one of --labels', and the line says so)
    for key in sorted({k for k in keys if keys.count(k) > 1}):
        problems.append(f"--labels: label {key!r} is given more than once: keep one")
    for key, value in labels:
        if not (key and _label_letter(key[0]) and _label_text_ok(key)):
            problems.append(f"--labels: label key {key!r} is invalid: it must start with a lowercase letter; {rule}")
        if not _label_text_ok(value):
            problems.append(f"--labels: label value {value!r} (of {key!r}) is invalid: {rule}")
    return problems


def _env_problems(env: tuple[tuple[str, str], ...]) -> list[str]:
    problems = []
    names = [k for k, _ in env]
    for name in sorted({k for k in names if names.count(k) > 1}):
        problems.append(f"environment variable {name} is given more than once: keep one")
    for name in names:
        if not _ENV_NAME.fullmatch(name):
            problems.append(f"environment variable name {name!r} is invalid: use letters, digits and _, "
                            "not starting with a digit")
    return problems
