#!/usr/bin/env python3
"""Convert the real training logs under raw/ into trainwarden progress streams (one JSONL per run).

Usage:
    python3 examples/corpus/convert.py          # (re)write every <name>.jsonl listed in SOURCES.tsv
    python3 examples/corpus/convert.py --check  # exit 1 if a committed stream differs from what it would write
    python3 examples/corpus/convert.py --namespace NS --out DIR  # the same streams with the jobs in
                                                       # another namespace (see README: the catalog
                                                       # ProgressPolicies only judge their own namespace)
    python3 examples/corpus/convert.py --table  # print the README's table of runs

Python 3 standard library only; deterministic (no clock, no randomness, no dict-order surprises).

Input formats (column `format` of SOURCES.tsv):
  trainer_state  a Hugging Face transformers `trainer_state.json` (or a trimmed copy of one that keeps the
                 top-level keys and, of `log_history`, the entries and keys listed in SOURCES.tsv `notes`).
  csv            a PyTorch Lightning `metrics.csv` (CSVLogger): columns step, epoch, and metric columns;
                 the columns named in SOURCES.tsv `metric_map` are renamed (e.g. train_loss_step->loss,
                 val_loss->eval_loss); an `epoch_time` column (seconds per epoch) is not a metric: its
                 values are summed into the run's train_runtime. Lightning has no max_steps in the log:
                 total_steps is the last logged step unless SOURCES.tsv gives one.

What is RECORDED (copied from the raw log, value for value):
  loss, eval_loss (and any other eval_* / train_* number of the log entries kept), grad_norm,
  learning_rate, epoch, the step of each entry, max_steps (-> total_steps), train_runtime.
  Metric values are written as strings, Python's repr() of the float the JSON parser read (NaN -> "nan",
  Infinity -> "inf", -Infinity -> "-inf"), as the HF KubeflowCallback writes them.

What is DERIVED (not in the raw log):
  * wall-clock time. A trainer_state.json has no per-entry time. Each run gets a start time
    2026-10-02T16:30:00Z (Friday 18:30 in Europe/Rome, CEST) + i x 10 minutes (i = its row in SOURCES.tsv,
    from 0) -- every run queued on a Friday evening, the case the weekend-safe policy is for -- and a constant number of seconds per
    step: `runtime` in SOURCES.tsv = train_runtime / global_step of the log (the real average, evaluations
    included); a number = a documented assumption for logs without train_runtime. A line's time is
    start + round(step * seconds_per_step) seconds.
  * progressPercentage = int(step / total_steps * 100), at most 99 while running, 100 on the final report;
    estimatedRemainingSeconds = int(seconds_per_step * (total_steps - step)).
    total_steps = max_steps of the log (column total_steps of SOURCES.tsv overrides it when the log lacks it).
  * the caching of the HF callback: every line repeats the latest value of each metric seen so far
    (so after the first evaluation every line carries the last eval_loss).
  * one line per logged step: log entries with the same step (a train log and an eval log) are merged into
    one report. Entries whose step is lower than an earlier entry's (a resumed run re-logging) are dropped.
  * no reports between logged steps (a live callback also reports progress in between): a long logging
    interval is a long silence in the stream, which a stall rule reads as a hang.
  * gpus: column gpus of SOURCES.tsv (from the source when it says, else 1; see gpus_from).
  * labels: team=corpus, trainwarden.dev/corpus-source (column source_label), trainwarden.dev/corpus-kind
    (the first kind of column kind), trainwarden.dev/weekend-safe=true; values are made valid Kubernetes
    label values and checked.
  * the first line (phase Running, labels, gpus, progress 0 with total_steps), a final report with
    progressPercentage 100 at start + train_runtime (or the last step's time), and a last line
    phase Complete: every corpus run ran to its end (some were ended by their own EarlyStoppingCallback or
    by a max_steps smaller than the epochs asked for; SOURCES.tsv says so).
"""

import argparse
import csv
import datetime
import json
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EPOCH0 = datetime.datetime(2026, 10, 2, 16, 30, 0, tzinfo=datetime.timezone.utc)
# Keys of a log entry that are not metrics, or that the engine does not need on every line.
SKIP_KEYS = {"step", "total_flos", "num_input_tokens_seen"}


def ts(t):
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def label_value(text):
    """A Kubernetes label value (<= 63 chars of [A-Za-z0-9_.-], alphanumeric at both ends) from free text:
    the part before any '(' with every other character turned into '-'."""
    v = re.sub(r"[^A-Za-z0-9_.-]+", "-", text.split("(")[0].strip())[:63].strip("-_.")
    if not LABEL_VALUE.match(v):
        raise SystemExit(f"not a valid label value: {v!r}")
    return v


def sval(v):
    """A metric value as the HF callback writes it: str() of the Python number."""
    if isinstance(v, bool):
        v = int(v)
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(v)


def read_sources():
    with open(os.path.join(HERE, "SOURCES.tsv"), newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return rows


def load_trainer_state(path):
    with open(path, encoding="utf-8") as f:
        state = json.load(f)  # accepts NaN / Infinity / -Infinity, as json.dump writes them
    entries = []
    runtime = None
    for e in state["log_history"]:
        if "train_runtime" in e:
            runtime = float(e["train_runtime"])
        entries.append(e)
    return {
        "entries": entries,
        "max_steps": state.get("max_steps"),
        "global_step": state.get("global_step"),
        "train_runtime": runtime,
    }


def num(s):
    s = s.strip()
    if s == "":
        return None
    f = float(s)
    return int(f) if f.is_integer() and "." not in s and "e" not in s.lower() and "n" not in s.lower() else f


def load_csv(path, metric_map):
    mapping = dict(kv.split("->") for kv in metric_map.split(",") if kv)
    entries = []
    runtime = None
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            e = {}
            for k, v in row.items():
                if v is None or v.strip() == "":
                    continue
                if k == "epoch_time":  # Lightning's per-epoch wall time: summed into the run's runtime
                    runtime = (runtime or 0.0) + float(v)
                    continue
                e[mapping.get(k, k)] = num(v)
            if "step" in e:
                e["step"] = int(e["step"])
                entries.append(e)
    return {"entries": entries, "max_steps": None, "global_step": None, "train_runtime": runtime}


def convert(row, index, namespace):
    raw = os.path.join(HERE, "raw", row["raw"])
    if row["format"] == "trainer_state":
        log = load_trainer_state(raw)
    elif row["format"] == "csv":
        log = load_csv(raw, row.get("metric_map", ""))
    else:
        raise SystemExit(f"{row['name']}: unknown format {row['format']!r}")

    # Group the entries by step, in order; drop entries that go back in steps.
    steps = []  # [(step, merged entry)]
    final = {}
    for e in log["entries"]:
        if "train_runtime" in e or "train_loss" in e:
            final.update({k: v for k, v in e.items() if k not in SKIP_KEYS and k != "epoch"})
            continue
        if "step" not in e:
            continue
        st = int(e["step"])
        if steps and st < steps[-1][0]:
            continue
        if not steps or st != steps[-1][0]:
            steps.append((st, {}))
        steps[-1][1].update({k: v for k, v in e.items() if k not in SKIP_KEYS})
    if not steps:
        raise SystemExit(f"{row['name']}: no log entries with a step")

    last_step = steps[-1][0]
    global_step = int(log["global_step"] or last_step)
    total = int(row["total_steps"]) if row.get("total_steps") else int(log["max_steps"] or global_step)
    total = max(total, last_step, 1)
    if row["seconds_per_step"] == "runtime":
        if not log["train_runtime"]:
            raise SystemExit(f"{row['name']}: seconds_per_step=runtime but the log has no train_runtime")
        sps = log["train_runtime"] / global_step
    else:
        sps = float(row["seconds_per_step"])
    start = EPOCH0 + datetime.timedelta(minutes=10 * index)
    job = f"{namespace}/{row['name']}"
    at = lambda step: start + datetime.timedelta(seconds=round(step * sps))

    lines = []
    first = {
        "time": ts(start),
        "job": job,
        "phase": "Running",
        "labels": {
            "team": "corpus",
            "trainwarden.dev/corpus-source": label_value(row["source_label"]),
            "trainwarden.dev/corpus-kind": label_value(row["kind"].split(",")[0]),
            "trainwarden.dev/weekend-safe": "true",
        },
        "gpus": float(row["gpus"]) if "." in row["gpus"] else int(row["gpus"]),
        "trainerStatus": {
            "progressPercentage": 0,
            "metrics": [{"name": "total_steps", "value": str(total)}],
            "lastUpdatedTime": ts(start),
        },
    }
    lines.append(first)
    cache = {}
    for st, merged in steps:
        cache.update(merged)
        t = at(st)
        metrics = [{"name": k, "value": sval(v)} for k, v in cache.items()]
        metrics += [
            {"name": "current_step", "value": str(st)},
            {"name": "total_steps", "value": str(total)},
        ]
        lines.append(
            {
                "time": ts(t),
                "job": job,
                "trainerStatus": {
                    "progressPercentage": min(99, int(st / total * 100)),
                    "estimatedRemainingSeconds": int(sps * (total - st)),
                    "metrics": metrics,
                    "lastUpdatedTime": ts(t),
                },
            }
        )
    end = at(last_step)
    if log["train_runtime"] and row["seconds_per_step"] == "runtime":
        end = max(end, start + datetime.timedelta(seconds=round(log["train_runtime"])))
    cache.update(final)
    lines.append(
        {
            "time": ts(end),
            "job": job,
            "trainerStatus": {
                "progressPercentage": 100,
                "estimatedRemainingSeconds": 0,
                "metrics": [{"name": k, "value": sval(v)} for k, v in cache.items()]
                + [
                    {"name": "current_step", "value": str(last_step)},
                    {"name": "total_steps", "value": str(total)},
                ],
                "lastUpdatedTime": ts(end),
            },
        }
    )
    lines.append({"time": ts(end), "job": job, "phase": "Complete"})
    return "".join(json.dumps(l, separators=(",", ":"), allow_nan=False) + "\n" for l in lines)


def table(rows):
    """The README's table of runs, in markdown, from SOURCES.tsv and the streams as convert() writes them."""
    out = [
        "| # | run | kind | source (repository, path, commit) | train logs / evals | stream span | s/step |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, row in enumerate(rows):
        text = convert(row, i, "corpus")
        lines = [json.loads(l) for l in text.splitlines()]
        t0 = datetime.datetime.strptime(lines[0]["time"], "%Y-%m-%dT%H:%M:%SZ")
        t1 = datetime.datetime.strptime(lines[-1]["time"], "%Y-%m-%dT%H:%M:%SZ")
        span = t1 - t0
        h, rem = divmod(int(span.total_seconds()), 3600)
        raw = os.path.join(HERE, "raw", row["raw"])
        if row["format"] == "trainer_state":
            entries = load_trainer_state(raw)["entries"]
        else:
            entries = load_csv(raw, row.get("metric_map", ""))["entries"]
        n_train = sum(1 for e in entries if "loss" in e)
        n_eval = sum(1 for e in entries if "eval_loss" in e)
        sps = row["seconds_per_step"]
        sps = "real (train_runtime)" if sps == "runtime" else f"{sps} (assumed)"
        commit = row["commit"][:10] if row["commit"] else "-"
        src = f"[{row['repo']}](https://github.com/{row['repo']}) `{row['path']}` @{commit}"
        out.append(
            f"| {i} | `{row['name']}` | {row['kind']} | {src} | {n_train} / {n_eval} | {h}h{rem // 60:02d}m | {sps} |"
        )
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a committed stream differs")
    ap.add_argument("--namespace", default="default", help="namespace of the jobs (default: default)")
    ap.add_argument("--out", default=HERE, help="where to write the streams (default: next to this file)")
    ap.add_argument("--table", action="store_true", help="print the README's table of runs and exit")
    args = ap.parse_args()
    rows = read_sources()
    if args.table:
        print(table(rows))
        return
    names = [r["name"] for r in rows]
    if len(set(names)) != len(names):
        raise SystemExit("duplicate run names in SOURCES.tsv")
    bad = 0
    for i, row in enumerate(rows):
        text = convert(row, i, args.namespace)
        path = os.path.join(args.out, row["name"] + ".jsonl")
        if args.check:
            try:
                with open(path, encoding="utf-8") as f:
                    old = f.read()
            except FileNotFoundError:
                old = None
            if old != text:
                print(f"{path}: differs from what convert.py writes", file=sys.stderr)
                bad += 1
        else:
            os.makedirs(args.out, exist_ok=True)
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
    if args.check:
        print(f"{len(rows) - bad} of {len(rows)} streams up to date")
        sys.exit(1 if bad else 0)
    print(f"wrote {len(rows)} streams to {args.out}")


if __name__ == "__main__":
    main()
