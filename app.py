#!/usr/bin/env python3
"""CDK entry point: `npx cdk synth` (offline) / `npx cdk deploy --all`."""

from __future__ import annotations

import sys

import aws_cdk as cdk

from mtrl.settings import SettingsError
from stacks.app_builder import build_deployment, settings_from_app


def main() -> None:
    app = cdk.App()
    try:
        settings = settings_from_app(app)
        build_deployment(app, settings)  # checks a custom environment first: its problems are settings errors
    except SettingsError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    app.synth()


if __name__ == "__main__":
    main()
