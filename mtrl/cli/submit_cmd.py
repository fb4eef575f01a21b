"""`mtrl submit FILE`: validate locally, upload manifest then dataset, print the run id, optionally watch it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from mtrl.cli.output import EXIT_INVALID, console, error_console, fail, print_json
from mtrl.cli.remote import (
    Connection,
    EndpointOption,
    JsonOption,
    PrefixOption,
    ProfileOption,
    RegionOption,
    connect,
    remote_errors,
)
from mtrl.cli.runs_cmd import IntervalOption, watch_run
from mtrl.runs.ids import manifest_key_for

if TYPE_CHECKING:
    from mtrl.client import submit as client_submit
    from mtrl.settings.pipeline import PipelineSettings


def submit(
    file: Annotated[Path, typer.Argument(help="The JSONL dataset to train on (uploaded as training-data/<name>).")],
    *,
    manifest: Annotated[
        Path | None,
        typer.Option("--manifest", help="Per-run settings (JSON, see docs/pipeline.md); uploaded before the dataset."),
    ] = None,
    eval_file: Annotated[
        Path | None,
        typer.Option(
            "--eval-file", help="Local evaluation JSONL for the manifest's eval_dataset key (uploaded there)."
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="Object name under training-data/ (default: the file's name).")
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch", help="Follow the run until it is final (as status --watch).")
    ] = False,
    interval: IntervalOption = 5.0,
    prefix: PrefixOption = "mtrl",
    region: RegionOption = None,
    profile: ProfileOption = None,
    endpoint_url: EndpointOption = None,
    as_json: JsonOption = False,
) -> None:
    """Start a training run: validate FILE locally (the pipeline's validator, with the manifest's environment
    and eval split), refuse it with line-numbered errors if invalid (exit 1, nothing uploaded), else upload
    the manifest and then the dataset and print the run id.

    With --watch the exit code is the run's outcome (0 succeeded, 1 failed/cancelled)."""
    # The client loads the manifest's settings models and boto3: here, so `mtrl submit --help` starts fast.
    from mtrl.cli.validate_cmd import deployment_defaults  # noqa: PLC0415
    from mtrl.client import submit as client_submit  # noqa: PLC0415
    from mtrl.client.submit import SubmitError  # noqa: PLC0415

    for path in (file, manifest, eval_file):
        if path is not None and not path.is_file():
            fail(f"{path}: no such file", as_json=as_json)
    try:
        key = client_submit.dataset_key(file, name)
        document = client_submit.read_manifest(manifest) if manifest is not None else None
    except SubmitError as error:
        fail(str(error), as_json=as_json)
    source = str(manifest) if manifest is not None else None
    # The settings a run starts from: this checkout's deployment (cdk.json), as `mtrl validate` reads them.
    defaults = deployment_defaults(as_json=as_json)
    # Local first: invalid data is refused without credentials or a deployment.
    checked = _check(file, document, source, eval_file, defaults, as_json=as_json)
    connection = connect(prefix=prefix, region=region, profile=profile, endpoint_url=endpoint_url, as_json=as_json)
    _warn_what_the_backend_lacks(connection, checked.settings.backend, as_json=as_json)
    s3 = connection.client("s3")
    if document is None:
        remote = _remote_manifest(connection, key, as_json=as_json)
        if remote is not None:  # the trigger will use it, so the data must pass with its settings too
            source = f"s3://{connection.deployment.bucket}/{manifest_key_for(key)}"
            if not as_json:
                error_console.print(
                    f"using the manifest already at {source} (pass --manifest to replace it)", highlight=False
                )
            checked = _check(file, remote, source, eval_file, defaults, as_json=as_json)
    if not as_json:
        console.print(
            f"{checked.report.summary()} (rows checked as environment '{checked.settings.environment}')",
            highlight=False,
            soft_wrap=True,
        )
    with (
        remote_errors(connection.aws, as_json=as_json),
        Progress(
            TextColumn("uploading {task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=error_console,  # keeps stdout clean for the run id / JSON
            disable=as_json,
        ) as progress,
    ):
        task = progress.add_task(key, total=file.stat().st_size)
        submitted = client_submit.upload(
            s3,
            connection.deployment,
            file,
            key=key,
            manifest=document,  # None: an existing remote manifest stays as it is
            eval_file=eval_file,
            eval_key=checked.settings.eval_dataset,
            progress=lambda sent: progress.advance(task, sent),
        )
    if as_json and not watch:
        print_json({"valid": True, "uploaded": True, **submitted.to_dict()})
        return
    if not as_json:
        console.print(f"run id: [bold]{submitted.run_id}[/]", highlight=False)
        if not watch:  # when watching, the command follows it already (and an emulator may be gone afterwards)
            console.print(f"follow it with: mtrl status {submitted.run_id} --watch", highlight=False)
    if watch:
        raise typer.Exit(
            watch_run(
                connection,
                submitted.run_id,
                interval=interval,
                as_json=as_json,
                upload=(submitted.key, submitted.version_id),
            )
        )


def _check(
    file: Path,
    document: dict[str, Any] | None,
    source: str | None,
    eval_file: Path | None,
    defaults: PipelineSettings,
    *,
    as_json: bool,
) -> client_submit.Checked:
    """Validate, or exit: 2 for an unusable manifest, 1 (with line-numbered errors) for invalid data."""
    from mtrl.client import submit as client_submit  # noqa: PLC0415
    from mtrl.client.submit import SubmitError  # noqa: PLC0415

    try:
        checked = client_submit.check(file, document, manifest_source=source, eval_file=eval_file, defaults=defaults)
    except SubmitError as error:
        fail(str(error), as_json=as_json)
    if checked.valid:
        return checked
    if as_json:
        print_json(
            {
                "valid": False,
                "uploaded": False,
                "train": checked.report.to_dict(),
                "eval": checked.eval_report.to_dict() if checked.eval_report else None,
            }
        )
    else:
        for report in (checked.eval_report, checked.report):
            if report is not None and not report.valid:
                from mtrl.cli.validate_cmd import print_report  # noqa: PLC0415 (`mtrl validate`'s rendering)

                print_report(report, to=error_console)  # stdout holds only the run id (or JSON)
        error_console.print("nothing was uploaded", highlight=False)
    raise typer.Exit(EXIT_INVALID)


def _remote_manifest(connection: Connection, key: str, *, as_json: bool) -> dict[str, Any] | None:
    from mtrl.client import submit as client_submit  # noqa: PLC0415
    from mtrl.client.submit import SubmitError  # noqa: PLC0415

    with remote_errors(connection.aws, as_json=as_json):
        try:
            return client_submit.remote_manifest(connection.client("s3"), connection.deployment.bucket, key)
        except SubmitError as error:
            fail(str(error), as_json=as_json)
    raise AssertionError("unreachable")  # pragma: no cover - remote_errors exits on every error


def _warn_what_the_backend_lacks(connection: Connection, backend: str, *, as_json: bool) -> None:
    """Say, before anything is uploaded, what the run's backend still lacks in this deployment (this checkout's
    settings and what the deployment registered: mtrl image build, mtrl model import), naming the command that
    supplies it. A warning: Preflight refuses such a run before any GPU is touched."""
    from rich.markup import escape  # noqa: PLC0415

    from mtrl.cli.validate_cmd import deployment_settings  # noqa: PLC0415
    from mtrl.contracts.backend import BackendError  # noqa: PLC0415

    settings = deployment_settings(as_json=as_json).model_copy(update={"run_backend": backend})
    with remote_errors(connection.aws, as_json=as_json):
        try:
            warning = settings.default_backend_warning(connection.client("ssm"), subject="this run's backend")
        except BackendError as error:  # the catalog is unreadable: Preflight reads it again and says why
            warning = None
            if not as_json:
                error_console.print(f"note: could not check what the deployment registered ({error})", markup=False)
    if warning and not as_json:
        error_console.print(
            f"[bold yellow]warning:[/] {escape(warning)}; Preflight will refuse the run (before any GPU is used)",
            highlight=False,
            soft_wrap=True,
        )
