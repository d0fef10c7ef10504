#!/usr/bin/env python3
"""Generate stream.jsonl for the gpu-hang example.

Usage:  python3 examples/gpu-hang/generate.py      (writes stream.jsonl next to this file)

Python 3 standard library only; deterministic (random.Random(SEED)), byte-identical on every run.

Two TrainJobs on a shared cluster on a Friday night (UTC), each line a compact record: progress as the
transformers KubeflowCallback reports it ("trainerStatus", about once a minute) and, every 60 s, the GPUs'
DCGM readings as the controller reads them from Prometheus ("gpu": DCGM_FI_DEV_GPU_UTIL in %,
DCGM_FI_DEV_POWER_USAGE in W, DCGM_FI_DEV_FB_USED in MiB, one entry per GPU named pod/gpu).

  team-a/llama-70b-sft   2 nodes x 8 GPUs. Trains normally from 21:00 (GPUs 93-99 %, ~650 W).
                         22:40:10 one rank dies inside an all-reduce: the others wait in NCCL, so no step
                         ends and no report comes, but every GPU stays at 100 % (NCCL spins) at ~420 W.
  team-b/bert-sweep-7    1 node x 4 GPUs. Trains from 21:00; 22:05 its data loader crashes and the job
                         keeps its pods: no report, GPUs at 0 %, ~60 W, memory still held.
"""
import json
import os
import random

SEED = 17
START = 21 * 3600          # 21:00:00Z on 2026-11-27
END = 23 * 3600 + 30 * 60  # 23:30
DAY = "2026-11-27"


def ts(sec):
    h, rem = divmod(sec, 3600)
    m, s = divmod(rem, 60)
    return f"{DAY}T{h:02d}:{m:02d}:{s:02d}Z"


def main():
    rng = random.Random(SEED)
    lines = []
    jobs = {
        "team-a/llama-70b-sft": {"gpus": 16, "pods": ["llama-70b-sft-node-0-0-k8x2q", "llama-70b-sft-node-0-1-p3m9z"],
                                 "fails": START + 100 * 60 + 10, "mode": "hang", "steps": 6000, "step_s": 9.0},
        "team-b/bert-sweep-7": {"gpus": 4, "pods": ["bert-sweep-7-node-0-0-w4r7t"],
                                "fails": START + 65 * 60, "mode": "idle", "steps": 20000, "step_s": 1.5},
    }
    for key, j in jobs.items():
        lines.append((START, 0, {"time": ts(START), "job": key, "phase": "Running", "gpus": j["gpus"],
                                 "labels": {"team": key.split("/")[0]}}))
    for key, j in jobs.items():
        sec = START + 60
        while sec < END:
            if sec >= j["fails"]:
                break
            step = int((sec - START) / j["step_s"])
            loss = 2.4 * (0.35 + 0.65 * 2.718281828 ** (-step / 1500)) + rng.uniform(-0.01, 0.01)
            total = j["steps"]
            eta = int((total - step) * j["step_s"])
            lines.append((sec, 1, {"time": ts(sec), "job": key, "trainerStatus": {
                "progressPercentage": min(99, int(step * 100 / total)),
                "estimatedRemainingSeconds": eta,
                "metrics": [{"name": "loss", "value": str(round(loss, 4))},
                            {"name": "current_step", "value": str(step)},
                            {"name": "total_steps", "value": str(total)}],
                "lastUpdatedTime": ts(sec)}}))
            sec += 60 + rng.randint(-3, 3)
        sec = START + 30
        while sec < END:
            gpus = []
            per_pod = j["gpus"] // len(j["pods"])
            for pod in j["pods"]:
                for g in range(per_pod):
                    if sec < j["fails"]:
                        util, power, fb = rng.randint(93, 99), round(rng.uniform(610, 690), 1), 71000 + rng.randint(0, 900)
                    elif j["mode"] == "hang":
                        util, power, fb = 100, round(rng.uniform(405, 430), 1), 71000 + rng.randint(0, 900)
                    else:
                        util, power, fb = 0, round(rng.uniform(55, 64), 1), 71000 + rng.randint(0, 900)
                    gpus.append({"id": f"{pod}/{g}", "util": util, "power": power, "fbUsed": fb})
            lines.append((sec, 2, {"time": ts(sec), "job": key, "gpu": gpus}))
            sec += 60
    lines.sort(key=lambda t: (t[0], t[1]))
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "stream.jsonl"), "w") as f:
        for _, _, obj in lines:
            f.write(json.dumps(obj, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
