"""Download one model revision from the Hugging Face Hub into a directory and write its ``SHA256SUMS``.

The in-account model import job (``<prefix>-model-import``, stacks/constructs/image_builder.py) runs
``python3 -m mtrl.backends.verl.hub_copy --model ID --revision REV --out DIR --commit-file FILE`` and then copies
DIR to ``s3://<bucket>/models/<id>/<commit>/``. Standard library only: the job's image has Python, not mtrl's
dependencies.

Hub HTTP API (huggingface_hub's ``HfApi.model_info`` and ``hf_hub_url``): ``GET /api/models/<id>/revision/<rev>``
answers the resolved commit (``sha``) and the files (``siblings[].rfilename``); ``GET /<id>/resolve/<commit>/<file>``
serves a file (redirecting large ones to the CDN). Downloading by the resolved commit, never by the branch, keeps
every file of one copy from one revision. Gated or private models need a token, which the job does not hold: the Hub
answers 401/403 and the job fails naming the model.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from mtrl.backends.verl.model_copy import file_sha256, format_sums, name_problem, too_long_for_s3
from mtrl.contracts.hub import MODEL_SUMS_FILE, HubNameError, check_model_id, check_revision, is_commit

HUB = "https://huggingface.co"
_CHUNK = 8 * 1024 * 1024
Opener = Callable[[str], IO[bytes]]


class HubCopyError(Exception):
    pass


def _open(url: str) -> IO[bytes]:
    if not url.startswith(HUB + "/"):
        raise HubCopyError(f"refusing to fetch {url}: not on {HUB}")
    request = urllib.request.Request(url, headers={"User-Agent": "mtrl-model-import"})  # noqa: S310 (checked above)
    response: IO[bytes] = urllib.request.urlopen(request, timeout=60)  # noqa: S310 (checked above)
    return response


def _quoted(model_id: str) -> str:
    return "/".join(urllib.parse.quote(part, safe="") for part in model_id.split("/"))


def revision_info(model_id: str, revision: str, *, opener: Opener = _open, hub: str = HUB) -> tuple[str, list[str]]:
    """(resolved commit, file names) of a model revision."""
    url = f"{hub}/api/models/{_quoted(model_id)}/revision/{urllib.parse.quote(revision, safe='')}"
    try:
        with opener(url) as response:
            info: Any = json.load(response)
    except urllib.error.HTTPError as error:
        gated = error.code in (401, 403)
        hint = " (gated or private models need a token: import a local copy with --from DIR)" if gated else ""
        raise HubCopyError(f"{model_id}@{revision}: the Hub answered {error.code}{hint}") from None
    commit = info.get("sha") if isinstance(info, dict) else None
    if not isinstance(commit, str) or not is_commit(commit):
        raise HubCopyError(f"{model_id}@{revision}: the Hub named no commit for it")
    names: list[str] = []
    for sibling in info.get("siblings") or []:
        name = sibling.get("rfilename") if isinstance(sibling, dict) else None
        problem = name_problem(name) if isinstance(name, str) else "is not a string"
        if problem or not isinstance(name, str):
            raise HubCopyError(f"{model_id}@{commit}: file name {name!r} {problem}")
        names.append(name)
    if not names:
        raise HubCopyError(f"{model_id}@{commit}: the revision lists no file")
    return commit, sorted(names)


def copy_revision(
    model_id: str, revision: str, out: Path, *, opener: Opener = _open, hub: str = HUB
) -> tuple[str, dict[str, str]]:
    """Download every file of the revision into ``out`` and write ``out/SHA256SUMS``; (commit, {name: digest})."""
    check_model_id(model_id)
    check_revision(revision)
    commit, names = revision_info(model_id, revision, opener=opener, hub=hub)
    too_long = too_long_for_s3(model_id, commit, names)
    if too_long:
        raise HubCopyError(f"{model_id}@{commit}: {too_long}")
    if MODEL_SUMS_FILE in names:
        raise HubCopyError(f"{model_id}@{commit}: the model has a file named {MODEL_SUMS_FILE} of its own")
    digests: dict[str, str] = {}
    for name in names:
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        url = f"{hub}/{_quoted(model_id)}/resolve/{commit}/{urllib.parse.quote(name)}"
        try:
            with opener(url) as response, target.open("wb") as stream:
                while chunk := response.read(_CHUNK):
                    stream.write(chunk)
        except urllib.error.HTTPError as error:
            raise HubCopyError(f"{model_id}@{commit}: {name}: the Hub answered {error.code}") from None
        digests[name] = file_sha256(target)
    (out / MODEL_SUMS_FILE).write_text(format_sums(digests), encoding="utf-8")
    return commit, digests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--revision", default="main")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--commit-file", type=Path, required=True, help="where the resolved commit is written")
    args = parser.parse_args(argv)
    try:
        commit, digests = copy_revision(args.model, args.revision, args.out)
    except (HubCopyError, HubNameError, ValueError) as error:
        print(f"model import failed: {error}", file=sys.stderr)
        return 1
    args.commit_file.write_text(commit, encoding="utf-8")
    print(f"{args.model}@{commit}: {len(digests)} files and {MODEL_SUMS_FILE} in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
