#!/usr/bin/env python3
"""Tests of convert.py's derived parts on small hand-made logs with known answers (standard library only).

    python3 -m unittest examples/corpus/test_convert.py     # or: python3 examples/corpus/test_convert.py

Each test builds a raw log in a temporary directory, points convert.RAW_DIR at it, converts, and checks the
times, labels and values of the stream against numbers worked out by hand."""

import datetime
import json
import math
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import convert  # noqa: E402
import extract  # noqa: E402


def row(name, raw, fmt="trainer_state", sps="runtime", outcome="healthy", **extra):
    r = {
        "name": name, "raw": raw, "format": fmt, "repo": "example/repo", "path": "trainer_state.json",
        "commit": "0" * 40, "license": "none", "kind": "test", "outcome": outcome, "outcome_metric": "loss",
        "source_label": "gh-example-repo", "gpus": "1", "gpus_from": "test", "seconds_per_step": sps,
        "total_steps": "", "metric_map": "", "notes": "",
    }
    r.update(extra)
    return r


def seconds(line, start):
    t = datetime.datetime.strptime(line["time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    return (t - start).total_seconds()


def metric(line, name):
    for m in line["trainerStatus"]["metrics"]:
        if m["name"] == name:
            return m["value"]
    return None


class ConvertTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.saved = convert.RAW_DIR
        convert.RAW_DIR = self.tmp.name

    def tearDown(self):
        convert.RAW_DIR = self.saved
        self.tmp.cleanup()

    def write(self, name, text):
        with open(os.path.join(self.tmp.name, name), "w", encoding="utf-8") as f:
            f.write(text)

    def stream(self, r, heartbeat=None, index=0):
        text = convert.convert(r, index, "default", {r["name"]: "tune"}, heartbeat)
        return [json.loads(l) for l in text.splitlines()]

    def trainer_state(self, name, runtime=1000.0, eval_runtime=100.0):
        # 100 steps, train logs every 25, evaluations at 50 and 100 taking eval_runtime each.
        log = [{"step": s, "loss": 1.0 / s} for s in (25, 50, 75, 100)]
        log.insert(2, {"step": 50, "eval_loss": 0.5, "eval_runtime": eval_runtime})
        log.append({"step": 100, "eval_loss": 0.4, "eval_runtime": eval_runtime})
        log.append({"step": 100, "train_runtime": runtime, "train_loss": 0.1})
        self.write(name, json.dumps({"global_step": 100, "max_steps": 100, "log_history": log}))

    def test_evaluation_pauses_are_silences_as_long_as_eval_runtime(self):
        self.trainer_state("a.json")
        lines = self.stream(row("a", "a.json"))
        start = convert.EPOCH0
        # train seconds per step = (1000 - 2 x 100) / 100 = 8
        at = {int(metric(l, "current_step")): seconds(l, start) for l in lines[1:-2]}
        self.assertEqual(at, {25: 200, 50: 500, 75: 700, 100: 1000})
        self.assertEqual(seconds(lines[-1], start), 1000)  # the end is start + train_runtime
        self.assertEqual(metric(lines[2], "eval_loss"), "0.5")  # the report after the evaluation carries it
        self.assertEqual(metric(lines[2], "eval_runtime"), "100.0")

    def test_eval_runtime_that_cannot_add_up_is_not_modelled(self):
        self.trainer_state("b.json", runtime=150.0, eval_runtime=100.0)
        lines = self.stream(row("b", "b.json"))
        at = [seconds(l, convert.EPOCH0) for l in lines[1:-2]]
        # 1.5 s/step, no pauses; Python rounds halves to even: 37.5 -> 38, 112.5 -> 112
        self.assertEqual(at, [38, 75, 112, 150])
        log = convert.load(row("b", "b.json"))
        self.assertIn("not modelled", convert.timeline(row("b", "b.json"), log, convert.steps_of(log)[0])[3])

    def test_assumed_seconds_per_step_plus_recorded_pauses(self):
        self.trainer_state("c.json")
        lines = self.stream(row("c", "c.json", sps="2"))
        at = [seconds(l, convert.EPOCH0) for l in lines[1:-2]]
        self.assertEqual(at, [50, 200, 250, 400])  # 2 s/step + 100 s after step 50 and after step 100

    def test_eta_is_the_callbacks_elapsed_per_step_formula(self):
        self.trainer_state("d.json")
        lines = self.stream(row("d", "d.json"))
        first = lines[1]["trainerStatus"]
        self.assertEqual(first["estimatedRemainingSeconds"], int(200 / 25 * 75))
        self.assertEqual(first["progressPercentage"], 25)
        self.assertEqual(lines[-2]["trainerStatus"]["progressPercentage"], 100)

    def test_labels_carry_outcome_metric_and_split(self):
        self.trainer_state("e.json")
        labels = self.stream(row("e", "e.json", outcome="plateau"))[0]["labels"]
        self.assertEqual(labels["trainwarden.dev/outcome"], "plateau")
        self.assertEqual(labels["trainwarden.dev/outcome-metric"], "loss")
        self.assertEqual(labels["trainwarden.dev/corpus-split"], "tune")

    def test_heartbeats_repeat_cached_values_between_logs_and_not_during_evaluations(self):
        self.trainer_state("f.json")
        plain = self.stream(row("f", "f.json"))
        beat = self.stream(row("f", "f.json"), heartbeat=30)
        extra = [l for l in beat[1:-2] if l not in plain]
        self.assertTrue(extra, "heartbeats were written")
        for l in plain[1:-2]:
            self.assertIn(l, beat)  # logged reports unchanged
        times = [seconds(l, convert.EPOCH0) for l in beat[:-1]]
        self.assertEqual(times, sorted(times))
        prev = 0.0  # the first line (phase Running) is at the start
        for l in beat[1:-2]:
            t = seconds(l, convert.EPOCH0)
            if l in extra:
                step = int(metric(l, "current_step"))
                self.assertNotIn(step, (25, 50, 75, 100))
                self.assertGreaterEqual(t - prev, 30)  # at most one report per heartbeat
                # no report inside the evaluation pauses (400-500 after step 50, 900-1000 after step 100)
                self.assertFalse(400 < t < 500 or 900 < t < 1000, t)
                # a heartbeat repeats the last logged loss (none before the first log)
                before = [p for p in plain[1:-2] if seconds(p, convert.EPOCH0) <= t]
                self.assertEqual(metric(l, "loss"), metric(before[-1], "loss") if before else None)
            prev = t

    def test_heartbeat_is_refused_over_the_committed_streams(self):
        with self.assertRaises(SystemExit):
            convert.parse_interval("2s")
        self.assertEqual(convert.parse_interval("5m"), 300)

    def test_nan_is_written_as_nan(self):
        self.write("g.json", '{"global_step":2,"max_steps":2,"log_history":[{"step":1,"loss":NaN,"grad_norm":Infinity},'
                   '{"step":2,"loss":0.0,"grad_norm":NaN}]}')
        lines = self.stream(row("g", "g.json", sps="1"))
        self.assertEqual(metric(lines[1], "loss"), "nan")
        self.assertEqual(metric(lines[1], "grad_norm"), "inf")
        self.assertEqual(metric(lines[2], "loss"), "0.0")

    def test_llamafactory_times_are_the_recorded_ones(self):
        self.write("h.jsonl", "\n".join(json.dumps(x) for x in [
            {"current_steps": 5, "total_steps": 10, "loss": 2.0, "lr": 1e-4, "elapsed_time": "0:32:48",
             "remaining_time": "1 day, 0:00:01"},
            {"current_steps": 10, "total_steps": 10, "loss": 1.5, "lr": 0.0, "elapsed_time": "1 day, 2:03:04",
             "remaining_time": "0:00:00"},
        ]) + "\n")
        lines = self.stream(row("h", "h.jsonl", fmt="llamafactory", metric_map="lr->learning_rate"))
        self.assertEqual(seconds(lines[1], convert.EPOCH0), 32 * 60 + 48)
        self.assertEqual(lines[1]["trainerStatus"]["estimatedRemainingSeconds"], 86401)
        self.assertEqual(seconds(lines[2], convert.EPOCH0), 86400 + 2 * 3600 + 3 * 60 + 4)
        self.assertEqual(metric(lines[1], "learning_rate"), "0.0001")
        self.assertIsNone(metric(lines[1], "lr"))

    def test_word_language_model_log(self):
        # The console log as main.py prints it, trimmed by extract.py to the numbers the converter reads.
        self.write("i.wlm.tsv", extract.pytorch_wlm("\n".join([
            "Namespace(batch_size=20, epochs=2, log_interval=200, lr=20, model='GRU')",
            "| epoch   1 |   200/  400 batches | lr 20.0000 | ms/batch 10.00 | loss  6.00 | ppl   403.43",
            "| epoch   1 |   400/  400 batches | lr 20.0000 | ms/batch 20.00 | loss   nan | ppl      nan",
            "-" * 20,
            "| end of epoch   1 | time: 10.50s | valid loss  5.50 | valid ppl   244.69",
            "| epoch   2 |   200/  400 batches | lr 5.0000 | ms/batch 10.00 | loss  5.00 | ppl   148.41",
            "| end of epoch   2 | time: 9.00s | valid loss  5.25 | valid ppl   190.57",
            "| End of training | test loss  5.13 | test ppl   168.89",
        ]) + "\n"))
        r = row("i", "i.wlm.tsv", fmt="pytorch_wlm", metric_map="valid_loss->eval_loss,lr->learning_rate")
        lines = self.stream(r)
        steps = [int(metric(l, "current_step")) for l in lines[1:-2]]
        self.assertEqual(steps, [200, 400, 600, 800])  # the end of epoch 1 is step 400: one report
        at = [seconds(l, convert.EPOCH0) for l in lines[1:-2]]
        # 200 x 10 ms = 2 s; the batch-400 line (6 s) and the end of epoch 1 (10.5 s, validation included)
        # are one report, written at 10.5 -> 10; epoch 2: 10.5 + 2 = 12.5 -> 12; ends at 10.5 + 9 = 19.5 -> 20
        # (Python rounds halves to even)
        self.assertEqual(at, [2, 10, 12, 20])
        self.assertEqual(metric(lines[2], "loss"), "nan")
        self.assertEqual(metric(lines[2], "eval_loss"), "5.5")
        self.assertEqual(metric(lines[3], "learning_rate"), "5.0")
        self.assertEqual(metric(lines[1], "total_steps"), "800")

    def test_word_language_model_extract_keeps_numbers_only(self):
        text = "\n".join([
            "Namespace(batch_size=20, epochs=2, lr=20, model='GRU', save='model_GRU.pt')",
            "| epoch   1 |   200/  400 batches | lr 20.0000 | ms/batch 10.00 | loss  6.00 | ppl   403.43",
            "-" * 20,
            "| end of epoch   1 | time: 10.50s | valid loss   nan | valid ppl      nan",
            "| End of training | test loss  5.13 | test ppl   168.89",
        ]) + "\n"
        self.assertEqual(
            extract.pytorch_wlm(text),
            "epochs\t2\nbatch\t1\t200\t400\t20.0000\t10.00\t6.00\nend\t1\t10.50\tnan\n",
        )
        self.write("j.wlm.tsv", "epochs\t2\n| epoch   1 | a console line, not extracted\n")
        with self.assertRaises(SystemExit):
            self.stream(row("j", "j.wlm.tsv", fmt="pytorch_wlm"))

    def test_extract_keeps_the_named_csv_columns_and_drops_rows_left_empty(self):
        text = ("epoch,lr-Adam,step,train_loss,train_mse,val_loss,val_mse\r\n"
                ",0.001,0,,,,\r\n"
                "0,,49,4.736484527587891,4.736484527587891,,\r\n"
                "0,,99,1.0858,1.0858,,\r\n"
                "0,,99,,,0.6964,0.6964\r\n"
                "0,,120,,0.5,,\r\n")
        got = extract.lightning_csv(text, {"step", "epoch", "lr-Adam", "train_loss", "val_loss"})
        self.assertEqual(got, "epoch,lr-Adam,step,train_loss,val_loss\n"
                              ",0.001,0,,\n"
                              "0,,49,4.736484527587891,\n"
                              "0,,99,1.0858,\n"
                              "0,,99,,0.6964\n")  # the step-120 row had a value only in train_mse
        with self.assertRaises(SystemExit):
            extract.lightning_csv(text, {"epoch", "train_loss"})  # no step
        with self.assertRaises(SystemExit):
            extract.lightning_csv(text, {"step", "val_acc"})  # not a column
        # And the converter reads the trimmed file: lr-Adam renamed, the train row and the evaluation at step
        # 99 one report.
        self.write("k.csv", got)
        lines = self.stream(row("k", "k.csv", fmt="csv", sps="2",
                                metric_map="lr-Adam->learning_rate,train_loss->loss,val_loss->eval_loss"))
        reports = [l for l in lines if "trainerStatus" in l and metric(l, "current_step") is not None]
        self.assertEqual([metric(l, "current_step") for l in reports], ["0", "49", "99", "99"])
        self.assertEqual(metric(reports[2], "loss"), "1.0858")
        self.assertEqual(metric(reports[2], "eval_loss"), "0.6964")
        self.assertEqual(metric(reports[2], "learning_rate"), "0.001")

    def test_split_rule(self):
        rows = [{"name": f"run-{i}", "outcome": o, "repo": "r"} for i, o in
                enumerate(["healthy"] * 10 + ["plateau"] * 5 + ["non-finite"])]
        split = convert.split_of(rows)
        self.assertEqual(split, convert.split_of(list(reversed(rows))), "order of SOURCES.tsv does not matter")
        held = lambda o: sum(1 for r in rows if r["outcome"] == o and split[r["name"]] == "heldout")
        self.assertEqual(held("healthy"), 4)
        self.assertEqual(held("plateau"), 2)
        self.assertEqual(held("non-finite"), 1)  # a single run of an outcome is held out
        first = min((r["name"] for r in rows if r["outcome"] == "healthy"),
                    key=lambda n: __import__("hashlib").sha256(n.encode()).hexdigest())
        self.assertEqual(split[first], "heldout")

    def test_a_later_batch_is_held_out_whole_and_moves_no_run_of_batch_1(self):
        first = [{"name": f"run-{i}", "outcome": o, "repo": "r", "batch": "1"} for i, o in
                 enumerate(["healthy"] * 10 + ["plateau"] * 5 + ["diverged"] * 3)]
        later = [{"name": f"late-{i}", "outcome": o, "repo": "r", "batch": "2"} for i, o in
                 enumerate(["healthy"] * 4 + ["plateau"] * 3 + ["diverged"])]
        alone = convert.split_of(first)
        split = convert.split_of(first + later)
        self.assertEqual({n: s for n, s in split.items() if n.startswith("run-")}, alone,
                         "batch 2 moves no batch-1 run between tune and heldout")
        self.assertEqual({split[r["name"]] for r in later}, {"heldout2"})
        self.assertEqual(convert.splits_of(split), ["tune", "heldout", "heldout2"])
        # A row without the column (an older SOURCES.tsv, a test row) is batch 1.
        self.assertEqual(convert.split_of([{"name": "x", "outcome": "healthy"}]), {"x": "heldout"})

    def test_the_batch_column_must_be_a_whole_number_from_1(self):
        header = "\t".join(row("a", "a.json")) + "\tbatch\n"
        for bad in ("", "0", "two", "-1"):
            values = "\t".join("x" if not v else v for v in row("a", "a.json").values())
            self.write("SOURCES.tsv", header + values + "\t" + bad + "\n")
            saved = convert.HERE
            convert.HERE = self.tmp.name
            try:
                with self.assertRaises(SystemExit) as e:
                    convert.read_sources()
            finally:
                convert.HERE = saved
            self.assertIn("SOURCES.tsv:2", str(e.exception))
            self.assertIn("batch", str(e.exception))

    def test_the_table_counts_every_part(self):
        self.write("a.json", json.dumps({"global_step": 2, "max_steps": 2, "log_history": [
            {"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5}]}))
        rows = [row("a", "a.json", sps="1"), row("b", "a.json", sps="1", outcome="plateau", batch="2")]
        table = convert.table(rows, convert.split_of(rows))
        self.assertIn("| outcome | tune | heldout | heldout2 | all |\n|---|---|---|---|---|", table)
        self.assertIn("| healthy | 0 | 1 | 0 | 1 |", table)
        self.assertIn("| plateau | 0 | 0 | 1 | 1 |", table)
        self.assertIn("| all | 0 | 1 | 1 | 2 |", table)
        self.assertIn("| 1 | `b` | plateau (loss) | heldout2 |", table)


if __name__ == "__main__":
    unittest.main()
