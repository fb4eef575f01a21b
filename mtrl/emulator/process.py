"""Start MiniStack as a child process bound to 127.0.0.1 on a free port, wait for health, stop it cleanly."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from mtrl.envs.registry import project_root

ACCOUNT_ID = "123456789012"
REGION = "us-east-1"
EMULATOR_VENV = ".venv-emulator"
HEALTH_PATH = "/_ministack/health"


class EmulatorError(RuntimeError):
    """The emulator is missing, did not start, or stopped unexpectedly (the message says what to do)."""


def emulator_python(root: Path | None = None) -> Path:
    return (root or project_root()) / EMULATOR_VENV / "bin" / "python"


def find_emulator(root: Path | None = None) -> Path | None:
    """The ``ministack`` entry point in ``.venv-emulator`` (created by ``make emulator``), or None."""
    executable = (root or project_root()) / EMULATOR_VENV / "bin" / "ministack"
    return executable if executable.is_file() else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Emulator:
    """A MiniStack process owned by this object: ``with Emulator() as emu: boto3.client(..., **emu.client_kwargs)``.

    Its state (S3 objects, logs) lives in a private temporary directory removed on ``stop``. Extra
    environment variables (e.g. ``SFN_WAIT_SCALE``) pass through ``environ``.
    """

    def __init__(
        self,
        *,
        executable: Path | None = None,
        port: int | None = None,
        environ: dict[str, str] | None = None,
        startup_timeout_s: float = 30.0,
        log_path: Path | None = None,
    ) -> None:
        found = executable or find_emulator()
        if found is None:
            raise EmulatorError(
                f"the emulator is not installed: run `make emulator` to create {EMULATOR_VENV}/ "
                "(MiniStack, pinned in requirements/emulator.txt)"
            )
        self.executable = found
        self.port = port or free_port()
        self.extra_environ = dict(environ or {})
        self.startup_timeout_s = startup_timeout_s
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._log_path = log_path
        self._log: IO[bytes] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``boto3.client``/``Session.client`` that target this emulator."""
        return {
            "endpoint_url": self.endpoint_url,
            "region_name": REGION,
            "aws_access_key_id": "test",
            "aws_secret_access_key": "test",  # the emulator's fixed dummy credentials
        }

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    def environment(self) -> dict[str, str]:
        """The child's environment: loopback only, our fixed account, no optional listeners, private dirs."""
        assert self._workdir is not None
        work = Path(self._workdir.name)
        env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
        env.update(
            {
                "BIND_HOST": "127.0.0.1",
                "MINISTACK_HOST": "127.0.0.1",  # what Lambda subprocesses use to call back into the emulator
                "GATEWAY_PORT": str(self.port),
                "MINISTACK_ACCOUNT_ID": ACCOUNT_ID,
                "MINISTACK_REGION": REGION,
                "SFTP_ENABLED": "0",  # no listeners beyond the gateway port
                "IOT_MTLS_ENABLED": "0",
                "PERSIST_STATE": "0",
                "S3_PERSIST": "0",
                "STATE_DIR": str(work / "state"),
                "S3_DATA_DIR": str(work / "s3"),
                "TMPDIR": str(work),
                "AWS_ACCESS_KEY_ID": "test",
                "AWS_SECRET_ACCESS_KEY": "test",
                "AWS_DEFAULT_REGION": REGION,
            }
        )
        env.update(self.extra_environ)
        return env

    def start(self) -> Self:
        if self._process is not None:
            raise EmulatorError("the emulator is already running")
        self._workdir = tempfile.TemporaryDirectory(prefix="mtrl-emulator-")
        if self._log_path is None:
            self._log_path = Path(self._workdir.name) / "ministack.log"
        self._log = self._log_path.open("wb")
        started = time.monotonic()
        self._process = subprocess.Popen(
            [str(self.executable)],
            env=self.environment(),
            cwd=self._workdir.name,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, so stop() also ends Lambda subprocesses
        )
        try:
            self._wait_healthy(started)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _wait_healthy(self, started: float) -> None:
        assert self._process is not None
        while True:
            if self._process.poll() is not None:
                raise EmulatorError(
                    f"the emulator exited with code {self._process.returncode} while starting; "
                    f"last log lines:\n{self.log_tail()}"
                )
            if self.healthy():
                return
            if time.monotonic() - started > self.startup_timeout_s:
                raise EmulatorError(
                    f"the emulator did not report healthy on {self.endpoint_url}{HEALTH_PATH} within "
                    f"{self.startup_timeout_s:.0f} s; last log lines:\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint_url}{HEALTH_PATH}", timeout=2) as response:  # noqa: S310 - fixed loopback URL
                document = json.loads(response.read().decode("utf-8"))
        except (urllib.error.URLError, OSError, ValueError):
            return False
        services = document.get("services", {}) if isinstance(document, dict) else {}
        return bool(services) and services.get("cloudformation") in {"available", "running"}

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        if self._log_path is None or not self._log_path.exists():
            return "(no log)"
        text = self._log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self, *, timeout_s: float = 10.0) -> None:
        """SIGTERM the emulator's process group, SIGKILL it after ``timeout_s``; idempotent."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=timeout_s)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._workdir is not None:
            keep_log = self._log_path is not None and not self._log_path.is_relative_to(self._workdir.name)
            if not keep_log:
                self._log_path = None
            self._workdir.cleanup()
            self._workdir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
