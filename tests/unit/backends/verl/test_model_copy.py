"""A model copy's SHA256SUMS in sha256sum's own format, and names that cannot leave the model directory (issue 38
item 7, issue 35 item 11: binary-mode lines)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mtrl.backends.verl.model_copy import parse_sums

DIGEST = "ab" * 32


def test_text_and_binary_mode_lines_as_sha256sum_writes_them() -> None:
    text = f"{DIGEST}  config.json\n{DIGEST.upper()} *model.safetensors\n\n{DIGEST}  sub/dir/tokenizer.json\n"
    assert parse_sums(text) == {
        "config.json": DIGEST,
        "model.safetensors": DIGEST,
        "sub/dir/tokenizer.json": DIGEST,
    }


def test_a_name_may_start_with_a_space_or_a_star_in_text_mode() -> None:
    # "<digest>  *x": text mode, and the file is literally named "*x" (sha256sum reads it so).
    assert parse_sums(f"{DIGEST}  *x\n") == {"*x": DIGEST}


@pytest.mark.parametrize(
    "name",
    [
        "../x",
        "a/../../x",
        "/abs/x",
        "//x",
        "./x",
        "a//b",
        "a/",
        "..",
        "a\\..\\x",
        "a\x00b",
        "a\tb",
        "a\x1fb",
    ],
)
@pytest.mark.parametrize("mode", [" ", "*"])
def test_names_that_leave_the_model_directory_are_refused_in_either_mode(name: str, mode: str) -> None:
    with pytest.raises(ValueError, match="line 1"):
        parse_sums(f"{DIGEST} {mode}{name}\n")


@pytest.mark.parametrize(
    "line",
    [
        "nothex" + "0" * 58 + "  x",
        DIGEST[:-1] + "  x",
        DIGEST + "x",
        DIGEST + " ",
        DIGEST + "\tx",
        "x",
    ],
)
def test_malformed_lines_are_refused(line: str) -> None:
    with pytest.raises(ValueError, match="line 1 is not"):
        parse_sums(line + "\n")


def test_duplicates_and_empty_lists_are_refused() -> None:
    with pytest.raises(ValueError, match="listed twice"):
        parse_sums(f"{DIGEST}  x\n{DIGEST} *x\n")
    with pytest.raises(ValueError, match="lists no file"):
        parse_sums("\n\n")


@given(st.text(alphabet=st.sampled_from("ab./*\\ -_"), min_size=1, max_size=12))
def test_every_accepted_name_is_a_plain_relative_path(name: str) -> None:
    digest = hashlib.sha256(name.encode()).hexdigest()
    try:
        parsed = parse_sums(f"{digest}  {name}\n")
    except ValueError:
        return
    (accepted,) = parsed
    parts = accepted.split("/")
    assert not accepted.startswith("/")
    assert "\\" not in accepted
    assert all(part not in {"", ".", ".."} for part in parts)
