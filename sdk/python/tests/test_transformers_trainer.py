"""transformers' real Trainer on CPU (a tiny GPT-2 from a config, no downloads), with its own KubeflowCallback
reporting to a real HTTPS status endpoint: a request mid-run is saved as a full checkpoint, training goes on, and
the acknowledgement reaches the endpoint next to the loss. Needs torch (run-tests.sh --with-torch)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import import_torch_stack

import_torch_stack("torch", "accelerate", "transformers.trainer")

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments  # noqa: E402
from transformers.integrations import KubeflowCallback  # noqa: E402

from kubelet_files import AtomicVolume, request_value  # noqa: E402
from status_endpoint import StatusEndpoint  # noqa: E402
from trainwarden import ANNOTATION  # noqa: E402
from trainwarden.checkpoint import CheckpointRequests  # noqa: E402
from trainwarden.transformers import CheckpointCallback, checkpoint_on_request  # noqa: E402

VOCAB, SEQ = 64, 16


class RandomTokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, n: int) -> None:
        self.tokens = torch.randint(0, VOCAB, (n, SEQ), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": self.tokens[i], "labels": self.tokens[i]}


class RequestAtStep(TrainerCallback):  # type: ignore[misc]
    """Plays trainwarden: writes the request into the pod's annotations at the end of step `step`."""

    def __init__(self, volume: AtomicVolume, step: int, request_id: int) -> None:
        self.volume, self.step, self.request_id = volume, step, request_id

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            self.volume.write({ANNOTATION: request_value(self.request_id, "ETA passes the deadline")})


def test_real_trainer_saves_on_request_and_keeps_training(
    endpoint: StatusEndpoint, volume: AtomicVolume, fresh_default: CheckpointRequests, tmp_path: Path
) -> None:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=1, n_head=2,
                                       bos_token_id=None, eos_token_id=None))
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=30,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=5,
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        log_level="error",
        report_to="none",  # KubeflowCallback is registered anyway: KUBEFLOW_TRAINER_SERVER_URL is set
    )
    trainer = Trainer(model=model, args=args, train_dataset=RandomTokens(256),
                      callbacks=[RequestAtStep(volume, 10, 1767225600123)])
    kubeflow = next(cb for cb in trainer.callback_handler.callbacks if isinstance(cb, KubeflowCallback))
    kubeflow._MIN_UPDATE_INTERVAL = 0.0  # a report every step: the test's speed, not the 5 s throttle
    checkpoint_on_request(trainer)
    names = [type(cb).__name__ for cb in trainer.callback_handler.callbacks]
    assert names.index("CheckpointCallback") == names.index("KubeflowCallback") - 1

    trainer.train()

    # Seen at step 11 (the request was written after this callback's step-10 check), saved, training went on.
    assert trainer.state.global_step == 30
    checkpoint = tmp_path / "out" / "checkpoint-11"
    assert checkpoint.is_dir(), sorted(p.name for p in (tmp_path / "out").iterdir())
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert state["global_step"] == 11
    assert (checkpoint / "optimizer.pt").is_file() and (checkpoint / "model.safetensors").is_file()
    assert [e["step"] for e in trainer.state.log_history if "loss" in e][:3] == [5, 10, 12]  # 12: the ack's log

    posts = endpoint.snapshot()
    first_ack = next(i for i, p in enumerate(posts) if "checkpoint_step" in p.metrics())
    assert posts[first_ack].metrics()["current_step"] == "13"
    for post in posts[first_ack:]:
        assert post.metrics()["checkpoint_step"] == "11"
        assert post.metrics()["checkpoint_request_id"] == "1767225600123"
        assert "loss" in post.metrics()
    final = endpoint.current
    assert final is not None and final["progressPercentage"] == 100
    assert not fresh_default.requested()
    assert isinstance(trainer.callback_handler.callbacks[names.index("CheckpointCallback")], CheckpointCallback)
