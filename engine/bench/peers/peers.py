#!/usr/bin/env python3
"""trainwarden against its Python peers on one stream, in one run (see run.sh, which sets everything up).

Engines, all single-threaded, all reading the same JSONL file:
  * `trainwarden replay --output json` with ray-plateau.yaml and optuna-patience.yaml (release build), timed
    from the outside as a whole process: start-up, reading the file, decoding, evaluation, JSON output;
  * `replay_stream`: the same engine and output, fed line by line as lines are read (the CLI first decodes
    every line of every file into memory and sorts, to merge several streams), timed the same way; its
    output must equal the CLI's;
  * Ray Tune's TrialPlateauStopper, called per sample as Tune's controller calls it: stopper(trial_id, result);
  * Optuna's PatientPruner(None, patience, min_delta) on a real in-memory study: per sample trial.report()
    then trial.should_prune(), as an objective function does;
  * `decode_floor`: the file decoded line by line into serde_json::Value and nothing else (the floor for any
    reader of this stream), timed like trainwarden; `decode_floor --typed`, each line decoded into a typed
    struct borrowing its strings (the floor of a serde_json reader that keeps every field); and json.loads
    alone, the floor for the Python peers.
Python engines are timed in-process from opening the file to the last decision: interpreter start-up and
imports (seconds for ray) are left out, in the peers' favour. Then every engine again on samples decoded
beforehand, untimed (`replay_stream --evaluate-only` times only Replay::feed; the peers only their calls),
to separate deciding from decoding. A stopped job's later lines are still read
and decoded by every engine (Tune would stop calling the stopper; trainwarden ignores them), so every
engine handles the same number of lines and samples/s means lines of this file per second.

Decisions: the sample (0-based index within its job) at which each engine stops each job. Where an engine
and trainwarden differ, the difference is explained by re-running the peer's own rule on the values
trainwarden counts as observations (NaN and bit-identical repeats are not; see series.rs): if that gives
trainwarden's answer, the difference is the documented observation semantics, and the report says which.
Anything else is an unexplained disagreement and fails the run.
"""

import argparse
import json
import math
import subprocess
import sys
import time
import warnings

STD, NUM_RESULTS, GRACE = 0.002, 20, 50
PATIENCE, MIN_DELTA = 20, 0.0


def best_of(runs, command):
    """Wall time of the fastest of `runs` runs of a process, its stdout, and the least `evaluate_seconds`
    it reported on stderr (if any)."""
    best, out, evaluate = math.inf, None, math.inf
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
        best = min(best, time.perf_counter() - start)
        out = done.stdout
        for line in done.stderr.decode().splitlines():
            if line.startswith("evaluate_seconds "):
                evaluate = min(evaluate, float(line.split()[1]))
    return best, out, evaluate


def trainwarden_stops(stdout):
    stops = {}
    for line in stdout.decode().splitlines():
        event = json.loads(line)
        if event.get("action") == "suspend" and event["job"] not in stops:
            stops[event["job"]] = event["time"]
    return stops


def python_decode_floor(path):
    start = time.perf_counter()
    n = 0
    with open(path) as f:
        for line in f:
            json.loads(line)
            n += 1
    return time.perf_counter() - start, n


def results(path):
    """(job, result) per line, the result as Tune hands it to a stopper: the reported metrics by name."""
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            yield record["job"], {m["name"]: float(m["value"]) for m in record["trainerStatus"]["metrics"]}


def ray_peer(samples):
    """`samples`: results(path) to time decoding too, or a list of them to time the stopper alone."""
    from ray.tune.stopper import TrialPlateauStopper

    stopper = TrialPlateauStopper(metric="loss", std=STD, num_results=NUM_RESULTS, grace_period=GRACE, mode="min")
    stops, seen = {}, {}
    start = time.perf_counter()
    for job, result in samples:
        i = seen.get(job, 0)
        seen[job] = i + 1
        if job in stops:
            continue
        if stopper(job, result):
            stops[job] = i
    return time.perf_counter() - start, stops


def optuna_peer(samples, decide_only=False):
    """`samples` as for ray_peer. `decide_only` also sums the time of the pruner's decision alone
    (PatientPruner.prune on the trial's frozen state), to show where Optuna's time goes."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PatientPruner is marked experimental
        pruner = optuna.pruners.PatientPruner(None, patience=PATIENCE, min_delta=MIN_DELTA)
    study = optuna.create_study(direction="minimize", pruner=pruner)
    trials, stops, seen = {}, {}, {}
    in_prune = 0.0
    start = time.perf_counter()
    for job, result in samples:
        i = seen.get(job, 0)
        seen[job] = i + 1
        if job in stops:
            continue
        trial = trials.get(job)
        if trial is None:
            trial = trials[job] = study.ask()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # np.nanmin over an all-NaN window warns, then says "no"
            trial.report(result["loss"], i)
            if decide_only:
                frozen = trial._get_latest_trial()
                t0 = time.perf_counter()
                prune = pruner.prune(study, frozen)
                in_prune += time.perf_counter() - t0
            else:
                prune = trial.should_prune()
        if prune:
            stops[job] = i
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    return time.perf_counter() - start, stops, in_prune


# Reference rules, for explaining differences (not timed).


def ray_rule(values):
    for t in range(len(values)):
        seen = t + 1
        if seen < GRACE or seen < NUM_RESULTS:
            continue
        window = values[seen - NUM_RESULTS : seen]
        if any(math.isnan(v) for v in window):
            continue  # np.std is nan, and nan < std is False
        mean = sum(window) / NUM_RESULTS
        if math.sqrt(sum((v - mean) ** 2 for v in window) / NUM_RESULTS) < STD:
            return t
    return None


def optuna_rule(values):
    best_before = math.inf  # np.nanmin of the values before the last patience + 1
    for t in range(len(values)):
        if t >= PATIENCE + 1 and not math.isnan(values[t - PATIENCE - 1]):
            best_before = min(best_before, values[t - PATIENCE - 1])
        if t + 1 <= PATIENCE + 1:
            continue
        after = [v for v in values[t - PATIENCE : t + 1] if not math.isnan(v)]
        if best_before < math.inf and after and best_before + MIN_DELTA < min(after):
            return t
    return None


def observations(values):
    """Indices of the values trainwarden counts: finite, and not a bit-identical repeat of the latest value."""
    kept, latest = [], None
    for i, v in enumerate(values):
        repeat = latest is not None and (v == latest or (math.isnan(v) and math.isnan(latest)))
        latest = v
        if not repeat and math.isfinite(v):
            kept.append(i)
    return kept


def read_losses(path):
    losses, times = {}, {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            loss = next(float(m["value"]) for m in r["trainerStatus"]["metrics"] if m["name"] == "loss")
            series = losses.setdefault(r["job"], [])
            times[(r["job"], r["time"])] = len(series)
            series.append(loss)
    return losses, times


def compare(name, peer, ours, rule, losses):
    """Prints agreement; returns the number of unexplained differences."""
    agree, explained, unexplained = 0, {}, []
    for job, values in losses.items():
        theirs, mine = peer.get(job), ours.get(job)
        if theirs == mine:
            agree += 1
            continue
        if rule(values) != theirs:
            unexplained.append((job, theirs, mine, f"our model of {name} says {rule(values)}"))
            continue
        kept = observations(values)
        t = rule([values[i] for i in kept])
        if t is not None:
            t = kept[t]
        if t == mine:
            has_nan = any(math.isnan(v) for v in values)
            why = "NaN is no observation for trainwarden" if has_nan else "repeated values are no observation"
            key = (job.split("/")[1].split("-")[0], why)
            explained[key] = explained.get(key, []) + [(job, theirs, mine)]
        else:
            unexplained.append((job, theirs, mine, t))
    stopped = sum(1 for j in losses if j in peer)
    print(f"\n{name} vs trainwarden: {agree} of {len(losses)} jobs decided alike ({stopped} stopped by {name})")
    for (kind, why), jobs in sorted(explained.items()):
        example = ", ".join(f"{j} {a}→{b}" for j, a, b in jobs[:3])
        print(f"  {len(jobs)} {kind} job(s) differ: {why} (sample {name}→trainwarden, e.g. {example})")
    for job, theirs, mine, t in unexplained:
        print(f"  UNEXPLAINED {job}: {name} stops at {theirs}, trainwarden at {mine}, reference {t}")
    return len(unexplained)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--stream", required=True)
    p.add_argument("--trainwarden", required=True)
    p.add_argument("--decode-floor", required=True)
    p.add_argument("--replay-stream", required=True)
    p.add_argument("--policies", required=True, help="folder with ray-plateau.yaml and optuna-patience.yaml")
    p.add_argument("--runs", type=int, default=3, help="runs of each Rust process; the fastest counts")
    a = p.parse_args()

    losses, times = read_losses(a.stream)
    n = sum(len(v) for v in losses.values())
    print(f"stream: {a.stream}: {n} samples, {len(losses)} jobs")

    def replay(policy):
        cmd = [a.trainwarden, "replay", "--output", "json", "--policy", f"{a.policies}/{policy}", a.stream]
        secs, out, _ = best_of(a.runs, cmd)
        streamed_secs, streamed, _ = best_of(a.runs, [a.replay_stream, f"{a.policies}/{policy}", a.stream])
        assert streamed == out, f"replay_stream and trainwarden replay disagree on {policy}"
        _, evaluated, evaluate_secs = best_of(
            a.runs, [a.replay_stream, "--evaluate-only", f"{a.policies}/{policy}", a.stream]
        )
        assert evaluated == out, f"replay_stream --evaluate-only and trainwarden replay disagree on {policy}"
        stops = {job: times[(job, t)] for job, t in trainwarden_stops(out).items()}
        return secs, streamed_secs, evaluate_secs, stops

    floor_secs, out, _ = best_of(a.runs, [a.decode_floor, a.stream])
    assert int(out) == n
    typed_floor_secs, out, _ = best_of(a.runs, [a.decode_floor, "--typed", a.stream])
    assert int(out) == n
    tw_ray_secs, tw_ray_streamed, tw_ray_eval, tw_ray = replay("ray-plateau.yaml")
    tw_optuna_secs, tw_optuna_streamed, tw_optuna_eval, tw_optuna = replay("optuna-patience.yaml")
    py_floor_secs, _ = python_decode_floor(a.stream)
    ray_secs, ray = ray_peer(results(a.stream))
    optuna_secs, optuna_stops, _ = optuna_peer(results(a.stream))
    decoded = list(results(a.stream))
    ray_eval_secs, ray_eval = ray_peer(decoded)
    optuna_eval_secs, optuna_eval, optuna_prune_only = optuna_peer(decoded, decide_only=True)
    del decoded
    assert ray_eval == ray and optuna_eval == optuna_stops

    rate = lambda s: n / s
    rows = [
        ("serde_json decode only (floor, whole process)", floor_secs),
        ("serde_json typed, borrowing decode only (typed floor)", typed_floor_secs),
        ("trainwarden replay, Ray-std plateau rule", tw_ray_secs),
        ("trainwarden replay, Optuna-patience plateau rule", tw_optuna_secs),
        ("  same engine streamed (replay_stream), Ray-std rule", tw_ray_streamed),
        ("  same engine streamed (replay_stream), Optuna rule", tw_optuna_streamed),
        ("Python json.loads only (Python floor)", py_floor_secs),
        ("Ray TrialPlateauStopper (json.loads + stopper call)", ray_secs),
        ("Optuna PatientPruner (json.loads + report + should_prune)", optuna_secs),
    ]
    evaluation_rows = [
        ("trainwarden Replay::feed, Ray-std rule", tw_ray_eval),
        ("trainwarden Replay::feed, Optuna-patience rule", tw_optuna_eval),
        ("Ray: stopper(trial_id, result) calls", ray_eval_secs),
        ("Optuna: ask + report + should_prune + tell", optuna_eval_secs),
        ("  of which PatientPruner.prune alone", optuna_prune_only),
    ]
    print(f"\n{'engine':<60} {'samples/s':>12} {'µs/sample':>10}")
    for label, secs in rows:
        print(f"{label:<60} {rate(secs):>12,.0f} {secs / n * 1e6:>10.2f}")
    print("\nevaluation alone (every engine on samples decoded beforehand, untimed)")
    for label, secs in evaluation_rows:
        print(f"{label:<60} {rate(secs):>12,.0f} {secs / n * 1e6:>10.2f}")
    print("\nratios (same run)")
    print(f"  trainwarden (Ray rule) / Ray TrialPlateauStopper     {ray_secs / tw_ray_secs:8.1f}× faster   target ≥ 10×")
    print(f"  trainwarden (Optuna rule) / Optuna PatientPruner     {optuna_secs / tw_optuna_secs:8.1f}× faster   target ≥ 50×")
    print(f"  streamed engine (Ray rule) / Ray                     {ray_secs / tw_ray_streamed:8.1f}× faster")
    print(f"  streamed engine (Optuna rule) / Optuna               {optuna_secs / tw_optuna_streamed:8.1f}× faster")
    print(f"  trainwarden (Ray rule) / typed decode floor          {tw_ray_secs / typed_floor_secs:8.2f}× the floor   target ≤ 2×")
    print(f"  trainwarden (Optuna rule) / typed decode floor       {tw_optuna_secs / typed_floor_secs:8.2f}× the floor   target ≤ 2×")
    print(f"  trainwarden (Ray rule) / serde_json Value floor      {tw_ray_secs / floor_secs:8.2f}× the floor")
    print(f"  trainwarden (Optuna rule) / serde_json Value floor   {tw_optuna_secs / floor_secs:8.2f}× the floor")
    print(f"  streamed engine (Ray rule) / decode floor            {tw_ray_streamed / floor_secs:8.2f}× the floor")
    print(f"  Ray / Python json.loads floor                        {ray_secs / py_floor_secs:8.2f}× its floor")
    print(f"  evaluation alone: trainwarden / Ray                  {ray_eval_secs / tw_ray_eval:8.1f}× faster")
    print(f"  evaluation alone: trainwarden / Optuna               {optuna_eval_secs / tw_optuna_eval:8.1f}× faster")

    failures = compare("Ray", ray, tw_ray, ray_rule, losses)
    failures += compare("Optuna", optuna_stops, tw_optuna, optuna_rule, losses)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
