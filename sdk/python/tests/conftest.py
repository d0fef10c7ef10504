"""Fixtures: a real HTTPS status endpoint with the environment a trainer pod gets, downward-API volumes, and a
fresh process-wide CheckpointRequests per test."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the helpers next to the tests

import trainwarden  # noqa: E402
from kubelet_files import AtomicVolume  # noqa: E402
from status_endpoint import RunningServer, StatusEndpoint, make_certificates  # noqa: E402
from trainwarden.checkpoint import CheckpointRequests  # noqa: E402

TOKEN = "test-token-0123456789abcdef"


def import_torch_stack(*modules: str) -> None:
    """Imports `modules` (torch, transformers' Trainer, Lightning) or skips the calling test module: the default
    test environment does not install torch (its PyPI wheels pull the CUDA libraries, ~5.6 GB). Under
    `run-tests.sh --with-torch` (TRAINWARDEN_SDK_REQUIRE_TORCH=1) a missing module is a failure."""
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as err:
            if os.environ.get("TRAINWARDEN_SDK_REQUIRE_TORCH") == "1":
                raise
            pytest.skip(f"needs {module} ({err}); run sdk/python/run-tests.sh --with-torch", allow_module_level=True)


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def endpoint(
    certificates: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[StatusEndpoint]:
    """The status endpoint of TrainJob team-a/llm, and the KUBEFLOW_TRAINER_SERVER_* variables pointing at it."""
    state = StatusEndpoint(namespace="team-a", name="llm", token=TOKEN)
    server = RunningServer(state, certificates)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_URL", state.url)
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_CA_CERT", str(state.ca_file))
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_TOKEN", str(token_file))
    try:
        yield state
    finally:
        server.close()


@pytest.fixture
def volume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AtomicVolume:
    """A downward-API volume of the pod's annotations, with TRAINWARDEN_ANNOTATIONS_FILE pointing into it."""
    vol = AtomicVolume(tmp_path / "podinfo")
    vol.write({"jobset.sigs.k8s.io/jobset-name": "llm"})
    monkeypatch.setenv("TRAINWARDEN_ANNOTATIONS_FILE", str(vol.file))
    return vol


@pytest.fixture
def fresh_default(monkeypatch: pytest.MonkeyPatch) -> CheckpointRequests:
    """A new process-wide CheckpointRequests (no poll delay), as in a process that just started."""
    requests = CheckpointRequests(poll_interval=0.0)
    monkeypatch.setattr(trainwarden, "_default", requests)
    return requests
