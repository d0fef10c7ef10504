"""trainwarden's companion package for training code: checkpoint when trainwarden asks, and say so.

A plain loop::

    from trainwarden import acknowledge, checkpoint_requested, update_trainjob_status

    for step in range(start, total_steps):
        loss = train_step()
        update_trainjob_status(progress_percent=100 * step // total_steps, metrics={"loss": loss})
        if checkpoint_requested():
            save_checkpoint(step)
            acknowledge(step)

`trainwarden.transformers` and `trainwarden.lightning` do the same for transformers' Trainer and for
PyTorch Lightning. The core needs only the standard library; PROTOCOL.md describes the exchange.
"""

from __future__ import annotations

from collections.abc import Mapping

from .checkpoint import Acknowledgement, CheckpointRequests
from .request import ANNOTATION, DEFAULT_ANNOTATIONS_FILE, ENV_ANNOTATIONS_FILE, CheckpointRequest
from .status import MetricValue

__all__ = [
    "ANNOTATION",
    "DEFAULT_ANNOTATIONS_FILE",
    "ENV_ANNOTATIONS_FILE",
    "Acknowledgement",
    "CheckpointRequest",
    "CheckpointRequests",
    "acknowledge",
    "checkpoint_metrics",
    "checkpoint_requested",
    "default_requests",
    "pending_request",
    "update_trainjob_status",
]

__version__ = "0.1.0"

_default = CheckpointRequests()


def default_requests() -> CheckpointRequests:
    """The process-wide CheckpointRequests that the functions below (and the callbacks, by default) use."""
    return _default


def checkpoint_requested(*, all_ranks: bool = False) -> bool:
    """Whether trainwarden asks for a checkpoint now: save one, then call acknowledge(step).

    Cheap enough for every step (the file is re-read at most once a second). With `all_ranks=True` every rank
    must call it at the same point and all get the same answer (see CheckpointRequests.requested).
    """
    return _default.requested(all_ranks=all_ranks)


def pending_request() -> CheckpointRequest | None:
    """The unanswered request (id, reason, time), if any, without agreeing with other ranks."""
    return _default.pending()


def acknowledge(step: int) -> None:
    """Reports a completed checkpoint holding training step `step` (answering the pending request, if any)."""
    _default.acknowledge(step)


def checkpoint_metrics() -> dict[str, int]:
    """`checkpoint_step` and `checkpoint_request_id` of the last checkpoint, for a job that reports with the
    Kubeflow SDK: `update_trainjob_status(metrics={**checkpoint_metrics(), "loss": loss})`."""
    return _default.metrics()


def update_trainjob_status(
    progress_percent: int | None = None,
    estimated_remaining_seconds: int | None = None,
    metrics: Mapping[str, MetricValue] | None = None,
) -> bool:
    """The Kubeflow SDK's `update_trainjob_status` (same arguments, environment, 5 s throttle; never raises),
    with the last checkpoint's metrics added; acknowledge() re-sends the last report at once with them."""
    return _default.reporter.report(progress_percent, estimated_remaining_seconds, metrics)
