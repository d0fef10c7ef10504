"""A plain training loop using the companion package as its README shows, for test_watch.py: it reports through
trainwarden.update_trainjob_status, saves a "checkpoint" when trainwarden asks, and acknowledges it. It stops after
the acknowledgement, or after 60 s without a request.

Usage: plain_loop.py OUT_DIR
"""

import json
import os
import sys
import time

from trainwarden import acknowledge, checkpoint_requested, pending_request, update_trainjob_status

TOTAL_STEPS = 1000


def main() -> int:
    out_dir = sys.argv[1]
    deadline = time.monotonic() + 60
    for step in range(1, TOTAL_STEPS + 1):
        loss = 2.0 / step
        update_trainjob_status(progress_percent=100 * step // TOTAL_STEPS, metrics={"loss": loss, "current_step": step})
        if checkpoint_requested():
            request = pending_request()
            with open(os.path.join(out_dir, f"checkpoint-{step}.json"), "w") as f:
                json.dump({"step": step, "request": request.id if request else None}, f)
            acknowledge(step)
            return 0
        if time.monotonic() > deadline:
            return 3
        time.sleep(0.05)
    return 4


if __name__ == "__main__":
    sys.exit(main())
