"""The pictures of a run's training health: reward and held-out success over the steps (``learning_curve``), for
the local trainer (``mtrl.local.report``) and a language-model try-out (``mtrl.llm.report``) alike.

matplotlib is imported on the first plot (``pyplot``), never by importing this module.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any


def pyplot() -> Any:
    """matplotlib's pyplot on the headless Agg backend, imported on the first plot (not by every `mtrl` start)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")  # headless: no display in Lambda, CI or the demo
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def learning_curve(
    *,
    steps: Sequence[int],
    rewards: Sequence[float],
    train_success: Sequence[float] | None,
    eval_steps: Sequence[int],
    eval_success: Sequence[float],
    title: str,
) -> bytes:
    """The learning-curve PNG (see ``learning_curve_figure``)."""
    figure = learning_curve_figure(
        steps=steps,
        rewards=rewards,
        train_success=train_success,
        eval_steps=eval_steps,
        eval_success=eval_success,
        title=title,
    )
    try:
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
        return buffer.getvalue()
    finally:
        pyplot().close(figure)


def learning_curve_figure(
    *,
    steps: Sequence[int],
    rewards: Sequence[float],
    train_success: Sequence[float] | None,
    eval_steps: Sequence[int],
    eval_success: Sequence[float],
    title: str,
) -> Any:
    """Integer step ticks, both y axes labelled, held-out success as points at the steps it was measured."""
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415 - (imported by pyplot() just before)

    figure, reward_axis = pyplot().subplots(figsize=(7.5, 4.2), dpi=110)
    reward_axis.plot(steps, rewards, "-", color="tab:blue", label="training reward (mean)")
    reward_axis.set_xlabel("GRPO step")
    reward_axis.set_ylabel("training reward (mean)", color="tab:blue")
    reward_axis.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    last = max([*steps, *eval_steps, 1])
    reward_axis.set_xlim(-0.3, last + 0.3)
    success_axis = reward_axis.twinx()
    if train_success is not None:
        success_axis.plot(steps, train_success, color="tab:orange", alpha=0.5, label="training success rate")
    # Held-out success exists only at the steps it was measured: points, not a line implying values in between.
    success_axis.plot(
        eval_steps, eval_success, "o", linestyle="none", color="tab:green", markersize=7, label="held-out success"
    )
    success_axis.set_ylabel("success rate (held-out: the environment's own criterion)")
    success_axis.set_ylim(-0.02, 1.02)
    handles = reward_axis.get_legend_handles_labels()[0] + success_axis.get_legend_handles_labels()[0]
    labels = reward_axis.get_legend_handles_labels()[1] + success_axis.get_legend_handles_labels()[1]
    success_axis.legend(handles, labels, loc="lower right", fontsize=8)
    reward_axis.set_title(title, fontsize=10)
    figure.tight_layout()
    return figure
