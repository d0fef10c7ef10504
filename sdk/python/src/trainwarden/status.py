"""Progress reports to the Kubeflow Trainer status endpoint, with the last checkpoint riding along.

The endpoint (`POST .../trainjobs/{name}/status`, upstream `pkg/statusserver`; `trainwarden watch` serves the same
locally) replaces the whole `trainerStatus` on every POST: a report that carried only the acknowledgement would
wipe the loss and every other metric until the next full report. So an acknowledgement never travels alone here:
[`StatusReporter.report`] adds the checkpoint metrics to every report the job makes, and
[`StatusReporter.push_checkpoint`] re-sends the job's last full report (progress, ETA, all its metrics) with the
new checkpoint metrics, so the acknowledgement is visible at once and nothing else disappears.

`update_trainjob_status` here is a drop-in for the Kubeflow SDK's function of that name (same arguments, same
environment, same 5 s throttle, 300 s token cache, 256-metric cap, 5 s timeout, `bool` result, never raises),
written with the standard library only.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from datetime import datetime, timezone

__all__ = ["ENV_CA_CERT", "ENV_SERVER_URL", "ENV_TOKEN", "MetricValue", "StatusReporter"]

#: The endpoint URL (injected into trainer pods by Kubeflow Trainer's TrainJobStatus plugin, or by `watch`).
ENV_SERVER_URL = "KUBEFLOW_TRAINER_SERVER_URL"
#: A file path: the CA that signed the endpoint's certificate.
ENV_CA_CERT = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
#: A file path: the bearer token (a projected service-account token, rotated by the kubelet).
ENV_TOKEN = "KUBEFLOW_TRAINER_SERVER_TOKEN"

MetricValue = float | int | str

_log = logging.getLogger("trainwarden")

MIN_INTERVAL_SECONDS = 5.0  # the Kubeflow SDK's and KubeflowCallback's throttle
TOKEN_CACHE_SECONDS = 300.0
MAX_METRICS = 256  # the TrainJob CRD's maxItems
TIMEOUT_SECONDS = 5.0


class StatusReporter:
    """Sends `trainerStatus` updates for one process; thread-safe.

    `checkpoint_metrics` is called at every report and its metrics go first (so the 256-metric cap never drops
    them; a job metric of the same name is replaced).
    """

    def __init__(
        self,
        checkpoint_metrics: Callable[[], Mapping[str, MetricValue]],
        *,
        min_interval: float = MIN_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._checkpoint_metrics = checkpoint_metrics
        self._min_interval = min_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last_sent: float | None = None
        self._token: str | None = None
        self._token_read: float = 0.0
        self._ssl: tuple[str | None, ssl.SSLContext | None] | None = None
        # The job's last report as it gave it (before the checkpoint metrics are added), for push_checkpoint.
        self._last_report: tuple[int | None, int | None, dict[str, MetricValue]] | None = None
        self._warned: set[str] = set()

    @property
    def has_reported(self) -> bool:
        """Whether the job has reported through this reporter (so push_checkpoint has something to re-send)."""
        with self._lock:
            return self._last_report is not None

    def report(
        self,
        progress_percent: int | None = None,
        estimated_remaining_seconds: int | None = None,
        metrics: Mapping[str, MetricValue] | None = None,
        *,
        force: bool = False,
        send: bool = True,
    ) -> bool:
        """Reports progress (plus the checkpoint metrics); at most once per 5 s unless `force`.

        Returns whether the endpoint accepted it. A throttled call (or one with `send=False`) still becomes the
        report push_checkpoint re-sends, so an acknowledgement goes out with the newest values the job gave.
        """
        try:
            with self._lock:
                self._last_report = (progress_percent, estimated_remaining_seconds, dict(metrics or {}))
            return self._send(force=force) if send else False
        except Exception as err:  # never into the training loop
            self._warn_once("unexpected", f"trainwarden: progress report failed unexpectedly: {err!r}")
            return False

    def due(self) -> bool:
        """Whether a report now would be sent (an endpoint is configured and the 5 s throttle has passed): lets a
        caller skip gathering metrics for a report that would be dropped."""
        if not os.environ.get(ENV_SERVER_URL):
            return False
        with self._lock:
            return self._last_sent is None or self._clock() - self._last_sent >= self._min_interval

    def push_checkpoint(self) -> bool:
        """Re-sends the job's last report with the current checkpoint metrics, now (not throttled).

        Does nothing and returns False when the job has not reported through this reporter: the
        acknowledgement then rides the job's next report (see checkpoint_metrics()).
        """
        try:
            if not self.has_reported:
                return False
            return self._send(force=True)
        except Exception as err:
            self._warn_once("unexpected", f"trainwarden: progress report failed unexpectedly: {err!r}")
            return False

    def _send(self, *, force: bool) -> bool:
        url = os.environ.get(ENV_SERVER_URL)
        if not url:
            return False
        with self._lock:
            now = self._clock()
            if not force and self._last_sent is not None and now - self._last_sent < self._min_interval:
                return False
            if self._last_report is None:
                return False
            progress, eta, job_metrics = self._last_report
        token = self._read_token()
        if token is None:
            return False
        body = json.dumps({"trainerStatus": self._status(progress, eta, job_metrics)}).encode()
        request = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS, context=self._ssl_context()) as response:
                accepted = bool(response.status == 200)
        except urllib.error.HTTPError as err:
            detail = err.read(500).decode("utf-8", "replace")
            message = f"trainwarden: {url} refused a progress report: HTTP {err.code} {detail}"
            self._warn_once(f"http-{err.code}", message)
            return False
        except (OSError, ValueError) as err:  # URLError, timeouts, TLS errors, a malformed URL
            self._warn_once("unreachable", f"trainwarden: cannot reach the status endpoint {url}: {err}")
            return False
        if accepted:
            with self._lock:
                self._last_sent = now
        return accepted

    def _status(
        self, progress: int | None, eta: int | None, job_metrics: Mapping[str, MetricValue]
    ) -> dict[str, object]:
        status: dict[str, object] = {"lastUpdatedTime": datetime.now(timezone.utc).isoformat()}
        if progress is not None:
            status["progressPercentage"] = max(0, min(100, int(progress)))
        if eta is not None:
            status["estimatedRemainingSeconds"] = max(0, int(eta))
        merged: dict[str, MetricValue] = dict(self._checkpoint_metrics())
        for name, value in job_metrics.items():
            merged.setdefault(str(name), value)
        if len(merged) > MAX_METRICS:
            self._warn_once("truncated", f"trainwarden: {len(merged)} metrics, only the first {MAX_METRICS} are sent")
            merged = dict(list(merged.items())[:MAX_METRICS])
        if merged:
            status["metrics"] = [{"name": name, "value": str(value)} for name, value in merged.items()]
        return status

    def _read_token(self) -> str | None:
        path = os.environ.get(ENV_TOKEN)
        now = self._clock()
        with self._lock:
            if self._token is not None and now - self._token_read < TOKEN_CACHE_SECONDS:
                return self._token
        if not path:
            self._warn_once("no-token", f"trainwarden: {ENV_TOKEN} is not set: progress is not reported")
            return None
        try:
            with open(path, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as err:
            self._warn_once("token", f"trainwarden: cannot read the status token {path}: {err}")
            return None
        with self._lock:
            self._token, self._token_read = token, now
        return token

    def _ssl_context(self) -> ssl.SSLContext | None:
        ca = os.environ.get(ENV_CA_CERT) or None
        with self._lock:
            if self._ssl is not None and self._ssl[0] == ca:
                return self._ssl[1]
        context = ssl.create_default_context(cafile=ca) if ca and os.path.exists(ca) else None
        with self._lock:
            self._ssl = (ca, context)
        return context

    def _warn_once(self, kind: str, message: str) -> None:
        with self._lock:
            first = kind not in self._warned
            self._warned.add(kind)
        if first:
            _log.warning("%s (further failures of this kind are logged at debug level)", message)
        else:
            _log.debug("%s", message)
