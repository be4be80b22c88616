"""Typed option aliases shared by the commands (one definition each; FTCLI_* variables handled in settings)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

PANEL = "Google Cloud"

ProjectOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045 - typer reads these annotations at runtime
    "--project", help="Google Cloud project [env FTCLI_PROJECT, config, gcloud].", rich_help_panel=PANEL)]
RegionOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--region", help="Vertex AI region [env FTCLI_REGION, config, gcloud; default us-central1].",
    rich_help_panel=PANEL)]
BucketOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--bucket", help="Staging bucket gs://BUCKET[/PREFIX] [env FTCLI_BUCKET, config].", rich_help_panel=PANEL)]
ServiceAccountOpt = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--service-account", help="Service account the job runs as [env FTCLI_SERVICE_ACCOUNT, config].",
    rich_help_panel=PANEL)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
JobArg = Annotated[str, typer.Argument(
    help="Job: short id (3), last, numeric id, or projects/P/locations/R/customJobs/ID.")]
