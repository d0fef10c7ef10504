"""Checkpoint requests from trainwarden, seen from inside the training process, and their acknowledgement.

The request arrives as the pod annotation `trainwarden.dev/checkpoint-request` in the downward-API file of the
pod's annotations (`/etc/trainwarden/annotations`, or `$TRAINWARDEN_ANNOTATIONS_FILE`); the answer leaves as two
metrics of the progress the job reports anyway: `checkpoint_step` (the step the checkpoint holds) and
`checkpoint_request_id` (the request it answers, 0 for a checkpoint nobody asked for). PROTOCOL.md has the whole
exchange.

[`CheckpointRequests`] is the state of one process: which request is pending, which ones it answered, and the
metrics of its last checkpoint, which stay in every later report (the endpoint keeps only the latest report, and
a watch event may be missed, so a one-off value could be lost). Reading the file is rate-limited and cheap (one
`open` + `read` of a small file at most once per `poll_interval`); nothing here raises into the training loop: a
missing or malformed file, a malformed request, an unreachable endpoint are logged (once per distinct problem)
and read as "no request".
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from . import _distributed
from .annotations import parse_annotations
from .request import (
    ANNOTATION,
    DEFAULT_ANNOTATIONS_FILE,
    ENV_ANNOTATIONS_FILE,
    METRIC_REQUEST_ID,
    METRIC_STEP,
    CheckpointRequest,
    RequestError,
    parse_request,
)
from .status import MetricValue, StatusReporter

__all__ = ["Acknowledgement", "CheckpointRequests"]

_log = logging.getLogger("trainwarden")

DEFAULT_POLL_INTERVAL = 1.0


@dataclass(frozen=True)
class Acknowledgement:
    """The last checkpoint this process reported: its step, the request it answered (0: none), and when."""

    step: int
    request_id: int
    at: datetime


class CheckpointRequests:
    """Checkpoint requests for one training process; thread-safe.

    `path` defaults to `$TRAINWARDEN_ANNOTATIONS_FILE`, else `/etc/trainwarden/annotations`; the file is re-read
    at most once per `poll_interval` seconds, when the training code asks. `clock` (monotonic seconds) is for tests.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        reporter: StatusReporter | None = None,
    ) -> None:
        self._path = Path(path) if path is not None else None
        self._poll_interval = poll_interval
        self._clock = clock
        self._lock = threading.RLock()
        self._read_at: float | None = None
        self._in_file: CheckpointRequest | None = None
        self._noticed: CheckpointRequest | None = None
        self._noticed_at: float = 0.0
        self._answered_id = 0
        self._last: Acknowledgement | None = None
        self._metrics_read = False
        self._problems: set[str] = set()
        self.reporter = reporter if reporter is not None else StatusReporter(self._metrics_for_report)

    @property
    def path(self) -> Path:
        """The annotations file this process reads."""
        if self._path is not None:
            return self._path
        return Path(os.environ.get(ENV_ANNOTATIONS_FILE) or DEFAULT_ANNOTATIONS_FILE)

    @property
    def last(self) -> Acknowledgement | None:
        """The last checkpoint acknowledged by this process, if any."""
        with self._lock:
            return self._last

    def pending(self) -> CheckpointRequest | None:
        """The request this process has not answered yet, if any: the one in the file (re-read at most once per
        poll interval) or one noticed earlier and not yet acknowledged, whichever is newer. Never raises."""
        try:
            with self._lock:
                self._refresh()
                candidates = [r for r in (self._in_file, self._noticed) if r is not None and r.id > self._answered_id]
                return max(candidates, key=lambda r: r.id, default=None)
        except Exception as err:  # a bug here must not stop training
            self._problem("unexpected", f"trainwarden: reading checkpoint requests failed unexpectedly: {err!r}")
            return None

    def requested(self, *, all_ranks: bool = False) -> bool:
        """Whether a checkpoint is requested: save, then call acknowledge(step).

        With `all_ranks=True` every rank of a torch.distributed job must call this at the same point of its loop:
        the ranks agree (an all-reduce of the newest request id any of them sees) and all get the same answer,
        so they all save at the same step. Without it each process answers from its own pod's file, which the
        kubelets of different nodes refresh at different times.
        """
        return self.agree(all_ranks=all_ranks) is not None

    def agree(self, *, all_ranks: bool = False) -> CheckpointRequest | None:
        """The request to answer now (None: no checkpoint requested); acknowledge() answers it.

        `all_ranks`: as for requested(). A collective that fails raises, as the training's own collectives
        would: a rank that went on alone would leave the others waiting.
        """
        request = self.pending()
        if all_ranks:
            local_id = request.id if request is not None else 0
            agreed_id = _distributed.max_across_ranks(local_id)
            if agreed_id == 0:
                request = None
            elif agreed_id != local_id:
                # Another rank's pod saw a newer request first: every rank answers that one.
                request = CheckpointRequest(id=agreed_id, reason="(seen by another rank)", requested_at=None)
        if request is None:
            return None
        with self._lock:
            if self._noticed is None or self._noticed.id != request.id:
                self._noticed, self._noticed_at = request, self._clock()
                reason = f": {request.reason}" if request.reason else ""
                _log.info("trainwarden: checkpoint requested (request %d%s)%s", request.id, reason, _age(request))
        return request

    def acknowledge(self, step: int) -> None:
        """Records a checkpoint that holds training step `step` and reports it.

        It answers the request that requested()/agree() last returned, if that one is still unanswered;
        otherwise it reports a checkpoint nobody asked for (request id 0), which trainwarden still counts as the
        job's last checkpoint. Call it after the checkpoint is completely written. Never raises.
        """
        try:
            self._acknowledge(int(step))
        except Exception as err:
            self._problem("unexpected-ack", f"trainwarden: acknowledging a checkpoint failed unexpectedly: {err!r}")

    def _acknowledge(self, step: int) -> None:
        with self._lock:
            answered = self._noticed
            request_id = answered.id if answered is not None and answered.id > self._answered_id else 0
            self._answered_id = max(self._answered_id, request_id)
            self._noticed = None
            self._last = Acknowledgement(step=step, request_id=request_id, at=datetime.now(timezone.utc))
            saved_in = self._clock() - self._noticed_at if request_id else None
            carried = self._metrics_read or self.reporter.has_reported
        if request_id:
            _log.info("trainwarden: checkpoint at step %d answers request %d (%.1f s after it was noticed)",
                      step, request_id, saved_in)
        else:
            _log.info("trainwarden: checkpoint at step %d (not requested)", step)
        if self.reporter.has_reported:
            self.reporter.push_checkpoint()
        elif not carried and _distributed.rank() == 0:  # other ranks do not report
            self._problem(
                "not-carried",
                "trainwarden: no progress report of this process has carried checkpoint metrics yet; report "
                "with trainwarden.update_trainjob_status, or add trainwarden.checkpoint_metrics() to the metrics "
                "of kubeflow.trainer.update_trainjob_status, or trainwarden will not see this checkpoint",
            )

    def _mark_carried(self) -> None:
        """A framework callback of this package carries the checkpoint metrics in the job's reports."""
        with self._lock:
            self._metrics_read = True

    def metrics(self) -> dict[str, int]:
        """The metrics of the last checkpoint, to add to every progress report ({} before the first one)."""
        with self._lock:
            self._metrics_read = True
            return self._metrics_unlocked()

    def _metrics_for_report(self) -> Mapping[str, MetricValue]:
        with self._lock:
            return self._metrics_unlocked()

    def _metrics_unlocked(self) -> dict[str, int]:
        if self._last is None:
            return {}
        return {METRIC_STEP: self._last.step, METRIC_REQUEST_ID: self._last.request_id}

    def _refresh(self) -> None:
        now = self._clock()
        if self._read_at is not None and now - self._read_at < self._poll_interval:
            return
        self._read_at = now
        self._in_file = self._read()

    def _read(self) -> CheckpointRequest | None:
        path = self.path
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            in_kubernetes = "KUBERNETES_SERVICE_HOST" in os.environ or ENV_ANNOTATIONS_FILE in os.environ
            self._problem(
                f"missing:{path}",
                f"trainwarden: {path} does not exist, so checkpoint requests cannot reach this process (mount "
                f"the pod's annotations there with a downward-API volume, see examples/checkpoint)",
                level=logging.WARNING if in_kubernetes else logging.INFO,
            )
            return None
        except OSError as err:
            self._problem(f"unreadable:{path}", f"trainwarden: cannot read {path}: {err}")
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            self._problem(f"utf8:{path}", f"trainwarden: {path} is not UTF-8 ({err}); no checkpoint request read")
            return None
        annotations = parse_annotations(text, str(path))
        for error in annotations.errors:
            self._problem(f"line:{error}", f"trainwarden: {error}")
        value = annotations.values.get(ANNOTATION)
        if value is None:
            return None
        try:
            return parse_request(value)
        except RequestError as err:
            self._problem(f"request:{value}", f"trainwarden: {path}: {ANNOTATION} is not a valid request: {err}")
            return None

    def _problem(self, key: str, message: str, level: int = logging.WARNING) -> None:
        with self._lock:
            first = key not in self._problems
            if first and len(self._problems) < 1000:
                self._problems.add(key)
        _log.log(level if first else logging.DEBUG, "%s", message)


def _age(request: CheckpointRequest) -> str:
    if request.requested_at is None:
        return ""
    seconds = (datetime.now(timezone.utc) - request.requested_at).total_seconds()
    return f", {seconds:.1f} s after it was made"
