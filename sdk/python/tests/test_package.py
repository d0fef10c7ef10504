"""`pip install ./sdk/python` gives a typed package whose core runs on the standard library alone."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import trainwarden

ROOT = Path(__file__).parent.parent


def test_wheel_is_typed_and_runs_on_the_standard_library_alone(tmp_path: Path) -> None:
    """The wheel `pip install ./sdk/python` builds: typed, no required dependency, and its core imported with
    `python -S` (no site-packages at all: only the standard library is reachable) reads a request and acknowledges."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
         "--no-build-isolation", "--wheel-dir", str(tmp_path), str(ROOT)],
        check=True, capture_output=True,
    )
    (wheel,) = tmp_path.glob("trainwarden-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = next(z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
        target = tmp_path / "site"
        z.extractall(target)  # what installing a pure-Python wheel amounts to
    expected = {f"trainwarden/{m}" for m in ("__init__.py", "py.typed", "annotations.py", "request.py", "status.py",
                                             "checkpoint.py", "_distributed.py", "transformers.py", "lightning.py")}
    assert expected <= names
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert requires and all("extra ==" in line for line in requires), requires
    assert f"Version: {trainwarden.__version__}" in metadata

    annotations = tmp_path / "annotations"
    annotations.write_text('trainwarden.dev/checkpoint-request="{\\"id\\":3,\\"reason\\":\\"r\\"}"')
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import trainwarden\n"
        "assert trainwarden.checkpoint_requested()\n"
        "trainwarden.acknowledge(12)\n"
        "print(trainwarden.checkpoint_metrics())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('transformers', 'torch', 'lightning')))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBEFLOW_", "PYTHON"))}
    env["TRAINWARDEN_ANNOTATIONS_FILE"] = str(annotations)
    result = subprocess.run([sys.executable, "-S", "-c", code, str(target)], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["{'checkpoint_step': 12, 'checkpoint_request_id': 3}", "[]"]
