#!/usr/bin/env python3
"""The idle-fleet stream of BENCHMARKS.md: N jobs (default 20,000) that each report twice, a minute apart, and
then go quiet. Writes stream.jsonl next to this file."""
import json
import os
import sys

jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stream.jsonl")
with open(out, "w") as f:
    for k in range(2):
        t = f"2026-01-01T00:0{k}:00Z"
        for j in range(jobs):
            status = {"progressPercentage": 10 + k, "estimatedRemainingSeconds": 36000, "lastUpdatedTime": t,
                      "metrics": [{"name": "loss", "value": str(2.0 - 0.1 * k)}]}
            f.write(json.dumps({"time": t, "job": f"ml/j{j}", "trainerStatus": status}) + "\n")
print(out)
