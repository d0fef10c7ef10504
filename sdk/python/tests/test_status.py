"""The acknowledgement reaching a real HTTPS status endpoint, without the other metrics ever vanishing."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

import trainwarden
from kubelet_files import AtomicVolume, request_value
from status_endpoint import StatusEndpoint
from trainwarden import ANNOTATION
from trainwarden.checkpoint import CheckpointRequests
from trainwarden.status import StatusReporter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_plain_loop_reports_the_ack_at_once_and_keeps_it(
    endpoint: StatusEndpoint, volume: AtomicVolume, fresh_default: CheckpointRequests
) -> None:
    assert trainwarden.update_trainjob_status(progress_percent=1, estimated_remaining_seconds=900,
                                              metrics={"loss": 2.5, "current_step": 10})
    assert endpoint.current is not None
    assert endpoint.current["progressPercentage"] == 1
    assert endpoint.current["metrics"] == [{"name": "loss", "value": "2.5"}, {"name": "current_step", "value": "10"}]

    volume.write({ANNOTATION: request_value(1767225600123)})
    assert trainwarden.checkpoint_requested()
    trainwarden.acknowledge(10)
    # Sent at once (not throttled), with the job's last report: the loss is still there.
    assert len(endpoint.snapshot()) == 2
    ack = endpoint.snapshot()[-1]
    assert ack.metrics() == {
        "checkpoint_step": "10",
        "checkpoint_request_id": "1767225600123",
        "loss": "2.5",
        "current_step": "10",
    }
    assert ack.status["progressPercentage"] == 1 and ack.status["estimatedRemainingSeconds"] == 900

    # Later reports are throttled as the SDK's are; the ones that go out still carry the checkpoint.
    assert not trainwarden.update_trainjob_status(progress_percent=2, metrics={"loss": 2.4})
    fresh_default.reporter._last_sent = None  # as if 5 s had passed
    assert trainwarden.update_trainjob_status(progress_percent=2, metrics={"loss": 2.4})
    assert endpoint.snapshot()[-1].metrics() == {
        "checkpoint_step": "10",
        "checkpoint_request_id": "1767225600123",
        "loss": "2.4",
    }
    # No accepted report ever lacked the loss.
    assert all("loss" in a.metrics() for a in endpoint.snapshot())


def test_kubeflow_sdk_carries_the_ack(
    endpoint: StatusEndpoint, volume: AtomicVolume, fresh_default: CheckpointRequests, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job that keeps reporting with the Kubeflow SDK adds checkpoint_metrics() to its metrics."""
    import kubeflow.trainer.backends.kubernetes.utils as sdk
    from kubeflow.trainer import update_trainjob_status

    monkeypatch.setattr(sdk, "_MIN_UPDATE_INTERVAL_SECONDS", 0.0)  # the test's speed, not the SDK's 5 s
    monkeypatch.setattr(sdk, "_cached_token", None)
    assert update_trainjob_status(progress_percent=3, metrics={**trainwarden.checkpoint_metrics(), "loss": 1.5})
    volume.write({ANNOTATION: request_value(77, "by hand")})
    assert trainwarden.checkpoint_requested()
    trainwarden.acknowledge(120)  # nothing sent by trainwarden itself: the job's next report carries it
    assert len(endpoint.snapshot()) == 1
    assert update_trainjob_status(progress_percent=4, metrics={**trainwarden.checkpoint_metrics(), "loss": 1.4})
    assert endpoint.snapshot()[-1].metrics() == {"checkpoint_step": "120", "checkpoint_request_id": "77", "loss": "1.4"}


def test_unreachable_endpoint_never_raises(
    tmp_path: Path, volume: AtomicVolume, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    token = tmp_path / "token"
    token.write_text("t")
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_URL", f"https://127.0.0.1:{port}/apis/x/status")
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_TOKEN", str(token))
    requests = CheckpointRequests(poll_interval=0)
    volume.write({ANNOTATION: request_value(5)})
    with caplog.at_level(logging.WARNING, logger="trainwarden"):
        assert not requests.reporter.report(1, None, {"loss": 1.0})
        assert requests.requested()
        requests.acknowledge(9)
        assert not requests.reporter.report(1, None, {"loss": 1.0}, force=True)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "cannot reach the status endpoint" in warnings[0], warnings
    assert requests.metrics() == {"checkpoint_step": 9, "checkpoint_request_id": 5}


@pytest.mark.parametrize("problem", ["wrong-token", "server-error", "no-token-file", "bad-ca"])
def test_refusals_never_raise(
    problem: str, endpoint: StatusEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if problem == "wrong-token":
        bad = tmp_path / "bad-token"
        bad.write_text("not-the-token")
        monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_TOKEN", str(bad))
    elif problem == "server-error":
        endpoint.fail_with = 500
    elif problem == "no-token-file":
        monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_TOKEN", str(tmp_path / "missing"))
    else:
        other_ca = tmp_path / "other-ca.crt"
        other_ca.write_text((Path(str(endpoint.ca_file)).parent / "server.crt").read_text())
        monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_CA_CERT", str(other_ca))
    reporter = StatusReporter(dict, min_interval=0)
    with caplog.at_level(logging.WARNING, logger="trainwarden"):
        assert not reporter.report(5, 10, {"loss": 1.0})
        assert not reporter.report(5, 10, {"loss": 1.0})
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    expected = {
        "wrong-token": "HTTP 403",
        "server-error": "HTTP 500",
        "no-token-file": "cannot read the status token",
        "bad-ca": "CERTIFICATE_VERIFY_FAILED",
    }[problem]
    assert expected in warnings[0]
    assert endpoint.current is None


def test_throttle_and_forced_push(endpoint: StatusEndpoint) -> None:
    clock = Clock()
    ack: dict[str, int] = {}
    reporter = StatusReporter(lambda: ack, clock=clock)
    assert not reporter.push_checkpoint()  # nothing reported yet: nothing to re-send
    assert reporter.due()
    assert reporter.report(10, 60, {"loss": 1.0})
    clock.now += 4.9
    assert not reporter.due()
    assert not reporter.report(11, 59, {"loss": 0.9})  # throttled, but remembered
    ack.update(checkpoint_step=11, checkpoint_request_id=3)
    assert reporter.push_checkpoint()
    assert endpoint.snapshot()[-1].metrics() == {"checkpoint_step": "11", "checkpoint_request_id": "3", "loss": "0.9"}
    assert endpoint.snapshot()[-1].status["progressPercentage"] == 11
    clock.now += 5.0
    assert reporter.report(12, 58, {"loss": 0.8})


def test_the_checkpoint_metrics_survive_the_256_cap(endpoint: StatusEndpoint) -> None:
    reporter = StatusReporter(lambda: {"checkpoint_step": 1, "checkpoint_request_id": 2}, min_interval=0)
    many = {f"m{i}": i for i in range(300)}
    many["checkpoint_step"] = 999  # a job metric of the same name does not override the acknowledgement
    assert reporter.report(50, None, many)
    metrics = endpoint.snapshot()[-1].metrics()
    assert len(metrics) == 256
    assert metrics["checkpoint_step"] == "1" and metrics["checkpoint_request_id"] == "2"


def test_values_the_endpoint_accepts(endpoint: StatusEndpoint) -> None:
    """Out-of-range progress and ETA are clamped, as the SDK does; NaN goes as the string "nan"."""
    reporter = StatusReporter(dict, min_interval=0)
    assert reporter.report(150, -4, {"loss": float("nan")})
    status = endpoint.snapshot()[-1].status
    assert status["progressPercentage"] == 100 and status["estimatedRemainingSeconds"] == 0
    assert status["metrics"] == [{"name": "loss", "value": "nan"}]


def test_no_endpoint_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBEFLOW_TRAINER_SERVER_URL", raising=False)
    reporter = StatusReporter(dict)
    assert not reporter.due()
    assert not reporter.report(1, 1, {"loss": 1})
