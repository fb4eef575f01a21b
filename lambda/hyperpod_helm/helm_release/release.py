"""What one custom-resource event does to its Helm release (``apply``).

Create and Update run ``helm upgrade --install`` (a retry after a partial install converges instead of failing on
"cannot re-use a name"); a release left in a pending state by an interrupted run is rolled back or removed first.
Delete runs ``helm uninstall`` and succeeds when the release or the cluster is gone.

HyperPod chart: only the dependencies the deployment installs stay in its Chart.yaml (``Dependencies``), so
``helm dependency update`` downloads nothing for a disabled component. With a restricted instance group
(``RestrictedGroups``) the RIG dependencies follow (``helm_release.rig_dependencies``). An Update refuses to run
while a run holds the cluster (``helm_release.run_guard``).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import boto3

from helm_release.chart_source import prepare_chart
from helm_release.commands import (
    HELM,
    RESPONSE_MARGIN_S,
    apply_crds,
    helm_env,
    make_runner,
    recover_pending_release,
    upgrade_install_command,
)
from helm_release.rig_dependencies import install_rig_dependencies
from helm_release.run_guard import refuse_while_runs_hold_the_cluster
from mtrl.kube.token import eks_token

LOGGER = logging.getLogger()


def apply(event: Mapping[str, Any], remaining_s: Callable[[], float]) -> tuple[str, dict[str, str]]:
    """Do what the event asks; returns (physical id, data)."""
    props = event["ResourceProperties"]
    cluster, release, namespace = props["ClusterName"], props["Release"], props["Namespace"]
    region = props.get("Region") or os.environ.get("AWS_REGION", "us-east-1")
    physical_id = f"{cluster}/{namespace}/{release}"
    eks = boto3.client("eks", region_name=region)
    try:
        described = eks.describe_cluster(name=cluster)["cluster"]
    except eks.exceptions.ResourceNotFoundException:
        if event["RequestType"] == "Delete":
            return event.get("PhysicalResourceId", physical_id), {}
        raise

    workdir = Path(tempfile.mkdtemp(prefix="helm-", dir="/tmp"))
    try:
        ca_file = workdir / "ca.crt"
        ca_file.write_bytes(base64.b64decode(described["certificateAuthority"]["data"]))
        run = make_runner(
            endpoint=described["endpoint"],
            token=eks_token(cluster, region),
            ca_file=str(ca_file),
            env=helm_env(workdir),
            seconds_left=remaining_s,
        )
        if event["RequestType"] == "Delete":
            run([HELM, "uninstall", release, "--namespace", namespace, "--ignore-not-found"])
            return event.get("PhysicalResourceId", physical_id), {}
        if event["RequestType"] == "Update":
            refuse_while_runs_hold_the_cluster(props, region, time.time())

        chart_dir = prepare_chart(props, workdir, run)
        crds_first = str(props.get("ApplyCrds", "false")).lower() == "true"
        if crds_first:
            apply_crds(run, chart_dir)
        recovered = recover_pending_release(run, release=release, namespace=namespace)
        if recovered:
            LOGGER.info("%s", recovered)
        values = json.loads(props["Values"]) if isinstance(props["Values"], str) else dict(props["Values"])
        run(
            upgrade_install_command(
                release=release,
                namespace=namespace,
                chart_dir=str(chart_dir),
                values=values,
                timeout_s=int(remaining_s() - 2 * RESPONSE_MARGIN_S),
                skip_crds=crds_first,
            )
        )
        if str(props.get("RestrictedGroups", "false")).lower() == "true":
            LOGGER.info(
                "RIG dependencies: %s", install_rig_dependencies(run, release=release, region=region, workdir=workdir)
            )
        return physical_id, {
            "Release": release,
            "Namespace": namespace,
            "ChartRevision": props.get("ChartRevision", ""),
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
