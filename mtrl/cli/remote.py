"""Options and error handling shared by the commands that talk to a deployed mtrl (submit, runs, status, ...)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from botocore.exceptions import BotoCoreError, ClientError

from mtrl.cli.output import EXIT_INVALID, EXIT_USAGE, fail
from mtrl.client import runs as client_runs
from mtrl.client.deployment import Aws, Deployment, DeploymentError, Target, discover, error_code, translated_errors
from mtrl.runs.registry import RunNotFound, RunRegistry

PrefixOption = Annotated[
    str, typer.Option("--prefix", help="Deployment prefix: the stacks are <prefix>-data and <prefix>-pipeline.")
]
RegionOption = Annotated[
    str | None,
    typer.Option(
        "--region",
        help="AWS region of the deployment (default: AWS_REGION, then AWS_DEFAULT_REGION, then your profile's).",
    ),
]
ProfileOption = Annotated[str | None, typer.Option("--profile", help="AWS profile to use (default: AWS_PROFILE).")]
EndpointOption = Annotated[
    str | None,
    typer.Option(
        "--endpoint-url", help="Send every AWS call here (e.g. the embedded emulator, http://127.0.0.1:PORT)."
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


@dataclass(frozen=True)
class Connection:
    aws: Aws
    deployment: Deployment

    def client(self, service: str) -> Any:
        return self.aws.client(service)

    def registry(self) -> RunRegistry:
        """The deployment's run table."""
        return client_runs.registry(self.client("dynamodb"), self.deployment)


@contextmanager
def remote_errors(aws: Aws | None, *, as_json: bool) -> Iterator[None]:
    """Map what can go wrong talking to AWS onto messages that say what to do, and onto the exit codes."""
    try:
        if aws is None:
            yield
        else:
            with translated_errors(aws):
                yield
    except DeploymentError as error:
        fail(str(error), code=EXIT_USAGE, as_json=as_json)
    except RunNotFound as error:
        fail(f"{error}: `mtrl runs` lists the runs of this deployment", code=EXIT_USAGE, as_json=as_json)
    except ClientError as error:
        message = error.response.get("Error", {}).get("Message", "")
        operation = getattr(error, "operation_name", "the AWS call")
        fail(f"{operation} failed: {error_code(error)}: {message}", code=EXIT_INVALID, as_json=as_json)
    except BotoCoreError as error:
        fail(f"AWS call failed: {error}", code=EXIT_INVALID, as_json=as_json)


def connect(
    *, prefix: str, region: str | None, profile: str | None, endpoint_url: str | None, as_json: bool
) -> Connection:
    """Find the deployment (DescribeStacks on <prefix>-data / <prefix>-pipeline) or exit with why not."""
    aws: Aws | None = None
    with remote_errors(None, as_json=as_json):
        aws = Aws(Target(region=region, profile=profile, endpoint_url=endpoint_url))
    assert aws is not None  # remote_errors exits otherwise
    with remote_errors(aws, as_json=as_json):
        return Connection(aws, discover(aws, prefix))
    raise AssertionError("unreachable")  # pragma: no cover - remote_errors exits on every error
