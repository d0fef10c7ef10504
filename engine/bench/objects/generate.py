"""A recorded watch of a fleet: JOBS jobs x REPORTS reports 30 s apart, each line a whole TrainJob object as
kube-apiserver delivers it (tests/fixtures/trainjob-from-apiserver.json, managedFields included, plus the
conditions and jobsStatus the Trainer controller writes), in time order, in namespace "default" so that
policies/plateau.yaml selects them. One job in ten stops learning after 400 reports. With "rhoai" the
progress rides in RHOAI's trainer.opendatahub.io/trainerStatus annotation instead of status.trainerStatus.

usage: generate.py OUT.jsonl JOBS REPORTS [rhoai]
"""
import copy
import datetime
import json
import math
import os
import sys

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../tests/fixtures/trainjob-from-apiserver.json")
START = 1795798800  # 2026-11-27T17:00:00Z


def rfc3339(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def trainer_status(i, reports, loss, at):
    metric = lambda name, value: {"name": name, "value": value}  # noqa: E731
    return {
        "progressPercentage": min(99, i * 100 // reports),
        "estimatedRemainingSeconds": (reports - i) * 30,
        "lastUpdatedTime": at,
        "metrics": [
            metric("loss", f"{loss:.4f}"),
            metric("grad_norm", "1.532"),
            metric("learning_rate", "3.1e-05"),
            metric("current_step", str(i * 10)),
            metric("total_steps", str(reports * 10)),
        ],
    }


def rhoai_annotation(i, reports, loss, at):
    return json.dumps(
        {
            "progressPercentage": min(99, i * 100 // reports),
            "estimatedRemainingSeconds": (reports - i) * 30,
            "currentStep": i * 10,
            "totalSteps": reports * 10,
            "trainMetrics": {"loss": round(loss, 4), "grad_norm": 1.5},
            "evalMetrics": {"eval_loss": round(loss + 0.05, 4)},
            "lastUpdatedTime": at,
        },
        separators=(",", ":"),
    )


def main():
    out_path, jobs, reports = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rhoai = len(sys.argv) > 4 and sys.argv[4] == "rhoai"
    with open(FIXTURE) as f:
        base = json.load(f)
    with open(out_path, "w") as out:
        for i in range(reports):
            for j in range(jobs):
                at = rfc3339(START + i * 30 + j % 30)
                learning = min(i, 400) if j % 10 == 0 else i
                loss = 2.5 * math.exp(-learning / 800) + 0.8
                job = copy.deepcopy(base)
                meta = job["metadata"]
                meta.update(name=f"job-{j}", namespace="default", resourceVersion=str(1000 + i * jobs + j))
                meta["creationTimestamp"] = rfc3339(START - 3600)
                status = job["status"]
                status["conditions"] = [
                    {"type": "Suspended", "status": "False", "reason": "Resumed",
                     "message": "TrainJob is resumed", "lastTransitionTime": rfc3339(START - 600)}
                ]
                status["jobsStatus"] = [
                    {"name": "node", "ready": 3, "succeeded": 0, "failed": 0, "active": 3, "suspended": 0}
                ]
                if rhoai:
                    del status["trainerStatus"]
                    annotations = meta.setdefault("annotations", {})
                    annotations["trainer.opendatahub.io/trainerStatus"] = rhoai_annotation(i, reports, loss, at)
                else:
                    status["trainerStatus"] = trainer_status(i, reports, loss, at)
                out.write(json.dumps(job, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
