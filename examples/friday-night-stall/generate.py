#!/usr/bin/env python3
"""Generate stream.jsonl for the friday-night-stall example.

Usage:  python3 examples/friday-night-stall/generate.py      (writes stream.jsonl next to this file)

Python 3 standard library only; deterministic (random.Random(SEED)), so running it again gives a
byte-identical stream.jsonl.

The story (all times Europe/Rome, which is UTC+01:00 on these dates; the stream itself is in UTC):

  fraud/ft-llama-8b-fraud  -- selected by the weekend-safe policy (namespace fraud, label team: fraud)
    Fri 17:00  created through Kueue (LocalQueue fraud-gpu), admitted at once: 2 nodes x 4 GPUs = 8 GPUs,
               $55/h for the node group = $6.875 per GPU-hour.
    Fri 17:02  training starts: 24,000 steps planned at ~6 s/step (eval every 300 steps included) = 40 h,
               so the job expects to finish on Sunday around 09:00.
               Line 1 is the full TrainJob object (trainer.kubeflow.org/v1alpha1) as a watch delivers it,
               with the first status.trainerStatus (progress 0, total_steps) from the HF callback's
               on_train_begin.
    then       one compact {"time","job","trainerStatus"} line about every 60 s, in the shape the
               transformers KubeflowCallback writes (research doc kubeflow-progress.md section 3.1):
               progressPercentage = int(step / total * 100) capped at 99, estimatedRemainingSeconds =
               elapsed / step * remaining steps, metrics as STRINGS (Python str(float)): loss (HF rounds it
               to 4 decimals), grad_norm, learning_rate, epoch, current_step, total_steps, current_epoch,
               and -- cached by the callback, so present on every line after the first evaluation --
               eval_loss, eval_accuracy, eval_runtime, eval_samples_per_second, eval_steps_per_second,
               refreshed every 300 steps (~30 min). HF logs every 10 steps (~1 minute), so a report that
               comes before the next log repeats the cached loss, as the real callback does; no report is
               written while an evaluation runs (on_step_end is not called).
               The logged loss falls from ~2.2 with noise that shrinks as it converges.
    ~21:58     the model stops learning: from here on the logged loss stays within +-0.0004 of 0.6118
               (no improvement larger than 0.001 ever again; eval_loss creeps up, eval_accuracy is flat).
               Real logged losses are noisier than this; the example keeps the plateau unambiguous.
    Sat ~01:57 the last progress report: an NCCL all-reduce deadlocks. The pods stay Running, the GPUs
               stay allocated, nothing is reported any more. From here only heartbeat lines
               {"time","job","phase":"Running"} every 10-15 minutes (what a watch recorder writes when it
               re-lists the job and nothing changed).
    Mon 08:05  someone finally looks: the job is killed (phase Failed), and deleted at 08:12.

  recsys/query-encoder-distill -- another team's job (namespace recsys, team: recsys), NOT selected by the
    policy. 1 node x 4 GPUs, Fri 19:30 to Sat ~10:45, healthy loss curve, completes normally (final
    on_train_end report with progress 100, ETA 0, train_runtime/train_loss, then phase Complete).

Tuning knobs are the constants below; `trainwarden replay` with policy.yaml should show the plateau rule
firing (and suspending) on Saturday shortly after midnight.
"""

import json
import math
import os
import random
from datetime import datetime, timedelta, timezone

SEED = 20261127
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stream.jsonl")

UTC = timezone.utc
ROME = timezone(timedelta(hours=1))  # Europe/Rome is on CET (UTC+01:00) from 25 Oct 2026 to 28 Mar 2027.


def local(*args):
    return datetime(*args, tzinfo=ROME).astimezone(UTC)


def ts(t):
    """metav1.Time as the API server stores it: RFC 3339, UTC, second precision."""
    return t.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def s(v):
    """A metric value as the HF callback sends it: Python's str() of the number."""
    return str(v)


def trainjob(ns, name, labels, created, resumed, nodes, gpus_per_node, image, command, first_status):
    """A full upstream TrainJob object, as the API server returns it to a watch."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": "%08x-%04x-4%03x-a%03x-%012x" % tuple(RNG.getrandbits(b) for b in (32, 16, 12, 12, 48)),
            "resourceVersion": str(RNG.randint(10_000_000, 99_999_999)),
            "generation": 2,
            "creationTimestamp": ts(created),
            "labels": labels,
        },
        "spec": {
            "runtimeRef": {
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
                "name": "torch-distributed",
            },
            "suspend": False,
            "managedBy": "trainer.kubeflow.org/trainjob-controller",
            "trainer": {
                "image": image,
                "command": command,
                "numNodes": nodes,
                "resourcesPerNode": {
                    "requests": {"cpu": "32", "memory": "480Gi", "nvidia.com/gpu": str(gpus_per_node)},
                    "limits": {"cpu": "32", "memory": "480Gi", "nvidia.com/gpu": str(gpus_per_node)},
                },
                "env": [
                    {"name": "HF_HOME", "value": "/mnt/cache/hf"},
                    {"name": "NCCL_DEBUG", "value": "WARN"},
                ],
            },
        },
        "status": {
            "conditions": [
                {
                    "type": "Suspended",
                    "status": "False",
                    "reason": "Resumed",
                    "message": "TrainJob is resumed",
                    "lastTransitionTime": ts(resumed),
                }
            ],
            "jobsStatus": [
                {"name": "node", "ready": nodes, "succeeded": 0, "failed": 0, "active": nodes, "suspended": 0}
            ],
            "trainerStatus": first_status,
        },
    }


def compact(t, job, trainer_status):
    return {"time": ts(t), "job": job, "trainerStatus": trainer_status}


class HFRun:
    """What transformers' KubeflowCallback reports for one run (on_train_begin / on_step_end / on_train_end)."""

    def __init__(self, begin, total_steps, steps_per_epoch):
        self.begin = begin
        self.total = total_steps
        self.steps_per_epoch = steps_per_epoch
        self.cache = {}  # the callback caches every numeric entry of the latest logs

    def begin_status(self):
        return {
            "progressPercentage": 0,
            "metrics": [{"name": "total_steps", "value": s(self.total)}],
            "lastUpdatedTime": ts(self.begin),
        }

    def step_status(self, t, step):
        elapsed = (t - self.begin).total_seconds()
        metrics = [{"name": k, "value": s(v)} for k, v in self.cache.items()]
        metrics += [
            {"name": "current_step", "value": s(step)},
            {"name": "total_steps", "value": s(self.total)},
            {"name": "current_epoch", "value": s(round(step / self.steps_per_epoch, 2))},
        ]
        return {
            "progressPercentage": min(99, int(step / self.total * 100)),
            "estimatedRemainingSeconds": int(elapsed / step * (self.total - step)),
            "metrics": metrics,
            "lastUpdatedTime": ts(t),
        }

    def end_status(self, t, train_loss):
        runtime = (t - self.begin).total_seconds()
        self.cache.update(
            {
                "train_runtime": round(runtime, 4),
                "train_samples_per_second": round(self.total * 64 / runtime, 3),
                "train_steps_per_second": round(self.total / runtime, 3),
                "total_flos": 3.871e18,
                "train_loss": round(train_loss, 4),
            }
        )
        return {
            "progressPercentage": 100,
            "estimatedRemainingSeconds": 0,
            "metrics": [{"name": k, "value": s(v)} for k, v in self.cache.items()],
            "lastUpdatedTime": ts(t),
        }


def lr_at(step, total, peak, warmup):
    """linear warmup, then cosine decay to 0 (HF get_cosine_schedule_with_warmup)."""
    if step < warmup:
        return peak * step / warmup
    progress = (step - warmup) / (total - warmup)
    return peak * 0.5 * (1.0 + math.cos(math.pi * progress))


# ---------------------------------------------------------------------------------------------------------
# Job 1: fraud/ft-llama-8b-fraud
# ---------------------------------------------------------------------------------------------------------

FRAUD_JOB = "fraud/ft-llama-8b-fraud"
FRAUD_CREATED = local(2026, 11, 27, 17, 0, 0)
FRAUD_ADMITTED = FRAUD_CREATED + timedelta(seconds=4)
FRAUD_BEGIN = FRAUD_CREATED + timedelta(minutes=2, seconds=41)  # model load + NCCL init
FRAUD_TOTAL_STEPS = 24_000
FRAUD_STEPS_PER_EPOCH = 8_000  # 3 epochs
STEP_SECONDS = 5.7  # plus 90 s of evaluation every 300 steps: 6.0 s/step on average, 40 h in all
EVAL_EVERY = 300
EVAL_SECONDS = 90.0
PLATEAU_STEP = 2_950  # ~21:58: the loss stops improving
LOSS_FLOOR = 0.6118
LOSS_START = 2.2
TAU = 1_200.0  # steps
HANG_AT = local(2026, 11, 28, 1, 58, 0)  # NCCL deadlock: no report after this
NOTICED = local(2026, 11, 30, 8, 5, 0)  # Monday: someone kills the job
DELETED = local(2026, 11, 30, 8, 12, 0)


def fraud_loss(step):
    if step >= PLATEAU_STEP:
        return LOSS_FLOOR + RNG.uniform(-0.0004, 0.0004)
    # Reaches the floor at PLATEAU_STEP with a still clearly negative slope: the model stops learning rather
    # than converging smoothly.
    e, ep = math.exp(-step / TAU), math.exp(-PLATEAU_STEP / TAU)
    curve = LOSS_FLOOR + (LOSS_START - LOSS_FLOOR) * (e - ep) / (1 - ep)
    # The logged loss is an average over 10 steps; its noise shrinks with the gap to the floor.
    sigma = 0.001 + 0.03 * (e - ep) / (1 - ep)
    return curve + RNG.gauss(0.0, sigma)


def fraud_eval(step):
    if step < PLATEAU_STEP:
        base = fraud_loss_curve(step) + 0.045
        loss = base + RNG.gauss(0, 0.004)
        acc = 0.905 - 0.28 * math.exp(-step / TAU) + RNG.gauss(0, 0.003)
    else:
        # Overfits slowly once the training loss is stuck.
        loss = LOSS_FLOOR + 0.045 + 0.0009 * (step - PLATEAU_STEP) / EVAL_EVERY + RNG.gauss(0, 0.0006)
        acc = 0.9037 + RNG.gauss(0, 0.0008)
    runtime = EVAL_SECONDS + RNG.gauss(0, 1.5)
    return {
        "eval_loss": round(loss, 4),
        "eval_accuracy": round(acc, 4),
        "eval_runtime": round(runtime, 4),
        "eval_samples_per_second": round(4096 / runtime, 3),
        "eval_steps_per_second": round(64 / runtime, 3),
    }


def fraud_loss_curve(step):
    e, ep = math.exp(-step / TAU), math.exp(-PLATEAU_STEP / TAU)
    return LOSS_FLOOR + (LOSS_START - LOSS_FLOOR) * max(0.0, e - ep) / (1 - ep)


def fraud_lines():
    run = HFRun(FRAUD_BEGIN, FRAUD_TOTAL_STEPS, FRAUD_STEPS_PER_EPOCH)
    labels = {"team": "fraud", "kueue.x-k8s.io/queue-name": "fraud-gpu", "app.kubernetes.io/part-of": "fraud-llm"}
    obj = trainjob(
        "fraud",
        "ft-llama-8b-fraud",
        labels,
        FRAUD_CREATED,
        FRAUD_ADMITTED,
        nodes=2,
        gpus_per_node=4,
        image="registry.internal.example/fraud/llm-finetune:2026.11.3",
        command=["python", "train.py", "--config", "configs/llama-3.1-8b-fraud-sft.yaml"],
        first_status=run.begin_status(),
    )
    out = [(FRAUD_BEGIN, obj)]

    # Step clock: each step takes STEP_SECONDS (+-3 %), plus an evaluation pause every EVAL_EVERY steps.
    step, clock = 0, FRAUD_BEGIN
    step_end = []  # time at which each step ended
    while clock < HANG_AT:
        step += 1
        clock += timedelta(seconds=STEP_SECONDS * RNG.uniform(0.97, 1.03))
        if step % EVAL_EVERY == 0:
            clock += timedelta(seconds=EVAL_SECONDS)
        step_end.append(clock)

    report = FRAUD_BEGIN + timedelta(seconds=60)
    i = 0
    logged = 0
    last_reported = 0
    while report < HANG_AT:
        while i < len(step_end) and step_end[i] <= report:
            i += 1
        cur = i  # steps completed by now
        # HF logs every 10 steps; the eval metrics are refreshed every EVAL_EVERY steps.
        for st in range(logged + 10 - logged % 10, cur + 1, 10):
            run.cache["loss"] = round(fraud_loss(st), 4)
            g = 0.32 + 1.6 * math.exp(-st / 700.0) if st < PLATEAU_STEP else 0.29
            run.cache["grad_norm"] = abs(g * RNG.lognormvariate(0, 0.08))
            run.cache["learning_rate"] = lr_at(st, FRAUD_TOTAL_STEPS, 2e-5, 720)
            run.cache["epoch"] = round(st / FRAUD_STEPS_PER_EPOCH, 4)
            if st % EVAL_EVERY == 0:
                run.cache.update(fraud_eval(st))
            logged = st
        if cur > last_reported:  # on_step_end does not run during an evaluation: nothing new to report
            out.append((report, compact(report, FRAUD_JOB, run.step_status(report, cur))))
            last_reported = cur
        report += timedelta(seconds=60 + RNG.randint(-3, 3))

    # The hang: heartbeats only, every 10-15 minutes, until Monday morning.
    t = HANG_AT + timedelta(minutes=RNG.randint(10, 15), seconds=RNG.randint(0, 59))
    while t < NOTICED:
        out.append((t, {"time": ts(t), "job": FRAUD_JOB, "phase": "Running"}))
        t += timedelta(minutes=RNG.randint(10, 15), seconds=RNG.randint(0, 59))
    out.append((NOTICED, {"time": ts(NOTICED), "job": FRAUD_JOB, "phase": "Failed"}))
    out.append((DELETED, {"time": ts(DELETED), "job": FRAUD_JOB, "deleted": True}))
    return out


# ---------------------------------------------------------------------------------------------------------
# Job 2: recsys/query-encoder-distill (another team, not selected)
# ---------------------------------------------------------------------------------------------------------

RECSYS_JOB = "recsys/query-encoder-distill"
RECSYS_CREATED = local(2026, 11, 27, 19, 30, 0)
RECSYS_BEGIN = RECSYS_CREATED + timedelta(minutes=1, seconds=52)
RECSYS_TOTAL_STEPS = 10_000
RECSYS_STEP_SECONDS = 5.4


def recsys_lines():
    run = HFRun(RECSYS_BEGIN, RECSYS_TOTAL_STEPS, 5_000)
    labels = {"team": "recsys", "kueue.x-k8s.io/queue-name": "recsys-gpu"}
    obj = trainjob(
        "recsys",
        "query-encoder-distill",
        labels,
        RECSYS_CREATED,
        RECSYS_CREATED + timedelta(seconds=9),
        nodes=1,
        gpus_per_node=4,
        image="registry.internal.example/recsys/encoder-train:1.14.0",
        command=["python", "-m", "distill", "--teacher", "e5-large", "--student", "minilm-l12"],
        first_status=run.begin_status(),
    )
    out = [(RECSYS_BEGIN, obj)]
    step_end, clock, step = [], RECSYS_BEGIN, 0
    while step < RECSYS_TOTAL_STEPS:
        step += 1
        clock += timedelta(seconds=RECSYS_STEP_SECONDS * RNG.uniform(0.97, 1.03))
        if step % 500 == 0:
            clock += timedelta(seconds=40)
        step_end.append(clock)
    report, i, logged, last_reported = RECSYS_BEGIN + timedelta(seconds=60), 0, 0, 0
    losses = []
    while report < step_end[-1]:
        while step_end[i] <= report:
            i += 1
        cur = i  # steps completed by now (< total: the last step ends after `report`)
        for st in range(logged + 10 - logged % 10, cur + 1, 10):
            loss = 0.28 + 1.1 * math.exp(-st / 2500.0) + RNG.gauss(0, 0.012)
            losses.append(loss)
            run.cache["loss"] = round(loss, 4)
            run.cache["grad_norm"] = abs((0.4 + 2.0 * math.exp(-st / 1500.0)) * RNG.lognormvariate(0, 0.1))
            run.cache["learning_rate"] = lr_at(st, RECSYS_TOTAL_STEPS, 5e-5, 500)
            run.cache["epoch"] = round(st / 5_000, 4)
            if st % 500 == 0:
                run.cache["eval_loss"] = round(0.31 + 1.0 * math.exp(-st / 2500.0) + RNG.gauss(0, 0.004), 4)
                run.cache["eval_accuracy"] = round(0.93 - 0.3 * math.exp(-st / 2500.0) + RNG.gauss(0, 0.002), 4)
                run.cache["eval_runtime"] = round(38 + RNG.gauss(0, 1), 4)
            logged = st
        if cur > last_reported:
            out.append((report, compact(report, RECSYS_JOB, run.step_status(report, cur))))
            last_reported = cur
        report += timedelta(seconds=60 + RNG.randint(-3, 3))
    end = step_end[-1] + timedelta(seconds=2)
    out.append((end, compact(end, RECSYS_JOB, run.end_status(end, sum(losses) / len(losses)))))
    done = end + timedelta(seconds=35)
    out.append((done, {"time": ts(done), "job": RECSYS_JOB, "phase": "Complete"}))
    return out


RNG = random.Random(SEED)


def main():
    lines = fraud_lines() + recsys_lines()
    lines.sort(key=lambda p: p[0])  # stable: each job keeps its own order
    with open(OUT, "w", encoding="utf-8") as f:
        for _, obj in lines:
            f.write(json.dumps(obj, separators=(",", ":")) + "\n")
    print("wrote %s: %d lines, %d bytes" % (OUT, len(lines), os.path.getsize(OUT)))


if __name__ == "__main__":
    main()
