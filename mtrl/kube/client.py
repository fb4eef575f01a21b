"""A small Kubernetes API client over HTTPS (urllib): JSON requests with a bearer token, the cluster's CA, and one
token refresh on 401 (an EKS token lives 15 minutes; a long poll outlives it).

The bearer token is a presigned STS call that grants the cluster to whoever holds it, so it goes only to the
configured endpoint: redirects are never followed (a 3xx is an error naming where it pointed), and plain http is
accepted only for a loopback test server (``127.0.0.1``, ``::1``, ``localhost`` exactly).

Errors are ``KubeError`` with the HTTP status, so callers decide what 404 or 409 mean for them.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from mtrl.kube.token import TOKEN_LIFETIME_SECONDS

_TIMEOUT_SECONDS = 30
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


class KubeError(RuntimeError):
    """A Kubernetes API request failed: ``status`` is the HTTP status (0 when the server was not reached)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status

    @property
    def transient(self) -> bool:
        return self.status in {0, 429, 500, 502, 503, 504}


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """urllib follows 3xx answers by default, resending the Authorization header to whatever host they name."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises the 3xx as an HTTPError


def check_endpoint(endpoint: str) -> str:
    """``endpoint`` without a trailing slash, if it is an https URL (or http on a loopback host, for tests) with no
    credentials, query or fragment; ValueError otherwise."""
    try:
        parts = urlsplit(endpoint)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError:
        raise ValueError(f"Kubernetes endpoint {endpoint!r} is not a URL") from None
    if not host or parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        raise ValueError(f"Kubernetes endpoint {endpoint!r} must be scheme://host[:port][/path] and nothing else")
    if parts.scheme == "https" or (parts.scheme == "http" and host in _LOOPBACK_HOSTS):
        return endpoint.rstrip("/")
    raise ValueError(f"Kubernetes endpoint {endpoint!r} is not https")


class KubeClient:
    """``request(method, path, body)`` → the decoded JSON answer (``{}`` for an empty body)."""

    def __init__(
        self,
        endpoint: str,
        *,
        token: Callable[[], str],
        ca_pem: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._endpoint = check_endpoint(endpoint)
        self._new_token = token
        self._clock = clock
        self._token: str | None = None
        self._token_at = 0.0
        self.endpoint = self._endpoint
        self._ca_pem = ca_pem
        self._opener: urllib.request.OpenerDirector | None = None  # made on first use (an unreadable CA fails it)

    def _bearer(self, *, fresh: bool = False) -> str:
        if fresh or self._token is None or self._clock() - self._token_at > TOKEN_LIFETIME_SECONDS:
            self._token, self._token_at = self._new_token(), self._clock()
        return self._token

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        try:
            return self._send(method, path, body, content_type, self._bearer())
        except KubeError as error:
            if error.status != 401:
                raise
            return self._send(method, path, body, content_type, self._bearer(fresh=True))  # an expired token

    def text(self, path: str) -> str:
        """A plain-text answer (pod logs)."""
        answer = self.request("GET", path, content_type="text/plain")
        return answer if isinstance(answer, str) else json.dumps(answer)

    def _send(self, method: str, path: str, body: Any, content_type: str, token: str) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, */*"}
        if data is not None:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self._endpoint + path, data=data, method=method, headers=headers)  # noqa: S310
        try:
            with self._open(request) as response:
                raw = response.read().decode("utf-8", "replace")
                kind = response.headers.get("Content-Type", "")
        except urllib.error.HTTPError as error:
            if 300 <= error.code < 400:
                where = error.headers.get("Location", "nowhere") if error.headers else "nowhere"
                raise KubeError(
                    error.code, f"{method} {path}: HTTP {error.code} redirect to {where!r} refused (not followed)"
                ) from None
            detail = error.read().decode("utf-8", "replace")
            with contextlib.suppress(json.JSONDecodeError, AttributeError):  # a Status object names the cause
                detail = json.loads(detail).get("message", detail)
            raise KubeError(error.code, f"{method} {path}: HTTP {error.code} {detail[:500]}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as error:
            raise KubeError(0, f"{method} {path}: {error}") from None
        if not raw:
            return {}
        return json.loads(raw) if "json" in kind else raw

    def _open(self, request: urllib.request.Request) -> Any:
        if self._opener is None:
            handlers: list[urllib.request.BaseHandler] = [_RefuseRedirects()]
            if self._endpoint.startswith("https://"):
                try:
                    context = ssl.create_default_context(cadata=self._ca_pem)
                except (ssl.SSLError, ValueError, TypeError) as error:
                    raise KubeError(0, f"the cluster's CA certificate is unusable: {error}") from None
                handlers.append(urllib.request.HTTPSHandler(context=context))
            self._opener = urllib.request.build_opener(*handlers)
        return self._opener.open(request, timeout=_TIMEOUT_SECONDS)
