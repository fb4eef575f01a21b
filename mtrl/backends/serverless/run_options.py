"""What a serverless run's manifest may set in ``backend_options``: the strict model over the one options table."""

from __future__ import annotations

from pydantic import model_validator

from mtrl.backends.serverless.options import option_problems
from mtrl.contracts.run_options import HyperValue, RunOptions


class ServerlessRunOptions(RunOptions):
    """SageMaker serverless MTRL per-run options. The names, ranges and sources are the one table in
    ``mtrl.backends.serverless.options.RUN_OPTIONS``; this model adds strict types and refuses unknown keys,
    and its validator applies that table (so a range lives in one place)."""

    agent_runtime_arn: str | None = None
    agent_qualifier: str | None = None
    reasoning_effort: str | None = None
    intermediate_checkpoints: bool | None = None
    notifications: str | None = None
    eval_group_size: int | None = None
    eval_pass_k: list[int] | None = None
    eval_max_runtime_seconds: int | None = None
    eval_hyperparameters: dict[str, HyperValue] | None = None

    @model_validator(mode="after")
    def _documented_ranges(self) -> ServerlessRunOptions:
        problems = option_problems(self.model_dump(exclude_none=True))
        if problems:
            raise ValueError("; ".join(problems))
        return self
