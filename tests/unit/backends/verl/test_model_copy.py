"""A model copy's SHA256SUMS in sha256sum's own format, and names that cannot leave the model directory (issue 38
item 7, issue 35 item 11: binary-mode lines)."""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from mtrl.backends.verl.model_copy import format_sums, name_problem, parse_sums, tree_sums

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


# Every character str.splitlines ends a line at (Python docs, "str.splitlines"): a name holding one is written as one
# line and read back as two.
LINE_ENDS = ["\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("end", LINE_ENDS)
def test_a_name_with_a_line_end_is_refused_when_written(end: str) -> None:
    # Without this, "x<end><digest of the attacker's choice>  y" was written as one name and read back as two files
    # ("x", and "y" pinned to a digest no file of the copy has), the real file listed under no name.
    with pytest.raises(ValueError, match="line separator"):
        format_sums({f"x{end}{DIGEST}  y": DIGEST})


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=12),
        st.text("0123456789abcdef", min_size=64, max_size=64),
        min_size=1,
        max_size=4,
    )
)
@example({"a\u2028b": DIGEST})
@example({f"x\x85{DIGEST}  y": DIGEST})
@example({"\udcff.bin": DIGEST})
def test_what_is_written_is_what_is_read_back(files: dict[str, str]) -> None:
    """format_sums either refuses a name or writes a list parse_sums reads back as exactly the same files."""
    try:
        text = format_sums(files)
    except ValueError:
        assert any(name_problem(name) for name in files)
        return
    assert parse_sums(text) == files


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_a_local_copy_with_a_special_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A FIFO or a socket was left out silently: the copy was recorded without a file the operator's directory has
    (and reading a FIFO to hash it would block)."""
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    special = tmp_path / "sub" / "model.safetensors"
    if kind == "fifo":
        os.mkfifo(special)
    else:
        monkeypatch.chdir(tmp_path / "sub")  # a socket path is limited to ~100 bytes: bind it by a relative name
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind("model.safetensors")
    with pytest.raises(ValueError, match=r"sub/model\.safetensors is not a regular file"):
        tree_sums(tmp_path)


def test_a_local_file_whose_name_is_not_utf8_is_named(tmp_path: Path) -> None:
    """Before: the copy failed later with "'utf-8' codec can't encode character '\\udcff' in position 144", naming
    no file."""
    (tmp_path / "config.json").write_text("{}")
    with open(tmp_path.as_posix().encode() + b"/w\xff.bin", "wb") as stream:
        stream.write(b"x")
    with pytest.raises(ValueError, match=r"file name 'w\\udcff\.bin' is not valid UTF-8"):
        tree_sums(tmp_path)
