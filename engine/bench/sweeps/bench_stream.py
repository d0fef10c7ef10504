#!/usr/bin/env python3
"""A sweep stream for bench.sh: TRIALS trials of one Katib experiment, STEPS reports each, in WAVES waves (a
wave starts when the one before it is done, so the early trials are finished references for `percentile`);
within a wave every trial reports step s before any reports step s+1. Deterministic (seeded by trial)."""
import math
import random
import sys


def main():
    out, trials, steps, waves = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    per_wave = math.ceil(trials / waves)
    line = 0
    with open(out, "w") as f:
        for wave in range(waves):
            members = range(wave * per_wave, min(trials, (wave + 1) * per_wave))
            rngs = {t: random.Random(t) for t in members}
            floors = {t: 0.2 + (t * 7919 % 1000) / 1000 for t in members}
            for step in range(1, steps + 1):
                for t in members:
                    s = 1_796_083_200 + line  # 2026-12-01T00:00:00Z, a line a second
                    loss = floors[t] + 2.0 * math.exp(-3.0 * step / steps) + rngs[t].gauss(0.0, 0.01)
                    first = ',"labels":{"katib.kubeflow.org/experiment":"bench"},"phase":"Running","gpus":8' if step == 1 else ""
                    f.write(
                        f'{{"time":"{iso(s)}","job":"bench/t{t:05d}","trainerStatus":{{"metrics":['
                        f'{{"name":"loss","value":"{loss!r}"}},{{"name":"current_step","value":"{step}"}}],'
                        f'"lastUpdatedTime":"{iso(s)}"}}{first}}}\n'
                    )
                    line += 1
            for t in members:
                f.write(f'{{"time":"{iso(1_796_083_200 + line)}","job":"bench/t{t:05d}","phase":"Complete"}}\n')
                line += 1


def iso(s):
    import datetime

    return datetime.datetime.fromtimestamp(s, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


if __name__ == "__main__":
    main()
