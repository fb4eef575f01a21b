"""The deploy helpers that need no emulator: asset packaging, stack ordering, refusals (moto stands in for S3)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import boto3
import pytest

from mtrl.emulator.deploy import (
    DeployError,
    assets_bucket_name,
    fake_bootstrap,
    publish_assets,
    stack_order,
    zip_directory,
)


@pytest.fixture
def session(mocked_aws: None) -> Any:
    return boto3.Session(region_name="us-east-1")


def _manifest(out: Path, artifacts: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").write_text(json.dumps({"version": "55.0.0", "artifacts": artifacts}))


def _stack(*dependencies: str) -> dict[str, Any]:
    return {"type": "aws:cloudformation:stack", "properties": {}, "dependencies": list(dependencies)}


def test_zip_is_deterministic_and_keeps_modes(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "a.py").write_text("A = 1\n")
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / "run.sh").chmod(0o755)
    first = zip_directory(source)
    (source / "pkg" / "a.py").touch()  # a new mtime must not change the archive
    assert zip_directory(source) == first
    with zipfile.ZipFile(io.BytesIO(first)) as archive:
        assert archive.namelist() == ["pkg/a.py", "run.sh"]
        assert (archive.getinfo("run.sh").external_attr >> 16) & 0o777 == 0o755


def test_stacks_come_dependencies_first(tmp_path: Path) -> None:
    _manifest(
        tmp_path,
        {
            "app-pipeline": _stack("app-data", "app-pipeline.assets"),
            "app-data": _stack("app-data.assets"),
            "app-network": _stack("app-data"),
            "app-pipeline.assets": {"type": "cdk:asset-manifest"},
        },
    )
    assert [a for a, _ in stack_order(tmp_path)] == ["app-data", "app-network", "app-pipeline"]
    assert [a for a, _ in stack_order(tmp_path, ["app-pipeline"])] == ["app-data", "app-pipeline"]
    with pytest.raises(DeployError, match="no stack artifact named"):
        stack_order(tmp_path, ["app-cluster"])
    _manifest(tmp_path, {"a": _stack("b"), "b": _stack("a")})
    with pytest.raises(DeployError, match="cycle"):
        stack_order(tmp_path)


def test_assets_go_where_the_template_expects_them(tmp_path: Path, session: Any) -> None:
    bucket = fake_bootstrap(session)
    assert bucket == assets_bucket_name()
    (tmp_path / "asset.abc").mkdir()
    (tmp_path / "asset.abc" / "index.py").write_text("x = 1\n")
    (tmp_path / "app.template.json").write_text("{}")
    destination = {"bucketName": "cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}"}
    (tmp_path / "app.assets.json").write_text(
        json.dumps(
            {
                "files": {
                    "abc": {
                        "source": {"path": "asset.abc", "packaging": "zip"},
                        "destinations": {"d": {**destination, "objectKey": "abc.zip"}},
                    },
                    "tpl": {
                        "source": {"path": "app.template.json", "packaging": "file"},
                        "destinations": {"d": {**destination, "objectKey": "tpl.json"}},
                    },
                }
            }
        )
    )
    assert publish_assets(session, tmp_path, "app") == 2
    s3 = session.client("s3")
    archive = zipfile.ZipFile(io.BytesIO(s3.get_object(Bucket=bucket, Key="abc.zip")["Body"].read()))
    assert archive.read("index.py") == b"x = 1\n"
    assert s3.get_object(Bucket=bucket, Key="tpl.json")["Body"].read() == b"{}"


def test_image_assets_are_refused_with_the_way_out(tmp_path: Path, session: Any) -> None:
    (tmp_path / "app.assets.json").write_text(
        json.dumps({"files": {}, "dockerImages": {"x": {"displayName": "worker"}}})
    )
    with pytest.raises(DeployError, match=r"container image assets \(worker\).*emulator=true"):
        publish_assets(session, tmp_path, "app")
