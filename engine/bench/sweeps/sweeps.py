#!/usr/bin/env python3
"""trainwarden's cohort detectors against the peers they follow, fed the same reports in the same order.

Generates sweeps with known shapes (see `SWEEPS`): trials whose loss falls as floor + amp·exp(-rate·step) plus
seeded noise, started in waves (so early trials complete before late ones start: Optuna's references), one trial
whose loss turns NaN and which then fails, and two late-starting trials. Every running trial reports every step;
a trial reports nothing after the engine under test stopped it (each engine sees the same schedule minus its own
stops). Then, per pair below, the set of stopped trials and the step each is stopped at, trainwarden against the
peer:

  median_stop                            Ray Tune 2.60 MedianStoppingRule (hard_stop)
  percentile 50                          Optuna 5.0 MedianPruner
  percentile 25 (interval, minPeers)     Optuna 5.0 PercentilePruner
  successive_halving (cutoff: rank)      Optuna 5.0 SuccessiveHalvingPruner
  successive_halving (cutoff: percentile) Ray Tune 2.60 ASHAScheduler (stopping mode)

The peers run in-process as their frameworks call them (Optuna: trial.report(); trial.should_prune(); a
completed trial is told COMPLETE, the NaN trial FAIL; Ray: scheduler.on_trial_result() per result). trainwarden
runs as a user runs it: `trainwarden replay --output json` (Enforce mode: a suspended job's later lines are
ignored) on the same reports written as a stream, over 3 evaluator threads (a cohort's jobs share one).

Deliberate differences (docs/src/ml-engineers/sweeps.md) are recognised, not hidden: Ray's ASHA lets a trial
whose value at a rung is NaN continue, trainwarden stops it there. Any other difference fails the run.
Exit status 0 when every pair agrees up to the deliberate differences.
"""

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import warnings

STEPS = 30  # every trial reports steps 1..STEPS
LABEL = "katib.kubeflow.org/experiment"

# name: (seed, trials, how the floors spread, noise sigma)
SWEEPS = {
    "spread": (1, 12, "spread", 0.01),
    "crossing": (2, 12, "crossing", 0.01),
    "noisy": (3, 12, "spread", 0.05),
}
NAN_TRIAL, NAN_FROM, NAN_FAILS_AT = 4, 8, 12  # trial 4 of each sweep: NaN from step 8, fails after step 12

PAIRS = {
    "median_stop": (
        {"metric": "loss", "startStep": 5, "minJobs": 3},
        "ray MedianStoppingRule(time_attr=step, grace_period=5, min_samples_required=3, hard_stop=True)",
    ),
    "median_pruner": (
        {"metric": "loss", "percentile": 50, "minJobs": 3, "startStep": 5},
        "optuna MedianPruner(n_startup_trials=3, n_warmup_steps=5)",
    ),
    "percentile_pruner": (
        {"metric": "loss", "percentile": 25, "minJobs": 3, "startStep": 5, "interval": 3, "minPeers": 2},
        "optuna PercentilePruner(25, n_startup_trials=3, n_warmup_steps=5, interval_steps=3, n_min_trials=2)",
    ),
    "sh_pruner": (
        {"metric": "loss", "minResource": 1, "reductionFactor": 3},
        "optuna SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)",
    ),
    "asha": (
        {"metric": "loss", "minResource": 1, "reductionFactor": 3, "maxResource": STEPS, "cutoff": "percentile"},
        f"ray ASHAScheduler(time_attr=step, max_t={STEPS}, grace_period=1, reduction_factor=3)",
    ),
}
DETECTOR = {
    "median_stop": "median_stop",
    "median_pruner": "percentile",
    "percentile_pruner": "percentile",
    "sh_pruner": "successive_halving",
    "asha": "successive_halving",
}


def curve(sweep, trial):
    """A trial's losses at steps 1..STEPS (NaN from NAN_FROM for the NaN trial)."""
    seed, trials, shape, sigma = SWEEPS[sweep]
    rng = random.Random(seed * 1000 + trial)
    if shape == "spread":
        floor, amp, rate = 0.2 + 0.06 * ((trial * 7) % trials), 1.5, 0.15 + 0.02 * (trial % 3)
    else:  # crossing: fast starters end high, slow starters end low
        fast = trial % 2 == 0
        floor = (0.6 if fast else 0.25) + 0.03 * (trial % 5)
        amp, rate = (1.0, 0.5) if fast else (2.0, 0.08)
    if trial == NAN_TRIAL:
        floor = 0.1  # the best trial until it diverges: it lives long enough to reach a rung with NaN
    values = []
    for step in range(1, STEPS + 1):
        v = floor + amp * math.exp(-rate * step) + rng.gauss(0.0, sigma)
        if trial == NAN_TRIAL and step >= NAN_FROM:
            v = float("nan")
        values.append(v)
    return values


def schedule():
    """The reports in order: (sweep, trial, step, value), and ("end", sweep, trial, state) after a trial's
    last report. Trials start in waves of four, 12 ticks apart; the last two trials of each sweep start late,
    when the first wave is done. Within a tick, sweeps and trials in a fixed shuffled order."""
    starts = {}
    for sweep, (seed, trials, _, _) in SWEEPS.items():
        for t in range(trials):
            starts[(sweep, t)] = (t // 4) * 12 if t < trials - 2 else STEPS + 5
    curves = {k: curve(*k) for k in starts}
    events = []
    rng = random.Random(45)
    last = max(starts.values()) + STEPS + 1
    for tick in range(last):
        running = [k for k, s in starts.items() if s <= tick < s + STEPS]
        rng.shuffle(running)
        for sweep, t in running:
            step = tick - starts[(sweep, t)] + 1
            if t == NAN_TRIAL and step > NAN_FAILS_AT:
                continue
            events.append(("report", sweep, t, step, curves[(sweep, t)][step - 1]))
            if t == NAN_TRIAL and step == NAN_FAILS_AT:
                events.append(("end", sweep, t, "Failed"))
            elif step == STEPS:
                events.append(("end", sweep, t, "Complete"))
    return events


def job_name(sweep, trial):
    return f"{sweep}-t{trial:02d}"


def stamp(i):
    """The time of the `i`-th line of the comparison stream: a second apart."""
    return f"2026-12-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z"


def write_stream(events, path, times=None, gpus=None):
    """The reports as a trainwarden stream, one line per report, labels (and `gpus`) on each job's first.
    `times(i)` is the time of the i-th line (default: a second apart)."""
    times = times or stamp
    seen = set()
    with open(path, "w") as f:
        for i, e in enumerate(events):
            time = times(i)
            if e[0] == "end":
                _, sweep, t, state = e
                line = {"time": time, "job": f"sweeps/{job_name(sweep, t)}", "phase": state}
            else:
                _, sweep, t, step, value = e
                line = {
                    "time": time,
                    "job": f"sweeps/{job_name(sweep, t)}",
                    "trainerStatus": {
                        "progressPercentage": int(100 * step / STEPS) if step < STEPS else 99,
                        "metrics": [
                            {"name": "loss", "value": repr(value)},
                            {"name": "current_step", "value": str(step)},
                            {"name": "total_steps", "value": str(STEPS)},
                        ],
                        "lastUpdatedTime": time,
                    },
                }
                if (sweep, t) not in seen:
                    seen.add((sweep, t))
                    line["labels"] = {LABEL: sweep}
                    line["phase"] = "Running"
                    if gpus:
                        line["gpus"] = gpus
            f.write(json.dumps(line) + "\n")


def policy_yaml(pair):
    with_, _ = PAIRS[pair]
    return (
        "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\n"
        f"metadata: {{name: {pair.replace('_', '-')}, namespace: sweeps}}\n"
        "spec:\n  mode: Enforce\n  rules:\n"
        f"    - name: cohort\n      uses: {DETECTOR[pair]}\n      with: {json.dumps(with_)}\n"
        "      actions: [{suspend: {}}]\n"
    )


def trainwarden_stops(binary, stream, pair, tmp):
    """{job: step} of the jobs `pair`'s policy suspends."""
    policy = os.path.join(tmp, f"{pair}.yaml")
    with open(policy, "w") as f:
        f.write(policy_yaml(pair))
    out = subprocess.run(
        [binary, "replay", "--policy", policy, "--output", "json", "--shards", "3", stream],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        check=False,
    )
    if out.returncode != 0:
        sys.exit(f"trainwarden replay failed ({out.returncode}):\n{out.stderr.decode()}")
    stops = {}
    for line in out.stdout.decode().splitlines():
        event = json.loads(line)
        if event.get("action") == "suspend":
            stops.setdefault(event["job"].split("/", 1)[1], event["time"])
    return stops


def times_to_steps(events, stops):
    """trainwarden's stop times → the step of the report at that time (one report a second)."""
    by_time = {}
    for i, e in enumerate(events):
        time = stamp(i)
        if e[0] == "report":
            by_time[time] = e[3]
    return {job: by_time[time] for job, time in stops.items()}


def optuna_stops(events, make_pruner):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    studies = {s: optuna.create_study(direction="minimize", pruner=make_pruner()) for s in SWEEPS}
    trials, stopped, stops = {}, set(), {}
    for e in events:
        key = (e[1], e[2])
        if key in stopped:
            continue
        if e[0] == "end":
            study, trial = studies[e[1]], trials[key]
            if e[3] == "Complete":
                study.tell(trial, trial_value(events, key))
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        _, sweep, t, step, value = e
        if key not in trials:
            trials[key] = studies[sweep].ask()
        trial = trials[key]
        trial.report(value, step)
        if trial.should_prune():
            studies[sweep].tell(trial, state=optuna.trial.TrialState.PRUNED)
            stopped.add(key)
            stops[job_name(*key)] = step
    return stops


def trial_value(events, key):
    last = [e for e in events if e[0] == "report" and (e[1], e[2]) == key][-1]
    return last[4]


class _Trial:
    def __init__(self, trial_id):
        self.trial_id = trial_id
        self.status = "RUNNING"


class _Controller:
    """What a Ray scheduler asks its controller here: the live trials (none waits, so nothing is paused)."""

    def get_live_trials(self):
        return []


def ray_stops(events, make_scheduler):
    from ray.tune.schedulers import TrialScheduler

    schedulers = {s: make_scheduler() for s in SWEEPS}
    trials, stopped, stops, controller = {}, set(), {}, _Controller()
    for e in events:
        key = (e[1], e[2])
        if e[0] == "end" or key in stopped:
            continue
        _, sweep, t, step, value = e
        if key not in trials:
            trials[key] = _Trial(job_name(sweep, t))
            schedulers[sweep].on_trial_add(controller, trials[key])
        action = schedulers[sweep].on_trial_result(controller, trials[key], {"step": step, "loss": value})
        if action == TrialScheduler.STOP:
            stopped.add(key)
            # ASHA stops every trial that reaches max_t: that is its end, not an early stop.
            if step < STEPS:
                stops[job_name(sweep, t)] = step
    return stops


def peers(events):
    import optuna
    from ray.tune.schedulers import ASHAScheduler, MedianStoppingRule

    p = optuna.pruners
    return {
        "median_stop": ray_stops(
            events,
            lambda: MedianStoppingRule(
                time_attr="step", metric="loss", mode="min", grace_period=5, min_samples_required=3, hard_stop=True
            ),
        ),
        "median_pruner": optuna_stops(events, lambda: p.MedianPruner(n_startup_trials=3, n_warmup_steps=5)),
        "percentile_pruner": optuna_stops(
            events,
            lambda: p.PercentilePruner(25, n_startup_trials=3, n_warmup_steps=5, interval_steps=3, n_min_trials=2),
        ),
        "sh_pruner": optuna_stops(
            events, lambda: p.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3, min_early_stopping_rate=0)
        ),
        "asha": ray_stops(
            events,
            lambda: ASHAScheduler(
                time_attr="step", metric="loss", mode="min", max_t=STEPS, grace_period=1, reduction_factor=3
            ),
        ),
    }


def deliberate(pair, job, tw_step, peer_step, events):
    """Why a difference is one the docs state, or None."""
    if pair != "asha" or tw_step is None:
        return None
    sweep, trial = job.rsplit("-t", 1)
    value = [e[4] for e in events if e[0] == "report" and e[1] == sweep and e[2] == int(trial) and e[3] == tw_step]
    if value and math.isnan(value[0]) and (peer_step is None or peer_step > tw_step):
        return "NaN at a rung: trainwarden stops, Ray's ASHA continues"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainwarden", required=True, help="the trainwarden binary")
    ap.add_argument("--example", metavar="FILE", help="write the sweeps as examples/sweep's stream and exit: "
                    "8 GPUs per trial, a step every 10 minutes (every running trial reports in one minute)")
    args = ap.parse_args()
    if args.example:
        events = schedule()
        ticks, line_at = {}, []
        tick, offset = 0, 0
        for e in events:  # a new tick begins where a trial reports again
            if e[0] == "report" and (e[1], e[2]) in ticks:
                tick, offset, ticks = tick + 1, 0, {}
            if e[0] == "report":
                ticks[(e[1], e[2])] = True
            line_at.append(tick * 600 + offset)
            offset += 1

        def example_time(i):
            seconds = line_at[i]
            return f"2026-12-0{1 + seconds // 86400}T{seconds // 3600 % 24:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}Z"
        write_stream(events, args.example, times=example_time, gpus=8)
        return 0
    warnings.filterwarnings("ignore")
    events = schedule()
    reports = sum(1 for e in events if e[0] == "report")
    with tempfile.TemporaryDirectory() as tmp:
        stream = os.path.join(tmp, "sweeps.jsonl")
        write_stream(events, stream)
        tw = {pair: times_to_steps(events, trainwarden_stops(args.trainwarden, stream, pair, tmp)) for pair in PAIRS}
    peer = peers(events)
    trials = sum(t for _, t, _, _ in SWEEPS.values())
    print(f"{len(SWEEPS)} sweeps, {trials} trials, {reports} reports in one order; stopped trials and their step:")
    failed = False
    for pair, (with_, peer_name) in PAIRS.items():
        a, b = tw[pair], peer[pair]
        same = sorted(j for j in a.keys() & b.keys() if a[j] == b[j])
        diffs = []
        for job in sorted(a.keys() | b.keys()):
            if a.get(job) == b.get(job):
                continue
            why = deliberate(pair, job, a.get(job), b.get(job), events)
            diffs.append((job, a.get(job), b.get(job), why))
            failed |= why is None
        print(f"\n{DETECTOR[pair]} {json.dumps(with_)}\n  vs {peer_name}")
        print(f"  both stop {len(same)} trials at the same step" + (f": {', '.join(f'{j}@{a[j]}' for j in same)}" if same else ""))
        for job, x, y, why in diffs:
            print(f"  {'DELIBERATE' if why else 'DIFFERENT'} {job}: trainwarden {x or 'never'}, peer {y or 'never'}" + (f" ({why})" if why else ""))
    print("\nresult: " + ("DIFFERENT" if failed else "equal up to the deliberate differences"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
