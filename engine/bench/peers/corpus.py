"""A corpus of recorded progress streams, read the way the peers are fed: per job, its reports, and of those
the ones that carry a *new result* of the watched metric (the decision bench, decisions.py).

The stream format is trainwarden's (engine/core/src/input/stream.rs); this reader takes the compact form
`{"time", "job", "trainerStatus", "phase", "labels", ...}` that examples/corpus/convert.py writes. Any other
line (a whole TrainJob object, the RHOAI annotation line) is refused with its file and line: a peer fed
from a reader that skipped lines would be judged on reports it never saw.

What is a new result. A progress report repeats the latest value of every metric seen so far (the
KubeflowCallback's cache: after the first evaluation every line carries the last `eval_loss`; an evaluation
line carries the last training `loss`; a heartbeat between logging steps carries all of them). A repeated
cached value is not a result a peer would have been given: Tune, Optuna, Keras and Lightning are called
in-process once per logged value. Two rules:

  * `logged` (default), the rule trainwarden's own judgement uses (`JobSeries::logged`): a report is a
    new result of metric M when it carries M and M's value differs bit for bit from M's value in the job's
    previous report, or another value of M's group does. A trainer logs its evaluation metrics (`eval_*`)
    together, and everything else (`loss`, `grad_norm`, `learning_rate`, ...) together at a logging step:
    a value that repeats bit for bit beside a changed `grad_norm` was logged again (a loss rounded to 4
    digits, the same twice on a plateau), while a report in which no value of the group changed only
    re-sends it (an evaluation log re-sending the training loss, a heartbeat). The progress counters
    (step, epoch, total steps and epochs) are not metrics and belong to no group. A run that logs its
    loss alone and logs the same value again is not seen to (`hate-speech-collapse`'s loss of exactly 0.0):
    the stream cannot tell that apart from a heartbeat.
  * `changed`: only M's own value counts.

NaN counts as equal to NaN, so a repeated NaN is a repeat.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import struct
from dataclasses import dataclass, field

# The progress counters, as engine/core/src/input/names.rs spells them: a sample's own fields, not metrics.
COUNTERS = {
    "current_step", "currentStep", "step",
    "total_steps", "totalSteps", "max_steps",
    "current_epoch", "currentEpoch", "epoch",
    "total_epochs", "totalEpochs", "num_train_epochs",
}
STEP_NAMES = ("current_step", "currentStep", "step")
RULES = ("logged", "changed")


class CorpusError(Exception):
    """A corpus file or line this reader cannot take: says which and why."""


@dataclass
class Report:
    """One progress report of a job: its line's time (RFC 3339, as written), and its metrics by name."""

    time: str
    line: int
    metrics: dict[str, float]
    step: float | None


@dataclass
class Run:
    """One job of one stream file: its reports in order and its labels (the last seen, as backtest keeps)."""

    job: str
    file: str
    labels: dict[str, str] = field(default_factory=dict)
    reports: list[Report] = field(default_factory=list)

    def label(self, key: str) -> str | None:
        return self.labels.get(key)


def stream_files(path: str) -> list[str]:
    """The stream files of a corpus: a file, or the `*.jsonl` (and `*.jsonl.gz`) files directly in a
    directory, sorted, as `examples/corpus/*.jsonl` (its `raw/` holds the source logs, some of them JSONL
    too, which are not streams)."""
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise CorpusError(f"{path}: no such file or directory")
    found = sorted(
        os.path.join(path, name)
        for name in os.listdir(path)
        if name.endswith((".jsonl", ".jsonl.gz")) and os.path.isfile(os.path.join(path, name))
    )
    if not found:
        raise CorpusError(f"{path}: no stream files (*.jsonl, *.jsonl.gz) in it")
    return found


def _number(value, where: str) -> float:
    if isinstance(value, bool):
        raise CorpusError(f"{where}: a number or a numeric string expected, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise CorpusError(f"{where}: {value!r} is not a number") from None
    raise CorpusError(f"{where}: a number or a numeric string expected, got {value!r}")


def read_runs(path: str) -> list[Run]:
    """Every job of every stream under `path`, in file order then order of first appearance."""
    runs: list[Run] = []
    for file in stream_files(path):
        by_job: dict[str, Run] = {}
        opener = gzip.open if file.endswith(".gz") else open
        with opener(file, "rt", encoding="utf-8") as f:
            for n, text in enumerate(f, 1):
                text = text.strip()
                if not text or text.startswith("#"):
                    continue
                where = f"{file}:{n}"
                try:
                    line = json.loads(text)
                except json.JSONDecodeError as e:
                    raise CorpusError(f"{where}:{e.colno}: {e.msg}") from None
                if not isinstance(line, dict):
                    raise CorpusError(f"{where}: a JSON object expected")
                if "apiVersion" in line or "kind" in line or "annotation" in line:
                    raise CorpusError(f"{where}: only the compact line form is read here (time, job, trainerStatus)")
                for key in ("time", "job"):
                    if not isinstance(line.get(key), str):
                        raise CorpusError(f"{where}: {key}: a string expected")
                job = line["job"]
                run = by_job.get(job)
                if run is None:
                    run = by_job[job] = Run(job=job, file=file)
                    runs.append(run)
                if isinstance(line.get("labels"), dict):
                    run.labels = {str(k): str(v) for k, v in line["labels"].items()}
                status = line.get("trainerStatus")
                if status is None:
                    continue
                metrics = {}
                for i, m in enumerate(status.get("metrics") or []):
                    name = m.get("name")
                    if not isinstance(name, str):
                        raise CorpusError(f"{where}: trainerStatus.metrics[{i}].name: a string expected")
                    metrics[name] = _number(m.get("value"), f"{where}: trainerStatus.metrics[{i}].value")
                run.reports.append(
                    Report(
                        time=line["time"],
                        line=n,
                        metrics=metrics,
                        step=next((metrics[k] for k in STEP_NAMES if k in metrics), None),
                    )
                )
    return runs


def _bits(v: float) -> bytes:
    return b"nan" if math.isnan(v) else struct.pack("<d", v)


def _group(name: str) -> str | None:
    if name in COUNTERS:
        return None
    return "eval" if name.startswith("eval_") else "train"


def new_results(run: Run, metric: str, rule: str = "logged") -> list[tuple[int, Report]]:
    """The reports of `run` that carry a new result of `metric` (see the module doc), with their index."""
    if rule not in RULES:
        raise ValueError(f"new-result rule {rule!r}: one of {', '.join(RULES)}")
    group = _group(metric)
    kept = []
    latest: dict[str, bytes] = {}
    for i, r in enumerate(run.reports):
        changed = {name for name, v in r.metrics.items() if latest.get(name) != _bits(v)}
        if metric in changed or (
            metric in r.metrics and rule == "logged" and any(_group(name) == group for name in changed)
        ):
            kept.append((i, r))
        for name, v in r.metrics.items():
            latest[name] = _bits(v)
    return kept
