"""Known answers for the decision bench's own parts: the new-result rule (corpus.py) and the re-implemented
peers (peer_rules.py). decisions.sh runs these before the bench; they need no trainwarden build.

    python3 -m unittest engine/bench/peers/test_decisions.py     # the stdlib parts; Ray/Optuna tests skip
    engine/bench/peers/decisions.sh ...                           # in the bench venv: all of them
"""

import importlib.util
import json
import math
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import corpus  # noqa: E402
import decisions  # noqa: E402
import judge  # noqa: E402
import peer_rules  # noqa: E402
from peer_rules import KerasEarlyStopping, LightningEarlyStopping, LossNotDecreasing  # noqa: E402

HAVE_RAY = importlib.util.find_spec("ray") is not None
HAVE_OPTUNA = importlib.util.find_spec("optuna") is not None


def write_stream(lines):
    f = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
    for line in lines:
        f.write(json.dumps(line) + "\n")
    f.close()
    return f.name


def report(t, step, **metrics):
    ms = [{"name": k, "value": repr(float(v))} for k, v in metrics.items()]
    ms.append({"name": "current_step", "value": str(step)})
    return {"time": f"2026-10-02T16:{t:02d}:00Z", "job": "ns/a", "trainerStatus": {"metrics": ms}}


class NewResults(unittest.TestCase):
    def runs(self, lines):
        path = write_stream(lines)
        try:
            return corpus.read_runs(path)
        finally:
            os.unlink(path)

    def test_cached_loss_on_an_eval_line_is_no_result(self):
        (run,) = self.runs(
            [
                report(0, 10, loss=1.0, grad_norm=2.0),
                report(1, 20, loss=1.0, grad_norm=2.0, eval_loss=0.9),  # an eval log: loss is the cache
                report(2, 30, loss=0.8, grad_norm=1.5, eval_loss=0.9),
            ]
        )
        self.assertEqual([i for i, _ in corpus.new_results(run, "loss")], [0, 2])
        self.assertEqual([i for i, _ in corpus.new_results(run, "eval_loss")], [1])

    def test_a_heartbeat_and_a_lone_flat_loss_are_no_result(self):
        (run,) = self.runs([report(0, 10, loss=0.0), report(1, 20, loss=0.0), report(2, 30, loss=0.0)])
        self.assertEqual([i for i, _ in corpus.new_results(run, "loss", "logged")], [0])
        self.assertEqual([i for i, _ in corpus.new_results(run, "loss", "changed")], [0])

    def test_same_loss_with_new_grad_norm_is_a_training_log(self):
        (run,) = self.runs([report(0, 10, loss=0.5, grad_norm=1.0), report(1, 20, loss=0.5, grad_norm=0.7)])
        self.assertEqual([i for i, _ in corpus.new_results(run, "loss")], [0, 1])
        self.assertEqual([i for i, _ in corpus.new_results(run, "loss", "changed")], [0])

    def test_the_step_is_no_metric_of_any_group(self):
        (run,) = self.runs([report(0, 10, loss=0.5, epoch=0.1), report(1, 20, loss=0.5, epoch=0.2)])
        self.assertEqual([i for i, _ in corpus.new_results(run, "loss")], [0])

    def test_repeated_nan_is_a_repeat_for_changed(self):
        (run,) = self.runs([report(0, 10, loss=math.nan), report(1, 20, loss=math.nan)])
        self.assertEqual([i for i, _ in corpus.new_results(run, "loss", "changed")], [0])

    def test_a_bad_line_is_named(self):
        path = write_stream([report(0, 10, loss=1.0)])
        with open(path, "a") as f:
            f.write('{"time": "x", "job": "ns/a", "trainerStatus": {"metrics": [{"name": "loss", "value": "abc"}]}}\n')
        try:
            with self.assertRaisesRegex(corpus.CorpusError, r":2: trainerStatus.metrics\[0\].value: 'abc'"):
                corpus.read_runs(path)
        finally:
            os.unlink(path)


class Keras(unittest.TestCase):
    def stop(self, values, **kw):
        cb = KerasEarlyStopping("loss", **kw)
        for epoch, v in enumerate(values):
            if cb.on_epoch_end(epoch, {"loss": v}):
                return epoch
        return None

    def test_patience_zero_stops_at_the_first_non_improvement_but_never_at_epoch_zero(self):
        self.assertEqual(self.stop([1.0, 0.9, 0.95]), 2)
        self.assertIsNone(self.stop([1.0]))

    def test_patience_counts_epochs_without_improvement(self):
        # best 0.9 at epoch 1; epochs 2, 3, 4 do not improve: wait reaches 3 at epoch 4.
        self.assertEqual(self.stop([1.0, 0.9, 0.95, 0.92, 0.91, 0.5], patience=3), 4)

    def test_min_delta_is_absolute_and_strict(self):
        # 0.9 -> 0.89 is an improvement of 0.01, not more than min_delta 0.01: no improvement.
        self.assertEqual(self.stop([0.9, 0.89], min_delta=0.01), 1)
        self.assertIsNone(self.stop([0.9, 0.889], min_delta=0.01))

    def test_the_comparison_is_in_float32(self):
        # 6.43 + 0.1 < 6.53 in float64, not in float32 (ops.less converts both to floatx tensors).
        self.assertLess(6.43 + 0.1, 6.53)
        self.assertEqual(self.stop([6.53, 6.43], min_delta=0.1), 1)

    def test_a_first_nan_poisons_best(self):
        self.assertEqual(self.stop([math.nan, 0.5, 0.4], patience=1), 1)


class Lightning(unittest.TestCase):
    def stop(self, values, **kw):
        cb = LightningEarlyStopping(**kw)
        for i, v in enumerate(values):
            if cb.check(v):
                return i
        return None

    def test_default_patience_three(self):
        self.assertEqual(self.stop([1.0, 0.9, 0.95, 0.92, 0.91]), 4)

    def test_a_non_finite_value_stops_at_once(self):
        self.assertEqual(self.stop([1.0, math.inf]), 1)
        self.assertEqual(self.stop([1.0, math.nan]), 1)


class SageMaker(unittest.TestCase):
    def fire(self, saved, **kw):
        rule = LossNotDecreasing(**kw)
        for step, v in saved:
            if rule.save(step, v):
                return step
        return None

    def test_the_rules_own_test_default(self):
        # tests/analysis/rules/test_loss_not_decreasing.py (awslabs/sagemaker-debugger at bb14a442^),
        # test_default: losses saved every 4 steps, num_steps 10, every step saved -> fires at step 12.
        saved = list(zip(range(0, 20, 4), [0.3, 0.33, 0.31, 0.30, 0.28]))
        self.assertEqual(self.fire(saved, num_steps=10, save_interval=1), 12)
        # invoke_rule(start_step=13): from step 13 on, 16 vs 4 (0.28 < 0.33) passes.
        self.assertIsNone(self.fire(saved[4:], num_steps=10, save_interval=1))

    def test_the_documented_schedule(self):
        # "loss saved every 3 steps, num_steps 10: at step 21 the loss of step 21 is compared with that of
        # step 9; the next check is at 33". The state of a rule whose last check was at step 11:
        rule = LossNotDecreasing(num_steps=10, save_interval=1)
        rule.saved, rule.last_check = [(9, 0.5)], 11
        self.assertFalse(rule.save(12, 0.4))  # not a check: 12 - 11 < 10
        self.assertTrue(rule.save(21, 0.5))  # 21 against 9: 0.5 is no decrease
        rule = LossNotDecreasing(num_steps=10, save_interval=1)
        rule.saved, rule.last_check = [(9, 0.5)], 11
        checks = []
        for step in range(12, 40, 3):
            before = rule.last_check
            rule.save(step, 1.0 - step / 100)
            if rule.last_check != before:
                checks.append(step)
        self.assertEqual(checks[:2], [21, 33])

    def test_saves_every_save_interval_of_the_logged_steps(self):
        rule = LossNotDecreasing(num_steps=10, save_interval=500)
        for step in range(25, 1600, 25):
            rule.save(step, 1.0)
        self.assertEqual([s for s, _ in rule.saved], [25, 500, 1000, 1500])


@unittest.skipUnless(HAVE_RAY, "ray is installed in the bench venv (decisions.sh)")
class Ray(unittest.TestCase):
    def test_real_stopper_window_std(self):
        jobs = {"a": [(None, v, {"loss": v}) for v in [1.0, 0.5, 0.5, 0.5, 0.5, 0.5]]}
        # grace 4 and a full window of 4: the window at the 4th result is 1.0, .5, .5, .5 (std 0.22);
        # at the 5th, .5 x 4 (std 0) < 0.01.
        self.assertEqual(peer_rules.ray_plateau(jobs, "loss", 0.01, 4, 4), {"a": 4})


@unittest.skipUnless(HAVE_OPTUNA, "optuna is installed in the bench venv (decisions.sh)")
class Optuna(unittest.TestCase):
    def test_real_pruner_patience(self):
        jobs = {"a": [(None, v, {"loss": v}) for v in [1.0, 0.5, 0.6, 0.7, 0.4]]}
        # patience 1: prune when the last 2 are all worse than the best before them (0.5): at index 3.
        self.assertEqual(peer_rules.optuna_patient(jobs, "loss", 1, 0.0), {"a": 3})
        self.assertEqual(peer_rules.optuna_patient(jobs, "loss", 3, 0.0), {})


def figures(stops, false_stops, saved, healthy=0):
    return judge.Figures(10, stops, false_stops, healthy, stops - false_stops, 5, saved, 0.0, None, 0)


class Objective(unittest.TestCase):
    def test_most_saved_within_the_budget_then_fewer_false_then_earlier(self):
        candidates = [
            (0, "default", figures(9, 8, 500.0)),  # over budget
            (1, "a", figures(4, 2, 100.0)),
            (2, "b", figures(5, 1, 100.0)),  # same saving, fewer false stops
            (3, "c", figures(3, 1, 100.0)),  # the same again, later in the grid
        ]
        self.assertEqual(decisions.choose(candidates, budget=2)[1], "b")

    def test_none_within_the_budget_fewest_false_stops(self):
        candidates = [(0, "default", figures(9, 8, 500.0)), (1, "a", figures(6, 5, 50.0)), (2, "b", figures(7, 5, 80.0))]
        self.assertEqual(decisions.choose(candidates, budget=2)[1], "b")


class Stops(unittest.TestCase):
    def test_one_object_per_stop_at_the_time_of_the_stopping_report(self):
        r = [corpus.Report("2026-10-02T16:00:00Z", 1, {"loss": 1.0}, 10), corpus.Report("2026-10-02T16:05:00Z", 2, {"loss": 1.0}, 20)]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.jsonl")
            decisions.write_stops(path, "keras-earlystopping-default", "loss", {"ns/a": 1}, {"ns/a": r})
            with open(path) as f:
                lines = [json.loads(line) for line in f]
        self.assertEqual(
            lines,
            [{"job": "ns/a", "time": "2026-10-02T16:05:00Z", "rule": "keras-earlystopping-default", "metric": "loss"}],
        )

    def test_a_rule_that_stopped_nothing_has_zero_figures_and_the_parts_bad_runs(self):
        report = {
            "candidates": [{"policies": []}],
            "runs": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
            "incomplete": ["c"],
            "outcomes": {"healthy": 1, "plateau": 1},
            "smoothing": 5,
            "tolerance": 0.01,
            "minImprovement": 0.001,
        }
        f = judge.Judged(report, "x.json").rule("never-stops")
        self.assertEqual((f.runs, f.stops, f.bad_runs, f.gpu_hours_saved), (2, 0, 1, 0.0))


if __name__ == "__main__":
    unittest.main()
