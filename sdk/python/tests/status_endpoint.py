"""A real HTTPS server that speaks the Kubeflow Trainer status endpoint, for the tests.

Behaves like upstream `pkg/statusserver` as far as a reporting client can tell (the order of checks and the
codes are those of engine/local/src/status_api.rs, which mirrors upstream): `POST
/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}/status` with `Authorization: Bearer
<token>`; 404 for other paths, 403 for a wrong token, 422 for a body Go would not decode into
`UpdateTrainJobStatusRequest` or that the TrainJob CRD rejects (progress 0..100, ETA >= 0, <= 256 metrics, names
and values 1..64 characters, an RFC 3339 `lastUpdatedTime`); otherwise 200, and the `trainerStatus` **replaces**
the stored one (server-side apply of the whole field), as on a cluster.

TLS with a CA and a serving certificate made by the `openssl` command for 127.0.0.1, like the CA and token files
Kubeflow Trainer (or `trainwarden watch`) gives a pod.
"""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PATH_RE = re.compile(r"^/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/([^/]+)/trainjobs/([^/]+)/status$")
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
INT32_MAX = 2**31 - 1


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a certificate for 127.0.0.1/localhost signed by it: (ca.crt, server.crt, server.key)."""
    ca_key, ca_crt = directory / "ca.key", directory / "ca.crt"
    key, csr, crt = directory / "server.key", directory / "server.csr", directory / "server.crt"
    ext = directory / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca_crt),
        "-days", "2", "-subj", "/CN=trainwarden-test-ca")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(crt), "-days", "2", "-extfile", str(ext))
    return ca_crt, crt, key


@dataclass
class Accepted:
    """One accepted update: the trainerStatus as stored."""

    namespace: str
    name: str
    status: dict[str, Any]

    def metrics(self) -> dict[str, str]:
        return {m["name"]: m["value"] for m in self.status.get("metrics", [])}


@dataclass
class StatusEndpoint:
    """The server's state: what it accepted, in order, and what it answers."""

    namespace: str
    name: str
    token: str
    accepted: list[Accepted] = field(default_factory=list)
    refused: list[tuple[int, str]] = field(default_factory=list)
    fail_with: int | None = None  # answer every request with this code (e.g. 500), for failure tests
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""
    ca_file: Path | None = None

    @property
    def current(self) -> dict[str, Any] | None:
        """The TrainJob's `status.trainerStatus` now (the last accepted update replaced the earlier ones)."""
        with self.lock:
            return self.accepted[-1].status if self.accepted else None

    def snapshot(self) -> list[Accepted]:
        with self.lock:
            return list(self.accepted)

    def handle(self, method: str, path: str, authorization: str | None, body: bytes) -> tuple[int, dict[str, Any]]:
        if self.fail_with is not None:
            return self._failure(self.fail_with, "Injected failure", "InternalError")
        match = PATH_RE.match(path)
        if method != "POST" or match is None:
            return self._failure(404, "Not found", "NotFound")
        parts = (authorization or "").split()
        if len(parts) != 2 or parts[0].lower() != "bearer" or parts[1] != self.token:
            return self._failure(403, "Forbidden", "Forbidden")
        try:
            request = json.loads(body)
            status = request.get("trainerStatus") if isinstance(request, dict) else None
            if not isinstance(request, dict) or (status is not None and not isinstance(status, dict)):
                raise ValueError("not an UpdateTrainJobStatusRequest")
            if status is not None:
                _check_decodes(status)
        except ValueError:
            return self._failure(422, "Invalid payload", "Invalid")
        if status is None:
            return 200, request
        namespace, name = match.groups()
        if (namespace, name) != (self.namespace, self.name):
            return self._failure(404, "Train job not found", "NotFound")
        problem = _crd_problem(status)
        if problem:
            return self._failure(422, problem, "Invalid")
        with self.lock:
            self.accepted.append(Accepted(namespace, name, status))
        return 200, request

    def _failure(self, code: int, message: str, reason: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.refused.append((code, message))
        return code, {"metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}


def _check_decodes(status: dict[str, Any]) -> None:
    """What Go's encoding/json would refuse when decoding into TrainerStatus."""
    for key in ("progressPercentage", "estimatedRemainingSeconds"):
        value = status.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or abs(value) > INT32_MAX):
            raise ValueError(key)
    metrics = status.get("metrics")
    if metrics is not None:
        if not isinstance(metrics, list):
            raise ValueError("metrics")
        for metric in metrics:
            if not isinstance(metric, dict) or not all(isinstance(metric.get(k, ""), str) for k in ("name", "value")):
                raise ValueError("metric")
    updated = status.get("lastUpdatedTime")
    if updated is not None and (not isinstance(updated, str) or not RFC3339.match(updated)):
        raise ValueError("lastUpdatedTime")


def _crd_problem(status: dict[str, Any]) -> str | None:
    """What the TrainJob CRD's schema refuses (the API server's 422)."""
    progress = status.get("progressPercentage")
    if progress is not None and not 0 <= progress <= 100:
        return f"status.trainerStatus.progressPercentage: Invalid value: {progress}"
    eta = status.get("estimatedRemainingSeconds")
    if eta is not None and eta < 0:
        return f"status.trainerStatus.estimatedRemainingSeconds: Invalid value: {eta}"
    metrics = status.get("metrics") or []
    if len(metrics) > 256:
        return f"status.trainerStatus.metrics: Too many: {len(metrics)}: must have at most 256 items"
    for i, metric in enumerate(metrics):
        for key in ("name", "value"):
            if not 1 <= len(metric.get(key, "")) <= 64:
                return f"status.trainerStatus.metrics[{i}].{key}: Invalid value: {metric.get(key)!r}"
    if "lastUpdatedTime" not in status:
        return "status.trainerStatus: Invalid value: must have lastUpdatedTime"
    return None


class _Handler(BaseHTTPRequestHandler):
    endpoint: StatusEndpoint

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        code, reply = self.server.endpoint.handle(  # type: ignore[attr-defined]
            self.command, self.path, self.headers.get("Authorization"), body
        )
        data = (json.dumps(reply) + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = _serve
    do_GET = _serve

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


class RunningServer:
    """Serves `endpoint` over HTTPS on a free loopback port until close()."""

    def __init__(self, endpoint: StatusEndpoint, certificates: tuple[Path, Path, Path]) -> None:
        ca, crt, key = certificates
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.endpoint = endpoint  # type: ignore[attr-defined]
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(crt), str(key))
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        endpoint.url = (
            f"https://127.0.0.1:{self.port}/apis/trainer.kubeflow.org/v1alpha1/namespaces/"
            f"{endpoint.namespace}/trainjobs/{endpoint.name}/status"
        )
        endpoint.ca_file = ca
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
