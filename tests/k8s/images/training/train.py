"""A small numeric training loop for the cluster tier's end-to-end tests (tests/k8s/images/training).

Gradient descent on a 1-D least-squares problem; every step it reports the loss through the real Kubeflow SDK
(kubeflow.trainer.update_trainjob_status, which POSTs to the Trainer's status server at the URL the Trainer
injects; the SDK throttles to one update per 5 s). On SIGTERM it writes a checkpoint (step, weight) to
$CHECKPOINT_DIR and exits 0; at start it resumes from that checkpoint if there is one.

Environment (all optional):
  TOTAL_STEPS      steps to run (default 100000)
  STEP_SECONDS     wall time per step (default 0.5)
  MODE             converge (loss falls to a floor: a plateau), nan (loss becomes NaN at NAN_AT_STEP),
                   hang (stops reporting at HANG_AT_STEP but keeps running)
  PLATEAU_LOSS     the loss floor of converge (default 0.5)
  NOISE            amplitude of a deterministic wobble on the loss (default 0.001): a plateau of distinct values
  NAN_AT_STEP      default 3;  HANG_AT_STEP  default 10
  CHECKPOINT_DIR   default /checkpoint
  ON_REQUEST       1: take part in trainwarden's checkpoint requests through the companion package (sdk/python,
                   installed in the image): report through its update_trainjob_status (the Kubeflow SDK's, with
                   the last checkpoint's metrics), check checkpoint_requested() every step, save (taking
                   SAVE_SECONDS, default 0) and acknowledge(step). With ON_REQUEST=1 a SIGTERM saves nothing: only
                   a checkpoint taken on request survives a stop.
Every line it prints starts with "train:" so tests can grep the pod log.
"""
import json
import math
import os
import signal
import sys
import time

ON_REQUEST = os.environ.get("ON_REQUEST", "0") == "1"
SAVE_SECONDS = float(os.environ.get("SAVE_SECONDS", "0"))
if ON_REQUEST:
    from trainwarden import acknowledge, checkpoint_requested, pending_request, update_trainjob_status
else:
    from kubeflow.trainer import update_trainjob_status

TOTAL = int(os.environ.get("TOTAL_STEPS", "100000"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0.5"))
MODE = os.environ.get("MODE", "converge")
FLOOR = float(os.environ.get("PLATEAU_LOSS", "0.5"))
NOISE = float(os.environ.get("NOISE", "0.001"))
NAN_AT = int(os.environ.get("NAN_AT_STEP", "3"))
HANG_AT = int(os.environ.get("HANG_AT_STEP", "10"))
CKPT_DIR = os.environ.get("CHECKPOINT_DIR", "/checkpoint")
CKPT = os.path.join(CKPT_DIR, "checkpoint.json")

state = {"step": 0, "w": 5.0}
resumed = False


def log(msg):
    print(f"train: {msg}", flush=True)


def save(reason):
    os.makedirs(CKPT_DIR, exist_ok=True)
    tmp = CKPT + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        if SAVE_SECONDS:
            time.sleep(SAVE_SECONDS)  # a slow save: longer than the termination grace period
        os.fsync(f.fileno())
    os.replace(tmp, CKPT)
    log(f"checkpoint written: step {state['step']} to {CKPT} ({reason})")


def on_sigterm(signum, frame):
    log(f"SIGTERM at step {state['step']}")
    if ON_REQUEST:
        log("exiting without saving: only checkpoints taken on request count")
        sys.exit(0)
    try:
        os.makedirs(CKPT_DIR, exist_ok=True)
        tmp = CKPT + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, CKPT)
        log(f"checkpoint written: step {state['step']} to {CKPT}")
    except OSError as e:
        log(f"checkpoint failed: {e}")
    sys.exit(0)


def loss_at(w, step):
    # (w - 1)^2 + FLOOR: gradient descent drives w to 1 and the loss to the floor, where it plateaus (with a small
    # wobble, so the reports stay distinct observations).
    return (w - 1.0) ** 2 + FLOOR + NOISE * math.sin(1.7 * step)


def main():
    global resumed
    signal.signal(signal.SIGTERM, on_sigterm)
    if os.path.exists(CKPT):
        with open(CKPT) as f:
            state.update(json.load(f))
        resumed = True
        log(f"resumed from checkpoint at step {state['step']}")
    else:
        log("starting from scratch")
    log(f"server url: {os.environ.get('KUBEFLOW_TRAINER_SERVER_URL', '<not injected>')}")
    lr = 0.05
    while state["step"] < TOTAL:
        state["step"] += 1
        step = state["step"]
        state["w"] -= lr * 2.0 * (state["w"] - 1.0)
        loss = loss_at(state["w"], step)
        if MODE == "nan" and step >= NAN_AT:
            loss = math.nan
        if MODE == "hang" and step >= HANG_AT:
            if not state.get("hanging"):
                state["hanging"] = True
                log(f"hanging at step {step} (no more reports)")
            time.sleep(STEP_SECONDS)
            continue
        if ON_REQUEST and checkpoint_requested():
            request = pending_request()
            rid = request.id if request else 0
            log(f"checkpoint request {rid} seen at step {step} at {time.time():.3f} (requested {request.requested_at if request else '-'})")
            save(f"request {rid}")
            acknowledge(step)
            log(f"acknowledged step {step} for request {rid} at {time.time():.3f}")
        sent = update_trainjob_status(
            progress_percent=min(100, int(100 * step / TOTAL)),
            estimated_remaining_seconds=int((TOTAL - step) * STEP_SECONDS),
            metrics={"loss": "nan" if math.isnan(loss) else round(loss, 6), "step": step},
        )
        if sent:
            log(f"reported step {step} loss {loss}")
        time.sleep(STEP_SECONDS)
    update_trainjob_status(progress_percent=100, metrics={"loss": round(loss_at(state["w"], state["step"]), 6), "step": state["step"]})
    log("done")


if __name__ == "__main__":
    main()
