"""The HyperPod lifecycle script: valid bash, strict mode, and no network fetches at boot."""

from __future__ import annotations

import re
import subprocess

from stacks.constructs.hyperpod_cluster import LIFECYCLE_DIR, LIFECYCLE_ENTRYPOINT

SCRIPT = LIFECYCLE_DIR / LIFECYCLE_ENTRYPOINT


def test_script_is_valid_bash() -> None:
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_script_fails_loudly_and_logs() -> None:
    text = SCRIPT.read_text()
    assert text.startswith("#!/bin/bash\n")
    assert "set -euo pipefail" in text
    assert "LOG_DIR=/var/log/provision" in text
    assert 'LOG_FILE="${LOG_DIR}/provisioning.log"' in text
    assert "trap " in text  # the failing step is named in the log


def test_script_fetches_nothing_from_the_network() -> None:
    code = "\n".join(line for line in SCRIPT.read_text().splitlines() if not line.lstrip().startswith("#"))
    for fetch in (r"\bcurl\b", r"\bwget\b", r"\bpip3?\s+install\b", r"\bgit\s+clone\b", r"https?://", r"\baws\s+s3\b"):
        assert not re.search(fetch, code), fetch


def test_lifecycle_directory_holds_only_the_entrypoint() -> None:
    # Everything in the directory is uploaded and versioned together; keep it to what nodes run.
    assert sorted(p.name for p in LIFECYCLE_DIR.iterdir()) == [LIFECYCLE_ENTRYPOINT]
