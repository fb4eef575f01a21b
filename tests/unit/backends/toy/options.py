"""The toy backend's per-run options: ``backend_options.steps`` (at most 5, the ceiling) and ``flavour``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mtrl.contracts.run_options import RunOptions

MAX_STEPS = 5


class ToyRunOptions(RunOptions):
    steps: int = Field(2, ge=1, le=MAX_STEPS)
    flavour: Literal["plain", "spicy"] = "plain"
