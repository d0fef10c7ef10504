"""The acknowledgement through `trainwarden watch`'s own status endpoint (engine/local: the Kubeflow-compatible
endpoint local mode serves, with upstream's checks and the TrainJob CRD's validation), from a plain loop that
uses the package as its README shows.

`watch` writes the request itself (a `checkpoint` action of the test's policy), into the file it names in
TRAINWARDEN_ANNOTATIONS_FILE in the format PROTOCOL.md gives, and reads the acknowledgement from the command's
reports.

Needs TRAINWARDEN_BIN (the trainwarden binary); skipped without it, a failure under CI=true.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    out = tmp_path / "out"
    out.mkdir()
    recording = tmp_path / "run.jsonl"
    result = subprocess.run(
        [binary, "watch", "--policy", str(HERE / "fixtures" / "watch-policy.yaml"), "--record", str(recording),
         "--eval-interval", "1s", "--gpus", "1", "--job", "local/sdk-loop", "--",
         sys.executable, str(HERE / "scripts" / "plain_loop.py"), str(out)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    saved = list(out.glob("checkpoint-*.json"))
    assert len(saved) == 1, saved
    checkpoint = json.loads(saved[0].read_text())
    step, request = checkpoint["step"], checkpoint["request"]
    assert isinstance(request, int) and request >= 1, checkpoint
    assert f"acknowledged: saved at step {step}" in result.stderr, result.stderr

    statuses = [json.loads(line)["trainerStatus"] for line in recording.read_text().splitlines()
                if not line.startswith("#") and "trainerStatus" in line]
    metrics = [{m["name"]: m["value"] for m in s["metrics"]} for s in statuses]
    # Every report went through the endpoint (its checks and the CRD's validation); the last one acknowledges
    # the request watch wrote, with the step the script saved at.
    assert metrics[0]["current_step"] == "1", metrics[0]
    last = metrics[-1]
    assert last == {"checkpoint_step": str(step), "checkpoint_request_id": str(request), "loss": last["loss"],
                    "current_step": str(step)}, last
