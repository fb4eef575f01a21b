"""Serve a test's real HTTP server on a thread, and stop it promptly.

``serve_forever`` notices ``shutdown()`` only at its next poll, every 0.5 s by default: every test with a server
waited half a second in its tear-down for nothing.
"""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

Server = TypeVar("Server", bound=socketserver.BaseServer)

POLL_SECONDS = 0.01


@contextmanager
def serving(server: Server) -> Iterator[Server]:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": POLL_SECONDS}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
