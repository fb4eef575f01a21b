"""`mtrl render`: the Kubernetes objects a run would submit, offline, with this deployment's settings."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mtrl.cli.output import fail, print_json

if TYPE_CHECKING:
    from mtrl.runs.manifest import RunSettings


def render(
    *,
    manifest: Annotated[Path, typer.Option("--manifest", help="The run manifest (<name>.run.json) to render.")],
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="The run id (default: one made from the manifest's name and now).")
    ] = None,
    context: Annotated[
        list[str] | None,
        typer.Option("-c", "--context", help="Override a setting, as with `cdk synth -c key=value` (repeatable)."),
    ] = None,
    cdk_json: Annotated[Path, typer.Option(help="The cdk.json whose context block holds the settings.")] = Path(
        "cdk.json"
    ),
    data_bucket: Annotated[
        str, typer.Option(help="The data bucket's name, when you know it (CDK names it at deploy time).")
    ] = "DATA-BUCKET",
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list of objects instead of YAML.")] = False,
) -> None:
    """Print, offline, the Kubernetes objects a run of MANIFEST would submit (as `helm template` does)."""
    # Imported here: the command line starts fast for every other command.
    from mtrl.contracts.backend import BackendError, RunContext  # noqa: PLC0415
    from mtrl.contracts.errors import ConfigurationError  # noqa: PLC0415
    from mtrl.envs import deployment_environment_problems, served_environment_problem  # noqa: PLC0415
    from mtrl.runs.adapters import renderer_for  # noqa: PLC0415
    from mtrl.runs.ids import RUN_ID_PATTERN, derive_run_id  # noqa: PLC0415
    from mtrl.runs.manifest import parse_manifest, resolve_run_settings  # noqa: PLC0415
    from mtrl.settings import SettingsError, load_settings, parse_overrides, read_cdk_json_context  # noqa: PLC0415

    try:
        settings = load_settings(
            {**read_cdk_json_context(cdk_json), **parse_overrides(context or [])}, environ=os.environ
        )
        problems = deployment_environment_problems(  # what synth refuses, refused here too
            run_environment=settings.run_environment,
            use_custom_env=settings.use_custom_env,
            custom_env_id=settings.custom_env_id,
        )
        if problems:
            raise SettingsError(problems)
    except SettingsError as error:
        fail(str(error), as_json=as_json)
    try:
        text = manifest.read_bytes()
    except OSError as error:
        fail(f"manifest {manifest}: {error.strerror or error}", as_json=as_json)
    stem = manifest.name.removesuffix(".json").removesuffix(".run")
    dataset_key = f"training-data/{stem}.jsonl"
    if run_id is None:
        run_id = derive_run_id(bucket=data_bucket, key=dataset_key, version_id=None, created=datetime.now(UTC))
    elif not RUN_ID_PATTERN.match(run_id):
        fail(f"--run-id {run_id!r} is not a run id (as `mtrl runs` shows them)", as_json=as_json)
    try:
        run_settings = resolve_run_settings(settings, parse_manifest(text, source=str(manifest)), source=str(manifest))
        # The deployment serves the built-ins and its own custom environment only (what synth checks of
        # run_environment); Register would accept another id, and the run fail on the workers.
        unserved = served_environment_problem(
            run_settings.environment,
            key="key 'environment'",
            use_custom_env=settings.use_custom_env,
            custom_env_id=settings.custom_env_id,
        )
        if unserved:
            raise ConfigurationError(f"{manifest}: {unserved}")
        renderer = renderer_for(run_settings.backend)
        if renderer is None:
            raise ConfigurationError(
                f"{manifest}: backend '{run_settings.backend}' submits no Kubernetes objects (nothing to render)"
            )
        dataset_uri, eval_dataset_uri = _data_uris(data_bucket, run_id, run_settings)
        run = RunContext(
            run_id=run_id,
            settings={},  # the renderer computes them from the deployment's settings
            dataset_uri=dataset_uri,
            eval_dataset_uri=eval_dataset_uri,
            output_uri=f"s3://{data_bucket}/runs/{run_id}/",
        )
        objects = renderer(settings, run_settings, run)
    except (ConfigurationError, BackendError) as error:
        fail(str(error), as_json=as_json)
    if as_json:
        print_json(objects)
        return
    from mtrl.cli.yaml_text import dump_documents  # noqa: PLC0415

    typer.echo(dump_documents(objects), nl=False)


def _data_uris(data_bucket: str, run_id: str, run_settings: RunSettings) -> tuple[str, str | None]:
    """The data a run trains and evaluates on, as Validate resolves it (mtrl.runs.phases.inputs.data_inputs): with
    eval_split, the training and held-out files it writes under the run's prefix; else its copies of the upload and of
    the eval_dataset if one is named (the bytes it validated, never the uploaded keys)."""
    from mtrl.runs.phases.inputs import validated_keys  # noqa: PLC0415
    from mtrl.runs.pipeline import split_keys  # noqa: PLC0415

    if run_settings.eval_split > 0 and not run_settings.eval_dataset:
        train_key, eval_key = split_keys(run_id)
        return f"s3://{data_bucket}/{train_key}", f"s3://{data_bucket}/{eval_key}"
    copied, eval_copied = validated_keys(run_id)
    eval_uri = f"s3://{data_bucket}/{eval_copied}" if run_settings.eval_dataset else None
    return f"s3://{data_bucket}/{copied}", eval_uri
