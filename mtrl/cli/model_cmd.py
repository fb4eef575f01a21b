"""`mtrl model`: copy a model into the deployment's bucket (from the Hugging Face Hub by the stack's import job, or
from a local directory), write its SHA256SUMS and record it where verl runs read it; list what is registered."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mtrl.cli.image_cmd import deployment_catalog, show_phase
from mtrl.cli.output import EXIT_INVALID, console, error_console, fail, print_json
from mtrl.cli.remote import (
    EndpointOption,
    JsonOption,
    PrefixOption,
    ProfileOption,
    RegionOption,
    connect,
    remote_errors,
)

app = typer.Typer(help="Model copies verl runs train: import one, list what is registered.", no_args_is_help=True)


@app.command("import")
def import_model(
    model: Annotated[
        str, typer.Argument(help="<hub-id> or <hub-id>@<revision>, e.g. Qwen/Qwen2.5-0.5B-Instruct@main.")
    ],
    *,
    from_dir: Annotated[
        Path | None,
        typer.Option("--from", help="Upload this local copy instead of downloading from the Hub."),
    ] = None,
    prefix: PrefixOption = "mtrl",
    region: RegionOption = None,
    profile: ProfileOption = None,
    endpoint_url: EndpointOption = None,
    as_json: JsonOption = False,
) -> None:
    """Copy a model into the deployment's bucket (models/<id>/<revision>/ with its SHA256SUMS) and record it where
    verl runs read it (no redeploy). From the Hub, the copy is made in the account by the stack's import job."""
    from mtrl.client import builders  # noqa: PLC0415 (the AWS SDK loads with the command, not with --help)
    from mtrl.contracts.hub import HubNameError, parse_model_ref  # noqa: PLC0415
    from mtrl.envs.registry import project_root  # noqa: PLC0415

    try:
        model_id, revision = parse_model_ref(model)
    except HubNameError as error:
        fail(str(error), as_json=as_json)
    if from_dir is not None and not from_dir.is_dir():
        fail(f"--from {from_dir}: not a directory", as_json=as_json)
    connection = connect(prefix=prefix, region=region, profile=profile, endpoint_url=endpoint_url, as_json=as_json)
    with remote_errors(connection.aws, as_json=as_json):
        try:
            if from_dir is not None:
                registered = builders.import_local_model(
                    connection.aws,
                    connection.deployment,
                    from_dir,
                    model_id,
                    revision,
                    on_file=(lambda _n, _s: None)
                    if as_json
                    else lambda name, size: error_console.print(f"uploading {name} ({size} bytes)", highlight=False),
                )
            else:
                registered = builders.import_hub_model(
                    connection.aws,
                    connection.deployment,
                    project_root(),
                    model_id,
                    revision,
                    on_phase=(lambda _build: None) if as_json else show_phase,
                )
        except (builders.BuildError, FileNotFoundError) as error:
            fail(str(error), code=EXIT_INVALID, as_json=as_json)
    if as_json:
        print_json(registered.to_dict())
        return
    copy = registered.model
    console.print(f"[green]imported[/] {copy.id} at {copy.s3_uri} (SHA256SUMS {copy.sha256})", highlight=False)
    console.print("verl runs may train it from their next Preflight (no redeploy)", highlight=False)


@app.command("list")
def list_models(
    prefix: PrefixOption = "mtrl",
    region: RegionOption = None,
    profile: ProfileOption = None,
    endpoint_url: EndpointOption = None,
    as_json: JsonOption = False,
) -> None:
    """List the models registered in the deployment (mtrl model import), oldest first (the first is the default
    when the settings list none)."""
    catalog = deployment_catalog(prefix, region, profile, endpoint_url, as_json=as_json)
    models = [registered.to_dict() for registered in catalog.models]
    if as_json:
        print_json(models)
        return
    if not models:
        console.print("no model registered: `mtrl model import <hub-id>[@revision]` imports one", highlight=False)
    for entry in models:
        console.print(
            f"{entry['id']}  {entry['s3_uri']}  sha256 {entry['sha256'][:12]}…  ({entry['source']}, "
            f"recorded {entry['recorded_at']})",
            highlight=False,
        )
