"""The demo reuses a work directory's cdk.out only when nothing its synth reads has changed."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mtrl.cli.demo import synth
from mtrl.cli.demo.plan import DemoError


def _tree(root: Path) -> Path:
    (root / "stacks").mkdir(parents=True)
    (root / "stacks" / "data_stack.py").write_text("BUCKETS = 1\n")
    (root / "app.py").write_text("print('app')\n")
    (root / ".build" / "lambda-deps").mkdir(parents=True)
    (root / ".build" / "lambda-deps" / "layer.py").write_text("x = 1\n")
    return root


def test_the_digest_follows_sources_built_layer_context_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree(tmp_path)
    first = synth.synth_inputs_digest(root)
    assert synth.synth_inputs_digest(root) == first
    (root / "stacks" / "__pycache__").mkdir()
    (root / "stacks" / "__pycache__" / "data_stack.cpython-311.pyc").write_bytes(b"\0")
    assert synth.synth_inputs_digest(root) == first  # byte code is not an input

    (root / "stacks" / "data_stack.py").write_text("BUCKETS = 2\n")
    edited = synth.synth_inputs_digest(root)
    assert edited != first
    (root / "stacks" / "new_stack.py").write_text("")
    added = synth.synth_inputs_digest(root)
    assert added != edited
    (root / ".build" / "lambda-deps" / "layer.py").write_text("x = 22\n")
    rebuilt = synth.synth_inputs_digest(root)
    assert rebuilt != added
    monkeypatch.setenv("CDK_DEFAULT_REGION", "eu-west-1")
    regional = synth.synth_inputs_digest(root)
    assert regional != rebuilt
    monkeypatch.setitem(synth.SYNTH_CONTEXT, "status_poll_seconds", "2")
    assert synth.synth_inputs_digest(root) != regional


def test_a_matching_stamp_skips_the_synth_and_any_other_runs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []

    def fake_cdk(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        out = Path(command[command.index("-o") + 1])
        out.mkdir(parents=True, exist_ok=True)
        (out / "mtrl-data.template.json").write_text("{}")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr("mtrl.cli.demo.synth.subprocess.run", fake_cdk)
    monkeypatch.setattr(synth, "synth_inputs_digest", lambda: "digest-a")
    out = tmp_path / "cdk.out"
    console = Console(record=True, width=200)
    synth.synthesize(out, console)
    assert len(calls) == 1
    assert (out / synth.SYNTH_STAMP).read_text() == "digest-a"
    synth.synthesize(out, console)
    assert len(calls) == 1, "the unchanged inputs were synthesized again"
    assert "synthesized from these same sources" in console.export_text()
    monkeypatch.setattr(synth, "synth_inputs_digest", lambda: "digest-b")
    synth.synthesize(out, console)
    assert len(calls) == 2, "changed inputs reused a stale cdk.out"
    assert (out / synth.SYNTH_STAMP).read_text() == "digest-b"


def test_a_failed_synth_leaves_no_stamp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "cdk.out"
    out.mkdir()
    (out / synth.SYNTH_STAMP).write_text("digest-a")
    monkeypatch.setattr(synth, "synth_inputs_digest", lambda: "digest-b")
    monkeypatch.setattr(
        "mtrl.cli.demo.synth.subprocess.run",
        lambda command, **_: subprocess.CompletedProcess(command, 1, "", "synth broke"),
    )
    with pytest.raises(DemoError, match="synth broke"):
        synth.synthesize(out, Console(record=True))
    assert not (out / synth.SYNTH_STAMP).exists()
