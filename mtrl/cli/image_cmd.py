"""`mtrl image`: build the verl trainer image in the account (the stack's CodeBuild project) and list what is
registered. The build pushes to the deployment's ECR repository; its digest is recorded where Preflight reads it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from mtrl.backends.verl.supply import IMAGE_NAMES
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

if TYPE_CHECKING:
    from mtrl.backends.verl.catalog import Catalog
    from mtrl.client.builders import Build

app = typer.Typer(help="The trainer image: build it in the account, list what is registered.", no_args_is_help=True)


def show_phase(build: Build) -> None:
    error_console.print(f"build {build.build_id}: {build.phase or 'QUEUED'}", highlight=False)


@app.command("build")
def build(
    image: Annotated[str, typer.Argument(help="The image to build: verl (docker/verl-trainer).")],
    *,
    prefix: PrefixOption = "mtrl",
    region: RegionOption = None,
    profile: ProfileOption = None,
    endpoint_url: EndpointOption = None,
    as_json: JsonOption = False,
) -> None:
    """Build the trainer image in the account with the stack's CodeBuild project (no Docker here), follow the
    build, and record the pushed image by digest where verl runs read it (no redeploy)."""
    from mtrl.client import builders  # noqa: PLC0415 (the AWS SDK loads with the command, not with --help)
    from mtrl.envs.registry import project_root  # noqa: PLC0415

    if image not in IMAGE_NAMES:
        fail(f"no image '{image}': the stack builds {', '.join(IMAGE_NAMES)}", as_json=as_json)
    connection = connect(prefix=prefix, region=region, profile=profile, endpoint_url=endpoint_url, as_json=as_json)
    with remote_errors(connection.aws, as_json=as_json):
        try:
            registered = builders.build_image(
                connection.aws,
                connection.deployment,
                project_root(),
                on_phase=(lambda _build: None) if as_json else show_phase,
            )
        except (builders.BuildError, FileNotFoundError) as error:
            fail(str(error), code=EXIT_INVALID, as_json=as_json)
    if as_json:
        print_json({"image": image, **registered.to_dict()})
        return
    console.print(f"[green]built[/] {registered.uri}", highlight=False, soft_wrap=True)
    console.print("verl runs use it from their next Preflight (no redeploy)", highlight=False)


@app.command("list")
def list_images(
    prefix: PrefixOption = "mtrl",
    region: RegionOption = None,
    profile: ProfileOption = None,
    endpoint_url: EndpointOption = None,
    as_json: JsonOption = False,
) -> None:
    """List the images registered in the deployment (mtrl image build)."""
    catalog = deployment_catalog(prefix, region, profile, endpoint_url, as_json=as_json)
    images = [{"image": "verl", **catalog.image.to_dict()}] if catalog.image else []
    if as_json:
        print_json(images)
        return
    if not images:
        console.print("no image registered: `mtrl image build verl` builds one", highlight=False)
    for entry in images:
        console.print(f"{entry['image']}  {entry['uri']}  (recorded {entry['recorded_at']})", highlight=False)


def deployment_catalog(
    prefix: str, region: str | None, profile: str | None, endpoint_url: str | None, *, as_json: bool
) -> Catalog:
    """The deployment's registered images and models (``mtrl image list``, ``mtrl model list``)."""
    from mtrl.backends.verl.catalog import read_catalog  # noqa: PLC0415
    from mtrl.contracts.backend import BackendError  # noqa: PLC0415

    connection = connect(prefix=prefix, region=region, profile=profile, endpoint_url=endpoint_url, as_json=as_json)
    with remote_errors(connection.aws, as_json=as_json):
        try:
            return read_catalog(connection.client("ssm"), prefix)
        except BackendError as error:
            fail(str(error), code=EXIT_INVALID, as_json=as_json)
