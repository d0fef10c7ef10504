"""The transformers callback against transformers' real classes: TrainerCallback, TrainerControl, TrainerState,
CallbackHandler, DefaultFlowCallback and KubeflowCallback, the last posting to a real HTTPS status endpoint.

transformers' `Trainer` and `TrainingArguments` need torch, which the default test environment does not install
(test_transformers_trainer.py runs the real Trainer where torch is installed). Here TrainerLoop replays the
Trainer's callback sequence around the real CallbackHandler, in the order of transformers 5.4.0's
`Trainer._inner_training_loop` and `_maybe_log_save_evaluate`; the model work is a loss value and the checkpoint a
directory. `args` carries the TrainingArguments fields DefaultFlowCallback reads.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kubelet_files import AtomicVolume, request_value
from status_endpoint import StatusEndpoint

pytest.importorskip("transformers", reason="pip install -r sdk/python/requirements-test.txt")
from transformers import TrainerControl, TrainerState  # noqa: E402
from transformers.integrations import KubeflowCallback  # noqa: E402
from transformers.trainer_callback import CallbackHandler, DefaultFlowCallback, TrainerCallback  # noqa: E402
from transformers.trainer_utils import IntervalStrategy, SaveStrategy  # noqa: E402

from trainwarden import ANNOTATION  # noqa: E402
from trainwarden.checkpoint import CheckpointRequests  # noqa: E402
from trainwarden.transformers import CheckpointCallback, checkpoint_on_request  # noqa: E402

# The order checkpoint_on_request gives the handler: just before KubeflowCallback.
IN_PLACE = ["DefaultFlowCallback", "CheckpointCallback", "KubeflowCallback"]


def training_args(save_steps: int = 0) -> SimpleNamespace:
    return SimpleNamespace(
        logging_first_step=False,
        logging_strategy=IntervalStrategy.STEPS,
        eval_strategy=IntervalStrategy.NO,
        eval_delay=0,
        save_strategy=SaveStrategy.STEPS if save_steps else SaveStrategy.NO,
    )


class TrainerLoop:
    """transformers.Trainer's callback sequence around a real CallbackHandler (see the module documentation)."""

    def __init__(self, handler: CallbackHandler, output_dir: Path, *, max_steps: int, logging_steps: int,
                 save_steps: int = 0) -> None:
        self.handler = handler
        self.output_dir = output_dir
        self.args = training_args(save_steps)
        self.state = TrainerState(max_steps=max_steps, logging_steps=logging_steps, save_steps=save_steps)
        self.control = TrainerControl()
        self.saved: list[int] = []
        self._last_logged = 0

    def train(self, before_step: Callable[[int], None] = lambda step: None) -> None:
        h, a, s = self.handler, self.args, self.state
        self.control = h.on_train_begin(a, s, self.control)
        self.control = h.on_epoch_begin(a, s, self.control)
        while s.global_step < s.max_steps:
            before_step(s.global_step + 1)
            self.control = h.on_step_begin(a, s, self.control)
            self.control = h.on_pre_optimizer_step(a, s, self.control)
            self.control = h.on_optimizer_step(a, s, self.control)
            s.global_step += 1
            s.epoch = s.global_step / s.max_steps
            self.control = h.on_step_end(a, s, self.control)
            self._maybe_log_save_evaluate()
            if self.control.should_training_stop:
                break
        self.control = h.on_epoch_end(a, s, self.control)
        self._maybe_log_save_evaluate()
        # _finalize_training: the summary log, then on_train_end.
        self._log({"train_runtime": 1.25, "train_loss": 3.9})
        self.control = h.on_train_end(a, s, self.control)

    def _log(self, logs: dict[str, float]) -> None:
        logs["epoch"] = self.state.epoch
        self.state.log_history.append({**logs, "step": self.state.global_step})
        self.control = self.handler.on_log(self.args, self.state, self.control, logs)

    def _maybe_log_save_evaluate(self) -> None:
        h, a, s = self.handler, self.args, self.state
        if self.control.should_log and s.global_step > self._last_logged:
            logs: dict[str, float] = {"loss": round(4.0 - s.global_step / 100, 4), "grad_norm": 1.5,
                                      "learning_rate": 1e-3}
            self._last_logged = s.global_step
            self._log(logs)
        if self.control.should_save:
            checkpoint = self.output_dir / f"checkpoint-{s.global_step}"
            checkpoint.mkdir(parents=True)
            (checkpoint / "trainer_state.json").write_text("{}")
            self.saved.append(s.global_step)
            self.control = h.on_save(a, s, self.control)


def kubeflow_callback() -> KubeflowCallback:
    callback = KubeflowCallback()
    callback._MIN_UPDATE_INTERVAL = 0.0  # report at every step: the test's speed, not its 5 s
    return callback


def handler(*callbacks: TrainerCallback) -> CallbackHandler:
    return CallbackHandler([DefaultFlowCallback(), *callbacks], None, None, None, None)


def test_a_request_is_saved_and_acknowledged_through_kubeflow_callback(
    endpoint: StatusEndpoint, volume: AtomicVolume, fresh_default: CheckpointRequests, tmp_path: Path
) -> None:
    h = handler(kubeflow_callback())
    trainer = SimpleNamespace(callback_handler=h)
    checkpoint_on_request(trainer)
    assert [type(cb).__name__ for cb in h.callbacks] == IN_PLACE
    loop = TrainerLoop(h, tmp_path / "out", max_steps=20, logging_steps=5)

    def before_step(step: int) -> None:
        if step == 7:
            volume.write({ANNOTATION: request_value(1767225600123, "ETA passes the deadline")})

    loop.train(before_step)

    assert loop.saved == [7]  # saved at the end of the step during which the request was seen; training went on
    assert loop.state.global_step == 20
    # 8: the extra log whose entry carries the acknowledgement to KubeflowCallback; the last one is the summary.
    assert [e["step"] for e in loop.state.log_history] == [5, 8, 10, 15, 20, 20]

    posts = endpoint.snapshot()
    steps = [p.metrics().get("current_step") for p in posts]
    first_ack = next(i for i, p in enumerate(posts) if "checkpoint_step" in p.metrics())
    assert steps[first_ack] == "9"  # KubeflowCallback's first report after the log at step 8
    for post in posts[first_ack:]:
        assert post.metrics()["checkpoint_step"] == "7"
        assert post.metrics()["checkpoint_request_id"] == "1767225600123"
    first_loss = next(i for i, p in enumerate(posts) if "loss" in p.metrics())
    assert all("loss" in p.metrics() for p in posts[first_loss:]), "a report without the loss"
    final = endpoint.current
    assert final is not None and final["progressPercentage"] == 100
    assert {m["name"] for m in final["metrics"]} >= {"loss", "checkpoint_step", "checkpoint_request_id"}
    assert not fresh_default.requested()  # answered


def test_regular_saves_are_acknowledged_as_unrequested(
    endpoint: StatusEndpoint, volume: AtomicVolume, fresh_default: CheckpointRequests, tmp_path: Path
) -> None:
    h = handler(kubeflow_callback())
    checkpoint_on_request(SimpleNamespace(callback_handler=h))
    loop = TrainerLoop(h, tmp_path / "out", max_steps=10, logging_steps=3, save_steps=4)
    loop.train()
    assert loop.saved == [4, 8, 10]
    final = endpoint.current
    assert final is not None
    metrics = {m["name"]: m["value"] for m in final["metrics"]}
    assert (metrics["checkpoint_step"], metrics["checkpoint_request_id"]) == ("10", "0")


def test_after_kubeflow_callback_the_ack_is_not_carried(
    endpoint: StatusEndpoint, volume: AtomicVolume, fresh_default: CheckpointRequests, tmp_path: Path
) -> None:
    """Why checkpoint_on_request exists: Trainer(callbacks=[...]) puts the callback after KubeflowCallback, whose
    on_log has then already read the log entry; the checkpoint is saved but never acknowledged."""
    h = handler(kubeflow_callback(), CheckpointCallback())
    volume.write({ANNOTATION: request_value(5)})
    loop = TrainerLoop(h, tmp_path / "out", max_steps=6, logging_steps=2)
    loop.train()
    assert loop.saved == [1]
    assert not any("checkpoint_step" in p.metrics() for p in endpoint.snapshot())
    # Moved into place, the next checkpoint is acknowledged.
    checkpoint_on_request(SimpleNamespace(callback_handler=h))
    assert [type(cb).__name__ for cb in h.callbacks] == IN_PLACE
    volume.write({ANNOTATION: request_value(6)})
    loop = TrainerLoop(h, tmp_path / "out2", max_steps=6, logging_steps=2)
    loop.train()
    final = endpoint.current
    assert final is not None
    assert {m["name"]: m["value"] for m in final["metrics"]}["checkpoint_request_id"] == "6"


def test_a_second_train_call_reports_the_last_checkpoint_again(
    endpoint: StatusEndpoint, volume: AtomicVolume, fresh_default: CheckpointRequests, tmp_path: Path
) -> None:
    """KubeflowCallback forgets its metrics at on_train_begin; the callback logs the checkpoint again."""
    h = handler(kubeflow_callback())
    checkpoint_on_request(SimpleNamespace(callback_handler=h))
    volume.write({ANNOTATION: request_value(9)})
    TrainerLoop(h, tmp_path / "a", max_steps=4, logging_steps=100).train()
    before = len(endpoint.snapshot())
    TrainerLoop(h, tmp_path / "b", max_steps=4, logging_steps=100).train()
    second_run = endpoint.snapshot()[before:]
    assert second_run[0].metrics() == {"total_steps": "4"}  # KubeflowCallback.on_train_begin: cache emptied
    assert second_run[-1].metrics()["checkpoint_request_id"] == "9"


def test_check_every_n_steps(volume: AtomicVolume, fresh_default: CheckpointRequests, tmp_path: Path) -> None:
    volume.write({ANNOTATION: request_value(3)})
    h = handler()
    checkpoint_on_request(SimpleNamespace(callback_handler=h), check_every_n_steps=5)
    loop = TrainerLoop(h, tmp_path / "out", max_steps=12, logging_steps=100)
    loop.train()
    assert loop.saved == [5]
    with pytest.raises(ValueError, match="at least 1"):
        CheckpointCallback(check_every_n_steps=0)


def test_checkpoint_on_request_keeps_one_callback(endpoint: StatusEndpoint, fresh_default: CheckpointRequests) -> None:
    given = CheckpointCallback()
    h = handler(given, kubeflow_callback())
    trainer = SimpleNamespace(callback_handler=h)
    assert checkpoint_on_request(trainer) is given
    assert checkpoint_on_request(trainer) is given
    assert [type(cb).__name__ for cb in h.callbacks] == IN_PLACE
    custom = CheckpointRequests(poll_interval=0)
    replacement = CheckpointCallback(custom)
    assert checkpoint_on_request(trainer, replacement) is replacement
    assert [cb for cb in h.callbacks if isinstance(cb, CheckpointCallback)] == [replacement]


def test_without_kubeflow_callback_it_warns(
    endpoint: StatusEndpoint, fresh_default: CheckpointRequests, caplog: Any
) -> None:
    h = handler()
    checkpoint_on_request(SimpleNamespace(callback_handler=h))
    assert isinstance(h.callbacks[-1], CheckpointCallback)
    assert "has no KubeflowCallback" in caplog.text
