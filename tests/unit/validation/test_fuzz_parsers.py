"""Fuzzing the dataset validator and the manifest parser: every input gets an answer, never a traceback.

Bounded and deterministic for CI: a fixed example budget, derandomized, no example database.
"""

from __future__ import annotations

import io
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtrl.contracts.errors import ConfigurationError
from mtrl.runs.manifest import parse_manifest, resolve_run_settings
from mtrl.runs.registry import encode_item
from mtrl.settings.pipeline import PipelineSettings
from mtrl.validation.dataset import DatasetValidator

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
DEFAULTS = PipelineSettings()

# JSON-ish text fragments that reach the interesting parser paths.
TOKENS = st.sampled_from(
    [
        "{", "}", "[", "]", ",", ":", '"', "\\", "\\u", "\\ud800", "\\udc00", "\\ud83d\\ude00", "1e999", "-0",
        "NaN", "Infinity", "null", "true", "1.5", '"id"', '"metadata"', '"prompt"', '"answer"', '"info"', " ",
        "\t", '"a" :', "\x00", "\xff", "é", '{"role": "user", "content": "x"}', "[" * 70, "]" * 70,
    ]
)  # fmt: skip
FRAGMENTS = st.lists(st.one_of(TOKENS, st.text(max_size=8)), max_size=40).map("".join)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=10),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=20,
)


# Hostile values spliced into otherwise well-formed documents (the fragments alone rarely reach them).
HOSTILE = st.sampled_from(
    ["Infinity", "-Infinity", "NaN", "1e999", '"\\ud800"', '"\\udfff x"', "[" * 3000 + "]" * 3000, '{"a": 1, "a": 2}']
)
MANIFEST_KEYS = st.sampled_from(
    ["max_budget_usd", "instance_count", "eval_split", "environment_args", "hyperparameters", "backend_options"]
)
SPLICED_MANIFESTS = st.lists(st.tuples(MANIFEST_KEYS, st.one_of(HOSTILE, VALUES.map(json.dumps))), max_size=4).map(
    lambda pairs: "{" + ", ".join(f"{json.dumps(key)}: {value}" for key, value in pairs) + "}"
)
SPLICED_ROWS = st.builds(
    lambda where, value: (
        ('{"id": ID, "metadata": {"prompt": PROMPT, "answer": "a"}}'.replace(where, value).replace("ID", '"r"'))
        .replace("PROMPT", '"p"')
        .encode()
    ),
    st.sampled_from(["ID", "PROMPT"]),
    HOSTILE,
)


def _row(value: Any) -> bytes:
    return json.dumps(value).encode()


ROW_LIKE = st.builds(
    lambda row_id, prompt, extra: _row({"id": row_id, "metadata": {"prompt": prompt, **extra}}),
    st.one_of(st.text(max_size=6), SCALARS),
    st.one_of(st.text(max_size=12), VALUES),
    st.dictionaries(st.sampled_from(["answer", "task", "info", "other"]), VALUES, max_size=3),
)
LINES = st.lists(
    st.one_of(
        FRAGMENTS.map(lambda s: s.encode("utf-8", "surrogatepass")), ROW_LIKE, SPLICED_ROWS, st.binary(max_size=30)
    ),
    min_size=1,
    max_size=8,
)


@FUZZ
@given(lines=LINES, eval_split=st.sampled_from([0.0, 0.25]))
def test_the_validator_answers_every_input(lines: list[bytes], eval_split: float) -> None:
    data = b"\n".join(lines)
    report = DatasetValidator(eval_split=eval_split).validate(io.BytesIO(data), source="fuzz.jsonl")
    numbers = data.count(b"\n") + 1
    for issue in report.errors:
        assert issue.line is None or 1 <= issue.line <= numbers
        issue.render().encode("utf-8")  # printable: no lone surrogate reaches a message
    json.dumps(report.to_dict(), allow_nan=False).encode("utf-8")  # validation.json can always be written


@FUZZ
@given(
    text=st.one_of(
        FRAGMENTS, SPLICED_MANIFESTS, st.builds(json.dumps, st.dictionaries(st.text(max_size=20), VALUES, max_size=6))
    )
)
def test_the_manifest_parser_answers_every_input(text: str) -> None:
    raw = text.encode("utf-8", "surrogatepass")
    try:
        manifest = parse_manifest(raw, source="fuzz.run.json")
    except ConfigurationError as error:
        str(error).encode("utf-8")
        return
    try:
        resolved = resolve_run_settings(DEFAULTS, manifest, source="fuzz.run.json")
    except ConfigurationError as error:
        str(error).encode("utf-8")
        return
    # What Register stores must be storable: finite numbers, real text, DynamoDB-serialisable.
    document = resolved.model_dump(mode="json")
    json.dumps(document, allow_nan=False, ensure_ascii=False).encode("utf-8")
    encode_item({"settings": document})


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(["instance_count", "worker_count", "eval_split", "max_budget_usd", "environment", "backend"]),
        VALUES,
        max_size=4,
    ),
    st.dictionaries(st.text(max_size=12), VALUES, max_size=3),
)
def test_resolved_manifests_keep_the_deployment_s_limits(values: dict[str, Any], options: dict[str, Any]) -> None:
    deployed = PipelineSettings(run_max_instance_count=2, run_max_worker_count=3, run_max_budget_usd=100)
    try:
        resolved = resolve_run_settings(deployed, {**values, "backend_options": options})
    except ConfigurationError:
        return
    assert resolved.instance_count <= 2
    assert resolved.worker_count <= 3
    assert resolved.max_budget_usd is not None
    assert resolved.max_budget_usd <= 100
    assert resolved.run_timeout_minutes <= deployed.run_timeout_minutes
    assert not set(resolved.backend_options) & set(PipelineSettings.model_fields)
