"""The source archive `mtrl image build` and `mtrl model import` upload: exactly what the Dockerfile copies (read from
the Dockerfile itself), the same bytes for the same files, no caches; a path that is not there is named."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from mtrl.backends.verl.catalog import image_parameter
from mtrl.backends.verl.supply import IMAGE_DOCKERFILE
from mtrl.client.builders import (
    MODEL_SOURCE,
    BuildError,
    build_image,
    dockerfile_sources,
    import_hub_model,
    import_local_model,
    source_archive,
)
from mtrl.client.deployment import Deployment
from tests.aws_fixtures import REGION

REPO = Path(__file__).resolve().parents[3]


def test_the_image_archive_holds_the_dockerfile_and_every_copy_source() -> None:
    sources = dockerfile_sources(REPO)
    assert sources[0] == IMAGE_DOCKERFILE
    assert {"requirements/verl-trainer.txt", "pyproject.toml", "mtrl/", "environments/", "benchmarks/device/"} <= set(
        sources
    )
    names = zipfile.ZipFile(io.BytesIO(source_archive(REPO, sources))).namelist()
    assert IMAGE_DOCKERFILE in names
    assert "mtrl/backends/verl/train.py" in names
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)
    assert not any(name.startswith(("tests/", "stacks/", ".venv")) for name in names)  # nothing the image does not copy


def test_the_same_tree_makes_the_same_archive(tmp_path: Path) -> None:
    (tmp_path / "mtrl" / "__pycache__").mkdir(parents=True)
    (tmp_path / "mtrl" / "a.py").write_text("a = 1\n")
    (tmp_path / "mtrl" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"cache")
    first = source_archive(tmp_path, MODEL_SOURCE)
    (tmp_path / "mtrl" / "a.py").touch()  # a new modification time changes nothing
    assert source_archive(tmp_path, MODEL_SOURCE) == first
    assert zipfile.ZipFile(io.BytesIO(first)).namelist() == ["mtrl/a.py"]


def test_a_missing_path_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"mtrl is not in .*source checkout"):
        source_archive(tmp_path, MODEL_SOURCE)


class _Aws:
    """What the builders take: ``client(service)``, here boto3 against moto."""

    def client(self, service: str) -> Any:
        return boto3.client(service, region_name=REGION)


@pytest.mark.parametrize("prefix", ["aws-team", "awsml", "ssm-x", "AWS-x"])
def test_a_prefix_ssm_reserves_is_refused_before_any_build_or_upload(
    mocked_aws: None, tmp_path: Path, prefix: str
) -> None:
    """SSM refuses parameter names prefixed with 'aws' or 'ssm' (PutParameter, Name; moto answers the same), and the
    catalog's names start with the prefix: before, a build ran for hours, or a copy was uploaded, and only the final
    record failed. Now nothing starts."""
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="data")
    deployment = Deployment(prefix, REGION, "data", "table", "arn:sm", "arn:topic")
    with pytest.raises(ClientError):  # what the final record would have hit
        boto3.client("ssm", region_name=REGION).put_parameter(Name=image_parameter(prefix), Value="{}", Type="String")
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "config.json").write_text("{}")
    attempts: list[Callable[[], object]] = [
        lambda: build_image(_Aws(), deployment, REPO),
        lambda: import_hub_model(_Aws(), deployment, REPO, "Qwen/x", None),
        lambda: import_local_model(_Aws(), deployment, tmp_path / "copy", "Qwen/x", None),
    ]
    for attempt in attempts:
        with pytest.raises(BuildError, match=f"prefix '{prefix}' starts with 'aws' or 'ssm'"):
            attempt()
    assert s3.list_objects_v2(Bucket="data").get("KeyCount", 0) == 0


@pytest.mark.parametrize("target", ["secret", "outside/dir/secret", "../secret"])
def test_a_link_out_of_the_checkout_is_never_archived(tmp_path: Path, target: str) -> None:
    """The archive holds what a link points to: before, a link under mtrl/ to a credentials file outside the checkout
    was uploaded to the bucket and built into the trainer image."""
    root, outside = tmp_path / "checkout", tmp_path / "elsewhere"
    (root / "mtrl" / "sub").mkdir(parents=True)
    (root / "mtrl" / "a.py").write_text("a = 1\n")
    secret = (outside / target).resolve() if not target.startswith("..") else (root / target).resolve()
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text("aws_secret_access_key = x\n")
    (root / "mtrl" / "sub" / "credentials").symlink_to(secret)
    with pytest.raises(BuildError, match=r"mtrl/sub/credentials is a symbolic link out of the checkout"):
        source_archive(root, MODEL_SOURCE)
    (root / "mtrl" / "sub" / "credentials").unlink()
    (root / "mtrl" / "sub" / "alias.py").symlink_to(root / "mtrl" / "a.py")  # a link inside the checkout is fine
    names = zipfile.ZipFile(io.BytesIO(source_archive(root, MODEL_SOURCE))).namelist()
    assert names == ["mtrl/a.py", "mtrl/sub/alias.py"]
