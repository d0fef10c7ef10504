"""A training loop that takes part in checkpoint requests through the companion package (sdk/python, the plain
helper, standard library only), run by `trainwarden watch` exactly as it would run in a pod: it reads requests
with `checkpoint_requested()` (the file `$TRAINWARDEN_ANNOTATIONS_FILE` that watch writes) and reports through
`trainwarden.update_trainjob_status` (the Kubeflow SDK's function, the `KUBEFLOW_TRAINER_SERVER_*` variables
watch sets), acknowledging each checkpoint with `acknowledge(step)`.

One step every 0.05 s, TOTAL_STEPS steps. A checkpoint takes SAVE_SECONDS (written to OUT_DIR/ckpt-<step>.json
once complete, then acknowledged). On SIGTERM the loop records the step it stopped at (OUT_DIR/stopped.json)
and exits 0 at once: it does not save on SIGTERM, so only a checkpoint taken before the signal survives.

Usage: checkpoint_loop.py SAVE_SECONDS OUT_DIR
"""

import json
import os
import signal
import sys
import time

from trainwarden import acknowledge, checkpoint_requested, pending_request, update_trainjob_status

TOTAL_STEPS = 400
STEP_SECONDS = 0.05


def main() -> int:
    save_seconds, out_dir = float(sys.argv[1]), sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    step = 0

    def stop(_signum: int, _frame: object) -> None:
        with open(os.path.join(out_dir, "stopped.json"), "w") as f:
            json.dump({"step": step}, f)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    for step in range(1, TOTAL_STEPS + 1):
        time.sleep(STEP_SECONDS)
        update_trainjob_status(
            progress_percent=100 * step // TOTAL_STEPS,
            metrics={"loss": 2.0 - step / 1000, "current_step": step, "total_steps": TOTAL_STEPS},
        )
        if checkpoint_requested():
            request = pending_request()
            time.sleep(save_seconds)  # the save, longer than a SIGTERM's grace
            path = os.path.join(out_dir, f"ckpt-{step}.json")
            with open(path + ".tmp", "w") as f:
                json.dump({"step": step, "request": request.id if request else 0}, f)
            os.replace(path + ".tmp", path)
            acknowledge(step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
