"""The fastest few schedules of a search are measured once more, and every schedule is judged by
its typical measurement (the slower of two), in the tuner, in the log's best and at deploy.

The fastest of many noisy measurements is biased low: among near-equal candidates, the one timed
at a quiet moment of a shared machine wins.  A lucky measurement must not stand for a schedule
that measured slower again."""
from einloop import autotune
from einloop.autotune.log.database import Database, typical_best
from einloop.autotune.measure.common import measure_option
from einloop.autotune.measure.local import MeasureResult
from einloop.autotune.measure.status import MeasureErrorNo
from einloop.autotune.search import tuner as tuner_mod
from einloop.autotune.search.tuner import (CONFIRM_MIN_TRIALS, CONFIRM_ROUNDS, CONFIRM_TOP,
                                          RECHECK_MEASUREMENTS,
                                          RandomTuner)

import tiny_templates  # noqa: F401  (registers tiny_matmul)

FAST = dict(number=1, repeat=1, timeout=20, n_parallel=2)


def ok(cost):
    return MeasureResult((cost,), MeasureErrorNo.NO_ERROR, "", 0.1, 0.0)


def test_the_log_judges_a_schedule_by_its_typical_measurement(tmp_path):
    task = autotune.create_task("tiny_matmul", (16, 32, 8))
    db = Database(tmp_path / "log.jsonl")
    db.append(task, [1, 2, 3], [ok(1.0e-3), ok(1.2e-3), ok(1.5e-3)])
    assert db.best()[task.workload_key].index == 1
    db.append(task, [1], [ok(1.4e-3)])              # config 1 measured again: slower
    best = db.best()[task.workload_key]
    assert best.index == 2 and best.mean_cost == 1.2e-3
    db.append(task, [1, 1], [ok(1.0e-3), ok(1.1e-3)])
    best = db.best()[task.workload_key]             # 1.0, 1.0, 1.1, 1.4: typical 1.1
    assert best.index == 1 and best.mean_cost == 1.1e-3
    assert typical_best(db.query(workload=task.workload_key)) is best
    reread = Database(tmp_path / "log.jsonl").best()[task.workload_key]
    assert (reread.index, reread.mean_cost) == (1, 1.1e-3)
    with autotune.apply_history_best(str(tmp_path / "log.jsonl")) as ctx:   # deploy agrees
        assert ctx.best[task.workload_key].index == 1


class Scripted(RandomTuner):
    """Measures nothing: each candidate's cost comes from *costs* (config index -> list of
    costs, one per measurement, in order), so the test decides which measurement is lucky."""

    def __init__(self, task, costs):
        super().__init__(task, seed=0)
        self.script = {k: list(v) for k, v in costs.items()}
        self.order = list(costs)

    def next_batch(self, n):
        todo = [i for i in self.order if i not in self.visited]
        return [self.space.get(i) for i in todo[:n]]

    def has_next(self):
        return any(i not in self.visited for i in self.order)


class ScriptedMeasurer:
    def __init__(self, tuner):
        self.tuner, self.n_runners = tuner, 1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def measure_batch(self, candidates, lookahead=()):
        return [ok(self.tuner.script[c.index].pop(0)) for c in candidates]

    def progress(self):
        return {}


def test_the_tuner_measures_its_fastest_schedules_again_and_keeps_the_typical(monkeypatch,
                                                                           tmp_path):
    task = autotune.create_task("tiny_matmul", (16, 32, 8))
    n = CONFIRM_MIN_TRIALS
    configs = list(range(n))
    costs = {i: [2e-3 + i * 1e-5] for i in configs}
    costs[configs[0]] = [1.0e-3, 1.9e-3]           # lucky first, slower when measured again
    costs[configs[1]] = [1.5e-3, 1.4e-3]           # measured again: faster
    costs[configs[2]] = [1.6e-3, 1.6e-3]
    tuner = Scripted(task, costs)
    monkeypatch.setattr(tuner_mod, "open_measurer", lambda task, option: ScriptedMeasurer(tuner))
    log = tmp_path / "log.jsonl"
    tuner.tune(n, measure_option=measure_option(**FAST), quiet=True,
               callbacks=[autotune.log_to_file(str(log))])
    assert tuner.measured == n and tuner.confirmed == CONFIRM_TOP
    assert [c.index for c, _ in tuner.history[n:]] == configs[:CONFIRM_TOP]
    assert tuner.best_config.index == configs[1] and tuner.best_cost == 1.5e-3
    assert len(autotune.load_log(str(log))) == n + CONFIRM_TOP
    best = autotune.pick_best(autotune.load_log(str(log)))[task.workload_key]
    assert (best.index, best.mean_cost) == (configs[1], 1.5e-3)   # the log agrees
    # resumed from the log, a tuner knows every measurement: nothing to measure, same best
    again = Scripted(task, {i: [] for i in configs})
    again.tune(n, measure_option=measure_option(**FAST), quiet=True,
               callbacks=[autotune.log_to_file(str(log))])
    assert again.measured == 0 and again.confirmed == 0
    assert again.best_config.index == configs[1] and again.best_cost == 1.5e-3


def test_confirming_goes_on_while_the_fastest_was_measured_once(monkeypatch):
    """A machine that slows down during the search: the three fastest measure slower again, and
    the next schedule, measured once early, would stand as the best on that time alone."""
    task = autotune.create_task("tiny_matmul", (16, 32, 8))
    n = CONFIRM_MIN_TRIALS
    costs = {i: [2e-3 + i * 1e-5] for i in range(n)}
    for i in (0, 1, 2, 4, 5):
        costs[i] = [1.0e-3 + i * 1e-5, 3e-3]
    costs[3] = [1.3e-3, 1.35e-3]                    # confirmed in the second round
    tuner = Scripted(task, costs)
    monkeypatch.setattr(tuner_mod, "open_measurer", lambda task, option: ScriptedMeasurer(tuner))
    tuner.tune(n, measure_option=measure_option(**FAST), quiet=True)
    assert tuner.confirmed == 2 * CONFIRM_TOP
    assert [c.index for c, _ in tuner.history[n:]] == [0, 1, 2, 4, 5, 3]
    assert tuner.best_config.index == 3 and tuner.best_cost == 1.35e-3
    # always slower again: it stops after CONFIRM_ROUNDS rounds
    tuner = Scripted(task, {i: [1e-3 + i * 1e-5, 3e-3] for i in range(n)})
    monkeypatch.setattr(tuner_mod, "open_measurer", lambda task, option: ScriptedMeasurer(tuner))
    tuner.tune(n, measure_option=measure_option(**FAST), quiet=True)
    assert tuner.confirmed == CONFIRM_ROUNDS * CONFIRM_TOP


def test_short_searches_and_confirm_false_measure_nothing_more(monkeypatch):
    task = autotune.create_task("tiny_matmul", (16, 32, 8))
    for n, confirm in ((CONFIRM_MIN_TRIALS - 1, True), (CONFIRM_MIN_TRIALS, False)):
        tuner = Scripted(task, {i: [1e-3 + i * 1e-5] for i in range(n)})
        monkeypatch.setattr(tuner_mod, "open_measurer",
                            lambda task, option, t=tuner: ScriptedMeasurer(t))
        tuner.tune(n, measure_option=measure_option(**FAST), quiet=True, confirm=confirm)
        assert tuner.measured == n and tuner.confirmed == 0 and len(tuner.history) == n


def test_an_exhausted_space_spends_the_trials_left_on_measuring_its_schedules_again(
        monkeypatch, tmp_path):
    """Six schedules and n_trial=20: the fastest schedule was disturbed once (4x slower); two
    more measurements of every schedule, fastest first, make it the best by its median.  The
    re-measurements count against n_trial, and a resumed job measures nothing more."""
    task = autotune.create_task("tiny_matmul", (16, 32, 8))
    costs = {i: [2e-3 + i * 1e-4] * RECHECK_MEASUREMENTS for i in range(6)}
    costs[5] = [4e-3, 1e-3, 1e-3]                   # disturbed when the search measured it
    tuner = Scripted(task, costs)
    monkeypatch.setattr(tuner_mod, "open_measurer", lambda task, option: ScriptedMeasurer(tuner))
    log = tmp_path / "log.jsonl"
    tuner.tune(20, measure_option=measure_option(**FAST), quiet=True,
               callbacks=[autotune.log_to_file(str(log))])
    assert tuner.measured == 6 and tuner.rechecked == 6 * (RECHECK_MEASUREMENTS - 1)
    # each round goes fastest first: config 5 (4 ms, then 4 ms as the slower of two) comes last
    assert [c.index for c, _ in tuner.history[6:]] == [0, 1, 2, 3, 4, 5] * 2
    assert tuner.best_config.index == 5 and tuner.best_cost == 1e-3
    best = autotune.pick_best(autotune.load_log(str(log)))[task.workload_key]
    assert (best.index, best.mean_cost) == (5, 1e-3)
    again = Scripted(task, {i: [] for i in range(6)})
    again.tune(20, measure_option=measure_option(**FAST), quiet=True,
               callbacks=[autotune.log_to_file(str(log))])
    assert again.measured == again.rechecked == 0 and again.best_config.index == 5
    # a budget that ends mid-round: n_trial bounds the measurements
    tight = Scripted(task, costs)
    monkeypatch.setattr(tuner_mod, "open_measurer", lambda task, option: ScriptedMeasurer(tight))
    tight.tune(9, measure_option=measure_option(**FAST), quiet=True)
    assert tight.rechecked == 3 and len(tight.history) == 9
    assert [c.index for c, _ in tight.history[6:]] == [0, 1, 2]
