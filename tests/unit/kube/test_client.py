"""The Kubernetes client sends its bearer token only to the configured endpoint (issue 38 item 3): a redirect is an
error and is never followed, and plain http is accepted only on a loopback host."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from mtrl.kube.client import KubeClient, KubeError, check_endpoint
from tests.http_serving import serving


class _Recorder(BaseHTTPRequestHandler):
    """Answers every request with ``answer`` (status, headers); records the Authorization header it was sent."""

    seen: ClassVar[list[tuple[str, str | None]]]
    answer: ClassVar[tuple[int, dict[str, str]]]

    def _reply(self) -> None:
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        status, headers = type(self).answer
        body = json.dumps({"kind": "Status", "message": "ok"}).encode()
        self.send_response(status)
        for name, value in {**headers, "Content-Type": "application/json"}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _reply

    def log_message(self, *args: Any) -> None:
        pass


def _server(answer: tuple[int, dict[str, str]]) -> ThreadingHTTPServer:
    handler = type("Handler", (_Recorder,), {"seen": [], "answer": answer})
    return ThreadingHTTPServer(("127.0.0.1", 0), handler)


def _url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_refused_and_the_token_never_reaches_its_target(status: int) -> None:
    with serving(_server((200, {}))) as elsewhere:
        target = f"{_url(elsewhere)}/steal"
        with serving(_server((status, {"Location": target}))) as api:
            client = KubeClient(_url(api), token=lambda: "presigned-sts-token")
            with pytest.raises(KubeError, match=r"redirect to .*/steal.* refused") as raised:
                client.request("GET", "/api/v1/namespaces")
            assert raised.value.status == status
            assert api.RequestHandlerClass.seen == [("/api/v1/namespaces", "Bearer presigned-sts-token")]  # type: ignore[attr-defined]
        assert elsewhere.RequestHandlerClass.seen == []  # type: ignore[attr-defined]


def test_a_plain_answer_still_works() -> None:
    with serving(_server((200, {}))) as api:
        assert KubeClient(_url(api), token=lambda: "t").request("GET", "/version") == {
            "kind": "Status",
            "message": "ok",
        }


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://ABCDEF.gr7.us-east-1.eks.amazonaws.com",
        "https://ABCDEF.gr7.us-east-1.eks.amazonaws.com/",
        "https://10.0.0.1:6443",
        "http://127.0.0.1:8080",
        "http://localhost:8080",
        "http://[::1]:8080",
    ],
)
def test_https_or_a_loopback_test_server_is_accepted(endpoint: str) -> None:
    assert check_endpoint(endpoint) == endpoint.rstrip("/")


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://localhost.attacker.example",
        "http://localhost.attacker.example:80/",
        "http://127.0.0.1.nip.io",
        "http://localhostattacker.example",
        "http://10.0.0.1:6443",
        "http://example.com@127.0.0.1",  # credentials in the URL
        "https://user:secret@cluster.example",
        "https://cluster.example/?next=http://attacker.example",
        "https://cluster.example/#fragment",
        "ftp://cluster.example",
        "file:///etc/passwd",
        "https://",
        "https://cluster.example:notaport",
        "cluster.example",
    ],
)
def test_anything_else_is_refused(endpoint: str) -> None:
    with pytest.raises(ValueError, match="Kubernetes endpoint"):
        KubeClient(endpoint, token=lambda: "t")
