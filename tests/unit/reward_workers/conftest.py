"""Reward-worker stack fixtures (from the session's default synth)."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Template

from stacks.app_builder import Deployment


@pytest.fixture(scope="session")
def workers_template(deployment: Deployment) -> Template:
    return Template.from_stack(deployment.reward_workers)


@pytest.fixture(scope="session")
def workers_json(workers_template: Template) -> dict[str, Any]:
    return workers_template.to_json()
