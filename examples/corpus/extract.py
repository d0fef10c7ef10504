#!/usr/bin/env python3
"""Trim an original training log into examples/corpus/raw/<run>.<ext>, copying every value it keeps.

The corpus keeps only what the streams need, so the raw files are smaller than the originals; this tool
is the trimming, written down, so that anyone with a clone of the source repository can redo it and get
the same bytes:

    git -C <clone> show <commit>:<path> | python3 examples/corpus/extract.py trainer_state \
        --keys loss,eval_loss,eval_runtime,learning_rate > examples/corpus/raw/<run>.json
    git -C <clone> show <commit>:<path> | python3 examples/corpus/extract.py llamafactory \
        --keys loss,eval_loss,learning_rate,epoch > examples/corpus/raw/<run>.trainer_log
    ... | python3 examples/corpus/extract.py pytorch_wlm > examples/corpus/raw/<run>.wlm.tsv
    ... | python3 examples/corpus/extract.py csv --keys step,epoch,train_loss,val_loss > examples/corpus/raw/<run>.csv
    ... | python3 examples/corpus/extract.py copy > examples/corpus/raw/<run>.<ext>   # byte for byte

Formats:
  trainer_state  a Hugging Face `trainer_state.json`: the top-level keys in TOP_KEYS that are present, and
                 of `log_history` every entry, in order, with `step` and the keys named by --keys (an entry
                 left with nothing but `step` is kept too, so the count of entries is the original's).
                 The final summary entry (the one with `train_runtime`) always keeps `train_runtime` and
                 `train_loss`.
  llamafactory   a LLaMA-Factory `trainer_log.jsonl`: every line, with `current_steps`, `total_steps`,
                 `elapsed_time`, `remaining_time` and the keys named by --keys that the line has.
  pytorch_wlm    the console log of PyTorch's word_language_model example (`main.py`): only the numbers the
                 converter reads, one tab-separated row per log line, each number spelled as the log spells it:
                 `epochs K` (the planned epochs, from the settings line; the other settings are dropped),
                 `batch E B N LR MS LOSS` per "| epoch E | B/N batches | lr LR | ms/batch MS | loss LOSS |"
                 line (the perplexity, exp(loss), is dropped) and `end E SECONDS VALID_LOSS` per "| end of
                 epoch E | time: SECONDSs | valid loss VALID_LOSS |" line; separators, the test summary and any
                 other text are dropped.
  csv            a Lightning `metrics.csv` (CSVLogger): the columns named by --keys (which must include `step`),
                 in the file's order, every cell copied as the file spells it; a row left with nothing but
                 `step` and `epoch` (a value only in a dropped column) is dropped, so no report without a
                 value is made from it.
  copy           the input unchanged (for logs small enough to keep whole: Lightning CSVs).

Values are read by Python's json parser and written back with json.dumps, whose float repr round-trips:
every number kept is the same double the original held (NaN and Infinity are written as the original
writes them). Python 3 standard library only.
"""

import argparse
import csv
import io
import json
import re
import sys

TOP_KEYS = ("global_step", "max_steps", "num_train_epochs", "logging_steps", "eval_steps", "best_metric")
SUMMARY_KEYS = ("train_runtime", "train_loss")
LF_KEYS = ("current_steps", "total_steps", "elapsed_time", "remaining_time")


def dumps(obj):
    # allow_nan: a NaN the original holds is written NaN, as transformers' own json.dump writes it.
    return json.dumps(obj, separators=(",", ":"), allow_nan=True)


def trainer_state(text, keys):
    state = json.loads(text)
    top = {k: state[k] for k in TOP_KEYS if k in state}
    lines = []
    for entry in state["log_history"]:
        keep = {}
        for k, v in entry.items():
            if k == "step" or k in keys or ("train_runtime" in entry and k in SUMMARY_KEYS):
                keep[k] = v
        lines.append(dumps(keep))
    head = dumps(top)[:-1]
    sep = "," if top else ""
    return head + sep + '"log_history":[\n' + ",\n".join(lines) + "\n]}\n"


def llamafactory(text, keys):
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as e:
            raise SystemExit(f"stdin line {n}: not JSON: {e}")
        out.append(dumps({k: v for k, v in entry.items() if k in LF_KEYS or k in keys}))
    return "\n".join(out) + "\n"


WLM_STEP = re.compile(
    r"^\| epoch +(\d+) \| +(\d+)/ *(\d+) batches \| lr +([0-9.eE+-]+) \| ms/batch +([0-9.]+) \| loss +(\S+) \| ppl +(\S+)"
)
WLM_EPOCH = re.compile(r"^\| end of epoch +(\d+) \| time: +([0-9.]+)s \| valid loss +(\S+) \| valid ppl +(\S+)")
WLM_EPOCHS = re.compile(r"\bepochs=(\d+)\b")


def pytorch_wlm(text):
    out = []
    for line in text.splitlines():
        if not out and line.startswith("Namespace("):
            m = WLM_EPOCHS.search(line)
            if m:
                out.append(f"epochs\t{m.group(1)}")
            continue
        m = WLM_STEP.match(line)
        if m:
            out.append("\t".join(["batch", *m.group(1, 2, 3, 4, 5, 6)]))
            continue
        m = WLM_EPOCH.match(line)
        if m:
            out.append("\t".join(["end", *m.group(1, 2, 3)]))
    return "".join(line + "\n" for line in out)


def lightning_csv(text, keys):
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        raise SystemExit("stdin: an empty CSV")
    header = rows[0]
    missing = sorted(k for k in keys if k not in header)
    if missing or "step" not in keys:
        raise SystemExit(f"stdin: --keys must name `step` and columns of the header {header}; not found: {missing or ['step']}")
    cols = [i for i, name in enumerate(header) if name in keys]
    values = [i for i in cols if header[i] not in ("step", "epoch")]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([header[i] for i in cols])
    for n, row in enumerate(rows[1:], 2):
        if len(row) != len(header):
            raise SystemExit(f"stdin line {n}: {len(row)} cells, the header has {len(header)}")
        if any(row[i].strip() for i in values):
            writer.writerow([row[i] for i in cols])
    return out.getvalue()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("format", choices=["trainer_state", "llamafactory", "pytorch_wlm", "csv", "copy"])
    ap.add_argument("--keys", default="", help="comma-separated metric keys to keep (besides step)")
    args = ap.parse_args()
    if args.format == "copy":
        sys.stdout.buffer.write(sys.stdin.buffer.read())
        return
    text = sys.stdin.read()
    keys = {k for k in args.keys.split(",") if k}
    if args.format == "pytorch_wlm":
        sys.stdout.write(pytorch_wlm(text))
    elif args.format == "csv":
        sys.stdout.write(lightning_csv(text, keys))
    elif args.format == "trainer_state":
        sys.stdout.write(trainer_state(text, keys))
    else:
        sys.stdout.write(llamafactory(text, keys))


if __name__ == "__main__":
    main()
