"""Bad datasets are rejected by the pipeline before anything is provisioned, with line-numbered errors,
and the uploaded object is never modified (nothing is ever written under training-data/)."""

from __future__ import annotations

import codecs
import gzip
import json
from typing import Any

from tests.integration.pipeline_support import BUCKET, FakeAdapter, jsonl, pipeline_context, wordle_rows

GOOD = wordle_rows(6)


def _with(line: int, row: Any) -> bytes:
    rows: list[Any] = [dict(r) for r in GOOD]
    rows[line - 1] = row
    return b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in rows)


def _meta(**changes: Any) -> dict[str, Any]:
    metadata = {**GOOD[2]["metadata"], **changes}
    return {"id": GOOD[2]["id"], "metadata": {k: v for k, v in metadata.items() if v is not None}}


# name → (file content, manifest or None, the error code and line expected in validation.json; None = manifest)
CASES: dict[str, tuple[bytes, dict[str, Any] | None, str | None, int | None]] = {
    "empty": (b"", None, "empty_file", None),
    "binary": (b"PAR1\x00\x00\x15\x04\x15\x80\n\x00", None, "binary", 1),
    "gzip": (gzip.compress(jsonl(GOOD)), None, "binary", 1),
    "bom": (codecs.BOM_UTF8 + jsonl(GOOD), None, "bom", 1),
    "utf16": (jsonl(GOOD).decode().encode("utf-16"), None, "not_utf8", 1),
    "latin1": (
        _with(3, b'{"id": "w-00002", "metadata": {"prompt": "caf\xe9", "answer": "crane", "task": "t"}}'),
        None,
        "not_utf8",
        3,
    ),
    "bad-json": (_with(4, b'{"id": "w-00003", "metadata": {"prompt": "x",}'), None, "invalid_json", 4),
    "not-object": (_with(2, b'["w-00001", "crane"]'), None, "not_object", 2),
    "missing-id": (_with(3, {"metadata": GOOD[2]["metadata"]}), None, "missing_id", 3),
    "duplicate-id": (_with(5, {**GOOD[4], "id": GOOD[0]["id"]}), None, "duplicate_id", 5),
    "id-wrong-type": (_with(3, {**GOOD[2], "id": 17}), None, "bad_id", 3),
    "prompt-wrong-type": (_with(3, _meta(prompt=42)), None, "bad_prompt", 3),
    "bad-message-role": (_with(3, _meta(prompt=[{"role": "robot", "content": "hi"}])), None, "bad_prompt", 3),
    "unknown-key": (_with(6, {**GOOD[5], "label": 1}), None, "unknown_key", 6),
    "inconsistent-optional": (_with(3, _meta(task=None)), None, "inconsistent_optional", 3),
    "answer-wrong-type": (_with(3, _meta(answer=5)), None, "bad_type", 3),
    "bad-wordle-answer": (_with(2, _meta(answer="xyzzy")), None, "environment", 2),
    "oversized-line": (_with(4, _meta(info={"padding": "x" * 5000})), None, "line_too_long", 4),
    "blank-line": (jsonl(GOOD[:2]) + b"\n" + jsonl(GOOD[2:]), None, "blank_line", 3),
    "too-many-rows": (jsonl(wordle_rows(41)), None, "too_many_rows", 41),
    "eval-overlap": (
        jsonl(wordle_rows(20) + [{**r, "id": r["id"] + "-copy"} for r in wordle_rows(20)]),
        {"eval_split": 0.5},
        "eval_overlap",
        None,
    ),
    "eval-file-overlap": (jsonl(GOOD), {"eval_dataset": "eval-data/holdout.jsonl"}, "eval_overlap", 1),
    "eval-file-wrong-extension": (jsonl(GOOD), {"eval_dataset": "eval-data/holdout.csv"}, None, None),
    "unknown-environment": (jsonl(GOOD), {"environment": "chess"}, None, None),
    # Hostile JSON (issue 13): each a line-numbered error, never a crashed Validate step.
    "deep-nesting": (
        _with(3, b'{"id": "w-00002", "metadata": {"prompt": ' + b"[" * 1500 + b"]" * 1500 + b"}}"),
        None,
        "too_deep",
        3,
    ),
    "lone-surrogate": (
        _with(2, b'{"id": "w-\\ud800", "metadata": {"prompt": "x", "answer": "crane", "task": "t"}}'),
        {"eval_split": 0.5},
        "lone_surrogate",
        2,
    ),
    "duplicate-key": (
        _with(4, b'{"id": "w-00003", "metadata": {"prompt": 5, "prompt": "x", "answer": "crane", "task": "t"}}'),
        None,
        "duplicate_key",
        4,
    ),
    "overflowing-number": (
        _with(
            2, b'{"id": "w-00001", "metadata": {"prompt": "x", "answer": "crane", "task": "t", "info": {"v": 1e999}}}'
        ),
        None,
        "invalid_json",
        2,
    ),
    # A manifest cannot lift the operator's limits: refused at Register, nothing provisioned.
    "manifest-lifts-ceiling": (
        jsonl(GOOD),
        {"instance_count": 8, "backend_options": {"hyperpod_max_instance_count": 64}},
        None,
        None,
    ),
    "manifest-replaces-environment": (jsonl(GOOD), {"backend_options": {"environment": "ask_to_code"}}, None, None),
}


def test_bad_datasets_are_rejected_before_provisioning() -> None:
    adapter = FakeAdapter()
    with pipeline_context(adapter, max_concurrent_runs=8, dataset_max_line_bytes=4096, dataset_max_rows=40) as pipeline:
        pipeline.put("eval-data/holdout.jsonl", jsonl(GOOD[:1]))
        versions = {}
        for name, (content, manifest, _code, _line) in CASES.items():
            if manifest is not None:
                pipeline.put(f"training-data/{name}.run.json", json.dumps(manifest).encode())
            versions[name] = pipeline.put(f"training-data/{name}.jsonl", content)
        events = pipeline.captured_events(len(CASES))
        assert len(events) == len(CASES)  # manifests and eval files start nothing
        started = {pipeline.deliver(event)["run_id"]: event for event in events}
        executions = pipeline.wait_all(len(CASES))
        assert [e["status"] for e in executions] == ["FAILED"] * len(CASES)

        # Nothing was provisioned for any of them (not even a preflight), nothing left over.
        assert adapter.calls == []
        assert pipeline.slots() == {"holders": {}, "queue": []}
        by_key = {run["dataset"]["key"]: run for run in pipeline.runs()}
        assert set(by_key) == {f"training-data/{name}.jsonl" for name in CASES}
        for name, (_content, _manifest, code, line) in CASES.items():
            run = by_key[f"training-data/{name}.jsonl"]
            assert run["status"] == "FAILED", name
            assert run["run_id"] in started
            if code is None:  # a manifest problem: refused at registration or as configuration
                assert run["error"]["error"] == "ConfigurationError", name
                continue
            assert run["error"]["step"] == "Validate", name
            assert run["error"]["error"] == "DatasetInvalid", name
            report = pipeline.object_json(f"runs/{run['run_id']}/validation.json")
            assert report["valid"] is False
            errors = report["train"]["errors"]
            assert code in {e["code"] for e in errors}, (name, errors)
            if line is not None:
                assert any(e["code"] == code and e["line"] == line for e in errors), (name, errors)
            assert f"line {line}" in run["error"]["cause"] or line is None, name
        # The sources are untouched: one version each, same bytes; nothing new under training-data/.
        listing = pipeline.s3.list_object_versions(Bucket=BUCKET, Prefix="training-data/")
        data_versions = [v for v in listing["Versions"] if v["Key"].endswith(".jsonl")]
        assert len(data_versions) == len(CASES)
        for name, (content, *_rest) in CASES.items():
            body = pipeline.s3.get_object(Bucket=BUCKET, Key=f"training-data/{name}.jsonl")["Body"].read()
            assert body == content, name
        assert len(pipeline.notifications()) == len(CASES)
