"""The in-account import job's module (mtrl.backends.verl.hub_copy) against a fake Hub, the strict Hub names
(mtrl.contracts.hub) and the SHA256SUMS writer (mtrl.backends.verl.model_copy): a copy is written in the format the
trainer reads back, and nothing the Hub names can leave the copy's directory."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from mtrl.backends.verl.hub_copy import HubCopyError, copy_revision, main
from mtrl.backends.verl.model_copy import format_sums, parse_sums, tree_sums
from mtrl.contracts.hub import HUB_MODEL_ID, HubNameError, is_commit, parse_model_ref
from tests.unit.cli.builders_world import COMMIT, HUB_FILES, FakeHub

REPO = Path(__file__).resolve().parents[4]
MODEL_ID = "Qwen/Qwen2.5-0.5B-Instruct"


def test_a_revision_is_copied_by_its_commit_with_sums_the_trainer_reads(tmp_path: Path) -> None:
    hub = FakeHub(MODEL_ID, HUB_FILES)
    commit, digests = copy_revision(MODEL_ID, "main", tmp_path, opener=hub)
    assert commit == COMMIT
    assert digests == {name: hashlib.sha256(body).hexdigest() for name, body in HUB_FILES.items()}
    assert parse_sums((tmp_path / "SHA256SUMS").read_text()) == digests
    assert (tmp_path / "sub" / "tokenizer.json").read_bytes() == HUB_FILES["sub/tokenizer.json"]
    assert hub.urls[0].endswith(f"/api/models/{MODEL_ID}/revision/main")
    assert all(f"/resolve/{COMMIT}/" in url for url in hub.urls[1:])


@pytest.mark.parametrize(
    "name", ["../escape", "/etc/passwd", "a/../../b", "a\\b", "SHA256SUMS", "/".join(["d" * 200] * 5) + "/w.bin"]
)
def test_a_file_name_that_could_leave_the_copy_is_refused_before_any_download(tmp_path: Path, name: str) -> None:
    hub = FakeHub(MODEL_ID, {"config.json": b"{}", name: b"x"})
    with pytest.raises(HubCopyError):
        copy_revision(MODEL_ID, "main", tmp_path / "out", opener=hub)
    assert len(hub.urls) == 1  # only the revision's listing was fetched
    assert not (tmp_path / "escape").exists()


def test_a_gated_model_says_how_to_import_it(tmp_path: Path) -> None:
    import urllib.error
    from email.message import Message

    def gated(url: str) -> IO[bytes]:
        raise urllib.error.HTTPError(url, 401, "unauthorized", Message(), None)

    with pytest.raises(HubCopyError, match=r"401.*--from DIR"):
        copy_revision("meta-llama/Llama-3.1-8B", "main", tmp_path, opener=gated)


def test_a_listing_without_a_commit_is_refused(tmp_path: Path) -> None:
    def no_commit(url: str) -> IO[bytes]:
        return io.BytesIO(json.dumps({"sha": "main", "siblings": [{"rfilename": "x"}]}).encode())

    with pytest.raises(HubCopyError, match="named no commit"):
        copy_revision(MODEL_ID, "main", tmp_path, opener=no_commit)


def test_the_job_refuses_an_unsafe_id_and_exits_non_zero(tmp_path: Path) -> None:
    assert main(["--model", "a/b;id", "--out", str(tmp_path), "--commit-file", str(tmp_path / "c")]) == 1
    assert not (tmp_path / "c").exists()


def test_the_job_module_runs_without_mtrls_dependencies(tmp_path: Path) -> None:
    # The CodeBuild image has Python only: the module and what it imports must be the standard library.
    code = (
        "import sys, builtins; real = builtins.__import__\n"
        "def guard(name, *a, **k):\n"
        "    if name.split('.')[0] in {'pydantic', 'boto3', 'botocore', 'typer', 'rich', 'yaml', 'numpy'}:\n"
        "        raise ImportError(name)\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = guard\n"
        "sys.argv = ['hub_copy', '--help']\n"
        "import runpy; runpy.run_module('mtrl.backends.verl.hub_copy', run_name='__main__')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "--revision" in result.stdout


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("Qwen/Qwen2.5-0.5B-Instruct", ("Qwen/Qwen2.5-0.5B-Instruct", None)),
        ("Qwen/Qwen2.5-0.5B-Instruct@main", ("Qwen/Qwen2.5-0.5B-Instruct", "main")),
        (f"a/b@{COMMIT}", ("a/b", COMMIT)),
        ("a/b@v1.0", ("a/b", "v1.0")),
    ],
)
def test_hub_references_are_parsed(ref: str, expected: tuple[str, str | None]) -> None:
    assert parse_model_ref(ref) == expected


@pytest.mark.parametrize(
    "ref",
    ["a", "a/b/c", "a/b c", "a/$(x)", "a/`x`", "-a/b", "a/b@", "a/b@x/y", "a/b@-x", "a/b@..", "a..b/c", "a/b@a;b"],
)
def test_unsafe_or_impossible_references_are_refused(ref: str) -> None:
    with pytest.raises(HubNameError):
        parse_model_ref(ref)


# What may follow or precede a valid name and must never get through: line ends (Python's "$" matches before a final
# "\n"), other whitespace and controls, shell syntax, option dashes, path parts, and non-ASCII look-alikes (Cyrillic
# "а", fullwidth "／", a division slash "∕", a zero-width space).
HOSTILE = ["\n", "\r", "\r\n", "\x00", "\t", " ", "\x85", "\u2028", ";id", "$(id)", "`id`", "|sh", "&", "'", '"', "\\"]
HOSTILE += ["/..", "/x", "@", "\u0430", "\uff0f", "\u2215", "\u200b", "-" * 200]
_ALLOWED = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-/")


@pytest.mark.parametrize("hostile", HOSTILE)
def test_nothing_may_follow_a_valid_id_revision_or_commit(hostile: str) -> None:
    for ref in (f"Qwen/x{hostile}", f"Qwen/x@main{hostile}", f"Qwen/x@{COMMIT}{hostile}"):
        with pytest.raises(HubNameError):
            parse_model_ref(ref)
    assert not is_commit(COMMIT + hostile)


@given(
    st.from_regex(HUB_MODEL_ID, fullmatch=True),
    st.text(min_size=1, max_size=8),
    st.sampled_from(["prefix", "suffix", "revision"]),
)
@example("Qwen/x", "\n", "suffix")
@example("Qwen/x", "\n", "revision")
def test_an_accepted_reference_is_only_the_hubs_characters(valid: str, extra: str, where: str) -> None:
    """Whatever surrounds a valid id, what gets through is ASCII letters, digits, '.', '_', '-' and one '/' (the
    Hub's repository-name rule), never a line end or another character a shell, a key or a URL reads specially."""
    ref = {"prefix": extra + valid, "suffix": valid + extra, "revision": f"{valid}@main{extra}"}[where]
    try:
        model_id, revision = parse_model_ref(ref)
    except HubNameError:
        return
    assert set(model_id) <= _ALLOWED
    assert model_id.count("/") == 1
    assert revision is None or set(revision) <= _ALLOWED - {"/"}
    assert f"{model_id}@{revision}" == ref if revision is not None else model_id == ref


def test_a_local_tree_is_summed_in_the_format_the_trainer_reads(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "w.bin").write_bytes(b"w")
    (tmp_path / "config.json").write_bytes(b"{}")
    (tmp_path / "SHA256SUMS").write_text("stale")  # an earlier list is not a file of the copy
    digests = tree_sums(tmp_path)
    assert sorted(digests) == ["config.json", "d/w.bin"]
    text = format_sums(digests)
    assert text.splitlines()[0] == f"{hashlib.sha256(b'{}').hexdigest()}  config.json"
    assert parse_sums(text) == digests
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no file"):
        tree_sums(tmp_path / "empty")
