"""transformers' Trainer: save when trainwarden asks, and report the saved step through KubeflowCallback.

    trainer = Trainer(model=model, args=args, train_dataset=train_dataset)
    checkpoint_on_request(trainer)
    trainer.train()

How it fits the Trainer's loop (transformers >= 5.4 ships KubeflowCallback, which reports progress to Kubeflow
Trainer whenever KUBEFLOW_TRAINER_SERVER_URL is set):

- `on_step_end`: if a request is pending (the ranks agree on it, see trainwarden.checkpoint), set
  `control.should_save`; the Trainer saves a full checkpoint (`checkpoint-<step>`) at the end of this step.
- `on_save` (every save, requested or not): acknowledge `state.global_step`.
- Next `on_step_end`: set `control.should_log`, so the Trainer logs once more; `on_log` adds `checkpoint_step` and
  `checkpoint_request_id` to that log entry. KubeflowCallback keeps every numeric log value it has seen and sends
  them with each report, so from its next report (<= 5 s later) on the acknowledgement stays in `trainerStatus`
  next to the loss. For that this callback must run before KubeflowCallback, which is what
  checkpoint_on_request() arranges (Trainer(callbacks=[...]) would put it after).

The extra log entry also reaches the loggers after KubeflowCallback (the console printer): one line per checkpoint.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState

from . import default_requests
from .checkpoint import CheckpointRequests
from .status import ENV_SERVER_URL

__all__ = ["CheckpointCallback", "checkpoint_on_request"]

_log = logging.getLogger("trainwarden")


class CheckpointCallback(TrainerCallback):  # type: ignore[misc]  # transformers is untyped without torch
    """A TrainerCallback that saves when trainwarden requests a checkpoint and acknowledges every save.

    `requests` defaults to the process-wide one; `check_every_n_steps` spaces the checks (each is one file read
    at most per second and, in a multi-rank job, one all-reduce of a single integer).
    """

    def __init__(self, requests: CheckpointRequests | None = None, *, check_every_n_steps: int = 1) -> None:
        if check_every_n_steps < 1:
            raise ValueError(f"check_every_n_steps must be at least 1, got {check_every_n_steps}")
        self.requests = requests if requests is not None else default_requests()
        self.requests._mark_carried()  # KubeflowCallback carries the metrics this callback logs
        self.check_every_n_steps = check_every_n_steps
        self._unlogged = False

    def on_train_begin(
        self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl | None:
        # KubeflowCallback forgets every cached metric here; log the last checkpoint again (a second train() call).
        self._unlogged = self.requests.last is not None
        return None

    def on_step_end(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> TrainerControl:
        if self._unlogged:
            control.should_log = True
        if state.global_step % self.check_every_n_steps == 0:
            # A collective in multi-rank jobs (a no-op otherwise): every rank gets here at the same step.
            if self.requests.agree(all_ranks=True) is not None:
                control.should_save = True
        return control

    def on_save(self, args: Any, state: TrainerState, control: TrainerControl, **kwargs: Any) -> TrainerControl | None:
        self.requests.acknowledge(state.global_step)
        self._unlogged = True
        return None

    def on_log(
        self,
        args: Any,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> TrainerControl | None:
        if self._unlogged and logs is not None:
            logs.update(self.requests.metrics())
            self._unlogged = False
        return None


def checkpoint_on_request(
    trainer: Any, callback: CheckpointCallback | None = None, **options: Any
) -> CheckpointCallback:
    """Adds a CheckpointCallback to `trainer` just before its KubeflowCallback (moving one that was given to the
    Trainer already) and returns it; `options` go to CheckpointCallback() when a new one is made."""
    callbacks: list[Any] = trainer.callback_handler.callbacks
    existing = [cb for cb in callbacks if isinstance(cb, CheckpointCallback)]
    chosen = callback if callback is not None else existing[0] if existing else CheckpointCallback(**options)
    for cb in existing:
        callbacks.remove(cb)
    kubeflow = _kubeflow_callback_class()
    position = next(
        (i for i, cb in enumerate(callbacks) if kubeflow is not None and isinstance(cb, kubeflow)), None
    )
    if position is None:
        callbacks.append(chosen)
        if os.environ.get(ENV_SERVER_URL):
            _log.warning(
                "trainwarden: %s is set but the Trainer has no KubeflowCallback (transformers < 5.4, or "
                "DISABLE_KUBEFLOW_INTEGRATION): checkpoints are saved on request but not acknowledged",
                ENV_SERVER_URL,
            )
    else:
        callbacks.insert(position, chosen)
    return chosen


def _kubeflow_callback_class() -> type | None:
    try:
        from transformers.integrations import KubeflowCallback
    except ImportError:  # transformers < 5.4
        return None
    return KubeflowCallback  # type: ignore[no-any-return]
