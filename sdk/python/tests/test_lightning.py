"""PyTorch Lightning's real Trainer on CPU with the package's Callback: a request mid-run is saved as a complete
Lightning checkpoint (a second fit resumes from it), training goes on, and the callback's own progress reports
carry the acknowledgement next to the loss to a real HTTPS status endpoint. Needs torch and lightning
(run-tests.sh --with-torch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import import_torch_stack

import_torch_stack("torch", "lightning.pytorch")

import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402

from kubelet_files import AtomicVolume, request_value  # noqa: E402
from status_endpoint import StatusEndpoint  # noqa: E402
from trainwarden import ANNOTATION  # noqa: E402
from trainwarden.checkpoint import CheckpointRequests  # noqa: E402
from trainwarden.lightning import CheckpointCallback  # noqa: E402


class Regression(pl.LightningModule):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class RequestAtStep(pl.Callback):  # type: ignore[misc]
    """Plays trainwarden: writes the request into the pod's annotations after optimizer step `step`."""

    def __init__(self, volume: AtomicVolume, step: int, request_id: int) -> None:
        self.volume, self.step, self.request_id = volume, step, request_id

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == self.step:
            self.volume.write({ANNOTATION: request_value(self.request_id)})


def loader() -> torch.utils.data.DataLoader:  # type: ignore[type-arg]
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(512, 8, generator=generator)
    y = x.sum(dim=1, keepdim=True)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)


def trainer(max_steps: int, callbacks: list[Any], root: Path) -> pl.Trainer:
    return pl.Trainer(max_steps=max_steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(root),
                      callbacks=callbacks)


def test_real_lightning_saves_on_request_and_keeps_training(
    endpoint: StatusEndpoint, volume: AtomicVolume, fresh_default: CheckpointRequests, tmp_path: Path
) -> None:
    fresh_default.reporter._min_interval = 0.0  # a report per step: the test's speed, not the 5 s throttle
    callback = CheckpointCallback()
    run = trainer(30, [callback, RequestAtStep(volume, 10, 1767225600123)], tmp_path)
    run.fit(Regression(), train_dataloaders=loader())

    # Seen at step 11 (written after this callback's step-10 check), saved, training went on.
    assert run.global_step == 30
    expected = tmp_path / "checkpoints" / "trainwarden-step=11.ckpt"
    assert callback.last_checkpoint_path == str(expected)
    saved = torch.load(expected, weights_only=False)
    assert saved["global_step"] == 11 and "optimizer_states" in saved

    posts = endpoint.snapshot()
    assert posts[0].status["progressPercentage"] == 0 and posts[0].metrics() == {"total_steps": "30"}
    first_ack = next(i for i, p in enumerate(posts) if "checkpoint_step" in p.metrics())
    assert posts[first_ack].metrics()["current_step"] == "11"  # sent at once, with the step's own values
    for post in posts[first_ack:]:
        assert post.metrics()["checkpoint_step"] == "11"
        assert post.metrics()["checkpoint_request_id"] == "1767225600123"
    assert all("train_loss" in p.metrics() for p in posts[1:])
    final = endpoint.current
    assert final is not None
    assert (final["progressPercentage"], final["estimatedRemainingSeconds"]) == (100, 0)

    # The checkpoint is a complete Lightning checkpoint: a new fit resumes at its step.
    resumed = trainer(15, [CheckpointCallback(report_progress=False)], tmp_path / "resume")
    resumed.fit(Regression(), train_dataloaders=loader(), ckpt_path=str(expected))
    assert resumed.global_step == 15


def test_default_directory_and_filename(
    volume: AtomicVolume, fresh_default: CheckpointRequests, tmp_path: Path
) -> None:
    volume.write({ANNOTATION: request_value(4)})
    callback = CheckpointCallback(filename="req{request}-epoch{epoch}-step{step}.ckpt", report_progress=False)
    model_checkpoint = pl.callbacks.ModelCheckpoint(dirpath=str(tmp_path / "model-checkpoints"))
    run = pl.Trainer(max_steps=3, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir=str(tmp_path), callbacks=[model_checkpoint, callback])
    run.fit(Regression(), train_dataloaders=loader())
    # Without a dirpath of its own the callback writes into the ModelCheckpoint's directory.
    assert callback.last_checkpoint_path == str(tmp_path / "model-checkpoints" / "req4-epoch0-step1.ckpt")
    assert Path(callback.last_checkpoint_path).is_file()
    assert fresh_default.metrics() == {"checkpoint_step": 1, "checkpoint_request_id": 4}
