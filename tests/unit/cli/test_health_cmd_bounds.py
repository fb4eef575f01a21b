"""`mtrl health` on hostile signals files (issue 38 item 6): finite extremes, huge integers and huge files are
refused with a usage error naming the field, and whatever the rules compute is printed as standard JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mtrl.cli import app
from mtrl.cli.output import EXIT_USAGE
from mtrl.health.signals import MAX_SIGNAL_ROWS, standard_json

runner = CliRunner()
HEADER = {"planned_steps": 3, "group_size": 4}


def _file(tmp_path: Path, *rows: dict[str, Any], header: dict[str, Any] | None = None) -> Path:
    path = tmp_path / "signals.jsonl"
    lines = [json.dumps(header or HEADER)] + [json.dumps(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _strict(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"not standard JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("field", ["reward_mean", "reward_spread_mean", "mean_turns", "kl", "entropy"])
@pytest.mark.parametrize("value", [1e308, -1e308, 1.7976931348623157e308, 1e10])
def test_finite_extremes_are_refused_naming_the_field(tmp_path: Path, field: str, value: float) -> None:
    rows = [{"step": step, "reward_mean": 0.5, field: value} for step in (1, 2)]
    result = runner.invoke(app, ["health", str(_file(tmp_path, *rows)), "--json"])
    assert result.exit_code == EXIT_USAGE, result.output
    document = _strict(result.stdout)
    assert field in document["error"]
    assert "outside" in document["error"]


@pytest.mark.parametrize("where", ["step", "planned_steps", "group_size"])
@pytest.mark.parametrize("value", [10**300, 10**19, -(10**300)])
def test_huge_integers_are_a_usage_error_not_a_crash(tmp_path: Path, where: str, value: int) -> None:
    header = {**HEADER, where: value} if where != "step" else HEADER
    row = {"step": value} if where == "step" else {"step": 1}
    result = runner.invoke(app, ["health", str(_file(tmp_path, row, header=header)), "--json"])
    assert result.exit_code == EXIT_USAGE, result.output  # 1 would read as "warn"
    assert where in _strict(result.stdout)["error"]
    assert len(result.stdout) < 400  # the number is not echoed back


def test_a_file_of_too_many_rows_is_refused_without_evaluating(tmp_path: Path) -> None:
    path = tmp_path / "signals.jsonl"
    with path.open("w") as handle:
        handle.write(json.dumps(HEADER) + "\n")
        for step in range(1, MAX_SIGNAL_ROWS + 3):
            handle.write(f'{{"step":{step}}}\n')
    result = runner.invoke(app, ["health", str(path), "--json"])
    assert result.exit_code == EXIT_USAGE
    assert "rows; not read" in _strict(result.stdout)["error"]


def test_the_largest_accepted_values_evaluate_to_standard_json(tmp_path: Path) -> None:
    rows = [
        {"step": step, "reward_mean": (-1e9 if step % 2 else 1e9), "kl": 1e9, "mean_turns": 1e9} for step in (1, 2, 3)
    ]
    result = runner.invoke(app, ["health", str(_file(tmp_path, *rows)), "--json"])
    assert result.exit_code in {0, 1, 2, 3}
    _strict(result.stdout)  # no NaN, no Infinity


def test_standard_json_drops_every_non_finite_number() -> None:
    document = {"a": math.nan, "b": [math.inf, 1.0, {"c": -math.inf}], "d": (2.0, math.nan), "e": "nan"}
    assert standard_json(document) == {"a": None, "b": [None, 1.0, {"c": None}], "d": [2.0, None], "e": "nan"}
    json.dumps(standard_json(document), allow_nan=False)
