"""transformers' `Trainer` on CPU, reporting to Kubeflow Trainer through transformers' own `KubeflowCallback`
(registered by `TrainingArguments` because KUBEFLOW_TRAINER_SERVER_URL is set). Nothing here knows about
trainwarden.

A tiny GPT-2 built from a config (no downloads) learns uniformly random tokens: there is nothing to learn, so
the loss sits at about ln(64) = 4.16 from the first step on — a plateau. On SIGTERM a callback asks the Trainer
to save a checkpoint and stop at the end of the current step (what just-in-time checkpointing does), then the
script writes a marker naming the checkpoint.

Usage: hf_trainer.py OUT_DIR
"""

import json
import os
import signal
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

VOCAB, SEQ = 64, 16


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n):
        generator = torch.Generator().manual_seed(0)
        self.tokens = torch.randint(0, VOCAB, (n, SEQ), generator=generator)

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, i):
        return {"input_ids": self.tokens[i], "labels": self.tokens[i]}


class CheckpointOnSigterm(TrainerCallback):
    def __init__(self):
        self.requested = False
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum, frame):
        self.requested = True

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(0.02)  # a bigger model's step time, so the run lasts long enough to be judged
        if self.requested:
            control.should_save = True
            control.should_training_stop = True
        return control


def main() -> int:
    out_dir = sys.argv[1]
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=1, n_head=2, bos_token_id=None, eos_token_id=None))
    stopper = CheckpointOnSigterm()
    args = TrainingArguments(
        output_dir=os.path.join(out_dir, "checkpoints"),
        max_steps=100_000,
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        log_level="error",
        report_to="none",  # KubeflowCallback is added anyway: KUBEFLOW_TRAINER_SERVER_URL is set
    )
    assert "kubeflow" in args.report_to, f"KubeflowCallback not enabled: report_to={args.report_to}"
    trainer = Trainer(model=model, args=args, train_dataset=RandomTokens(4096), callbacks=[stopper])
    trainer.train()
    if stopper.requested:
        checkpoints = sorted(os.listdir(args.output_dir)) if os.path.isdir(args.output_dir) else []
        with open(os.path.join(out_dir, "checkpoint.json"), "w") as f:
            json.dump({"signal": "SIGTERM", "global_step": trainer.state.global_step, "checkpoints": checkpoints}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
