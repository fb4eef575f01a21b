"""`mtrl cost --at-rest`: what the deployment the settings describe costs a month while no run is active.

The templates are the app's own: ``app.py`` is synthesized offline (no credentials, no Docker) with cdk.json's
context and the ``-c`` overrides, exactly as `npx cdk synth` runs it, and ``mtrl.cost.at_rest`` prices each resource.
(The runtime never imports the CDK app, so the synth runs as its own process.) ``--templates`` prices an existing
``cdk.out`` instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mtrl.cli.output import EXIT_USAGE, fail, print_json
from mtrl.cost import CostError, CostEstimate, load_price_book
from mtrl.cost.at_rest import at_rest_cost
from mtrl.settings import SettingsError, load_settings, parse_overrides, read_cdk_json_context

SYNTH_TIMEOUT_S = 600


def show_at_rest_cost(
    *,
    overrides: list[str],
    cdk_json: Path,
    region: str | None,
    templates_dir: Path | None,
    as_json: bool,
    print_table: Callable[[CostEstimate], None],
) -> None:
    try:
        context = {**read_cdk_json_context(cdk_json), **parse_overrides(overrides)}
        if region is not None:
            context["region"] = region
        settings = load_settings(context, environ=os.environ)
    except SettingsError as error:
        fail(str(error), as_json=as_json)
    priced_region = str(settings.region) if settings.region else None
    if priced_region is None:
        fail("give --region or set 'region' (the at-rest prices differ per region)", code=EXIT_USAGE, as_json=as_json)
    try:
        book = load_price_book()
        templates = (
            read_templates(templates_dir)
            if templates_dir is not None
            else synthesize(cdk_json.parent if cdk_json.parent != Path() else Path.cwd(), context)
        )
        estimate = at_rest_cost(templates, region=priced_region, book=book)
    except CostError as error:
        fail(str(error), code=EXIT_USAGE, as_json=as_json)
    if as_json:
        print_json({"region": priced_region, "stacks": sorted(templates), "per": "month", **estimate.to_dict()})
        return
    print_table(estimate)


def synthesize(project: Path, context: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The app's templates (stack name → template), synthesized offline with ``context`` as its CDK context."""
    app = project / "app.py"
    if not app.is_file():
        raise CostError(f"no CDK app at {app}: run from the project root or pass --cdk-json, or price --templates DIR")
    with tempfile.TemporaryDirectory(prefix="mtrl-at-rest-") as outdir:
        environ = {**os.environ, "CDK_OUTDIR": outdir, "CDK_CONTEXT_JSON": json.dumps(dict(context))}
        try:
            completed = subprocess.run(
                [sys.executable, str(app)],
                cwd=project,
                env=environ,
                capture_output=True,
                text=True,
                timeout=SYNTH_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            raise CostError(f"the synth of {app} took longer than {SYNTH_TIMEOUT_S} s") from error
        if completed.returncode != 0:
            tail = "\n".join(completed.stderr.strip().splitlines()[-15:])
            raise CostError(f"the synth of {app} failed (exit {completed.returncode}):\n{tail}")
        return read_templates(Path(outdir))


def read_templates(directory: Path) -> dict[str, dict[str, Any]]:
    """Every ``<stack>.template.json`` of a cloud assembly (a ``cdk.out`` folder)."""
    files = sorted(directory.glob("*.template.json"))
    if not files:
        raise CostError(f"no *.template.json in {directory} (is it a cdk.out folder?)")
    templates: dict[str, dict[str, Any]] = {}
    for path in files:
        try:
            templates[path.name.removesuffix(".template.json")] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            raise CostError(f"template {path} is unreadable: {error}") from error
    return templates
