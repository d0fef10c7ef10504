#!/usr/bin/env python3
"""The real Keras 3.15.1 `keras.callbacks.EarlyStopping` (jax backend) against the re-implementation the
decision bench uses (peer_rules.KerasEarlyStopping), on the same feed: every job of the corpus, every setting
of the Keras grid and the default. Exit 1 on any difference. Run by check-keras.sh (it installs keras + jax).
"""

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402

import corpus  # noqa: E402
from peer_rules import PEERS, KerasEarlyStopping  # noqa: E402


class Model:
    """What the callback touches of a model when restore_best_weights is off: `stop_training` only."""

    stop_training = False


def main() -> int:
    path, metric = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "loss")
    runs = corpus.read_runs(path)
    jobs = {r.job: [x.metrics for _, x in corpus.new_results(r, metric)] for r in runs}
    peer = PEERS["keras-earlystopping"]
    settings = sorted({peer.default, *peer.grid})
    pairs = differences = 0
    for params in settings:
        kw = dict(params)
        for job, logs in jobs.items():
            real = keras.callbacks.EarlyStopping(monitor=metric, patience=int(kw["patience"]), min_delta=kw["min_delta"])
            model = Model()
            real.set_model(model)
            real.on_train_begin()
            mine = KerasEarlyStopping(metric, patience=int(kw["patience"]), min_delta=kw["min_delta"])
            theirs = ours = None
            for epoch, logs_at in enumerate(logs):
                if theirs is None:
                    real.on_epoch_end(epoch, dict(logs_at))
                    if model.stop_training:
                        theirs = epoch
                if ours is None and mine.on_epoch_end(epoch, logs_at):
                    ours = epoch
            pairs += 1
            if theirs != ours:
                differences += 1
                print(f"DIFFERENT {job} {kw}: keras stops at result {theirs}, the re-implementation at {ours}")
    print(
        f"keras {keras.__version__} ({keras.backend.backend()} backend) vs peer_rules.KerasEarlyStopping: "
        f"{len(settings)} settings x {len(jobs)} jobs, {differences} of {pairs} decisions differ"
    )
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
