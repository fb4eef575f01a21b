"""Reward-worker settings: the Fargate tasks that run environment code and score episodes."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator

from mtrl.settings.base import SettingsGroup

# Fargate's valid memory sizes (MiB) for each task CPU size (vCPU units).
FARGATE_MEMORY_MIB: dict[int, tuple[int, ...]] = {
    256: (512, 1024, 2048),
    512: tuple(range(1024, 4096 + 1, 1024)),
    1024: tuple(range(2048, 8192 + 1, 1024)),
    2048: tuple(range(4096, 16384 + 1, 1024)),
    4096: tuple(range(8192, 30720 + 1, 1024)),
    8192: tuple(range(16384, 61440 + 1, 4096)),
    16384: tuple(range(32768, 122880 + 1, 8192)),
}


class RewardWorkerSettings(SettingsGroup):
    """ECS Fargate reward workers: task size, per-run scaling limits and what they may read."""

    reward_worker_cpu: Literal[256, 512, 1024, 2048, 4096, 8192, 16384] = Field(
        1024, description="Fargate task CPU units per reward worker (1024 = 1 vCPU)."
    )
    reward_worker_memory_mib: int = Field(
        2048, ge=512, description="Fargate task memory per reward worker, in MiB (must be valid for the CPU size)."
    )
    reward_worker_max_workers: int = Field(
        4,
        ge=1,
        le=64,
        description="Episodes one task scores in parallel (worker processes inside the task).",
    )
    reward_worker_max_tasks: int = Field(
        10,
        ge=1,
        le=100,
        description="Most reward-worker tasks one run may scale the service to (cost and quota ceiling; the service "
        "idles at 0 between runs).",
    )
    reward_worker_architecture: Literal["x86_64", "arm64"] = Field(
        "x86_64", description="CPU architecture of the worker image and Fargate task (arm64 is cheaper per vCPU)."
    )
    reward_worker_environment_prefix: str = Field(
        "environments/",
        pattern=r"^[a-z0-9][a-z0-9_\-/]*/$",
        description="Data-bucket prefix the workers may read environment packages from (nothing else is readable).",
    )

    @model_validator(mode="after")
    def _reward_worker_sizes_valid(self) -> Self:
        allowed = FARGATE_MEMORY_MIB[self.reward_worker_cpu]
        if self.reward_worker_memory_mib not in allowed:
            raise ValueError(
                f"reward_worker_memory_mib: {self.reward_worker_memory_mib} MiB is not valid with "
                f"{self.reward_worker_cpu} CPU units on Fargate (allowed: {allowed[0]}..{allowed[-1]} "
                f"in steps of {allowed[1] - allowed[0]})"
            )
        return self
