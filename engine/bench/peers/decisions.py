#!/usr/bin/env python3
"""Decision quality: the peers, run for real on the corpus, judged by trainwarden's own judgement next to
the default catalog (BENCHMARKS.md, "Decision quality"; decisions.sh sets everything up).

For each run of the corpus, the reports that carry a new result of the watched metric (corpus.py says the
rule) are fed one at a time to each peer (peer_rules.py says which are the libraries' own objects and which
are re-implementations); a peer's first stop is the run's stop. Each peer runs at its documented defaults
and at one tuned setting, the tuned setting chosen by a grid search on the tuning part of the corpus only
(runs labelled `trainwarden.dev/corpus-split=tune`) by this objective, fixed before any run:

    the most GPU-hours saved, among the settings that make no more false stops on the tuning part than the
    default catalog makes there (plateau, divergence, stall and weekend-safe side by side: each run's first
    stop by any of them; same judgement, same run); ties: fewer false stops, then fewer healthy runs
    stopped, then the earlier grid point (the default comes first). If no setting qualifies: the fewest
    false stops, then the most GPU-hours saved.

That is the setting most likely to beat the catalog at its own game (save more with no more false stops),
which is what the table is there to find out. (The grids, in peer_rules.py, were widened once after the
first run, when no setting of three peers kept within the budget; BENCHMARKS.md says how.)

Every setting's stops are written as JSONL, one object per stop (`{"job", "time", "rule", "metric"}`, the
time being that of the report at which it stopped), and judged by `trainwarden backtest --stops FILE`,
the catalog by `trainwarden backtest policies/<p>.yaml`, each on the held-out part and the tuning part
separately. The table is printed and written to OUT/decision-quality.md; every stops file and every
backtest report stays in OUT.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import corpus  # noqa: E402
import judge  # noqa: E402
from peer_rules import PEERS, Setting, run_setting  # noqa: E402

CATALOG = ("plateau", "divergence", "stall", "weekend-safe")
SPLIT_LABEL = "trainwarden.dev/corpus-split"


def feed(runs: list[corpus.Run], metric: str, rule: str):
    """Per job: the new results of `metric` as a peer gets them, and the reports they came from."""
    jobs, reports = {}, {}
    for run in runs:
        kept = corpus.new_results(run, metric, rule)
        jobs[run.job] = [(r.step, r.metrics[metric], r.metrics) for _, r in kept]
        reports[run.job] = [r for _, r in kept]
    return jobs, reports


def write_stops(path: str, name: str, metric: str, stops: dict[str, int], reports) -> None:
    with open(path, "w") as f:
        for job in sorted(stops):
            r = reports[job][stops[job]]
            f.write(json.dumps({"job": job, "time": r.time, "rule": name, "metric": metric}) + "\n")


_FEED = None  # the jobs' results, set before the workers fork (so they are not pickled per task)


def _decide(task):
    setting, metric = task
    return setting, run_setting(setting, _FEED, metric)


def decide_all(settings: list[Setting], jobs, metric: str, workers: int) -> dict[Setting, dict[str, int]]:
    """Every setting's stops; settings are independent, so they are spread over `workers` processes."""
    global _FEED
    _FEED = jobs
    tasks = [(s, metric) for s in settings]
    if workers <= 1:
        return dict(map(_decide, tasks))
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return dict(pool.imap_unordered(_decide, tasks))


def choose(candidates, budget: int):
    """The tuned setting by the module's objective. `candidates`: (grid index, setting, figures) on the
    tuning part; `budget`: the default catalog's false stops there."""
    ok = [c for c in candidates if c[2].false_stops <= budget]
    if ok:
        return min(ok, key=lambda c: (-c[2].gpu_hours_saved, c[2].false_stops, c[2].healthy_stopped, c[0]))
    return min(candidates, key=lambda c: (c[2].false_stops, -c[2].gpu_hours_saved, c[0]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("corpus", help="the corpus: a directory whose *.jsonl files are streams (examples/corpus)")
    p.add_argument("--trainwarden", required=True, help="the trainwarden binary that judges")
    p.add_argument("--policies", required=True, help="the catalog's directory (policies/)")
    p.add_argument("--out", required=True, help="directory for stops files, backtest reports and the table")
    p.add_argument("--metric", default="loss", help="the metric every peer watches (default loss)")
    p.add_argument("--new-result", choices=corpus.RULES, default="logged", help="see corpus.py (default logged)")
    p.add_argument("--tune", default="tune", help=f"{SPLIT_LABEL} value of the tuning part")
    p.add_argument("--held-out", default="heldout", help=f"{SPLIT_LABEL} value of the held-out part")
    p.add_argument("--stops-only", action="store_true", help="write the default settings' stops, judge nothing")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: every core)")
    a = p.parse_args()

    started = time.time()
    os.makedirs(os.path.join(a.out, "stops"), exist_ok=True)
    os.makedirs(os.path.join(a.out, "grid"), exist_ok=True)
    os.makedirs(os.path.join(a.out, "backtest"), exist_ok=True)
    try:
        runs = corpus.read_runs(a.corpus)
    except corpus.CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    jobs, reports = feed(runs, a.metric, a.new_result)
    splits = {}
    for run in runs:
        splits.setdefault(run.label(SPLIT_LABEL) or "(none)", []).append(run.job)
    n_results = sum(len(v) for v in jobs.values())
    n_reports = sum(len(r.reports) for r in runs)
    print(
        f"corpus {a.corpus}: {len(runs)} runs, {n_reports} reports, {n_results} new results of {a.metric} "
        f"(rule: {a.new_result}); split by {SPLIT_LABEL}: "
        + ", ".join(f"{k} {len(v)}" for k, v in sorted(splits.items()))
    )

    if not a.stops_only:
        for part in (a.tune, a.held_out):
            if part not in splits:
                found = ", ".join(sorted(splits))
                print(f"error: no run has {SPLIT_LABEL}={part} (found: {found})", file=sys.stderr)
                return 2

    defaults = {key: Setting(key, peer.default) for key, peer in PEERS.items()}
    grids = {key: [peer.default] + [p for p in peer.grid if p != peer.default] for key, peer in PEERS.items()}
    settings = list(defaults.values()) if a.stops_only else [Setting(k, p) for k, ps in grids.items() for p in ps]
    t0 = time.time()
    decided = decide_all(settings, jobs, a.metric, a.jobs)
    print(f"{len(settings)} peer settings decided on every run in {time.time() - t0:.0f} s ({a.jobs} processes)")

    def stops_file(setting: Setting, name: str, folder: str) -> str:
        path = os.path.join(a.out, folder, f"{name}.jsonl")
        write_stops(path, name, a.metric, decided[setting], reports)
        return path

    if a.stops_only:
        for key, setting in defaults.items():
            path = stops_file(setting, f"{key}-default", "stops")
            print(f"{key}-default: {setting.describe()}: {len(decided[setting])} stops -> {path}")
        return 0

    bt = judge.Backtest(a.trainwarden, corpus.stream_files(a.corpus), os.path.join(a.out, "backtest"), SPLIT_LABEL)
    policies = [os.path.join(a.policies, f"{p}.yaml") for p in CATALOG]

    # The grid of every peer, judged on the tuning part in one backtest, beside the catalog.
    grid = []
    for key, points in grids.items():
        for i, params in enumerate(points):
            setting = Setting(key, params)
            name = f"{key}-grid-{setting.slug()}"
            grid.append((key, i, setting, name, stops_file(setting, name, "grid")))
    try:
        tuned_on = bt.run("grid-" + a.tune, a.tune, policies, [g[4] for g in grid])
    except judge.BacktestError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    catalog_together = tuned_on.together
    budget = catalog_together.false_stops
    print(
        f"default catalog on {a.tune} (its four policies side by side): {budget} false stops, "
        f"{catalog_together.gpu_hours_saved:.1f} GPU-h saved: the tuned peers may make {budget} false stops"
    )
    chosen = {}
    with open(os.path.join(a.out, f"grid-{a.tune}.tsv"), "w") as f:
        f.write("peer\tsetting\tstops\tfalse_stops\thealthy_stopped\tcaught\tbad_runs\tgpu_hours_saved\tlost_gpu_hours\n")
        for key, _, setting, name, _ in grid:
            g = tuned_on.rule(name)
            f.write(
                f"{key}\t{setting.describe()}\t{g.stops}\t{g.false_stops}\t{g.healthy_stopped}\t{g.caught}\t"
                f"{g.bad_runs}\t{g.gpu_hours_saved:.2f}\t{g.lost_gpu_hours:.2f}\n"
            )
    for key in PEERS:
        candidates = [(i, setting, tuned_on.rule(name)) for k, i, setting, name, _ in grid if k == key]
        _, best, figures = choose(candidates, budget)
        qualified = sum(1 for c in candidates if c[2].false_stops <= budget)
        chosen[key] = best
        print(
            f"  {key}: {len(candidates)} settings tried, {qualified} within {budget} false stops; tuned "
            f"{best.describe()}: {figures.stops} stops, {figures.false_stops} false, "
            f"{figures.gpu_hours_saved:.1f} GPU-h saved"
        )

    # Defaults and tuned settings, with the catalog, on each part.
    finals = []
    for key in PEERS:
        for kind, setting in (("default", defaults[key]), ("tuned", chosen[key])):
            name = f"{key}-{kind}"
            finals.append((name, setting, stops_file(setting, name, "stops")))
    rows = {}
    for part in (a.held_out, a.tune):
        try:
            judged = bt.run(part, part, policies, [f[2] for f in finals])
        except judge.BacktestError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        rows[part] = [(f"`policies/{p}.yaml`", judged.policy(p)) for p in CATALOG]
        rows[part].append(("the four side by side (each run's first stop)", judged.together))
        rows[part] += [(f"{name}: `{setting.describe()}`", judged.rule(name)) for name, setting, _ in finals]

    text = ""
    for part, title in ((a.held_out, "Held-out part"), (a.tune, "Tuning part")):
        n = len(splits[part])
        text += f"{title} (`{SPLIT_LABEL}={part}`, {n} runs):\n\n" + judge.table(rows[part]) + "\n"
    header = (
        f"Corpus `{a.corpus}`: {len(runs)} runs ({', '.join(f'{k} {len(v)}' for k, v in sorted(splits.items()))}); "
        f"peers watch `{a.metric}`, fed one report per new result (rule `{a.new_result}`); "
        f"tuned settings: the most GPU-hours saved on `{a.tune}` with at most {budget} false stops "
        f"(the default catalog's there). Judged by `trainwarden backtest` ({judged.judgement}).\n"
    )
    with open(os.path.join(a.out, "decision-quality.md"), "w") as f:
        f.write(header + "\n" + text)
    print("\n" + header + "\n" + text)
    print(f"({time.time() - started:.0f} s; stops and reports in {a.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
