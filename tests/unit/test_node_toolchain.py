"""The CDK CLI and jsii run on a Node.js LTS in support (issue 36: the machine's Node 20 reached its end of life on
2026-10-30).

End-of-life dates: the Node.js release schedule (https://github.com/nodejs/Release, schedule.json; "Node.js
Releases", https://nodejs.org/en/about/previous-releases), as jsii 1.x also prints them ("supported node releases:
^24.0.0 (Planned end-of-life: 2028-04-30), ^22.0.0 (Planned end-of-life: 2027-04-30)"; Node 20: 2026-04-30 per the
schedule, jsii's banner says "not supported anymore by this software since 2026-10-30").
"""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from mtrl.cli.demo import synth

REPO_ROOT = Path(__file__).resolve().parents[2]
# Even majors are the LTS lines; each one's end of life (Node.js release schedule).
NODE_LTS_END_OF_LIFE = {20: date(2026, 4, 30), 22: date(2027, 4, 30), 24: date(2028, 4, 30)}


def _pinned_node() -> str:
    package = json.loads((REPO_ROOT / "package.json").read_text())
    return str(package["devDependencies"]["node"])


def test_package_json_pins_an_exact_node_lts_in_support_today() -> None:
    version = _pinned_node()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"not an exact pin: {version}"
    major = int(version.split(".")[0])
    assert major in NODE_LTS_END_OF_LIFE, f"Node {major} is not an LTS line"
    assert datetime.now(UTC).date() < NODE_LTS_END_OF_LIFE[major], f"Node {major} is past its end of life"
    # The binary comes from a preinstall script, which npm runs only for an approved package.
    assert json.loads((REPO_ROOT / "package.json").read_text())["allowScripts"] == {"node": True}
    lock = json.loads((REPO_ROOT / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/node"]["version"] == version
    assert lock["packages"][""]["devDependencies"]["node"] == version


def test_make_runs_the_cdk_cli_and_jsii_on_the_pinned_node() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "export PATH := $(CURDIR)/node_modules/.bin:$(PATH)" in makefile
    assert "export JSII_NODE := $(CURDIR)/node_modules/.bin/node" in makefile
    assert "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION" not in makefile


def test_the_demo_synth_runs_the_cli_on_the_pinned_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = tmp_path / "node_modules" / ".bin" / "node"
    node.parent.mkdir(parents=True)
    node.write_text("")
    setattr_ = monkeypatch.setattr
    setattr_(synth, "PINNED_NODE", node)
    env = synth.node_environment({"PATH": "/usr/bin"})
    assert env["JSII_NODE"] == str(node)
    assert env["PATH"].split(":")[0] == str(node.parent)
    setattr_(synth, "PINNED_NODE", tmp_path / "absent")
    assert synth.node_environment({"PATH": "/usr/bin"}) == {"PATH": "/usr/bin"}
