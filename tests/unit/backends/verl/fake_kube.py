"""A fake Kubernetes API server over real HTTP (127.0.0.1, a thread): bearer tokens that expire, objects kept
by path, 404/409 as the API server answers them, RayJob → RayCluster like the KubeRay operator, and a RayCluster
that lingers a few reads after its RayJob is deleted (the finalizer and pod shutdown take time)."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mtrl.backends.verl.access import access_checks
from tests.http_serving import serving

RAY = "/apis/ray.io/v1"


@dataclass
class FakeKube:
    valid_tokens: set[str] = field(default_factory=set)
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)  # object path → object
    kuberay_installed: bool = True
    allowed: set[tuple[str, str]] = field(
        default_factory=lambda: {(verb, resource) for verb, _group, resource in access_checks()}
    )
    cluster_linger_reads: int = 0
    requests: list[tuple[str, str, int]] = field(default_factory=list)  # (method, path, status)
    reviews: list[dict[str, str]] = field(default_factory=list)  # resourceAttributes of every access review
    checked: list[tuple[str, str]] = field(default_factory=list)  # (verb, resource) of every namespaced request
    lingering: dict[str, int] = field(default_factory=dict)  # RayCluster path → reads left
    pod_log: str = "step 1\nstep 2\n"
    url: str = ""
    accept_eks_tokens: bool = False  # any presigned-STS token (the contract test signs real ones)

    def answer(self, method: str, raw_path: str, token: str | None, body: Any) -> tuple[int, Any]:
        eks_token = self.accept_eks_tokens and (token or "").startswith("k8s-aws-v1.")
        if token not in self.valid_tokens and not eks_token:
            return 401, {"kind": "Status", "message": "Unauthorized"}
        parsed = urllib.parse.urlparse(raw_path)
        path, query = parsed.path, urllib.parse.parse_qs(parsed.query)
        if path.startswith(RAY) and not self.kuberay_installed:
            return 404, {"kind": "Status", "message": "the server could not find the requested resource"}
        if path == RAY:
            return 200, {"kind": "APIResourceList", "resources": [{"name": "rayjobs"}, {"name": "rayclusters"}]}
        if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
            return self._review(body)
        return self._authorized(method, path, query, body)

    def _authorized(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        handler = {"POST": self._post, "DELETE": self._delete, "GET": self._get}.get(method)
        if handler is None:
            return 405, {"kind": "Status", "message": "method not allowed"}
        access = self.authorization(method, path)
        self.checked.append(access)
        if access not in self.allowed:
            return 403, {"kind": "Status", "reason": "Forbidden", "message": f"cannot {access[0]} {access[1]}"}
        return handler(path, query, body)

    @staticmethod
    def authorization(method: str, path: str) -> tuple[str, str]:
        """(verb, resource) as the API server's RBAC authorizer sees a namespaced request (subresources as
        ``pods/log``)."""
        parts = path.strip("/").split("/")
        index = parts.index("namespaces") + 2
        resource, rest = parts[index], parts[index + 1 :]
        if len(rest) > 1:
            resource = f"{resource}/{rest[1]}"
        verb = {"POST": "create", "DELETE": "delete"}.get(method) or ("get" if rest else "list")
        return verb, resource

    def _review(self, body: Any) -> tuple[int, Any]:
        attributes = body["spec"]["resourceAttributes"]
        self.reviews.append(attributes)
        allowed = (attributes["verb"], attributes["resource"]) in self.allowed
        return 201, {**body, "status": {"allowed": allowed}}

    def _post(self, path: str, _query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        name = body["metadata"]["name"]
        target = f"{path}/{name}"
        if target in self.objects:
            return 409, {"kind": "Status", "reason": "AlreadyExists", "message": f"{name} already exists"}
        self.objects[target] = {**body, "status": {}}
        if body.get("kind") == "RayJob":
            namespace = body["metadata"]["namespace"]
            cluster = f"{name}-x7k2p"
            self.objects[f"{RAY}/namespaces/{namespace}/rayclusters/{cluster}"] = {"metadata": {"name": cluster}}
            self.objects[target]["status"] = {"jobDeploymentStatus": "Initializing", "rayClusterName": cluster}
        return 201, self.objects[target]

    def _delete(self, path: str, _query: dict[str, list[str]], _body: Any) -> tuple[int, Any]:
        if path not in self.objects:
            return 404, {"kind": "Status", "reason": "NotFound", "message": "not found"}
        deleted = self.objects.pop(path)
        if deleted.get("kind") == "RayJob":
            cluster = deleted["status"].get("rayClusterName")
            namespace = deleted["metadata"]["namespace"]
            self.lingering[f"{RAY}/namespaces/{namespace}/rayclusters/{cluster}"] = self.cluster_linger_reads
        return 200, {"kind": "Status", "status": "Success"}

    def _get(self, path: str, query: dict[str, list[str]], _body: Any) -> tuple[int, Any]:
        if path.endswith("/rayclusters"):
            self._age_lingering()
            prefix = path + "/"
            items = [o for p, o in self.objects.items() if p.startswith(prefix)]
            return 200, {"kind": "RayClusterList", "items": items}
        if path.endswith("/pods"):
            selector = query.get("labelSelector", [""])[0]
            name = selector.removeprefix("job-name=")
            has_job = any(p.endswith(f"/rayjobs/{name}") for p in self.objects)
            return 200, {"items": [{"metadata": {"name": f"{name}-submit-abcde"}}] if has_job else []}
        if path.endswith("/log"):
            return 200, self.pod_log
        if path in self.objects:
            return 200, self.objects[path]
        return 404, {"kind": "Status", "reason": "NotFound", "message": f"{path} not found"}

    def _age_lingering(self) -> None:
        for path, left in list(self.lingering.items()):
            if left <= 0:
                self.objects.pop(path, None)
                del self.lingering[path]
            else:
                self.lingering[path] = left - 1

    def set_status(self, job_path: str, **status: Any) -> None:
        self.objects[job_path]["status"].update(status)


@contextmanager
def serve(fake: FakeKube) -> Iterator[FakeKube]:
    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            auth = self.headers.get("Authorization", "")
            token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
            status, answer = fake.answer(self.command, self.path, token, body)
            fake.requests.append((self.command, self.path, status))
            text = answer if isinstance(answer, str) else json.dumps(answer)
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if isinstance(answer, str) else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _handle

        def log_message(self, *_args: Any) -> None:
            pass

    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as server:
        fake.url = f"http://127.0.0.1:{server.server_address[1]}"
        yield fake
