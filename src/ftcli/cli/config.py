"""`ftcli config set | get | list | unset`: defaults for --project, --region, --bucket, --service-account, and the
value each one has now with where it comes from (flag, env, file, gcloud, adc, default)."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from ftcli.cli.options import BucketOpt, JsonOpt, ProjectOpt, RegionOpt, ServiceAccountOpt
from ftcli.errors import FtcliError, UsageError

if TYPE_CHECKING:
    from typer._click import Context as ClickContext

    from ftcli.settings import Value

# The group's examples are its commands' own (tests/cli/test_help.py holds them to that), so `ftcli config -h` shows
# what to type as every command's -h does (README: "Every command takes -h/--help (with examples)").
app = typer.Typer(help="Set defaults for --project, --region, --bucket, --service-account, and the image mirror; see "
                       "where each value comes from.\n\n"
                       "Examples:\n\n"
                       "  ftcli config set project my-project\n\n"
                       "  ftcli config get project\n\n"
                       "  ftcli config list --json", no_args_is_help=True)

KeyArg = Annotated[str, typer.Argument(metavar="KEY", help="project, region, bucket, service-account or image-mirror.")]
ValueArg = Annotated[str, typer.Argument(
    metavar="VALUE",
    help="A project id (or number), a Vertex AI region (us-central1), gs://BUCKET[/PREFIX] ({region} in it stands for "
         "the job's region), NAME@PROJECT.iam.gserviceaccount.com, or LOCATION-docker.pkg.dev/PROJECT/REPOSITORY; "
         "checked as the commands check it.")]
HOW_TO_SET = {"project": "--project ID, FTCLI_PROJECT, `ftcli config set project ID` or `gcloud config set project ID`",
              "region": "--region, FTCLI_REGION or `ftcli config set region REGION`",
              "bucket": "--bucket gs://BUCKET[/PREFIX], FTCLI_BUCKET or `ftcli config set bucket gs://BUCKET`",
              "service_account": "--service-account, FTCLI_SERVICE_ACCOUNT or "
                                 "`ftcli config set service-account NAME@PROJECT.iam.gserviceaccount.com`",
              "image_mirror": "FTCLI_IMAGE_MIRROR or `ftcli config set image-mirror "
                              "LOCATION-docker.pkg.dev/PROJECT/REPOSITORY` (a remote repository of Docker Hub)"}


def _key(key: str, retyped: Callable[[str], str]) -> str:
    """The setting `key` names (`service-account` is service_account); an unknown one is refused, naming the
    setting it most likely meant (settings.near_key, the rule the config file's keys are held to) with `retyped(k)`,
    the command again with that setting, as the hint. `config set`, `get` and `unset` all come here."""
    from ftcli.settings import KEYS, near_key

    k = key.replace("-", "_")
    if k in KEYS:
        return k
    names = [x.replace("_", "-") for x in KEYS]
    if (meant := near_key(key)) is None:
        raise UsageError(f"unknown setting {key!r}; choose one of {', '.join(names)}")
    shown = meant.replace("_", "-")
    raise UsageError(f"unknown setting {key!r}; did you mean {shown}?", hint=retyped(shown))


def usage_hint(ctx: ClickContext) -> str | None:
    """The hint for a usage error of `config set` typed as other tools take it, or None: `config set region=X` (git's
    and .env's KEY=VALUE) said only "missing argument 'value'", and two settings at once "got unexpected extra
    argument(s)", each with "see ftcli config set -h"."""
    if ctx.info_name != "set" or ctx.parent is None or ctx.parent.info_name != "config":
        return None
    key, value = ctx.params.get("key") or "", ctx.params.get("value")
    if value is None and "=" in key.strip("="):
        name, _, given = key.partition("=")
        return f"a space, not '=': ftcli config set {shlex.quote(name)} {shlex.quote(given)}"
    if value is not None:  # the values after KEY VALUE
        return "one setting at a time: run `ftcli config set KEY VALUE` once for each"
    return None


def _check(k: str) -> Callable[[str, str], str | None]:
    """The check every command makes of setting `k`: (value, where) -> what is wrong, or None."""
    from ftcli import settings

    return {"project": settings.check_project, "region": settings.check_region, "bucket": settings.check_bucket,
            "service_account": settings.check_service_account, "image_mirror": settings.check_image_mirror}[k]


def _row(v: Value) -> dict:
    return {"key": v.key.replace("_", "-"), "value": v.value, "source": v.source, "origin": v.origin}


def _source_cell(row: dict) -> str:
    """Where a value comes from, as `config list`'s table says it (its --json keeps source and origin apart)."""
    if row["source"] == "file":
        return "config file"  # its path: the "config file:" line under the table
    return _said_source(row["source"], row["origin"])


def _said_source(source: str | None, origin: str | None) -> str:
    """Where a value comes from, in words: `flag: --region`, `env: FTCLI_REGION`, `gcloud: core/project`,
    `key file: PATH (GOOGLE_APPLICATION_CREDENTIALS)`."""
    origin = origin or ""
    if not source:
        return "-"
    if source == "file":
        return f"config file: {origin}"
    if source == "default":
        return origin  # ftcli's default
    if source == "gcloud" and (m := re.fullmatch(r"gcloud configuration (\S+) \((\S+)\)", origin)):
        # (settings' "gcloud configuration default (compute/region)" took 45 columns)
        return f"gcloud: {m[2]}" + ("" if m[1] == "default" else f" ({m[1]} configuration)")
    if source == "adc":
        # Read by Google's client libraries, not gcloud: a project from a service account's key file was labelled
        # "gcloud: project_id of KEY", sending the user to a gcloud configuration that had no project, and
        # GOOGLE_CLOUD_PROJECT "gcloud: GOOGLE_CLOUD_PROJECT", though gcloud never reads it.
        key_file = origin.removeprefix("project_id of ")
        return f"key file: {key_file}" if key_file != origin else f"env: {origin}"
    return f"{source}: {origin}"  # flag: --region, env: FTCLI_REGION, gcloud: CLOUDSDK_CORE_PROJECT


@app.command("set")
def set_(key: KeyArg, value: ValueArg) -> None:
    """Save a default in the config file (`ftcli config list` names it), keeping its other keys and comments. A flag
    or an FTCLI_* variable still wins over it.

    Examples:

      ftcli config set project my-project

      ftcli config set bucket gs://my-bucket/ftcli
    """
    from ftcli import settings
    from ftcli.output import note, out
    from ftcli.settings import and_list

    k = _key(key, lambda k: f"ftcli config set {k} {shlex.quote(value)}")
    check = _check(k)
    # `{region}` in a bucket stands for the job's region (settings.effective): checked as one region would fill it
    checked = value.replace(settings.REGION_FIELD, settings.DEFAULT_REGION) if k == "bucket" else value
    if problem := check(checked, key):
        raise UsageError(problem)  # saved, it would stop every command that reads it
    value = value.rstrip("/") if k in ("bucket", "image_mirror") else value
    # The setting written in the file as the commands spell it (`image-mirror = ...`), which every command refuses
    # ("did you mean image_mirror?"), refused `config set image-mirror X` too, with "rename it": that line is the
    # setting being set, so it takes the value and is renamed where it is (its comment kept), and this says so.
    entries = settings.config_entries()
    dashed = settings.dashed_spellings(k, entries)
    path = settings.save_config_file({k: value})
    out().print(f"{key} = {value}  ({path})", markup=False)
    if dashed and k in entries:
        note(f"removed the config file's {and_list(dashed)} line: {k} holds the setting there")
    elif dashed:
        note(f"the config file's {dashed[0]} line now reads {k}, the key ftcli reads there")
    if (now := settings.effective()[k]).source == "env":
        note(f"{now.origin}={now.value} is set, and wins over the config file while it is")


@app.command("get")
def get(key: KeyArg, json_out: JsonOpt = False) -> None:
    """Print the value a setting has now (from a variable, the config file, gcloud, a key file or the default); exit
    1 when it is not set anywhere. The source goes to stderr (--json: in the object).

    Example: ftcli config get project
    """
    from ftcli.output import emit_json, note, warn
    from ftcli.settings import effective

    k = _key(key, lambda k: f"ftcli config get {k}" + (" --json" if json_out else ""))
    v = effective()[k]
    # Printed as it is, a value every command refuses (FTCLI_REGION=us-centrall1) went by without a word, though
    # `config list` says it
    if v.value is not None and (problem := _check(k)(v.value, v.where)):
        warn(problem)
    if json_out:
        emit_json(_row(v))
        if v.value is None:
            raise typer.Exit(1)
        return
    if v.value is None:
        raise FtcliError(f"{k.replace('_', '-')} is not set", hint=f"set it with {HOW_TO_SET[k]}")
    print(v.value)
    note(f"({_said_source(v.source, v.origin)})")


@app.command("list")
def list_(
    project: ProjectOpt = None,
    region: RegionOpt = None,
    bucket: BucketOpt = None,
    service_account: ServiceAccountOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show each setting's value now and where it comes from: a flag, an FTCLI_* variable, the config file,
    gcloud's configuration, what Google's client libraries read (GOOGLE_CLOUD_PROJECT, a service account's key
    file), or ftcli's default. Values that would be refused are said after the table.

    Example: ftcli config list --json
    """
    from ftcli import settings
    from ftcli.output import Column, note, show_list, warn
    from ftcli.settings import config_path, effective, problems_of

    values = effective(project=project, region=region, bucket=bucket, service_account=service_account)
    rows = [_row(v) for v in values.values()]
    # Every value and source whole at 80 columns: a long one wraps in its column. SOURCE was cut to "file:…" beside a
    # service account's 61 characters; the config file is named under the table, so the table says only "config file".
    # A value (a name to copy) wraps only once its source (words) is down to 22 characters ("gcloud: core/project").
    # Below about 50 columns, where the value would get fewer than 16 (all but the longest regions whole), SOURCE is
    # left out and said so on stderr, as jobs list leaves out MODEL and TASK (`config get KEY` and --json still say
    # it): with a value held at 24 columns the table was 58 wide in any terminal narrower than that.
    from ftcli.output import out

    source_least, keys = 22, max(len("KEY"), *(len(r["key"]) for r in rows))
    columns = (Column("KEY", lambda r: r["key"], shrink=False),
               Column("VALUE", lambda r: r["value"] or "(not set)", wrap=True,
                      min_width=max(16, out().width - keys - source_least - 4)),
               Column("SOURCE", _source_cell, min_width=source_least, wrap=True, drop=1))
    if not json_out and out().width - keys - 2 < len(settings.DEFAULT_REGION):
        # Narrower than KEY and a value as long as the default region's name (COLUMNS=15, a split pane): the table
        # was wider than the terminal below 22 columns, its value folded in 5-column pieces ("gs://", "my-lo"), and
        # below 18 Rich left the VALUE column out, so no value was shown at all. One `key = value` line a setting,
        # whole (the terminal wraps it, and it copies as one), is what such a terminal can show.
        from ftcli.output import err

        err().print(f"(SOURCE left out to fit {out().width} columns; a wider terminal or --json shows it)",
                    style="dim", markup=False, highlight=False)
        for row in rows:
            out().print(f"{row['key']} = {row['value'] or '(not set)'}", markup=False, soft_wrap=True)
    else:
        show_list(rows, columns, json_out=json_out)
    for problem in problems_of(values, need_bucket=False):
        warn(problem)
    if not json_out:
        from ftcli.prices import price_path

        prices = price_path()
        # Each path with the variable that moves it, as the history and the model cache had: the config file and
        # the price file named none, though FTCLI_CONFIG is how a container or CI runner without a home keeps its
        # settings.
        note(f"config file: {config_path()}" + ("" if os.environ.get("FTCLI_CONFIG") else "  (FTCLI_CONFIG moves it)"))
        if os.environ.get("FTCLI_PRICES"):
            missing = "  (FTCLI_PRICES names no file: fix the path or unset it)"
            note(f"price file:  {prices}" + ("" if prices.exists() else missing))
        else:
            missing = "  (none: cost lines give no dollar amounts; FTCLI_PRICES moves it)"
            note(f"price file:  {prices}" + ("  (FTCLI_PRICES moves it)" if prices.exists() else missing))
        if prices.exists():
            # A price file that `train` refuses (and `jobs list` warns of) was named here as if it were fine.
            from ftcli.prices import for_region

            try:
                for_region(values["region"].value or settings.DEFAULT_REGION)
            except FtcliError as e:
                warn(e.message, e.hint)
        # README's set-up says `config list` names where the history and the model cache go: a container or CI
        # runner without a writable home needs to know what to move (FTCLI_STATE_DIR, FTCLI_CACHE_DIR).
        from ftcli.history import db_path
        from ftcli.models import cache_dir

        note(f"history:     {db_path()}"
             + ("" if os.environ.get("FTCLI_STATE_DIR") else "  (FTCLI_STATE_DIR moves it)"))
        note(f"model cache: {cache_dir() / 'models'}"
             + ("" if os.environ.get("FTCLI_CACHE_DIR") else "  (FTCLI_CACHE_DIR moves it)"))


@app.command("unset")
def unset(key: KeyArg) -> None:
    """Forget a saved default (the config file's other keys and comments are kept), and say what the setting is
    now. A key of the file that ftcli does not read (the one a warning names) is removed too, and so is the setting
    spelled with dashes in the file (`image-mirror = ...`: the file takes image_mirror), and a setting of the wrong
    type (`region = true`).

    Example: ftcli config unset region
    """
    from ftcli import settings
    from ftcli.output import note, out

    # A key of the file that is no setting (`zone`, an older or a misspelled one: every command warns of it, or
    # refuses it, and says to remove it) was refused here as an unknown setting, and the file had to be edited by
    # hand. One that is not in the file is still refused, naming the setting meant.
    if key.replace("-", "_") not in settings.KEYS and key in settings.config_entries():
        removed = settings.remove_config_entry(key)
        if removed is not None:
            path, what = removed
            out().print(f"{what} removed  ({path})", markup=False)
            return
    k = _key(key, lambda k: f"ftcli config unset {k}")
    # The setting written in the file as the commands spell it (`image-mirror = ...`, where ftcli writes
    # image_mirror), which the file's reading refuses ("did you mean image_mirror?"): `config unset image-mirror`
    # was refused with that same error, and the line had to be removed by hand.
    removed_any = False
    for other in settings.dashed_spellings(k, settings.config_entries()):
        if (removed := settings.remove_config_entry(other)) is not None:
            path, what = removed
            out().print(f"{what} removed  ({path})", markup=False)
            removed_any = True
    # It said nothing, whether the file had the key or not, and whatever value the setting still had from a
    # variable or gcloud: a user could not tell that FTCLI_REGION still won.
    # (the file's entries, not its settings: a setting of the wrong type, `region = true`, which every command
    # refuses, is one `config unset` removes)
    if k not in settings.config_entries():
        settings.load_config_file()  # a file every command refuses is refused here too
        if not removed_any:
            note(f"{key} is not in the config file {settings.config_path()}: nothing to unset")
    else:
        path = settings.save_config_file({k: None})
        out().print(f"{key} unset  ({path})", markup=False)
    now = settings.effective()[k]
    if now.value is not None:
        note(f"{key} is now {now.value} ({_said_source(now.source, now.origin)})")
