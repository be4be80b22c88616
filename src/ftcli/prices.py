"""Your price file: Vertex AI custom-training rates that turn `cost:` lines into dollar amounts.

ftcli ships no rates (every value mirroring Google needs a source and a date, and no readable copy of Vertex AI's
price table was found: see catalog.py). You put the rates you pay, with where you read them, in a TOML file:
`FTCLI_PRICES`, or `prices.toml` beside the config file. USD per hour, on-demand, per region:

    source = "https://cloud.google.com/vertex-ai/pricing"
    read = 2026-11-26

    [us-central1.machines]
    n1-standard-8 = 0.50
    [us-central1.gpus]
    T4 = 0.40

Machines are machine types; GPUs the names `--gpu` takes (T4, A100-80GB, H200, ...), per GPU. Every problem is
one line that names the file and the key.
"""

from __future__ import annotations

import datetime as dt
import errno
import functools
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ftcli.catalog import PriceTable
from ftcli.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ftcli.values import Job, Pool, TuningJob

MACHINE_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$")


def price_path() -> Path:
    """Where the price file is looked for: FTCLI_PRICES, else prices.toml beside the config file."""
    from ftcli.settings import config_path, env_path

    if path := env_path("FTCLI_PRICES"):
        return path

    return config_path().parent / "prices.toml"


FORMAT_HINT = "see README 'What a job costs' for its format; FTCLI_PRICES names another file"


def _problem(path: Path, what: str, hint: str = FORMAT_HINT) -> UsageError:
    return UsageError(f"price file {path}: {what}", hint=hint)


def _rate(path: Path, where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise _problem(path, f"{where} must be a price in USD per hour (a number, 0 or more), got {value!r}")
    return float(value)


def parse(text: str, path: Path) -> dict[str, PriceTable]:
    """The file's tables by region; a UsageError naming the key for anything wrong."""
    import tomllib

    from ftcli.catalog import gpu_names
    from ftcli.settings import check_region

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _problem(path, f"not valid TOML ({e})") from None
    source, read = data.pop("source", None), data.pop("read", None)
    if not isinstance(source, str) or not source.strip():
        raise _problem(path, "needs source = \"...\": the page (or contract) the rates come from")
    if isinstance(read, str):
        try:
            read = dt.date.fromisoformat(read)
        except ValueError:
            read = None
    if not isinstance(read, dt.date) or isinstance(read, dt.datetime):
        raise _problem(path, "needs read = YYYY-MM-DD: when the rates were read")
    gpus = {g.upper(): g for g in gpu_names()}
    tables = {}
    for region, body in data.items():
        if not isinstance(body, dict):
            raise _problem(path, f"unknown key {region!r} (expected source, read and [REGION.machines]/"
                           "[REGION.gpus] tables)")
        if (p := check_region(region, f"[{region}]")) is not None:
            raise _problem(path, p)
        if unknown := sorted(set(body) - {"machines", "gpus"}):
            raise _problem(path, f"[{region}] takes machines and gpus tables, not {', '.join(unknown)}")
        machines, by_gpu = body.get("machines", {}), body.get("gpus", {})
        for name, table in (("machines", machines), ("gpus", by_gpu)):
            if not isinstance(table, dict):
                raise _problem(path, f"{region}.{name} must be a table ([{region}.{name}])")
        for m in machines:
            if not MACHINE_RE.match(m):
                raise _problem(path, f"{region}.machines: {m!r} is not a machine type (like n1-standard-8)")
        rates_gpu = {}
        for g, v in by_gpu.items():
            if g.upper() not in gpus:
                raise _problem(path, f"{region}.gpus: unknown GPU {g!r}; the names --gpu takes: "
                               f"{', '.join(sorted(set(gpus.values())))}")
            rates_gpu[gpus[g.upper()]] = _rate(path, f"{region}.gpus.{g}", v)
        tables[region] = PriceTable(
            source=source.strip(), read=read.isoformat(), region=region,
            machines={m: _rate(path, f"{region}.machines.{m}", v) for m, v in machines.items()}, gpus=rates_gpu)
    return tables


@functools.lru_cache(maxsize=4)
def _parsed(path: str, inode: int, mtime_ns: int, size: int) -> dict[str, PriceTable]:
    """The price file's tables, read and checked once while the file stays the same (`jobs list` prices every job
    it shows). A file that fails to read or parse raises, and nothing is kept."""
    from ftcli.settings import toml_text

    return parse(toml_text(Path(path)), Path(path))


def for_region(region: str, *, quiet_without_file: bool = False) -> tuple[PriceTable | None, str | None]:
    """The user's rates for `region`, or None and why there are none (no file; the file lacks the region). With
    `quiet_without_file` (a job's cost after the fact), no file is None and None: nothing to say."""
    from ftcli.settings import special_file

    path = price_path()
    try:
        st = path.stat()
        # A named pipe (or a device) was read as the file: with nothing writing into it, `ftcli jobs list` and
        # `ftcli train` waited for ever, saying nothing.
        if kind := special_file(path):
            raise _problem(path, f"is {kind}, not a regular file", hint=(
                "point FTCLI_PRICES at the price file itself" if os.environ.get("FTCLI_PRICES") else
                "move it away (ftcli reads rates from a file there), or point FTCLI_PRICES at your price file"))
        tables = _parsed(str(path), st.st_ino, st.st_mtime_ns, st.st_size)
    except FileNotFoundError:
        if os.environ.get("FTCLI_PRICES"):  # named on purpose: a typo must not make every cost vanish quietly
            raise UsageError(f"FTCLI_PRICES names {path}, which does not exist",
                             hint="fix the path, or unset FTCLI_PRICES to use prices.toml beside the config "
                             "file") from None
        return None, None if quiet_without_file else f"no price file ({path}); ftcli ships no rates"
    # What is wrong here is not the file's format: a folder, bytes that are not text, a file ftcli may not read were
    # each sent to README's format ("see README 'What a job costs' for its format").
    except IsADirectoryError:
        raise _problem(path, "is a folder, not a file", hint=(
            "point FTCLI_PRICES at the price file itself" if os.environ.get("FTCLI_PRICES") else
            "move that folder away (ftcli reads rates from a file there), or point FTCLI_PRICES at your price "
            "file")) from None
    except UnicodeDecodeError as e:
        raise _problem(path, f"is not UTF-8 text (byte {e.start}: {e.reason})",
                       hint="save it as UTF-8 (or UTF-16 with a byte-order mark)") from None
    except OSError as e:
        fix = (f"check the permissions of {path} and of its folder" if e.errno in (errno.EACCES, errno.EPERM)
               else "FTCLI_PRICES names another file")
        raise _problem(path, f"cannot be read ({e.strerror or e})", hint=fix) from None
    if region not in tables:
        have = ", ".join(sorted(tables)) or "none"
        return None, f"{path} has no {region} rates (it has: {have})"
    return tables[region], None


# How Vertex AI bills a Spot or a Flex-start job, and why ftcli gives no amount for one, only an on-demand ceiling.
# Spot: "When you use Spot VMs, you're billed by job duration and machine type. You don't pay for the time that the
# job is in a queue or preempted" ("Use Spot VMs with training", https://cloud.google.com/vertex-ai/docs/training/
# use-spot-vms, read 2026-11-27 in its ?hl=ja copy; "Use Spot VMs with prediction" says the same in English), and
# "Spot VMs are available at a discount of up to 91% off of the on-demand price of standard VMs" (Compute Engine,
# "Create and use Spot VMs", https://docs.cloud.google.com/compute/docs/instances/create-use-spot, read 2026-11-27).
# Flex-start: "Flex-start VMs offer significant discounts ... You are only charged for the amount of time your
# workload is running" ("Use Flex-start VMs with inference", https://docs.cloud.google.com/vertex-ai/docs/predictions/
# use-flex-start-vms, read 2026-11-27); "Schedule training jobs based on resource availability"
# (https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws, read 2026-11-27) gives no rate. No page read
# gives a Spot or Flex-start rate for Vertex AI training, and the price file holds on-demand rates: so a Spot or
# Flex-start job gets "at most" the on-demand amount (its start-to-end hours include any preempted time, which is
# not billed either), never an "about".


# A reservation: "When you use Compute Engine reservations, you're billed for: Compute Engine prices for the Compute
# Engine resources, including any applicable committed use discounts (CUDs) ... Vertex AI serverless training
# management fees in addition to your infrastructure usage", and the reserved resources are "charged ... at the same
# on-demand rate as running VMs ... until the reservation is deleted. A VM consuming a reservation doesn't incur
# separate charges" ("Use reservations with training", https://docs.cloud.google.com/vertex-ai/docs/training/
# use-reservations, "Billing" and its introduction, read 2026-11-28 in its stored ja and zh-cn copies). So the Vertex
# on-demand rates in the price file are neither "about" nor "at most" what a --reservation job costs.


def billed_note(provisioning: str) -> str:
    """Why a Spot or Flex-start job's amount is only a ceiling, or a reservation's not its bill, in a few words."""
    if provisioning == "Reservation":
        return ("a reservation's machines are billed by Compute Engine for as long as the reservation exists, at its "
                "prices less any committed use discounts, plus Vertex's training management fee")
    if provisioning == "Low-cost":  # the deprecated LOW_COST strategy: "potential use of spot resources" (vertex.py)
        return "Low-cost may run on Spot machines, billed at lower Spot prices, not in your price file"
    return f"{provisioning} is billed at lower {provisioning} prices, not in your price file"


def on_demand_amount(usd: float, provisioning: str | None) -> str:
    """An amount at the price file's (on-demand) rates, as it reads for a job provisioned so: 'about $1.25' (on-demand:
    what is billed), 'at most $1.25' (Spot, Flex-start, Low-cost: billed below, a ceiling) or '$1.25' (a reservation:
    neither, another bill; billed_note says which)."""
    qualifier = "" if provisioning == "Reservation" else "at most " if provisioning else "about "
    return f"{qualifier}${usd:,.2f}"


@dataclass(frozen=True)
class Spent:
    """What a job has cost at the user's rates: its machine-hours from start to end (to now while it runs). For a
    Spot or Flex-start job (`provisioning`), `amount` is at on-demand rates: a ceiling, not what is billed."""

    per_hour: float  # USD, every pool's machines and GPUs
    hours: float
    table: PriceTable
    provisioning: str | None = None  # "Spot" or "Flex-start"; None: on-demand, what the rates are for

    @property
    def amount(self) -> float:
        return self.per_hour * self.hours

    @property
    def billed_usd(self) -> float | None:
        """The amount when it is what the rates bill (an on-demand job); None for a Spot or Flex-start job."""
        return None if self.provisioning else self.amount

    @property
    def ceiling_note(self) -> str:
        """'' (on-demand), or '; ' and why the amount is only a ceiling (Spot, Flex-start), to follow the rates."""
        return f"; {billed_note(self.provisioning)}" if self.provisioning else ""

    @property
    def shown(self) -> str:
        """The amount, worded for the job's provisioning (on_demand_amount)."""
        return on_demand_amount(self.amount, self.provisioning)


def _per_hour(pools: Iterable[Pool], region: str) -> tuple[tuple[float, PriceTable] | None, str | None]:
    """USD an hour for `pools` (every replica's machine and GPUs) at the price file's `region` rates; without a
    price file, None and nothing to say (a job's cost is then simply not shown)."""
    from ftcli.catalog import gpu_short_name

    table, why = for_region(region, quiet_without_file=True)
    if table is None:
        return None, why
    parts = [(p.replicas, p.machine_type, gpu_short_name(p.accelerator) if p.accelerator else None,
              p.accelerator_count) for p in pools if p.machine_type and p.replicas > 0]
    rate, why = table.per_hour(parts)
    return ((rate, table), None) if rate is not None else (None, why)


def job_cost(job: Job, now: dt.datetime | None = None) -> tuple[Spent | None, str | None]:
    """The job's cost so far at the rates in the price file, or None and why the file gives none (a region, machine
    or GPU it has no rate for); None and None when there is nothing to say (no price file, not started yet). Rates
    are on-demand: for a Spot or Flex-start job, a ceiling (Spent.provisioning)."""
    seconds = job.duration_s(now)
    if seconds is None:
        return None, None
    rate, why = _per_hour(job.pools, job.name.region)
    return (Spent(rate[0], seconds / 3600, rate[1], job.provisioning), None) if rate else (None, why)


def tuning_cost(job: TuningJob, now: dt.datetime | None = None) -> tuple[Spent | None, str | None]:
    """A tuning job's cost so far: every trial's run time (each trial is one job of `job.pools`)."""
    runs = [d for t in job.trials if (d := t.duration_s(now)) is not None]
    if not runs:
        return None, None
    rate, why = _per_hour(job.pools, job.name.region)
    return (Spent(rate[0], sum(runs) / 3600, rate[1], job.provisioning), None) if rate else (None, why)
