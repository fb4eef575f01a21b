"""Per-episode state for stateful tools: an in-memory SQLite database seeded from the task, and cleanup.

The SageMaker AI multi-turn RL best-practices post: a stateful tool (create a case, issue a refund) needs a sandbox that
lives for one episode only; every resource the agent creates is registered and removed in ``finally`` — on a normal end,
on max turns, on a crash, on a timeout. ``EpisodeState`` is that sandbox:

- ``db``: a private in-memory SQLite database (``sqlite3`` from the standard library), built from a schema
  and seed rows taken from the task, so every episode of a task starts from the same state and no episode
  sees another's writes;
- ``register(name, cleanup)``: any other resource (a temporary directory from ``temp_dir()``, a child
  process, a file) with the function that removes it;
- ``close()``: runs the cleanups in reverse order (each one even if another fails), closes the database;
  idempotent. The environment's own ``close()`` calls it and the drivers call that in ``finally``
  (``mtrl.contracts.environment.closing``).

``open_states()`` lists the states not yet closed in this process: tests use it to prove nothing leaked.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
import shutil
import sqlite3
import tempfile
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_OPEN: weakref.WeakSet[EpisodeState] = weakref.WeakSet()
_OPEN_LOCK = threading.Lock()


class StateError(ValueError):
    """The seed is unusable (bad schema, table or column name) or the state is already closed."""


def open_states() -> list[EpisodeState]:
    """Episode states created in this process and not closed yet (a leak check for tests and drivers)."""
    with _OPEN_LOCK:
        return [state for state in _OPEN if not state.closed]


def _identifier(name: str) -> str:
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise StateError(f"not a valid table or column name: {str(name)[:60]!r}")
    return '"' + name + '"'


@functools.lru_cache(maxsize=32)
def _schema_image(schema: str) -> bytes:
    """The empty database ``schema`` builds, as bytes: each episode loads it instead of re-running the script."""
    template = sqlite3.connect(":memory:")
    try:
        template.executescript(schema)
        return template.serialize()
    finally:
        template.close()


class EpisodeState:
    """One episode's sandbox: a seeded in-memory database plus registered resources, all freed by ``close()``.

    ``schema`` is SQL run with ``executescript`` (trusted: it comes from the environment's code, never from
    the policy); ``seed`` maps a table name to its rows (mappings of column → value, from the task).
    """

    def __init__(self, *, schema: str = "", seed: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> None:
        self.closed = False
        self._cleanups: list[tuple[str, Callable[[], None]]] = []
        self._lock = threading.Lock()
        # check_same_thread=False: the worker may score (result()) on another thread than the one that stepped.
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        try:
            if schema and hasattr(self.db, "deserialize"):  # SQLite's serialize API (absent from some builds)
                self.db.deserialize(_schema_image(schema))
            elif schema:
                self.db.executescript(schema)
            for table, rows in (seed or {}).items():
                self.insert(table, rows)
            self.db.commit()
        except (sqlite3.Error, StateError, TypeError, ValueError) as error:
            self.db.close()
            self.closed = True
            raise StateError(f"cannot seed the episode state: {error}") from None
        with _OPEN_LOCK:
            _OPEN.add(self)

    def insert(self, table: str, rows: Sequence[Mapping[str, Any]]) -> int:
        """Insert ``rows`` (column → value) into ``table`` with bound parameters; returns how many."""
        self._check_open()
        count = 0
        for row in rows:
            if not isinstance(row, Mapping) or not row:
                raise StateError(f"a row of '{table}' must be a non-empty object")
            columns = ", ".join(_identifier(column) for column in row)
            marks = ", ".join("?" for _ in row)
            self.db.execute(f"INSERT INTO {_identifier(table)} ({columns}) VALUES ({marks})", tuple(row.values()))  # noqa: S608 - names checked
            count += 1
        return count

    def rows(self, table: str, *, order_by: str = "rowid") -> list[dict[str, Any]]:
        """Every row of ``table`` as a mapping (for scoring the final state, or as execution input)."""
        self._check_open()
        cursor = self.db.execute(f"SELECT * FROM {_identifier(table)} ORDER BY {_identifier(order_by)}")  # noqa: S608
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def fingerprint(self) -> str:
        """SHA-256 of the database content (``iterdump``): equal fingerprints, equal state."""
        self._check_open()
        digest = hashlib.sha256()
        for statement in self.db.iterdump():
            digest.update(statement.encode("utf-8"))
            digest.update(b"\n")
        return digest.hexdigest()

    def register(self, name: str, cleanup: Callable[[], None]) -> None:
        """Register a resource the episode created and the function that removes it (run by ``close()``)."""
        with self._lock:
            if self.closed:
                cleanup()  # created after close: remove it at once rather than leak it
                raise StateError(f"episode state is closed; '{name}' was removed at once")
            self._cleanups.append((name, cleanup))

    def temp_dir(self, prefix: str = "mtrl-episode-") -> Path:
        """A fresh temporary directory, removed by ``close()``."""
        path = Path(tempfile.mkdtemp(prefix=prefix))
        self.register(f"directory {path}", lambda: shutil.rmtree(path, ignore_errors=True))
        return path

    @property
    def resources(self) -> list[str]:
        """Names of the registered resources not removed yet."""
        with self._lock:
            return [name for name, _ in self._cleanups]

    def close(self) -> None:
        """Remove every registered resource (newest first, each even if another fails), close the database.

        Idempotent. If a cleanup raised, the first error is re-raised after all the others ran.
        """
        with self._lock:
            if self.closed:
                return
            self.closed = True
            cleanups, self._cleanups = self._cleanups, []
        first: BaseException | None = None
        for _, cleanup in reversed(cleanups):
            try:
                cleanup()
            except Exception as error:  # keep going: one broken cleanup must not leak the rest
                first = first or error
        with contextlib.suppress(sqlite3.Error):
            self.db.close()
        if first is not None:
            raise first

    def _check_open(self) -> None:
        if self.closed:
            raise StateError("the episode state is closed")

    def __enter__(self) -> EpisodeState:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
