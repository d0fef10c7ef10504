"""The peers of the decision bench (decisions.py): each takes a job's new results of the watched metric, one
at a time, and says at which one it would stop the run.

Run for real (the pinned packages in requirements.txt):
  * Ray Tune 2.60.0 `ray.tune.stopper.TrialPlateauStopper`: one stopper object per setting, called
    `stopper(trial_id, result)` per result as Tune's controller calls it; `result` is the report's metrics by
    name. Tune stops calling the stopper for a trial it stopped.
  * Optuna 5.0.0 `optuna.pruners.PatientPruner(None, patience, min_delta)`: one in-memory study per setting
    (`direction="minimize"`), one trial per job from `study.ask()`; per result `trial.report(value, step)`
    then `trial.should_prune()`, as an objective function does; a pruned trial is told PRUNED, the others
    COMPLETE with their last value. `step` is the result's index: PatientPruner's patience counts reports,
    not step distance, so any increasing steps give the same decisions.

Re-implemented, line for line from the sources named (the packages cannot be used here as they are):
  * Keras 3.15.1 `keras.callbacks.EarlyStopping` (`keras/src/callbacks/early_stopping.py` and
    `monitor_callback.py` of the keras==3.15.1 wheel, tag v3.15.1 @ 250b4218). `import keras` loads a
    backend, and even the NumPy backend imports jax (`keras/src/backend/numpy/nn.py`), so the real callback
    needs jax, TensorFlow or PyTorch: a heavy backend for a 40-line rule. check-keras.sh runs the real
    callback (jax backend) on the same feed and compares every decision.
  * PyTorch Lightning 2.6.5 `lightning.pytorch.callbacks.EarlyStopping` (`_evaluate_stopping_criteria`,
    `src/lightning/pytorch/callbacks/early_stopping.py` @ be98784a): it needs torch. Not compared with
    the real callback.
  * SageMaker Debugger `LossNotDecreasing`: the implementation is not public (awslabs/sagemaker-debugger
    removed its first-party rules in "Remove 1P rules (#406)", bb14a442, for a closed `smdebug_rules`
    package run inside SageMaker's rule container). Re-implemented from its documentation (the rule's
    section of `docs/rules/FirstPartyRules.md` at bb14a442^, the AWS guide `debugger-built-in-rules.md`
    @ 1c4d5ff7) and the defaults of `smdebug_rulesconfig` 1.0.2 (`ruleConfigs.json`: the `losses`
    collection saved every 500 steps); checked against the known answer of the rule's own removed test
    (`tests/analysis/rules/test_loss_not_decreasing.py` at bb14a442^, `test_default`: losses 0.3, 0.33,
    0.31, 0.30, 0.28 saved at steps 0, 4, 8, 12, 16 -> fires at step 12; see test_decisions.py).

Every peer watches one metric in `min` mode (a loss).
"""

from __future__ import annotations

import math
import struct
import warnings
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Setting:
    """One peer (a key of PEERS) at one parameter setting."""

    peer: str
    params: tuple[tuple[str, float], ...]

    @property
    def kwargs(self) -> dict:
        return dict(self.params)

    def describe(self) -> str:
        return f"{PEERS[self.peer].call}({', '.join(f'{k}={_fmt(v)}' for k, v in self.params)})"

    def slug(self) -> str:
        return "-".join(f"{k.replace('_', '')}{_fmt(v)}" for k, v in self.params)


def _fmt(v) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


# A job's input to a peer: the (step, value, metrics) of each new result, in order.
Results = list[tuple[float | None, float, dict[str, float]]]


# ---------------------------------------------------------------------------------------------- Ray Tune


def ray_plateau(jobs: dict[str, Results], metric: str, std: float, num_results: int, grace_period: int) -> dict[str, int]:
    from ray.tune.stopper import TrialPlateauStopper

    stopper = TrialPlateauStopper(metric=metric, std=std, num_results=int(num_results), grace_period=int(grace_period))
    stops = {}
    for job, results in jobs.items():
        for i, (_, _, result) in enumerate(results):
            if stopper(job, result):
                stops[job] = i
                break
    return stops


# ------------------------------------------------------------------------------------------------ Optuna


def optuna_patient(jobs: dict[str, Results], metric: str, patience: int, min_delta: float) -> dict[str, int]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PatientPruner is an experimental class: it warns when made
        pruner = optuna.pruners.PatientPruner(None, patience=int(patience), min_delta=min_delta)
    study = optuna.create_study(direction="minimize", pruner=pruner)
    stops = {}
    for job, results in jobs.items():
        trial = study.ask()
        last = None
        for i, (_, value, _) in enumerate(results):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # np.nanmin of an all-NaN slice warns, then says no
                trial.report(value, i)
                prune = trial.should_prune()
            last = value
            if prune:
                stops[job] = i
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                break
        else:
            if last is not None and math.isfinite(last):
                study.tell(trial, last)
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return stops


# ------------------------------------------------------------------------------------------ Keras 3.15.1


def float32(x: float) -> float:
    """`x` rounded to the nearest float32 (to infinity past its range), as a backend tensor holds it."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)



class KerasEarlyStopping:
    """keras.callbacks.EarlyStopping of Keras 3.15.1 with `mode="min"` (what `mode="auto"` gives for a
    monitor named `loss` or `val_loss`), `restore_best_weights=False` (weights are not ours), `verbose=0`.
    `on_epoch_end` returns what the callback sets `model.stop_training` to.

    `_is_improvement` computes `monitor_value - min_delta` on Python floats, then `ops.less` converts both
    operands to backend tensors of the default float type, float32, and compares those: 6.43 + 0.1 is no
    improvement on 6.53 (equal in float32) though it is in float64. Modelled so (`float32`)."""

    def __init__(self, monitor: str, min_delta: float = 0, patience: int = 0, baseline=None, start_from_epoch: int = 0):
        # MonitorCallback.__init__: min_delta = abs(min_delta); _set_monitor_op for "min": ops.less and
        # min_delta *= -1.
        self.monitor = monitor
        self.min_delta = -abs(min_delta)
        self.patience = patience
        self.baseline = baseline
        self.start_from_epoch = start_from_epoch
        self.on_train_begin()

    def on_train_begin(self):
        self.wait = 0
        self.stopped_epoch = 0
        self.best = None  # MonitorCallback sets best = baseline, then on_train_begin resets it to None

    def _is_improvement(self, monitor_value, reference_value) -> bool:
        if reference_value is None:
            return True
        # ops.less(a, b): both converted to float32 tensors; False for NaN.
        return float32(monitor_value - self.min_delta) < float32(reference_value)

    def on_epoch_end(self, epoch: int, logs: dict) -> bool:
        current = logs.get(self.monitor)
        if current is None or epoch < self.start_from_epoch:
            return False
        self.wait += 1
        if self._is_improvement(current, self.best):
            self.best = current
            if self.baseline is None or self._is_improvement(current, self.baseline):
                self.wait = 0
            return False
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            return True
        return False


def keras_early_stopping(jobs: dict[str, Results], metric: str, patience: int, min_delta: float) -> dict[str, int]:
    stops = {}
    for job, results in jobs.items():
        callback = KerasEarlyStopping(metric, min_delta=min_delta, patience=int(patience))
        for epoch, (_, _, logs) in enumerate(results):
            if callback.on_epoch_end(epoch, logs):
                stops[job] = epoch
                break
    return stops


# --------------------------------------------------------------------------------------- Lightning 2.6.5


class LightningEarlyStopping:
    """lightning.pytorch.callbacks.EarlyStopping of 2.6.5, `mode="min"`, without `stopping_threshold` and
    `divergence_threshold` (both default None). `check` is `_evaluate_stopping_criteria`'s should_stop.

    The logged metric is a float32 tensor (a loss a LightningModule logs), `best_score` starts as
    `torch.tensor(torch.inf)` (float32) and `current - min_delta` is float32 arithmetic: modelled with
    `float32` (a value past float32's range is infinite, hence not finite)."""

    def __init__(self, min_delta: float = 0.0, patience: int = 3, check_finite: bool = True):
        self.min_delta = -min_delta  # `min_delta *= 1 if monitor_op == torch.gt else -1` (no abs)
        self.patience = patience
        self.check_finite = check_finite
        self.wait_count = 0
        self.best_score = math.inf

    def check(self, value: float) -> bool:
        current = float32(value)
        if self.check_finite and not math.isfinite(current):
            return True
        if float32(current - float32(self.min_delta)) < self.best_score:  # torch.lt; False for NaN
            self.best_score = current
            self.wait_count = 0
            return False
        self.wait_count += 1
        return self.wait_count >= self.patience


def lightning_early_stopping(jobs: dict[str, Results], metric: str, patience: int, min_delta: float) -> dict[str, int]:
    stops = {}
    for job, results in jobs.items():
        callback = LightningEarlyStopping(min_delta=min_delta, patience=int(patience))
        for i, (_, value, _) in enumerate(results):
            if callback.check(value):
                stops[job] = i
                break
    return stops


# ------------------------------------------------------------------------ SageMaker Debugger LossNotDecreasing


class LossNotDecreasing:
    """SageMaker Debugger's LossNotDecreasing over the steps a Debugger hook saves.

    Saving: a hook saves the loss at steps that are multiples of `save_interval` (smdebug's SaveConfig). A
    stream holds the trainer's logged loss at its logging steps, not the per-step loss, so the saved steps
    are the first logged step of the run and then the first logged step at or past each next multiple of
    `save_interval` (with a logging interval that divides `save_interval`, exactly the multiples).

    Checking, as documented: "the rule evaluation happens every num_steps, and the rule checks the loss for
    this step with the loss at the newest step which is at least num_steps behind the current step". A
    saved step s is a check when no check happened yet or s is at least `num_steps` past the last check,
    and some saved step p <= s - num_steps exists; p is the newest such.

    Firing: "checks if the loss is going down" (default `diff_percent` 0), and with `diff_percent` "the
    minimum difference in percentage that loss should be lower by": the check passes when loss(s) < loss(p)
    and loss(p) - loss(s) >= diff_percent % of |loss(p)|, and fires otherwise (an equal loss fires, as the
    rule's own test_default asserts; a NaN loss fires, being no decrease). The removed test `test_min_diff`
    expects diff_percent=20 not to fire on an equal loss at step 12, which contradicts the documentation;
    the later AWS guide adds `increase_threshold_percent` (default 5) without saying how it combines. Only
    the unambiguous `diff_percent = 0` is used here.
    """

    def __init__(self, num_steps: int = 10, diff_percent: float = 0.0, save_interval: int = 500):
        self.num_steps = num_steps
        self.diff_percent = diff_percent
        self.save_interval = save_interval
        self.saved: list[tuple[float, float]] = []
        self.last_check: float | None = None

    def save(self, step: float, value: float) -> bool:
        """Offers one logged (step, loss); returns whether the rule fired at it."""
        if self.saved and step // self.save_interval <= self.saved[-1][0] // self.save_interval:
            return False
        self.saved.append((step, value))
        if self.last_check is not None and step - self.last_check < self.num_steps:
            return False
        behind = [v for s, v in self.saved if s <= step - self.num_steps]
        if not behind:
            return False
        self.last_check = step
        before = behind[-1]
        decreased = value < before and (before - value) >= abs(before) * self.diff_percent / 100
        return not decreased


def sagemaker_loss_not_decreasing(
    jobs: dict[str, Results], metric: str, num_steps: int, save_interval: int, diff_percent: float = 0.0
) -> dict[str, int]:
    stops = {}
    for job, results in jobs.items():
        rule = LossNotDecreasing(int(num_steps), diff_percent, int(save_interval))
        for i, (step, value, _) in enumerate(results):
            if rule.save(i if step is None else step, value):
                stops[job] = i
                break
    return stops


# ------------------------------------------------------------------------------------------- the registry


@dataclass(frozen=True)
class Peer:
    key: str  # the rule-name prefix
    call: str  # how a user writes it
    run: Callable
    real: bool  # the library's own object, or a re-implementation
    default: tuple[tuple[str, float], ...]
    default_why: str
    grid: tuple[tuple[tuple[str, float], ...], ...]


def _grid(**axes) -> tuple[tuple[tuple[str, float], ...], ...]:
    points = [()]
    for name, values in axes.items():
        points = [p + ((name, v),) for p in points for v in values]
    return tuple(points)


# Grids: each parameter from the default outward, to values past where the peer stops stopping on the corpus
# (runs log up to ~3,800 values). Absolute deltas, as every peer's is.
DELTAS = (0.0, 0.001, 0.01, 0.05, 0.1)

PEERS: dict[str, Peer] = {
    p.key: p
    for p in [
        Peer(
            "ray-plateau",
            "TrialPlateauStopper",
            ray_plateau,
            True,
            (("std", 0.01), ("num_results", 4), ("grace_period", 4)),
            "the constructor's defaults",
            # grace_period below num_results changes nothing (the window must be full): the pairs that differ.
            tuple(
                (("std", std), ("num_results", n), ("grace_period", g))
                for std in (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)
                for n, g in ((4, 4), (4, 50), (10, 10), (10, 50), (20, 20), (20, 50), (50, 50), (100, 100))
            ),
        ),
        Peer(
            "optuna-patient",
            "PatientPruner",
            optuna_patient,
            True,
            (("patience", 1), ("min_delta", 0.0)),
            "patience has no default: the docstring example's patience=1; min_delta's default 0.0",
            _grid(patience=(1, 2, 5, 10, 20, 50, 100, 200, 500), min_delta=DELTAS),
        ),
        Peer(
            "keras-earlystopping",
            "EarlyStopping",
            keras_early_stopping,
            False,
            (("patience", 0), ("min_delta", 0.0)),
            "the constructor's defaults",
            _grid(patience=(0, 1, 2, 5, 10, 20, 50, 100, 200, 500), min_delta=DELTAS),
        ),
        Peer(
            "lightning-earlystopping",
            "EarlyStopping",
            lightning_early_stopping,
            False,
            (("patience", 3), ("min_delta", 0.0)),
            "the constructor's defaults (check_finite=True)",
            _grid(patience=(1, 2, 3, 5, 10, 20, 50, 100, 200, 500), min_delta=DELTAS),
        ),
        Peer(
            "sagemaker-lossnotdecreasing",
            "LossNotDecreasing",
            sagemaker_loss_not_decreasing,
            False,
            (("num_steps", 10), ("save_interval", 500)),
            "the rule's defaults (num_steps=10, diff_percent=0) and the rulesconfig's losses save_interval=500",
            _grid(num_steps=(10, 1000, 2000, 4000, 8000, 16000), save_interval=(100, 250, 500)),
        ),
    ]
}


def run_setting(setting: Setting, jobs: dict[str, Results], metric: str) -> dict[str, int]:
    """The index (into each job's results) of the result at which `setting` stops the job, per stopped job."""
    return PEERS[setting.peer].run(jobs, metric, **setting.kwargs)
