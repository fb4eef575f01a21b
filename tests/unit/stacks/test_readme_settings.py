"""README's configuration examples name only settings that exist (issue 11, "Also").

Parsed from README.md: every `-c key=value` in it, every `` `key=value` `` written inline, and the first column of
every table headed ``setting``; each name must be a field of the settings model (``DeploySettings``), a ``prefix_*``
pattern must match at least one, and every ``-c`` example must also validate.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mtrl.settings import DeploySettings, SettingsError, load_settings

README = Path(__file__).resolve().parents[3] / "README.md"
_NAME = r"[a-z][a-z0-9_]*\*?"


def cli_overrides(text: str) -> list[tuple[str, str]]:
    """(key, value) of every ``-c key=value`` (values may be quoted)."""
    return [(key, value.strip("'\"")) for key, value in re.findall(rf"-c\s+({_NAME})=('[^']*'|\"[^\"]*\"|\S+)", text)]


def inline_assignments(text: str) -> list[str]:
    return re.findall(rf"`({_NAME})=[^`\s]*`", text)


def table_settings(text: str) -> list[str]:
    """Backticked names in the first column of tables whose header's first cell is ``setting``."""
    names: list[str] = []
    in_table = False
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if not cells:
            in_table = False
            continue
        if cells[0].lower() == "setting":
            in_table = True
            continue
        if in_table and not set(cells[0]) <= {"-", ":"}:
            names += [name for name in re.findall(r"`([^`]+)`", cells[0]) if name != "…"]
    return names


def unknown(names: list[str]) -> list[str]:
    fields = set(DeploySettings.model_fields)
    missing = []
    for name in names:
        if name.endswith("*"):
            if not any(field.startswith(name[:-1]) for field in fields):
                missing.append(name)
        elif name not in fields:
            missing.append(name)
    return missing


def test_readme_names_only_settings_that_exist() -> None:
    text = README.read_text(encoding="utf-8")
    overrides = cli_overrides(text)
    table = table_settings(text)
    assert overrides, "the parser found no -c examples in README.md"
    assert len(table) >= 10, f"the parser found too few settings in README's tables: {table}"
    named = [key for key, _ in overrides] + inline_assignments(text) + table
    assert unknown(named) == [], "README.md names settings that do not exist"


def test_readme_cli_examples_validate() -> None:
    for key, value in cli_overrides(README.read_text(encoding="utf-8")):
        load_settings({key: value}, environ={})  # raises SettingsError naming the key


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("npx cdk synth -c nat_gateway=per_az", ["nat_gateway"]),
        ("| setting | why |\n|---|---|\n| `alert_mail` | x |\n", ["alert_mail"]),
        ("set `retain_datas=false` first", ["retain_datas"]),
        ("| setting | why |\n|---|---|\n| `nope_*` | x |\n", ["nope_*"]),
    ],
)
def test_the_check_catches_a_misnamed_setting(text: str, bad: list[str]) -> None:
    named = [key for key, _ in cli_overrides(text)] + inline_assignments(text) + table_settings(text)
    assert unknown(named) == bad


def test_a_bad_example_value_is_caught() -> None:
    ((key, value),) = cli_overrides("-c nat_gateways=none")
    with pytest.raises(SettingsError):
        load_settings({key: value}, environ={})
