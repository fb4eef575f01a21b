"""The hyperpod adapter tests' fixtures: one moto world per test module, a fresh cluster and run per test."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from aws_fakes import create_task_network, moto_ecs_tasks, new_session
from moto import mock_aws

from tests.aws_fixtures import fake_credentials_in_environ
from tests.unit.backends.hyperpod.hyperpod_world import BUCKET, Shared, World


@pytest.fixture(scope="module")
def shared() -> Iterator[Shared]:
    # One moto world for each test module (no monkeypatch at this scope), each test on its own cluster and run id.
    with fake_credentials_in_environ(), moto_ecs_tasks(), mock_aws():
        session = new_session()
        session.client("s3").create_bucket(Bucket=BUCKET)
        # The deploy-time worker policies (stacks/constructs/reward_workers.py): the run roles' boundary and base.
        iam = session.client("iam")
        statement = {"Effect": "Allow", "Action": "sqs:*", "Resource": "*"}
        document = json.dumps({"Version": "2012-10-17", "Statement": [statement]})
        boundary = iam.create_policy(PolicyName="mtrl-reward-worker-run-boundary", PolicyDocument=document)
        base = iam.create_policy(PolicyName="mtrl-reward-worker-base", PolicyDocument=document)
        yield Shared(
            *create_task_network(session, cluster_name="mtrl-rewards", worker_container="worker"),
            worker_boundary=boundary["Policy"]["Arn"],
            worker_base_policy=base["Policy"]["Arn"],
        )


@pytest.fixture
def world(shared: Shared) -> World:
    return World(shared)


@pytest.fixture
def rig_world(shared: Shared) -> World:
    """A cluster whose GPU group is a restricted instance group, as Nova Forge requires."""
    return World(shared, restricted=True)
