"""PyTorch Lightning: save when trainwarden asks, and report progress with the saved step to Kubeflow Trainer.

    trainer = L.Trainer(max_steps=100_000, callbacks=[CheckpointCallback()])
    trainer.fit(model, train_dataloaders=loader)

Lightning has no Kubeflow progress reporter of its own (transformers has KubeflowCallback), so this callback is
one, unless `report_progress=False`: from global rank 0, at most every 5 s, it sends what KubeflowCallback sends
(progress capped at 99 % until the end, ETA, `current_step`, `total_steps`, `current_epoch`, every scalar of
`trainer.callback_metrics`) plus the checkpoint metrics. A job that reports on its own instead passes
`report_progress=False` and adds trainwarden.checkpoint_metrics() to its reports.

At the end of a training batch that completes an optimizer step, if a request is pending (the ranks agree, see
trainwarden.checkpoint), every rank calls `trainer.save_checkpoint` (Lightning needs all of them for sharded
strategies) into `dirpath` (default: the ModelCheckpoint's directory, else `<default_root_dir>/checkpoints`) as
`filename` (formatted with `step`, `epoch` and `request`), then acknowledges the step; rank 0 reports it at once.
Checkpoints that ModelCheckpoint writes on its own schedule are not acknowledged (Lightning has no hook after a
checkpoint is written).

Uses `lightning.pytorch` if installed, else `pytorch_lightning`.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

try:
    from lightning.pytorch import Callback
except ImportError:  # the standalone package
    from pytorch_lightning import Callback

from . import default_requests
from .checkpoint import CheckpointRequests
from .status import MetricValue

__all__ = ["CheckpointCallback"]


class CheckpointCallback(Callback):  # type: ignore[misc]  # Lightning may be absent where mypy runs
    """A Lightning Callback that saves a checkpoint when trainwarden requests one and acknowledges it."""

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str = "trainwarden-step={step}.ckpt",
        *,
        requests: CheckpointRequests | None = None,
        check_every_n_steps: int = 1,
        report_progress: bool = True,
    ) -> None:
        if check_every_n_steps < 1:
            raise ValueError(f"check_every_n_steps must be at least 1, got {check_every_n_steps}")
        self.dirpath = os.fspath(dirpath) if dirpath is not None else None
        self.filename = filename
        self.requests = requests if requests is not None else default_requests()
        self.check_every_n_steps = check_every_n_steps
        self.report_progress = report_progress
        if report_progress:
            self.requests._mark_carried()  # rank 0's reports carry the checkpoint metrics
        #: The path of the last checkpoint this callback wrote.
        self.last_checkpoint_path: str | None = None
        self._checked_step: int | None = None
        self._start: tuple[float, int] | None = None  # wall time and step when this fit started

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._start = (time.time(), int(trainer.global_step))
        if self.report_progress and trainer.is_global_zero:
            total = _total_steps(trainer)
            self.requests.reporter.report(
                progress_percent=0,
                metrics={"total_steps": total} if total is not None else None,
                force=True,
            )

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = int(trainer.global_step)
        # With gradient accumulation several batches end on the same step: check once per optimizer step.
        if step != self._checked_step and step % self.check_every_n_steps == 0:
            self._checked_step = step
            request = self.requests.agree(all_ranks=True)  # a collective in multi-rank jobs
            if request is not None:
                path = os.path.join(
                    self._dirpath(trainer),
                    self.filename.format(step=step, epoch=trainer.current_epoch, request=request.id),
                )
                trainer.save_checkpoint(path)
                self.last_checkpoint_path = path
                if self.report_progress and trainer.is_global_zero:
                    self._report(trainer, send=False)  # the fresh values acknowledge() sends with the step
                self.requests.acknowledge(step)
                return
        if self.report_progress and trainer.is_global_zero and self.requests.reporter.due():
            self._report(trainer)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.report_progress and trainer.is_global_zero:
            self._report(trainer, force=True, final=True)

    def _dirpath(self, trainer: Any) -> str:
        if self.dirpath is not None:
            return self.dirpath
        model_checkpoint = getattr(trainer, "checkpoint_callback", None)
        directory = getattr(model_checkpoint, "dirpath", None)
        if directory:
            return str(directory)
        return os.path.join(str(trainer.default_root_dir), "checkpoints")

    def _report(self, trainer: Any, *, force: bool = False, send: bool = True, final: bool = False) -> None:
        step = int(trainer.global_step)
        total = _total_steps(trainer)
        metrics: dict[str, MetricValue] = _scalars(getattr(trainer, "callback_metrics", {}))
        metrics["current_step"] = step
        if total is not None:
            metrics["total_steps"] = total
        metrics["current_epoch"] = int(trainer.current_epoch)
        progress: int | None = None
        eta: int | None = None
        if final:
            progress, eta = 100, 0
        elif total:
            progress = min(99, int(100 * step / total))
            if self._start is not None and step > self._start[1]:
                per_step = (time.time() - self._start[0]) / (step - self._start[1])
                eta = int(per_step * max(0, total - step))
        self.requests.reporter.report(progress, eta, metrics, force=force, send=send)


def _total_steps(trainer: Any) -> int | None:
    try:
        total = float(trainer.estimated_stepping_batches)
    except Exception:  # no dataloader yet, or a Lightning version without it
        return None
    return int(total) if math.isfinite(total) and total > 0 else None


def _scalars(values: Any) -> dict[str, MetricValue]:
    """The numbers among Lightning's logged values (one-element tensors included), as Python numbers."""
    out: dict[str, MetricValue] = {}
    for name, value in dict(values).items():
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            out[str(name)] = value
        elif hasattr(value, "numel") and hasattr(value, "item"):
            try:
                if value.numel() == 1:
                    out[str(name)] = float(value.item())
            except Exception:
                continue
    return out
