"""The acknowledgement through `trainwarden watch`'s own status endpoint (engine/local: the Kubeflow-compatible
endpoint local mode serves, with upstream's checks and the TrainJob CRD's validation), from a plain loop that
uses the package as its README shows.

Today's `watch` sets KUBEFLOW_TRAINER_SERVER_* but does not yet write the annotations file (the controller-side
helper of issue 42 adds that); the test writes the request itself, in the format PROTOCOL.md gives `watch`, and
passes TRAINWARDEN_ANNOTATIONS_FILE through `watch` to the command.

Needs TRAINWARDEN_BIN (the trainwarden binary); skipped without it, a failure under CI=true.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kubelet_files import request_value, write_plain
from trainwarden import ANNOTATION

HERE = Path(__file__).parent


def trainwarden_bin() -> str:
    path = os.environ.get("TRAINWARDEN_BIN")
    if path and Path(path).is_file():
        return path
    problem = f"TRAINWARDEN_BIN={path!r} is not a file" if path else "TRAINWARDEN_BIN is not set"
    if os.environ.get("CI") in ("true", "1"):
        pytest.fail(f"the watch test needs the trainwarden binary (CI=true, so this fails): {problem}")
    pytest.skip(f"the watch test needs the trainwarden binary: {problem} (cargo build -p trainwarden)")


def test_acknowledgement_through_watch(tmp_path: Path) -> None:
    binary = trainwarden_bin()
    annotations = tmp_path / "annotations"
    write_plain(annotations, {ANNOTATION: request_value(1767225600123, 'by hand: "kubectl trainwarden checkpoint"')})
    out = tmp_path / "out"
    out.mkdir()
    recording = tmp_path / "run.jsonl"
    env = {**os.environ, "TRAINWARDEN_ANNOTATIONS_FILE": str(annotations)}
    result = subprocess.run(
        [binary, "watch", "--policy", str(HERE / "fixtures" / "watch-policy.yaml"), "--record", str(recording),
         "--eval-interval", "1s", "--gpus", "1", "--job", "local/sdk-loop", "--",
         sys.executable, str(HERE / "scripts" / "plain_loop.py"), str(out)],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads((out / "checkpoint-1.json").read_text()) == {"step": 1, "request": 1767225600123}

    statuses = [json.loads(line)["trainerStatus"] for line in recording.read_text().splitlines()
                if not line.startswith("#") and "trainerStatus" in line]
    # The first report (step 1), then the acknowledgement re-sending it at once: both accepted by the endpoint.
    assert len(statuses) == 2, statuses
    metrics = [{m["name"]: m["value"] for m in s["metrics"]} for s in statuses]
    assert metrics[0] == {"loss": "2.0", "current_step": "1"}
    assert metrics[1] == {"checkpoint_step": "1", "checkpoint_request_id": "1767225600123", "loss": "2.0",
                          "current_step": "1"}
    assert "[trainwarden]" in result.stderr
