#!/usr/bin/env python3
"""Convert the real training logs under raw/ into trainwarden progress streams (one JSONL per run).

Usage:
    python3 examples/corpus/convert.py          # (re)write every <name>.jsonl listed in SOURCES.tsv
    python3 examples/corpus/convert.py --check  # exit 1 if a committed stream, or the README's generated
                                                # tables, differ from what this script writes
    python3 examples/corpus/convert.py --namespace NS --out DIR  # the same streams with the jobs in
                                                       # another namespace (see README: the catalog
                                                       # ProgressPolicies only judge their own namespace)
    python3 examples/corpus/convert.py --heartbeat 300s --out DIR  # the streams with the live callback's
                                                       # reports between logging steps (cached repeats)
    python3 examples/corpus/convert.py --table  # print the README's generated tables (counts and runs)

Python 3 standard library only; deterministic (no clock, no randomness, no dict-order surprises).

Input formats (column `format` of SOURCES.tsv):
  trainer_state  a Hugging Face transformers `trainer_state.json` (or a trimmed copy of one that keeps the
                 top-level keys and, of `log_history`, the entries and keys listed in SOURCES.tsv `notes`;
                 extract.py writes such copies).
  csv            a PyTorch Lightning `metrics.csv` (CSVLogger): columns step, epoch, and metric columns;
                 an `epoch_time` column (seconds per epoch) is not a metric: its values are summed into
                 the run's train_runtime. Lightning has no max_steps in the log: total_steps is the last
                 logged step unless SOURCES.tsv gives one.
  llamafactory   a LLaMA-Factory `trainer_log.jsonl`: one line per log with `current_steps`, `total_steps`,
                 `elapsed_time` ("H:MM:SS" or "N days, H:MM:SS") and `remaining_time` as the trainer
                 measured them, and the metrics of that log (`loss`, `eval_loss`, `lr` ...).
  pytorch_wlm    the numbers of the console log of PyTorch's word_language_model example (`main.py`), as
                 `extract.py pytorch_wlm` trims it: rows `epochs K` (the planned epochs), `batch E B N LR MS
                 LOSS` (one per "| epoch E | B/N batches | lr LR | ms/batch MS | loss LOSS |" line) and
                 `end E SECONDS VALID_LOSS` (one per "| end of epoch E | time: SECONDSs | valid loss ..." line).
The columns named in SOURCES.tsv `metric_map` are renamed in every format (e.g. lr->learning_rate,
train_loss_step->loss, val_loss->eval_loss).

What is RECORDED (copied from the raw log, value for value):
  loss, eval_loss (and any other eval_* / train_* number of the log entries kept, eval_runtime included),
  grad_norm, learning_rate, epoch, the step of each entry, max_steps (-> total_steps), train_runtime;
  for llamafactory the elapsed and remaining time of every log; for pytorch_wlm ms/batch and epoch times.
  Metric values are written as strings, Python's repr() of the float the parser read (NaN -> "nan",
  Infinity -> "inf", -Infinity -> "-inf"), as the HF KubeflowCallback writes them.

What is DERIVED (not in the raw log):
  * wall-clock time (see the README, "Time"). Run i (its row in SOURCES.tsv, from 0) starts at
    2026-10-02T16:30:00Z (Friday 18:30 in Europe/Rome, CEST) + i x 10 minutes. A trainer_state log has no
    time per entry: the time of step s is start + s x train seconds per step + the eval_runtime of every
    evaluation logged at a step <= s (the evaluation pauses), rounded to the second; train seconds per step
    = (train_runtime - total eval_runtime) / global_step when seconds_per_step is `runtime`, else the
    assumed figure of SOURCES.tsv. llamafactory logs carry their own elapsed time; pytorch_wlm logs their
    ms/batch and epoch times; the Lightning CSV sums its epoch_time column.
  * progressPercentage = int(step / total_steps * 100), at most 99 while running, 100 on the final report;
    estimatedRemainingSeconds = elapsed / step x (total_steps - step), the KubeflowCallback's own formula
    (llamafactory: the remaining_time the trainer logged).
  * the caching of the HF callback: every line repeats the latest value of each metric seen so far
    (so after the first evaluation every line carries the last eval_loss).
  * one line per logged step: log entries with the same step (a train log and an eval log) are merged into
    one report, written when the last of them was logged (after the evaluation). Entries whose step is
    lower than an earlier entry's (a resumed run re-logging) are dropped.
  * no reports between logged steps unless --heartbeat is given (then into --out, see the README).
  * gpus: column gpus of SOURCES.tsv (from the source when it says, else 1; see gpus_from).
  * labels: team=corpus, trainwarden.dev/corpus-source (column source_label), trainwarden.dev/corpus-kind
    (the first kind of column kind), trainwarden.dev/outcome and trainwarden.dev/outcome-metric (columns
    outcome and outcome_metric), trainwarden.dev/corpus-split (tune or heldout, by the rule in split_of),
    trainwarden.dev/weekend-safe=true; values are made valid Kubernetes label values and checked.
  * the part (corpus-split): `tune` or `heldout` for the runs of batch 1 (column `batch` of SOURCES.tsv) by
    the rule in split_of; every run of a later batch N is `heldoutN` (batch 2: `heldout2`, runs collected
    after the catalog was tuned, to judge it once more on curves no one had looked at).
  * the first line (phase Running, labels, gpus, progress 0 with total_steps), a final report with
    progressPercentage 100 at the run's end, and a last line phase Complete: every corpus run ran to the
    end of its record (some were ended by their own EarlyStoppingCallback or by a max_steps smaller than
    the epochs asked for, some records are a checkpoint's; SOURCES.tsv says so).
"""

import argparse
import csv
import datetime
import hashlib
import json
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RAW_DIR = os.path.join(HERE, "raw")  # where load() reads the raw logs (tests point it elsewhere)
EPOCH0 = datetime.datetime(2026, 10, 2, 16, 30, 0, tzinfo=datetime.timezone.utc)
# Keys of a log entry that are not metrics, or that the engine does not need on every line.
SKIP_KEYS = {"step", "total_flos", "num_input_tokens_seen"}
OUTCOMES = ("healthy", "plateau", "diverged", "non-finite", "stalled")
# The held-out share of every outcome (see split_of).
HELDOUT_SHARE = 0.4
TABLE_BEGIN = "<!-- convert.py --table: begin -->"
TABLE_END = "<!-- convert.py --table: end -->"


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
    path = os.path.join(HERE, "SOURCES.tsv")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    for n, row in enumerate(rows, 2):
        for col in ("name", "raw", "format", "repo", "path", "outcome", "outcome_metric", "seconds_per_step", "batch"):
            if not row.get(col):
                raise SystemExit(f"{path}:{n}: column {col!r} is empty")
        if row["outcome"] not in OUTCOMES:
            raise SystemExit(f"{path}:{n}: outcome {row['outcome']!r} is not one of {', '.join(OUTCOMES)}")
        if not row["batch"].isdigit() or int(row["batch"]) < 1:
            raise SystemExit(f"{path}:{n}: batch {row['batch']!r} is not a whole number from 1")
    return rows


def batch_of(row):
    """The collection batch of a run (column `batch`): 1 for the corpus the catalog was tuned on, 2, 3 ...
    for runs collected later. A row without the column (a test's) is batch 1."""
    return int(row.get("batch") or 1)


def splits_of(split):
    """The parts present, in the order the tables show them: tune, heldout, heldout2, heldout3 ..."""
    later = sorted({s for s in split.values() if s not in ("tune", "heldout")}, key=lambda s: int(s[len("heldout"):]))
    return ["tune", "heldout"] + later


def split_of(rows):
    """The tune / heldout split: a rule fixed before any policy was run on the corpus (README, "Split").

    Within each outcome, the runs are taken in the order of sha256(run name); a run goes to `heldout` when
    the held-out runs of its outcome so far are fewer than 40 % of the runs of its outcome so far, this run
    included, and to `tune` otherwise. So every outcome is split about 40/60 (stratified; the first run of
    an outcome is held out, so an outcome with a single run is held out), a run's split depends only on its
    name and the other runs of its outcome, and no choice was made by hand.

    Only the runs of batch 1 take part in that rule. Every run of a later batch N is held out as a whole, in
    its own part `heldoutN`: those runs were collected after the catalog had been tuned and checked on batch
    1, and adding them moves none of batch 1's runs between tune and heldout."""
    split = {}
    for r in rows:
        if batch_of(r) > 1:
            split[r["name"]] = f"heldout{batch_of(r)}"
    for outcome in OUTCOMES:
        names = sorted((r["name"] for r in rows if r["outcome"] == outcome and batch_of(r) == 1),
                       key=lambda n: hashlib.sha256(n.encode("utf-8")).hexdigest())
        held = 0
        for seen, name in enumerate(names, 1):
            if held < HELDOUT_SHARE * seen:
                held += 1
                split[name] = "heldout"
            else:
                split[name] = "tune"
    return split


# --- readers: every one returns {"entries": [...], "max_steps", "global_step", "train_runtime", ...} ---
# An entry is a dict of the log's keys with an int "step"; "_t" (seconds since the start, when the log
# says) and "_eta" (seconds remaining, when the log says) are times, not metrics.


def load_trainer_state(path):
    with open(path, encoding="utf-8") as f:
        state = json.load(f)  # accepts NaN / Infinity / -Infinity, as json.dump writes them
    entries = []
    runtime = None
    summary_seen = False
    for e in state["log_history"]:
        e = dict(e)
        if "train_runtime" in e:
            runtime = float(e["train_runtime"])
            summary_seen = True
        elif summary_seen and "eval_runtime" in e:
            # An evaluation after the training summary (trainer.evaluate() at the end) is not part of
            # train_runtime: its pause is not modelled.
            e["_after_summary"] = True
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


def load_csv(path):
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
                e[k] = num(v)
            if "step" in e:
                e["step"] = int(e["step"])
                entries.append(e)
    return {"entries": entries, "max_steps": None, "global_step": None, "train_runtime": runtime}


DURATION = re.compile(r"^(?:(\d+) days?, )?(\d+):(\d\d):(\d\d)$")


def duration(text, where):
    m = DURATION.match(text.strip())
    if not m:
        raise SystemExit(f"{where}: not a duration (H:MM:SS or N days, H:MM:SS): {text!r}")
    d, h, mi, s = (int(x) if x else 0 for x in m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + s


LF_TIME_KEYS = {"current_steps", "total_steps", "elapsed_time", "remaining_time", "percentage"}


def load_llamafactory(path):
    entries = []
    total = None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                rec = json.loads(line)
            except ValueError as err:
                raise SystemExit(f"{where}: not JSON: {err}")
            if "current_steps" not in rec or "elapsed_time" not in rec:
                raise SystemExit(f"{where}: a trainer_log.jsonl line needs current_steps and elapsed_time")
            e = {k: v for k, v in rec.items() if k not in LF_TIME_KEYS and v is not None}
            e["step"] = int(rec["current_steps"])
            e["_t"] = duration(rec["elapsed_time"], where)
            if rec.get("remaining_time"):
                e["_eta"] = duration(rec["remaining_time"], where)
            total = rec.get("total_steps", total)
            entries.append(e)
    if not entries:
        raise SystemExit(f"{path}: no log lines")
    return {
        "entries": entries,
        "max_steps": total,
        "global_step": entries[-1]["step"],
        "train_runtime": float(entries[-1]["_t"]),
    }


def load_pytorch_wlm(path):
    """The numbers of a word_language_model console log, as extract.py's `pytorch_wlm` writes them."""
    entries = []
    epochs = None
    nbatches = None
    epoch_start = 0.0  # seconds since the start at which the current epoch began
    prev_batch = 0
    t = 0.0
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            row = line.rstrip("\n").split("\t")
            if row[0] == "epochs" and len(row) == 2:
                epochs = int(row[1])
            elif row[0] == "batch" and len(row) == 7:
                ep, b, nb = int(row[1]), int(row[2]), int(row[3])
                nbatches = nb
                # ms/batch is the mean over the batches since the previous log line of this epoch.
                t += float(row[5]) * (b - prev_batch) / 1000.0
                prev_batch = b
                entries.append({"step": (ep - 1) * nb + b, "epoch": ep, "lr": float(row[4]), "loss": float(row[6]), "_t": t})
            elif row[0] == "end" and len(row) == 4:
                if nbatches is None:
                    raise SystemExit(f"{path}:{n}: an end of epoch before any batch line")
                ep = int(row[1])
                # The epoch time covers its training and its validation pass.
                t = epoch_start + float(row[2])
                epoch_start = t
                prev_batch = 0
                entries.append({"step": ep * nbatches, "epoch": ep, "valid_loss": float(row[3]), "_t": t})
            else:
                raise SystemExit(f"{path}:{n}: not an 'epochs', 'batch' or 'end' row of extract.py pytorch_wlm")
    if not entries or nbatches is None:
        raise SystemExit(f"{path}: no 'batch' rows")
    if epochs is None:
        raise SystemExit(f"{path}: no 'epochs' row: the planned length is unknown")
    return {"entries": entries, "max_steps": epochs * nbatches, "global_step": entries[-1]["step"], "train_runtime": t}


LOADERS = {
    "trainer_state": load_trainer_state,
    "csv": load_csv,
    "llamafactory": load_llamafactory,
    "pytorch_wlm": load_pytorch_wlm,
}


def load(row):
    raw = os.path.join(RAW_DIR, row["raw"])
    if row["format"] not in LOADERS:
        raise SystemExit(f"{row['name']}: unknown format {row['format']!r}")
    log = LOADERS[row["format"]](raw)
    mapping = dict(kv.split("->") for kv in row.get("metric_map", "").split(",") if kv)
    for e in log["entries"]:
        for src, dst in mapping.items():
            if src in e:
                e[dst] = e.pop(src)
    return log


def steps_of(log):
    """The log's reports: [(step, merged entry, first entry's time, last entry's time)] in order, times in
    seconds since the start when the log records them (else None), and the training summary."""
    steps = []
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
            steps.append([st, {}, e.get("_t"), None])
        steps[-1][1].update(e)
        steps[-1][3] = e.get("_t")
    return steps, final


def timeline(row, log, steps):
    """Seconds since the start of every report (first entry's and last entry's), the end of the run, and
    how the time was obtained (for the table)."""
    global_step = int(log["global_step"] or steps[-1][0])
    if all(s[3] is not None for s in steps):  # the log records its own times
        firsts = [s[2] for s in steps]
        lasts = [s[3] for s in steps]
        end = max(lasts[-1], log["train_runtime"] or 0)
        how = "recorded" if row["format"] == "llamafactory" else "real (log times)"
        return firsts, lasts, end, how
    # Evaluation pauses: eval_runtime of the evaluations inside the training (before its summary).
    pause = {}
    for e in log["entries"]:
        if "eval_runtime" in e and not e.get("_after_summary") and "step" in e:
            pause[int(e["step"])] = pause.get(int(e["step"]), 0.0) + float(e["eval_runtime"])
    total_pause = sum(v for s, v in pause.items() if s <= global_step)
    runtime = log["train_runtime"]
    if row["seconds_per_step"] == "runtime":
        if not runtime:
            raise SystemExit(f"{row['name']}: seconds_per_step=runtime but the log has no train_runtime")
        if total_pause >= runtime:
            # The record's eval_runtime cannot add up with its train_runtime: no pauses are modelled.
            pause, total_pause = {}, 0.0
            how = "real (train_runtime; eval_runtime inconsistent, not modelled)"
        else:
            how = "real (train_runtime)" + (" + eval pauses" if pause else "")
        tps = (runtime - total_pause) / global_step
    else:
        tps = float(row["seconds_per_step"])
        how = f"{row['seconds_per_step']} (assumed)" + (" + eval pauses" if pause else "")
    # One ordered pass: a report's first entry comes after the pauses of every evaluation logged at an
    # earlier step; its last entry (the evaluation at this step, if any) after this step's pause too.
    ordered = sorted(pause.items())
    firsts, lasts = [], []
    i = 0
    acc = 0.0
    for st, _, _, _ in steps:
        while i < len(ordered) and ordered[i][0] < st:
            acc += ordered[i][1]
            i += 1
        firsts.append(st * tps + acc)
        lasts.append(firsts[-1] + pause.get(st, 0.0))
    end = lasts[-1]
    if runtime and row["seconds_per_step"] == "runtime":
        end = max(end, runtime)
    return firsts, lasts, end, how


def parse_interval(text):
    m = re.match(r"^(\d+)(s|m|h)?$", text.strip())
    if not m:
        raise SystemExit(f"--heartbeat {text!r}: give a duration such as 300s, 5m or 1h")
    secs = int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]
    if secs < 5:
        raise SystemExit(f"--heartbeat {text!r}: the callbacks report at most once every 5 s")
    return secs


def convert(row, index, namespace, split, heartbeat=None):
    """The stream of one run, as text. heartbeat: seconds between the callback's extra reports, or None."""
    log = load(row)
    steps, final = steps_of(log)
    if not steps:
        raise SystemExit(f"{row['name']}: no log entries with a step")
    last_step = steps[-1][0]
    global_step = int(log["global_step"] or last_step)
    total = int(row["total_steps"]) if row.get("total_steps") else int(log["max_steps"] or global_step)
    total = max(total, last_step, 1)
    firsts, lasts, end, _ = timeline(row, log, steps)
    start = EPOCH0 + datetime.timedelta(minutes=10 * index)
    job = f"{namespace}/{row['name']}"
    clock = [0]  # the last written second: rounding never moves a stream back in time

    def at(seconds):
        clock[0] = max(clock[0], int(round(seconds)))
        return start + datetime.timedelta(seconds=clock[0])

    def metrics_of(cache, st):
        return [{"name": k, "value": sval(v)} for k, v in cache.items()] + [
            {"name": "current_step", "value": str(st)},
            {"name": "total_steps", "value": str(total)},
        ]

    def report(t, st, cache, eta=None):
        elapsed = (t - start).total_seconds()
        if eta is None:
            eta = int(elapsed / st * (total - st)) if st > 0 else 0
        return {
            "time": ts(t),
            "job": job,
            "trainerStatus": {
                "progressPercentage": min(99, int(st / total * 100)),
                "estimatedRemainingSeconds": int(eta),
                "metrics": metrics_of(cache, st),
                "lastUpdatedTime": ts(t),
            },
        }

    lines = [
        {
            "time": ts(start),
            "job": job,
            "phase": "Running",
            "labels": {
                "team": "corpus",
                "trainwarden.dev/corpus-source": label_value(row["source_label"]),
                "trainwarden.dev/corpus-kind": label_value(row["kind"].split(",")[0]),
                "trainwarden.dev/outcome": label_value(row["outcome"]),
                "trainwarden.dev/outcome-metric": label_value(row["outcome_metric"]),
                "trainwarden.dev/corpus-split": split[row["name"]],
                "trainwarden.dev/weekend-safe": "true",
            },
            "gpus": float(row["gpus"]) if "." in row["gpus"] else int(row["gpus"]),
            "trainerStatus": {
                "progressPercentage": 0,
                "metrics": [{"name": "total_steps", "value": str(total)}],
                "lastUpdatedTime": ts(start),
            },
        }
    ]
    cache = {}
    prev_step, prev_t = 0, 0.0
    for (st, merged, _, _), t_first, t_last in zip(steps, firsts, lasts):
        if heartbeat and st > prev_step + 1 and t_first > prev_t:
            # The live callback reports at a step's end, at most once per `heartbeat`, repeating the
            # cached metrics: between two logged steps the steps advance at the pace of this stretch.
            per_step = (t_first - prev_t) / (st - prev_step)
            stride = max(1, math.ceil(heartbeat / per_step))
            s = prev_step + stride
            while s < st:
                lines.append(report(at(prev_t + (s - prev_step) * per_step), s, cache))
                s += stride
        cache.update({k: v for k, v in merged.items() if k not in SKIP_KEYS and not k.startswith("_")})
        lines.append(report(at(t_last), st, cache, merged.get("_eta")))
        prev_step, prev_t = st, t_last
    cache.update({k: v for k, v in final.items() if not k.startswith("_")})
    t_end = at(end)
    lines.append(
        {
            "time": ts(t_end),
            "job": job,
            "trainerStatus": {
                "progressPercentage": 100,
                "estimatedRemainingSeconds": 0,
                "metrics": metrics_of(cache, last_step),
                "lastUpdatedTime": ts(t_end),
            },
        }
    )
    lines.append({"time": ts(t_end), "job": job, "phase": "Complete"})
    return "".join(json.dumps(l, separators=(",", ":"), allow_nan=False) + "\n" for l in lines)


def table(rows, split):
    """The README's generated part: counts by outcome and split, the corpus size, one row per run."""
    out_rows = []
    parts = splits_of(split)
    counts = {o: {p: 0 for p in parts} for o in OUTCOMES}
    sizes = []
    for i, row in enumerate(rows):
        text = convert(row, i, "default", split)
        sizes.append((len(text.encode("utf-8")), row["name"]))
        lines = [json.loads(l) for l in text.splitlines()]
        t0 = datetime.datetime.strptime(lines[0]["time"], "%Y-%m-%dT%H:%M:%SZ")
        t1 = datetime.datetime.strptime(lines[-1]["time"], "%Y-%m-%dT%H:%M:%SZ")
        h, rem = divmod(int((t1 - t0).total_seconds()), 3600)
        log = load(row)
        steps, _ = steps_of(log)
        how = timeline(row, log, steps)[3]
        n_train = sum(1 for e in log["entries"] if "loss" in e)
        n_eval = sum(1 for e in log["entries"] if "eval_loss" in e)
        commit = row["commit"][:10] if row["commit"] else "-"
        src = f"[{row['repo']}](https://github.com/{row['repo']}) `{row['path']}` @{commit}"
        counts[row["outcome"]][split[row["name"]]] += 1
        out_rows.append(
            f"| {i} | `{row['name']}` | {row['outcome']} ({row['outcome_metric']}) | {split[row['name']]} "
            f"| {row['kind']} | {src} | {n_train} / {n_eval} | {h}h{rem // 60:02d}m | {how} |"
        )
    out = ["| outcome | " + " | ".join(parts) + " | all |", "|---" * (len(parts) + 2) + "|"]
    for o in OUTCOMES:
        c = counts[o]
        out.append(f"| {o} | " + " | ".join(str(c[p]) for p in parts) + f" | {sum(c.values())} |")
    totals = [sum(c[p] for c in counts.values()) for p in parts]
    out.append("| all | " + " | ".join(map(str, totals)) + f" | {sum(totals)} |")
    total_kb = sum(s for s, _ in sizes) / 1000
    big = max(sizes)
    out += [
        "",
        f"{len(rows)} streams, {total_kb:,.0f} KB in all (namespace `default`, no heartbeats); the largest, "
        f"`{big[1]}.jsonl`, {big[0] / 1000:,.0f} KB.",
        "",
        "| # | run | outcome (metric) | split | kind | source (repository, path, commit) | train logs / evals "
        "| stream span | time |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    return "\n".join(out + out_rows)


def readme_table():
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        text = f.read()
    if TABLE_BEGIN not in text or TABLE_END not in text:
        return None
    return text.split(TABLE_BEGIN, 1)[1].split(TABLE_END, 1)[0].strip("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a committed stream or the README differs")
    ap.add_argument("--namespace", default="default", help="namespace of the jobs (default: default)")
    ap.add_argument("--out", default=HERE, help="where to write the streams (default: next to this file)")
    ap.add_argument("--heartbeat", help="also write the callback's reports between logging steps, at most one "
                    "per this interval (300s, 5m ...); needs --out elsewhere than the committed streams")
    ap.add_argument("--table", action="store_true", help="print the README's generated tables and exit")
    args = ap.parse_args()
    rows = read_sources()
    names = [r["name"] for r in rows]
    if len(set(names)) != len(names):
        raise SystemExit("duplicate run names in SOURCES.tsv")
    split = split_of(rows)
    if args.table:
        print(table(rows, split))
        return
    heartbeat = parse_interval(args.heartbeat) if args.heartbeat else None
    if heartbeat and (args.check or os.path.realpath(args.out) == os.path.realpath(HERE)):
        raise SystemExit("--heartbeat writes into a directory of its own: give --out DIR (not the corpus), no --check")
    bad = 0
    for i, row in enumerate(rows):
        text = convert(row, i, args.namespace, split, heartbeat)
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
        listed = {r["name"] + ".jsonl" for r in rows}
        for f in sorted(os.listdir(args.out)):
            if f.endswith(".jsonl") and f not in listed:
                print(f"{os.path.join(args.out, f)}: a stream SOURCES.tsv does not list", file=sys.stderr)
                bad += 1
        if readme_table() != table(rows, split):
            print(f"{os.path.join(HERE, 'README.md')}: the generated tables differ from convert.py --table",
                  file=sys.stderr)
            bad += 1
        print(f"{len(rows)} streams checked, {bad} problem(s)")
        sys.exit(1 if bad else 0)
    print(f"wrote {len(rows)} streams to {args.out}" + (f" (heartbeat every {heartbeat} s)" if heartbeat else ""))


if __name__ == "__main__":
    main()
