"""Rebuild ``data/`` (answers, allowed guesses, opener entropy) from the Debian SCOWL word-list packages.

Maintainer tool, not used at run time. Reproducible: the inputs are pinned by SHA-256 and the output is
sorted and deterministic. Get the inputs (no network beyond the Debian archive) with::

    apt-get install wamerican-small wamerican-huge     # SCOWL 2020.12.07, Debian 2020.12.07-2
    .venv/bin/python environments/wordle/build_word_lists.py

or ``apt-get download`` the two packages, ``dpkg-deb -x`` them and pass ``--dict-dir <dir>/usr/share/dict``.
Licence of the word lists: see ``data/LICENSE-SCOWL.txt`` (SCOWL's permissive copyright notice).

- answers: SCOWL size ≤ 35 (``american-english-small``), 5 lowercase ASCII letters, without inflected
  forms whose stem is itself a word (plurals, -s verbs, -ed pasts) and without ``data/excluded_answers.txt``.
- allowed guesses: SCOWL size ≤ 80 (``american-english-huge``), same shape rule, plus every answer, minus
  the exclusions (so an excluded word is neither a possible answer nor a valid guess).
- entropy: bits of information of each allowed guess's feedback-pattern distribution over the answers,
  used to reward a good opener.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
SOURCES = {
    "american-english-small": "a6e2bc32526c38fa082ffbdb527ad9999e41b0a712d06e8415244068454d4d55",
    "american-english-huge": "ffd71db7e021907dbe4cbac17959d3504ff0594ae35c686ab7016b9a6b755fbb",
}
FIVE = re.compile(r"^[a-z]{5}$")


def read_words(path: Path, expected_sha256: str) -> set[str]:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != expected_sha256:
        raise SystemExit(f"{path}: SHA-256 {digest} does not match the pinned {expected_sha256}")
    return {line.strip() for line in path.read_text(encoding="utf-8").splitlines()}


def is_inflection(word: str, dictionary: set[str]) -> bool:
    """True for a regular inflection of another dictionary word (cats, boxes, aimed, baked, tried)."""
    if word.endswith("s") and not word.endswith("ss") and word[:-1] in dictionary:
        return True
    if word.endswith("es") and word[:-2] in dictionary:
        return True
    if word.endswith("ies") and word[:-3] + "y" in dictionary:
        return True
    if word.endswith("ed") and (word[:-2] in dictionary or word[:-1] in dictionary):
        return True
    return word.endswith("ied") and word[:-3] + "y" in dictionary


def entropies(guesses: list[str], answers: list[str]) -> list[float]:
    """Shannon entropy (bits) of the feedback pattern of each guess over the uniformly likely answers."""
    ans = np.array([[ord(c) - 97 for c in w] for w in answers], dtype=np.int8)
    result: list[float] = []
    for guess in guesses:
        g = np.array([ord(c) - 97 for c in guess], dtype=np.int8)
        green = ans == g  # (N, 5)
        # Unmatched answer letter counts per row, then yellow assignment left to right.
        remaining = np.zeros((len(answers), 26), dtype=np.int8)
        for i in range(5):
            np.add.at(remaining, (np.nonzero(~green[:, i])[0], ans[~green[:, i], i]), 1)
        code = np.zeros(len(answers), dtype=np.int32)
        for i in range(5):
            letter = g[i]
            yellow = (~green[:, i]) & (remaining[:, letter] > 0)
            remaining[yellow, letter] -= 1
            mark = np.where(green[:, i], 2, np.where(yellow, 1, 0))
            code = code * 3 + mark
        counts = np.bincount(code, minlength=243).astype(np.float64)
        p = counts[counts > 0] / len(answers)
        result.append(round(float(-(p * np.log2(p)).sum()), 4))
    return result


def build(dict_dir: Path, *, with_entropy: bool = True) -> dict[str, str]:
    small = read_words(dict_dir / "american-english-small", SOURCES["american-english-small"])
    huge = read_words(dict_dir / "american-english-huge", SOURCES["american-english-huge"])
    excluded = {
        line.strip()
        for line in (DATA / "excluded_answers.txt").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    dictionary = small | huge
    answers = sorted(w for w in small if FIVE.match(w) and not is_inflection(w, dictionary) and w not in excluded)
    allowed = sorted(({w for w in huge if FIVE.match(w)} | set(answers)) - excluded)
    outputs = {"answers.txt": "\n".join(answers) + "\n", "allowed_guesses.txt": "\n".join(allowed) + "\n"}
    if with_entropy:  # the slow part (seconds): tests check the lists and sample the entropy instead
        entropy = dict(zip(allowed, entropies(allowed, answers), strict=True))
        outputs["word_entropy.json"] = json.dumps(entropy, separators=(",", ":"), sort_keys=True) + "\n"
    return outputs


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.exists() else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dict-dir", type=Path, default=Path("/usr/share/dict"))
    parser.add_argument("--check", action="store_true", help="only compare with the committed files")
    args = parser.parse_args(argv)
    outputs = build(args.dict_dir)
    stale = [name for name, text in outputs.items() if _read(DATA / name) != text]
    if args.check:
        print("up to date" if not stale else f"stale: {', '.join(stale)}")
        return 1 if stale else 0
    for name, text in outputs.items():
        (DATA / name).write_text(text, encoding="utf-8")
    print({name: text.count("\n") for name, text in outputs.items() if name.endswith(".txt")})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
