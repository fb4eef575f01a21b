"""Hugging Face Hub names, checked strictly: a model id and a revision become URLs, S3 keys, SSM parameter names and
words of a build's shell, so only the characters the Hub itself allows in them, and none that a shell, a URL or a
key would read specially, get through (no ``..``, no leading ``-``, no ``/`` in a revision).

Model ids: ``<owner>/<name>``, each part letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit
(the Hub's "Repository names can only contain alphanumeric characters, '-', '_' and '.'" rule, 96 characters each).
Revisions: a 40-hex commit, or a branch or tag name of the same characters (branch names with ``/`` are refused:
give the commit instead). Every check matches the whole string (``re.fullmatch``): Python's ``$`` also matches
before a final newline (Python ``re`` docs, ``$``: "Matches the end of the string or just before the newline at the
end of the string"), so ``re.match`` would pass ``org/model`` followed by a line end. Standard library only: the
in-account import job runs this module without mtrl's dependencies.
"""

from __future__ import annotations

import re

# A model copy's checksum list (mtrl.backends.verl.model_copy): the one file whose SHA-256 a deployment pins.
MODEL_SUMS_FILE = "SHA256SUMS"
HUB_MODEL_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$"
HUB_COMMIT = r"^[0-9a-f]{40}$"
HUB_REVISION = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
_MODEL_ID = re.compile(HUB_MODEL_ID)
_REVISION = re.compile(HUB_REVISION)


class HubNameError(ValueError):
    """A model id or revision that is not one the Hub could hold, or that is unsafe to pass on."""


def is_commit(text: str) -> bool:
    """Whether ``text`` is exactly a 40-hex commit (nothing before or after it, not even a newline)."""
    return re.fullmatch(HUB_COMMIT, text) is not None


def check_model_id(model_id: str) -> str:
    if not _MODEL_ID.fullmatch(model_id) or ".." in model_id:
        raise HubNameError(
            f"{model_id!r} is not a Hugging Face model id (<owner>/<name>: letters, digits, '.', '_', '-', "
            "starting with a letter or digit, no '..')"
        )
    return model_id


def check_revision(revision: str) -> str:
    if not _REVISION.fullmatch(revision) or ".." in revision:
        raise HubNameError(
            f"revision {revision!r} is not a commit, branch or tag name mtrl accepts (letters, digits, '.', '_', '-',"
            " starting with a letter or digit, no '/' or '..': give a branch with '/' by its commit)"
        )
    return revision


def parse_model_ref(text: str) -> tuple[str, str | None]:
    """``<hub-id>[@revision]`` → (model id, revision or None), each checked."""
    model_id, separator, revision = text.partition("@")
    check_model_id(model_id)
    if not separator:
        return model_id, None
    return model_id, check_revision(revision)
