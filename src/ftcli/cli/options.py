"""Typed option aliases shared by the commands (one definition each; FTCLI_* variables handled in settings)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
import typer.core

from ftcli import values

if TYPE_CHECKING:
    from typer._click import Context as ClickContext  # typer 0.29 carries its own click (pinned <0.30: pyproject)

PANEL = "Google Cloud"

ProjectOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045 - typer reads these annotations at runtime
    "--project", metavar="ID", help="Google Cloud project [env FTCLI_PROJECT, config, GOOGLE_CLOUD_PROJECT, gcloud, "
    "key file].", rich_help_panel=PANEL)]
REGION_HELP = "Vertex AI region [env FTCLI_REGION, config, gcloud; default us-central1]."
RegionOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--region", metavar="REGION", help=REGION_HELP, rich_help_panel=PANEL)]
# `ftcli train`'s: a list of candidates too (submit.plan_candidates), which its help did not say
RegionsOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--region", metavar="REGION", help=f"{REGION_HELP} Several in order (us-central1,europe-west4): the next "
    "when the machines cannot be had; each needs its own staging bucket ({region} in --bucket).",
    rich_help_panel=PANEL)]
BucketOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--bucket", help="Staging bucket gs://BUCKET[/PREFIX] [env FTCLI_BUCKET, config].", rich_help_panel=PANEL)]
ServiceAccountOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--service-account", metavar="EMAIL", help="Service account the job runs as [env FTCLI_SERVICE_ACCOUNT, config].",
    rich_help_panel=PANEL)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
# Every form history.resolve takes a job in, said once for every command that takes one (JOB, MODEL_DIR_OR_JOB,
# RUN_DIR_OR_JOB): the console URL, which the README names and `ftcli train` prints, was in no -h, and predict,
# evaluate and report named fewer forms than logs. The same words as resolve's errors (values.JOB_FORMS).
JOB_FORMS = values.JOB_FORMS
JobArg = Annotated[str, typer.Argument(metavar="JOB", help=f"A job: {JOB_FORMS}.")]



class _Argument(typer.core.TyperArgument):
    """A command's argument as the README and the help's examples write it: `JOB [DIR]`, `MODEL_DIR_OR_JOB [TEXT]...`
    (click's way). Typer 0.29 wrote a required one in braces (`{job} [dest]`: a set, or a template to fill in), and
    listed it as `job <str>`, `texts... <list[str]>`: Python's types, where the name and the help say what it is."""

    def _usage_display_name(self) -> str:
        name = self.display_name_raw.upper()
        return (name if self.required else f"[{name}]") + ("..." if self.nargs != 1 else "")

    def _rich_display_name(self) -> str:
        return self.display_name_raw.upper() + ("..." if self.nargs != 1 else "")

    def display_type_rich(self, ctx: ClickContext) -> str | None:
        return None


class Command(typer.core.TyperCommand):
    """Every ftcli command (`use_command_class`): its arguments shown as `_Argument` shows them; each one's metavar
    (JOB, FILE, ...) is its name in the usage line, the help and the errors. An option that takes a value and names
    no metavar shows its name in capitals, as argparse does (`--project PROJECT`); Typer 0.29 showed Python's type
    (`--project <str>`, `--limit <int range>`, and `--pair <list[str]>` for an option given once per text). A closed
    choice keeps its list (`--precision <auto|fp32|bf16|fp16>`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if type(param) is typer.core.TyperArgument:
                param.__class__ = _Argument
            elif (isinstance(param, typer.core.TyperOption) and param.metavar is None and not param.is_flag
                  and not param.count and not param.type_descriptor.is_choice and param.name):
                param.metavar = param.name.upper()


def use_command_class(group: typer.Typer) -> None:
    """Make `Command` the class of every command of `group` and of its sub-groups that names no other class
    (`app.command()` records Typer's own TyperCommand when given none)."""
    for info in group.registered_commands:
        if info.cls in (None, typer.core.TyperCommand):
            info.cls = Command
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            use_command_class(sub.typer_instance)


# The machines and how they are obtained: `ftcli train` and `ftcli tune` (whose trials are train's job) alike.
HW = "Hardware"
GPU_HELP = ("GPU[xCOUNT]: T4, V100, P100, P4, L4, A100, A100-80GB, RTX-PRO-6000, H100, H100-MEGA, H200, B200 (e.g. "
            "L4x2), or none for a CPU machine.")
GpuOpt = Annotated[str, typer.Option(
    "--gpu", metavar="GPU", help=f"{GPU_HELP} Several in order (L4,T4): the next when the machines cannot be had.",
    rich_help_panel=HW)]
# `ftcli tune`'s: one GPU (its trials all run on it); its help said "Several in order (L4,T4), ftcli train only"
OneGpuOpt = Annotated[str, typer.Option("--gpu", metavar="GPU", help=GPU_HELP, rich_help_panel=HW)]
MachineTypeOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--machine-type", metavar="TYPE", help="Override the machine type (must suit the GPU).", rich_help_panel=HW)]
ReplicasOpt = Annotated[int, typer.Option(
    "--replicas", metavar="N", help="Machines (data-parallel workers).", rich_help_panel=HW)]
ReductionServerOpt = Annotated[int, typer.Option(
    "--reduction-server", metavar="N",
    help="Reduction Server replicas for faster all-reduce across machines (0: none).",
    rich_help_panel=HW)]
SpotOpt = Annotated[bool, typer.Option("--spot", help="Spot VMs (cheaper, preemptible; the trainer resumes).",
                                       rich_help_panel=HW)]
FlexStartOpt = Annotated[bool, typer.Option(
    "--flex-start", help="Queue for the machines with Dynamic Workload Scheduler (L4, A100, A100-80GB, H100, H200, "
    "B200; at most 7 days).", rich_help_panel=HW)]
MaxWaitOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--max-wait", metavar="DURATION",
    help="With --flex-start: give up queueing after this long (e.g. 2h; 0: wait however long it "
    "takes) [default: Vertex's, 1 day].",
    rich_help_panel=HW)]
ReservationOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--reservation", help="Run on a Compute Engine reservation: projects/P/zones/Z/reservations/NAME, or any.",
    rich_help_panel=HW)]
ImageOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--image", help="Your own container image (Python >= 3.11 with pip and torch >= 2.6); the trainer is "
    "pip-installed into it at start [default: the pinned PyTorch image that covers the GPU, through the "
    "image-mirror setting when there is one].", rich_help_panel=HW)]
TimeoutOpt = Annotated[str, typer.Option(
    "--timeout", metavar="DURATION", help="Stop the job after this long: 90m, 24h, 2d.",
                                         rich_help_panel=HW)]
LabelsOpt = Annotated[Optional[list[str]], typer.Option(  # noqa: UP045
    "--labels", metavar="KEY=VALUE", help="Extra job labels KEY=VALUE (repeat or comma-separate).")]
DisplayNameOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--display-name", metavar="NAME", help="Job name in the console [default: ftcli-TASK-TIME].")]
TrialOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--trial", help="For a tuning job (ftcli tune): this trial [default: the best so far].")]


def _job_params(gpu_option: Any, region_option: Any) -> list[inspect.Parameter]:
    # the options are Annotated[...] aliases: typing forms, which have no type of their own to write here
    kw = inspect.Parameter.KEYWORD_ONLY
    return [inspect.Parameter(name, kw, default=default, annotation=kind) for name, kind, default in (
        ("gpu", gpu_option, "T4"), ("machine_type", MachineTypeOpt, None), ("replicas", ReplicasOpt, 1),
        ("reduction_server", ReductionServerOpt, 0), ("spot", SpotOpt, False), ("flex_start", FlexStartOpt, False),
        ("max_wait", MaxWaitOpt, None), ("reservation", ReservationOpt, None), ("image", ImageOpt, None),
        ("timeout", TimeoutOpt, "24h"), ("labels", LabelsOpt, None), ("display_name", DisplayNameOpt, None),
        ("project", ProjectOpt, None), ("region", region_option, None), ("bucket", BucketOpt, None),
        ("service_account", ServiceAccountOpt, None))]


def with_job_options(command: Callable[..., Any] | None = None, *, candidates: bool = True) -> Callable[..., Any]:
    """The options of the job `ftcli train` creates (and `ftcli tune`'s trials run): machines, how they are
    obtained, image, timeout, labels, name, project/region/bucket/service account. The command receives them as
    one dict argument `job`, which `submit.plan` takes as keyword arguments. `candidates`: --gpu and --region take
    a list of candidates (train's)."""
    import functools

    from ftcli.trainer_options import with_option_group

    if command is None:
        return functools.partial(with_job_options, candidates=candidates)
    return with_option_group("job", _job_params(*((GpuOpt, RegionsOpt) if candidates else (OneGpuOpt, RegionOpt))))(
        command)
