"""The source archive `mtrl image build` and `mtrl model import` upload: exactly what the Dockerfile copies (read from
the Dockerfile itself), the same bytes for the same files, no caches; a path that is not there is named."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from mtrl.backends.verl.supply import IMAGE_DOCKERFILE
from mtrl.client.builders import MODEL_SOURCE, dockerfile_sources, source_archive

REPO = Path(__file__).resolve().parents[3]


def test_the_image_archive_holds_the_dockerfile_and_every_copy_source() -> None:
    sources = dockerfile_sources(REPO)
    assert sources[0] == IMAGE_DOCKERFILE
    assert {"requirements/verl-trainer.txt", "pyproject.toml", "mtrl/", "environments/", "benchmarks/device/"} <= set(
        sources
    )
    names = zipfile.ZipFile(io.BytesIO(source_archive(REPO, sources))).namelist()
    assert IMAGE_DOCKERFILE in names
    assert "mtrl/backends/verl/train.py" in names
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)
    assert not any(name.startswith(("tests/", "stacks/", ".venv")) for name in names)  # nothing the image does not copy


def test_the_same_tree_makes_the_same_archive(tmp_path: Path) -> None:
    (tmp_path / "mtrl" / "__pycache__").mkdir(parents=True)
    (tmp_path / "mtrl" / "a.py").write_text("a = 1\n")
    (tmp_path / "mtrl" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"cache")
    first = source_archive(tmp_path, MODEL_SOURCE)
    (tmp_path / "mtrl" / "a.py").touch()  # a new modification time changes nothing
    assert source_archive(tmp_path, MODEL_SOURCE) == first
    assert zipfile.ZipFile(io.BytesIO(first)).namelist() == ["mtrl/a.py"]


def test_a_missing_path_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"mtrl is not in .*source checkout"):
        source_archive(tmp_path, MODEL_SOURCE)
