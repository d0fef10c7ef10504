"""The plain-loop helper on real files in the kubelet's format: requests seen, answered once, never raising."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

import trainwarden
from kubelet_files import AtomicVolume, request_value, write_plain
from trainwarden import ANNOTATION
from trainwarden.checkpoint import CheckpointRequests

BASE = {"jobset.sigs.k8s.io/jobset-name": "llm", "kubectl.kubernetes.io/default-container": "node"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def with_request(request_id: int, reason: str = "ETA passes the deadline") -> dict[str, str]:
    return {**BASE, ANNOTATION: request_value(request_id, reason)}


def test_a_request_through_the_atomic_volume(volume: AtomicVolume, fresh_default: CheckpointRequests) -> None:
    assert not trainwarden.checkpoint_requested()
    assert trainwarden.checkpoint_metrics() == {}

    reason = 'policy "deadlines"\nrule eta-past-deadline: ETA 31h > 24h — 日本 \\'
    volume.write(with_request(1767225600123, reason))
    assert trainwarden.checkpoint_requested()
    pending = trainwarden.pending_request()
    assert pending is not None
    assert (pending.id, pending.reason) == (1767225600123, reason)
    assert pending.requested_at is not None and pending.requested_at.year == 2026

    trainwarden.acknowledge(4200)
    assert trainwarden.checkpoint_metrics() == {"checkpoint_step": 4200, "checkpoint_request_id": 1767225600123}
    # The annotation is still there until trainwarden removes it: answered, so not requested again.
    assert not trainwarden.checkpoint_requested()

    volume.write(with_request(1767225600999))
    assert trainwarden.checkpoint_requested()
    trainwarden.acknowledge(5100)
    assert trainwarden.checkpoint_metrics() == {"checkpoint_step": 5100, "checkpoint_request_id": 1767225600999}

    volume.write(BASE)  # trainwarden removed the annotation
    assert not trainwarden.checkpoint_requested()
    # The metrics stay: every later report carries the last checkpoint.
    assert trainwarden.checkpoint_metrics()["checkpoint_step"] == 5100


def test_a_checkpoint_nobody_asked_for(volume: AtomicVolume, fresh_default: CheckpointRequests) -> None:
    volume.write(with_request(10))
    trainwarden.acknowledge(300)  # the job saved on its own schedule, before it looked at the request
    assert trainwarden.checkpoint_metrics() == {"checkpoint_step": 300, "checkpoint_request_id": 0}
    assert trainwarden.checkpoint_requested()  # still pending: that save did not answer it
    trainwarden.acknowledge(301)
    assert trainwarden.checkpoint_metrics() == {"checkpoint_step": 301, "checkpoint_request_id": 10}


def test_the_answer_goes_to_the_request_that_was_seen(volume: AtomicVolume, fresh_default: CheckpointRequests) -> None:
    volume.write(with_request(10))
    assert trainwarden.checkpoint_requested()
    volume.write(with_request(11))  # a newer request lands while the job saves for request 10
    trainwarden.acknowledge(500)
    assert trainwarden.checkpoint_metrics()["checkpoint_request_id"] == 10
    assert trainwarden.checkpoint_requested()
    trainwarden.acknowledge(510)
    assert trainwarden.checkpoint_metrics()["checkpoint_request_id"] == 11


def test_a_seen_request_stays_requested_until_answered(volume: AtomicVolume, fresh_default: CheckpointRequests) -> None:
    volume.write(with_request(10))
    assert trainwarden.checkpoint_requested()
    volume.write(BASE)  # timed out and removed before the job got to save
    assert trainwarden.checkpoint_requested()
    trainwarden.acknowledge(77)
    assert trainwarden.checkpoint_metrics()["checkpoint_request_id"] == 10
    assert not trainwarden.checkpoint_requested()


def test_a_restarted_process_answers_again(volume: AtomicVolume) -> None:
    """A container restart forgets what it answered; a request still on the pod is answered once more (which is
    why trainwarden removes the annotation once it is answered or timed out)."""
    volume.write(with_request(10))
    first = CheckpointRequests(poll_interval=0)
    assert first.requested()
    first.acknowledge(100)
    assert not first.requested()
    assert CheckpointRequests(poll_interval=0).requested()


def test_the_file_is_reread_at_most_once_per_poll_interval(volume: AtomicVolume) -> None:
    clock = Clock()
    requests = CheckpointRequests(volume.file, poll_interval=1.0, clock=clock)
    assert not requests.requested()
    volume.write(with_request(10))
    clock.now += 0.5
    assert not requests.requested()  # not re-read yet
    clock.now += 0.5
    assert requests.requested()


def test_readers_never_see_a_torn_file_during_swaps(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The kubelet's symlink swap: a reader sees the old or the new file, never a partial or missing one."""
    volume = AtomicVolume(tmp_path / "podinfo")
    volume.write(with_request(1, "x" * 3000))
    requests = CheckpointRequests(volume.file, poll_interval=0)
    stop = threading.Event()
    seen: set[int] = set()
    misses = 0

    def swap() -> None:
        n = 1
        while not stop.is_set():
            n += 1
            volume.write(with_request(n, "x" * 3000))

    writer = threading.Thread(target=swap)
    writer.start()
    try:
        with caplog.at_level(logging.DEBUG, logger="trainwarden"):
            reads = 0
            while reads < 200 or (len(seen) < 20 and reads < 5000):
                reads += 1
                request = requests.pending()
                if request is None:
                    misses += 1
                else:
                    seen.add(request.id)
    finally:
        stop.set()
        writer.join()
    assert misses == 0
    assert len(seen) > 10, "the writer swapped the file while the reader read it"
    assert not [r for r in caplog.records if r.levelno >= logging.DEBUG and "trainwarden" in r.getMessage()]


def test_local_mode_plain_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_default: CheckpointRequests
) -> None:
    """`trainwarden watch` writes a plain file (same format, replaced by rename) and points the variable at it."""
    path = tmp_path / "run" / "annotations"
    path.parent.mkdir()
    path.write_text("")  # watch creates it empty before the command starts
    monkeypatch.setenv("TRAINWARDEN_ANNOTATIONS_FILE", str(path))
    assert not trainwarden.checkpoint_requested()
    write_plain(path, {ANNOTATION: request_value(42, "by hand: kubectl trainwarden checkpoint")})
    assert trainwarden.checkpoint_requested()
    assert fresh_default.path == path


def test_default_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINWARDEN_ANNOTATIONS_FILE", raising=False)
    assert str(CheckpointRequests().path) == "/etc/trainwarden/annotations"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("not json", "not JSON"),
        ("[1]", "not a JSON object"),
        ('{"reason":"no id"}', "id: want an integer, got null"),
        ('{"id":"12"}', 'id: want an integer, got "12"'),
        ('{"id":true}', "id: want an integer, got true"),
        ('{"id":0}', "id: 0 is outside"),
        ('{"id":-3}', "id: -3 is outside"),
        ('{"id":9007199254740992}', "id: 9007199254740992 is outside 1..9007199254740991"),
        ('{"id":1.5}', "id: want an integer, got 1.5"),
    ],
)
def test_a_malformed_request_is_logged_once_and_ignored(
    volume: AtomicVolume, value: str, problem: str, caplog: pytest.LogCaptureFixture
) -> None:
    volume.write({**BASE, ANNOTATION: value})
    requests = CheckpointRequests(poll_interval=0)
    with caplog.at_level(logging.INFO, logger="trainwarden"):
        assert not requests.requested()
        assert not requests.requested()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"{ANNOTATION} is not a valid request: {problem}" in warnings[0]
    assert str(volume.file) in warnings[0]


def test_lenient_fields(volume: AtomicVolume) -> None:
    """Only the id is needed to act; an unknown field, a missing reason or an odd time do not stop a checkpoint."""
    volume.write({ANNOTATION: '{"id":1e3,"requestedAt":"yesterday","future":{"x":1}}'})
    request = CheckpointRequests(poll_interval=0).pending()
    assert request is not None
    assert (request.id, request.reason, request.requested_at) == (1000, "", None)


def test_a_malformed_file_never_raises(volume: AtomicVolume, caplog: pytest.LogCaptureFixture) -> None:
    requests = CheckpointRequests(volume.file, poll_interval=0)
    target = volume.directory / "..data" / "annotations"
    target.write_bytes(b'trainwarden.dev/checkpoint-request="\xff\xfe"\nother="\\z"')
    with caplog.at_level(logging.WARNING, logger="trainwarden"):
        assert not requests.requested()
    volume.file.unlink()
    assert not requests.requested()  # the file is gone (the symlink was removed)
    volume.file.symlink_to("..data/annotations")
    target.write_text('good="1"\n' + f"{ANNOTATION}=" + '"{\\"id\\":5}"\nbroken line')
    with caplog.at_level(logging.WARNING, logger="trainwarden"):
        assert requests.requested()  # a broken line elsewhere does not hide the request
    messages = "\n".join(r.getMessage() for r in caplog.records)
    assert "is not UTF-8" in messages
    assert "does not exist" in messages
    assert f"{volume.file}:3: not a key=\"value\" line" in messages


def test_missing_file_and_directory_never_raise(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    missing = CheckpointRequests(tmp_path / "nope" / "annotations", poll_interval=0)
    with caplog.at_level(logging.INFO, logger="trainwarden"):
        assert not missing.requested()
        assert not missing.requested()
    notes = [r for r in caplog.records if "does not exist" in r.getMessage()]
    assert len(notes) == 1 and "examples/checkpoint" in notes[0].getMessage()
    directory = CheckpointRequests(tmp_path, poll_interval=0)
    assert not directory.requested()
    missing.acknowledge(3)  # no file, no endpoint: still recorded, still no exception
    assert missing.metrics() == {"checkpoint_step": 3, "checkpoint_request_id": 0}


def test_the_file_appearing_later(tmp_path: Path) -> None:
    path = tmp_path / "annotations"
    requests = CheckpointRequests(path, poll_interval=0)
    assert not requests.requested()
    write_plain(path, {ANNOTATION: request_value(3)})
    assert requests.requested()
