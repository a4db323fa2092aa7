"""Configs of a generated space that make one schedule are measured once.

A generated space has a knob for every choice of every rule, and a knob of a rule a config
does not take changes nothing: y = A @ x as a row reduction (the "rows" sketch) ignores all of
the tile sizes, so thousands of configs make one schedule.  The tuning loop asks the task for
each candidate's schedule key and never spends a trial on a schedule it measured; the XGBoost
tuner's plan, whose model scores every config of one schedule alike, skips them too.
"""
import numpy as np

from einloop import autotune, build, te
from einloop.autotune.measure.common import measure_option
from einloop.autotune.search.tuner import Tuner
from einloop.autotune.space.sketch.seeds import config_from
from einloop.autotune.task.auto import AutoTask

FAST = dict(number=1, repeat=1, timeout=20, n_parallel=2)
TARGET = "llvm -mcpu=haswell"           # an explicit machine: AVX2, the sketch's choices fixed


def _gemv(m=37, k=100):
    A = te.placeholder((m, k), name="A")
    x = te.placeholder((k,), name="x")
    r = te.reduce_axis((0, k), name="r")
    return [A, x, te.compute((m,), lambda i: te.sum(A[i, r] * x[r], axis=r), name="y")]


def _task():
    return AutoTask.of_tensors(_gemv(), TARGET, cores=2)


def _rows(task, **wishes):
    """The config of the rows sketch with *wishes* (other knobs at their defaults)."""
    return config_from(task.sketch, {"y.sketch": "rows", **wishes})


class ListTuner(Tuner):
    """Proposes a fixed list of configs in order (no seeds first)."""
    n_seeds = 0

    def __init__(self, task, configs):
        super().__init__(task)
        self.todo = list(configs)

    def next_batch(self, n):
        out, self.todo = self.todo[:n], self.todo[n:]
        return [self.space.get(c.index) for c in out]

    def has_next(self):
        return bool(self.todo)


def test_configs_differing_only_in_knobs_a_sketch_ignores_make_one_schedule():
    task = _task()
    plain = _rows(task)
    retiled = _rows(task, **{"y.tile.r": [-1, 4], "y.cache": 1})
    other = _rows(task, **{"y.interleave": 4})
    assert len({plain.index, retiled.index, other.index}) == 3
    assert task.schedule_key(plain) == task.schedule_key(retiled)
    assert task.schedule_key(plain) != task.schedule_key(other)
    tiled = config_from(task.sketch, {"y.sketch": "tile"})
    assert task.schedule_key(tiled) not in (task.schedule_key(plain), task.schedule_key(other))


def test_the_loop_measures_a_schedule_once_and_logs_each_measurement(tmp_path):
    task = _task()
    plain = _rows(task)
    copies = [_rows(task, **{"y.tile.r": [-1, f]}) for f in (2, 4, 8)]
    other = _rows(task, **{"y.interleave": 4})
    tuner = ListTuner(task, [plain, *copies, other, plain])
    log = tmp_path / "gemv.jsonl"
    tuner.tune(6, measure_option=measure_option(**FAST), quiet=True,
               callbacks=[autotune.log_to_file(str(log))])
    assert [c.index for c, _ in tuner.history[:2]] == [plain.index, other.index]
    assert tuner.measured == 2 and tuner.repeats == 4
    assert {c.index for c in copies} <= tuner.visited
    # its list exhausted, the 4 trials left measure the 2 schedules twice more (RECHECK)
    again_measured = sorted(c.index for c, _ in tuner.history[2:])
    assert tuner.rechecked == 4 and again_measured == sorted([plain.index, other.index] * 2)
    assert len(autotune.load_log(str(log))) == 6
    # a job resumed from the log knows both schedules: the copies cost it nothing either
    again = ListTuner(task, copies)
    again.tune(6, measure_option=measure_option(**FAST), quiet=True,
               callbacks=[autotune.log_to_file(str(log))])
    assert again.measured == again.rechecked == 0 and again.repeats == 3


def test_xgb_plans_hold_distinct_schedules_and_the_best_is_right():
    task = _task()
    tuner = autotune.XGBTuner(task, population=32, generations=1, seed=0)
    tuner.tune(24, measure_option=measure_option(**FAST), quiet=True)
    keys = [task.schedule_key(c) for c, _ in tuner.history]
    searched = keys[:tuner.measured]
    assert len(searched) == len(set(searched)) == tuner.measured
    assert 0 < tuner.confirmed == len(keys) - tuner.measured     # the fastest, measured again
    assert set(keys[tuner.measured:]) <= set(searched)
    s, args = task.instantiate(tuner.best_config)
    f = build(s, args)
    rng = np.random.default_rng(0)
    a, x = rng.random((37, 100), np.float32), rng.random(100, np.float32)
    y = np.empty(37, np.float32)
    f(a, x, y)
    np.testing.assert_allclose(y, a @ x, rtol=1e-4)
