"""Run ids: deterministic from the uploaded object version, readable by people.

``<dataset stem>-<UTC time of the object version>-<8 hex of sha256(bucket, key, version id)>``, e.g.
``wordle-train-20261129T103000Z-1a2b3c4d``. The same event (redelivered any number of times) gives the
same id; a new version of the same key (a re-upload) gives a new one. The id is also the Step Functions
execution name (at most 80 characters of ``[A-Za-z0-9_-]``).
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from pathlib import PurePosixPath

DATASET_SUFFIX = ".jsonl"
MANIFEST_SUFFIX = ".run.json"
_STEM_CHARS = re.compile(r"[^a-z0-9]+")
MAX_STEM = 48
RUN_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,47}-\d{8}T\d{6}Z-[0-9a-f]{8}$")


def dataset_stem(key: str) -> str:
    name = PurePosixPath(key).name
    if name.endswith(DATASET_SUFFIX):
        name = name[: -len(DATASET_SUFFIX)]
    stem = _STEM_CHARS.sub("-", name.lower()).strip("-")[:MAX_STEM].strip("-")
    return stem or "dataset"


def derive_run_id(*, bucket: str, key: str, version_id: str | None, created: datetime) -> str:
    if created.tzinfo is None:
        raise ValueError("created must be timezone-aware")
    digest = hashlib.sha256(f"{bucket}\n{key}\n{version_id or 'null'}".encode()).hexdigest()[:8]
    stamp = created.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{dataset_stem(key)}-{stamp}-{digest}"


def manifest_key_for(dataset_key: str) -> str:
    """``training-data/a.jsonl`` → ``training-data/a.run.json`` (the optional per-run settings)."""
    base = dataset_key[: -len(DATASET_SUFFIX)] if dataset_key.endswith(DATASET_SUFFIX) else dataset_key
    return base + MANIFEST_SUFFIX
