"""A small training loop that reports progress the way Kubeflow training code does: through the Kubeflow SDK's
`kubeflow.trainer.update_trainjob_status`, configured only by the KUBEFLOW_TRAINER_SERVER_* variables.
Nothing here knows about trainwarden.

The loss is a function of how many reports the SDK has delivered (the SDK sends at most one per 5 s and
drops the calls in between), so every run reports the same series whatever the machine's speed:

  plateau  2.0, 1.0, then flat within +-0.0005: a plateau detector with a 2-sample window fires on report 4
  nan      2.0, then nan: a non-finite detector fires on report 2
  stall    2.0, 1.5, then the loop hangs (no more reports) and ignores SIGTERM, as a stuck collective does

On SIGTERM the loop saves a "checkpoint" at its next safe point (a JSON marker with the number of reports
delivered) and exits 0, as just-in-time checkpointing does; in the stall scenario it writes the marker but stays
hung.

Usage: sdk_training_loop.py SCENARIO OUT_DIR

Without SIGTERM the loop sends its whole schedule and exits 0 (the stall scenario hangs instead).
"""

import json
import math
import os
import signal
import sys
import time

from kubeflow.trainer import update_trainjob_status

SCHEDULES = {
    "plateau": [2.0, 1.0, 1.0004, 0.9998, 1.0002, 0.9997, 1.0003, 0.9999],
    "nan": [2.0, math.nan, 1.9, 1.8],
    "stall": [2.0, 1.5],
}
TOTAL_STEPS = 100_000
STEP_SECONDS = 0.1


def main() -> int:
    scenario, out_dir = sys.argv[1], sys.argv[2]
    schedule = SCHEDULES[scenario]
    os.makedirs(out_dir, exist_ok=True)
    state = {"reports": 0, "step": 0, "sigterm": False}

    def on_sigterm(signum, frame):
        # Only a flag: the checkpoint is taken at the next safe point of the loop, as JIT checkpointing does.
        state["sigterm"] = True

    def save_checkpoint():
        with open(os.path.join(out_dir, "checkpoint.json"), "w") as f:
            json.dump({"signal": "SIGTERM", "reports": state["reports"], "step": state["step"]}, f)

    signal.signal(signal.SIGTERM, on_sigterm)
    log = open(os.path.join(out_dir, "reports.jsonl"), "a")
    checkpointed = False
    while True:
        if state["sigterm"] and not checkpointed:
            save_checkpoint()
            checkpointed = True
            if scenario != "stall":
                return 0
        if state["reports"] >= len(schedule):
            if scenario == "stall":
                time.sleep(STEP_SECONDS)  # hung: no more reports; SIGTERM is noted but changes nothing
                continue
            return 0
        state["step"] += 1
        loss = schedule[state["reports"]]
        remaining = TOTAL_STEPS - state["step"]
        sent = update_trainjob_status(
            progress_percent=int(100 * state["step"] / TOTAL_STEPS),
            estimated_remaining_seconds=int(remaining * STEP_SECONDS),
            metrics={"loss": loss, "current_step": state["step"], "total_steps": TOTAL_STEPS},
        )
        if sent:
            state["reports"] += 1
            log.write(json.dumps({"report": state["reports"], "loss": str(loss), "step": state["step"]}) + "\n")
            log.flush()
        elif not os.environ.get("KUBEFLOW_TRAINER_SERVER_URL"):
            print("KUBEFLOW_TRAINER_SERVER_URL is not set", file=sys.stderr)
            return 3
        time.sleep(STEP_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
