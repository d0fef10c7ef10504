"""The checkpoint request trainwarden writes on a job's pods: its annotation, its JSON, and where the pod reads it.

See PROTOCOL.md next to this package for the whole exchange; this module holds its constants and the one parser
of the annotation's value, so the package and its tests cannot disagree with each other about the format.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime

__all__ = [
    "ANNOTATION",
    "DEFAULT_ANNOTATIONS_FILE",
    "ENV_ANNOTATIONS_FILE",
    "MAX_REQUEST_ID",
    "METRIC_REQUEST_ID",
    "METRIC_STEP",
    "CheckpointRequest",
    "RequestError",
    "parse_request",
]

#: The pod annotation that carries a pending request.
ANNOTATION = "trainwarden.dev/checkpoint-request"
#: Where the downward-API volume puts the pod's annotations (the examples mount it there).
DEFAULT_ANNOTATIONS_FILE = "/etc/trainwarden/annotations"
#: Overrides DEFAULT_ANNOTATIONS_FILE; `trainwarden watch` sets it to the plain file it writes.
ENV_ANNOTATIONS_FILE = "TRAINWARDEN_ANNOTATIONS_FILE"
#: The metric naming the step the last checkpoint holds.
METRIC_STEP = "checkpoint_step"
#: The metric naming the request the last checkpoint answered (0: a checkpoint nobody requested).
METRIC_REQUEST_ID = "checkpoint_request_id"
#: Request ids stay exact in a float64 (JSON numbers, metric values parsed as numbers).
MAX_REQUEST_ID = 2**53 - 1


class RequestError(ValueError):
    """The annotation's value is not a valid request; the message says which field and why."""


@dataclass(frozen=True)
class CheckpointRequest:
    """One request: `id` (a positive integer, larger than every earlier request's on the same job), a
    human-readable `reason`, and `requested_at` (when trainwarden wrote it; `None` if absent or unreadable)."""

    id: int
    reason: str
    requested_at: datetime | None


def parse_request(value: str) -> CheckpointRequest:
    """Parses the annotation's value: `{"id": 1767225600123, "reason": "...", "requestedAt": "...Z"}`.

    Only `id` is required to act on a request; `reason` defaults to "" and an unreadable `requestedAt` to `None`
    (both are only reported). Unknown fields are ignored, so later versions of trainwarden may add some.
    """
    try:
        doc = json.loads(value)
    except ValueError as err:
        raise RequestError(f"not JSON: {err}") from None
    if not isinstance(doc, dict):
        raise RequestError(f"not a JSON object but {type(doc).__name__}")
    raw_id = doc.get("id")
    # bool is an int in Python; a float with an integral value (1e3) is accepted as JSON does not tell them apart.
    if isinstance(raw_id, float) and math.isfinite(raw_id) and raw_id.is_integer():
        raw_id = int(raw_id)
    if isinstance(raw_id, bool) or not isinstance(raw_id, int):
        raise RequestError(f"id: want an integer, got {json.dumps(raw_id)}")
    if not 1 <= raw_id <= MAX_REQUEST_ID:
        raise RequestError(f"id: {raw_id} is outside 1..{MAX_REQUEST_ID}")
    reason = doc.get("reason", "")
    if not isinstance(reason, str):
        reason = json.dumps(reason)
    return CheckpointRequest(id=raw_id, reason=reason, requested_at=_parse_time(doc.get("requestedAt")))


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None
