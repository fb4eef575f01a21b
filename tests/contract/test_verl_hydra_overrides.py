"""Hydra's own override parser (hydra-core as verl 0.9.1 locks it, in .venv-verl) reads every override mtrl renders
back as exactly the typed value mtrl meant: no interpolation, no mapping, no other type (issue 38 item 1)."""

from __future__ import annotations

import json
import random
import string
import subprocess
from pathlib import Path

from mtrl.backends.verl import train
from mtrl.backends.verl.hydra import hydra_value
from tests.contract.tier import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
VERL_PYTHON = ROOT / ".venv-verl" / "bin" / "python"
# Reads one override a line; prints [key, value, type name] for each (Hydra parses; nothing is resolved).
PARSE = """
import json, sys
from hydra.core.override_parser.overrides_parser import OverridesParser
parser = OverridesParser.create()
for line in sys.stdin.read().splitlines():
    override = parser.parse_override(line)
    value = override.value()
    print(json.dumps([override.key_or_group, value, type(value).__name__]))
"""


def _hydra_reads(overrides: list[str]) -> list[list[object]]:
    if not VERL_PYTHON.exists():
        skip_or_fail(".venv-verl is missing (make verl)")
    completed = subprocess.run(
        [str(VERL_PYTHON), "-c", PARSE],
        check=False,
        input="\n".join(overrides),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return [json.loads(line) for line in completed.stdout.splitlines()]


def test_hydra_reads_every_override_of_a_run_as_rendered(tmp_path: Path) -> None:
    document = {
        "run_id": "wordle-20261207T101010Z-0123abcd",
        "lora_rank": 16,
        "group_size": 4,
        "steps": 3,
        "max_prompt_length": 512,
        "max_response_length": 1024,
        "hyperparameters": {"learning_rate": 1e-5},
        "nnodes": 2,
        "episode_timeout_s": 90,
        "mlflow_tracking_uri": "arn:aws:sagemaker:us-east-1:111122223333:mlflow-app/app-x",
        "baseline_evaluation": True,
    }
    overrides = train.overrides(
        document,
        model_path="/var/lib/mtrl-verl/model",
        train_file=tmp_path / "train.parquet",
        val_file=tmp_path / "eval.parquet",
        agent_config=tmp_path / "agent_loops.yaml",
        local_dir=tmp_path / "checkpoints",
        gpus_per_node=8,
    )
    read = _hydra_reads(overrides)
    assert len(read) == len(overrides)
    for override, (key, value, kind) in zip(overrides, read, strict=True):
        assert override.split("=", 1)[0].removeprefix("+") == key
        assert kind in {"str", "int", "float", "bool", "list"}, override
        assert hydra_value(value) == override.split("=", 1)[1], override  # read back to the very same value
        assert "$" not in json.dumps(value)
    as_read = {str(key): value for key, value, _ in read}
    assert as_read["actor_rollout_ref.actor.optim.lr"] == 1e-5
    assert as_read["trainer.logger"] == ["console", "mlflow"]
    assert as_read["trainer.n_gpus_per_node"] == 8


def test_every_string_mtrl_renders_hydra_reads_as_that_string() -> None:
    # One parser start for thousands of candidates (a start per example would be most of the test's time): random
    # printable ASCII words biased towards the grammar's own characters and words.
    chooser = random.Random(38)
    alphabet = string.ascii_letters + string.digits + "_./@+-:" + "${}[]()'\",=\\ #~%!?*&|<>;^`"
    seeds = ["null", "true", "nan", "inf", "1e5", "1_0", "0x1", "+1", "-inf", "${a}", "a:b", "..", "@"]
    words = seeds + ["".join(chooser.choice(alphabet) for _ in range(chooser.randint(1, 8))) for _ in range(3000)]
    rendered: list[tuple[str, str]] = []
    for word in words:
        try:
            rendered.append((word, hydra_value(word)))
        except ValueError:
            continue
    assert len(rendered) > 200  # the generator does reach accepted words
    read = _hydra_reads([f"k{index}={text}" for index, (_, text) in enumerate(rendered)])
    for (word, _), (_, value, kind) in zip(rendered, read, strict=True):
        assert (kind, value) == ("str", word)
